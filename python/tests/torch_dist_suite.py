#!/usr/bin/env python3
"""torch's own distributed test suite against a backend, the way torch's
test/distributed/test_distributed_spawn.py drives it (that file does not ship in the
Debian package nor in the wheel): the DistributedTest._DistTestBase tests of
torch/testing/_internal/distributed/distributed_test.py, one MultiProcessTestCase per
test (world-size processes spawned, init_process_group over a FileStore), env BACKEND,
WORLD_SIZE, INIT_METHOD=env://, TEMP_DIR.

    torch_dist_suite.py --backend gyre --world 2 [--select cpu|gloo_only|all] [--tests FILE]
                        [-k SUBSTRING ...] [--json OUT] [--expect FILE]

What the driver changes in torch's test code (documented in docs/pytorch.md, section
"torch's distributed tests"), applied before distributed_test is imported so that its
decorators see it, in the parent and in every spawned rank (they re-import this file):
- "gyre" joins DistTestCases.backend_feature["ddp"], ["subgroup"] and ["plugin"]: the
  sets by which torch's tests key the features a backend has (gloo is in all three; plugin
  is how torch names out-of-tree backends). Not "gpu"/"cuda": no GPU tests here.
- torch 1.13 only: DDP's ReplicatedTensor mode, which TestDistBackend._run switches on,
  is left off (under Python 3.11 it fails every DDP test for every backend, gloo
  included).
- "gyre" is registered by importing gyre_torch (torch 1.13 needs the import; on torch 2
  the entry point would do it for an installed package, this driver runs from a build
  folder).

--expect FILE: the exit status is 1 when any test named in FILE (one name a line, '#'
comments) does not pass, and when FILE names a test the selection lacks; other results
are reported only.
"""
import argparse
import atexit
import json
import os
import re
import shutil
import sys
import tempfile
import time
import unittest

if __name__ == "__main__":
    _p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _p.add_argument("--backend", required=True, help="gyre, gloo, ...")
    _p.add_argument("--world", type=int, required=True, help="WORLD_SIZE")
    _p.add_argument("--select", default="cpu", choices=["cpu", "gloo_only", "all"],
                    help="cpu: the tests torch can run without GPUs at this world size "
                         "(read from their decorators); gloo_only: those of them torch "
                         "runs on gloo only; all: every test of DistributedTest")
    _p.add_argument("--tests", default="", help="file of test names (replaces --select)")
    _p.add_argument("-k", action="append", default=[], help="only names containing this")
    _p.add_argument("--json", default="", help="write {test: [status, reason]} here")
    _p.add_argument("--expect", default="", help="file of tests that must pass")
    _p.add_argument("--list", action="store_true", help="print the selection and exit")
    ARGS = _p.parse_args()
    # Read by distributed_test at import, and inherited by the spawned ranks.
    os.environ["BACKEND"] = ARGS.backend
    os.environ["WORLD_SIZE"] = str(ARGS.world)
    os.environ["INIT_METHOD"] = "env://"
    if "TEMP_DIR" not in os.environ:
        # torch's tests put their init files here; removed at exit (the spawned ranks
        # inherit the variable and make none of their own).
        os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="torch_dist_suite.")
        atexit.register(shutil.rmtree, os.environ["TEMP_DIR"], True)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

BACKEND = os.environ["BACKEND"]
MAJOR = int(torch.__version__.split(".")[0])

if BACKEND == "gyre":
    import gyre_torch  # noqa: F401  (registers backend "gyre")

    for feature in ("ddp", "subgroup", "plugin"):
        DistTestCases.backend_feature[feature].add("gyre")

if MAJOR < 2:
    import torch.nn.parallel._replicated_tensor_ddp_utils as _replicated

    _replicated._set_ddp_with_replicated_tensor = lambda value: None

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    """As in torch's test_distributed_spawn.py."""

    def setUp(self):
        super().setUp()
        self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


# --select cpu: the tests that can run on a CPU-only machine at this world size, read
# from the decorators in distributed_test.py's source (torch skips the others for any
# backend: they need GPUs, NCCL, MPI or 4+ ranks).
NEEDS_GPU = re.compile(
    r'skip_if_no_gpu|(?<!nccl_)skip_if_lt_x_gpu|backend_feature\["gpu"\]|backend_feature\["cuda"\]'
    r'|BACKEND != "nccl"|BACKEND != "mpi"[,)]'
    r'|require_backends?(_available|_is_available)?\(\{"nccl"\}\)'
    r'|require_(exact_)?world_size\([4-9]\)|skip_if_rocm_multiprocess')
# Tests that torch runs on gloo only, by its name (skipped for any other backend, gyre
# included); --select gloo_only lists them.
# (torch 1.13's require_backends_available({"gloo"}) only asks whether gloo is built;
# torch 2's require_backend_is_available({"gloo"}) also wants BACKEND == "gloo".)
# MPI_NCCL_GLOO, "mpi, nccl or gloo", is CPU-capable on gloo: it is taken out of a
# decorator's text before NEEDS_GPU reads it (its `BACKEND != "nccl"` is not a GPU need).
MPI_NCCL_GLOO = 'BACKEND != "mpi" and BACKEND != "nccl" and BACKEND != "gloo"'
GLOO_BY_NAME = re.compile(r'require_backend(_is_available)?\(\{"gloo"\}\)|BACKEND != "gloo"')


def decorators():
    """{test name: the source text of its decorators} from distributed_test.py."""
    import ast
    import inspect
    from torch.testing._internal.distributed import distributed_test
    src = inspect.getsource(distributed_test)
    lines = src.splitlines()
    out = {}
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            # (ast.get_source_segment splits the whole file per call: too slow here)
            text = " ".join(" ".join(lines[d.lineno - 1:d.end_lineno])
                            for d in node.decorator_list)
            out[node.name] = out.get(node.name, "") + " " + " ".join(text.split())
    return out


def world_is_small(world):
    """Whether skip_if_small_worldsize skips at this world size, read from its source:
    torch 1.13 skips at <= 2 ranks, torch 2.x at < 8 (for any backend but MPI)."""
    import inspect
    from torch.testing._internal import common_distributed
    src = inspect.getsource(common_distributed.skip_if_small_worldsize)
    m = re.search(r'WORLD_SIZE"\]\)\s*(<=|<)\s*(\d+)', src)
    if not m:
        raise SystemExit("torch_dist_suite.py: cannot read skip_if_small_worldsize's "
                         "threshold from this torch's common_distributed.py")
    limit = int(m.group(2))
    return world <= limit if m.group(1) == "<=" else world < limit


def cpu_selection(names, world, gloo_only):
    decs = decorators()
    keep = []
    for n in names:
        # A parametrized test (name_param_value...) has its template's decorators.
        base = n if n in decs else max((t for t in decs if n.startswith(t + "_")),
                                       key=len, default=n)
        d = decs.get(base, "")
        if NEEDS_GPU.search(d.replace(MPI_NCCL_GLOO, "")) or re.search("cuda|nccl|gpu", n, re.IGNORECASE):
            continue
        if "skip_if_small_worldsize" in d and world_is_small(world):
            continue
        if "skip_if_odd_worldsize" in d and world % 2:
            continue
        if bool(GLOO_BY_NAME.search(d)) == gloo_only:
            keep.append(n)
    return keep


def all_tests():
    return sorted(n for n in dir(TestDistBackendWithSpawn) if n.startswith("test_"))


def selection(args):
    names = all_tests()
    if args.tests:
        wanted = read_list(args.tests)
        names = [n for n in names if n in wanted]
    elif args.select in ("cpu", "gloo_only"):
        names = cpu_selection(names, args.world, args.select == "gloo_only")
    for sub in args.k:
        names = [n for n in names if sub in n]
    return names


def read_list(path):
    with open(path) as f:
        return [line.split("#")[0].strip() for line in f if line.split("#")[0].strip()]


class Recorder(unittest.TextTestResult):
    """Keeps one (status, reason) per test and prints a line as each ends."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.results = {}
        self.started = {}

    def startTest(self, test):
        self.started[test._testMethodName] = time.monotonic()
        super().startTest(test)

    def _put(self, test, status, reason=""):
        name = test._testMethodName
        secs = time.monotonic() - self.started.get(name, time.monotonic())
        lines = reason.strip().splitlines() if reason else [""]
        # The exception's line, not the C++ frame list torch appends to it.
        said = [line for line in lines if "Error:" in line or "Exception:" in line]
        self.results[name] = [status, (said[-1] if said else lines[-1]).strip()[:300]]
        print(f"[{BACKEND} world {os.environ['WORLD_SIZE']}] {status:7} {name} "
              f"({secs:.1f} s){': ' + self.results[name][1] if reason else ''}",
              file=sys.stderr, flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._put(test, "pass")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._put(test, "skip", str(reason))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._put(test, "fail", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._put(test, "error", self._exc_info_to_string(err, test))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._put(test, "xfail")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._put(test, "xpass")


def main(args):
    names = selection(args)
    if args.list:
        print("\n".join(names))
        return 0
    expected = read_list(args.expect) if args.expect else []
    missing = [n for n in expected if n not in names]
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    runner = unittest.TextTestRunner(stream=open(os.devnull, "w"), resultclass=Recorder,
                                     verbosity=0)
    start = time.monotonic()
    result = runner.run(suite)
    counts = {}
    for status, _ in result.results.values():
        counts[status] = counts.get(status, 0) + 1
    print(f"torch {torch.__version__} backend {BACKEND} world {args.world}: "
          f"{len(names)} tests in {time.monotonic() - start:.0f} s: "
          + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.results, f, indent=1, sort_keys=True)
    if not expected:
        return 0
    bad = [n for n in expected if n in result.results and result.results[n][0] != "pass"]
    for n in missing:
        print(f"FAILED: {n} is on {args.expect} but not in this torch's suite")
    for n in bad:
        print(f"FAILED: {n}: {result.results[n][0]} {result.results[n][1]}")
    passed = len(expected) - len(bad) - len(missing)
    print(f"expected-pass list: {passed} passed, {len(bad) + len(missing)} failed")
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main(ARGS))

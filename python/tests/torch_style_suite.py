#!/usr/bin/env python3
"""torch's own DTensor, tensor-parallel, FSDP2 and pipelining test files against a backend
on CPU: the files of pytorch's test/distributed/ tree, run unmodified from a pytorch source
checkout (--src, or GYRE_PYTORCH_SRC), every multi-process test case of each file, with
the backend the test picks for CPU ("gloo") replaced by --backend.

    torch_style_suite.py --src PYTORCH [--backend gyre|gloo] [--files F,...] [-k SUB ...]
                         [--json OUT] [--expect DIR] [--list]
    torch_style_suite.py --src PYTORCH --compare [--files F,...] [-k SUB ...] [--json OUT]

PYTORCH is a checkout of pytorch at this torch's torch.version.git_version (the test
files track torch's private APIs; another commit's files may not import). FILE names are
relative to PYTORCH/test/distributed, e.g. tensor/test_dtensor.py.

What the driver changes in torch's test code (docs/pytorch.md, "torch's DTensor, TP, FSDP2
and pipelining tests"), at import, in the parent and in every spawned rank (they re-import
this file as __mp_main__):
- init_process_group and new_group: a backend of "gloo" (or none: torch's default for CPU
  is gloo) becomes --backend; "cpu:gloo,..." becomes "cpu:<backend>,...". That is where
  DTensorTestBase, FSDPTest and MultiProcContinuousTest pass the backend they pick for the
  device, so one substitution covers them all and gloo runs the very same code.
- "gyre" is registered by importing gyre_torch.
- Test classes that torch instantiates for accelerators only
  (instantiate_device_type_tests(..., except_for=["cpu"]); on CPU torch runs only their
  LocalTensor copy, which uses no backend) are put back as the plain class and run on CPU.
Classes that use no backend (MultiThreadedTestCase, LocalTensor copies, plain TestCase)
are left out: they would pass the same on any backend.

--expect DIR: the exit status is 1 when a test named in DIR/<file stem>.txt (lines
"Class.test_name", '#' comments) does not pass, or is not in the selection.
--compare: runs the selection on gloo, then on gyre, each in its own process, and prints
per file: tests, passes on each, and each test gloo passes and gyre does not (exit 1 when
there is one).
"""
import argparse
import importlib
import json
import os
import subprocess
import sys
import time
import unittest

DEFAULT_FILES = [
    "tensor/test_dtensor.py",
    "tensor/test_redistribute.py",
    "tensor/parallel/test_tp_examples.py",
    "tensor/parallel/test_tp_style.py",
    "_composable/fsdp/test_fully_shard_training.py",
    "_composable/fsdp/test_fully_shard_comm.py",
    "pipelining/test_schedule_multiproc.py",
    "pipelining/test_stage.py",
]

ENV_BACKEND = "GYRE_STYLE_BACKEND"  # read by this file in every spawned rank
ENV_DIRS = "GYRE_STYLE_DIRS"        # the test files' folders, for the ranks' imports
ENV_START = "GYRE_STYLE_START"      # fork or spawn: how MultiProcessTestCase starts ranks


def _substitute(backend):
    """The backend string init_process_group/new_group get, with gloo replaced."""
    want = os.environ.get(ENV_BACKEND, "gloo")
    if want == "gloo":
        return backend
    if backend is None:
        return want
    if isinstance(backend, str):
        if backend == "gloo":
            return want
        if ":" in backend:  # "cpu:gloo,cuda:nccl"
            return ",".join(p.replace("cpu:gloo", f"cpu:{want}") for p in backend.split(","))
    return backend


def _patch():
    """Applied at import, in the parent and in every rank (see the module docstring)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d
    from torch.testing._internal import common_device_type
    from torch.testing._internal.common_utils import instantiate_parametrized_tests

    init, new_group = distributed_c10d.init_process_group, distributed_c10d.new_group

    def init_process_group(backend=None, *args, **kwargs):
        return init(_substitute(backend), *args, **kwargs)

    def new_group_(ranks=None, timeout=None, backend=None, *args, **kwargs):
        return new_group(ranks, timeout, _substitute(backend) if backend else backend,
                         *args, **kwargs)

    for mod in (dist, distributed_c10d):
        mod.init_process_group = init_process_group
        mod.new_group = new_group_

    original = common_device_type.instantiate_device_type_tests

    def instantiate_device_type_tests(generic, scope, except_for=None, *args, **kwargs):
        # The original empties the generic class of its tests: copy it first.
        copy = type(generic)(generic.__name__, generic.__bases__, dict(generic.__dict__))
        original(generic, scope, except_for, *args, **kwargs)
        if except_for and "cpu" in except_for:
            instantiate_parametrized_tests(copy)
            copy.gyre_cpu_for_accelerator_class = True
            scope[copy.__name__] = copy  # where the spawned ranks unpickle it from

    common_device_type.instantiate_device_type_tests = instantiate_device_type_tests

    # A name a test file imports that this torch spells without the underscore (files
    # from a neighbouring pytorch commit): an alias, a no-op where both agree.
    from torch.distributed.tensor import _redistribute
    if not hasattr(_redistribute, "_assert_no_mixed_partial_types") and hasattr(
            _redistribute, "assert_no_mixed_partial_types"):
        _redistribute._assert_no_mixed_partial_types = \
            _redistribute.assert_no_mixed_partial_types

    from torch.testing._internal.common_distributed import MultiProcessTestCase
    spawn = MultiProcessTestCase._spawn_processes

    def start_processes(self):
        # fork: each rank starts with torch imported, where spawn makes every rank of
        # every test import it again (tens of seconds a test on 2 loaded cores).
        if os.environ.get(ENV_START, "fork") == "fork":
            import torch.multiprocessing as tmp
            return self._start_processes(tmp.get_context("fork").Process)
        return spawn(self)

    MultiProcessTestCase._spawn_processes = start_processes


def _setup():
    """What the environment asks for: the backend's registration, the files' folders."""
    if os.environ.get(ENV_BACKEND) == "gyre":
        import gyre_torch  # noqa: F401  (registers backend "gyre")
    for d in filter(None, os.environ.get(ENV_DIRS, "").split(os.pathsep)):
        if d not in sys.path:
            sys.path.insert(0, d)


_patch()
_setup()


def uses_backend(cls):
    from torch.testing._internal import common_distributed as cd
    bases = tuple(b for b in (getattr(cd, "MultiProcessTestCase", None),
                              getattr(cd, "MultiProcContinuousTest", None)) if b)
    return issubclass(cls, bases) and not cls.__name__.endswith("WithLocalTensor")


def load_file(src, rel):
    """[(test id 'Class.test', TestCase)] of the backend-using classes of one file."""
    path = os.path.join(src, "test", "distributed", rel)
    name = os.path.splitext(os.path.basename(path))[0]
    mod = importlib.import_module(name)
    out = []
    for case in _flatten(unittest.defaultTestLoader.loadTestsFromModule(mod)):
        cls = type(case)
        if cls.__module__ != mod.__name__ or not uses_backend(cls):
            continue
        out.append((f"{cls.__name__}.{case._testMethodName}", case))
    return sorted(out, key=lambda t: t[0])


def _flatten(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _flatten(t)
        else:
            yield t


class Recorder(unittest.TextTestResult):
    """(status, reason) per test, a line on stderr as each ends."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.results = {}
        self.started = 0.0
        self.file = ""

    def startTest(self, test):
        self.started = time.monotonic()
        super().startTest(test)

    def _put(self, test, status, reason=""):
        key = f"{type(test).__name__}.{test._testMethodName}"
        lines = reason.strip().splitlines() if reason else [""]
        said = [ln for ln in lines if "Error:" in ln or "Exception:" in ln]
        why = (said[-1] if said else lines[-1]).strip()[:300]
        self.results[key] = [status, why]
        print(f"[{os.environ.get(ENV_BACKEND, 'gloo')}] {status:5} {self.file}::{key} "
              f"({time.monotonic() - self.started:.1f} s){': ' + why if why else ''}",
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


def read_list(path):
    with open(path) as f:
        return [ln.split("#")[0].strip() for ln in f if ln.split("#")[0].strip()]


def stem(rel):
    return os.path.splitext(os.path.basename(rel))[0]


def expected_of(args, rel):
    if not args.expect:
        return None
    path = os.path.join(args.expect, stem(rel) + ".txt")
    return read_list(path) if os.path.exists(path) else None


def run(args):
    """{file: {test: [status, reason]}}; a file that is absent or does not import gets
    one entry, '<file>', saying so."""
    import torch
    results, bad = {}, []
    for rel in args.files:
        path = os.path.join(args.src, "test", "distributed", rel)
        expected = expected_of(args, rel)
        if expected is not None:
            wanted = set(expected)
        if not os.path.exists(path):
            results[rel] = {"<file>": ["absent", f"not in {args.src}"]}
            if expected:
                bad.append(f"{rel}: absent from {args.src}")
            continue
        try:
            cases = load_file(args.src, rel)
        except Exception as e:  # another torch's file: report it, go on with the rest
            results[rel] = {"<file>": ["import", f"{type(e).__name__}: {e}"[:300]]}
            bad.extend(f"{rel}: does not import ({type(e).__name__}: {e})"
                       for _ in [0] if expected)
            continue
        for sub in args.k:
            cases = [c for c in cases if sub in f"{rel}::{c[0]}"]
        if args.tests_only_expected and expected is not None:
            cases = [c for c in cases if c[0] in wanted]
        if args.list:
            print("\n".join(f"{rel}::{name}" for name, _ in cases))
            continue
        runner = unittest.TextTestRunner(stream=open(os.devnull, "w"), resultclass=Recorder,
                                         verbosity=0)
        res = runner._makeResult()
        res.file = rel
        start = time.monotonic()
        unittest.TestSuite(c for _, c in cases)(res)
        results[rel] = res.results
        counts = {}
        for status, _ in res.results.values():
            counts[status] = counts.get(status, 0) + 1
        print(f"torch {torch.__version__} {os.environ.get(ENV_BACKEND)} {rel}: "
              f"{len(cases)} tests in {time.monotonic() - start:.0f} s: "
              + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())), flush=True)
        for name in expected or []:
            got = res.results.get(name)
            if got is None:
                bad.append(f"{rel}::{name}: expected to pass, not in the selection")
            elif got[0] != "pass":
                bad.append(f"{rel}::{name}: {got[0]} {got[1]}")
    return results, bad


def compare(args):
    """gloo, then gyre, each a run of this file in its own process; a table per file."""
    here = os.path.abspath(__file__)
    out = {}
    for backend in ("gloo", "gyre"):
        path = f"{args.json or 'torch_style_suite'}.{backend}.json"
        cmd = [sys.executable, here, "--src", args.src, "--backend", backend,
               "--start", args.start,
               "--files", ",".join(args.files), "--json", path]
        for sub in args.k:
            cmd += ["-k", sub]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, timeout=args.timeout, check=False)
        with open(path) as f:
            out[backend] = json.load(f)
    worse = 0
    print("\n| file | tests | gloo pass | gyre pass | skip (both) | gloo passes, gyre not |")
    print("|---|---|---|---|---|---|")
    for rel in args.files:
        glo, gyr = out["gloo"].get(rel, {}), out["gyre"].get(rel, {})
        if "<file>" in glo:
            print(f"| {rel} | - | - | - | - | {glo['<file>'][0]}: {glo['<file>'][1]} |")
            continue
        lost = sorted(t for t, r in glo.items() if r[0] == "pass" and gyr.get(t, ["?"])[0] != "pass")
        worse += len(lost)
        npass = lambda d: sum(r[0] == "pass" for r in d.values())  # noqa: E731
        skips = sum(r[0] == "skip" and gyr.get(t, [""])[0] == "skip" for t, r in glo.items())
        print(f"| {rel} | {len(glo)} | {npass(glo)} | {npass(gyr)} | {skips} | "
              f"{', '.join(lost) or 'none'} |")
    for rel in args.files:
        glo, gyr = out["gloo"].get(rel, {}), out["gyre"].get(rel, {})
        for t, r in sorted(glo.items()):
            g = gyr.get(t, ["?", ""])
            if r[0] != g[0]:
                print(f"{rel}::{t}: gloo {r[0]} {r[1]} / gyre {g[0]} {g[1]}")
    return 1 if worse else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", default=os.environ.get("GYRE_PYTORCH_SRC", ""),
                   help="pytorch checkout (default: $GYRE_PYTORCH_SRC)")
    p.add_argument("--backend", default="gyre", help="gyre or gloo")
    p.add_argument("--files", default=",".join(DEFAULT_FILES),
                   help="comma-separated, relative to PYTORCH/test/distributed")
    p.add_argument("-k", action="append", default=[], help="only ids containing this")
    p.add_argument("--json", default="", help="write {file: {test: [status, why]}} here")
    p.add_argument("--expect", default="", help="folder of <file stem>.txt lists")
    p.add_argument("--only-expected", dest="tests_only_expected", action="store_true",
                   help="run only the tests the --expect lists name")
    p.add_argument("--list", action="store_true", help="print the selection and exit")
    p.add_argument("--start", default="fork", choices=["fork", "spawn"],
                   help="how the ranks of a MultiProcessTestCase start (torch: spawn)")
    p.add_argument("--compare", action="store_true", help="gloo then gyre, and a table")
    p.add_argument("--timeout", type=int, default=7200, help="--compare: per backend, s")
    args = p.parse_args()
    args.files = [f for f in args.files.split(",") if f]
    if args.tests_only_expected and args.expect:
        args.files = [f for f in args.files
                      if os.path.exists(os.path.join(args.expect, stem(f) + ".txt"))]
    if not args.src or not os.path.isdir(os.path.join(args.src, "test", "distributed")):
        print("SKIPPED: torch_style_suite.py needs pytorch's test/distributed sources: "
              "--src or GYRE_PYTORCH_SRC, a checkout of pytorch at this torch's "
              "torch.version.git_version")
        return 77
    os.environ[ENV_START] = args.start
    os.environ[ENV_DIRS] = os.pathsep.join(sorted({
        os.path.dirname(os.path.join(args.src, "test", "distributed", f)) for f in args.files}))
    if args.compare:
        return compare(args)
    os.environ[ENV_BACKEND] = args.backend
    # The ranks are spawned after this and read both variables at their import.
    _setup()
    results, bad = run(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    for line in bad:
        print(f"FAILED: {line}")
    if args.expect:
        named = sum(len(expected_of(args, f) or []) for f in args.files)
        print(f"expected-pass lists: {named - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

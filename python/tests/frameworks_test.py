#!/usr/bin/env python3
"""Training frameworks on backend gyre against the same run on gloo (docs/frameworks.md).

1. PyTorch Lightning: Trainer(accelerator="cpu", devices=2,
   strategy=DDPStrategy(process_group_backend=...)), Lightning starting the second rank
   itself, self.log(sync_dist=True) every step; and (--gyrerun) the gyre run again under
   gyrerun -n 2.
2. Hugging Face Accelerate under torchrun (world 2): gyre by creating the process group
   before Accelerator(cpu=True) (Accelerate refuses the name; this test reports whether it
   still does), gloo through Accelerate's own init; and (--gyrerun) gyre under gyrerun.
Each: examples/<framework>_train.py, 40 steps of a small MLP, every rank's per-step loss
equal to gloo's exactly (DDP averages by dividing before a SUM; a sum of two floats is
the same in any order), and the loss falls. Prints the time per step gyre / gloo.
Exit 77 with the reason when torch is older than 2 or a framework is not installed
(after running the ones that are).
"""
import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")
STEPS = 40


def descendants(pid):
    """Every process under pid, from /proc (torchrun starts each rank in a session of
    its own, so killing torchrun's process group would leave the ranks running)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(proc):
    """SIGKILLs proc, everything under it and its process group."""
    for pid in [proc.pid, *descendants(proc.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# PyTorch's gloo sometimes aborts a process at exit, after the run is over and its result
# printed: std::terminate from a thread still running as the process tears down (the
# Gloo exit crash pytorch/pytorch PR #179291 describes), with or without gyre_torch
# imported.
GLOO_TEARDOWN_ABORT = "terminate called without an active exception"


def run(cmd, timeout=300, reference=False):
    """Runs cmd in a session of its own and returns its last JSON line; on a timeout it
    and every process under it are killed (no rank is left). `reference` (the gloo runs
    only, never gyre's): a run that printed its result and then died of gloo's teardown
    abort still counts, with a note."""
    print("+", " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        out, err = proc.communicate(timeout=30)
        sys.stderr.write(out[-4000:] + err[-8000:])
        raise SystemExit(f"FAILED (timed out after {timeout} s): {' '.join(cmd)}")
    finally:
        try:  # a process the launcher left behind in its group
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode != 0:
        if reference and lines and GLOO_TEARDOWN_ABORT in err:
            print(f"NOTE: the gloo reference run printed its result, then aborted at exit "
                  f"({GLOO_TEARDOWN_ABORT!r}: gloo's exit crash, pytorch/pytorch PR #179291); "
                  "its result is used", flush=True)
            return json.loads(lines[-1])
        sys.stderr.write(out[-4000:] + err[-8000:])
        raise SystemExit(f"FAILED ({proc.returncode}): {' '.join(cmd)}")
    if not lines:
        raise SystemExit(f"no JSON result from: {' '.join(cmd)}\n{out[-2000:]}{err[-2000:]}")
    return json.loads(lines[-1])


def compare(name, a, b, world=2):
    """a (gyre) against b (gloo): every rank's losses equal, training happened."""
    assert a["backend"] == "gyre" and b["backend"] == "gloo", (a["backend"], b["backend"])
    assert a["world"] == b["world"] == world, (a["world"], b["world"])
    assert len(a["losses"]) == world and all(len(r) == STEPS for r in a["losses"]), \
        f"{name}: expected {world} ranks x {STEPS} losses, got {[len(r) for r in a['losses']]}"
    for rank, (x, y) in enumerate(zip(a["losses"], b["losses"])):
        if x != y:
            step = next(i for i, (u, v) in enumerate(zip(x, y)) if u != v)
            raise SystemExit(f"FAILED: {name}: rank {rank}'s loss differs from gloo's at "
                             f"step {step}: {x[step]!r} vs {y[step]!r}")
    mean = [sum(r[i] for r in a["losses"]) / world for i in range(STEPS)]
    first, last = sum(mean[:5]) / 5, sum(mean[-5:]) / 5
    assert last < 0.8 * first, f"{name}: the loss did not fall: {first:.4f} -> {last:.4f}"
    ratio = a["step_s"] / b["step_s"] if b["step_s"] else float("nan")
    print(f"{a['framework']}: {world} ranks x {STEPS} losses equal to gloo's "
          f"({first:.4f} -> {last:.4f}); time per step gyre {a['step_s'] * 1e3:.2f} ms, "
          f"gloo {b['step_s'] * 1e3:.2f} ms (gyre/gloo {ratio:.2f})", flush=True)


def lightning(py, gyrerun):
    script = os.path.join(EXAMPLES, "lightning_train.py")
    common = ["--devices", "2", "--steps", str(STEPS)]
    a = run([py, script, "--backend", "gyre", *common])
    b = run([py, script, "--backend", "gloo", *common], reference=True)
    compare("lightning", a, b)
    last = [r[-1] for r in a["losses"]]
    assert a["logged"] == b["logged"] == sum(last) / 2, (a["logged"], b["logged"], last)
    if gyrerun:
        g = run([gyrerun, "-n", "2", py, script, "--backend", "gyre", *common])
        assert g["losses"] == a["losses"], "lightning under gyrerun: losses differ"
        print("lightning under gyrerun -n 2: the same losses", flush=True)


def accelerate(py, gyrerun):
    script = os.path.join(EXAMPLES, "accelerate_train.py")
    torchrun = [py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    r = run([*torchrun, script, "--check-refusal"])
    if r["refused"]:
        print(f"accelerate refuses backend='gyre' on CPU: {r['message']!r} "
              "(docs/frameworks.md: create the group first)", flush=True)
    else:
        print(f"NOTE: accelerate now takes backend='gyre' on CPU (ran on {r['backend']}): "
              "docs/frameworks.md's workaround may be dropped", flush=True)
    common = ["--steps", str(STEPS)]
    a = run([*torchrun, script, "--backend", "gyre", *common])
    b = run([*torchrun, script, "--backend", "gloo", *common], reference=True)
    assert a["distributed_type"] == b["distributed_type"] == "MULTI_CPU", \
        (a["distributed_type"], b["distributed_type"])
    compare("accelerate", a, b)
    if gyrerun:
        g = run([gyrerun, "-n", "2", py, script, "--backend", "gyre", *common])
        assert g["losses"] == a["losses"], "accelerate under gyrerun: losses differ"
        print("accelerate under gyrerun -n 2: the same losses", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gyrerun", default="", help="path of gyrerun (that run skipped when empty)")
    p.add_argument("--only", choices=["lightning", "accelerate"], default=None)
    args = p.parse_args()
    if int(torch.__version__.split(".")[0]) < 2:
        print(f"SKIPPED: the framework tests need torch >= 2 (this is {torch.__version__}; "
              "tools/torch_venv.sh installs lightning and accelerate into the torch 2 venv)")
        sys.exit(77)
    missing = []
    for name in ("lightning", "accelerate"):
        if args.only not in (None, name):
            continue
        if importlib.util.find_spec(name) is None:
            missing.append(name)
            continue
        if name == "lightning":
            lightning(sys.executable, args.gyrerun)
        else:
            accelerate(sys.executable, args.gyrerun)
    if missing:
        print(f"SKIPPED: {', '.join(missing)} not installed in {sys.prefix} "
              "(tools/torch_venv.sh installs the pinned versions from PyPI)")
        sys.exit(77)
    print(f"torch {torch.__version__}: framework tests ok")


if __name__ == "__main__":
    main()

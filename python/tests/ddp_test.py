#!/usr/bin/env python3
"""DDP on backend gyre under every launcher, against the same run on gloo.

1. mp.spawn, world 2, 200 steps of the MLP (and 50 with torch's fp16 compression hook): gyre's per-step losses equal gloo's exactly
   (DDP averages by dividing before a SUM; a sum of two floats is the same in any order),
   and so do the conv model's (BatchNorm buffers broadcast each step).
2. torchrun (world 2): trains and saves the model on rank 0; torch.distributed.launch
   (world 3, --local_rank): loads it and evaluates to the same test accuracy; gyrerun
   (world 2, when --gyrerun names it): trains with the loaded model.
On torch 1.13 under Python 3.11 the launchers run as python -m gyre_torch.torchrun /
gyre_torch.launch (docs/pytorch.md: their Std.from_str crash); on torch 2 as torch's own.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "..", "examples", "ddp_train.py")
MAJOR = int(torch.__version__.split(".")[0])


def run(cmd, timeout=600):
    print("+", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
        raise SystemExit(f"FAILED ({proc.returncode}): {' '.join(cmd)}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"no JSON result from: {' '.join(cmd)}\n{proc.stdout[-2000:]}")
    return json.loads(lines[-1])


def launcher(module):
    fixed = {"torchrun": "gyre_torch.torchrun", "launch": "gyre_torch.launch"}[module]
    plain = {"torchrun": "torch.distributed.run", "launch": "torch.distributed.launch"}[module]
    return [sys.executable, "-m", plain if MAJOR >= 2 else fixed]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gyrerun", default="", help="path of gyrerun (skipped when empty)")
    p.add_argument("--launchers-only", action="store_true", help="skip the gloo comparisons")
    args = p.parse_args()
    py = sys.executable
    common = ["--train-count", "12800", "--batch", "64", "--epochs", "2"]
    if not args.launchers_only:
        compare_with_gloo(py, common)
    launchers(py, common, args.gyrerun)
    print(f"torch {torch.__version__}: DDP tests ok")


def compare_with_gloo(py, common):
    a = run([py, TRAIN, "--backend", "gyre", "-N", "2", "--steps", "200", *common])
    b = run([py, TRAIN, "--backend", "gloo", "-N", "2", "--steps", "200", *common])
    assert len(a["losses"]) == 200 and a["losses"] == b["losses"], \
        f"gyre and gloo losses differ: {a['losses'][:5]} vs {b['losses'][:5]}"
    assert a["test_acc"] == b["test_acc"], (a["test_acc"], b["test_acc"])
    print(f"mlp world 2: 200 losses equal; samples/s gyre {a['samples_per_s']:.0f}, "
          f"gloo {b['samples_per_s']:.0f}", flush=True)
    # BatchNorm: DDP broadcasts rank 0's buffers every step; still exact at world 2.
    a = run([py, TRAIN, "--backend", "gyre", "-N", "2", "--model", "conv", "--steps", "40",
             *common])
    b = run([py, TRAIN, "--backend", "gloo", "-N", "2", "--model", "conv", "--steps", "40",
             *common])
    assert len(a["losses"]) == 40 and a["losses"] == b["losses"], \
        f"conv losses differ: {a['losses'][:5]} vs {b['losses'][:5]}"
    print(f"conv world 2: 40 losses equal; samples/s gyre {a['samples_per_s']:.0f}, "
          f"gloo {b['samples_per_s']:.0f}", flush=True)

    # torch's gradient compression hooks chain on the Work's future: fp16 equal to gloo's,
    # bf16 (which this gloo may lack) trains.
    a = run([py, TRAIN, "--backend", "gyre", "-N", "2", "--steps", "50", "--hook", "fp16",
             *common])
    b = run([py, TRAIN, "--backend", "gloo", "-N", "2", "--steps", "50", "--hook", "fp16",
             *common])
    assert len(a["losses"]) == 50 and a["losses"] == b["losses"], "fp16 hook losses differ"
    print("comm hooks: fp16 losses equal to gloo's", flush=True)
    # The benchmarks' two references: "sync" meets the peers through gyre every step but
    # keeps each rank's own gradients, so it trains exactly as "local" (no exchange) does.
    a = run([py, TRAIN, "--backend", "gyre", "-N", "2", "--steps", "30", "--hook", "sync",
             *common])
    b = run([py, TRAIN, "--backend", "gyre", "-N", "2", "--steps", "30", "--hook", "local",
             *common])
    assert len(a["losses"]) == 30 and a["losses"] == b["losses"], "sync and local differ"
    print("comm hooks: sync's losses equal local's", flush=True)
    if MAJOR < 2:
        print("bf16 hook: skipped (torch 1.13's refuses to run without CUDA 11 and NCCL)")
        return
    a = run([py, TRAIN, "--backend", "gyre", "-N", "2", "--steps", "50", "--hook", "bf16",
             *common])
    first, last = sum(a["losses"][:5]) / 5, sum(a["losses"][-5:]) / 5
    assert len(a["losses"]) == 50 and last < 0.8 * first, (first, last)
    print(f"bf16 hook: loss {first:.3f} -> {last:.3f}", flush=True)


def launchers(py, common, gyrerun):
    with tempfile.TemporaryDirectory() as tmp:
        saved = os.path.join(tmp, "model.pt")
        t = run([*launcher("torchrun"), "--standalone", "--nproc_per_node", "2", TRAIN,
                 "--backend", "gyre", "--steps", "30", "--save", saved, *common])
        assert os.path.exists(saved) and len(t["losses"]) == 30, t
        port = str(29400 + os.getpid() % 500)
        # Without --use_env: the script gets --local_rank (--local-rank on torch 2).
        l_ = run([*launcher("launch"), "--nproc_per_node", "3", "--master_port", port, TRAIN,
                  "--backend", "gyre", "--steps", "0", "--load", saved, *common])
        assert l_["world"] == 3 and l_["test_acc"] == t["test_acc"], (l_, t["test_acc"])
        print(f"saved at world 2 (torchrun), loaded at world 3 (launch): test accuracy "
              f"{t['test_acc']} both", flush=True)
        if gyrerun:
            g = run([gyrerun, "-n", "2", py, TRAIN, "--backend", "gyre", "--steps", "20",
                     "--load", saved, *common])
            assert len(g["losses"]) == 20 and g["world"] == 2, g
            print("gyrerun: ok", flush=True)


if __name__ == "__main__":
    main()

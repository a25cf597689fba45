#!/usr/bin/env python3
"""What bench/runs/torch_styles.sh measured, per world and style: samples/s and step time
of each backend (range over the rounds), gyre / gloo within each round, its median.

  bench/runs/torch_styles_summary.py bench/results/torch_styles_1host
"""
import glob
import json
import os
import statistics
import sys


def main():
    out = sys.argv[1]
    runs = {}
    for path in sorted(glob.glob(os.path.join(out, "r*.jsonl"))):
        for line in open(path):
            if line.strip():
                d = json.loads(line)
                runs[(d["world"], d["style"], d["backend"], d["round"])] = d
    keys = sorted({(w, s) for w, s, _, _ in runs}, key=lambda k: (k[0], "fsdp tp ddp".find(k[1])))
    print(f"{'world':>5} {'style':5} {'gyre samples/s':>16} {'gloo samples/s':>16} "
          f"{'gyre step ms':>14} {'gloo step ms':>14}  gyre/gloo per round (median)")
    for w, s in keys:
        rounds = sorted({r for ww, ss, _, r in runs if (ww, ss) == (w, s)})
        ok = [r for r in rounds if all(not runs.get((w, s, b, r), {"failed": True}).get("failed")
                                       for b in ("gyre", "gloo"))]
        if not ok:
            print(f"{w:>5} {s:5} failed")
            continue
        sps = {b: [runs[(w, s, b, r)]["samples_per_s"] for r in ok] for b in ("gyre", "gloo")}
        ms = {b: [runs[(w, s, b, r)]["step_ms"] for r in ok] for b in ("gyre", "gloo")}
        ratio = [g / l for g, l in zip(sps["gyre"], sps["gloo"])]
        print(f"{w:>5} {s:5} {min(sps['gyre']):7.0f}-{max(sps['gyre']):<8.0f} "
              f"{min(sps['gloo']):7.0f}-{max(sps['gloo']):<8.0f} "
              f"{min(ms['gyre']):6.1f}-{max(ms['gyre']):<7.1f} {min(ms['gloo']):6.1f}-{max(ms['gloo']):<7.1f}  "
              + " ".join(f"{x:.2f}" for x in ratio) + f" ({statistics.median(ratio):.2f})"
              + ("" if len(ok) == len(rounds) else f"  [{len(rounds) - len(ok)} failed]"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

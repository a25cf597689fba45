#!/usr/bin/env python3
"""Ratios within each round of bench/runs/ddp_one_host_bind.sh's files: gyre / gloo,
gyre / local, sync / local, with and without --bind core.
Usage: ddp_one_host_bind_summary.py runs.txt [runs2.txt ...]"""
import collections
import re
import statistics
import sys

rounds = collections.defaultdict(dict)  # (file, round) -> {(bind, backend): samples/s}
for i, path in enumerate(sys.argv[1:]):
    for line in open(path):
        m = re.match(r"round (\d+) bind (\S+) (\S+) samples_per_s=(\d+)", line)
        if m:
            rounds[(i, int(m[1]))][(m[2], m[3])] = float(m[4])
print("# DDP MLP, one host, 4 ranks on 2 CPUs, samples/s; ratios within a round")
for bind in ("none", "core"):
    cols = collections.defaultdict(list)
    for key in sorted(rounds):
        r = rounds[key]
        cols["gyre"].append(r[(bind, "gyre")])
        cols["gyre/gloo"].append(r[(bind, "gyre")] / r[(bind, "gloo")])
        cols["gyre/local"].append(r[(bind, "gyre")] / r[(bind, "local")])
        cols["sync/local"].append(r[(bind, "sync")] / r[(bind, "local")])
        cols["gyre/sync"].append(r[(bind, "gyre")] / r[(bind, "sync")])
    print(f"--bind {bind}: {len(cols['gyre'])} rounds")
    for name in ("gyre/gloo", "gyre/local", "sync/local", "gyre/sync"):
        v = cols[name]
        print(f"  {name:11s} {min(v):.2f}-{max(v):.2f} median {statistics.median(v):.2f}  "
              f"per round {', '.join(f'{x:.2f}' for x in v)}")

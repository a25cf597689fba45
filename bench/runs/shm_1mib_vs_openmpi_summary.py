#!/usr/bin/env python3
"""summary.txt from bench/runs/shm_1mib_vs_openmpi.sh's summary_raw.txt: per size and variant min-median-max over the
rounds, and gyre against the best Open MPI of each round.
Usage: shm_1mib_vs_openmpi_summary.py DIR/summary_raw.txt"""
import sys, re, statistics as st, collections
rows = collections.defaultdict(dict)  # (variant,size) -> round -> us
for line in open(sys.argv[1]):
    name, size, t = line.split()
    r, var = re.match(r"r(\d+)_(.*)", name).groups()
    rows[(var, int(size))][int(r)] = float(t)
print("# in place us per op, 4 ranks on 2 CPUs, 200 ops; per size: min-median-max over rounds;")
print("# ratio = best Open MPI of the round / gyre variant (above 1: gyre faster), median over rounds")
for size in sorted({s for _, s in rows}):
    print("size", size)
    rounds = sorted(rows[("mpi_unbound", size)])
    best = {r: min(rows[("mpi_unbound", size)][r], rows[("mpi_bind_core", size)][r]) for r in rounds}
    for var in ["gyre_unbound", "gyre_bind_core", "gyre_bind_mod", "mpi_unbound", "mpi_bind_core"]:
        v = rows[(var, size)]; xs = [v[r] for r in rounds]
        line = f"  {var:18s} {min(xs):6.0f}  {st.median(xs):6.0f}  {max(xs):6.0f}"
        if var.startswith("gyre"):
            rs = [best[r] / v[r] for r in rounds]
            line += "   ratio per round " + ", ".join(f"{x:.2f}" for x in rs) + f"  median {st.median(rs):.2f}"
        print(line)

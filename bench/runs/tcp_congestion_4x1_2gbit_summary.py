#!/usr/bin/env python3
"""% of the 2 Gbit/s link per run (busbw from the time: 2(n-1)/n x 64 MiB / t, n = 4).
Usage: tcp_congestion_4x1_2gbit_summary.py [DIR] (default bench/results/tcp_congestion_4x1_2gbit)."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent.parent
here = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else root / "bench/results/tcp_congestion_4x1_2gbit"
LINK = 250.0  # MB/s = bytes/us
print("| round | defaults (host's bbr): out of place / in place | GYRE_TCP_CONGESTION=cubic |")
print("|---|---|---|")
for r in (1, 2, 3):
    cells = []
    for setting in ("default", "cubic"):
        text = (here / f"round{r}-{setting}.txt").read_text()
        row = next(l for l in text.splitlines() if re.match(r"\s+67108864\s", l)).split()
        oop, inp = float(row[5]), float(row[9])
        cells.append(" / ".join(f"{1.5 * 67108864 / t / LINK * 100:.1f}%" for t in (oop, inp)))
    print(f"| {r} | {cells[0]} | {cells[1]} |")

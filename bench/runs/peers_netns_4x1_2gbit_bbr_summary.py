#!/usr/bin/env python3
"""% of the 2 Gbit/s link for the 64 MiB all-reduce under BBR and CUBIC, 60 and 3 ops.
Usage: peers_netns_4x1_2gbit_bbr_summary.py [DIR] (default bench/results/peers_netns_4x1_2gbit_bbr)."""
import glob, os, sys
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
base = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, 'bench/results/peers_netns_4x1_2gbit_bbr')
def pct(t_us, size=64 << 20):
    return 1.5 * size / t_us / 250 * 100
def row(path, cols):
    for line in open(path):
        f = line.split()
        if f and f[0].isdigit() and int(f[0]) == 64 << 20:
            return [pct(float(f[c])) for c in cols]
    return None
print('| cc, round, ops | gyre out | gyre in | Gloo allreduce_ring |')
print('|---|---|---|---|')
for d in sorted(glob.glob(f'{base}/*-*/')):
    name = os.path.basename(d.rstrip('/'))
    if not os.path.isdir(f'{d}results'):
        continue  # sweep_16-64mib: gyre-bench's own tables, not the harness's
    g = row(f'{d}results/netns_gyre_tcp_n4_2gbit.txt', [5, 9])
    l = row(f'{d}results/netns_gloo_allreduce_ring_n4_2gbit.txt', [4])
    fmt = lambda v: '-' if v is None else f'{v:.1f}'
    print(f'| {name} | {fmt(g and g[0])} | {fmt(g and g[1])} | {fmt(l and l[0])} |')

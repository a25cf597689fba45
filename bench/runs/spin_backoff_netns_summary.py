#!/usr/bin/env python3
"""Time per op (the slowest rank's mean; gyre in place) per size, quiet and beside two busy
loops: gyre before the change (old), after (new), Gloo allreduce_ring; the range over the
three rounds, new/old per round, and % of the 2 Gbit/s link from 1 MiB.
Usage: spin_backoff_netns_summary.py [DIR] (default bench/results/spin_backoff/netns)."""
import os, sys
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
base = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, 'bench/results/spin_backoff/netns')
LINK = 250.0  # bytes per us
RUNS = {'old': ('netns_gyre_tcp', 9), 'new': ('netns_gyre_tcp', 9),
        'gloo': ('netns_gloo_allreduce_ring', 4)}
def rows(path):
    out = {}
    for line in open(path):
        if line.startswith('#') or not line.strip(): continue
        f = line.split()
        if f[0].isdigit(): out[int(f[0])] = f
    return out
data = {}  # (mode, variant, size) -> [us per round]
sizes = set()
for mode in ('quiet', 'hogs'):
    for r in (1, 2, 3):
        for v, (stem, col) in RUNS.items():
            p = f'{base}/{mode}{r}-{v}/results/{stem}_n4_2gbit.txt'
            if not os.path.exists(p): continue
            for s, f in rows(p).items():
                sizes.add(s)
                data.setdefault((mode, v, s), []).append(float(f[col]))
def t(us): return f'{us / 1000:.2f} ms' if us >= 1000 else f'{us:.0f} us'
def rng(xs): return f'{t(min(xs))}-{t(max(xs))}' if xs else '-'
def pct(s, xs): return f' ({100 * 1.5 * s / min(xs) / LINK:.1f}%)' if xs and s >= 1 << 20 else ''
for mode, title in (('quiet', 'quiet'), ('hogs', 'beside two busy loops (nice 19)')):
    print(f'## {title}: time per op, min-max over the rounds (best as % of the link)')
    print('| size | gyre before | gyre after | after / before, per round | Gloo allreduce_ring |')
    print('|---|---|---|---|---|')
    for s in sorted(sizes):
        o, n, g = (data.get((mode, v, s), []) for v in ('old', 'new', 'gloo'))
        ratios = ', '.join(f'{b / a:.2f}' for a, b in zip(o, n))
        label = f'{s >> 20} MiB' if s >= 1 << 20 else f'{s >> 10} KiB' if s >= 1024 else f'{s} B'
        print(f'| {label} | {rng(o)}{pct(s, o)} | {rng(n)}{pct(s, n)} | {ratios} | {rng(g)}{pct(s, g)} |')
    print()

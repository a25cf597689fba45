#!/usr/bin/env python3
"""% of the 2 Gbit/s link (busbw from the mean time per op, 250 MB/s) per size, per round
and mode, and the mean over rounds: gyre (defaults: 512 KiB slots), gyre with 128 KiB
slots, and every peer. Usage: peers_netns_4x1_2gbit_fair_summary.py [DIR] (default
bench/results/peers_netns_4x1_2gbit_fair; the CUBIC run's folder has the same layout)."""
import glob, os, sys, statistics
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
base = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, 'bench/results/peers_netns_4x1_2gbit_fair')
LINK = 250.0  # bytes per us
def pct(size, us): return 100.0 * 1.5 * size / us / LINK
def rows(path):
    out = {}
    for line in open(path):
        if line.startswith('#') or not line.strip(): continue
        f = line.split()
        out[int(f[0])] = f
    return out
cols = [('gyre 512K out', 'def', 'netns_gyre_tcp', 5), ('gyre 512K in', 'def', 'netns_gyre_tcp', 9),
        ('gyre 128K out', '128k', 'netns_gyre_tcp', 5), ('gyre 128K in', '128k', 'netns_gyre_tcp', 9),
        ('Gloo allreduce_ring', 'def', 'netns_gloo_allreduce_ring', 4),
        ('Gloo ring_chunked', 'def', 'netns_gloo_ring_chunked', 4),
        ('torch gloo', 'def', 'netns_torch_gloo', 4), ('Open MPI tcp', 'def', 'netns_mpi_tcp', 4)]
sizes = [4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20]
agg = {}
for mode in ('quiet', 'hogs'):
    for r in (1, 2, 3):
        print(f'## {mode} {r}')
        print('| | ' + ' | '.join(f'{s >> 20} MiB' for s in sizes) + ' |')
        print('|---' * (len(sizes) + 1) + '|')
        for name, var, stem, c in cols:
            p = f'{base}/{mode}{r}-{var}/results/{stem}_n4_2gbit.txt'
            if not os.path.exists(p): continue
            d = rows(p)
            vals = [pct(s, float(d[s][c])) if s in d else float('nan') for s in sizes]
            for s, v in zip(sizes, vals): agg.setdefault((mode, name, s), []).append(v)
            print(f'| {name} | ' + ' | '.join(f'{v:.1f}' for v in vals) + ' |')
        print()
print('## mean over rounds (min-max), quiet / busy')
print('| | ' + ' | '.join(f'{s >> 20} MiB' for s in sizes) + ' |')
print('|---' * (len(sizes) + 1) + '|')
for name, *_ in cols:
    cells = []
    for s in sizes:
        q = agg.get(('quiet', name, s)); h = agg.get(('hogs', name, s))
        if not q or not h: cells.append('-'); continue
        cells.append(f'{statistics.mean(q):.1f} / {statistics.mean(h):.1f}')
    print(f'| {name} | ' + ' | '.join(cells) + ' |')
print()
print('## loss to the load (quiet mean - busy mean, points of the link)')
for name, *_ in cols:
    cells = []
    for s in sizes:
        q = agg.get(('quiet', name, s)); h = agg.get(('hogs', name, s))
        cells.append('-' if not q or not h else f'{statistics.mean(q) - statistics.mean(h):+.1f}')
    print(f'| {name} | ' + ' | '.join(cells) + ' |')
print()
print('## gyre (defaults, in place) / best peer per size-run')
for mode in ('quiet', 'hogs'):
    for r in (1, 2, 3):
        ratios = []
        for s in sizes:
            def get(stem, c, var='def'):
                p = f'{base}/{mode}{r}-{var}/results/{stem}_n4_2gbit.txt'
                if not os.path.exists(p): return None
                d = rows(p); return pct(s, float(d[s][c])) if s in d else None
            g = get('netns_gyre_tcp', 9)
            peers = [v for v in (get(st, 4) for st in ('netns_gloo_allreduce_ring', 'netns_gloo_ring_chunked', 'netns_torch_gloo', 'netns_mpi_tcp')) if v]
            if g and peers: ratios.append(g / max(peers))
        if ratios: print(f'{mode} {r}: ' + ' '.join(f'{x:.3f}' for x in ratios))

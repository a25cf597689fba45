#!/usr/bin/env python3
"""spin_backoff_host.sh's output (bench/results/spin_backoff/host_<quiet|hogs>.txt): per
transport and size, gyre before (old) and after (new), in place, us per op over the three
rounds (min-max), after/before per round, and Open MPI's (default) range.
Usage: spin_backoff_host_summary.py FILE."""
import collections, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 6 or not f[0].startswith('r'): continue
    _, v, t, size, _, inplace = f[:6]
    d[(v, t, int(size))].append(float(inplace))
sizes = sorted({k[2] for k in d})
def rng(xs): return f'{min(xs):.0f}-{max(xs):.0f}' if xs else '-'
for t in ('shm', 'tcp'):
    print(f'## {t}, 4 ranks: us per op in place, min-max over the rounds')
    print('| size | before | after | after / before, per round | Open MPI |')
    print('|---|---|---|---|---|')
    for s in sizes:
        o, n, m = d[('old', t, s)], d[('new', t, s)], d[('mpi', 'default', s)]
        label = f'{s >> 20} MiB' if s >= 1 << 20 else f'{s >> 10} KiB' if s >= 1024 else f'{s} B'
        print(f'| {label} | {rng(o)} | {rng(n)} | ' + ', '.join(f'{b / a:.2f}' for a, b in zip(o, n)) + f' | {rng(m)} |')
    print()

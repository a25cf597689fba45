#!/usr/bin/env python3
"""gyre-sim's prediction against a measured tools/netns_bench.sh --compare-algos run.

    tools/sim_validate.py MEASURED.txt -- GYRE-SIM-CLUSTER-FLAGS...
    e.g. tools/sim_validate.py 4x1_500mbit.txt -- --hosts 4 --ranks-per-host 1 --nic host \
             --link 500mbit --link-burst 131072 --alpha-us 15 --as-bench 3 -n 6 -w 1

MEASURED.txt holds the `compare: bytes=..` lines of one or more runs (REPEAT=2 prints
each run's); the measured time of a cell is the fastest run's (noise on a shared host
only adds time), the range is printed beside it. gyre-sim runs with --compare-algos over
the measured sizes (give it the measured run's sequence: --as-bench R -n N -w W). Prints a markdown table, algorithm by algorithm (ring, tree, rd, hier
where measured; on one rank per host hier is the flat ring), then per bound how many
cells are within it: 10% from --large (64 KiB) up, 25% below. Exit status 1 when a cell
is out of bounds and --check is given; 2 on bad input.

Options (before --): --sim PATH (default build/bin/gyre-sim), --large BYTES (65536),
--bound-large F (0.10), --bound-small F (0.25), --algos ring,tree,hier (which columns
count), --min-bytes N (ignore smaller sizes), --check.

--fit NAME=LO:HI:STEP[,NAME=LO:HI:STEP...]: fit a cluster's constants instead of
taking them as given. NAME is a numeric gyre-sim flag without its dashes (alpha-us,
shm-alpha-us, slice-overhead-us, ...); every point of the grid is predicted (a flag
given after -- with the same name is replaced), and the point with the most cells
within their bounds wins, ties going to the smaller sum of |log(predicted/measured)|.
Prints `fit: NAME=V ... : K of N within bounds (...)`, the runner-up, then the winner's
table (--check applies to it). At most 2,000 points. Fit on one run and validate on
another (two files, two calls) to see whether the constants carry over.
"""
import itertools
import math
import re
import subprocess
import sys


def parse_compare(lines):
    """{bytes: {algo: [us, ...]}} from `compare: bytes=.. X_us=..` lines."""
    cells = {}
    for line in lines:
        if not line.startswith("compare: bytes="):
            continue
        fields = dict(re.findall(r"(\w+)=([\w.]+)", line))
        size = int(fields["bytes"])
        for key, value in fields.items():
            if key.endswith("_us"):
                cells.setdefault(size, {}).setdefault(key[:-3], []).append(float(value))
        if "auto_algo" in fields:
            cells.setdefault(size, {}).setdefault("auto_algo", []).append(fields["auto_algo"])
    return cells


def human_bytes(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def human_us(us):
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.0f} us"


def parse_grid(spec):
    """[(name, [values...]), ...] from `alpha-us=10:60:5,shm-alpha-us=2:40:2`."""
    grid = []
    for part in spec.split(","):
        m = re.fullmatch(r"([a-z][a-z0-9-]*)=([0-9.]+):([0-9.]+):([0-9.]+)", part.strip())
        if not m:
            raise ValueError(f"--fit: `{part}` is not NAME=LO:HI:STEP (alpha-us=10:60:5)")
        name, lo, hi, step = m.group(1), float(m.group(2)), float(m.group(3)), float(m.group(4))
        if step <= 0 or hi < lo:
            raise ValueError(f"--fit: {name}: need LO <= HI and STEP > 0")
        values = [lo + i * step for i in range(int((hi - lo) / step + 1e-9) + 1)]
        grid.append((name, [int(v) if v == int(v) else round(v, 6) for v in values]))
    points = 1
    for _, values in grid:
        points *= len(values)
    if points > 2000:
        raise ValueError(f"--fit: {points} points; at most 2000")
    return grid


def with_flags(sim_flags, setting):
    """sim_flags with --NAME VALUE for each (name, value) in setting, replacing any given."""
    out, i = [], 0
    names = {f"--{n}" for n, _ in setting}
    while i < len(sim_flags):
        if sim_flags[i] in names and i + 1 < len(sim_flags):
            i += 2
            continue
        out.append(sim_flags[i])
        i += 1
    for name, value in setting:
        out += [f"--{name}", str(value)]
    return out


def sweeps(sizes):
    """gyre-sim size arguments: one sweep when the sizes grow by one whole factor (so that,
    as in the measured run, each size follows the one before it: with --as-bench the token
    buckets carry over); else one run per size."""
    factors = {b // a for a, b in zip(sizes, sizes[1:]) if a and b % a == 0}
    geometric = len(sizes) > 1 and len(factors) == 1 and all(
        b == a * next(iter(factors)) for a, b in zip(sizes, sizes[1:]))
    if geometric:
        return [["-b", str(sizes[0]), "-e", str(sizes[-1]), "-f", str(next(iter(factors)))]]
    return [["-b", str(b), "-e", str(b)] for b in sizes]


def predict(sim, sim_flags, sizes):
    """{bytes: {algo: us, 'auto_algo': name}} from gyre-sim --compare-algos."""
    predicted = {}
    for sweep in sweeps(sizes):
        out = subprocess.run([sim, *sim_flags, "--compare-algos", *sweep],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"gyre-sim failed: {out.stderr.strip()}")
        for b, c in parse_compare(out.stdout.splitlines()).items():
            predicted[b] = {k: v[0] for k, v in c.items()}
    missing = [b for b in sizes if b not in predicted]
    if missing:
        raise RuntimeError(f"gyre-sim printed no row for {missing}")
    return predicted


def compare(measured, predicted, algos, large, bounds):
    """Each cell against the fastest measured run: (rows, within, out_of_bounds, misfit),
    within[big] = [cells in bounds, cells], misfit the sum of |log(predicted/measured)|."""
    rows, out_of_bounds, misfit = [], [], 0.0
    within = {True: [0, 0], False: [0, 0]}
    for size in sorted(measured):
        row = [human_bytes(size)]
        for algo in algos:
            # On one rank per host the measured hier is the flat ring: gyre-sim prints no
            # hier there, so it is compared with the predicted ring.
            sim_algo = algo if algo in predicted.get(size, {}) else (
                "ring" if algo == "hier" else None)
            runs = measured[size].get(algo)
            if not runs or sim_algo is None:
                row.append("-")
                continue
            p = predicted[size][sim_algo]
            best = min(runs)
            err = p / best - 1
            misfit += abs(math.log(p / best)) if p > 0 and best > 0 else math.inf
            big = size >= large
            within[big][1] += 1
            ok = abs(err) <= bounds[big]
            within[big][0] += ok
            if not ok:
                out_of_bounds.append(f"{algo} at {human_bytes(size)}: {err:+.0%}")
            rng = human_us(best) if len(runs) == 1 else f"{human_us(min(runs))}-{human_us(max(runs))}"
            row.append(f"{human_us(p)} / {rng} ({err:+.0%}){'' if ok else ' **out**'}")
        picks = ", ".join(measured[size].get("auto_algo", []))
        row.append(f"{predicted[size].get('auto_algo', '?')} / {picks}")
        rows.append(row)
    return rows, within, out_of_bounds, misfit


def fit(sim, sim_flags, sizes, measured, grid, algos, large, bounds):
    """The best and the runner-up grid point, best first: (cells in bounds, cells, misfit,
    setting)."""
    scored = []
    for values in itertools.product(*(v for _, v in grid)):
        setting = list(zip((n for n, _ in grid), values))
        predicted = predict(sim, with_flags(sim_flags, setting), sizes)
        _, within, _, misfit = compare(measured, predicted, algos, large, bounds)
        inside = within[True][0] + within[False][0]
        scored.append((inside, within[True][1] + within[False][1], misfit, setting))
    scored.sort(key=lambda s: (-s[0], s[2]))
    return scored[:2]


def describe(setting):
    return " ".join(f"{n}={v}" for n, v in setting)


def main(argv):
    if "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    ours, sim_flags = argv[1:argv.index("--")], argv[argv.index("--") + 1:]
    opts = {"--sim": "build/bin/gyre-sim", "--large": "65536", "--bound-large": "0.10",
            "--bound-small": "0.25", "--algos": "ring,tree,hier", "--min-bytes": "0",
            "--fit": ""}
    check = False
    files = []
    i = 0
    while i < len(ours):
        if ours[i] == "--check":
            check = True
        elif ours[i] in opts and i + 1 < len(ours):
            opts[ours[i]] = ours[i + 1]
            i += 1
        elif ours[i].startswith("--"):
            print(f"sim_validate: unknown option {ours[i]}", file=sys.stderr)
            return 2
        else:
            files.append(ours[i])
        i += 1
    if not files:
        print("sim_validate: no measured file", file=sys.stderr)
        return 2
    lines = []
    for f in files:
        with open(f) as fh:
            lines += fh.read().splitlines()
    measured = parse_compare(lines)
    measured = {b: c for b, c in measured.items() if b >= int(opts["--min-bytes"])}
    if not measured:
        print(f"sim_validate: no `compare:` lines in {', '.join(files)}", file=sys.stderr)
        return 2
    sizes = sorted(measured)
    algos = [a for a in opts["--algos"].split(",") if a]
    large = int(opts["--large"])
    bounds = {True: float(opts["--bound-large"]), False: float(opts["--bound-small"])}
    try:
        if opts["--fit"]:
            grid = parse_grid(opts["--fit"])
            ranked = fit(opts["--sim"], sim_flags, sizes, measured, grid, algos, large, bounds)
            for label, (inside, cells, misfit, setting) in zip(("fit", "runner-up"), ranked):
                print(f"{label}: {describe(setting)}: {inside} of {cells} within bounds "
                      f"(sum |log(predicted/measured)| {misfit:.2f})")
            sim_flags = with_flags(sim_flags, ranked[0][3])
        predicted = predict(opts["--sim"], sim_flags, sizes)
    except (ValueError, RuntimeError) as e:
        print(f"sim_validate: {e}", file=sys.stderr)
        return 2
    rows, within, out_of_bounds, _ = compare(measured, predicted, algos, large, bounds)
    print("| size | " + " | ".join(algos) + " | auto: sim pick / measured pick |")
    print("|---|" + "---|" * len(algos) + "---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    for big in (True, False):
        ok, n = within[big]
        if n:
            side = f">= {human_bytes(large)}" if big else f"< {human_bytes(large)}"
            print(f"within {bounds[big]:.0%} {side}: {ok} of {n}")
    for line in out_of_bounds:
        print(f"out of bounds: {line}")
    return 1 if check and out_of_bounds else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

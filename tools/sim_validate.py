#!/usr/bin/env python3
"""gyre-sim's prediction against a measured tools/netns_bench.sh --compare-algos run.

    tools/sim_validate.py MEASURED.txt -- GYRE-SIM-CLUSTER-FLAGS...
    e.g. tools/sim_validate.py 4x1_500mbit.txt -- --hosts 4 --ranks-per-host 1 --nic host \
             --link 500mbit --link-burst 131072 --alpha-us 15 --as-bench 3 -n 6 -w 1

MEASURED.txt holds the `compare: bytes=..` lines of one or more runs (REPEAT=2 prints
each run's); the measured time of a cell is the fastest run's (noise on a shared machine
only adds time), the range is printed beside it. gyre-sim runs with --compare-algos over
the measured sizes (give it the measured run's sequence: --as-bench R -n N -w W). Prints a markdown table, algorithm by algorithm (ring, tree, rd, hier
where measured; on one rank per host hier is the flat ring), then per bound how many
cells are within it: 10% from --large (64 KiB) up, 25% below. Exit status 1 when a cell
is out of bounds and --check is given; 2 on bad input.

Options (before --): --sim PATH (default build/bin/gyre-sim), --large BYTES (65536),
--bound-large F (0.10), --bound-small F (0.25), --algos ring,tree,hier (which columns
count), --min-bytes N (ignore smaller sizes), --check.
"""
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


def main(argv):
    if "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    ours, sim_flags = argv[1:argv.index("--")], argv[argv.index("--") + 1:]
    opts = {"--sim": "build/bin/gyre-sim", "--large": "65536", "--bound-large": "0.10",
            "--bound-small": "0.25", "--algos": "ring,tree,hier", "--min-bytes": "0"}
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
    # One gyre-sim sweep when the sizes grow by one whole factor (so that, as in the
    # measured run, each size follows the one before it: with --as-bench the token buckets
    # carry over); else one run per size.
    factors = {b // a for a, b in zip(sizes, sizes[1:]) if a and b % a == 0}
    geometric = len(sizes) > 1 and len(factors) == 1 and all(
        b == a * next(iter(factors)) for a, b in zip(sizes, sizes[1:]))
    runs = ([["-b", str(sizes[0]), "-e", str(sizes[-1]), "-f", str(next(iter(factors)))]]
            if geometric else [["-b", str(b), "-e", str(b)] for b in sizes])
    predicted = {}
    for sweep in runs:
        out = subprocess.run([opts["--sim"], *sim_flags, "--compare-algos", *sweep],
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(f"sim_validate: gyre-sim failed: {out.stderr.strip()}", file=sys.stderr)
            return 2
        for b, c in parse_compare(out.stdout.splitlines()).items():
            predicted[b] = {k: v[0] for k, v in c.items()}
    missing = [b for b in sizes if b not in predicted]
    if missing:
        print(f"sim_validate: gyre-sim printed no row for {missing}", file=sys.stderr)
        return 2
    algos = [a for a in opts["--algos"].split(",") if a]
    large = int(opts["--large"])
    bounds = {True: float(opts["--bound-large"]), False: float(opts["--bound-small"])}
    print("| size | " + " | ".join(algos) + " | auto: sim pick / measured pick |")
    print("|---|" + "---|" * len(algos) + "---|")
    within = {True: [0, 0], False: [0, 0]}
    out_of_bounds = []
    for size in sizes:
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

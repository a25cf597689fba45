#!/usr/bin/python3
"""Plots gyre-bench results: bus bandwidth and time against message size, side by side.

    /usr/bin/python3 tools/plot_bench.py RESULTS... [-l LABEL]... [-o OUT] [--series FIELD]

RESULTS are files gyre-bench wrote with --csv or --json, or plain nccl-tests-style text
tables (the stdout of gyre-bench or of nccl-tests' *_perf: `#` comment lines and 13-column
rows `size count type redop root time algbw busbw #wrong time algbw busbw #wrong`;
nccl-tests' older 12-column rows without root are read too), or the tables of the peer
all-reduce harness (gloo_bench, mpi_bench, torch_bench: 11-column rows `size count type
redop time algbw busbw #wrong iters p50 busbw_p50`, one group, in place unless the `# sweep`
line ends in out-of-place: plot them with --group in_place). Each file is one series,
labelled by -l (one per file, in order) or else by its file name; --series FIELD splits
a file further by a row field (collective, algorithm, type or redop) and adds its value
to the label. Both axes are log-scaled; sizes are labelled in B/KiB/MiB/GiB. Writes OUT.png
and OUT.svg (default ./bench), or only the format -o names when it ends in .png or .svg.
--group picks the out-of-place (default) or in-place numbers. --link-rate GBPS draws a
dashed line at that busbw (a shaped link's rate in GB/s: the ring's ceiling).

Needs matplotlib (Debian: python3-matplotlib, installed by tools/setup.sh); standard
library otherwise. Exit status 0 on success, 2 for a wrong command line or a file it
cannot read, naming the file and line.
"""

import argparse
import csv
import json
import os
import sys

GROUPS = ("out_of_place", "in_place")
FIELDS = ("collective", "algorithm", "type", "redop")


class InputError(Exception):
    pass


def number(text, where):
    """A float from a table field; None for N/A or empty (a group the collective lacks)."""
    if text in ("", "N/A", None):
        return None
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{where}: '{text}' is not a number")


def read_json(path):
    with open(path) as f:
        try:
            doc = json.load(f)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: not JSON: {e}")
    if doc.get("schema") != "gyre-bench-results":
        raise InputError(f"{path}: not a gyre-bench --json file (no schema gyre-bench-results)")
    if doc.get("version") != 1:
        raise InputError(f"{path}: schema version {doc.get('version')} (this script reads 1)")
    rows = []
    for r in doc["rows"]:
        row = {k: r.get(k) or "" for k in FIELDS}
        row["size"] = r["size"]
        for g in GROUPS:
            v = r.get(g)
            row[g] = (v["time_us"], v["busbw"]) if v else None
        rows.append(row)
    return rows


def read_csv(path):
    rows = []
    with open(path, newline="") as f:
        for n, r in enumerate(csv.DictReader(f), start=2):
            where = f"{path}:{n}"
            try:
                row = {k: r.get(k) or "" for k in FIELDS}
                row["size"] = int(r["size"])
                for g, p in zip(GROUPS, ("oop", "ip")):
                    t, b = number(r[p + "_time_us"], where), number(r[p + "_busbw"], where)
                    row[g] = (t, b) if t is not None else None
            except (KeyError, TypeError, ValueError):
                raise InputError(f"{where}: not a gyre-bench --csv row")
            rows.append(row)
    return rows


def read_table(path):
    """nccl-tests' text output: `#` comments (gyre-bench names the collective in
    `# Collective test starting: gyre-bench NAME`), then whitespace-separated rows.
    Also the peer harness's 11-column rows (one group: time algbw busbw #wrong, then
    iters p50 busbw_p50), in place unless its `# sweep ...` line ends in out-of-place."""
    rows = []
    collective = ""
    start = "# Collective test starting: gyre-bench "
    harness_group = "in_place"
    with open(path, errors="replace") as f:
        for n, line in enumerate(f, start=1):
            where = f"{path}:{n}"
            if line.startswith(start):
                collective = line[len(start):].strip()
            if line.startswith("# sweep ") and line.rstrip().endswith("out-of-place"):
                harness_group = "out_of_place"
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            w = s.split()
            if len(w) == 13:
                size, typ, redop, groups = w[0], w[2], w[3], (w[5:9], w[9:13])
            elif len(w) == 12:  # nccl-tests before the root column
                size, typ, redop, groups = w[0], w[2], w[3], (w[4:8], w[8:12])
            elif len(w) == 11:  # the peer harness: one group, then iters p50 busbw_p50
                size, typ, redop = w[0], w[2], w[3]
                groups = (w[4:8], None) if harness_group == "out_of_place" else (None, w[4:8])
            else:
                continue  # nccl-tests also prints lines such as "#  Rank ..." without '#'
            try:
                row = {"collective": collective, "algorithm": "", "type": typ, "redop": redop,
                       "size": int(size)}
            except ValueError:
                continue
            for g, fields in zip(GROUPS, groups):
                t, b = (number(fields[0], where), number(fields[2], where)) if fields else (None, None)
                row[g] = (t, b) if t is not None else None
            rows.append(row)
    if not rows:
        raise InputError(f"{path}: no result rows (expected nccl-tests' 13-column table "
                         "or the peer harness's 11-column one)")
    return rows


def read_results(path):
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    if path.endswith(".json"):
        return read_json(path)
    if path.endswith(".csv"):
        return read_csv(path)
    return read_table(path)


def size_label(b, _pos=None):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            v = b / scale
            return f"{v:g} {unit}"
    return f"{b:g} B"


def series_of(files, labels, split):
    """[(label, [(size, time_us, busbw)])] in file order."""
    out = []
    for i, path in enumerate(files):
        base = labels[i] if i < len(labels) else os.path.basename(path)
        groups = {}
        for row in read_results(path):
            key = row[split] if split else ""
            groups.setdefault(key, []).append(row)
        for key, rows in groups.items():
            label = f"{base} {key}".strip() if key else base
            out.append((label, rows))
    return out


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", metavar="RESULTS")
    p.add_argument("-l", "--label", action="append", default=[],
                   help="label of the next file's series (repeat, one per file)")
    p.add_argument("-o", "--output", default="bench",
                   help="output path without extension (writes .png and .svg), or ending "
                        "in .png or .svg for one file")
    p.add_argument("--series", choices=FIELDS, help="split each file's rows by this field")
    p.add_argument("--group", choices=GROUPS, default="out_of_place")
    p.add_argument("--title", default=None)
    p.add_argument("--link-rate", type=float, metavar="GBPS",
                   help="draw a dashed line at this busbw (GB/s), e.g. a shaped link's rate")
    args = p.parse_args(argv)
    if len(args.label) > len(args.files):
        p.error(f"{len(args.label)} labels for {len(args.files)} files")
    try:
        series = series_of(args.files, args.label, args.series)
    except (InputError, OSError) as e:
        print(f"plot_bench: {e}", file=sys.stderr)
        return 2

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, LogLocator
    except ImportError:
        print("plot_bench: needs matplotlib: apt-get install python3-matplotlib "
              "(tools/setup.sh), then run with /usr/bin/python3", file=sys.stderr)
        return 2

    fig, (ax_bw, ax_t) = plt.subplots(1, 2, figsize=(13, 5))
    plotted = 0
    for label, rows in series:
        pts = sorted((r["size"], r[args.group]) for r in rows if r[args.group] and r["size"] > 0)
        if not pts:
            continue
        sizes = [s for s, _ in pts]
        ax_t.plot(sizes, [g[0] for _, g in pts], marker="o", markersize=3, label=label)
        # busbw is 0 where the time rounds to nothing; a log axis cannot show it.
        bw = [(s, g[1]) for s, g in pts if g[1] and g[1] > 0]
        ax_bw.plot([s for s, _ in bw], [b for _, b in bw], marker="o", markersize=3, label=label)
        plotted += 1
    if plotted == 0:
        print(f"plot_bench: no {args.group} rows with a size > 0 in {', '.join(args.files)}",
              file=sys.stderr)
        return 2
    if args.link_rate:
        ax_bw.axhline(args.link_rate, color="black", linestyle="--", linewidth=1,
                      label=f"link rate ({args.link_rate:g} GB/s)")
    group = args.group.replace("_", "-")
    for ax, ylabel, title in ((ax_bw, "bus bandwidth (GB/s)", "busbw"),
                              (ax_t, "time per op (us)", "time")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=4))
        ax.xaxis.set_major_formatter(FuncFormatter(size_label))
        ax.tick_params(axis="x", labelrotation=45)
        ax.set_xlabel("message size")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title} ({group})")
        ax.grid(True, which="major", alpha=0.4)
        ax.grid(True, which="minor", alpha=0.15)
        ax.legend(fontsize="small")
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()

    out = args.output
    targets = [out] if out.endswith((".png", ".svg")) else [out + ".png", out + ".svg"]
    for t in targets:
        d = os.path.dirname(t)
        if d and not os.path.isdir(d):
            print(f"plot_bench: {t}: directory {d} does not exist", file=sys.stderr)
            return 2
        fig.savefig(t, dpi=110)
        print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

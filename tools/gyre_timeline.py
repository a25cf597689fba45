#!/usr/bin/env python3
"""Merges the per-rank GYRE_TIMELINE files into one Chrome trace on one clock.

    python3 tools/gyre_timeline.py FILES_OR_DIRS... -o merged.json [--report]
    python3 tools/gyre_timeline.py FILES_OR_DIRS... --draw timeline.png [--window A:B]

Each rank's file (base/timeline.h; schema "gyre-timeline", version 1) has its spans in
CLOCK_MONOTONIC microseconds and one instant on both its monotonic and its Unix clock.
This tool moves every span onto the Unix clock (so ranks of several hosts line up as
well as their clocks do) and starts the merged trace at 0; process ids are the ranks.
Open the result in chrome://tracing or https://ui.perfetto.dev.

--report prints, per rank, what gyre-train's trace says about overlap: each "bucket
all-reduce" span (GradSync's worker) against the "backward" span of the same step (the
training thread), one line per rank:
  overlap: rank R: S steps, B bucket all-reduces (b per step), all-reduce T ms, of it
           during backward H ms (fraction F), buckets that started during backward K
and one line per step with `--steps`.

--draw OUT (.png or .svg) draws the merged trace as a picture, for a page or a report
where a trace viewer is not at hand: one row per rank and thread, time across, a bar per
span coloured by its name, nested spans drawn inside their parent (thinner). --window A:B
draws gyre-train's steps A to B of the lowest rank (default 10:12: three steps after the
start-up), or a time window in ms with --window 5.0ms:20.0ms; a trace without steps is
drawn whole. Needs matplotlib (python3-matplotlib, tools/setup.sh) for --draw only.

A directory argument means its *.json files other than the output. Standard library
otherwise; exit status 2 for unreadable input or a window the trace does not have.
"""

import argparse
import collections
import glob
import json
import os
import sys


class InputError(Exception):
    pass


def load(paths, output):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(f for f in glob.glob(os.path.join(p, "*.json"))
                            if not output or os.path.abspath(f) != os.path.abspath(output))
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise InputError(f"{p}: no such file or directory")
    traces = []
    for f in files:
        try:
            with open(f) as fh:
                d = json.load(fh)
        except (OSError, json.JSONDecodeError) as e:
            raise InputError(f"{f}: cannot read: {e}")
        other = d.get("otherData", {}) if isinstance(d, dict) else {}
        if other.get("schema") != "gyre-timeline":
            raise InputError(f"{f}: not a GYRE_TIMELINE file (no otherData.schema gyre-timeline)")
        if other.get("version") != 1:
            raise InputError(f"{f}: schema version {other.get('version')} (this tool reads 1)")
        traces.append(d)
    if not traces:
        raise InputError("no timeline files in " + " ".join(paths))
    return traces


def merge(traces):
    """Every event on the Unix clock, in microseconds from the earliest span."""
    shifted = []
    for d in traces:
        clock = d["otherData"]["clock"]
        offset_us = (clock["unix_ns"] - clock["monotonic_ns"]) / 1e3
        for e in d["traceEvents"]:
            e = dict(e)
            if "ts" in e:
                e["ts"] = e["ts"] + offset_us
            shifted.append(e)
    start = min(e["ts"] for e in shifted if "ts" in e)
    for e in shifted:
        if "ts" in e:
            e["ts"] = round(e["ts"] - start, 3)
    ranks = sorted(d["otherData"]["rank"] for d in traces)
    return {"traceEvents": shifted, "displayTimeUnit": "ms",
            "otherData": {"schema": "gyre-timeline-merged", "version": 1, "ranks": ranks,
                          "start_unix_us": start,
                          "dropped": sum(d["otherData"].get("dropped", 0) for d in traces)}}


def overlap_report(merged, per_step):
    out = []
    by_rank = collections.defaultdict(list)
    for e in merged["traceEvents"]:
        if e.get("ph") == "X":
            by_rank[e["pid"]].append(e)
    for rank in sorted(by_rank):
        events = by_rank[rank]
        backward = sorted((e for e in events if e["name"] == "backward"), key=lambda e: e["ts"])
        steps = sorted((e for e in events if e["name"] == "step"), key=lambda e: e["ts"])
        buckets = sorted((e for e in events if e["name"] == "bucket all-reduce"),
                         key=lambda e: e["ts"])
        if not steps or not buckets:
            out.append(f"overlap: rank {rank}: no gyre-train steps with bucket all-reduces")
            continue
        total = hidden = 0.0
        started_in = 0
        counts = []
        for i, step in enumerate(steps):
            s0, s1 = step["ts"], step["ts"] + step["dur"]
            bw = [b for b in backward if s0 <= b["ts"] <= s1]
            mine = [b for b in buckets if s0 <= b["ts"] <= s1]
            counts.append(len(mine))
            if not bw:
                continue
            b0, b1 = bw[0]["ts"], bw[0]["ts"] + bw[0]["dur"]
            step_hidden = 0.0
            for a in mine:
                a0, a1 = a["ts"], a["ts"] + a["dur"]
                total += a["dur"]
                step_hidden += max(0.0, min(a1, b1) - max(a0, b0))
                started_in += b0 <= a0 < b1
            hidden += step_hidden
            if per_step:
                out.append(f"step: rank {rank} #{step['args'].get('index', i)}: {len(mine)} "
                           f"buckets, backward {bw[0]['dur'] / 1e3:.3f} ms, all-reduce during "
                           f"it {step_hidden / 1e3:.3f} ms")
        per = sorted(set(counts))
        per_text = str(per[0]) if len(per) == 1 else f"{per[0]}-{per[-1]}"
        out.append(f"overlap: rank {rank}: {len(steps)} steps, {sum(counts)} bucket "
                   f"all-reduces ({per_text} per step), all-reduce {total / 1e3:.3f} ms, of it "
                   f"during backward {hidden / 1e3:.3f} ms (fraction "
                   f"{hidden / total if total else 0:.2f}), buckets that started during "
                   f"backward {started_in}")
    return out


# Colours of the names gyre writes (others get one from a fixed palette by name).
COLOURS = {
    "step": "#e8e8e8", "forward": "#4c72b0", "backward": "#dd8452",
    "finish (wait for all-reduces)": "#c44e52", "optimizer": "#8172b3",
    "bucket all-reduce": "#55a868", "allreduce": "#64b5cd",
    "reduce-scatter": "#937860", "all-gather": "#da8bc3",
    "tree up": "#8c8c8c", "tree down": "#ccb974",
    "host reduce-scatter": "#937860", "cross-host all-reduce": "#4c4c4c",
    "host all-gather": "#da8bc3",
}
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]


def colour_of(name):
    return COLOURS.get(name) or PALETTE[sum(map(ord, name)) % len(PALETTE)]


def window_of(merged, spec):
    """(t0, t1) in us: steps A:B of the lowest rank, or A ms:B ms; whole trace otherwise."""
    spans = [e for e in merged["traceEvents"] if e.get("ph") == "X"]
    if not spans:
        raise InputError("the trace has no spans to draw")
    whole = (min(e["ts"] for e in spans), max(e["ts"] + e["dur"] for e in spans))
    text = spec or "10:12"
    try:
        a, b = text.split(":")
        if a.endswith("ms") and b.endswith("ms"):
            return float(a[:-2]) * 1e3, float(b[:-2]) * 1e3
        a, b = int(a), int(b)
    except ValueError:
        raise InputError(f"--window {text!r}: expected A:B (steps) or A.Ams:B.Bms")
    low = min(e["pid"] for e in spans)
    steps = sorted((e for e in spans if e["name"] == "step" and e["pid"] == low),
                   key=lambda e: e["ts"])
    if not steps:
        if spec:
            raise InputError(f"--window {text}: the trace has no gyre-train steps")
        return whole
    if spec is None and len(steps) <= b:
        a, b = 0, min(2, len(steps) - 1)
    if not 0 <= a <= b < len(steps):
        raise InputError(f"--window {text}: rank {low} has steps 0-{len(steps) - 1}")
    return steps[a]["ts"], steps[b]["ts"] + steps[b]["dur"]


def draw(merged, out, spec):
    t0, t1 = window_of(merged, spec)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        raise InputError("--draw needs matplotlib: apt-get install python3-matplotlib "
                         "(tools/setup.sh), then run with /usr/bin/python3")

    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in merged["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    rows = collections.defaultdict(list)
    for e in merged["traceEvents"]:
        if e.get("ph") == "X" and e["ts"] < t1 and e["ts"] + e["dur"] > t0:
            rows[(e["pid"], e.get("tid"))].append(e)
    keys = sorted(rows)
    fig, ax = plt.subplots(figsize=(12, 0.55 * len(keys) + 1.6))
    seen = {}
    for y, key in enumerate(reversed(keys)):
        stack = []  # ends of the open spans: the nesting depth
        for e in sorted(rows[key], key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            depth = len(stack)
            stack.append(e["ts"] + e["dur"])
            h = 0.8 * (0.72 ** depth)
            x0, x1 = max(e["ts"], t0), min(e["ts"] + e["dur"], t1)
            ax.broken_barh([((x0 - t0) / 1e3, (x1 - x0) / 1e3)], (y - h / 2, h),
                           facecolors=colour_of(e["name"]), edgecolors="none")
            seen.setdefault(e["name"], colour_of(e["name"]))
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([f"rank {p}: {names.get((p, t), f'thread {t}')}" for p, t in reversed(keys)])
    ax.set_xlim(0, (t1 - t0) / 1e3)
    ax.set_xlabel("ms")
    ax.legend(handles=[Patch(color=c, label=n) for n, c in seen.items()], loc="upper center",
              bbox_to_anchor=(0.5, -0.06 - 0.6 / (0.55 * len(keys) + 1.6)), ncol=5, fontsize=8,
              frameon=False)
    ax.set_title(f"gyre timeline, {len({k[0] for k in keys})} ranks, "
                 f"{(t1 - t0) / 1e3:.1f} ms from {t0 / 1e3:.1f} ms")
    fig.savefig(out, bbox_inches="tight", dpi=110)
    print(f"drawn: {len(keys)} rows, {sum(len(v) for v in rows.values())} spans -> {out}")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    p.add_argument("-o", "--output", help="the merged trace (default: none written)")
    p.add_argument("--report", action="store_true", help="gyre-train's overlap, per rank")
    p.add_argument("--steps", action="store_true", help="with --report: one line per step")
    p.add_argument("--draw", metavar="OUT", help="a picture of the trace (.png or .svg)")
    p.add_argument("--window", help="with --draw: steps A:B (default 10:12) or A.Ams:B.Bms")
    args = p.parse_args(argv)
    if args.draw and not args.draw.endswith((".png", ".svg")):
        print(f"gyre_timeline: --draw {args.draw}: the name must end in .png or .svg",
              file=sys.stderr)
        return 2
    try:
        merged = merge(load(args.paths, args.output))
        if args.draw:
            draw(merged, args.draw, args.window)
    except InputError as e:
        print(f"gyre_timeline: {e}", file=sys.stderr)
        return 2
    if args.output:
        with open(args.output, "w") as f:
            json.dump(merged, f)
        print(f"merged: {len(merged['otherData']['ranks'])} ranks, "
              f"{sum(1 for e in merged['traceEvents'] if e.get('ph') == 'X')} spans -> {args.output}")
    if args.report:
        print("\n".join(overlap_report(merged, args.steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

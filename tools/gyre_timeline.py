#!/usr/bin/env python3
"""Merges the per-rank GYRE_TIMELINE files into one Chrome trace on one clock.

    python3 tools/gyre_timeline.py FILES_OR_DIRS... -o merged.json [--report]

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
and one line per step with `--steps`. A directory argument means its *.json files other
than the output. Standard library only; exit status 2 for unreadable input.
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


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    p.add_argument("-o", "--output", help="the merged trace (default: none written)")
    p.add_argument("--report", action="store_true", help="gyre-train's overlap, per rank")
    p.add_argument("--steps", action="store_true", help="with --report: one line per step")
    args = p.parse_args(argv)
    try:
        merged = merge(load(args.paths, args.output))
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

#!/usr/bin/env python3
"""Reads every rank's flight recorder dump and says what went wrong where.

    python3 tools/gyre_trace.py DIR_OR_FILES... [--last N] [--comm NAME]

The dumps are the gyre-trace-<communicator>-rank<R>.json files a communicator writes to
GYRE_TRACE_DIR on a failure, a stall report, SIGUSR1 or Communicator::dumpTrace()
(schema "gyre-flight-recorder", version 1; docs/observability.md). Per communicator it
prints, one finding per line, each starting with a fixed word so that scripts can grep:

  ranks:        how many ranks, whose dumps were found, why each was written
  missing dump: ranks without a dump (stopped, killed, or without GYRE_TRACE_DIR)
  where:        each rank's latest operation, its state, how long it ran, bytes moved
  not reached:  the newest collective #k started before the first rank gave up, and the
                ranks that did not start it, or started it only after
  mismatch:     the first sequence number at which ranks issued different calls
                (collective, dtype, op, count or root), and how many more differ
  blamed:       the rank the failure messages name as the culprit, and by whom
  slowest:      over the last N collectives every rank completed, the rank that arrived
                last most often (everyone waits for it) and by how much on average
  verdict:      one line: the likeliest explanation

Standard library only. Exit status 0 when dumps were read (whatever they say), 2 when none
could be (naming the file and why).
"""

import argparse
import collections
import glob
import json
import os
import re
import sys

SCHEMA = "gyre-flight-recorder"
REDUCING = {"allreduce", "reduce", "reducescatter", "barrier"}


class InputError(Exception):
    pass


def load(paths):
    """{comm: {rank: dump}}"""
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(glob.glob(os.path.join(p, "gyre-trace-*.json")))
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise InputError(f"{p}: no such file or directory")
    if not files:
        raise InputError(f"no gyre-trace-*.json dumps in {' '.join(paths)}")
    comms = collections.defaultdict(dict)
    for f in files:
        try:
            with open(f) as fh:
                d = json.load(fh)
        except (OSError, json.JSONDecodeError) as e:
            raise InputError(f"{f}: cannot read: {e}")
        if d.get("schema") != SCHEMA:
            raise InputError(f"{f}: not a flight recorder dump (schema {d.get('schema')!r})")
        if d.get("version") != 1:
            raise InputError(f"{f}: schema version {d.get('version')} (this tool reads 1)")
        d["_file"] = f
        comms[d["comm"]][d["rank"]] = d
    return comms


def to_unix(d, ns):
    """A dump's monotonic time as Unix seconds, through its clock pair."""
    if ns is None:
        return None
    return (ns - d["clock"]["monotonic_ns"] + d["clock"]["unix_ns"]) / 1e9


def describe(e):
    parts = [e["dtype"]]
    if e["collective"] in REDUCING:
        parts.append(e["op"])
    s = f"{e['collective']} #{e['seq'] if e['seq'] is not None else '?'} ({' '.join(parts)}, count {e['count']}"
    if e["collective"] == "sendrecv":
        s += f", peer {e['peer']}"
    elif e["root"] >= 0:
        s += f", root {e['root']}"
    return s + ")" + called(e)


def called(e):
    """The caller's name for the call, where it gave one (gyre_torch: torch's)."""
    return f" called as {e['call']}" if e.get("call") else ""


def signature(e):
    op = e["op"] if e["collective"] in REDUCING else "-"
    return f"{e['collective']} {e['dtype']} {op} count {e['count']} root {e['root']}"


def ranks_text(ranks):
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(str(r) for r in ranks)


def collectives_of(d):
    """{seq: entry} of this rank's collectives (send/recv count per peer: left out)."""
    out = {}
    for e in d["entries"]:
        if e["collective"] != "sendrecv" and e["seq"] is not None:
            out[e["seq"]] = e
    return out


def analyse(comm, dumps, last_n, out):
    size = max(d["size"] for d in dumps.values())
    have = sorted(dumps)
    missing = [r for r in range(size) if r not in dumps]
    out.append(f"communicator {comm!r}: {size} ranks")
    reasons = collections.defaultdict(list)
    for r in have:
        reasons[dumps[r]["reason"]].append(r)
    out.append("ranks: dumps from " + ranks_text(have) + " (" +
               "; ".join(f"{why}: {ranks_text(rs)}" for why, rs in sorted(reasons.items())) + ")")
    if missing:
        out.append(f"missing dump: {ranks_text(missing)} (stopped, killed, or GYRE_TRACE_DIR unset there)")

    # Where each rank is: its newest entry.
    for r in have:
        d = dumps[r]
        if not d["entries"]:
            out.append(f"where: rank {r}: nothing recorded (capacity {d['capacity']})")
            continue
        e = d["entries"][-1]
        done = [x for x in d["entries"] if x["state"] == "completed" and x["collective"] != "sendrecv"]
        line = f"where: rank {r}: {describe(e)} {e['state']}"
        if e["start_ns"] is not None:
            end = e["end_ns"] if e["end_ns"] is not None else d["clock"]["monotonic_ns"]
            line += f" after {(end - e['start_ns']) / 1e9:.3f} s"
        elif e["state"] == "failed":
            line += " before it started (the communicator was already aborted)"
        line += f", {e['bytes_sent']} bytes sent, {e['bytes_received']} received"
        if done:
            line += f"; last completed: #{done[-1]['seq']}"
        out.append(line)

    per_rank = {r: collectives_of(dumps[r]) for r in have}
    verdicts = []

    # Mismatch: the first sequence number whose calls differ between ranks.
    seqs = sorted(set().union(*[set(c) for c in per_rank.values()])) if per_rank else []
    first_bad, more = None, 0
    for k in seqs:
        groups = collections.defaultdict(list)
        for r in have:
            if k in per_rank[r]:
                groups[signature(per_rank[r][k])].append(r)
        if len(groups) > 1:
            if first_bad is None:
                first_bad = (k, groups)
            else:
                more += 1
    if first_bad:
        k, groups = first_bad
        ordered = sorted(groups.items(), key=lambda g: (len(g[1]), g[1]))
        text = "; ".join(f"{ranks_text(rs)}: {sig}" for sig, rs in ordered)
        out.append(f"mismatch: #{k}: {text}" + (f" ({more} later numbers differ too)" if more else ""))
        odd = ordered[0][1]
        verdicts.append(f"{ranks_text(odd)} issued a different call at #{k} "
                        f"({ordered[0][0]} instead of {ordered[-1][0]})")

    # Not reached: the newest collective someone started before the first rank gave up. A
    # rank that was stopped and continued later starts its next call after the others have
    # failed; that start says nothing about where the job stood when it stopped.
    fails = [to_unix(dumps[r], e["end_ns"]) for r in have for e in per_rank[r].values()
             if e["state"] == "failed" and e["end_ns"] is not None]
    first_fail = min(fails) if fails else None
    started = [(k, r) for r in have for k, e in per_rank[r].items() if e["start_ns"] is not None
               and (first_fail is None or to_unix(dumps[r], e["start_ns"]) < first_fail)]
    if started:
        k = max(s for s, _ in started)
        first = next(per_rank[r][k] for s, r in started if s == k)
        kind = first["collective"]
        late = {}
        reached = []
        for r in range(size):
            if r not in dumps:
                late[r] = "no dump"
                continue
            e = per_rank[r].get(k)
            if e is None or e["start_ns"] is None:
                before = [s for s, x in per_rank[r].items() if x["start_ns"] is not None]
                late[r] = f"its newest collective is #{max(before)}" if before else "it started none"
            else:
                reached.append(r)
        # Started, but only after another rank had already given up.
        first_start = min(to_unix(dumps[r], per_rank[r][k]["start_ns"]) for r in reached)
        if first_fail is not None:
            for r in list(reached):
                t = to_unix(dumps[r], per_rank[r][k]["start_ns"])
                if t >= first_fail:
                    late[r] = (f"it started {t - first_start:.2f} s after the first rank, when "
                               f"another had already given up")
                    reached.remove(r)
        if late:
            out.append(f"not reached: {kind} #{k}{called(first)}: " +
                       "; ".join(f"rank {r} ({why})" for r, why in sorted(late.items())) +
                       f"; reached by {ranks_text(reached)}")
            if not first_bad:
                verdicts.append(f"{ranks_text(late)} did not reach {kind} #{k}{called(first)}: "
                                f"the others waited for it there")
        else:
            out.append(f"not reached: none: every rank started {kind} #{k}")

    # Blame from the failure messages.
    blamed = collections.defaultdict(list)
    for r in have:
        m = re.search(r"bytes: rank (\d+) (stalled|failed)", dumps[r].get("detail") or "")
        if m:
            blamed[(int(m.group(1)), m.group(2))].append(r)
        elif dumps[r]["reason"] == "stall":
            m = re.search(r"rank (\d+) has not arrived", dumps[r].get("detail") or "")
            if m:
                blamed[(int(m.group(1)), "stalled")].append(r)
    for (culprit, how), by in sorted(blamed.items()):
        out.append(f"blamed: rank {culprit} ({how}) by {ranks_text(by)}")

    # Slowest: among the last N collectives every dumped rank completed, who arrived last.
    common = sorted(set.intersection(*[
        {k for k, e in per_rank[r].items() if e["state"] == "completed"} for r in have]))
    window = common[-last_n:]
    if window and len(have) > 1:
        last_count = collections.Counter()
        behind = collections.defaultdict(float)
        for k in window:
            starts = {r: to_unix(dumps[r], per_rank[r][k]["start_ns"]) for r in have}
            first = min(starts.values())
            slow = max(starts, key=starts.get)
            last_count[slow] += 1
            for r, t in starts.items():
                behind[r] += t - first
        r, n = last_count.most_common(1)[0]
        out.append(f"slowest: over the last {len(window)} collectives all dumped ranks completed "
                   f"(#{window[0]}-#{window[-1]}), rank {r} arrived last {n} times, on average "
                   f"{behind[r] / len(window) * 1e3:.3f} ms after the first to arrive")
    if not verdicts and blamed:
        (culprit, how), by = max(blamed.items(), key=lambda kv: len(kv[1]))
        verdicts.append(f"rank {culprit} {how} (named by {ranks_text(by)})")
    if missing and not verdicts:
        verdicts.append(f"{ranks_text(missing)} left no dump")
    out.append("verdict: " + ("; ".join(verdicts) if verdicts else "nothing wrong found"))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", metavar="DIR_OR_FILE")
    p.add_argument("--last", type=int, default=20, help="collectives for 'slowest' (default 20)")
    p.add_argument("--comm", help="only this communicator (its store prefix)")
    args = p.parse_args(argv)
    try:
        comms = load(args.paths)
    except InputError as e:
        print(f"gyre_trace: {e}", file=sys.stderr)
        return 2
    if args.comm is not None:
        if args.comm not in comms:
            print(f"gyre_trace: no dumps of communicator {args.comm!r} (found: "
                  f"{', '.join(repr(c) for c in comms)})", file=sys.stderr)
            return 2
        comms = {args.comm: comms[args.comm]}
    out = []
    for comm, dumps in sorted(comms.items()):
        analyse(comm, dumps, args.last, out)
        out.append("")
    print("\n".join(out).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

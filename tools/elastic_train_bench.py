#!/usr/bin/env python3
"""gyre-train under gyrerun --elastic: what a kill costs, measured as a user would see it.

    tools/elastic_train_bench.py [--build build] [--ranks 4] [--epochs 5] [--kills 6]
                                 [--max-samples 0] [--markdown]

Runs, in one go on one host: gyre-train without --elastic, with --elastic and no
failure, then `--kills` runs that SIGKILL one rank (local ranks in turn) while epoch 1 runs,
at 10%, 50% and 90% of it in turn (from rank 0's progress lines). For every kill it takes,
from stderr lines timestamped as they arrive:
  detect+shrink  kill -> the survivors' "N ranks go on (shrink ...)" line
  restart->grown gyrerun's "restarts as a newcomer" line -> "... joined: N ranks go on"
and from stdout the final test accuracy and mean samples/s. Prints one row per run and a
summary (median and worst); the accuracy difference is against the no-failure --elastic
run (the same epochs). Every run is bounded by a timeout.
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time


def run(args, elastic, kill_at=None, victim=0, restarts=1):
    cmd = [os.path.join(args.build, "bin", "gyrerun")]
    if elastic:
        cmd += ["--elastic", "--max-restarts", str(restarts)]
    cmd += ["-n", str(args.ranks), os.path.join(args.build, "bin", "gyre-train"),
            "--epochs", str(args.epochs), "--progress", "lines", "--progress-every", "0.05"]
    if args.max_samples:
        cmd += ["--max-samples", str(args.max_samples)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    err_lines = []  # (time, line)
    out = []
    killed = {"t": None}
    pct = re.compile(r"epoch 1/\d+ (\d+)%")

    def read_err():
        for line in p.stderr:
            now = time.monotonic()
            err_lines.append((now, line))
            m = pct.search(line)
            if kill_at is not None and killed["t"] is None and m and int(m.group(1)) >= kill_at:
                pids = subprocess.run(["pgrep", "-P", str(p.pid), "-x", "gyre-train"],
                                      capture_output=True, text=True).stdout.split()
                if len(pids) > victim:
                    killed["t"] = time.monotonic()
                    os.kill(int(pids[victim]), signal.SIGKILL)

    def read_out():
        out.extend(p.stdout)

    threads = [threading.Thread(target=read_err), threading.Thread(target=read_out)]
    for t in threads:
        t.start()
    try:
        rc = p.wait(timeout=600)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = "timeout"
    for t in threads:
        t.join(timeout=10)
    text = "".join(out)
    row = {"rc": rc, "acc": None, "sps": None, "shrink": None, "grown": None,
           "shrink_call": None, "grow_call": None}
    m = re.search(r"# final test_acc ([0-9.]+) samples_per_s ([0-9.]+)", text)
    if m:
        row["acc"], row["sps"] = float(m.group(1)), float(m.group(2))

    def first(pattern):
        for t, line in err_lines:
            m = re.search(pattern, line)
            if m:
                return t, m
        return None, None

    if killed["t"] is not None:
        t, m = first(r"ranks go on \(shrink (\d+) ms\)")
        if t:
            row["shrink"] = (t - killed["t"]) * 1e3
            row["shrink_call"] = float(m.group(1))
        t0, _ = first(r"restarts as a newcomer")
        t1, m = first(r"joined: \d+ ranks go on \(grow (\d+) ms\)")
        if t0 and t1:
            row["grown"] = (t1 - t0) * 1e3
            row["grow_call"] = float(m.group(1))
    if rc != 0:
        sys.stderr.write("".join(l for _, l in err_lines[-20:]))
    return row


def fmt(x, spec="{:.0f}"):
    return "-" if x is None else spec.format(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--kills", type=int, default=6)
    ap.add_argument("--max-samples", type=int, default=0)
    a = ap.parse_args()
    plain = run(a, elastic=False)
    base = run(a, elastic=True)
    print("| run | exit | test acc | acc - no-failure | samples/s | kill -> shrunk (ms) | "
          "shrink call (ms) | restart -> grown (ms) | grow call (ms) |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| plain (no --elastic) | {plain['rc']} | {fmt(plain['acc'], '{:.4f}')} | | "
          f"{fmt(plain['sps'])} | | | | |")
    print(f"| --elastic, no failure | {base['rc']} | {fmt(base['acc'], '{:.4f}')} | | "
          f"{fmt(base['sps'])} | | | | |")
    rows = []
    for k in range(a.kills):
        at = (10, 50, 90)[k % 3]
        victim = k % a.ranks
        r = run(a, elastic=True, kill_at=at, victim=victim)
        rows.append(r)
        diff = None if r["acc"] is None or base["acc"] is None else r["acc"] - base["acc"]
        print(f"| kill local rank {victim} at {at}% of epoch 1 | {r['rc']} | "
              f"{fmt(r['acc'], '{:.4f}')} | {fmt(diff, '{:+.4f}')} | {fmt(r['sps'])} | "
              f"{fmt(r['shrink'])} | {fmt(r['shrink_call'])} | {fmt(r['grown'])} | "
              f"{fmt(r['grow_call'])} |", flush=True)
    for key, name in (("shrink", "kill -> shrunk"), ("grown", "restart -> grown")):
        v = [r[key] for r in rows if r[key] is not None]
        if v:
            print(f"\n{name}: median {statistics.median(v):.0f} ms, worst {max(v):.0f} ms "
                  f"({len(v)} of {len(rows)} runs)")
    d = [abs(r["acc"] - base["acc"]) for r in rows if r["acc"] is not None and base["acc"]]
    if d:
        print(f"|test acc - no-failure run|: median {statistics.median(d):.4f}, "
              f"worst {max(d):.4f}")
    if plain["sps"] and base["sps"]:
        print(f"--elastic's cost without a failure (one small all-reduce a step): samples/s "
              f"{base['sps'] / plain['sps']:.3f}x of the plain run")


if __name__ == "__main__":
    main()

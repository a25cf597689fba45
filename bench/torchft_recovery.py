#!/usr/bin/env python3
"""torchft recovery: gyre's process group (gyre_torch.torchft.ProcessGroupGyre) against
torchft's ProcessGroupGloo, in the same run, interleaved.

    PYTHONPATH=<gyre_torch build> RUST_LOG=warn python bench/torchft_recovery.py \\
        [--reps 5] [--groups 2] [--heartbeat-ms 1000] [--victim last|first] [--pgs gyre,gloo]

Each repetition, for each process group: a Lighthouse; replica groups (one rank each,
python/examples/torchft_train.py: a small MLP under torchft's DDP and Manager on CPU)
started one after the other, so the first stays at the highest step and serves the
quorum's store; once all commit together, a random moment later the victim (the last
group, or --victim first: the store's group) is SIGKILLed; the survivors train on; the
victim is restarted and rejoins (healing from a survivor). Measured:
  recovery: kill -> the survivors' first step committed without the victim (the
            slowest survivor's)
  lost: the survivors' steps that did not commit between the kill and that step
  configure: the survivors' process-group configure after the kill (create/shrink, ms)
  rejoin: restart -> the restarted group's first committed step with everyone
  rejoin configure: the survivors' configure for that quorum (ms)
Prints one line a measurement and a markdown table (median and worst of each).
"""
import argparse
import os
import random
import statistics
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "python", "tests"))

from torchft_cluster import Group, Lighthouse, wait_for  # noqa: E402


def one(pg, args, logdir):
    lighthouse = Lighthouse(heartbeat_timeout_ms=args.heartbeat_ms,
                            join_timeout_ms=args.join_ms)
    groups = []
    n = args.groups
    kw = dict(step_sleep=args.step_sleep, timeout=args.timeout, seconds=args.seconds)
    try:
        for r in range(n):
            groups.append(Group(r, lighthouse.address, pg, logdir, **kw))
            if not wait_for(lambda: len(groups[-1].committed()) >= 2, 90):
                raise RuntimeError(f"{pg}: group {r} did not commit; its log:\n"
                                   f"{groups[-1].log_tail()}")
        if not wait_for(lambda: all(len(g.committed(n=n)) >= 5 for g in groups), 90):
            raise RuntimeError(f"{pg}: the {n} groups did not commit 5 steps together")
        victim = groups[0] if args.victim == "first" else groups[-1]
        survivors = [g for g in groups if g is not victim]
        time.sleep(random.uniform(0, 0.1))  # a random phase of the step
        killed = victim.kill()
        if not wait_for(lambda: all(len(g.committed(since=killed, n=n - 1)) >= 2
                                    for g in survivors), 60):
            raise RuntimeError(f"{pg}: the survivors did not commit within 60 s of the kill")
        # The first step committed without the victim (a step that had finished its
        # all-reduce before the kill may still commit in the old quorum: not a recovery).
        firsts = [g.committed(since=killed, n=n - 1)[0] for g in survivors]
        recovery = max(f["t"] for f in firsts) - killed
        lost = max(sum(1 for r in g.snapshot()
                       if killed < r["t"] <= f["t"] and not r["committed"])
                   for g, f in zip(survivors, firsts))
        configure = max(f["how"][1] for f in firsts)
        how = "/".join(sorted({f["how"][0] for f in firsts}))
        restarted = time.time()
        again = Group(victim.replica, lighthouse.address, pg, logdir, **kw)
        groups.append(again)
        if not wait_for(lambda: len(again.committed(n=n)) >= 3, 90):
            raise RuntimeError(f"{pg}: the restarted group did not rejoin within 90 s; "
                               f"its log:\n{again.log_tail()}")
        rejoin = again.committed(n=n)[0]["t"] - restarted
        rejoin_cfg = max(g.committed(since=restarted, n=n)[0]["how"][1] for g in survivors)
        return {"recovery": recovery, "lost": lost, "configure": configure, "how": how,
                "rejoin": rejoin, "rejoin_cfg": rejoin_cfg}
    finally:
        for g in groups:
            g.stop()
        lighthouse.shutdown()


def summary(values, fmt):
    return f"{fmt(statistics.median(values))} / {fmt(max(values))}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--pgs", default="gyre,gloo", help="gyre, gyre-rebuild, gloo")
    ap.add_argument("--victim", choices=["last", "first"], default="last")
    ap.add_argument("--heartbeat-ms", type=int, default=1000,
                    help="the Lighthouse's heartbeat timeout")
    ap.add_argument("--join-ms", type=int, default=1000,
                    help="the Lighthouse's join timeout (for stragglers)")
    ap.add_argument("--step-sleep", type=float, default=0.02)
    ap.add_argument("--timeout", type=float, default=10)
    ap.add_argument("--seconds", type=float, default=180)
    ap.add_argument("--logdir", default=None)
    args = ap.parse_args()
    pgs = args.pgs.split(",")
    results = {pg: [] for pg in pgs}
    with tempfile.TemporaryDirectory() as tmp:
        logdir = args.logdir or tmp
        for rep in range(args.reps):
            for pg in (pgs if rep % 2 == 0 else pgs[::-1]):
                m = one(pg, args, logdir)
                results[pg].append(m)
                print(f"rep {rep} {pg}: recovery {m['recovery'] * 1000:.0f} ms, lost "
                      f"{m['lost']}, configure {m['how']} {m['configure']:.1f} ms, rejoin "
                      f"{m['rejoin'] * 1000:.0f} ms (configure {m['rejoin_cfg']:.1f} ms)",
                      flush=True)
    ms = lambda v: f"{v * 1000:.0f}"  # noqa: E731
    f1 = lambda v: f"{v:.1f}"  # noqa: E731
    print(f"\n{args.groups} replica groups, victim: {args.victim}, Lighthouse heartbeat "
          f"timeout {args.heartbeat_ms} ms, join timeout {args.join_ms} ms, {args.reps} "
          "repetitions; median / worst\n")
    print("| process group | kill → survivors' next commit (ms) | survivor steps lost | "
          "survivors' configure after the kill (ms) | restart → rejoined commit (ms) | "
          "survivors' configure at the rejoin (ms) |")
    print("|---|---|---|---|---|---|")
    for pg in pgs:
        r = results[pg]
        hows = "/".join(sorted({m["how"] for m in r}))
        print(f"| {pg} | {summary([m['recovery'] for m in r], ms)} | "
              f"{summary([m['lost'] for m in r], str)} | "
              f"{summary([m['configure'] for m in r], f1)} ({hows}) | "
              f"{summary([m['rejoin'] for m in r], ms)} | "
              f"{summary([m['rejoin_cfg'] for m in r], f1)} |")
    if "gyre" in results and "gloo" in results:
        g = statistics.median(m["recovery"] for m in results["gyre"])
        o = statistics.median(m["recovery"] for m in results["gloo"])
        print(f"\nmedian recovery, gloo / gyre: {o / g:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

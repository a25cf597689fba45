#!/usr/bin/env python3
"""gyre_torch.torchft.ProcessGroupGyre under torchft (torch 2, torchft from PyPI).

    python python/tests/torchft_test.py [--logdir DIR]

1. The process group alone, 3 processes and one TCPStore (as torchft's Manager would
   drive it): configure creates a communicator; rank 0's all-reduce that nobody joins
   ends as soon as rank 0 calls abort(), which returns at once (< 0.5 s); errored() then
   says so on rank 0; the others' next operation fails at once (abort told them) and
   their errored() says so; configure again creates;
   configure with the same members keeps it; rank 2 SIGKILLs itself and the survivors'
   configure shrinks it (the store survived); every all-reduce is checked exactly.
2. torchft: a Lighthouse and two replica groups training with torchft's DDP and Manager
   on CPU over ProcessGroupGyre (group 1 starts once group 0 has committed, and heals
   from it). Replica group 1 is SIGKILLed mid-training and restarted;
   group 0 never stops. Checked: group 0 commits again alone within the bound, having
   shrunk its communicator; the restarted group heals (its first step is the live one's,
   not 0) and rejoins (both commit steps with 2 replicas); at every step both committed
   after the rejoin their parameters are bit-identical; no gap between group 0's commits
   exceeds the bound; every loss is finite; both processes were alive until stopped.
Exit 0 when all holds, 1 otherwise, 77 (skipped) without torch 2 or torchft.
"""
import argparse
import datetime
import math
import os
import signal
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)

HEARTBEAT_MS = 1000
STALL_BOUND_S = 15.0  # heartbeat timeout + configure + steps, with room for a busy machine


def skip_reason():
    if int(torch.__version__.split(".")[0]) < 2:
        return f"torch {torch.__version__}: torchft needs torch 2"
    try:
        import torchft  # noqa: F401
    except ImportError as e:
        return f"torchft is not installed ({e}; tools/torch_venv.sh installs it)"
    import gyre_torch
    if not gyre_torch._C.supports_shrinking:
        return f"torch {torch.__version__}: gyre_torch has no shrink (torch >= 2.15)"
    return None


# ---- 1. the process group alone ----------------------------------------------------------

def allreduce(pg, value, world):
    from torch.distributed.distributed_c10d import AllreduceOptions
    t = torch.full((1000,), float(value))
    if not pg.allreduce([t], AllreduceOptions()).wait():  # failures go to errored()
        raise RuntimeError(f"all-reduce failed: {pg.errored()}")
    want = float(sum(value for _ in range(world)))
    if not torch.equal(t, torch.full((1000,), want)):
        raise AssertionError(f"all-reduce gave {t[0].item()}, expected {want}")


def unit_rank(rank, port, results):
    from torch.distributed.distributed_c10d import AllreduceOptions
    from gyre_torch.torchft import ProcessGroupGyre
    problems = []
    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=20))
        pg = ProcessGroupGyre(timeout=datetime.timedelta(seconds=10))
        addr = f"127.0.0.1:{port}/torchft"
        pg.configure(f"{addr}/1/0", "r", rank, 3, quorum_id=1)
        if pg.last_configure[0] != "create":
            problems.append(f"first configure: {pg.last_configure[0]}, not create")
        allreduce(pg, 1, 3)
        if rank == 0:
            t = torch.ones(10)
            work = pg.allreduce([t], AllreduceOptions())  # nobody else joins it
            time.sleep(0.3)
            t0 = time.monotonic()
            pg.abort()
            abort_s = time.monotonic() - t0
            if work.wait():
                problems.append("the all-reduce nobody joined succeeded after abort()")
            wait_s = time.monotonic() - t0
            if abort_s > 0.5 or wait_s > 2:
                problems.append(f"abort() took {abort_s:.3f} s, the pending wait "
                                f"{wait_s:.3f} s after it")
            if pg.errored() is None:
                problems.append("errored() is None after abort()")
            store.set("aborted", "1")
        else:
            store.wait(["aborted"])
            # Rank 0's abort reached this rank's communicator: its next operation fails
            # at once (not after the 10 s timeout), and errored() says so.
            t0 = time.monotonic()
            try:
                allreduce(pg, 1, 3)
                problems.append("an all-reduce succeeded after rank 0 aborted")
            except RuntimeError:
                pass
            if time.monotonic() - t0 > 2:
                problems.append(f"the all-reduce after rank 0's abort failed only after "
                                f"{time.monotonic() - t0:.1f} s")
            if pg.errored() is None:
                problems.append("errored() is None after an operation failed")
        pg.configure(f"{addr}/2/0", "r", rank, 3, quorum_id=2)
        if pg.last_configure[0] != "create":
            problems.append(f"configure after abort: {pg.last_configure[0]}, not create")
        if pg.errored() is not None:
            problems.append(f"errored() after configure: {pg.errored()}")
        allreduce(pg, 2, 3)
        pg.configure(f"{addr}/3/0", "r", rank, 3, quorum_id=3)
        if pg.last_configure[0] != "keep":
            problems.append(f"configure, same members: {pg.last_configure[0]}, not keep")
        allreduce(pg, 3, 3)
        if rank == 2:
            results.put((rank, "; ".join(problems), None))
            results.close()
            results.join_thread()  # the result is sent before the kill
            os.kill(os.getpid(), signal.SIGKILL)
        pg.configure(f"{addr}/4/0", "r", rank, 2, quorum_id=4)
        how = pg.last_configure
        if how[0] != "shrink":
            problems.append(f"configure without rank 2: {how[0]}, not shrink")
        allreduce(pg, 4, 2)
        pg.shutdown()
        results.put((rank, "; ".join(problems), how))
    except Exception as e:  # noqa: BLE001 - reported to the parent
        results.put((rank, f"{type(e).__name__}: {e}; " + "; ".join(problems), None))


def unit_test():
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=30))
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=unit_rank, args=(r, server.port, results))
             for r in range(3)]
    for p in procs:
        p.start()
    got = {}
    deadline = time.monotonic() + 90
    while len(got) < 3 and time.monotonic() < deadline:
        try:
            rank, problem, how = results.get(timeout=max(0.1, deadline - time.monotonic()))
            got[rank] = (problem, how)
        except Exception:  # noqa: BLE001 - queue.Empty: reported below
            break
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
    ok = True
    for r in range(3):
        problem, how = got.get(r, ("no result (hung or crashed)", None))
        print(f"unit rank {r}: {problem or 'ok'}"
              + (f" (shrink in {1000 * how[1]:.1f} ms)" if how else ""))
        ok = ok and not problem
    del server
    return ok


# ---- 2. torchft: kill and restart a replica group ------------------------------------------

def torchft_test(logdir):
    from torchft_cluster import Group, Lighthouse, wait_for
    problems = []
    lighthouse = Lighthouse(heartbeat_timeout_ms=HEARTBEAT_MS)
    groups = []
    try:
        # Group 0 first, alone: it stays ahead of group 1 (which heals from it), so the
        # quorum's store stays group 0's (torchft serves the quorum from a replica group
        # at the highest step) and the survivor's configure can shrink through it.
        a = Group(0, lighthouse.address, "gyre", logdir)
        groups.append(a)
        if not wait_for(lambda: len(a.committed(n=1)) >= 2, 90):
            problems.append(f"replica group 0 did not commit 2 steps in 90 s; its log:\n"
                            f"{a.log_tail()}")
            return problems
        b = Group(1, lighthouse.address, "gyre", logdir)
        groups.append(b)
        if not wait_for(lambda: len(a.committed(n=2)) >= 5 and len(b.committed(n=2)) >= 5, 90):
            problems.append("the two replica groups did not commit 5 steps together in 90 s")
            return problems
        killed_at = b.kill()
        if not wait_for(lambda: len(a.committed(since=killed_at, n=1)) >= 3, 60):
            problems.append("the survivor did not commit 3 steps alone within 60 s of the kill")
            return problems
        first = a.committed(since=killed_at)[0]
        recovery = first["t"] - killed_at
        lost = sum(1 for r in a.snapshot() if r["t"] > killed_at and not r["committed"]
                   and r["t"] < first["t"])
        print(f"survivor: kill -> next committed step {recovery * 1000:.0f} ms, "
              f"{lost} step(s) not committed, configured by {first['how']}")
        if first["how"] is None or first["how"][0] != "shrink":
            problems.append(f"the survivor's process group was configured by {first['how']} "
                            "after the kill, not shrink")
        if recovery > STALL_BOUND_S:
            problems.append(f"the survivor's next commit came {recovery:.1f} s after the kill")
        restarted_at = time.time()
        b2 = Group(1, lighthouse.address, "gyre", logdir)
        groups.append(b2)
        if not wait_for(lambda: len(b2.committed(n=2)) >= 8, 90):
            problems.append("the restarted group did not commit 8 steps with the survivor "
                            f"within 90 s; its log:\n{b2.log_tail()}")
            return problems
        first_b2 = b2.committed()[0]
        print(f"restarted group: start -> first committed step "
              f"{(first_b2['t'] - restarted_at) * 1000:.0f} ms (step {first_b2['step']})")
        if first_b2["step"] <= 5:
            problems.append(f"the restarted group's first committed step is "
                            f"{first_b2['step']}: it did not heal from the live group")
        for g in (a, b2):
            if not g.alive():
                problems.append(f"replica group {g.replica} exited early (code "
                                f"{g.proc.returncode}); its log:\n{g.log_tail()}")
        a_by_step = {r["step"]: r for r in a.committed(n=2)}
        common = [r for r in b2.committed(n=2) if r["step"] in a_by_step]
        if len(common) < 5:
            problems.append(f"only {len(common)} steps committed by both after the rejoin")
        for r in common:
            if r["hash"] != a_by_step[r["step"]]["hash"]:
                problems.append(f"step {r['step']}: the groups' parameters differ")
                break
        commits = [r["t"] for r in a.committed()]
        gaps = [t1 - t0 for t0, t1 in zip(commits, commits[1:])]
        if max(gaps) > STALL_BOUND_S:
            problems.append(f"the survivor stalled {max(gaps):.1f} s between two commits")
        for g in groups:
            if any(not math.isfinite(r["loss"]) for r in g.snapshot()):
                problems.append(f"replica group {g.replica}: a loss is not finite")
        rejoin_how = [r["how"] for r in a.committed(since=restarted_at, n=2)][:1]
        print(f"survivor after the rejoin: configured by {rejoin_how}; "
              f"{len(common)} common steps compared, longest gap between its commits "
              f"{max(gaps):.2f} s")
        return problems
    finally:
        for g in groups:
            g.stop()
        lighthouse.shutdown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--logdir", default=None, help="replica groups' logs (default: a temp dir)")
    args = ap.parse_args()
    reason = skip_reason()
    if reason:
        print(f"SKIPPED: {reason}")
        return 77
    ok = unit_test()
    with tempfile.TemporaryDirectory() as tmp:
        problems = torchft_test(args.logdir or tmp)
    for p in problems:
        print(f"torchft: {p}")
    ok = ok and not problems
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The flight recorder under PyTorch: a stopped rank is named, with torch's call names.

    python3 python/tests/flight_recorder_torch_test.py

Four ranks (processes of this script) run `dist.all_reduce` in a loop on backend "gyre"
with GYRE_TRACE_DIR set and a group timeout of 3 s; rank 2 stops itself (SIGSTOP) before
its 31st call. The other three time out in it and each writes its dump. Then, as a user
would, tools/gyre_trace.py reads the survivors' dumps (rank 2, stopped, wrote none) and
must name rank 2 and the collective the others failed in, by gyre's name and torch's
(`allreduce #k called as all_reduce`); every dumped entry of the loop carries torch's
name ("call": "all_reduce"). Rank 2 is then continued: it fails at once, dumps too, and
the analysis of all four dumps names it the same way.
Exit status 0 only if all of that holds; every wait is bounded.
"""
import datetime
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

WORLD = 4
VICTIM = 2
STOP_AT = 30  # the loop's index at which the victim stops itself
HERE = os.path.dirname(os.path.abspath(__file__))
TRACE_TOOL = os.path.join(HERE, "..", "..", "tools", "gyre_trace.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, port):
    import torch
    import torch.distributed as dist

    import gyre_torch  # noqa: F401

    store = dist.TCPStore("127.0.0.1", port, WORLD, False, datetime.timedelta(seconds=120))
    dist.init_process_group("gyre", store=store, rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=3))
    t = torch.ones(4096)
    try:
        for i in range(10_000):
            if rank == VICTIM and i == STOP_AT:
                os.kill(os.getpid(), signal.SIGSTOP)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        print("rank %d: the loop ended without a failure" % rank, flush=True)
        return 1
    except RuntimeError as e:
        print("rank %d failed: %s" % (rank, e), flush=True)
        return 3


def dumps_in(d):
    return sorted(glob.glob(os.path.join(d, "gyre-trace-*.json")))


def wait_for(what, check, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    print("FAIL: %s within %d s" % (what, seconds))
    return False


def analyse(d):
    r = subprocess.run([sys.executable, TRACE_TOOL, d], capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        print("FAIL: gyre_trace.py exited %d: %s" % (r.returncode, r.stderr))
    return r.stdout


def expect(text, needle, what):
    if needle in text:
        return True
    print("FAIL: %s: %r not in:\n%s" % (what, needle, text))
    return False


def main():
    work = tempfile.mkdtemp(prefix="gyre-fr-torch-")
    trace_dir = os.path.join(work, "all")
    survivors_dir = os.path.join(work, "survivors")
    os.makedirs(trace_dir)
    os.makedirs(survivors_dir)
    port = free_port()
    import torch.distributed as dist  # the parent serves the store, as torchrun's agent does

    master = dist.TCPStore("127.0.0.1", port, WORLD + 1, True, datetime.timedelta(seconds=120),
                           wait_for_workers=False)
    env = dict(os.environ, GYRE_TRACE_DIR=trace_dir, GYRE_JOIN_TIMEOUT="120",
               GYRE_STALL_WARN="600")
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", str(r),
                               str(port)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for r in range(WORLD)]
    ok = True
    try:
        ok = wait_for("the three survivors' dumps", lambda: len(dumps_in(trace_dir)) >= 3, 180)
        if ok:
            time.sleep(0.5)  # a survivor's dump is renamed into place whole; let all three land
            for f in dumps_in(trace_dir):
                shutil.copy(f, survivors_dir)
        os.kill(procs[VICTIM].pid, signal.SIGCONT)
        outputs = []
        for r, p in enumerate(procs):
            out, _ = p.communicate(timeout=120)
            outputs.append(out)
            print("---- rank %d (exit %d) ----\n%s" % (r, p.returncode, out.strip()[-2000:]))
            if p.returncode != 3:
                print("FAIL: rank %d exited %d, not with the failure (3)" % (r, p.returncode))
                ok = False
        if not ok:
            return 1
        # The collective the survivors failed in, as their errors name it.
        seqs = set()
        for r in range(WORLD):
            if r == VICTIM:
                continue
            m = re.search(r"allreduce #(\d+)", outputs[r])
            if not m:
                print("FAIL: rank %d's error names no allreduce #k" % r)
                return 1
            seqs.add(int(m.group(1)))
        if len(seqs) != 1:
            print("FAIL: the survivors failed in different collectives: %s" % sorted(seqs))
            return 1
        k = seqs.pop()

        survivors = analyse(survivors_dir)
        print("---- gyre_trace.py on the survivors' dumps ----\n" + survivors)
        ok &= expect(survivors, "missing dump: rank 2 ", "the stopped rank has no dump")
        ok &= expect(survivors, "not reached: allreduce #%d called as all_reduce: rank 2 (no dump); "
                     "reached by ranks 0,1,3" % k, "the collective, by gyre's and torch's name")
        ok &= expect(survivors, "verdict: rank 2 did not reach allreduce #%d called as all_reduce" % k,
                     "the verdict")

        ok &= wait_for("rank 2's dump after SIGCONT", lambda: len(dumps_in(trace_dir)) >= 4, 30)
        everyone = analyse(trace_dir)
        print("---- gyre_trace.py on all four dumps ----\n" + everyone)
        ok &= expect(everyone, "verdict: rank 2 did not reach allreduce #%d called as all_reduce" % k,
                     "the verdict with rank 2's dump")
        for f in dumps_in(trace_dir):
            with open(f) as fh:
                d = json.load(fh)
            calls = {e["call"] for e in d["entries"] if e["collective"] == "allreduce"}
            if calls != {"all_reduce"}:
                print("FAIL: %s: the loop's entries are named %s, not all_reduce" % (f, calls))
                ok = False
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        del master
        shutil.rmtree(work, ignore_errors=True)
    print("flight recorder under torch: %s" % ("passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        sys.exit(worker(int(sys.argv[2]), int(sys.argv[3])))
    sys.exit(main())

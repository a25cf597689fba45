#!/usr/bin/env python3
"""torch.distributed.shrink_group on backend "gyre" (torch >= 2.15), under DDP.

    python3 python/tests/shrink_torch_test.py

4 ranks train a small model with DDP on CPU, bootstrapping through a TCPStore that this
process serves (as torchrun's agent serves one: it outlives any rank). At step 5 rank 2
SIGKILLs itself. Each survivor's step fails; it asks gyre_torch.failed_rank() whom the
failure names, shrinks the default group without that rank
(``dist.shrink_group([dead], shrink_flags=SHRINK_ABORT)``), wraps the model in DDP again
(which broadcasts rank 0's parameters) and trains 10 more steps on the 3 ranks. Checked:
every survivor names rank 2, the new world is 3 with ranks 0..2 in the old order, the
parameters are bit-identical on the survivors after training (their max and min over
the ranks agree), and the time from the kill to the first completed step is printed.
Exit 0 only if all of that holds on every survivor; 77 (skipped) where torch has no
shrink_group.
"""
import datetime
import os
import signal
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import gyre_torch

WORLD = 4
VICTIM = 2
KILL_AT = 5


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def batch(rank, step, world):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, 16, generator=g)
    return x, x.sum(dim=1, keepdim=True)


def train_step(model, opt, rank, step, world):
    x, y = batch(rank, step, world)
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def run(rank, port, results):
    store = dist.TCPStore("127.0.0.1", port, WORLD, False, timeout=datetime.timedelta(seconds=30))
    dist.init_process_group("gyre", store=store, rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=20))
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dead = -1
    failed_at = None
    for step in range(KILL_AT + 5):
        if step == KILL_AT and rank == VICTIM:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            train_step(model, opt, rank, step, WORLD)
        except RuntimeError as e:
            failed_at = time.monotonic()
            dead = gyre_torch.failed_rank()
            print(f"[rank {rank}] step {step} failed: {str(e)[:200]}", file=sys.stderr)
            break
    if dead < 0:
        results.put((rank, f"no failure named (dead={dead})", None))
        return
    group = dist.shrink_group([dead], shrink_flags=dist.distributed_c10d.SHRINK_ABORT)
    new_rank, new_world = dist.get_rank(), dist.get_world_size()
    model = torch.nn.parallel.DistributedDataParallel(model.module)  # rank 0's parameters
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    first_ms = None
    for step in range(10):
        train_step(model, opt, new_rank, 100 + step, new_world)
        if first_ms is None:
            first_ms = (time.monotonic() - failed_at) * 1000
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    hi, lo = flat.clone(), flat.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=group)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=group)
    problems = []
    if dead != VICTIM:
        problems.append(f"failed_rank() named {dead}, not {VICTIM}")
    if new_world != WORLD - 1 or new_rank != (rank if rank < VICTIM else rank - 1):
        problems.append(f"rank {new_rank} of {new_world} after the shrink")
    if not torch.equal(hi, lo):
        problems.append("the survivors' parameters differ")
    if not torch.isfinite(flat).all():
        problems.append("a parameter is not finite")
    results.put((rank, "; ".join(problems), first_ms))
    dist.destroy_process_group()


def main():
    if not gyre_torch._C.supports_shrinking or not hasattr(dist, "shrink_group"):
        print(f"SKIPPED: torch {torch.__version__} has no shrink_group (torch >= 2.15)")
        return 77
    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, WORLD, True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=30))
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, port, results)) for r in range(WORLD)]
    for p in procs:
        p.start()
    got = {}
    deadline = time.monotonic() + 120
    while len(got) < WORLD - 1 and time.monotonic() < deadline:
        try:
            rank, problem, ms = results.get(timeout=max(0.1, deadline - time.monotonic()))
            got[rank] = (problem, ms)
        except Exception:
            break
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    del server
    ok = len(got) == WORLD - 1
    for r in range(WORLD):
        if r == VICTIM:
            continue
        problem, ms = got.get(r, ("no result (hung or crashed)", None))
        print(f"rank {r}: {'ok' if not problem else problem}"
              + (f", kill -> first step on the shrunk group {ms:.0f} ms" if ms else ""))
        ok = ok and not problem
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

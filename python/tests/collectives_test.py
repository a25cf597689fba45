#!/usr/bin/env python3
"""Every torch.distributed collective on backend "gyre", checked exactly, on CPU tensors.

    python3 python/tests/collectives_test.py [--world 2,3,4] [--launcher spawn|env]

--launcher spawn (default): torch.multiprocessing.spawn, init_method tcp://.
--launcher env: this script is one rank of a launcher (torchrun, torch.distributed.launch,
gyrerun) that set RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT: init_method env://.
Inputs are small integers, so every reduction is exact in any order, in every dtype.
With spawn, a last group of 4 runs under GYRE_BIND=core: each rank, and a thread it
started before init_process_group, must end up on the CPU base/cpu_binding.h gives it.
Exit status 0 only if every check passed on every rank.
"""
import argparse
import datetime
import os
import socket
import sys
import tempfile
import threading
import time

import torch
import torch.distributed as dist

import gyre_torch  # noqa: F401  (torch 1.13 needs it; torch 2 loads the entry point itself)

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
          torch.uint8, torch.int32, torch.int64]
R = dist.ReduceOp


def expect(cond, what):
    if not cond:
        raise AssertionError(f"rank {dist.get_rank()}: {what}")


def equal(got, want, what):
    expect(torch.equal(got, want), f"{what}: got {got.tolist()}, want {want.tolist()}")


def values(rank, n, dtype):
    # 1..3 and rank-dependent: products of up to 4 ranks stay < 128 (int8 exact).
    return ((torch.arange(n) + rank) % 3 + 1).to(dtype)


def reference(world, n, dtype, op):
    stack = torch.stack([values(r, n, torch.int64) for r in range(world)])
    if op == R.SUM:
        out = stack.sum(0)
    elif op == R.PRODUCT:
        out = stack.prod(0)
    elif op == R.MIN:
        out = stack.min(0).values
    elif op == R.MAX:
        out = stack.max(0).values
    elif op == R.BAND:
        out = stack[0].clone()
        for r in range(1, world):
            out &= stack[r]
    elif op == R.BOR:
        out = stack[0].clone()
        for r in range(1, world):
            out |= stack[r]
    elif op == R.BXOR:
        out = stack[0].clone()
        for r in range(1, world):
            out ^= stack[r]
    return out.to(dtype)


def check_all_reduce(rank, world):
    n = 37
    for dtype in DTYPES:
        for op in (R.SUM, R.PRODUCT, R.MIN, R.MAX):
            t = values(rank, n, dtype)
            dist.all_reduce(t, op=op)
            equal(t, reference(world, n, dtype, op), f"all_reduce {dtype} {op}")
        if not dtype.is_floating_point:
            for op in (R.BAND, R.BOR, R.BXOR):
                t = values(rank, n, dtype)
                dist.all_reduce(t, op=op)
                equal(t, reference(world, n, dtype, op), f"all_reduce {dtype} {op}")
    # AVG: a sum divisible by world.
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int32):
        t = torch.full((5,), float(world * (rank + 1)), dtype=torch.float64).to(dtype)
        dist.all_reduce(t, op=R.AVG)
        equal(t, torch.full((5,), float(world * (world + 1) / 2)).to(dtype), f"AVG {dtype}")
    # PREMUL_SUM: every rank's input times 2, summed.
    t = values(rank, n, torch.float32)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
    equal(t, 2 * reference(world, n, torch.float32, R.SUM), "PREMUL_SUM")
    # bool: SUM/MAX/BOR = any, PRODUCT/MIN/BAND = all, BXOR = parity.
    flags = torch.tensor([rank == 0, True, False, rank % 2 == 1])
    for op, want in ((R.SUM, [True, True, False, world > 1]),
                     (R.BOR, [True, True, False, world > 1]),
                     (R.BAND, [world == 1, True, False, False]),
                     (R.MIN, [world == 1, True, False, False]),
                     (R.BXOR, [True, world % 2 == 1, False, (world // 2) % 2 == 1])):
        t = flags.clone()
        dist.all_reduce(t, op=op)
        equal(t, torch.tensor(want), f"bool {op}")
    # int16 has no gyre dtype: gathered and reduced locally.
    t = values(rank, n, torch.int16)
    dist.all_reduce(t)
    equal(t, reference(world, n, torch.int16, R.SUM), "int16 SUM")
    # complex as pairs of reals.
    t = torch.complex(values(rank, n, torch.float32), -values(rank, n, torch.float32))
    dist.all_reduce(t)
    ref = reference(world, n, torch.float32, R.SUM)
    equal(t, torch.complex(ref, -ref), "complex SUM")
    # Non-contiguous: a transposed view, reduced in place.
    base = values(rank, 24, torch.float32).reshape(4, 6)
    view = base.t()
    expect(not view.is_contiguous(), "the view is non-contiguous")
    dist.all_reduce(view)
    equal(base, reference(world, 24, torch.float32, R.SUM).reshape(4, 6), "non-contiguous")
    # Async with a future (DDP's comm hooks chain on it).
    t = values(rank, 1 << 16, torch.float32)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    chained = fut.then(lambda f: f.value()[0] * 2)
    expect(chained.wait() is not None, "future completes")
    expect(work.is_completed(), "completed after its future")
    equal(chained.wait(), 2 * reference(world, 1 << 16, torch.float32, R.SUM), "future value")
    work.wait()


def check_movement(rank, world):
    n = 11
    for root in range(world):
        t = values(rank, n, torch.float64) if rank == root else torch.zeros(n, dtype=torch.float64)
        dist.broadcast(t, src=root)
        equal(t, values(root, n, torch.float64), f"broadcast root {root}")
        t = values(rank, n, torch.int32)
        dist.reduce(t, dst=root)
        if rank == root:
            equal(t, reference(world, n, torch.int32, R.SUM), f"reduce root {root}")
        else:
            equal(t, values(rank, n, torch.int32), "reduce leaves non-roots' input")
    t = torch.tensor([True, rank % 2 == 0])
    dist.broadcast(t, src=world - 1)
    equal(t, torch.tensor([True, (world - 1) % 2 == 0]), "broadcast bool")
    # all_gather: list and into one tensor.
    outs = [torch.zeros(n, dtype=torch.bfloat16) for _ in range(world)]
    dist.all_gather(outs, values(rank, n, torch.bfloat16))
    for r in range(world):
        equal(outs[r], values(r, n, torch.bfloat16), f"all_gather part {r}")
    flat = torch.zeros(world * n, dtype=torch.int64)
    gather_into = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
    gather_into(flat, values(rank, n, torch.int64))
    equal(flat, torch.cat([values(r, n, torch.int64) for r in range(world)]), "into tensor")
    # gather / scatter to and from every root.
    for root in range(world):
        outs = [torch.zeros(n, dtype=torch.uint8) for _ in range(world)] if rank == root else None
        dist.gather(values(rank, n, torch.uint8), gather_list=outs, dst=root)
        if rank == root:
            for r in range(world):
                equal(outs[r], values(r, n, torch.uint8), f"gather part {r} root {root}")
        parts = [values(r + 10, n, torch.int8) for r in range(world)] if rank == root else None
        out = torch.zeros(n, dtype=torch.int8)
        dist.scatter(out, scatter_list=parts, src=root)
        equal(out, values(rank + 10, n, torch.int8), f"scatter root {root}")
    # reduce_scatter: list and tensor.
    ins = [values(rank + p, n, torch.float32) for p in range(world)]
    out = torch.zeros(n)
    dist.reduce_scatter(out, ins)
    want = sum(values(r + rank, n, torch.int64) for r in range(world)).float()
    equal(out, want, "reduce_scatter list")
    rs_tensor = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
    out = torch.zeros(n)
    rs_tensor(out, torch.cat(ins))
    equal(out, want, "reduce_scatter tensor")
    # all_to_all_single, equal and uneven splits; all_to_all of lists.
    send = torch.arange(world * 3, dtype=torch.float32) + 100 * rank
    recv = torch.zeros(world * 3)
    dist.all_to_all_single(recv, send)
    want = torch.cat([torch.arange(3 * rank, 3 * rank + 3, dtype=torch.float32) + 100 * r
                      for r in range(world)])
    equal(recv, want, "all_to_all_single")
    # The same with rank 0 spelling out the equal splits and the others passing None: one
    # call to torch, so one path in the backend (else a mismatch between the ranks).
    recv = torch.zeros(world * 3)
    splits = [3] * world if rank == 0 else None
    dist.all_to_all_single(recv, send, splits, splits)
    equal(recv, want, "all_to_all_single, equal splits spelled out on rank 0 only")
    in_splits = [rank + p + 1 for p in range(world)]   # rank -> p sends rank+p+1 rows
    out_splits = [r + rank + 1 for r in range(world)]
    send = torch.cat([torch.full((in_splits[p], 2), float(10 * rank + p)) for p in range(world)])
    recv = torch.zeros(sum(out_splits), 2)
    dist.all_to_all_single(recv, send, out_splits, in_splits)
    want = torch.cat([torch.full((out_splits[r], 2), float(10 * r + rank)) for r in range(world)])
    equal(recv, want, "all_to_all_single uneven")
    # Rank 0's parts are all equal (it passes None) while the others' are not: every rank
    # still runs the same collective (one path for every all_to_all_single).
    def rows(r, p):
        return 2 if r == 0 or p == 0 else 1 + (r + p) % 3
    in_splits = None if rank == 0 else [rows(rank, p) for p in range(world)]
    out_splits = None if rank == 0 else [rows(r, rank) for r in range(world)]
    send = torch.cat([torch.full((rows(rank, p), 3), float(100 * rank + p)) for p in range(world)])
    recv = torch.zeros(sum(rows(r, rank) for r in range(world)), 3)
    # Async behind an all-reduce that is still queued: issuing it does not wait for that.
    big = torch.ones(1 << 18)
    first = dist.all_reduce(big, async_op=True)
    work = dist.all_to_all_single(recv, send, out_splits, in_splits, async_op=True)
    work.wait()
    first.wait()
    want = torch.cat([torch.full((rows(r, rank), 3), float(100 * r + rank)) for r in range(world)])
    equal(recv, want, "all_to_all_single, rank 0 even and the others uneven, async")
    equal(big, torch.full((1 << 18,), float(world)), "all_reduce before the all_to_all_single")
    ins = [torch.full((p + 1,), rank * 10 + p, dtype=torch.int64) for p in range(world)]
    outs = [torch.zeros(rank + 1, dtype=torch.int64) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for r in range(world):
        equal(outs[r], torch.full((rank + 1,), r * 10 + rank, dtype=torch.int64), "all_to_all")
    dist.barrier()


def check_point_to_point(rank, world):
    # A ring shift with tags: even ranks send first, odd ranks receive first.
    right, left = (rank + 1) % world, (rank - 1) % world
    mine = values(rank, 1000, torch.float32)
    got = torch.zeros(1000)
    if world > 1:
        if rank % 2 == 0:
            dist.send(mine, right, tag=7)
            dist.recv(got, left, tag=7)
        else:
            dist.recv(got, left, tag=7)
            dist.send(mine, right, tag=7)
        equal(got, values(left, 1000, torch.float32), "send/recv ring")
    # isend/irecv between 0 and 1, with a tag mismatch reported by name.
    if rank == 0:
        reqs = [dist.isend(torch.full((4,), 5.0), 1, tag=1), dist.isend(torch.ones(2), 1, tag=2)]
        for req in reqs:
            req.wait()
    elif rank == 1:
        a, b = torch.zeros(4), torch.zeros(2)
        ra = dist.irecv(a, 0, tag=1)
        ra.wait()
        equal(a, torch.full((4,), 5.0), "irecv")
        rb = dist.irecv(b, 0, tag=3)  # sent with tag 2
        try:
            rb.wait()
            raise AssertionError("a recv with the wrong tag succeeded")
        except RuntimeError as e:
            expect("tag 2, not 3" in str(e) and "rank 0" in str(e), f"tag error names it: {e}")
    dist.barrier()
    monitored_barrier(None, datetime.timedelta(seconds=30))


def monitored_barrier(group, timeout, wait_all_ranks=False):
    # torch 1.13's Python wrapper admits only gloo; its group method is the same call.
    if int(torch.__version__.split(".")[0]) >= 2:
        return dist.monitored_barrier(group, timeout=timeout, wait_all_ranks=wait_all_ranks)
    pg = group or dist.distributed_c10d._get_default_group()
    return pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


def check_groups_and_errors(rank, world):
    # A subgroup of the even ranks: its own communicator.
    evens = list(range(0, world, 2))
    group = dist.new_group(evens)
    if rank in evens:
        t = torch.ones(3) * rank
        dist.all_reduce(t, group=group)
        equal(t, torch.ones(3) * sum(evens), "subgroup all_reduce")
    dist.barrier()
    # A sparse tensor fails at once, on the rank that passed it, saying what to do.
    try:
        dist.all_reduce(torch.sparse_coo_tensor([[0, 2]], [1.0, 2.0], (4,)))
        raise AssertionError("a sparse all_reduce succeeded")
    except (ValueError, RuntimeError) as e:
        expect("gyre" in str(e) and "Sparse" in str(e) and "to_dense" in str(e),
               f"the sparse error says what to do: {e}")
    if world < 2:
        return
    # monitored_barrier names the ranks that did not come.
    mb = dist.new_group(list(range(world)))
    if rank == 0:
        try:
            monitored_barrier(mb, datetime.timedelta(seconds=2), wait_all_ranks=True)
            raise AssertionError("a monitored_barrier missing ranks succeeded")
        except RuntimeError as e:
            missing = ", ".join(str(r) for r in range(1, world))
            expect(f"{missing} failed to pass monitoredBarrier" in str(e), f"names them: {e}")
    dist.barrier()
    # A mismatched call (float vs int64) fails on every rank with gyre's message.
    bad = dist.new_group(list(range(world)), timeout=datetime.timedelta(seconds=20))
    t = torch.ones(16) if rank == 0 else torch.ones(16, dtype=torch.int64)
    start = time.monotonic()
    try:
        dist.all_reduce(t, group=bad)
        raise AssertionError("a mismatched all_reduce succeeded")
    except RuntimeError as e:
        msg = str(e)
        expect("gyre" in msg and f"rank {rank}" in msg and "all_reduce" in msg,
               f"the error names rank and call: {msg}")
    expect(time.monotonic() - start < 15, "the mismatch failed promptly")
    # A group whose timeout is honoured: rank 1 never joins the collective.
    short = dist.new_group(list(range(world)), timeout=datetime.timedelta(seconds=3))
    if rank == 0:
        start = time.monotonic()
        try:
            dist.all_reduce(torch.ones(4), group=short)
            raise AssertionError("an all_reduce missing a rank succeeded")
        except RuntimeError as e:
            expect("gyre" in str(e), f"timeout error: {e}")
        took = time.monotonic() - start
        expect(took < 20, f"the 3 s group timeout took {took:.1f} s")
    dist.barrier()
    # Work.wait(timeout) on an async op a peer joins late: it sleeps (no polling) until the
    # timeout, then raises and aborts that group only; the default group goes on.
    waiting = dist.new_group(list(range(world)), timeout=datetime.timedelta(seconds=60))
    if rank == 0:
        work = dist.all_reduce(torch.ones(4), group=waiting, async_op=True)
        start = time.monotonic()
        try:
            work.wait(timeout=datetime.timedelta(milliseconds=300))
            raise AssertionError("a wait on an all_reduce missing a rank succeeded")
        except RuntimeError as e:
            expect("timed out after 300 ms" in str(e), f"Work.wait timeout error: {e}")
        took = time.monotonic() - start
        expect(0.25 < took < 10, f"the 300 ms Work.wait took {took:.2f} s")
    dist.barrier()


def run_rank(rank, world, init_method):
    torch.set_num_threads(1)
    dist.init_process_group("gyre", init_method=init_method, rank=rank, world_size=world)
    expect(dist.get_backend() == "gyre", f"backend is {dist.get_backend()}")
    for check in (check_all_reduce, check_movement, check_point_to_point,
                  check_groups_and_errors):
        check(rank, world)
        if rank == 0:
            print(f"world {world}: {check.__name__} ok", flush=True)
    dist.destroy_process_group()


def cpu_index_for(local_rank, local_size, cpu_count):
    """base/cpu_binding.h's rule: one CPU each where there are enough, else neighbours share."""
    return local_rank if local_size <= cpu_count else local_rank * cpu_count // local_size


def run_bound_rank(rank, world, init_method):
    """GYRE_BIND=core under mp.spawn: init_process_group moves the rank, a thread started
    before it included, onto its CPU; the group still computes."""
    torch.set_num_threads(1)
    allowed = sorted(os.sched_getaffinity(0))
    parked = threading.Event()
    started = threading.Event()
    helper = threading.Thread(target=lambda: (started.set(), parked.wait()))
    helper.start()
    started.wait()
    try:
        dist.init_process_group("gyre", init_method=init_method, rank=rank, world_size=world)
        want = {allowed[cpu_index_for(rank, world, len(allowed))]}
        got = os.sched_getaffinity(0)
        expect(got == want, f"main thread on {sorted(got)}, want {sorted(want)}")
        got = os.sched_getaffinity(helper.native_id)
        expect(got == want, f"earlier thread on {sorted(got)}, want {sorted(want)}")
        t = torch.full((5,), float(rank + 1))
        dist.all_reduce(t)
        equal(t, torch.full((5,), float(world * (world + 1) // 2)), "all_reduce after binding")
        dist.destroy_process_group()
    finally:
        parked.set()
        helper.join()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", default="2,3,4")
    parser.add_argument("--launcher", default="spawn", choices=["spawn", "env"])
    args = parser.parse_args()
    if args.launcher == "env":
        run_rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), "env://")
        return
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory(prefix="collectives_test.") as tmp:
        for i, world in enumerate(int(w) for w in args.world.split(",")):
            # Every other world size over a FileStore whose file does not exist yet
            # (torch creates it on the first write; gyre's join must not wait for it).
            init = (f"file://{tmp}/store{world}" if i % 2 else
                    f"tcp://127.0.0.1:{free_port()}")
            mp.spawn(run_rank, args=(world, init), nprocs=world, join=True)
            if init.startswith("file://"):
                print(f"world {world}: initialised over a fresh FileStore ({init})")
        world = 4
        os.environ["GYRE_BIND"] = "core"
        try:
            mp.spawn(run_bound_rank, args=(world, f"tcp://127.0.0.1:{free_port()}"),
                     nprocs=world, join=True)
        finally:
            del os.environ["GYRE_BIND"]
        print(f"world {world}: GYRE_BIND=core placed every rank on its CPU")
    print(f"torch {torch.__version__}: collectives ok at world sizes {args.world}")


if __name__ == "__main__":
    main()

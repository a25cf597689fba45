#!/usr/bin/env python3
"""The torch.distributed Backend methods beyond the plain collectives, on backend "gyre"
and on gloo in the same run, compared exactly (docs/pytorch.md, "Backend methods").

    python3 python/tests/surface_test.py [--world 2,4]

Each world size is spawned (torch.multiprocessing, init over a FileStore); the default
group is gyre's and a gloo group over the same ranks runs the same calls. Values are
small integers (exact in every dtype and order). Checked: the coalesced forms
(all_reduce, all_gather_into_tensor and reduce_scatter_tensor in _coalescing_manager,
fused or not), startCoalescing/endCoalescing (a coalescing manager with a device: one
Work for every collective inside), mixed kinds in one coalescing manager (torch's own
error, as with gloo), batch_isend_irecv in any order of sends and receives,
gather_single, all_to_all_single with splits, split_group, monitored_barrier naming the
ranks that did not come, sequence numbers, sparse all_reduce's error, and DTensor
(distribute_tensor, full_tensor, redistribute). torch 1.13 (Debian) has only some of
these: the rest are skipped by name. Exit status 0 only if every check passed on every
rank.
"""
import argparse
import datetime
import os
import sys
import tempfile

import torch
import torch.distributed as dist

import gyre_torch  # noqa: F401  (torch 1.13 needs it; torch 2 loads the entry point itself)

TORCH2 = int(torch.__version__.split(".")[0]) >= 2
R = dist.ReduceOp
CPU = torch.device("cpu")


def expect(cond, what):
    if not cond:
        raise AssertionError(f"rank {dist.get_rank()}: {what}")


def equal(got, want, what):
    expect(got.dtype == want.dtype and torch.equal(got, want),
           f"{what}: got {got.dtype} {got.flatten()[:16].tolist()}, "
           f"want {want.dtype} {want.flatten()[:16].tolist()}")


def values(rank, n, dtype, salt=0):
    # 1..4, rank-dependent: sums over 4 ranks stay exact in every dtype (int8 included).
    return ((torch.arange(n) * 7 + rank + salt) % 4 + 1).to(dtype)


def both(gyre, gloo, run, what):
    """run(group) -> list of tensors, on gyre's group and on gloo's; equal element by element."""
    got, want = run(gyre), run(gloo)
    expect(len(got) == len(want), f"{what}: {len(got)} results on gyre, {len(want)} on gloo")
    for i, (g, w) in enumerate(zip(got, want)):
        equal(g, w, f"{what} [{i}] gyre vs gloo")


# ---- Coalesced collectives ------------------------------------------------------------------

def check_coalesced(rank, world, gyre, gloo):
    shapes = [(5,), (3, 4), (0,), (1 << 14,)]  # an empty one and a large one among them
    dtypes = [torch.float32, torch.int64, torch.bfloat16, torch.int8]

    def all_reduce_batch(g):
        ts = [values(rank, 1 if not s else int(torch.tensor(s).prod()), torch.float32, i)
              for i, s in enumerate(shapes)]
        with dist._coalescing_manager(group=g, async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t, group=g)
        cm.wait()
        return ts
    both(gyre, gloo, all_reduce_batch, "coalesced all_reduce")

    def all_gather_batch(g):
        ins = [values(rank, max(1, int(torch.tensor(s).prod())) if s != (0,) else 0, d, i)
               for i, (s, d) in enumerate(zip(shapes, dtypes))]
        outs = [torch.empty(world * t.numel(), dtype=t.dtype) for t in ins]
        with dist._coalescing_manager(group=g, async_ops=True) as cm:
            for o, t in zip(outs, ins):
                dist.all_gather_into_tensor(o, t, group=g)
        cm.wait()
        return outs
    both(gyre, gloo, all_gather_batch, "coalesced all_gather_into_tensor (mixed dtypes)")
    # The same, synchronous, and against the one-by-one result on gyre itself.
    ins = [values(rank, 6, torch.float32, i) for i in range(3)]
    outs = [torch.empty(world * 6) for _ in ins]
    with dist._coalescing_manager(group=gyre):
        for o, t in zip(outs, ins):
            dist.all_gather_into_tensor(o, t, group=gyre)
    for o, t in zip(outs, ins):
        one = torch.empty(world * 6)
        dist.all_gather_into_tensor(one, t, group=gyre)
        equal(o, one, "coalesced all_gather_into_tensor vs one by one")

    for op, dtype, label in ((R.SUM, torch.float32, "fused SUM"),
                             (R.MAX, torch.int32, "fused MAX"),
                             (R.BAND, torch.int64, "BAND, one by one under one Work")):
        def reduce_scatter_batch(g):
            counts = [3, 1, 0, 1000]
            ins = [values(rank, world * n, dtype, i) for i, n in enumerate(counts)]
            outs = [torch.empty(n, dtype=dtype) for n in counts]
            with dist._coalescing_manager(group=g, async_ops=True) as cm:
                for o, t in zip(outs, ins):
                    dist.reduce_scatter_tensor(o, t, op=op, group=g)
            cm.wait()
            return outs
        both(gyre, gloo, reduce_scatter_batch, f"coalesced reduce_scatter_tensor ({label})")

    # Mixed dtypes in one reduce-scatter batch: one gyre operation each, one Work.
    def mixed_reduce_scatter(g):
        ins = [values(rank, world * 4, torch.float64), values(rank, world * 2, torch.int32)]
        outs = [torch.empty(4, dtype=torch.float64), torch.empty(2, dtype=torch.int32)]
        work = g.reduce_scatter_tensor_coalesced(outs, ins)
        work.wait()
        return outs
    both(gyre, gloo, mixed_reduce_scatter, "reduce_scatter_tensor_coalesced (mixed dtypes)")

    # PREMUL_SUM (gloo has none): every input times 2, then summed.
    ins = [values(rank, world * 3, torch.float32, i) for i in range(2)]
    outs = [torch.empty(3) for _ in ins]
    with dist._coalescing_manager(group=gyre, async_ops=True) as cm:
        for o, t in zip(outs, ins):
            dist.reduce_scatter_tensor(o, t, op=dist._make_nccl_premul_sum(2.0), group=gyre)
    cm.wait()
    for i, o in enumerate(outs):
        want = 2 * sum(values(r, world * 3, torch.float32, i) for r in range(world))
        equal(o, want[rank * 3:(rank + 1) * 3], f"coalesced reduce_scatter PREMUL_SUM [{i}]")

    # Mixed kinds in one coalescing manager: torch refuses them itself, on any backend.
    for g, name in ((gyre, "gyre"), (gloo, "gloo")):
        try:
            with dist._coalescing_manager(group=g):
                dist.all_reduce(torch.ones(2), group=g)
                dist.all_gather_into_tensor(torch.empty(2 * world), torch.ones(2), group=g)
            raise AssertionError(f"mixed kinds coalesced on {name}")
        except RuntimeError as e:
            expect("mixed types" in str(e), f"{name}'s mixed kinds error: {e}")
    dist.barrier(group=gyre)


def check_coalescing_device(rank, world, gyre, gloo):
    """_coalescing_manager with a device: startCoalescing/endCoalescing; every collective
    inside becomes a member of endCoalescing's Work (gloo has no such form: its results
    come from the same calls made one by one)."""
    big = 1 << 18  # long enough that a Work not waited for is still running

    def calls(g):
        a = values(rank, big, torch.float32)
        b = values(rank, 9, torch.int64) if rank == 0 else torch.zeros(9, dtype=torch.int64)
        gathered = [torch.empty(big, dtype=torch.float32) for _ in range(world)]
        c = values(rank, world * 5, torch.int32)
        d = torch.empty(world * 5, dtype=torch.int32)
        ops = [lambda: dist.broadcast(b, src=0, group=g, async_op=True),
               lambda: dist.all_gather(gathered, a, group=g, async_op=True),
               lambda: dist.all_to_all_single(d, c, group=g, async_op=True),
               lambda: dist.all_reduce(a, group=g, async_op=True)]
        return ops, [b, *gathered, d, a]

    ops, outs = calls(gyre)
    with dist._coalescing_manager(group=gyre, device=CPU, async_ops=True) as cm:
        for op in ops:
            op()
    expect(len(cm.works) == 1, f"{len(cm.works)} Works from one coalescing manager")
    cm.wait()
    expect(cm.works[0].is_completed(), "endCoalescing's Work not completed after wait()")
    expect(len(cm.works[0].result()) == len(outs),
           f"endCoalescing's Work holds {len(cm.works[0].result())} outputs, want {len(outs)}")
    ops, want = calls(gloo)
    for op in ops:
        op().wait()
    for i, (g, w) in enumerate(zip(outs, want)):
        equal(g, w, f"coalescing manager with a device [{i}] gyre vs gloo one by one")
    # An empty batch (torch's abort path opens one) gives a Work that is done.
    with dist._coalescing_manager(group=gyre, device=CPU, async_ops=True) as cm:
        pass
    cm.wait()
    dist.barrier(group=gyre)


# ---- Point-to-point -----------------------------------------------------------------------

def check_batch_p2p(rank, world, gyre, gloo):
    # Every rank receives before it sends in its list, with messages longer than gyre's
    # pipe: run one at a time these would wait for each other.
    n = 1 << 20
    nxt, prv = (rank + 1) % world, (rank - 1) % world

    def ring(g):
        send = values(rank, n, torch.float32)
        got = torch.empty(n)
        send2 = values(rank, 33, torch.int64, 1)
        got2 = torch.empty(33, dtype=torch.int64)
        ops = [dist.P2POp(dist.irecv, got, prv, g), dist.P2POp(dist.irecv, got2, nxt, g),
               dist.P2POp(dist.isend, send, nxt, g), dist.P2POp(dist.isend, send2, prv, g)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return [got, got2]
    both(gyre, gloo, ring, "batch_isend_irecv (receives first, both directions)")

    # A pipeline: rank 0 only sends, the last rank only receives, the others both; two
    # messages in one direction keep their order.
    def pipeline(g):
        ops, outs = [], []
        if rank > 0:
            for i in range(2):
                t = torch.empty(1000, dtype=torch.int32)
                outs.append(t)
                ops.append(dist.P2POp(dist.irecv, t, rank - 1, g))
        if rank < world - 1:
            for i in range(2):
                ops.append(dist.P2POp(dist.isend, values(rank, 1000, torch.int32, i), rank + 1, g))
        if ops:
            for w in dist.batch_isend_irecv(ops):
                w.wait()
        return outs
    both(gyre, gloo, pipeline, "batch_isend_irecv (pipeline)")
    dist.barrier(group=gyre)


def check_gather_single(rank, world, gyre, gloo):
    t = values(rank, 7, torch.float64)
    out = torch.empty(world * 7, dtype=torch.float64) if rank == 1 else None
    dist.gather_single(t, out, dst=1, group=gyre)
    parts = [torch.empty(7, dtype=torch.float64) for _ in range(world)] if rank == 1 else None
    dist.gather(t, parts, dst=1, group=gloo)
    if rank == 1:
        equal(out, torch.cat(parts), "gather_single (gyre) vs gather (gloo)")
    # Non-contiguous output on the root.
    base = torch.zeros(world * 4, 2, dtype=torch.int32)
    dist.gather_into_tensor(values(rank, 4, torch.int32), base[:, 0] if rank == 0 else None,
                            dst=0, group=gyre)
    if rank == 0:
        equal(base[:, 0], torch.cat([values(r, 4, torch.int32) for r in range(world)]),
              "gather_into_tensor into a strided view")


def check_all_to_all_single(rank, world, gyre, gloo):
    def run(g):
        in_splits = [(rank + p) % 3 + 1 for p in range(world)]
        out_splits = [(p + rank) % 3 + 1 for p in range(world)]
        t = values(rank, sum(in_splits) * 2, torch.int64).reshape(-1, 2)
        out = torch.empty(sum(out_splits), 2, dtype=torch.int64)
        dist.all_to_all_single(out, t, out_splits, in_splits, group=g)
        even = torch.empty(world * 3, dtype=torch.float32)
        dist.all_to_all_single(even, values(rank, world * 3, torch.float32), group=g)
        return [out, even]
    both(gyre, gloo, run, "all_to_all_single")


# ---- Groups ---------------------------------------------------------------------------------

def check_split(rank, world, gyre, gloo):
    halves = [list(range(world // 2)), list(range(world // 2, world))]
    sub = dist.split_group(gyre, split_ranks=halves)
    mine = halves[0] if rank in halves[0] else halves[1]
    expect(sub is not None and sub != dist.GroupMember.NON_GROUP_MEMBER, "split_group gave none")
    expect(sub.size() == len(mine) and sub.rank() == mine.index(rank),
           f"split_group: rank {sub.rank()} of {sub.size()}, want {mine.index(rank)} of {len(mine)}")
    t = values(rank, 11, torch.int64)
    dist.all_reduce(t, group=sub)
    equal(t, sum(values(r, 11, torch.int64) for r in mine), "all_reduce on a split group")
    # A split that leaves some ranks out: they get no group and the others go on.
    some = dist.split_group(gyre, split_ranks=[[0, 1]])
    if rank in (0, 1):
        t = values(rank, 3, torch.float32)
        dist.all_reduce(t, group=some)
        equal(t, values(0, 3, torch.float32) + values(1, 3, torch.float32),
              "all_reduce on a split of ranks 0 and 1")
    else:
        expect(some == dist.GroupMember.NON_GROUP_MEMBER, f"rank {rank} outside got {some}")
    dist.barrier(group=gyre)


def check_barriers_and_sequence(rank, world, gyre, gloo):
    dist.monitored_barrier(group=gyre, timeout=datetime.timedelta(seconds=30))
    dist.monitored_barrier(group=gloo, timeout=datetime.timedelta(seconds=30))
    # Ranks other than 0 stay away: rank 0 names them all (wait_all_ranks), as gloo does.
    if rank == 0:
        try:
            dist.monitored_barrier(group=gyre, timeout=datetime.timedelta(seconds=1),
                                   wait_all_ranks=True)
            raise AssertionError("a monitored_barrier missing ranks passed")
        except RuntimeError as e:
            missing = ", ".join(str(r) for r in range(1, world))
            expect(f"{missing} failed to pass monitoredBarrier" in str(e),
                   f"monitored_barrier error: {e}")
    dist.barrier(group=gyre)
    # Sequence numbers agree across ranks and count the group's operations.
    seq = gyre._get_sequence_number_for_group()
    seqs = [None] * world
    dist.all_gather_object(seqs, seq, group=gloo)
    expect(len(set(seqs)) == 1, f"sequence numbers differ across ranks: {seqs}")
    dist.all_reduce(torch.ones(1), group=gyre)
    expect(gyre._get_sequence_number_for_group() > seq, "the sequence number did not advance")


def check_sparse_error(rank, world, gyre, gloo):
    sparse = torch.sparse_coo_tensor([[0, 2]], [1.0, 2.0], (4,))
    try:
        dist.all_reduce(sparse, group=gyre)
        raise AssertionError("a sparse all_reduce passed on gyre")
    except (RuntimeError, ValueError) as e:
        expect("to_dense" in str(e) and "Sparse" in str(e), f"sparse error: {e}")
    dist.barrier(group=gyre)


def check_dtensor(rank, world, gyre, gloo):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    mesh = DeviceMesh.from_group(gyre, "cpu")
    full = torch.arange(world * 6 * 5, dtype=torch.float32).reshape(world * 6, 5)
    dt = distribute_tensor(full, mesh, [Shard(0)])
    equal(dt.to_local(), full[rank * 6:(rank + 1) * 6], "distribute_tensor Shard(0): local part")
    equal(dt.full_tensor(), full, "DTensor.full_tensor()")
    rep = dt.redistribute(mesh, [Replicate()])
    equal(rep.to_local(), full, "redistribute Shard(0) -> Replicate")
    back = rep.redistribute(mesh, [Shard(1)])
    equal(back.full_tensor(), full, "redistribute Replicate -> Shard(1), full_tensor")
    # Uneven shards (7 rows over the world) go through the padded all-gather.
    odd = torch.arange(7 * 3, dtype=torch.int64).reshape(7, 3)
    equal(distribute_tensor(odd, mesh, [Shard(0)]).full_tensor(), odd, "uneven Shard(0)")
    # A partial sum reduced to shards: reduce_scatter.
    part = distribute_tensor(full, mesh, [Replicate()])
    from torch.distributed.tensor.placement_types import Partial
    from torch.distributed.tensor import DTensor
    p = DTensor.from_local(full * (rank + 1), mesh, [Partial()])
    scale = world * (world + 1) // 2
    equal(p.redistribute(mesh, [Shard(0)]).full_tensor(), full * scale,
          "redistribute Partial -> Shard(0)")
    equal(part.to_local(), full, "distribute_tensor Replicate")


CHECKS_TORCH2 = [check_coalesced, check_coalescing_device, check_batch_p2p, check_gather_single,
                 check_all_to_all_single, check_split, check_barriers_and_sequence,
                 check_sparse_error, check_dtensor]


# ---- torch 1.13 -----------------------------------------------------------------------------

def check_113(rank, world, gyre, gloo):
    def coalesced(g):
        ts = [values(rank, n, torch.float32, n) for n in (3, 7, 1)]
        dist.all_reduce_coalesced(ts, group=g)
        return ts
    both(gyre, gloo, coalesced, "all_reduce_coalesced")
    check_batch_p2p(rank, world, gyre, gloo)
    check_all_to_all_single(rank, world, gyre, gloo)
    # torch 1.13's Python monitored_barrier admits gloo only: the group's own method.
    gyre.monitored_barrier(datetime.timedelta(seconds=30), False)
    seqs = [None] * world
    dist.all_gather_object(seqs, gyre._get_sequence_number_for_group(), group=gloo)
    expect(len(set(seqs)) == 1, f"sequence numbers differ across ranks: {seqs}")


SKIPPED_113 = ["coalesced all_gather_into_tensor / reduce_scatter_tensor (torch >= 2)",
               "startCoalescing/endCoalescing with a device (torch >= 2)",
               "gather_single (torch >= 2.15)", "split_group (torch >= 2.15)",
               "sparse all_reduce's error (allreduce_sparse, torch >= 2)", "DTensor (torch >= 2)"]


def run_rank(rank, world, init_method):
    torch.set_num_threads(1)
    dist.init_process_group("gyre", init_method=init_method, rank=rank, world_size=world)
    gyre = dist.group.WORLD
    gloo = dist.new_group(list(range(world)), backend="gloo")
    checks = CHECKS_TORCH2 if TORCH2 else [check_113]
    for check in checks:
        check(rank, world, gyre, gloo)
        if rank == 0:
            print(f"world {world}: {check.__name__} ok", flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", default="2,4")
    args = parser.parse_args()
    import torch.multiprocessing as mp
    if not TORCH2:
        print("torch " + torch.__version__ + ": skipped (not in this torch): " +
              "; ".join(SKIPPED_113), flush=True)
    with tempfile.TemporaryDirectory(prefix="surface_test.") as tmp:
        for world in (int(w) for w in args.world.split(",")):
            mp.spawn(run_rank, args=(world, f"file://{tmp}/store{world}"), nprocs=world,
                     join=True)
    print(f"torch {torch.__version__}: backend methods ok at world sizes {args.world}")


if __name__ == "__main__":
    sys.exit(main())

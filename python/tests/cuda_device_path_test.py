#!/usr/bin/env python3
"""gyre_torch's device path for CUDA tensors (docs/pytorch.md, "CUDA tensors"): every
mapped collective on CUDA tensors, on backend "gyre", against the same call on CPU tensors
on gloo in the same run, exactly; torch's stream semantics; DDP and FSDP2 on CUDA tensors
against the same training on CPU with gloo.

    python3 python/tests/cuda_device_path_test.py [--world 2,4] [--device cuda|cpu]

Every rank of a world uses cuda:0 (several ranks on one GPU, which gyre's device path
allows). --device cpu runs the same checks on CPU tensors (gyre's host path; the stream
checks are left out): a check of this script itself on a machine without a GPU.
Inputs are small integers (float64 training with integer weights and a power-of-two
learning rate, two steps), so every result is exact in any reduction order.
Exit 77 (skipped) with the reason where CUDA is unavailable, torch is older than 2.6, or
the extension was built without the device path.
"""
import argparse
import datetime
import os
import socket
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist

import gyre_torch

R = dist.ReduceOp
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
          torch.int64, torch.uint8, torch.int8]


def values(rank, n, dtype, device):
    # 1..3, rank-dependent: products of up to 4 ranks stay < 128 (int8 exact).
    return ((torch.arange(n) + rank) % 3 + 1).to(dtype).to(device)


def total(world, n, dtype):
    return sum(values(r, n, torch.int64, "cpu") for r in range(world)).to(dtype)


class Checker:
    def __init__(self, rank, world, device, gloo):
        self.rank, self.world, self.device, self.gloo = rank, world, device, gloo
        self.count = 0

    def same(self, got, want, what):
        got = got.cpu()
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            raise AssertionError(f"rank {self.rank}, world {self.world}: {what}: got "
                                 f"{got.flatten()[:8].tolist()}, gloo on CPU "
                                 f"{want.flatten()[:8].tolist()}")
        self.count += 1

    def both(self, fn, make, what):
        """fn(tensors, group) on gyre with `make(device)`'s tensors and on gloo with
        make("cpu")'s; every tensor fn touched must end equal."""
        mine = make(self.device)
        ref = make("cpu")
        fn(mine, None)
        fn(ref, self.gloo)
        flat = lambda ts: [t for x in ts for t in (x if isinstance(x, list) else [x])]  # noqa
        for i, (a, b) in enumerate(zip(flat(mine), flat(ref))):
            self.same(a, b, f"{what} (tensor {i})")


def check_collectives(c):
    rank, world, n = c.rank, c.world, 37
    root = 1 % world
    for dtype in DTYPES:
        ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX]
        if dtype.is_floating_point:
            ops.append(R.AVG)
        else:
            ops += [R.BAND, R.BOR, R.BXOR]  # no gyre op: all-gather + local reduction
        for op in ops:
            if op == R.AVG:  # gloo has no AVG: its SUM, divided (exact: world is 2 or 4)
                t = values(rank, n, dtype, c.device)
                dist.all_reduce(t, op=R.AVG)
                c.same(t, total(world, n, dtype) / world, f"all_reduce {dtype} AVG")
                continue
            c.both(lambda ts, g: dist.all_reduce(ts[0], op=op, group=g),
                   lambda d: [values(rank, n, dtype, d)], f"all_reduce {dtype} {op}")
            # reduce: the root's result against gloo's all_reduce (only the root's is defined)
            t = values(rank, n, dtype, c.device)
            dist.reduce(t, dst=root, op=op)
            ref = values(rank, n, dtype, "cpu")
            dist.all_reduce(ref, op=op, group=c.gloo)
            if rank == root:
                c.same(t, ref, f"reduce {dtype} {op} to root {root}")
            if op in (R.SUM, R.MAX, R.BXOR):
                c.both(lambda ts, g: dist.reduce_scatter_tensor(ts[0], ts[1], op=op, group=g),
                       lambda d: [torch.zeros(5, dtype=dtype, device=d),
                                  values(rank, 5 * world, dtype, d)],
                       f"reduce_scatter_tensor {dtype} {op}")
        c.both(lambda ts, g: dist.broadcast(ts[0], src=root, group=g),
               lambda d: [values(rank, n, dtype, d)], f"broadcast {dtype}")
        c.both(lambda ts, g: dist.all_gather(ts[1], ts[0], group=g),
               lambda d: [values(rank, n, dtype, d),
                          [torch.zeros(n, dtype=dtype, device=d) for _ in range(world)]],
               f"all_gather {dtype}")
        c.both(lambda ts, g: dist.all_gather_into_tensor(ts[1], ts[0], group=g),
               lambda d: [values(rank, n, dtype, d),
                          torch.zeros(world * n, dtype=dtype, device=d)],
               f"all_gather_into_tensor {dtype}")
        c.both(lambda ts, g: dist.reduce_scatter(ts[0], ts[1], op=R.SUM, group=g),
               lambda d: [torch.zeros(4, dtype=dtype, device=d),
                          [values(rank + r, 4, dtype, d) for r in range(world)]],
               f"reduce_scatter (list) {dtype}")
        c.both(lambda ts, g: dist.all_to_all_single(ts[1], ts[0], group=g),
               lambda d: [values(rank, 3 * world, dtype, d),
                          torch.zeros(3 * world, dtype=dtype, device=d)],
               f"all_to_all_single equal {dtype}")

    # Uneven splits: rank r sends p + 1 rows to rank p, receives r + 1 from each.
    def uneven(d):
        rows = sum(p + 1 for p in range(world))
        return [values(rank, rows * 2, torch.float32, d).view(rows, 2),
                torch.zeros(world * (rank + 1), 2, device=d)]
    c.both(lambda ts, g: dist.all_to_all_single(
        ts[1], ts[0], output_split_sizes=[rank + 1] * world,
        input_split_sizes=[p + 1 for p in range(world)], group=g), uneven,
        "all_to_all_single uneven")
    # Dtypes and ops gyre's device kernels lack (int16: all-gather + local reduction;
    # bool: bytes; complex: pairs of reals; PREMUL_SUM: scaled first), and tensors gyre
    # cannot take in place; against references made here (gloo lacks some of them).
    t = values(rank, n, torch.int16, c.device)
    dist.all_reduce(t)
    c.same(t, total(world, n, torch.int16), "all_reduce int16 SUM")
    t = values(rank, n, torch.int64, c.device) == 2
    dist.all_reduce(t, op=R.MAX)
    c.same(t, torch.stack([values(r, n, torch.int64, "cpu") == 2 for r in range(world)]).any(0),
           "all_reduce bool MAX")
    t = values(rank, n, torch.float32, c.device) * (1 + 2j)
    dist.all_reduce(t)
    c.same(t, total(world, n, torch.float32) * (1 + 2j), "all_reduce complex64 SUM")
    t = values(rank, n, torch.float32, c.device)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
    c.same(t, total(world, n, torch.float32) * 2, "all_reduce PREMUL_SUM(2.0)")
    t = values(rank, 6 * 5, torch.float32, c.device).view(6, 5).t()
    dist.all_reduce(t)
    c.same(t, total(world, 6 * 5, torch.float32).view(6, 5).t(), "all_reduce non-contiguous")
    t = values(rank, 6 * 5, torch.int32, c.device).view(6, 5)[:, 1:4]
    dist.broadcast(t, src=root)
    c.same(t, values(root, 6 * 5, torch.int32, "cpu").view(6, 5)[:, 1:4],
           "broadcast non-contiguous")
    t = torch.zeros(0, device=c.device)
    dist.all_reduce(t)
    c.same(t, torch.zeros(0), "all_reduce of 0 elements")

    # send/recv around the ring: even ranks send first.
    def ring(ts, g):
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        if rank % 2 == 0:
            dist.send(ts[0], nxt, group=g)
            dist.recv(ts[1], prv, group=g)
        else:
            dist.recv(ts[1], prv, group=g)
            dist.send(ts[0], nxt, group=g)
    if world % 2 == 0:
        c.both(ring, lambda d: [values(rank, 1000, torch.float32, d),
                                torch.zeros(1000, device=d)], "send/recv ring")

    # A CPU tensor on the same group between CUDA calls stays on the host path.
    t = values(rank, 9, torch.int64, "cpu")
    dist.all_reduce(t)
    c.same(t, sum(values(r, 9, torch.int64, "cpu") for r in range(world)), "CPU all_reduce")
    dist.barrier()


def check_streams(c):
    """Stream semantics, as ProcessGroupNCCL's."""
    rank, world = c.rank, c.world
    want = sum(values(r, 1 << 16, torch.float32, "cpu") for r in range(world))
    side = torch.cuda.Stream()
    # Delayed side stream: the all-reduce on it runs after a ~1 s kernel. wait() must not
    # block the host, and must make the current stream wait for it.
    t = values(rank, 1 << 16, torch.float32, "cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)
        work = dist.all_reduce(t, async_op=True)
    start = time.monotonic()
    if work.is_completed():
        raise AssertionError(f"rank {rank}: is_completed() before the stream ran the call")
    work.wait()
    waited = time.monotonic() - start
    doubled = t * 2  # on the current stream, which wait() made wait for the side stream
    c.same(doubled, want * 2, "async all_reduce, wait(), then a kernel on the current stream")
    if waited > 0.5:
        raise AssertionError(f"rank {rank}: work.wait() blocked the host {waited:.2f} s "
                             f"(it must only make the current stream wait)")
    deadline = time.monotonic() + 30
    while not work.is_completed():
        if time.monotonic() > deadline:
            raise AssertionError(f"rank {rank}: is_completed() still False after 30 s")
        time.sleep(0.01)
    # The whole call on a non-default stream, the result read on it.
    with torch.cuda.stream(side):
        u = values(rank, 4096, torch.float32, "cuda")
        dist.all_reduce(u)
        c.same(u * 1, sum(values(r, 4096, torch.float32, "cpu") for r in range(world)),
               "all_reduce under torch.cuda.stream()")
    # The future: then() on its value, no synchronize.
    v = values(rank, 512, torch.float32, "cuda")
    with torch.cuda.stream(side):
        torch.cuda._sleep(500_000_000)
        fut = dist.all_reduce(v, async_op=True).get_future()
    got = fut.wait()[0] + 0  # wait() makes the current stream wait for the call
    c.same(got, sum(values(r, 512, torch.float32, "cpu") for r in range(world)),
           "get_future().wait()")
    # The barrier blocks the host until every rank's stream has passed it.
    dist.barrier()


def train_model(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8, bias=False), torch.nn.ReLU(),
                                torch.nn.Linear(8, 4, bias=False)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-1, 2, p.shape, dtype=torch.float64))
    return model.to(device)


def batches(rank, device):
    g = torch.Generator().manual_seed(100 + rank)
    return [torch.randint(-1, 2, (4, 8), generator=g, dtype=torch.float64).to(device)
            for _ in range(2)]


def run_steps(model, rank, device):
    # Two steps at a power-of-two rate: every gradient and weight stays exact in float64
    # (a third step would need more than its 53 bits), so any reduction order agrees.
    opt = torch.optim.SGD(model.parameters(), lr=2.0 ** -6)
    for x in batches(rank, device):
        opt.zero_grad()
        model(x).pow(2).sum().backward()
        opt.step()


def check_ddp(c):
    from torch.nn.parallel import DistributedDataParallel as DDP
    mine = train_model(c.device)
    ddp = DDP(mine, device_ids=[0] if c.device == "cuda" else None)
    run_steps(ddp, c.rank, c.device)
    ref = DDP(train_model("cpu"), process_group=c.gloo)
    run_steps(ref, c.rank, "cpu")
    for (name, a), (_, b) in zip(mine.named_parameters(), ref.module.named_parameters()):
        c.same(a.detach(), b.detach(), f"DDP parameter {name} after 2 steps")


def check_fsdp(c):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    def sharded(device, group):
        model = train_model(device)
        mesh = DeviceMesh.from_group(group, device)
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    mine = sharded(c.device, dist.group.WORLD)
    run_steps(mine, c.rank, c.device)
    ref = sharded("cpu", c.gloo)
    run_steps(ref, c.rank, "cpu")
    for (name, a), (_, b) in zip(mine.named_parameters(), ref.named_parameters()):
        c.same(a.full_tensor().detach(), b.full_tensor().detach(),
               f"FSDP2 parameter {name} after 2 steps")


def rank_main(rank, world, port, device, out):
    os.environ["OMP_NUM_THREADS"] = "1"
    if device == "cuda":
        torch.cuda.set_device(0)
    timeout = datetime.timedelta(seconds=60)
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=timeout)
    dist.init_process_group("gyre", store=store, rank=rank, world_size=world, timeout=timeout)
    gloo = dist.new_group(backend="gloo", timeout=timeout)
    c = Checker(rank, world, device, gloo)
    failures = []
    checks = [("collectives", check_collectives), ("ddp", check_ddp), ("fsdp2", check_fsdp)]
    if device == "cuda":
        checks.insert(1, ("streams", check_streams))
    for name, fn in checks:
        start = time.monotonic()
        try:
            fn(c)
            if rank == 0:
                print(f"world {world} {name}: ok, {c.count} checks so far, "
                      f"{time.monotonic() - start:.1f} s", flush=True)
        except Exception as e:  # noqa: BLE001  (reported by the parent)
            failures.append(f"{name}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")
            break  # the ranks may now be out of step: the rest would only hang
    with open(f"{out}/r{rank}", "w") as f:
        f.write("\n".join(failures))
    if not failures:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(world, device, limit_s):
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as out:
        ctx = mp.start_processes(rank_main, nprocs=world, join=False, start_method="spawn",
                                 args=(world, free_port(), device, out))
        deadline = time.monotonic() + limit_s
        failed = None
        try:
            while not ctx.join(timeout=max(1.0, deadline - time.monotonic())):
                if time.monotonic() >= deadline:
                    failed = f"world {world}: still running after {limit_s} s (killed)"
                    break
        except Exception as e:  # noqa: BLE001  (a rank exited non-zero)
            failed = f"world {world}: {e}"
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
            p.join(10)
        reports = []
        for r in range(world):
            path = f"{out}/r{r}"
            text = open(path).read() if os.path.exists(path) else "no report (rank died)"
            if text:
                reports.append(f"rank {r}: {text}")
        if failed or reports:
            return [failed or f"world {world}"] + reports
    return []


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", default="2,4")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--timeout", type=int, default=300, help="seconds per world size")
    args = parser.parse_args()
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 6):
        print(f"SKIPPED: cuda_device_path_test needs torch >= 2.6 (the device path, FSDP2); "
              f"this is {torch.__version__}")
        sys.exit(77)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print(f"SKIPPED: cuda_device_path_test needs a CUDA GPU: torch "
                  f"{torch.__version__} (CUDA {torch.version.cuda}) sees none "
                  f"(torch.cuda.is_available() is False)")
            sys.exit(77)
        if not gyre_torch._C.device_path:
            print("SKIPPED: gyre_torch was built without the device path (GYRE_TORCH_CUDA=0, "
                  "or no CUDA toolkit or CUDA torch at build time): CUDA tensors are staged")
            sys.exit(77)
    failures = []
    for world in [int(w) for w in args.world.split(",")]:
        start = time.monotonic()
        failures += run_world(world, args.device, args.timeout)
        print(f"world {world} on {args.device}: {'FAILED' if failures else 'ok'} "
              f"{time.monotonic() - start:.1f} s", flush=True)
        if failures:
            break
    if failures:
        print("FAILED:\n" + "\n".join(failures))
        sys.exit(1)
    print(f"cuda_device_path_test on {args.device}: all passed")


if __name__ == "__main__":
    main()

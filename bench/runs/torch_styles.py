#!/usr/bin/env python3
"""One training run of one style on one backend, under torchrun (bench/runs/torch_styles.sh
runs them in alternating rounds; results and how to read them: docs/pytorch.md,
"Training styles: measured").

  torchrun --nproc-per-node 4 bench/runs/torch_styles.py --style fsdp --backend gyre

Model: --blocks blocks of Linear(h, 4h), ReLU, Linear(4h, h), ReLU (a transformer's MLP),
then the loss (cross-entropy over h classes); synthetic data made on each rank from a seed,
so nothing but the style's own collectives crosses ranks. Styles:
  fsdp  FSDP2: fully_shard on every block, then on the model (all-gathers in forward and
        backward, reduce-scatters of the gradients); --batch samples per rank
  tp    tensor parallelism: parallelize_module, each block's first Linear ColwiseParallel
        and its second RowwiseParallel (an all-reduce of the activations per block in
        forward, of the input gradients in backward); every rank sees the same --batch
        samples, so samples/s counts them once
  ddp   DistributedDataParallel (default buckets); --batch samples per rank
--backend fake runs the same steps on torch's FakeProcessGroup, whose collectives return at
once without moving data: the computation's floor (its loss is not a trained one).
Rank 0 prints one JSON line: style, backend, world, samples_per_s over the timed steps,
step_ms (median, min, max of rank 0's step times), final loss, settings. --profile DIR
writes rank 0's torch profiler table of the timed steps to DIR (STYLE_BACKEND_wWORLD.txt,
and .json: every op's calls and milliseconds per step).
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402


class Block(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.up = nn.Linear(h, 4 * h)
        self.down = nn.Linear(4 * h, h)

    def forward(self, x):
        return torch.relu(self.down(torch.relu(self.up(x))))


class Model(nn.Module):
    def __init__(self, h, blocks):
        super().__init__()
        self.blocks = nn.ModuleList(Block(h) for _ in range(blocks))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--style", choices=("fsdp", "tp", "ddp"), required=True)
    ap.add_argument("--backend", default="gyre")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile", default=None, help="folder for rank 0's profiler table")
    args = ap.parse_args()

    if args.backend == "gyre":
        import gyre_torch  # noqa: F401  (a build on PYTHONPATH registers itself on import)
    if args.backend == "fake":
        # torch's FakeProcessGroup: every collective returns at once without moving a byte,
        # so the step is the style's computation alone, the floor no backend can beat.
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", store=FakeStore(), rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]))
    else:
        dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights on every rank
    model = Model(args.hidden, args.blocks)

    from torch.distributed.device_mesh import init_device_mesh
    if args.style == "fsdp":
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        for b in model.blocks:
            fully_shard(b, mesh=mesh)
        fully_shard(model, mesh=mesh)
    elif args.style == "tp":
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                       parallelize_module)
        mesh = init_device_mesh("cpu", (world,))
        plan = {}
        for i in range(args.blocks):
            plan[f"blocks.{i}.up"] = ColwiseParallel()
            plan[f"blocks.{i}.down"] = RowwiseParallel()
        model = parallelize_module(model, mesh, plan)
    elif args.backend != "fake":  # DDP's reducer rejects the fake group's results:
        from torch.nn.parallel import DistributedDataParallel  # its floor is the bare model
        model = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    # tp: every rank the same samples; fsdp, ddp: each rank its own.
    gen = torch.Generator().manual_seed(1000 + (0 if args.style == "tp" else rank))
    n = args.warmup + args.steps
    xs = torch.randn(n, args.batch, args.hidden, generator=gen)
    ys = torch.randint(0, args.hidden, (n, args.batch), generator=gen)
    loss_fn = nn.CrossEntropyLoss()

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xs[i]), ys[i])
        loss.backward()
        opt.step()
        return loss

    for i in range(args.warmup):
        step(i)
    dist.barrier()
    prof = None
    if args.profile and rank == 0:
        from torch.profiler import ProfilerActivity, profile
        prof = profile(activities=[ProfilerActivity.CPU])
        prof.__enter__()
    times = []
    t0 = time.perf_counter()
    last = t0
    for i in range(args.warmup, n):
        loss = step(i)
        now = time.perf_counter()
        times.append(now - last)
        last = now
    # Every rank's last step done before the clock stops (FSDP and TP steps end on
    # collectives already; DDP's optimizer step does not wait for the other ranks).
    dist.barrier()
    elapsed = time.perf_counter() - t0
    if prof is not None:
        prof.__exit__(None, None, None)
        os.makedirs(args.profile, exist_ok=True)
        name = os.path.join(args.profile, f"{args.style}_{args.backend}_w{world}")
        events = prof.key_averages()
        with open(name + ".txt", "w") as f:
            f.write(events.table(sort_by="cpu_time_total", row_limit=40))
        with open(name + ".json", "w") as f:  # every op: calls and ms per timed step
            json.dump({e.key: {"calls": e.count, "ms_per_step": round(e.cpu_time_total / 1000 / args.steps, 3),
                               "self_ms_per_step": round(e.self_cpu_time_total / 1000 / args.steps, 3)}
                       for e in sorted(events, key=lambda e: -e.cpu_time_total)}, f, indent=1)
    samples = args.batch * (1 if args.style == "tp" else world) * args.steps
    if rank == 0:
        print(json.dumps({
            "style": args.style, "backend": args.backend, "world": world,
            "samples_per_s": round(samples / elapsed, 1),
            "step_ms": round(1000 * statistics.median(times), 2),
            "step_ms_min": round(1000 * min(times), 2), "step_ms_max": round(1000 * max(times), 2),
            "loss": round(float(loss.detach()), 6), "hidden": args.hidden, "blocks": args.blocks,
            "batch": args.batch, "steps": args.steps, "warmup": args.warmup,
            "params": sum(p.numel() for p in Model(args.hidden, args.blocks).parameters()),
        }), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

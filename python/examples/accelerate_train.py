#!/usr/bin/env python3
"""A short Hugging Face Accelerate training on CPU over any torch.distributed backend.

  torchrun --nproc_per_node 2 accelerate_train.py --backend gyre
  gyrerun -n 2 python3 accelerate_train.py --backend gyre
  torchrun --nproc_per_node 2 accelerate_train.py --backend gloo   # Accelerate's own init

The recipe (docs/frameworks.md): on CPU, Accelerate picks the backend itself ("gloo", or
"mpi") and refuses any other name given to it (InitProcessGroupKwargs(backend="gyre") or
PartialState(backend="gyre") raise "Your assigned backend gyre is not available, please
use gloo"). It does use a process group that already exists, so the program creates it
first:

    torch.distributed.init_process_group("gyre")   # env:// (torchrun, gyrerun)
    accelerator = Accelerator(cpu=True)

(state.backend then still reads "gloo": it is Accelerate's label, the collectives run on
gyre; --backend gloo skips the init_process_group line, Accelerate's own path.)

Model: a 32-64-4 MLP; data: a deterministic synthetic set (the same on every rank and
every backend) in a shuffled DataLoader that accelerator.prepare shards; SGD with
momentum; --steps optimizer steps. Rank 0 prints one JSON line: {"framework", "backend"
(what the process group runs on), "accelerate_backend" (Accelerate's label), "world",
"losses" (per step, one list per rank), "step_s" (the mean wall time of a step after the
first 5)}. --check-refusal: only report whether Accelerate refuses backend="gyre".
"""
import argparse
import json
import os
import sys
import time
import warnings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from accelerate import Accelerator  # noqa: E402
from accelerate.utils import InitProcessGroupKwargs, set_seed  # noqa: E402

import gyre_torch  # noqa: E402,F401  (registers "gyre"; a pip install registers it without)

# Accelerate warns that it set the thread count when OMP_NUM_THREADS is unset.
warnings.filterwarnings("ignore", ".*OMP_NUM_THREADS/MKL_NUM_THREADS unset.*")


def dataset(n):
    gen = torch.Generator().manual_seed(1234)
    centers = torch.randn(4, 32, generator=gen)
    y = torch.randint(0, 4, (n,), generator=gen)
    x = centers[y] + 1.5 * torch.randn(n, 32, generator=gen)
    return TensorDataset(x, y)


def check_refusal():
    """Whether Accelerate takes backend="gyre" on CPU: prints one JSON line."""
    try:
        Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(backend="gyre")])
    except ValueError as e:
        result = {"refused": True, "message": str(e)}
    else:
        result = {"refused": False, "backend": dist.get_backend()}
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(result), flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="gyre")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=16, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--check-refusal", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.check_refusal:
        check_refusal()
        return
    if args.backend != "gloo":
        # Accelerate's CPU path only knows gloo and mpi: create the group first.
        dist.init_process_group(args.backend)
    accelerator = Accelerator(cpu=True)
    set_seed(0)
    world = accelerator.num_processes
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    data = DataLoader(dataset(args.steps * args.batch * world), batch_size=args.batch,
                      shuffle=True)
    model, opt, data = accelerator.prepare(model, opt, data)
    losses, times = [], []
    for x, y in data:
        times.append(time.perf_counter())
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        accelerator.backward(loss)
        opt.step()
        losses.append(loss.detach().clone())
    times.append(time.perf_counter())
    every = accelerator.gather(torch.stack(losses)).reshape(world, -1)
    timed = times[5:]
    step_s = (timed[-1] - timed[0]) / (len(timed) - 1) if len(timed) > 1 else 0.0
    if accelerator.is_main_process:
        import accelerate
        print(json.dumps({"framework": "accelerate " + accelerate.__version__,
                          "backend": dist.get_backend(),
                          "accelerate_backend": accelerator.state.backend,
                          "distributed_type": accelerator.distributed_type.value,
                          "world": world, "losses": every.tolist(), "step_s": step_s}),
              flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main(sys.argv[1:])

#!/usr/bin/env python3
"""DDP training on CPU: the tutorial workflow, on any backend and under any launcher.

  python3 ddp_train.py --backend gyre -N 4                     # torch.multiprocessing.spawn
  torchrun --nproc_per_node 4 ddp_train.py --backend gyre      # (torch 1.13 on Python 3.11:
  python3 -m gyre_torch.torchrun --nproc_per_node 4 ddp_train.py ...   see docs/pytorch.md)
  python3 -m torch.distributed.launch --nproc_per_node 4 ddp_train.py ...   (--local_rank)
  gyrerun -n 4 python3 ddp_train.py ...

Model: --model mlp (784-512-256-10, ReLU), conv (two 3x3 conv layers with BatchNorm,
a linear head) or lenet (LeNet-5: two 5x5 conv layers, three linear). Data:
Fashion-MNIST IDX files from --data when present (Debian's dataset-fashion-mnist), else a
deterministic synthetic set of the same shape.
DistributedSampler(shuffle, seed) with set_epoch, SGD(lr, momentum 0.9), batch --batch
per rank, cross-entropy; --bucket-cap-mb sets DDP's bucket_cap_mb. --save PATH: rank 0
saves model.module.state_dict() at the end; --load PATH: every rank loads it (any world
size) before training.
Rank 0 prints one JSON line: {"backend", "world", "losses" (the mean loss over ranks per
step, all-reduced on gloo... on the training backend), "samples_per_s", "buckets" (DDP's
bucket sizes in bytes after its rebuild), "test_acc"}.
"""
import argparse
import gzip
import json
import os
import socket
import struct
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

import gyre_torch  # noqa: E402,F401  (registers "gyre" on torch 1.13)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def load_data(data_dir, train_count):
    names = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
             "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
    paths = [os.path.join(data_dir, n) for n in names]
    if all(os.path.exists(p) for p in paths):
        xs, ys, xt, yt = (read_idx(p) for p in paths)
        xs, xt = xs.float().div_(255).reshape(-1, 784), xt.float().div_(255).reshape(-1, 784)
        return xs[:train_count], ys[:train_count].long(), xt, yt.long(), "fashion-mnist"
    gen = torch.Generator().manual_seed(1234)  # the same on every rank
    centers = torch.rand(10, 784, generator=gen)
    def make(n):
        y = torch.randint(0, 10, (n,), generator=gen)
        return (centers[y] + 0.3 * torch.rand(n, 784, generator=gen)).clamp_(0, 1), y
    xs, ys = make(train_count)
    xt, yt = make(2000)
    return xs, ys, xt, yt, "synthetic"


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        return self.head(self.features(x.reshape(-1, 1, 28, 28)).flatten(1))


class LeNet5(nn.Module):
    """LeCun's LeNet-5 as PyTorch's "Neural Networks" tutorial writes it (ReLU, max-pool,
    no padding), for 28x28 inputs:
    44k parameters over 3.7x less compute per sample than ConvNet, so the gradient
    exchange is a larger share of a step (the model a backend's speed shows in)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Linear(16 * 4 * 4, 120), nn.ReLU(), nn.Linear(120, 84),
                                  nn.ReLU(), nn.Linear(84, 10))

    def forward(self, x):
        return self.head(self.features(x.reshape(-1, 1, 28, 28)).flatten(1))


def build_model(kind):
    if kind == "conv":
        return ConvNet()
    if kind == "lenet":
        return LeNet5()
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                         nn.Linear(256, 10))


def train(rank, world, args):
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    xs, ys, xt, yt, source = load_data(args.data, args.train_count)
    model = build_model(args.model)
    if args.load:
        model.load_state_dict(torch.load(args.load, map_location="cpu"))
    # bucket_cap_mb=None is torch's 25 MB: the MLP's 2.1 MB of gradients travel as one
    # bucket that starts when backward ends; a smaller cap splits them, so the first
    # buckets' exchange overlaps the rest of backward.
    ddp = DistributedDataParallel(model, **({"bucket_cap_mb": args.bucket_cap_mb}
                                            if args.bucket_cap_mb else {}))
    if args.hook == "local":  # no gradient exchange at all: the compute ceiling
        def local_hook(_state, bucket):
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut
        ddp.register_comm_hook(None, local_hook)
    elif args.hook == "sync":  # one 4-byte all-reduce per bucket, gradients kept local:
        # the ceiling of a training that meets its peers every step (ranks that share
        # cores wait for the slowest one), without the bytes
        token = torch.zeros(1)

        def sync_hook(_state, bucket):
            fut = dist.all_reduce(token, async_op=True).get_future()
            return fut.then(lambda _f: bucket.buffer())
        ddp.register_comm_hook(None, sync_hook)
    elif args.hook != "none":  # torch's built-in gradient compression hooks
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        hook = {"fp16": default_hooks.fp16_compress_hook,
                "bf16": default_hooks.bf16_compress_hook}[args.hook]
        ddp.register_comm_hook(None, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    sampler = DistributedSampler(range(xs.shape[0]), num_replicas=world, rank=rank,
                                 shuffle=True, seed=args.seed)
    losses, timed_s, samples = [], 0.0, 0
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler))
        dist.barrier()
        start = time.perf_counter()
        for b in range(0, len(order), args.batch):
            if 0 <= args.steps <= step:
                break
            idx = order[b:b + args.batch]
            opt.zero_grad()
            loss = loss_fn(ddp(xs[idx]), ys[idx])
            loss.backward()
            opt.step()
            losses.append(loss.detach())
            samples += len(idx) * world
            step += 1
        dist.barrier()
        timed_s += time.perf_counter() - start
    # The mean loss over ranks per step, in one all-reduce after timing.
    per_step = torch.stack(losses) if losses else torch.zeros(0)
    dist.all_reduce(per_step)
    per_step /= world
    ddp.eval()
    with torch.no_grad():
        part = slice(rank, None, world)
        correct = torch.tensor([(ddp(xt[part]).argmax(1) == yt[part]).sum().item(), len(yt[part])],
                               dtype=torch.float64)
    dist.all_reduce(correct)
    if args.save and rank == 0:
        torch.save(ddp.module.state_dict(), args.save)
    dist.barrier()
    if rank == 0:
        print(json.dumps({"backend": args.backend, "world": world, "model": args.model,
                          "data": source, "steps": step, "losses": per_step.tolist(),
                          "samples_per_s": samples / timed_s if timed_s else 0.0,
                          "buckets": ddp._get_ddp_logging_data().get("rebuilt_bucket_sizes", ""),
                          "test_acc": correct[0].item() / correct[1].item()}), flush=True)


def run_rank(rank, world, args, init_method):
    dist.init_process_group(args.backend, init_method=init_method, rank=rank, world_size=world)
    try:
        train(rank, world, args)
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="gyre")
    p.add_argument("-N", "--nproc", type=int, default=2, help="mp.spawn ranks (no launcher)")
    p.add_argument("--model", default="mlp", choices=["mlp", "conv", "lenet"])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=-1,
                   help="stop after this many steps (-1: all epochs; 0: only evaluate)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-count", type=int, default=60000)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--hook", default="none",
                   choices=["none", "fp16", "bf16", "local", "sync"],
                   help="DDP communication hook: torch's fp16/bf16 gradient compression; "
                        "local: no gradient exchange (a benchmark's compute ceiling, the "
                        "replicas diverge); sync: a 4-byte all-reduce per bucket and no "
                        "gradient exchange (the ceiling of meeting every step)")
    p.add_argument("--bucket-cap-mb", type=float, default=0,
                   help="DDP's bucket_cap_mb (0: torch's default, 25)")
    p.add_argument("--save", default="")
    p.add_argument("--load", default="")
    p.add_argument("--local_rank", "--local-rank", type=int, default=None,
                   help="set by python -m torch.distributed.launch")
    args = p.parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # a launcher started us
        run_rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args, "env://")
        return
    if args.local_rank is not None:
        sys.exit("--local_rank without RANK/WORLD_SIZE in the environment")
    import torch.multiprocessing as mp
    mp.spawn(run_rank, args=(args.nproc, args, f"tcp://127.0.0.1:{free_port()}"),
             nprocs=args.nproc, join=True)


if __name__ == "__main__":
    main(sys.argv[1:])

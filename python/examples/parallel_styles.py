#!/usr/bin/env python3
"""FSDP2 (with a torch.distributed.checkpoint save and load), tensor parallelism and
pipeline parallelism on backend gyre, CPU tensors, torch >= 2.6 (docs/pytorch.md,
"Parallelism styles").

    torchrun --nproc_per_node=2 python/examples/parallel_styles.py [--style fsdp,tp,pp]
             [--backend gyre] [--steps 20] [--checkpoint DIR]

Each style trains a small model on random data with AdamW and prints one JSON line on
rank 0: {"style": ..., "losses": [...]}. pp needs an even world size (2 stages).
"""
import argparse
import json
import os
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

import gyre_torch  # noqa: F401  (a build on PYTHONPATH; pip install registers it with torch)

DIM = 64


def mlp():
    return nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))


def data(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, DIM, generator=g)
    return x, x.flip(1)  # learn to reverse the features


def train(model, params, steps, rank, step_fn=None):
    opt = torch.optim.AdamW(params, lr=3e-3)
    losses = []
    for step in range(steps):
        x, y = data(step, rank)
        loss = step_fn(x, y) if step_fn else F.mse_loss(model(x), y)
        if not step_fn:
            loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(None if loss is None else float(loss.detach()))
    return losses


def fsdp(args, rank, world):
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = nn.Sequential(mlp(), mlp())
    for block in model:
        fully_shard(block, mesh=mesh)  # each block's parameters gathered only while it runs
    fully_shard(model, mesh=mesh)
    losses = train(model, model.parameters(), args.steps, rank)  # each rank its own data
    # Save the sharded state; a fresh model (at any world size) loads it back.
    dcp.save(get_model_state_dict(model), checkpoint_id=args.checkpoint)
    torch.manual_seed(1)
    fresh = nn.Sequential(mlp(), mlp())
    for block in fresh:
        fully_shard(block, mesh=mesh)
    fully_shard(fresh, mesh=mesh)
    state = get_model_state_dict(fresh)
    dcp.load(state, checkpoint_id=args.checkpoint)
    set_model_state_dict(fresh, state)
    for a, b in zip(model.parameters(), fresh.parameters()):
        assert torch.equal(a.full_tensor(), b.full_tensor()), "checkpoint round trip"
    return losses


def tp(args, rank, world):
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    # The first Linear split by output features, the second by input features: one
    # all-reduce per forward and one per backward.
    model = parallelize_module(mlp(), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    return train(model, model.parameters(), args.steps, 0)  # every rank the same data


def pp(args, rank, world):
    if world % 2:
        raise SystemExit("pp: an even world size (2 stages, world / 2 pipelines)")
    stage_index, pipe = rank % 2, rank // 2
    group = dist.new_group([2 * pipe, 2 * pipe + 1])  # ranks 2p and 2p + 1: pipeline p
    torch.manual_seed(0)
    model = nn.Sequential(mlp(), mlp())
    stage = PipelineStage(model[stage_index], stage_index, 2, torch.device("cpu"), group=group)
    schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=F.mse_loss)

    def step(x, y):
        if stage_index == 0:
            schedule.step(x)
            return None
        losses = []
        schedule.step(target=y, losses=losses)
        return torch.stack(losses).mean()

    return train(None, model[stage_index].parameters(), args.steps, pipe, step)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--style", default="fsdp,tp,pp")
    p.add_argument("--backend", default="gyre")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--checkpoint", default="", help="DCP folder (default: a temporary one)")
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    with tempfile.TemporaryDirectory(prefix="parallel_styles.") as tmp:
        if not args.checkpoint:
            # Rank 0's folder for everyone (a single host: a shared file system elsewhere).
            box = [tmp]
            dist.broadcast_object_list(box, src=0)
            args.checkpoint = box[0]
        for style in args.style.split(","):
            losses = {"fsdp": fsdp, "tp": tp, "pp": pp}[style](args, rank, world)
            # pp: the loss lives on the last stage.
            reporter = 1 if style == "pp" else 0
            if rank == reporter:
                print(json.dumps({"style": style, "backend": args.backend, "world": world,
                                  "losses": losses}), flush=True)
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

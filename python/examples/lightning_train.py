#!/usr/bin/env python3
"""A short PyTorch Lightning training on CPU over any torch.distributed backend.

  python3 lightning_train.py --backend gyre --devices 2      # Lightning starts the ranks
  torchrun --nproc_per_node 2 lightning_train.py --backend gyre --devices 2
  gyrerun -n 2 python3 lightning_train.py --backend gyre --devices 2

The recipe (docs/frameworks.md): Trainer(accelerator="cpu", devices=N,
strategy=DDPStrategy(process_group_backend="gyre")). Lightning passes the name to
init_process_group unchecked; torch >= 2 finds "gyre" through gyre_torch's entry point.

Model: a 32-64-4 MLP; data: a deterministic synthetic set (the same on every rank and
every backend), shuffled by the DistributedSampler Lightning puts in; SGD with momentum;
--steps optimizer steps. Rank 0 prints one JSON line: {"framework", "backend", "world",
"losses" (per step, one list per rank), "step_s" (the mean wall time of a step after the
first 5), "logged" (the last step's train_loss as self.log(sync_dist=True) reduced it)}.
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

import lightning as L  # noqa: E402
from lightning.pytorch.strategies import DDPStrategy  # noqa: E402

import gyre_torch  # noqa: E402,F401  (registers "gyre"; a pip install registers it without)

# Lightning's advice for a toy run (few DataLoader workers, a log interval longer than
# the epoch) is not what this script is about.
warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*log_every_n_steps.*")


def dataset(n):
    gen = torch.Generator().manual_seed(1234)
    centers = torch.randn(4, 32, generator=gen)
    y = torch.randint(0, 4, (n,), generator=gen)
    x = centers[y] + 1.5 * torch.randn(n, 32, generator=gen)
    return TensorDataset(x, y)


class Model(L.LightningModule):
    def __init__(self, lr):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
        self.lr = lr
        self.losses = []
        self.times = []

    def training_step(self, batch, _idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.losses.append(loss.detach().clone())
        # The mean over ranks, all-reduced by Lightning every step (what a logger gets).
        self.log("train_loss", loss, on_step=True, sync_dist=True)
        return loss

    def on_train_batch_start(self, _batch, _idx):
        self.times.append(time.perf_counter())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)

    def on_train_end(self):
        self.times.append(time.perf_counter())
        # Every rank's per-step losses, gathered over the training backend itself.
        mine = torch.stack(self.losses)
        every = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(every, mine)
        timed = self.times[5:]
        step_s = (timed[-1] - timed[0]) / (len(timed) - 1) if len(timed) > 1 else 0.0
        if self.global_rank == 0:
            print(json.dumps({"framework": "lightning " + L.__version__,
                              "backend": dist.get_backend(), "world": dist.get_world_size(),
                              "losses": [t.tolist() for t in every], "step_s": step_s,
                              "logged": self.trainer.callback_metrics["train_loss"].item()}),
                  flush=True)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="gyre")
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=16, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    L.seed_everything(0, verbose=False)
    data = DataLoader(dataset(args.steps * args.batch * args.devices), batch_size=args.batch,
                      shuffle=True)
    trainer = L.Trainer(accelerator="cpu", devices=args.devices,
                        strategy=DDPStrategy(process_group_backend=args.backend),
                        max_steps=args.steps, max_epochs=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(Model(args.lr), data)


if __name__ == "__main__":
    main(sys.argv[1:])

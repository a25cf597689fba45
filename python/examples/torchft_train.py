#!/usr/bin/env python3
"""One torchft replica group (one rank) training a small model with torchft's DDP and
Manager on CPU, over gyre's process group (ProcessGroupGyre) or torchft's
ProcessGroupGloo: the recipe of docs/torchft.md, and the worker that
python/tests/torchft_test.py and bench/torchft_recovery.py start, kill and restart.

  torchft_lighthouse --min_replicas 1 --bind [::]:29510 &
  python3 torchft_train.py --replica 0 --lighthouse http://localhost:29510 &
  python3 torchft_train.py --replica 1 --lighthouse http://localhost:29510

Each step prints one JSON line on stdout: {"t": wall time, "step": the Manager's step
after it (committed steps so far), "committed", "n": replicas in the step, "loss",
"hash": a digest of the parameters, "how": how the process group was last configured
and in how many ms (gyre: create/shrink/keep), "quorum"}. Stops after --steps committed
steps or --seconds. The replica group serves its own TCPStore (as torchrun's agent
would), so killing the process kills its store too.
"""
import argparse
import datetime
import hashlib
import json
import logging
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torchft import Manager  # noqa: E402
from torchft.ddp import DistributedDataParallel  # noqa: E402
from torchft.optim import OptimizerWrapper  # noqa: E402


def make_pg(kind, timeout):
    if kind == "gyre":
        from gyre_torch.torchft import ProcessGroupGyre
        return ProcessGroupGyre(timeout=timeout)
    if kind == "gyre-rebuild":
        from gyre_torch.torchft import ProcessGroupGyre
        return ProcessGroupGyre(timeout=timeout, reuse=False)
    if kind == "gloo":
        from torchft.process_group import ProcessGroupGloo

        from gyre_torch.torchft import _ReportedWork

        class ReportingGloo(ProcessGroupGloo):
            """torchft's ProcessGroupGloo, its configure timed (last_configure, as
            ProcessGroupGyre's) and a failed all-reduce reported through errored() as
            ProcessGroupGyre does: plain, torchft 0.2.0's DDP hook asserts when the kill
            lands in an all-reduce and the survivor stops."""
            last_configure = None
            _error = None

            def configure(self, *args, **kwargs):
                start = time.monotonic()
                self._error = None
                super().configure(*args, **kwargs)
                self.last_configure = ("create", time.monotonic() - start, None)

            def _report(self, e):
                self._error = self._error or e

            def allreduce(self, tensors, opts):
                return _ReportedWork(self, super().allreduce(tensors, opts), tensors)

            def errored(self):
                return self._error

        return ReportingGloo(timeout=timeout)
    raise SystemExit(f"torchft_train.py: --pg {kind!r}: expected gyre, gyre-rebuild or gloo")


def digest(model):
    h = hashlib.sha1()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--replica", type=int, required=True, help="replica group number")
    ap.add_argument("--lighthouse", required=True, help="the lighthouse's address")
    ap.add_argument("--pg", default="gyre", help="gyre | gyre-rebuild | gloo")
    ap.add_argument("--steps", type=int, default=100, help="stop after this many commits")
    ap.add_argument("--seconds", type=float, default=120, help="stop after this long")
    ap.add_argument("--step-sleep", type=float, default=0.05,
                    help="seconds of simulated work per step")
    ap.add_argument("--timeout", type=float, default=10,
                    help="the Manager's and process group's timeout, seconds")
    args = ap.parse_args()

    logging.basicConfig(stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("gyre_torch").setLevel(logging.INFO)  # how each configure went
    deadline = time.monotonic() + args.seconds
    timeout = datetime.timedelta(seconds=args.timeout)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timeout)
    torch.manual_seed(0)  # every replica starts alike; the Manager syncs step 0 anyway
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optim = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

    def state_dict():
        return {"model": net.state_dict(), "optim": optim.state_dict()}

    def load_state_dict(sd):
        net.load_state_dict(sd["model"])
        optim.load_state_dict(sd["optim"])

    pg = make_pg(args.pg, timeout)
    manager = Manager(pg=pg, min_replica_size=1, load_state_dict=load_state_dict,
                      state_dict=state_dict, replica_id=f"train_{args.replica}",
                      store_addr="127.0.0.1", store_port=store.port, rank=0, world_size=1,
                      lighthouse_addr=args.lighthouse, hostname="127.0.0.1",
                      use_async_quorum=False, timeout=timeout, quorum_timeout=timeout * 3,
                      connect_timeout=timeout)
    model = DistributedDataParallel(manager, net)
    opt = OptimizerWrapper(manager, optim)
    try:
        while manager.current_step() < args.steps and time.monotonic() < deadline:
            step = manager.current_step()
            g = torch.Generator().manual_seed(1000 * step + args.replica)
            x = torch.randn(64, 16, generator=g)
            y = x.sum(dim=1, keepdim=True)
            opt.zero_grad()  # starts the quorum (and heals, when behind)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()  # all-reduces the gradients through the process group
            opt.step()  # commits when every replica's step succeeded
            how = getattr(pg, "last_configure", None)
            print(json.dumps({
                "t": time.time(), "step": manager.current_step(),
                "committed": manager.current_step() > step,
                "n": manager.num_participants(), "loss": loss.item(), "hash": digest(net),
                "how": [how[0], round(1000 * how[1], 1)] if how else None,
                "quorum": manager._quorum_id}), flush=True)
            time.sleep(args.step_sleep)
    finally:
        manager.shutdown(wait=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""DDP that goes on when a rank dies: shrink_group, and a restarted rank taken back in.

  gyrerun --elastic --max-restarts 1 -n 4 elastic_ddp_train.py --kill-rank 2 --kill-step 5

A plain torch script on backend "gyre" (torch >= 2.15 for shrink_group). Model: two
nn.Linear layers (16-32-1, ReLU), SGD, mean-squared error on a fixed synthetic set. Each
step takes the next --batch samples of the set, and rank r of a world of w ranks takes
every w-th of them from the r-th (DistributedSampler's shard order); DDP averages the
gradients, so with --batch a multiple of every world size the step is the same whatever
the world.

- A failure. A step's collective fails on every survivor when a rank dies; each asks
  gyre_torch.failed_rank() whom it names (the same rank everywhere), shrinks the default
  group without it (dist.shrink_group, SHRINK_ABORT), agrees with the others on the state
  to go on from (the step and the parameters of the rank furthest ahead: one survivor can
  have completed the failed step), wraps the model in DDP again and redoes the step.
- A restarted rank (gyrerun --elastic starts it again with GYRE_ELASTIC_NEWCOMER=1). It
  registers in the store and waits; after every step the members count the ranks waiting
  (one small all-reduce) and, when there are any, make a new default group with them
  (destroy_process_group, then init_process_group over a fresh prefix of the same store:
  torch has no grow), and rank 0 sends them the state.
- The store. Every rank is a client of the TCPStore at MASTER_ADDR:MASTER_PORT: torchrun's
  agent serves it (TORCHELASTIC_USE_AGENT_STORE=True); under other launchers the first
  rank 0 serves it, so the job survives any rank's death but rank 0's.

--kill-rank R --kill-step S: rank R calls os._exit(1) when step S starts (only in the
first start: neither a restarted rank nor a group restarted whole). --wait-for-newcomers
SECONDS: at the end, while the world is smaller than at the start, wait that long for
restarted ranks and take them in before the final check. At the end every rank checks
that the parameters are bit-identical on all ranks (their all-reduced max and min
agree), and rank 0 of the final group prints one JSON line: {"restart_count"
(TORCHELASTIC_RESTART_COUNT), "world_start", "world_end", "steps", "events": [{"kind":
"shrink", "dead", "step", "world", "fail_to_first_op_ms" (from the error on rank 0),
"shrink_ms", "kill_to_first_op_ms" (from --kill-rank's exit)} | {"kind": "grow",
"step", "world", "grow_ms"}], "identical", "params"}. Exit 1 when anything did not hold.
"""
import argparse
import datetime
import importlib
import json
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import gyre_torch  # noqa: E402

NEWCOMERS = "elastic/newcomers"  # store.add: how many restarted ranks ever registered
DONE = "elastic/done"            # set by rank 0 once the run is over
CLOSED = 1 << 40                 # added to NEWCOMERS at the end: later ones just leave


def log(msg):
    print(f"elastic_ddp_train: {msg}", file=sys.stderr, flush=True)


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=24, help="global batch (samples per step)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--samples", type=int, default=960)
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-step", type=int, default=-1)
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds after each step")
    p.add_argument("--timeout", type=float, default=60.0, help="the groups' timeout (s)")
    p.add_argument("--wait-for-newcomers", type=float, default=0.0)
    p.add_argument("--join-timeout", type=float, default=120.0,
                   help="how long a restarted rank waits to be taken in (s)")
    return p.parse_args()


def make_model():
    torch.manual_seed(0)  # the same initial parameters on every rank
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def dataset(n):
    g = torch.Generator().manual_seed(1234)  # the same on every rank
    x = torch.randn(n, 16, generator=g)
    w = torch.randn(16, 1, generator=g)
    return x, x @ w + 0.1 * torch.randn(n, 1, generator=g)


def shard(data, step, batch, rank, world):
    x, y = data
    first = (step * batch) % x.shape[0]
    idx = torch.arange(first, first + batch)[rank::world]
    return x[idx], y[idx]


def flat_params(module):
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


def set_params(module, flat):
    with torch.no_grad():
        i = 0
        for p in module.parameters():
            p.copy_(flat[i:i + p.numel()].view_as(p))
            i += p.numel()


def agree(module, step):
    """The step and parameters to go on from: those of the lowest rank furthest ahead."""
    world = dist.get_world_size()
    t = torch.tensor([step], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    ahead = int(t.item())
    who = torch.tensor([dist.get_rank() if step == ahead else world], dtype=torch.int64)
    dist.all_reduce(who, op=dist.ReduceOp.MIN)
    flat = flat_params(module)
    dist.broadcast(flat, src=int(who.item()))
    set_params(module, flat)
    return ahead


def store_and_group(args, newcomer):
    """Every rank a client of the job's TCPStore; the first rank 0 serves it unless the
    launcher's agent does (torchrun)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "") == "True"
    serve = rank == 0 and not agent and not newcomer
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          world, serve, timeout=datetime.timedelta(seconds=args.timeout),
                          wait_for_workers=False)
    # torch's own prefix for a launcher's start (a group restarted whole by torchrun
    # --max-restarts must not meet the keys of the one before; gyrerun --elastic restarts
    # a rank with the same count).
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or "0"
    return dist.PrefixStore(f"/worker/attempt_{attempt}", store), rank, world


def init_group(store, gen, rank, world, args):
    dist.init_process_group("gyre", store=dist.PrefixStore(f"elastic/gen{gen}", store),
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))


def wait_to_be_taken_in(store, args):
    """A restarted rank: register, wait until the members take it in (or the run ends)."""
    where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    try:
        ticket = store.add(NEWCOMERS, 1)
        if ticket > CLOSED:
            return None  # registered after the end
        key = f"elastic/admit/{ticket}"
        deadline = time.monotonic() + args.join_timeout
        while time.monotonic() < deadline:
            if store.check([key]):
                gen, world, rank = (int(v) for v in store.get(key).decode().split())
                return gen, world, rank
            if store.check([DONE]):
                store.set(f"elastic/left/{ticket}", "1")  # rank 0 waits for it
                return None
            time.sleep(0.05)
    except RuntimeError as e:  # DistStoreError: the store's process is gone
        raise RuntimeError(f"restarted rank {os.environ['RANK']}: the job's store at {where} "
                           f"is gone (the run ended, or the rank serving it died): {e}") from e
    raise RuntimeError(f"restarted rank {os.environ['RANK']}: not taken in within "
                       f"--join-timeout {args.join_timeout} s (no member left, or they "
                       "stopped checking for newcomers)")


class Members:
    """This rank's view of the group: generation, newcomers admitted, events seen."""

    def __init__(self, store, gen, admitted):
        self.store, self.gen, self.admitted, self.events = store, gen, admitted, []
        self.wait_until = None  # rank 0's: the end of --wait-for-newcomers

    def waiting(self, at_end, world_start, args):
        """Restarted ranks registered and not yet taken in, and whether to wait for more
        (at the end, while the world is smaller than at the start, up to
        --wait-for-newcomers): rank 0 reads the store and decides, one all-reduce gives
        every member the same answer."""
        t = torch.zeros(2, dtype=torch.int64)
        if dist.get_rank() == 0:
            t[0] = self.store.add(NEWCOMERS, 0) - self.admitted
            if at_end and dist.get_world_size() < world_start:
                if self.wait_until is None:
                    self.wait_until = time.monotonic() + args.wait_for_newcomers
                t[1] = int(time.monotonic() < self.wait_until)
        dist.all_reduce(t)
        return int(t[0]), bool(t[1])

    def grow(self, n, step, args):
        began = time.monotonic()
        rank, world = dist.get_rank(), dist.get_world_size()
        self.gen += 1
        if rank == 0:
            for i in range(n):
                self.store.set(f"elastic/admit/{self.admitted + 1 + i}",
                               f"{self.gen} {world + n} {world + i}")
        self.admitted += n
        dist.destroy_process_group()
        init_group(self.store, self.gen, rank, world + n, args)
        self.events.append({"kind": "grow", "step": step, "world": world + n,
                            "grow_ms": round((time.monotonic() - began) * 1000, 1)})
        if rank == 0:
            log(f"{n} restarted rank(s) taken in at step {step}: {world + n} ranks go on "
                f"(grow {self.events[-1]['grow_ms']:.0f} ms)")


def send_state(module, step, members):
    """Rank 0's step, parameters and bookkeeping to every rank (after a grow)."""
    t = torch.tensor([step, members.gen, members.admitted], dtype=torch.int64)
    dist.broadcast(t, src=0)
    flat = flat_params(module)
    dist.broadcast(flat, src=0)
    set_params(module, flat)
    return int(t[0]), int(t[1]), int(t[2])


def main():
    args = parse()
    torch.set_num_threads(1)
    if not hasattr(dist, "shrink_group") or not gyre_torch._C.supports_shrinking:
        log(f"torch {torch.__version__} has no shrink_group (torch >= 2.15)")
        return 77
    newcomer = os.environ.get("GYRE_ELASTIC_NEWCOMER", "") == "1"
    # Neither a restarted rank nor a group restarted whole (torchrun --max-restarts).
    restart_count = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    first_start = not newcomer and restart_count == 0
    store, rank, world = store_and_group(args, newcomer)
    world_start = world
    net = make_model()
    members = Members(store, 0, 0)
    step = 0
    if newcomer:
        # DDP's constructor imports torch._dynamo (seconds on a busy host): done before
        # registering, so that the members do not wait for it in DDP's first broadcast.
        importlib.import_module("torch._dynamo")
        started = time.monotonic()
        taken = wait_to_be_taken_in(store, args)
        if taken is None:
            log(f"restarted rank {rank}: the run ended before it was taken in")
            return 0
        members.gen, world, rank = taken
        init_group(store, members.gen, rank, world, args)
        step, members.gen, members.admitted = send_state(net, 0, members)
        log(f"restarted as rank {rank} of {world} at step {step} "
            f"({(time.monotonic() - started) * 1000:.0f} ms after it registered)")
    else:
        init_group(store, 0, rank, world, args)
    data = dataset(args.samples)
    model = DDP(net)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr)
    problems = []
    while True:
        try:
            if step < args.steps:
                if step == args.kill_step and rank == args.kill_rank and first_start:
                    store.set("elastic/killed_at", repr(time.time()))
                    os._exit(1)
                x, y = shard(data, step, args.batch, dist.get_rank(), dist.get_world_size())
                opt.zero_grad(set_to_none=True)
                F.mse_loss(model(x), y).backward()  # DDP's all-reduce: fails if a rank died
                opt.step()
                step += 1
                if args.step_sleep:
                    time.sleep(args.step_sleep)
            n, keep_waiting = members.waiting(step >= args.steps, world_start, args)
            if n:
                members.grow(n, step, args)
                step, members.gen, members.admitted = send_state(net, step, members)
                model = DDP(net)
                continue
            if step < args.steps:
                continue
            if keep_waiting:
                time.sleep(0.05)
                continue
            break
        except RuntimeError as e:
            failed_at = time.monotonic()
            dead = gyre_torch.failed_rank()
            if dead < 0:
                raise  # this rank's own error, not a peer's death
            old_rank, old_world = dist.get_rank(), dist.get_world_size()
            dist.shrink_group([dead], shrink_flags=dist.distributed_c10d.SHRINK_ABORT)
            shrunk_at = time.monotonic()
            # The first operation on the shrunk group, checked exactly: how many ranks
            # and whose old ranks are in it.
            t = torch.tensor([1.0, float(old_rank)], dtype=torch.float64)
            dist.all_reduce(t)
            first_op_at = time.monotonic()
            want = [float(old_world - 1), float(sum(range(old_world)) - dead)]
            if t.tolist() != want or dist.get_world_size() != old_world - 1:
                problems.append(f"after the shrink: sum {t.tolist()}, expected {want}, "
                                f"world {dist.get_world_size()}")
            first_op_wall = time.time()
            step = agree(net, step)
            model = DDP(net)
            members.events.append({
                "kind": "shrink", "dead": dead, "step": step, "world": dist.get_world_size(),
                "fail_to_first_op_ms": round((first_op_at - failed_at) * 1000, 1),
                "shrink_ms": round((shrunk_at - failed_at) * 1000, 1)})
            if store.check(["elastic/killed_at"]):  # --kill-rank's exit, on this host
                killed_at = float(store.get("elastic/killed_at").decode())
                members.events[-1]["kill_to_first_op_ms"] = round(
                    (first_op_wall - killed_at) * 1000, 1)
            if dist.get_rank() == 0:
                log(f"rank {dead} of {old_world} failed at step {step} "
                    f"({str(e).splitlines()[0][:160]}): {dist.get_world_size()} ranks go on "
                    f"(first operation {members.events[-1]['fail_to_first_op_ms']:.0f} ms "
                    "after the failure)")
    flat = flat_params(net)
    hi, lo = flat.clone(), flat.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    identical = torch.equal(hi, lo) and bool(torch.isfinite(flat).all())
    if not identical:
        problems.append("the ranks' parameters differ")
    bad = torch.tensor([1 if problems else 0], dtype=torch.int64)
    dist.all_reduce(bad)
    for p in problems:
        log(f"rank {dist.get_rank()}: {p}")
    if dist.get_rank() == 0:
        # The run is over: restarted ranks that registered too late to be taken in leave
        # (exit 0) before this process, which may serve the store, ends.
        store.set(DONE, "1")
        late = store.add(NEWCOMERS, CLOSED) - CLOSED
        try:
            store.wait([f"elastic/left/{t}" for t in range(members.admitted + 1, late + 1)],
                       datetime.timedelta(seconds=30))
        except RuntimeError as e:
            log(f"restarted ranks registered too late did not leave within 30 s: {e}")
        print(json.dumps({"restart_count": restart_count, "world_start": world_start,
                          "world_end": dist.get_world_size(),
                          "steps": step, "events": members.events,
                          "identical": identical and int(bad.item()) == 0,
                          "params": flat.tolist()}), flush=True)
    dist.destroy_process_group()
    return 1 if int(bad.item()) else 0


if __name__ == "__main__":
    sys.exit(main())

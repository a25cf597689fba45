#!/usr/bin/env python3
"""The parallelism styles torch users run, on backend "gyre" (CPU), against gloo.

    python python/tests/styles_test.py [--world 4,2] [--style fsdp,dcp,tp,pp,dtensor,funcol]
                                       [--backends gloo,gyre] [--timeout 300]

Each world size starts its ranks once (torch.multiprocessing.start_processes, bounded by
--timeout); each rank runs every style on gloo, then on gyre, each style in a process group
of its own over one TCPStore (a collective a rank misses fails after --pg-timeout). A rank
keeps what each style produced (losses, parameters, state dicts) and the parent compares
gyre's with gloo's rank by rank, bit for bit.

  fsdp    FSDP2: fully_shard per layer and the root, SGD, 3 steps; full_tensor() of every
          parameter, get_model_state_dict full (StateDictOptions(full_state_dict=True)) and
          sharded (each local shard against the full tensor's), set_model_state_dict from
          rank 0's full state dict (broadcast_from_rank0).
  dcp     torch.distributed.checkpoint: save an FSDP2 model's sharded state dict at each
          world size; load what another world size saved (4 ranks save, 2 load, by default)
          into a model sharded over this one.
  tp      tensor parallelism: parallelize_module, ColwiseParallel/RowwiseParallel on an MLP
          and on a transformer block (attention heads and MLP), forward, backward, SGD.
  pp      torch.distributed.pipelining: PipelineStage per rank, ScheduleGPipe and
          Schedule1F1B, 4 microbatches, a stage per rank (2 stages at world 2), 2 steps.
  dtensor distribute_tensor, redistribute Shard(0) -> Shard(1) -> Replicate -> Shard(0),
          Partial -> Replicate / Shard(0), full_tensor, uneven shards; a 2-D mesh at world 4.
  funcol  torch.distributed._functional_collectives all_reduce, all_gather_tensor,
          reduce_scatter_tensor, eager and under torch.compile(backend="aot_eager").
Then python/examples/parallel_styles.py (FSDP2 with a DCP round trip, TP, PP; float32,
AdamW) under torchrun at world 2 on each backend: its losses equal (--no-example skips it).

Exactness: the models are float64 with dyadic values (small integers / 8), the batch
sizes, world sizes, microbatch counts and learning rates powers of two, and the parameters
are rounded to a grid of 2**-k after each step (snap), so every sum any backend computes
is exact in every order; each style also checks its result against the
same computation run locally without collectives. The transformer block's softmax is not
dyadic: its partial sums round, so it is compared with gloo bit for bit at world 2 (a sum
of two is the same in either order), within 1e-12 at world 4 (see compare), and within
1e-12 of the local run at every world size.
Exit status: 0 when every style matched on every rank; 77 (skipped) on a torch without
these APIs (fully_shard, DTensor and pipelining need torch >= 2.6).
"""
import argparse
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

import torch

try:
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         set_model_state_dict)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
except ImportError as e:  # torch 1.13 (Debian 12) and other torch < 2.6
    if __name__ == "__main__":
        print(f"SKIPPED: styles_test needs torch >= 2.6 (FSDP2, DTensor, pipelining); "
              f"torch {torch.__version__}: {e}")
        sys.exit(77)
    raise

import torch.nn as nn
import torch.nn.functional as F

import gyre_torch  # noqa: F401  (a build on PYTHONPATH: torch loads no entry point)

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                       "parallel_styles.py")
STYLES = ["fsdp", "dcp", "tp", "pp", "dtensor", "funcol"]
F64 = torch.float64
LR = 1.0 / 16
CPU = torch.device("cpu")


class Failed(AssertionError):
    pass


def expect(cond, what):
    if not cond:
        raise Failed(f"rank {dist.get_rank()}: {what}")


def same(got, want, what):
    expect(torch.equal(got, want), f"{what}: got {got.flatten()[:8].tolist()}..., "
                                   f"want {want.flatten()[:8].tolist()}...")


def dyadic(gen, *shape, scale=8):
    """Small multiples of 1/scale (-4/scale .. 4/scale)."""
    return torch.randint(-4, 5, shape, generator=gen).to(F64) / scale


def exact_init(module, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(dyadic(gen, *p.shape))
    return module


def batch(seed, *shape):
    gen = torch.Generator().manual_seed(seed)
    return dyadic(gen, *shape, scale=2), dyadic(gen, *shape)  # inputs -2 .. 2 in halves


def chain(depth, dim=16):
    """depth Linear layers, ReLU between: model[i] is what FSDP shards, or a pipeline stage."""
    return nn.Sequential(*[nn.Sequential(nn.Linear(dim, dim, dtype=F64), nn.ReLU())
                           if i < depth - 1 else nn.Linear(dim, dim, dtype=F64)
                           for i in range(depth)])


class MLP(nn.Module):
    def __init__(self, dim=16, hidden=32):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, dtype=F64)
        self.w2 = nn.Linear(hidden, dim, dtype=F64)

    def forward(self, x):
        return self.w2(F.relu(self.w1(x)))


class Block(nn.Module):
    """A transformer block: multi-head causal self-attention and an MLP, each residual."""

    def __init__(self, dim=16, heads=4):
        super().__init__()
        self.head_dim = dim // heads
        self.q = nn.Linear(dim, dim, dtype=F64)
        self.k = nn.Linear(dim, dim, dtype=F64)
        self.v = nn.Linear(dim, dim, dtype=F64)
        self.o = nn.Linear(dim, dim, dtype=F64)
        self.mlp = MLP(dim, 2 * dim)

    def forward(self, x):  # x: (batch, seq, dim)
        b, s, _ = x.shape
        # -1 heads: under ColwiseParallel a rank holds heads / world of them.
        q, k, v = (m(x).view(b, s, -1, self.head_dim).transpose(1, 2)
                   for m in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        return x + self.mlp(x)


def snap(params, bits):
    """Rounds each parameter (its local shard) to multiples of 2**-bits: the next step's
    products and sums then stay within float64's 53 bits, exact in any order."""
    if bits is None:
        return
    with torch.no_grad():
        for p in params:
            local = p.to_local() if isinstance(p, DTensor) else p
            local.copy_(torch.round(local * 2.0 ** bits) / 2.0 ** bits)


def sgd_steps(model, data, bits, steps=3, lr=LR):
    """SGD on mse, snapped after each step; the same loop serves the distributed model and
    its local copy."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        x, y = data
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        snap(model.parameters(), bits)
        losses.append(loss.detach().clone())
    return torch.stack(losses)


def full_params(model):
    return {n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
            for n, p in model.named_parameters()}


def trained(before, after, what):
    """A test that cannot fail is no test: the steps must have moved every parameter."""
    for n in before:
        expect(not torch.equal(before[n], after[n]), f"{what}: SGD left {n} unchanged")


# ---------------------------------------------------------------------------- styles

def style_fsdp(rank, world, ctx):
    mesh = init_device_mesh("cpu", (world,))
    rows, bits = 16, 8  # the global batch, split over the ranks: FSDP averages their means

    def build(seed):
        model = exact_init(chain(3), seed)
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model

    model = build(1)
    before = full_params(model)
    x, y = batch(11, rows, 16)
    mine = slice(rank * rows // world, (rank + 1) * rows // world)
    losses = sgd_steps(model, (x[mine], y[mine]), bits)
    params = full_params(model)
    trained(before, params, "FSDP2")
    ref = exact_init(chain(3), 1)
    sgd_steps(ref, (x, y), bits)
    for n, p in ref.named_parameters():
        same(params[n], p.detach(), f"FSDP2 parameter {n} against the local run")

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    expect(sorted(full) == sorted(params), f"full state dict keys {sorted(full)}")
    for n, t in full.items():
        expect(not isinstance(t, DTensor), f"full state dict {n} is a DTensor")
        same(t, params[n], f"full state dict {n}")
    sharded = get_model_state_dict(model)
    for n, t in sharded.items():
        expect(isinstance(t, DTensor), f"sharded state dict {n} is not a DTensor")
        want = distribute_tensor(params[n], mesh, t.placements).to_local()
        same(t.to_local(), want, f"sharded state dict {n}: rank {rank}'s shard")
    # A fresh model loads rank 0's full state dict (the others pass an empty one).
    fresh = build(2)
    set_model_state_dict(fresh, full if rank == 0 else {},
                         options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    for n, t in full_params(fresh).items():
        same(t, params[n], f"set_model_state_dict broadcast_from_rank0 {n}")
    return {"losses": losses, **{f"param.{n}": t for n, t in params.items()},
            **{f"shard.{n}": t.to_local().clone() for n, t in sharded.items()}}


def style_dcp(rank, world, ctx):
    mesh = init_device_mesh("cpu", (world,))

    def build(seed):
        model = exact_init(chain(2), seed)
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model

    out = {}
    model = build(100 + world)  # each world size saves different values
    saved = full_params(model)
    dcp.save(get_model_state_dict(model), checkpoint_id=f"{ctx.tmp}/dcp.{ctx.backend}.w{world}")
    out.update({f"saved.{n}": t for n, t in saved.items()})
    for other in ctx.earlier_worlds:  # saved by a run at another world size
        model = build(7)
        sd = get_model_state_dict(model)
        dcp.load(sd, checkpoint_id=f"{ctx.tmp}/dcp.{ctx.backend}.w{other}")
        set_model_state_dict(model, sd)
        ref = dict(exact_init(chain(2), 100 + other).named_parameters())
        for n, t in full_params(model).items():
            same(t, ref[n].detach(), f"DCP: {n} saved by {other} ranks, loaded by {world}")
            out[f"loaded.w{other}.{n}"] = t
    return out


def style_tp(rank, world, ctx):
    mesh = init_device_mesh("cpu", (world,))
    x, y = batch(21, 8, 16)  # every rank the same batch
    model = parallelize_module(exact_init(MLP(), 3), mesh,
                               {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    before = full_params(model)
    losses = sgd_steps(model, (x, y), bits=10)
    params = full_params(model)
    trained(before, params, "TP MLP")
    ref = exact_init(MLP(), 3)
    ref_losses = sgd_steps(ref, (x, y), bits=10)
    same(losses, ref_losses, "TP MLP losses against the local run")
    for n, p in ref.named_parameters():
        same(params[n], p.detach(), f"TP MLP parameter {n} against the local run")
    out = {"mlp.losses": losses, **{f"mlp.{n}": t for n, t in params.items()}}

    xs, ys = batch(22, 2, 8, 16)
    plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
            "o": RowwiseParallel(), "mlp.w1": ColwiseParallel(), "mlp.w2": RowwiseParallel()}
    block = parallelize_module(exact_init(Block(), 4), mesh, plan)
    before = full_params(block)
    losses = sgd_steps(block, (xs, ys), bits=None)  # softmax: not exact in any case
    params = full_params(block)
    trained(before, params, "TP block")
    ref = exact_init(Block(), 4)
    ref_losses = sgd_steps(ref, (xs, ys), bits=None)
    expect(torch.allclose(losses, ref_losses, rtol=0, atol=1e-12),
           f"TP block losses {losses.tolist()} against the local run's {ref_losses.tolist()}")
    for n, p in ref.named_parameters():
        expect(torch.allclose(params[n], p.detach(), rtol=0, atol=1e-12),
               f"TP block parameter {n} against the local run")
    out.update({"block.losses": losses, **{f"block.{n}": t for n, t in params.items()}})
    return out


def style_pp(rank, world, ctx):
    stages, micro, bits = world, 4, 6  # a stage per rank
    x, y = batch(31, 16, 16)
    out = {}
    for name, schedule in (("gpipe", ScheduleGPipe), ("1f1b", Schedule1F1B)):
        model = exact_init(chain(stages), 5)
        mine = model[rank]
        before = {n: p.detach().clone() for n, p in mine.named_parameters()}
        stage = PipelineStage(mine, rank, stages, CPU)
        sched = schedule(stage, n_microbatches=micro, loss_fn=F.mse_loss)
        opt = torch.optim.SGD(mine.parameters(), lr=LR)
        ref = exact_init(chain(stages), 5)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=LR)
        losses = []
        for _ in range(2):
            if rank == 0:
                sched.step(x)
            elif rank == stages - 1:
                sched.step(target=y, losses=losses)
            else:
                sched.step()
            opt.step()
            opt.zero_grad()
            snap(mine.parameters(), bits)
            # The local run: the mean of the microbatches' losses (scale_grads).
            ref_losses = [F.mse_loss(ref(a), b) for a, b in zip(x.chunk(micro), y.chunk(micro))]
            (sum(ref_losses) / micro).backward()
            ref_opt.step()
            ref_opt.zero_grad()
            snap(ref.parameters(), bits)
            if rank == stages - 1:
                same(torch.stack(losses[-micro:]).detach(), torch.stack(ref_losses).detach(),
                     f"PP {name} microbatch losses against the local run")
        after = {n: p.detach().clone() for n, p in mine.named_parameters()}
        trained(before, after, f"PP {name} stage {rank}")
        for n, p in after.items():
            same(p, ref[rank].get_parameter(n).detach(),
                 f"PP {name} stage {rank} parameter {n} against the local run")
            out[f"{name}.{n}"] = p
        if rank == stages - 1:
            out[f"{name}.losses"] = torch.stack(losses).detach()
    return out


def style_dtensor(rank, world, ctx):
    mesh = init_device_mesh("cpu", (world,))
    out = {}
    for rows, cols in ((world * 3, world * 2), (2 * world + 1, world + 3)):  # even, uneven
        tag = f"{rows}x{cols}"
        t = torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols)
        d = distribute_tensor(t, mesh, [Shard(0)])
        # Shard(d) splits like torch.chunk; ranks past the last chunk hold an empty one.
        chunks = t.chunk(world, 0)
        same(d.to_local(), chunks[rank] if rank < len(chunks) else t[:0], f"{tag} Shard(0) local")
        d1 = d.redistribute(mesh, [Shard(1)])
        chunks = t.chunk(world, 1)
        same(d1.to_local(), chunks[rank] if rank < len(chunks) else t[:, :0],
             f"{tag} Shard(0) -> Shard(1) local")
        r = d1.redistribute(mesh, [Replicate()])
        same(r.to_local(), t, f"{tag} Shard(1) -> Replicate")
        back = r.redistribute(mesh, [Shard(0)])
        same(back.full_tensor(), t, f"{tag} Replicate -> Shard(0) full_tensor")
        same(d1.full_tensor(), t, f"{tag} Shard(1) full_tensor")
        # Partial: each rank holds a summand; reduce to everyone, and reduce-scatter.
        part = DTensor.from_local(t * (rank + 1), mesh, [Partial()])
        total = t * (world * (world + 1) // 2)
        same(part.redistribute(mesh, [Replicate()]).to_local(), total, f"{tag} Partial -> Replicate")
        same(part.redistribute(mesh, [Shard(0)]).full_tensor(), total,
             f"{tag} Partial -> Shard(0) full_tensor")
        out[f"{tag}.shard1"] = d1.to_local().clone()
    # DTensor arithmetic: a sharded matmul against a replicated one.
    a = torch.arange(world * 4 * 6, dtype=torch.float32).reshape(world * 4, 6) % 5
    b = torch.arange(6 * 3, dtype=torch.float32).reshape(6, 3) % 7
    prod = distribute_tensor(a, mesh, [Shard(0)]) @ distribute_tensor(b, mesh, [Replicate()])
    same(prod.full_tensor(), a @ b, "Shard(0) @ Replicate")
    prod = distribute_tensor(a, mesh, [Shard(1)]) @ distribute_tensor(b, mesh, [Shard(0)])
    same(prod.full_tensor(), a @ b, "Shard(1) @ Shard(0) (a partial sum)")
    out["matmul"] = prod.full_tensor()
    if world == 4:
        mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        t = torch.arange(8 * 6, dtype=torch.float32).reshape(8, 6)
        d = distribute_tensor(t, mesh2, [Shard(0), Shard(1)])
        same(d.to_local(), t.chunk(2, 0)[rank // 2].chunk(2, 1)[rank % 2], "2-D mesh local")
        same(d.full_tensor(), t, "2-D mesh full_tensor")
        r = d.redistribute(mesh2, [Replicate(), Shard(0)])
        same(r.to_local(), t.chunk(2, 0)[rank % 2], "2-D [Replicate, Shard(0)] local")
        same(r.full_tensor(), t, "2-D [Replicate, Shard(0)] full_tensor")
        out["mesh2d"] = r.to_local().clone()
    return out


def collectives(x, group):
    ar = funcol.all_reduce(x, "sum", group)
    ag = funcol.all_gather_tensor(x, 0, group)
    rs = funcol.reduce_scatter_tensor(ag * 2, "sum", 0, group)
    return ar * 1, ag * 1, rs * 1  # * 1: waits, as a user's next op would


def style_funcol(rank, world, ctx):
    group = dist.group.WORLD
    x = (torch.arange(8 * world, dtype=torch.float32) + rank).reshape(world * 2, 4)
    xs = [(torch.arange(8 * world, dtype=torch.float32) + r).reshape(world * 2, 4)
          for r in range(world)]
    want = (sum(xs), torch.cat(xs), 2 * world * torch.cat(xs).chunk(world)[rank])
    out = {}
    eager = collectives(x, group)
    torch._dynamo.reset()
    compiled = torch.compile(collectives, backend="aot_eager", fullgraph=True)(x, group)
    for mode, got in (("eager", eager), ("compiled", compiled)):
        for name, g, w in zip(("all_reduce", "all_gather_tensor", "reduce_scatter_tensor"),
                              got, want):
            same(g, w, f"funcol {name} {mode}")
            out[f"{mode}.{name}"] = g
    return out


STYLE_FNS = {"fsdp": style_fsdp, "dcp": style_dcp, "tp": style_tp, "pp": style_pp,
             "dtensor": style_dtensor, "funcol": style_funcol}


# ---------------------------------------------------------------------------- driver

class Ctx:
    def __init__(self, tmp, backend, earlier_worlds):
        self.tmp, self.backend, self.earlier_worlds = tmp, backend, earlier_worlds


def rank_main(rank, world, backends, styles, port, tmp, earlier_worlds, timeout_s):
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=FutureWarning)  # funcol's *_tensor names
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=timeout)
    reports = {}
    for backend in backends:
        ctx = Ctx(tmp, backend, earlier_worlds)
        report = reports[backend] = {"results": {}, "seconds": {}, "errors": {}}
        for style in styles:
            start = time.monotonic()
            # A process group per style: one style's failure leaves the next a clean group.
            dist.init_process_group(backend, store=dist.PrefixStore(f"{backend}/{style}", store),
                                    rank=rank, world_size=world, timeout=timeout)
            try:
                report["results"][style] = STYLE_FNS[style](rank, world, ctx)
            except Exception as e:  # noqa: BLE001  (reported, and compared, by the parent)
                # Where in this file, and where in torch, it failed.
                frames = traceback.extract_tb(e.__traceback__)
                ours = [f for f in frames if f.filename == __file__][-1:]
                where = "; ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                                  for f in ours + frames[-1:])
                report["errors"][style] = f"{type(e).__name__}: {e} (at {where})"
            finally:
                dist.destroy_process_group()
            report["seconds"][style] = time.monotonic() - start
    torch.save(reports, f"{tmp}/w{world}.r{rank}.pt")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(world, backends, styles, tmp, earlier, limit_s, timeout_s):
    """One process per rank, each running every backend's styles; bounded by limit_s."""
    import torch.multiprocessing as mp
    ctx = mp.start_processes(rank_main, nprocs=world, join=False, start_method="spawn",
                             args=(world, backends, styles, free_port(), tmp, earlier, timeout_s))
    deadline = time.monotonic() + limit_s
    while not ctx.join(timeout=max(1.0, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            for p in ctx.processes:
                p.join(10)
            raise SystemExit(f"FAILED: world {world} still running after {limit_s} s (killed)")
    ranks = [torch.load(f"{tmp}/w{world}.r{r}.pt", weights_only=False) for r in range(world)]
    return {b: [ranks[r][b] for r in range(world)] for b in backends}


def compare(a, b, where, world):
    """gyre's results (a) against gloo's (b): bit for bit, except the transformer block's at
    world > 2. Its partial sums round (softmax), and an all-reduce of 4 rounded values
    depends on the order of the additions, which gloo and gyre choose differently
    (each a ring, its chunks started at different ranks): within 1e-12 there.
    The differences, and the keys equal only within that tolerance."""
    diffs, near = [], []
    if sorted(a) != sorted(b):
        return [f"{where}: keys differ: {sorted(set(a) ^ set(b))}"], near
    for k in a:
        if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape:
            diffs.append(f"{where} {k}: gyre {a[k].dtype} {tuple(a[k].shape)} vs gloo "
                         f"{b[k].dtype} {tuple(b[k].shape)}")
        elif torch.equal(a[k], b[k]):
            pass
        elif (k.startswith("block.") and world > 2
              and torch.allclose(a[k], b[k], rtol=0, atol=1e-12)):
            near.append(k)
        else:
            diffs.append(f"{where} {k}: gyre {a[k].flatten()[:6].tolist()} vs gloo "
                         f"{b[k].flatten()[:6].tolist()}")
    return diffs, near


def run_example(backends, limit_s):
    """python/examples/parallel_styles.py under torchrun, world 2, on each backend: float32
    data, AdamW; a sum of two floats is the same in either order, so gyre's losses must
    equal gloo's exactly. A list of differences."""
    outs = {}
    for backend in backends:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
               f"--master_port={free_port()}", EXAMPLE, "--backend", backend, "--steps", "10"]
        start = time.monotonic()
        # Its own process group: a timeout kills torchrun and its workers together.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
            return [f"example on {backend}: still running after {limit_s} s (killed)"]
        if proc.returncode != 0:
            why = [line for line in err.splitlines() if "Error" in line][-4:]
            return [f"example on {backend} exited {proc.returncode}:\n  " + "\n  ".join(why)]
        outs[backend] = {r["style"]: r["losses"] for r in
                         (json.loads(line) for line in out.splitlines() if line.startswith("{"))}
        print(f"example parallel_styles.py (fsdp+dcp, tp, pp) world 2 {backend}: ok "
              f"{time.monotonic() - start:.1f} s (processes included)", flush=True)
        if sorted(outs[backend]) != ["fsdp", "pp", "tp"]:
            return [f"example on {backend}: results for {sorted(outs[backend])}"]
    if len(backends) == 2 and outs[backends[0]] != outs[backends[1]]:
        return [f"example: {backends[1]}'s losses differ from {backends[0]}'s: "
                f"{outs[backends[1]]} vs {outs[backends[0]]}"]
    return []


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", default="4,2", help="world sizes, in order (dcp loads "
                        "at each what the ones before it saved)")
    parser.add_argument("--style", default=",".join(STYLES))
    parser.add_argument("--backends", default="gloo,gyre",
                        help="compared with the first (gloo) when there are two")
    parser.add_argument("--timeout", type=int, default=400, help="seconds per world size")
    parser.add_argument("--pg-timeout", type=int, default=60,
                        help="each process group's timeout: a collective one rank misses")
    parser.add_argument("--no-example", action="store_true",
                        help="skip python/examples/parallel_styles.py under torchrun")
    args = parser.parse_args()
    styles = [s for s in args.style.split(",") if s]
    unknown = set(styles) - set(STYLES)
    if unknown:
        raise SystemExit(f"unknown --style {sorted(unknown)}; choose from {STYLES}")
    backends = args.backends.split(",")
    os.environ["OMP_NUM_THREADS"] = "1"  # the same kernels, one thread, on every run
    failures = []
    with tempfile.TemporaryDirectory(prefix="styles_test.") as tmp:
        worlds = [int(w) for w in args.world.split(",")]
        for i, world in enumerate(worlds):
            start = time.monotonic()
            reports = run_world(world, backends, styles, tmp, worlds[:i], args.timeout,
                                args.pg_timeout)
            print(f"world {world}: {time.monotonic() - start:.1f} s (processes included)",
                  flush=True)
            for style in styles:
                line, errored = [f"world {world} {style:8}"], False
                for backend in backends:
                    errs = [f"rank {r}: {rep['errors'][style]}"
                            for r, rep in enumerate(reports[backend]) if style in rep["errors"]]
                    took = max(rep["seconds"][style] for rep in reports[backend])
                    line.append(f"{backend} {'FAILED' if errs else 'ok'} {took:5.1f} s")
                    if errs:
                        errored = True
                        failures.append(f"world {world} {style} on {backend}:\n  " +
                                        "\n  ".join(errs))
                if len(backends) == 2 and errored:
                    line.append("not compared")
                elif len(backends) == 2:
                    diffs, near = [], set()
                    for r in range(world):
                        got = reports[backends[1]][r]["results"].get(style)
                        want = reports[backends[0]][r]["results"].get(style)
                        if got is not None and want is not None:
                            d, n = compare(got, want, f"rank {r}", world)
                            diffs, near = diffs + d, near | set(n)
                    line.append(f"DIFFER ({len(diffs)})" if diffs else "EQUAL" if not near else
                                f"EQUAL ({len(near)} block tensors within 1e-12, the rest "
                                f"bit for bit)")
                    if diffs:
                        failures.append(f"world {world} {style}: {backends[1]} differs from "
                                        f"{backends[0]}:\n  " + "\n  ".join(diffs[:10]))
                print("  ".join(line), flush=True)
    if not args.no_example:
        failures += run_example(backends, args.timeout)
    if failures:
        print("\n".join(failures), file=sys.stderr)
        raise SystemExit(f"FAILED: {len(failures)} style run(s) (above)")
    print(f"torch {torch.__version__}: styles {','.join(styles)} on {' and '.join(backends)} "
          f"at world sizes {args.world}: every result equal")


if __name__ == "__main__":
    main()

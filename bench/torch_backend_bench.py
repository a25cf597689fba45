#!/usr/bin/env python3
"""torch.distributed on backend gyre against gloo, side by side in one run:
all_reduce (float32, in place) 8 B .. 64 MiB, gyre-bench's own all-reduce on the same
sizes (what the binding costs), and DDP samples/s and test accuracy of
python/examples/ddp_train.py (the MLP, the conv net with BatchNorm and LeNet-5) over
whole epochs, with a third run of the same ranks exchanging no gradients at all
(`--hook local`: compute and DDP's own work only; not a strict bound, see docs/benchmarks.md).

  PYTHONPATH=<gyre_torch build> python3 bench/torch_backend_bench.py -N 4 \\
      --gyre-bin build/bin [--repeat 2] [--max-bytes 64M] [--ddp-epochs 2]

Per size: warm-up calls, a barrier, `iters` back-to-back all_reduce calls; time = the
largest over ranks of the mean per call (the peers' rule); busbw = bytes / time x
2(n-1)/n, GB/s = 1e9 B/s. The variants alternate within each repeat; every repeat's
number is printed and the table shows min..max; a ratio is taken within each repeat
(variants that ran back to back) and its min..max over the repeats shown.
"""
import argparse
import json
import os
import subprocess
import sys
import time

from torch_bench_util import free_port, parse_bytes

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "..", "python", "examples", "ddp_train.py")


def sweep_rank(rank, world, backend, init, sizes, queue):
    torch.set_num_threads(1)
    if backend == "gyre":
        import gyre_torch  # noqa: F401
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    results = {}
    for size in sizes:
        t = torch.ones(max(size // 4, 1))
        # At least gyre-bench's own counts (-n 20 -w 3), so that the two compare.
        iters = max(20, min(200, (256 << 20) // size // 4))
        for _ in range(max(3, iters // 10)):
            dist.all_reduce(t)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        mean = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
        dist.all_reduce(mean, op=dist.ReduceOp.MAX)
        results[size] = mean.item()
    if rank == 0:
        queue.put(results)
    dist.destroy_process_group()


def sweep(backend, world, sizes):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(sweep_rank, args=(world, backend, f"tcp://127.0.0.1:{free_port()}", sizes, queue),
             nprocs=world, join=True)
    return queue.get()


def gyre_bench(gyre_bin, world, max_bytes):
    out = subprocess.run([os.path.join(gyre_bin, "gyrerun"), "-n", str(world),
                          os.path.join(gyre_bin, "gyre-bench"), "-b", "8", "-e", str(max_bytes),
                          "-f", "2", "-n", "20", "-w", "3"],
                         stdout=subprocess.PIPE, text=True, timeout=600, check=True).stdout
    times = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) == 13 and cols[0].isdigit():
            times[int(cols[0])] = float(cols[9]) * 1e-6  # in-place time, us
    return times


def ddp(backend, world, model, epochs, hook="none"):
    cmd = [sys.executable, TRAIN, "--backend", backend, "-N", str(world), "--model", model,
           "--epochs", str(epochs), "--hook", hook]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=900, check=True).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def busbw(size, seconds, world):
    return size / seconds * 2 * (world - 1) / world / 1e9


def span(values, fmt):
    return fmt.format(min(values)) if len(values) == 1 else \
        (fmt + "..." + fmt).format(min(values), max(values))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-N", type=int, default=4)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--max-bytes", default="64M")
    p.add_argument("--gyre-bin", default="")
    p.add_argument("--ddp-epochs", type=int, default=2)
    p.add_argument("--no-ddp", action="store_true")
    p.add_argument("--no-sweep", action="store_true")
    args = p.parse_args()
    n, top = args.N, parse_bytes(args.max_bytes)
    # 8 B latency, then every factor 8 up to 256 KiB, then 1, 4, 16, 64 MiB.
    sizes = [s for s in (8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20,
                         16 << 20, 64 << 20) if s <= top]
    runs = {"gyre": [], "gloo": [], "gyre-bench": []}
    for r in range(0 if args.no_sweep else args.repeat):
        for backend in ("gyre", "gloo"):
            runs[backend].append(sweep(backend, n, sizes))
            print(f"# repeat {r} {backend}: " + " ".join(
                f"{s}:{runs[backend][-1][s] * 1e6:.0f}us" for s in sizes), flush=True)
        if args.gyre_bin:
            runs["gyre-bench"].append(gyre_bench(args.gyre_bin, n, top))
    if args.no_sweep:
        sizes = []
    print(f"\n## torch {torch.__version__}, {n} ranks, all_reduce float32 in place "
          f"({args.repeat} repeats, min..max)\n")
    print("| bytes | gyre time (us) | gloo time (us) | gyre busbw GB/s | gloo busbw GB/s | "
          "gyre/gloo busbw | gyre-bench busbw GB/s | torch-gyre / gyre-bench |")
    print("|---|---|---|---|---|---|---|---|")
    for s in sizes:
        g = [x[s] for x in runs["gyre"]]
        o = [x[s] for x in runs["gloo"]]
        # Ratios pair the runs of one repeat (they ran back to back), not one repeat's
        # best with another's worst.
        ratio = [og / gg for gg, og in zip(g, o)]
        row = [str(s), span([x * 1e6 for x in g], "{:.0f}"), span([x * 1e6 for x in o], "{:.0f}"),
               span([busbw(s, x, n) for x in g], "{:.3f}"), span([busbw(s, x, n) for x in o], "{:.3f}"),
               span(ratio, "{:.1f}x")]
        b = [x[s] for x in runs["gyre-bench"] if s in x]
        if b:
            row += [span([busbw(s, x, n) for x in b], "{:.3f}"),
                    span([bb / gg for gg, bb in zip(g, b)], "{:.0%}")]
        else:
            row += ["-", "-"]
        print("| " + " | ".join(row) + " |")
    if args.no_ddp:
        return
    print(f"\n## DDP samples/s, {n} ranks ({args.ddp_epochs} epochs, batch 64 per rank)\n")
    # no exchange: the same ranks with no gradient exchange at all (ddp_train.py --hook
    # local), compute and DDP's own work only. Free-running ranks time-share the cores
    # differently from ranks that meet every step, so this is a reference, not a bound.
    print("| model | gyre samples/s | gloo samples/s | gyre/gloo | no exchange samples/s | "
          "no exchange/gloo | test acc gyre / gloo |")
    print("|---|---|---|---|---|---|---|")
    for model in ("mlp", "conv", "lenet"):
        res = {"gyre": [], "gloo": [], "local": []}
        for _ in range(args.repeat):
            for backend in ("gyre", "gloo", "local"):
                res[backend].append(ddp("gyre" if backend == "local" else backend, n, model,
                                        args.ddp_epochs, hook="local" if backend == "local"
                                        else "none"))
        g = [x["samples_per_s"] for x in res["gyre"]]
        o = [x["samples_per_s"] for x in res["gloo"]]
        c = [x["samples_per_s"] for x in res["local"]]
        acc = (f"{span([x['test_acc'] for x in res['gyre']], '{:.4f}')} / "
               f"{span([x['test_acc'] for x in res['gloo']], '{:.4f}')}")
        print(f"| {model} | {span(g, '{:.0f}')} | {span(o, '{:.0f}')} | "
              f"{span([a / b for a, b in zip(g, o)], '{:.2f}x')} | {span(c, '{:.0f}')} | "
              f"{span([a / b for a, b in zip(c, o)], '{:.2f}x')} | {acc} |", flush=True)


if __name__ == "__main__":
    main()

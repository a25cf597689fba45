#!/usr/bin/env python3
"""torch.distributed all-reduce on CUDA tensors, several ranks sharing one GPU: the
reference that tools/gpu_check.sh sets gyre's device all-reduce against.

    python3 bench/torch_allreduce_bench.py --backend gloo --nranks 4 --bytes 64M

Same measure as bench/cuda_allreduce_bench.cc: --warmup untimed calls, a barrier,
--iters back-to-back all_reduce calls on a float32 CUDA tensor, one
torch.cuda.synchronize(); time = the largest over ranks of the mean per call;
busbw = bytes / time * 2(n-1)/n. Every rank uses cuda:0 (NCCL normally refuses two
ranks on one GPU; this script reports whatever it does instead of hiding it).
Prints `RESULT torch_<backend>_busbw=X` (or `RESULT torch_<backend>_error="..."`) on
stdout; exit status 0 when the run measured something.
"""
import argparse
import datetime
import sys
import time
import traceback

from torch_bench_util import free_port, parse_bytes


def worker(rank, args, port, queue):
    import torch
    import torch.distributed as dist

    try:
        torch.cuda.set_device(0)
        dist.init_process_group(args.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=args.nranks,
                                timeout=datetime.timedelta(seconds=args.timeout))
        count = args.bytes // 4
        x = torch.full((count,), float(rank + 1), dtype=torch.float32, device="cuda")
        for _ in range(args.warmup):
            x.fill_(float(rank + 1))
            dist.all_reduce(x)
        torch.cuda.synchronize()
        expected = args.nranks * (args.nranks + 1) / 2
        ok = bool(torch.all(x == expected).item())
        dist.barrier()
        # In place, as DDP does; the values grow by n per call, far from float's range.
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        mean = (time.perf_counter() - t0) / args.iters
        t = torch.tensor([mean], dtype=torch.float64,
                         device="cuda" if args.backend == "nccl" else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        queue.put((rank, "ok", float(t.item()), ok))
        dist.destroy_process_group()
    except Exception as e:  # report, do not hang the others longer than their timeout
        queue.put((rank, "error", f"{type(e).__name__}: {str(e).splitlines()[0][:300]}", False))
        traceback.print_exc(file=sys.stderr)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    p.add_argument("--nranks", type=int, default=4)
    p.add_argument("--bytes", type=parse_bytes, default=64 << 20)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--timeout", type=int, default=60, help="process group timeout, seconds")
    args = p.parse_args()

    import torch
    import torch.multiprocessing as mp

    if not torch.cuda.is_available():
        print(f'RESULT torch_{args.backend}_error="torch sees no CUDA device"')
        return 1
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args, port, queue)) for r in range(args.nranks)]
    for proc in procs:
        proc.start()
    results = {}
    deadline = time.time() + args.timeout + 20  # a hang is reported, not waited out
    while len(results) < args.nranks and time.time() < deadline:
        try:
            rank, status, value, ok = queue.get(timeout=1)
            results[rank] = (status, value, ok)
        except Exception:
            if all(not proc.is_alive() for proc in procs) and queue.empty():
                break
    for proc in procs:
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
    n = args.nranks
    print(f"# torch {torch.__version__}, backend {args.backend}, {n} ranks on cuda:0, "
          f"{args.bytes} bytes float32, {args.iters} iterations")
    errors = [v for (s, v, _) in results.values() if s == "error"]
    if errors or len(results) < n:
        why = errors[0] if errors else f"only {len(results)} of {n} ranks reported (hang or crash)"
        print(f'RESULT torch_{args.backend}_error="{why}"')
        return 1
    mean = max(v for (_, v, _) in results.values())
    busbw = args.bytes / mean / 1e9 * 2 * (n - 1) / n
    wrong = sum(0 if ok else 1 for (_, _, ok) in results.values())
    print(f"  time {mean * 1e6:.1f} us, algbw {args.bytes / mean / 1e9:.2f} GB/s, "
          f"busbw {busbw:.2f} GB/s, ranks with a wrong result: {wrong}")
    print(f"RESULT torch_{args.backend}_busbw={busbw:.2f} torch_{args.backend}_wrong={wrong}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

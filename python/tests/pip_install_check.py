#!/usr/bin/env python3
"""The user's script after `pip install ./python`: init_process_group("gyre") at world
size 2 under mp.spawn, with NO import of gyre_torch on torch 2 (torch loads the
package's torch.distributed.backends entry point for an unknown backend name) and one
`import gyre_torch` on torch 1.13 (which has no such entry point).

    pip_install_check.py --expect-under DIR   # gyre_torch must be loaded from under DIR

Checks, on every rank: all_reduce SUM, broadcast and all_gather of integer-valued float
tensors exactly; that the group's backend is gyre; that gyre_torch was loaded from the
installed copy (under DIR), not from a source or build folder.
"""
import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

MAJOR = int(torch.__version__.split(".")[0])


def rank_main(rank, world, port, expect_under):
    if MAJOR < 2:
        import gyre_torch  # noqa: F401  torch 1.13: the one import (README)
    elif "gyre_torch" in sys.modules:
        raise SystemExit("gyre_torch was imported before init_process_group: the test "
                         "would not show that torch's entry point loads it")
    dist.init_process_group("gyre", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        module = sys.modules.get("gyre_torch")
        if module is None:
            raise SystemExit("init_process_group('gyre') worked without gyre_torch loaded")
        where = os.path.realpath(module.__file__)
        if not where.startswith(os.path.realpath(expect_under) + os.sep):
            raise SystemExit(f"gyre_torch came from {where}, not from the installed copy "
                             f"under {expect_under}")
        name = dist.get_backend()
        if str(name).lower() != "gyre":
            raise SystemExit(f"the group's backend is {name!r}, not gyre")
        t = torch.full((1000,), float(rank + 1))
        dist.all_reduce(t)
        expect = float(world * (world + 1) // 2)
        if not torch.equal(t, torch.full((1000,), expect)):
            raise SystemExit(f"rank {rank}: all_reduce gave {t[:4]}, expected {expect}")
        b = torch.arange(10.0) if rank == 0 else torch.zeros(10)
        dist.broadcast(b, 0)
        if not torch.equal(b, torch.arange(10.0)):
            raise SystemExit(f"rank {rank}: broadcast gave {b}")
        parts = [torch.zeros(3) for _ in range(world)]
        dist.all_gather(parts, torch.full((3,), float(rank)))
        if not all(torch.equal(p, torch.full((3,), float(r))) for r, p in enumerate(parts)):
            raise SystemExit(f"rank {rank}: all_gather gave {parts}")
        if rank == 0:
            how = "one import" if MAJOR < 2 else "no import: torch's entry point"
            print(f"torch {torch.__version__}: init_process_group('gyre') with {how}; "
                  f"gyre_torch from {os.path.dirname(where)}; all_reduce, broadcast, "
                  f"all_gather exact at world {world}", flush=True)
    finally:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--expect-under", required=True)
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(2, port, args.expect_under), nprocs=2, join=True)
    print("pip install check: 1 passed, 0 failed")


if __name__ == "__main__":
    main()

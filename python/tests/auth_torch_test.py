#!/usr/bin/env python3
"""Backend "gyre" with the job's secret, bootstrapping through torch's open TCPStore.

    python3 python/tests/auth_torch_test.py

1. With GYRE_TOKEN set on every rank: all_reduce is exact (the pipes authenticated, gyre's
   entries in torch's store signed).
2. An outsider without the secret, holding a client of the same TCPStore (here: this
   process, which serves it), writes a forged check-in into gyre's keys before the ranks
   arrive: every rank's creation fails with an error naming the unsigned check-in (its
   number and the forger's address, so the forgery was read, not missed), and no rank
   connects to the address the forgery names.
   Where gyre's keys live in torch's store depends on how the torch line nests its
   PrefixStores (seen: 1.13 "0/", the group; 2.x "0//cpu//", the group then the device):
   an honest run whose ranks hand torch a store that records every key (RecordingStore)
   finds the prefix under which gyre_torch read its first check-in, and the forger
   writes there in the TCPStore. No such key found is a failure, as is a rank that does
   not refuse the forgery by name (it was not read).
Exit status 0 only if both hold.
"""
import datetime
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import gyre_torch  # noqa: F401

WORLD = 2
# Made by the parent and handed to each rank (a spawned child re-imports this module).
SECRET = os.environ.get("GYRE_AUTH_TEST_SECRET") or "torch-auth-test-%d" % os.getpid()
os.environ["GYRE_AUTH_TEST_SECRET"] = SECRET


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# gyre's first check-in, relative to the store gyre_torch is given (ring/join.h).
FIRST_CLAIM = "gyre/comm0/join/claim/1"


class RecordingStore(dist.Store):
    """A store shared by the ranks through a multiprocessing manager (`data`, `lock`) that
    notes every key it is asked for (what torch's PrefixStores pass down, prefixes
    included) in `keys`. Its own, not a TCPStore client: torch 1.13 binds no
    TCPStore.check in Python, and a wait that expires breaks its client."""

    def __init__(self, data, lock, keys):
        super().__init__()
        self.data, self.lock, self.keys = data, lock, keys
        self.limit = datetime.timedelta(seconds=30)

    def _note(self, keys):
        self.keys.extend(k for k in keys if k not in self.keys)

    def set(self, key, value):
        self._note([key])
        self.data[key] = value.encode() if isinstance(value, str) else bytes(value)

    def get(self, key):
        self.wait([key])
        return self.data[key]

    def add(self, key, value):
        self._note([key])
        with self.lock:
            total = int(self.data.get(key, b"0")) + value
            self.data[key] = str(total).encode()
        return total

    def compare_set(self, key, expected, desired):
        self._note([key])
        with self.lock:
            current = self.data.get(key)
            if (current is None and not expected) or current == expected:
                self.data[key] = desired
                return desired
            return current if current is not None else expected

    def check(self, keys):
        self._note(keys)
        return all(k in self.data for k in keys)

    def wait(self, keys, timeout=None):
        self._note(keys)
        limit = (timeout or self.limit).total_seconds()
        deadline = time.monotonic() + (limit if limit > 0 else 30)
        while not all(k in self.data for k in keys):
            if time.monotonic() > deadline:
                raise RuntimeError("Timeout waiting for %s" % keys)
            time.sleep(0.005)

    def delete_key(self, key):
        return self.data.pop(key, None) is not None

    def num_keys(self):
        return len(self.data)

    def set_timeout(self, timeout):
        self.limit = timeout


def rank_main(rank, port, mode, results, secret, shared):
    os.environ["GYRE_TOKEN"] = secret
    os.environ["GYRE_JOIN_TIMEOUT"] = "20"
    keys = []
    try:
        if mode == "discover":
            store = RecordingStore(shared[0], shared[1], keys)
        else:
            store = dist.TCPStore("127.0.0.1", port, WORLD, False, datetime.timedelta(seconds=30))
        dist.init_process_group("gyre", store=store, rank=rank, world_size=WORLD,
                                timeout=datetime.timedelta(seconds=30))
        t = torch.full((1000,), float(rank + 1))
        dist.all_reduce(t)
        ok = bool(torch.all(t == 3.0))
        dist.destroy_process_group()
        results.put((rank, "ok" if ok else "wrong sum %s" % t[0].item(), keys))
    except Exception as e:  # noqa: BLE001 (the error is the result)
        results.put((rank, "error: %s" % e, keys))


def run(mode, prefixes=()):
    """Runs WORLD ranks; returns ({rank: result}, keys the ranks used (mode "discover"),
    whether anyone connected to the forger's listener (mode "forged"), its address)."""
    port = free_port()
    master = dist.TCPStore("127.0.0.1", port, WORLD + 1, True, datetime.timedelta(seconds=30),
                           wait_for_workers=False)
    decoy, addr = None, None
    if mode == "forged":
        # What an outsider can do to an open store: take arrival 1 and write a check-in
        # (rank 1 at its own listener) there, where gyre_torch reads its check-ins.
        decoy = socket.socket()
        decoy.bind(("127.0.0.1", 0))
        decoy.listen(8)
        decoy.settimeout(0.1)
        addr = "127.0.0.1:%d" % decoy.getsockname()[1]
        # The fields of ring/join.h's Claim::encode, one a line (the last two: no RDMA
        # device, and why not).
        claim = ("1\n%d\n1\n0\nforged/host\nforged\n%s\nforged:1:1\n-\nGYRE_ALGO=auto\n\n\n"
                 % (WORLD, addr))
        for prefix in prefixes:
            master.add(prefix + "gyre/comm0/join/arrived", 1)
            master.set(prefix + FIRST_CLAIM, claim)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    manager = ctx.Manager() if mode == "discover" else None
    shared = (manager.dict(), manager.Lock()) if manager else None
    procs = [ctx.Process(target=rank_main, args=(r, port, mode, results, SECRET, shared))
             for r in range(WORLD)]
    for p in procs:
        p.start()
    out, keys = {}, []
    for _ in procs:
        rank, result, used = results.get(timeout=120)
        out[rank] = result
        keys += [k for k in used if k not in keys]
    for p in procs:
        p.join(30)
    if manager:
        manager.shutdown()
    connected = False
    if decoy is not None:
        try:
            decoy.accept()
            connected = True
        except OSError:
            pass
    return out, keys, connected, addr


def gyre_prefixes():
    """The prefixes under which this torch line's PrefixStores put gyre_torch's keys, from
    an honest run that records them; None (said why) when it finds none."""
    out, keys, _, _ = run("discover")
    if not all(v == "ok" for v in out.values()):
        print("[auth-torch] the recording run failed:", out)
        return None
    prefixes = sorted({k[:-len(FIRST_CLAIM)] for k in keys if k.endswith(FIRST_CLAIM)})
    if not prefixes:
        print("[auth-torch] no key ending in %s among the %d the ranks used: %s"
              % (FIRST_CLAIM, len(keys), keys[:40]))
        return None
    return prefixes


def main():
    out, _, _, _ = run("plain")
    print("[auth-torch] with a secret:", out)
    good = all(v == "ok" for v in out.values())
    prefixes = gyre_prefixes()
    print("[auth-torch] torch %s puts gyre's keys under %s" % (torch.__version__, prefixes))
    if prefixes is None:
        print("FAIL")
        return 1
    out, _, connected, addr = run("forged", prefixes)
    print("[auth-torch] forged check-in:", out, "outsider got a connection:", connected)
    # Every rank must have read the forgery (check-in 1, at the forger's address) and
    # refused it: a rank that fails for another reason, or succeeds, means the forger
    # missed gyre's keys and proves nothing.
    want = ("check-in 1 ", "(it claims to be rank 1 at %s)" % addr,
            "is not signed with the job's secret")
    named = [r for r, v in out.items() if v.startswith("error") and all(w in v for w in want)]
    forged_ok = len(named) == WORLD and not connected
    if len(named) != WORLD:
        print("[auth-torch] ranks that did not refuse the forged check-in by name:",
              sorted(set(out) - set(named)))
    if SECRET in str(out):
        print("[auth-torch] the secret was printed")
        forged_ok = False
    print("PASS" if good and forged_ok else "FAIL")
    return 0 if good and forged_ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The store bridge (python/gyre_torch/csrc/store_bridge.cpp): torch's c10d stores as the
callbacks gyre bootstraps through. A wait on a key nobody sets comes back as gyreTimeout
from each c10d store (TCPStore, a PrefixStore over it, FileStore, HashStore), a TCPStore
whose server is gone as gyreRemoteError, and a plain call succeeds.
Runs against the build on PYTHONPATH (python/tests/run_suite.sh)."""
import datetime
import os
import tempfile
import time

import torch
import torch.distributed as dist

from gyre_torch import _C

GYRE_SUCCESS, GYRE_TIMEOUT, GYRE_REMOTE_ERROR = 0, 2, 3  # capi/gyre.h's gyreResult_t
TIMEOUT = datetime.timedelta(seconds=1)


def call(store, op, key, want, what):
    """One call through the bridge; fails unless it returns `want`."""
    start = time.monotonic()
    result, error = _C._call_through_store_bridge(store, op, key)
    took = time.monotonic() - start
    assert result == want, f"{what}: {op}({key!r}) gave {result}, not {want}: {error!r}"
    first_line = error.splitlines()[0] if error else "no error"
    print(f"{what}: {op}({key!r}) -> {result} after {took:.1f} s ({first_line})")
    assert took < 30, f"{what}: {op} came back after {took:.0f} s, not about 1 s"


def main():
    server = dist.TCPStore("127.0.0.1", 0, 1, True, TIMEOUT, wait_for_workers=False)

    def client():
        # A fresh client each time: torch 1.13's TCPStore client is unusable after a wait
        # expired.
        return dist.TCPStore("127.0.0.1", server.port, 1, False, TIMEOUT,
                             wait_for_workers=False)

    tcp = client()
    call(tcp, "set", "present", GYRE_SUCCESS, "TCPStore")
    call(tcp, "get", "present", GYRE_SUCCESS, "TCPStore")
    call(tcp, "check", "absent", GYRE_SUCCESS, "TCPStore")
    call(tcp, "add", "counter", GYRE_SUCCESS, "TCPStore")
    for op in ("get", "wait"):
        call(client(), op, "nobody-sets-this", GYRE_TIMEOUT, "TCPStore")
    # What init_process_group hands a backend's creator.
    call(dist.PrefixStore("default_pg", client()), "get", "nobody-sets-this", GYRE_TIMEOUT,
         "PrefixStore over a TCPStore")

    with tempfile.TemporaryDirectory() as tmp:
        file_store = dist.FileStore(os.path.join(tmp, "store"), 1)
        file_store.set_timeout(TIMEOUT)
        call(file_store, "set", "present", GYRE_SUCCESS, "FileStore")  # creates the file
        for op in ("get", "wait"):
            call(file_store, op, "nobody-sets-this", GYRE_TIMEOUT, "FileStore")

    # get only: torch 1.13's HashStore.wait(keys) ignores the store's timeout (300 s).
    hash_store = dist.HashStore()
    hash_store.set_timeout(TIMEOUT)
    call(hash_store, "get", "nobody-sets-this", GYRE_TIMEOUT, "HashStore")

    orphan = client()
    del server
    call(orphan, "get", "present", GYRE_REMOTE_ERROR, "TCPStore whose server is gone")
    print(f"store_bridge_test: ok (torch {torch.__version__})")


if __name__ == "__main__":
    main()

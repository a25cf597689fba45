#!/usr/bin/env python3
"""Per-operation costs of creation on this host, for docs/scaling.md's cost model.

  bench/runs/creation_scale_costs.py [OUT]     (default bench/results/creation_scale_1host)

Measures, median of 5 batches each:
  tcp_connect_us     socket + connect + accept + close of both ends over loopback
  tcp_exchange_us    one 64 B request and 64 B reply on a connected pair (a handshake
                     step: gyre's pipe handshake is a few of these)
  shm_create_us      a 512 KiB segment (GYRE_SLOTS x GYRE_SLOT_BYTES at their defaults on
                     shared memory): open(O_CREAT) in /dev/shm + ftruncate + mmap + touch
                     every page + munmap + close + unlink
  shm_open_us        open + mmap + touch every page + munmap + close of an existing one
The store's round trip comes from build/bin/store_many_clients_test (DISABLED_RoundTrip),
run by the caller: this file adds it when STORE_RTT_US is set.
Writes OUT/costs.json. Standard library only.
"""
import json
import mmap
import os
import socket
import statistics
import sys
import time

SEGMENT = 512 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")


def per_op(fn, count, batches=5):
    times = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(count):
            fn()
        times.append((time.perf_counter() - t0) / count * 1e6)
    return round(statistics.median(times), 1)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results/creation_scale_1host"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    addr = listener.getsockname()

    def connect():
        c = socket.create_connection(addr)
        s, _ = listener.accept()
        c.close()
        s.close()

    c = socket.create_connection(addr)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s, _ = listener.accept()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    msg = b"x" * 64

    def exchange():
        c.sendall(msg)
        s.recv(64)
        s.sendall(msg)
        c.recv(64)

    name = f"/dev/shm/gyre-cost-{os.getpid()}"

    def touch(m):
        for off in range(0, SEGMENT, PAGE):
            m[off] = 1

    def create():
        fd = os.open(name, os.O_CREAT | os.O_RDWR | os.O_EXCL, 0o600)
        os.ftruncate(fd, SEGMENT)
        m = mmap.mmap(fd, SEGMENT)
        touch(m)
        m.close()
        os.close(fd)
        os.unlink(name)

    def open_existing():
        fd = os.open(name, os.O_RDWR)
        m = mmap.mmap(fd, SEGMENT)
        touch(m)
        m.close()
        os.close(fd)

    # Python's own cost per page touch, subtracted from both shm figures.
    buf = bytearray(SEGMENT)

    def touch_only():
        for off in range(0, SEGMENT, PAGE):
            buf[off] = 1

    result = {
        "tcp_connect_us": per_op(connect, 500),
        "tcp_exchange_us": per_op(exchange, 2000),
        "shm_create_us": per_op(create, 200),
    }
    fd = os.open(name, os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, SEGMENT)
    os.close(fd)
    try:
        result["shm_open_us"] = per_op(open_existing, 200)
    finally:
        os.unlink(name)
    loop = per_op(touch_only, 200)
    result["shm_create_us"] = round(result["shm_create_us"] - loop, 1)
    result["shm_open_us"] = round(result["shm_open_us"] - loop, 1)
    if os.environ.get("STORE_RTT_US"):
        result["store_rtt_us"] = float(os.environ["STORE_RTT_US"])
    if os.environ.get("STORE_RTT_CROWDED_US"):
        result["store_rtt_1100_idle_us"] = float(os.environ["STORE_RTT_CROWDED_US"])
    result["segment_bytes"] = SEGMENT
    result["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result["load"] = open("/proc/loadavg").read().split()[:3]
    result["note"] = ("medians of 5 batches in Python (interpreter overhead included in the tcp "
                      "figures, subtracted from the shm ones)")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "costs.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

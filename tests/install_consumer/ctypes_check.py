#!/usr/bin/env python3
"""libgyre_c.so from Python's ctypes, as a binding would use it (run by run_test.sh).

    ctypes_check.py LIB [VERSION]  two ranks: this process starts both as children
    ctypes_check.py LIB --rank R   one rank (rank 0 prints the unique id, rank 1 reads it)

With VERSION ("0.2.0"), gyreGetVersion must return its code (major * 10000 + minor * 100
+ patch) and refuse NULL with gyreInvalidArgument. Each rank opens LIB with ctypes.CDLL, checks gyreGetErrorString, joins a 2-rank
communicator through gyreGetUniqueId/gyreCommInitRank, all-reduces float32 values whose
sums are exact, checks that a bad datatype is gyreInvalidArgument with a message, and
destroys the communicator. Exits 0 and prints one line when every check passed.
"""
import ctypes
import os
import subprocess
import sys
import time

GYRE_SUCCESS, GYRE_INVALID_ARGUMENT = 0, 1
GYRE_FLOAT32, GYRE_SUM = 8, 0
COUNT = 50000


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def load(path):
    lib = ctypes.CDLL(path)
    lib.gyreGetErrorString.restype = ctypes.c_char_p
    lib.gyreGetErrorString.argtypes = [ctypes.c_int]
    lib.gyreGetLastError.restype = ctypes.c_char_p
    lib.gyreGetLastError.argtypes = [ctypes.c_void_p]
    lib.gyreGetUniqueId.argtypes = [ctypes.POINTER(UniqueId)]
    lib.gyreCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId,
                                     ctypes.c_int]
    lib.gyreCommCount.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    lib.gyreAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                  ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    lib.gyreCommDestroy.argtypes = [ctypes.c_void_p]
    lib.gyreGetVersion.argtypes = [ctypes.POINTER(ctypes.c_int)]
    return lib


def check_version(path, version):
    lib = load(path)
    major, minor, patch = (int(x) for x in version.split("."))
    code = ctypes.c_int(-1)
    expect(lib.gyreGetVersion(ctypes.byref(code)) == GYRE_SUCCESS, "gyreGetVersion failed")
    expect(code.value == major * 10000 + minor * 100 + patch,
           f"gyreGetVersion gave {code.value} for version {version}")
    expect(lib.gyreGetVersion(None) == GYRE_INVALID_ARGUMENT,
           "gyreGetVersion(NULL) was not gyreInvalidArgument")
    return code.value


def expect(ok, what):
    if not ok:
        raise SystemExit(f"ctypes_check: {what}")


def rank_main(path, rank):
    lib = load(path)
    expect(lib.gyreGetErrorString(GYRE_INVALID_ARGUMENT) == b"invalid argument",
           f"gyreGetErrorString(1) = {lib.gyreGetErrorString(GYRE_INVALID_ARGUMENT)!r}")
    uid = UniqueId()
    if rank == 0:
        expect(lib.gyreGetUniqueId(ctypes.byref(uid)) == GYRE_SUCCESS,
               f"gyreGetUniqueId: {lib.gyreGetLastError(None)!r}")
        print(bytes(memoryview(uid)).hex(), flush=True)  # all 128 bytes, NULs too
    else:
        text = sys.stdin.readline().strip()
        expect(len(text) == 256, f"rank 1 read {text!r} instead of a unique id")
        ctypes.memmove(ctypes.byref(uid), bytes.fromhex(text), 128)

    comm = ctypes.c_void_p()
    expect(lib.gyreCommInitRank(ctypes.byref(comm), 2, uid, rank) == GYRE_SUCCESS,
           f"rank {rank}: gyreCommInitRank: {lib.gyreGetLastError(None)!r}")
    count = ctypes.c_int()
    expect(lib.gyreCommCount(comm, ctypes.byref(count)) == GYRE_SUCCESS and count.value == 2,
           "gyreCommCount")

    data = (ctypes.c_float * COUNT)(*[(rank + 1) * (i % 5) for i in range(COUNT)])
    result = (ctypes.c_float * COUNT)()
    expect(lib.gyreAllReduce(data, result, COUNT, GYRE_FLOAT32, GYRE_SUM, comm) == GYRE_SUCCESS,
           f"rank {rank}: gyreAllReduce: {lib.gyreGetLastError(comm)!r}")
    wrong = [i for i in range(COUNT) if result[i] != 3 * (i % 5)]
    expect(not wrong, f"rank {rank}: allReduce wrong at {len(wrong)} indices, first {wrong[:3]}")

    expect(lib.gyreAllReduce(data, result, COUNT, 99, GYRE_SUM, comm) == GYRE_INVALID_ARGUMENT,
           "datatype 99 was not gyreInvalidArgument")
    expect(lib.gyreGetLastError(comm) != b"", "no message for datatype 99")
    expect(lib.gyreCommDestroy(comm) == GYRE_SUCCESS, "gyreCommDestroy")


def main():
    path = sys.argv[1]
    if len(sys.argv) == 4 and sys.argv[2] == "--rank":
        rank_main(path, int(sys.argv[3]))
        return
    version = f", gyreGetVersion {check_version(path, sys.argv[2])}" if len(sys.argv) > 2 else ""
    # Bounded: a rank that never hears from its peer fails after GYRE_TIMEOUT seconds.
    env = dict(os.environ, GYRE_TIMEOUT="30")
    me = [sys.executable, os.path.abspath(__file__), path, "--rank"]
    rank0 = subprocess.Popen(me + ["0"], stdout=subprocess.PIPE, env=env, text=True)
    rank1 = subprocess.Popen(me + ["1"], stdin=subprocess.PIPE, env=env, text=True)
    try:
        rank1.stdin.write(rank0.stdout.readline())
        rank1.stdin.close()
        # The first rank to fail ends the other at once, rather than after its timeout.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            codes = [rank0.poll(), rank1.poll()]
            if None not in codes or any(c not in (None, 0) for c in codes):
                break
            time.sleep(0.01)
    finally:
        for p in (rank0, rank1):
            if p.poll() is None:
                p.kill()
                p.wait()
    expect(codes == [0, 0], f"ranks exited with {codes} (None: still running, killed)")
    print(f"ctypes: libgyre_c.so opened, gyreGetErrorString{version}, 2-rank gyreAllReduce "
          "exact, bad datatype rejected")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target into fuzz/corpus/<target>/.

The seeds are valid messages of each format (and a few near misses), so that libFuzzer
starts from inputs that reach deep into the parsers. Layouts follow transport/wire.h
and store/store_protocol.h; rerun after changing either. Usage: fuzz/make_corpus.py

The files named by a SHA-1 next to them are what longer fuzzing campaigns found,
minimized with libFuzzer's -merge=1 (fuzzer -merge=1 NEW_DIR fuzz/corpus/T CAMPAIGN_DIR).
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def token(text):
    return text.encode().ljust(32, b"\0")[:32]


def hello(version=1, comm=42, sender=0, receiver=1, channel=0, tok="secret", magic=b"GYRE"):
    return magic + struct.pack("<IQiiII", version, comm, sender, receiver, channel, 0) + token(tok)


def tag(count=4, seq=0, root=-1, coll=1, dtype=8, op=0):
    return struct.pack("<QIiBBBBI", count, seq, root, coll, dtype, op, 0, 0)


def frame(payload, magic=0x46525947, t=None):
    return struct.pack("<II", magic, len(payload)) + (t or tag()) + payload


def status(state=3, code=3, hops=0, writer=2, suspect=0, reporter=1, seq=7, reason=b"peer rank 0 closed the connection"):
    head = struct.pack("<IBBBBiiiIII", 0x53525947, state, code, hops, 0, writer, suspect, reporter,
                       seq, len(reason), 0)
    return head + reason.ljust(224, b"\0")


def control(record):
    return struct.pack("<II", 0x43525947, len(record)) + bytes(24) + record


def store_msg(kind, body):
    return struct.pack("<IB", 5 + len(body), kind) + body


def key(k):
    return struct.pack("<I", len(k)) + k


SEEDS = {
    "fuzz_hello": {
        "valid": hello(),
        "old_version": hello(version=0),
        "wrong_token": hello(tok="other"),
        "wrong_receiver": hello(receiver=2),
        "sender_out_of_range": hello(sender=9),
        "garbage": b"GET / HTTP/1.0\r\n\r\n",
        "truncated": hello()[:20],
    },
    "fuzz_frame": {
        "data": frame(b"")[:32],
        "data_too_big": struct.pack("<II", 0x46525947, 5000) + tag(),
        "control_abort": control(status()),
        "control_waiting": control(status(state=1, code=3, hops=2, reason=b"")),
        "control_resumed": control(status(state=2, reason=b"")),
        "control_bad_size": struct.pack("<II", 0x43525947, 8) + bytes(24) + bytes(8),
    },
    "fuzz_store_hello": {
        "valid": b"GYST" + struct.pack("<I", 1),
        "future": b"GYST" + struct.pack("<I", 7),
        "garbage": b"HTTP/1.1 200 OK",
    },
    "fuzz_store_request": {
        "set": store_msg(1, key(b"gyre/comm0/addr/0") + key(b"127.0.0.1:4000")),
        "get": store_msg(2, key(b"gyre/comm0/token")),
        "add": store_msg(3, key(b"counter") + struct.pack("<q", -5)),
        "wait": store_msg(4, struct.pack("<I", 2) + key(b"a") + key(b"bb")),
        "check": store_msg(5, struct.pack("<I", 1) + key(b"connected/3")),
        "two_in_a_row": store_msg(2, key(b"x")) + store_msg(3, key(b"y") + struct.pack("<q", 1)),
        "huge_length": struct.pack("<IB", 0x7FFFFFFF, 1),
    },
    "fuzz_store_reply": {
        "ok": store_msg(1, b""),
        "value": store_msg(2, key(b"some value")),
        "integer": store_msg(3, struct.pack("<q", 123456789)),
        "bool": store_msg(4, b"\x01"),
        "bad_bool": store_msg(4, b"\x02"),
        "error": store_msg(5, key(b"key too long")),
    },
    "fuzz_tcp_stream": {
        "one_frame": b"\x00" + frame(b"abcd"),
        "frames_and_status": b"\x55" + frame(b"x" * 100) + control(status(state=1, hops=1, reason=b""))
        + frame(b"y" * 256, t=tag(seq=1)) + control(status()),
        "direct_receive": b"\xff" + frame(b"z" * 64) + frame(b"") + frame(b"w" * 10),
        "oversized": b"\x00" + struct.pack("<II", 0x46525947, 257) + tag() + b"q" * 257,
        "truncated": b"\x0f" + frame(b"abcdef")[:36],
    },
}


def main():
    for target, seeds in SEEDS.items():
        folder = os.path.join(HERE, "corpus", target)
        os.makedirs(folder, exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()

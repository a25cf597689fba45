#!/usr/bin/env python3
"""The job's secret never crosses the wire: every packet of a real job, captured.

    python3 tests/netns/packet_capture_test.py BIN_DIR      (root; ctest's packet_capture)

Runs `gyrerun -n 4 gyre-bench broadcast -d uint8` (tcp pipes, a secret in
GYRE_TOKEN_FILE) inside a network namespace of its own (`unshare --net`, lo only), while
an AF_PACKET socket on that lo captures every frame; twice: plaintext, then
GYRE_ENCRYPT=1. In each run it asserts:

  - the job succeeded (gyre-bench checks every result; exit 0), and the capture lost
    nothing (the kernel's PACKET_STATISTICS count no drop, the byte cap was not reached);
  - no frame, and no reassembled TCP stream (a needle split over two segments counts),
    holds the secret, its hex (lower and upper case), its base64, the 32 bytes its hex
    digits stand for, or the key derived from it (base/secret.h's authKey, raw or hex);
  - positive controls, so that a capture that saw nothing cannot pass: the store's
    check-in keys ("gyre/comm0/join/claim/") appear in both runs (the store is
    authenticated, not encrypted), at least the broadcast's volume of TCP payload was
    seen, and the root's payload (bench/check_pattern.h's movedInput for uint8: byte
    h = 7q mod 61 as h if even, else 255 - h) appears in the plaintext run and does not
    appear in the encrypted one.

First a self-test on made-up frames proves the scanner finds a needle split over two
segments (out of order, sequence numbers wrapping) and refuses a stream with a hole.
Bounded: each job runs under a 120 s timeout, the capture keeps at most 512 MiB.
Exit status: 0 pass, 1 fail (saying what), 77 skipped (not root, or no unshare/ip),
2 usage. Standard library only.
"""
import base64
import hashlib
import hmac
import os
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_OUTGOING = 4  # lo shows each frame twice: outgoing, then incoming; keep one
CAP_BYTES = 512 << 20
JOB_TIMEOUT_S = 120
MAX_BYTES = 1 << 20  # the broadcast's largest size
IN_NETNS = "GYRE_PACKET_CAPTURE_IN_NETNS"


def skip(why):
    print("SKIPPED: packet_capture: " + why)
    sys.exit(77)


class Capture:
    """Every frame on interface `ifname` from start() to stop(), at most CAP_BYTES."""

    def __init__(self, ifname):
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        # Room for bursts while this thread waits for a core (SO_RCVBUFFORCE: root).
        self.sock.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE
        self.sock.bind((ifname, 0))
        self.sock.settimeout(0.2)
        self.frames = []
        self.bytes = 0
        self.overflow = False
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._stats()  # reading the statistics resets them: count from here
        self.thread.start()

    def _run(self):
        while True:
            try:
                frame, addr = self.sock.recvfrom(1 << 17)
            except socket.timeout:
                if self.stopping.is_set():
                    return
                continue
            if addr[2] == PACKET_OUTGOING:
                continue
            if self.bytes + len(frame) > CAP_BYTES:
                self.overflow = True
                return
            self.frames.append(frame)
            self.bytes += len(frame)

    def _stats(self):
        packets, drops = struct.unpack("II", self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        return packets, drops

    def stop(self):
        """Waits until the socket has been quiet for one timeout, then returns the drops."""
        time.sleep(0.3)
        self.stopping.set()
        self.thread.join(30)
        _, drops = self._stats()
        self.sock.close()
        return drops


def tcp_segments(frame):
    """(flow, seq, flags, payload) of a TCP frame on lo (IPv4 or IPv6), else None."""
    if len(frame) < 14:
        return None
    ethertype = struct.unpack("!H", frame[12:14])[0]
    ip = frame[14:]
    if ethertype == 0x0800 and len(ip) >= 20 and ip[9] == 6:
        ihl = (ip[0] & 0x0F) * 4
        total = struct.unpack("!H", ip[2:4])[0]
        src, dst, tcp = ip[12:16], ip[16:20], ip[ihl:total]
    elif ethertype == 0x86DD and len(ip) >= 40 and ip[6] == 6:
        src, dst, tcp = ip[8:24], ip[24:40], ip[40:40 + struct.unpack("!H", ip[4:6])[0]]
    else:
        return None
    if len(tcp) < 20:
        return None
    sport, dport, seq = struct.unpack("!HHI", tcp[:8])
    offset = (tcp[12] >> 4) * 4
    return (src, sport, dst, dport), seq, tcp[13], tcp[offset:]


def streams(frames):
    """Each TCP direction's bytes in sequence order (retransmitted bytes once)."""
    flows = {}
    for frame in frames:
        seg = tcp_segments(frame)
        if seg is None:
            continue
        flow, seq, flags, payload = seg
        f = flows.setdefault(flow, {"base": None, "parts": []})
        if flags & 0x02:  # SYN: the data starts at seq + 1
            f["base"] = (seq + 1) & 0xFFFFFFFF
        elif payload:
            f["parts"].append((seq, payload))
    out = []
    for f in flows.values():
        if not f["parts"]:
            continue
        base = f["base"] if f["base"] is not None else min(s for s, _ in f["parts"])
        data = bytearray()
        for seq, payload in sorted(f["parts"], key=lambda p: (p[0] - base) & 0xFFFFFFFF):
            rel = (seq - base) & 0xFFFFFFFF
            if rel > len(data):  # a hole: a segment the capture did not see
                raise AssertionError("a TCP stream has a hole: the capture missed a segment")
            if rel + len(payload) > len(data):
                data += payload[len(data) - rel:]
        out.append(bytes(data))
    return out


def needles_of(secret):
    """Every form of the secret, or of the key derived from it, that must never be seen."""
    s = secret.encode()
    key = hmac.new(s, b"gyre-auth-v1", hashlib.sha256).digest()
    forms = {
        "the secret": s,
        "its hex": s.hex().encode(),
        "its hex (upper case)": s.hex().upper().encode(),
        "its base64": base64.b64encode(s),
        "the bytes its hex digits stand for": bytes.fromhex(secret),
        "those bytes in base64": base64.b64encode(bytes.fromhex(secret)),
        "the secret in upper case": secret.upper().encode(),
        "authKey (HMAC(secret, gyre-auth-v1))": key,
        "authKey's hex": key.hex().encode(),
    }
    return forms


def fake_frame(seq, payload, syn=False):
    """An IPv4 TCP frame on lo from 127.0.0.1:1 to 127.0.0.1:2 (for self_test)."""
    tcp = struct.pack("!HHIIBBHHH", 1, 2, seq, 0, 5 << 4, 0x02 if syn else 0x18, 0, 0, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 0, 0, 64, 6, 0,
                     bytes([127, 0, 0, 1]), bytes([127, 0, 0, 1]))
    return bytes(12) + b"\x08\x00" + ip + tcp + payload


def self_test():
    """The scanner finds what it must: a needle split over two segments, out of order,
    with the sequence number wrapping; and it refuses a stream with a hole."""
    needle = needles_of("ab" * 32)["its hex"]
    half = len(needle) // 2
    base = 0xFFFFFFF0
    frames = [fake_frame(base - 1, b"", syn=True),
              fake_frame((base + 10 + half) & 0xFFFFFFFF, needle[half:] + b"tail"),
              fake_frame(base, b"0123456789" + needle[:half]),
              fake_frame(base, b"0123456789")]  # a retransmission
    assert not any(needle in f for f in frames), "self-test: the needle must be split"
    found = streams(frames)
    assert found == [b"0123456789" + needle + b"tail"], "self-test: reassembly: %r" % found
    try:
        streams(frames[:2])
    except AssertionError:
        return
    raise AssertionError("self-test: a stream with a hole was not refused")


def root_payload():
    """Four periods of rank 0's broadcast input (bench/check_pattern.h, uint8, max)."""
    period = bytes(h if h % 2 == 0 else 255 - h for h in ((7 * q) % 61 for q in range(61)))
    return period * 4


def run_job(bin_dir, token_file, encrypt):
    env = dict(os.environ, GYRE_TRANSPORT="tcp", GYRE_TOKEN_FILE=token_file)
    env.pop("GYRE_TOKEN", None)
    env.pop("GYRE_ENCRYPT", None)
    if encrypt:
        env["GYRE_ENCRYPT"] = "1"
    cmd = [os.path.join(bin_dir, "gyrerun"), "-n", "4", os.path.join(bin_dir, "gyre-bench"),
           "broadcast", "-d", "uint8", "-b", "64K", "-e", str(MAX_BYTES), "-f", "4",
           "-n", "3", "-w", "1"]
    return subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=JOB_TIMEOUT_S, text=True)


def check_run(bin_dir, token_file, secret, encrypt):
    name = "GYRE_ENCRYPT=1" if encrypt else "plaintext"
    problems = []
    cap = Capture("lo")
    cap.start()
    try:
        job = run_job(bin_dir, token_file, encrypt)
    finally:
        drops = cap.stop()
    if job.returncode != 0:
        problems.append("the job failed (exit %d):\n%s" % (job.returncode, job.stdout[-3000:]))
    if cap.overflow:
        problems.append("the capture reached its cap of %d bytes" % CAP_BYTES)
    if drops:
        problems.append("the kernel dropped %d frames: the capture is incomplete" % drops)
    try:
        flows = streams(cap.frames)
    except AssertionError as e:
        problems.append(str(e))
        flows = []
    payload = sum(len(f) for f in flows)
    print("[packet_capture] %s: %d frames, %d bytes captured, %d TCP streams, %d payload bytes"
          % (name, len(cap.frames), cap.bytes, len(flows), payload))
    for what, needle in needles_of(secret).items():
        in_frames = sum(1 for fr in cap.frames if needle in fr)
        in_streams = sum(1 for fl in flows if needle in fl)
        if in_frames or in_streams:
            problems.append("%s appears on the wire (%d frames, %d streams)"
                            % (what, in_frames, in_streams))
    # Positive controls: the capture saw the job's store traffic and its data.
    if not any(b"gyre/comm0/join/claim/" in fl for fl in flows):
        problems.append("the store's check-in keys were not seen: the capture missed the job")
    # Rank 0's share of a 1 MiB broadcast alone crosses the wire once per receiving rank
    # in a chain, or once per rank in a tree: at least MAX_BYTES.
    if payload < MAX_BYTES:
        problems.append("only %d payload bytes seen, less than the broadcast's %d"
                        % (payload, MAX_BYTES))
    pattern = root_payload()
    seen = sum(1 for fl in flows if pattern in fl)
    print("[packet_capture] %s: rank 0's payload pattern in %d streams" % (name, seen))
    if not encrypt and seen == 0:
        problems.append("rank 0's payload was not seen in plaintext: the capture missed the "
                        "data (or bench/check_pattern.h's uint8 pattern changed)")
    if encrypt and seen:
        problems.append("rank 0's payload is readable on the wire with GYRE_ENCRYPT=1")
    for p in problems:
        print("[packet_capture] %s: FAIL: %s" % (name, p))
    return not problems


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    bin_dir = os.path.abspath(sys.argv[1])
    if os.geteuid() != 0:
        skip("needs root (an AF_PACKET socket and a network namespace of its own)")
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            skip("needs %s (util-linux, iproute2: tools/setup.sh)" % tool)
    for prog in ("gyrerun", "gyre-store", "gyre-bench"):
        if not os.access(os.path.join(bin_dir, prog), os.X_OK):
            print("packet_capture: no %s in %s" % (prog, bin_dir), file=sys.stderr)
            return 2
    self_test()
    if os.environ.get(IN_NETNS) != "1":
        # Into a network namespace of its own, where lo carries this job's frames only.
        env = dict(os.environ, **{IN_NETNS: "1"})
        return subprocess.run(["unshare", "--net", sys.executable] + sys.argv, env=env,
                              timeout=2 * JOB_TIMEOUT_S + 30).returncode
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    secret = secrets.token_hex(32)  # as gyrerun makes one: 64 hex digits
    with tempfile.TemporaryDirectory() as tmp:
        token_file = os.path.join(tmp, "secret")
        with open(os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(secret + "\n")
        ok = check_run(bin_dir, token_file, secret, encrypt=False)
        ok = check_run(bin_dir, token_file, secret, encrypt=True) and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""What the torch benchmarks in bench/ share: byte counts with K/M/G suffixes, and a free
loopback port for a run's rendezvous."""
import socket


def parse_bytes(text):
    """'64M' -> 67108864; 'K', 'M', 'G' are powers of 1024, no suffix is bytes."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if text[-1:] in "KMG" else text) * scale


def free_port():
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

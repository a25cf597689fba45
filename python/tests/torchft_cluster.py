"""A torchft job on one host for torchft_test.py and bench/torchft_recovery.py: a
Lighthouse (in this process) and replica groups, each a process running
python/examples/torchft_train.py, that can be SIGKILLed and restarted. Each group's
per-step JSON records are collected by a reader thread."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                       "torchft_train.py")


class Lighthouse:
    def __init__(self, heartbeat_timeout_ms=1000, join_timeout_ms=2000):
        from torchft.coordination import LighthouseServer
        self.server = LighthouseServer(bind="[::]:0", min_replicas=1,
                                       join_timeout_ms=join_timeout_ms, quorum_tick_ms=20,
                                       heartbeat_timeout_ms=heartbeat_timeout_ms)
        port = self.server.address().rsplit(":", 1)[1]
        self.address = f"http://127.0.0.1:{port}"

    def shutdown(self):
        self.server.shutdown()


class Group:
    """One replica group's process; records: its JSON lines, as dicts, in order."""

    def __init__(self, replica, lighthouse, pg, logdir, steps=10000, seconds=120,
                 step_sleep=0.05, timeout=10):
        self.replica = replica
        self.records = []
        self.lock = threading.Lock()
        os.makedirs(logdir, exist_ok=True)
        self.log_path = os.path.join(logdir, f"replica{replica}-{time.time_ns()}.log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, EXAMPLE, "--replica", str(replica), "--lighthouse", lighthouse,
             "--pg", pg, "--steps", str(steps), "--seconds", str(seconds),
             "--step-sleep", str(step_sleep), "--timeout", str(timeout)],
            stdout=subprocess.PIPE, stderr=self._log, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.records.append(record)

    def snapshot(self):
        with self.lock:
            return list(self.records)

    def committed(self, since=0.0, n=None):
        """Committed records after wall time `since` (with n participants, if given)."""
        return [r for r in self.snapshot()
                if r["committed"] and r["t"] > since and (n is None or r["n"] == n)]

    def alive(self):
        return self.proc.poll() is None

    def kill(self):
        """SIGKILL; returns the wall time of the kill."""
        t = time.time()
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        return t

    def stop(self):
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._reader.join(timeout=5)
        self._log.close()

    def log_tail(self, lines=15):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""


def wait_for(predicate, timeout, poll=0.01):
    """Polls predicate() until true or timeout seconds pass; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(poll)

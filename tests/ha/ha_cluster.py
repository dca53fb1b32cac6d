"""A real etcd on loopback and trainsupd instances elected through it.

EtcdCluster starts N etcd members (free ports, data under a temporary
directory) and can kill and restart them; Instance is one trainsupd with
--etcd-endpoints and --instance, whose log lines are timestamped as they
arrive. Used by test_election.py and bench/takeover.py. Waits are on
conditions with deadlines (wait_for), never sleeps.
"""

import calendar
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout, what="the condition", interval=0.02):
    """predicate()'s first true value within `timeout` seconds, else AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def log_time(line):
    """The timestamp trainsupd's log line starts with (2026-12-01T22:53:41.757Z)."""
    m = re.match(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z", line)
    y, mo, d, h, mi, s, ms = (int(g) for g in m.groups())
    return calendar.timegm((y, mo, d, h, mi, s)) + ms / 1000


class EtcdCluster:
    def __init__(self, members=3, workdir=None):
        self.dir = tempfile.mkdtemp(prefix="trainsup-etcd-", dir=workdir)
        self.names = [f"e{i + 1}" for i in range(members)]
        self.client_ports = [free_port() for _ in self.names]
        self.peer_ports = [free_port() for _ in self.names]
        self.procs = [None] * members
        self.initial = ",".join(f"{n}=http://127.0.0.1:{p}"
                                for n, p in zip(self.names, self.peer_ports))
        for i in range(members):
            self.start(i, new=True)
        wait_for(self.healthy, 30, "etcd to have a leader", interval=0.1)

    @property
    def endpoints(self):
        return ",".join(f"127.0.0.1:{p}" for p in self.client_ports)

    def start(self, i, new=False):
        name, client, peer = self.names[i], self.client_ports[i], self.peer_ports[i]
        log = open(os.path.join(self.dir, f"{name}.log"), "a")
        self.procs[i] = subprocess.Popen(
            [ETCD, "--name", name, "--data-dir", os.path.join(self.dir, name),
             "--listen-client-urls", f"http://127.0.0.1:{client}",
             "--advertise-client-urls", f"http://127.0.0.1:{client}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", self.initial,
             "--initial-cluster-state", "new",
             "--initial-cluster-token", os.path.basename(self.dir)],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def kill(self, i):
        p = self.procs[i]
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()

    def healthy(self):
        for port in self.client_ports:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if b'"true"' in r.read():
                        return True
            except OSError:
                pass
        return False

    def close(self):
        for i in range(len(self.procs)):
            self.kill(i)
        shutil.rmtree(self.dir, ignore_errors=True)


class Instance:
    """One trainsupd in the election. Its stderr lines are kept with the
    time.monotonic() they arrived at (`seen`)."""

    def __init__(self, trainsupd, name, endpoints, ttl="2s", extra=(), listen="127.0.0.1:0"):
        self.name = name
        self.lines = []  # (monotonic time, line)
        self.lock = threading.Condition()
        self.proc = subprocess.Popen(
            [trainsupd, "--listen", listen, "--metrics-listen", "127.0.0.1:0",
             "--etcd-endpoints", endpoints, "--instance", name, "--etcd-lease-ttl", ttl,
             *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        line = self.wait_line(r"listening grpc=(\S+) metrics=(\S+)", 30)
        m = re.search(r"listening grpc=(\S+) metrics=(\S+)", line)
        self.grpc, self.metrics_address = m.group(1), m.group(2)

    def _read(self):
        for line in self.proc.stderr:
            with self.lock:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self.lock.notify_all()

    def seen(self, pattern, after=0.0):
        """The arrival time of the first line matching `pattern` after `after`, or None."""
        with self.lock:
            for t, line in self.lines:
                if t >= after and re.search(pattern, line):
                    return t
        return None

    def logged_at(self, pattern, after=0.0):
        """trainsupd's own timestamp (seconds since the epoch) of the first
        line matching `pattern` that arrived after `after`, or None."""
        with self.lock:
            for t, line in self.lines:
                if t >= after and re.search(pattern, line):
                    return log_time(line)
        return None

    def last_renewal_sent(self, before):
        """When (trainsupd's clock, seconds since the epoch) the last lease
        renewal logged before `before` (same clock) was sent: its debug
        line's timestamp less its round trip. Needs --verbose."""
        sent = None
        with self.lock:
            for _, line in self.lines:
                m = re.search(r"renewed: TTL \d+s, round trip ([\d.]+)ms", line)
                if m and log_time(line) < before:
                    sent = log_time(line) - float(m.group(1)) / 1000
        return sent

    def wait_line(self, pattern, timeout, after=0.0):
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                for t, line in self.lines:
                    if t >= after and re.search(pattern, line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f"{self.name}: no line /{pattern}/ in {timeout}s:\n"
                                         + self.log())
                self.lock.wait(left)

    def led_at(self, after, timeout=5.0):
        """The arrival time of its first "leading (epoch" line after `after`.
        It may come a moment after the trainsup_leader metric turns 1 (the
        metric is set as it takes over, the line logged once it has): waits
        for it, up to `timeout`."""
        self.wait_line(r"leading \(epoch", timeout, after=after)
        return self.seen(r"leading \(epoch", after=after)

    def log(self):
        with self.lock:
            return "\n".join(line for _, line in self.lines[-40:])

    def metrics(self):
        """trainsup_leader*, trainsup_etcd* and trainsup_fenced* samples, or {} when unreachable."""
        try:
            with urllib.request.urlopen(f"http://{self.metrics_address}/metrics",
                                        timeout=1) as r:
                text = r.read().decode()
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            m = re.match(r"(trainsup_(?:leader|etcd|fenced)\w*) (\S+)$", line)
            if m:
                out[m.group(1)] = float(m.group(2))
        return out

    def leads(self):
        return self.metrics().get("trainsup_leader") == 1

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(timeout=5)
        self.proc.stderr.close()

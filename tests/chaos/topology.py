"""The system under test: one durable Redis, two brokers each behind its own
Redis proxy (the second under libfaketime), and the fenced resource, all on
loopback in one temporary directory. Built on tests/e2e/lbtest.py."""

import os
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "e2e"))
import lbtest  # noqa: E402

from proxy import Proxy  # noqa: E402
from fenced import FencedResource  # noqa: E402

AOF = ["--appendonly", "yes", "--appendfsync", "always"]
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
LEASE_MS = 1000
BROKER_CONF = {
    # command_timeout_ms 2500 lets a reply that took longer than a 500 ms
    # or 1000 ms lease still reach the broker, so the late-grant path is
    # exercised (by proxy delays up to 1 s each way, Redis stalls < 2 s).
    # trust_ms 1000: a Redis restart (a new incarnation) grants nothing for
    # about a second, within the liveness window (nemesis.LIVENESS_S).
    "redis": {"command_timeout_ms": 2500, "connect_timeout_ms": 500,
              "reconnect_min_ms": 50, "reconnect_max_ms": 1000,
              "trust_ms": 1000},
    "locks": {"lease_ms": LEASE_MS, "retry_min_ms": 5, "retry_max_ms": 200},
    "log": {"level": "info"},
}
BROKEN_MARK = "BROKEN ON PURPOSE (LOCKBROKER_CHAOS_FAULT=%s)"

# lbtest.Broker takes its binary and wrapper from module globals; brokers
# (re)started from two threads must not see each other's.
_launch = threading.Lock()


class ChaosBroker(lbtest.Broker):
    """An lbtest.Broker with its own binary and environment (the variant
    switch, libfaketime), kept across kill -9 and restart."""

    def __init__(self, tmpdir, redis_port, binary, env, name):
        self.binary = binary
        self.env = env
        super().__init__(tmpdir, redis_port, BROKER_CONF, name=name)

    def start(self, *args, **kwargs):
        """Start through `env`, which execs the daemon: same pid."""
        with _launch:
            saved = lbtest.LOCKBROKERD, lbtest.WRAPPER
            lbtest.LOCKBROKERD = self.binary
            lbtest.WRAPPER = ["env"] + ["%s=%s" % kv for kv in
                                        sorted(self.env.items())]
            try:
                return super().start(*args, **kwargs)
            finally:
                lbtest.LOCKBROKERD, lbtest.WRAPPER = saved

    @property
    def pid(self):
        """The daemon's pid, or None while it is down."""
        return self.proc.pid if self.proc and self.proc.poll() is None \
            else None

    def signal(self, sig):
        """Send sig if the daemon runs."""
        if self.pid:
            os.kill(self.pid, sig)

    def resources(self):
        """(open fds minus connected clients, RSS in KiB), read while one
        INFO connection of ours is open, so both counts include it."""
        c = lbtest.Client(self.port, timeout=3)
        try:
            clients = int(c.info()["clients"])
            fds = len(os.listdir("/proc/%d/fd" % self.pid))
        finally:
            c.close()
        with open("/proc/%d/status" % self.pid) as f:
            rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS"))
        return fds - clients, rss

    def stats(self):
        """The INFO counters, or {} when the broker cannot answer."""
        try:
            c = lbtest.Client(self.port, timeout=2)
            try:
                return c.info()
            finally:
                c.close()
        except (OSError, ValueError):
            return {}


class Topology:
    """Everything the run needs, started in order and torn down in full."""

    def __init__(self, binary, variant="none", seed=0):
        self.tmpdir = tempfile.mkdtemp(prefix="lbchaos-")
        self.variant = variant
        self.clock_file = os.path.join(self.tmpdir, "faketime")
        self.redis = self.proxies = self.resource = None
        self.brokers = []
        try:
            self._start(binary, seed)
        except BaseException:
            self.close()
            raise

    def _start(self, binary, seed):
        """Redis, then the proxies, the brokers and the resource."""
        self.set_clock("+0")
        self.redis = lbtest.Redis(self.tmpdir, extra=AOF)
        self.redis.own_port = False     # a restart keeps the port
        self.proxies = [Proxy(self.redis.port, seed + i, "proxy-b%d" % i)
                        for i in range(2)]
        base = {"LOCKBROKER_CHAOS_FAULT": self.variant}
        # DONT_FAKE_MONOTONIC: libfaketime moves CLOCK_MONOTONIC with the
        # wall clock otherwise, which no real clock jump does.
        faked = dict(base, LD_PRELOAD=FAKETIME_LIB, FAKETIME_NO_CACHE="1",
                     FAKETIME_TIMESTAMP_FILE=self.clock_file,
                     DONT_FAKE_MONOTONIC="1")
        for i, env in enumerate((base, faked)):
            self.brokers.append(ChaosBroker(
                self.tmpdir, self.proxies[i].port, binary, env, "b%d" % i))
        self.resource = FencedResource()

    def set_clock(self, offset):
        """Move the faked broker's wall clock to real time + offset."""
        tmp = self.clock_file + ".new"
        with open(tmp, "w") as f:
            f.write(offset + "\n")
        os.replace(tmp, self.clock_file)

    def variant_active(self):
        """Whether every broker logged that it runs the broken variant (a
        build without -Dchaos_faults=true ignores the variable)."""
        mark = BROKEN_MARK % self.variant
        return all(mark in b.logtext() for b in self.brokers)

    def broker_ports(self):
        """Client ports, stable across restarts."""
        return [b.port for b in self.brokers]

    def close(self, keep=False):
        """Wake and kill everything we started, then remove the temp dir
        (unless asked to keep it for a post-mortem)."""
        for b in self.brokers:
            if b.pid:
                b.signal(signal.SIGCONT)
                b.proc.kill()
                b.proc.wait()
                b.logf.close()
        if self.redis and self.redis.proc and self.redis.proc.poll() is None:
            self.redis.proc.send_signal(signal.SIGCONT)
            self.redis.kill()
        for p in self.proxies or ():
            p.stop()
        if self.resource:
            self.resource.stop()
        if keep:
            print("chaos: kept %s" % self.tmpdir)
        else:
            shutil.rmtree(self.tmpdir, ignore_errors=True)

    def stop_brokers(self):
        """SIGTERM both brokers; their exit codes (0 = clean)."""
        codes = {}
        for b in self.brokers:
            if b.pid:
                b.signal(signal.SIGCONT)
                codes[b.name] = b.stop(timeout=10)
        return codes

    def wait_quiet(self, broker, baseline_fds, timeout=5.0):
        """Resources once fds settle at the baseline (or the last reading):
        closes and Redis reconnects finish asynchronously."""
        end = time.monotonic() + timeout
        while True:
            fds, rss = broker.resources()
            if fds == baseline_fds or time.monotonic() > end:
                return fds, rss
            time.sleep(0.2)

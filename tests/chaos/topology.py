"""The system under test: one durable Redis (or, with sentinel, a master,
a replica and three Sentinels), two brokers each behind its own Redis proxy
(the second under libfaketime), and the fenced resource, all on loopback in
one temporary directory; or, with cluster, a Redis Cluster of three masters
with a replica each and two brokers connected to it directly. Built on
tests/e2e/lbtest.py and tests/e2e/lbcluster.py."""

import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "e2e"))
import lbtest  # noqa: E402
from lbcluster import Cluster  # noqa: E402

from proxy import (Proxy, ProxyGroup, ReplicationLink,  # noqa: E402
                   SentinelRelay)
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
# The Sentinel topology: three Sentinels, quorum 2, a master down after
# 1 s of no answer; a failover then takes about 1-3 s.
MASTER_NAME = "mymaster"
SENTINELS = 3
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000
# The cluster topology: three masters with a replica each; a master that
# answers nobody for cluster-node-timeout is failed over (its replica
# promoted about a second later). A master down stops only its own slots
# (cluster-require-full-coverage no, as docs/operations.md advises).
CLUSTER_MASTERS = 3
NODE_TIMEOUT_MS = 1500
CLUSTER_ARGS = ("--cluster-require-full-coverage", "no")
# What no log of the cluster topology may say: a script that touched a key
# it did not declare, during a migration ("Script attempted to access a
# non local key"), or a request whose keys span slots.
BAD_LOG_TEXTS = ("non local key", "CROSSSLOT")

# lbtest.Broker takes its binary and wrapper from module globals; brokers
# (re)started from two threads must not see each other's.
_launch = threading.Lock()


class ChaosBroker(lbtest.Broker):
    """An lbtest.Broker with its own binary and environment (the variant
    switch, libfaketime), kept across kill -9 and restart."""

    def __init__(self, tmpdir, redis_port, binary, env, name, redis=None):
        """redis: more redis.* keys (the Sentinel topology's)."""
        self.binary = binary
        self.launch_env = env  # lbtest.Broker's own env is the daemon's
        conf = dict(BROKER_CONF, redis=dict(BROKER_CONF["redis"],
                                            **(redis or {})))
        super().__init__(tmpdir, redis_port, conf, name=name)

    def start(self, *args, **kwargs):
        """Start through `env`, which execs the daemon: same pid."""
        with _launch:
            saved = lbtest.LOCKBROKERD, lbtest.WRAPPER
            lbtest.LOCKBROKERD = self.binary
            lbtest.WRAPPER = ["env"] + ["%s=%s" % kv for kv in
                                        sorted(self.launch_env.items())]
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

    def resources(self, redis_ports=None):
        """(open fds minus connected clients, RSS in KiB), read while one
        INFO connection of ours is open, so both counts include it.
        redis_ports: a cluster's node ports, whose connections are not
        counted either (the broker keeps one to each node it has used as a
        master, and the subscriber's: the cluster's changes, not a leak,
        set their number; a third value, their count)."""
        c = lbtest.Client(self.port, timeout=3)
        try:
            clients = int(c.info()["clients"])
            fds = len(os.listdir("/proc/%d/fd" % self.pid))
            conns = None
            if redis_ports is not None:
                conns = sum(int(p.rsplit(":", 1)[1]) in redis_ports
                            for p in (x.split(">")[1]
                                      for x in self.peers()))
                fds -= conns
        finally:
            c.close()
        with open("/proc/%d/status" % self.pid) as f:
            rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS"))
        if redis_ports is not None:
            return fds - clients, rss, conns
        return fds - clients, rss

    def peers(self):
        """The daemon's TCP connections, "local>peer" (ss), for a report
        whose fds did not come back to the baseline."""
        try:
            out = subprocess.run(["ss", "-tnp"], capture_output=True,
                                 text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError) as e:
            return ["ss: %r" % (e,)]
        return sorted(">".join(l.split()[3:5]) for l in out.splitlines()
                      if "pid=%d," % self.pid in l)

    def diagnose(self):
        """What a broker that does not answer is doing, for the report:
        its state, where the kernel has it and how much CPU it took over
        half a second (a spin or a block), then its stack when gdb is
        there; "" when it answers INFO within a second."""
        pid = self.pid
        if not pid:
            return ""
        try:
            c = lbtest.Client(self.port, timeout=1)
            try:
                c.info()
                return ""
            finally:
                c.close()
        except (OSError, ValueError):
            pass
        out = []
        try:
            def cpu():
                with open("/proc/%d/stat" % pid) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                return fields[0], int(fields[11]) + int(fields[12])
            state, t0 = cpu()
            time.sleep(0.5)
            _, t1 = cpu()
            with open("/proc/%d/wchan" % pid) as f:
                wchan = f.read()
            with open("/proc/%d/syscall" % pid) as f:
                syscall = f.read().split()[:1]
            out.append("state %s, wchan %s, syscall %s, %d CPU ticks in "
                       "0.5 s" % (state, wchan or "-", syscall, t1 - t0))
        except OSError as e:
            out.append("cannot read /proc/%d: %s" % (pid, e))
        if shutil.which("gdb"):
            try:
                bt = subprocess.run(
                    ["gdb", "-p", str(pid), "-batch", "-ex", "bt"],
                    capture_output=True, text=True, timeout=60).stdout
                out += [l for l in bt.splitlines() if l.startswith("#")]
            except (OSError, subprocess.SubprocessError) as e:
                out.append("gdb: %r" % e)
        try:
            with open(self.log, errors="replace") as f:
                out += ["log: " + l.rstrip() for l in f.readlines()[-20:]]
        except OSError:
            pass
        return "\n".join(out)

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

    def __init__(self, binary, variant="none", seed=0, sentinel=False,
                 brokers=2, cluster=False):
        """sentinel: a master and a replica watched by three Sentinels,
        which the brokers ask for the master (redis.sentinels); cluster: a
        Redis Cluster (self.cluster, lbcluster's), which the brokers know
        by its masters (redis.cluster), no proxy between; brokers: how
        many (b1 runs under libfaketime, the others on the real clock)."""
        self.nbrokers = brokers
        self.tmpdir = tempfile.mkdtemp(prefix="lbchaos-")
        self.variant = variant
        self.sentinel = sentinel
        self.cluster = None
        self.want_cluster = cluster
        self.clock_file = os.path.join(self.tmpdir, "faketime")
        # Every Redis node's wall clock, moved together by
        # set_redis_clock (tests/shim/clockshift.c).
        self.redis_clock = os.path.join(self.tmpdir, "redis-clock")
        self.redis_offset_ms = 0
        self._redis = self.proxies = self.resource = None
        self.nodes, self.links, self.sentinels, self.relays = [], [], [], []
        self.brokers = []
        try:
            self._start(binary, seed)
        except BaseException:
            self.close()
            raise

    @property
    def redis(self):
        """The Redis the brokers use: with Sentinel, the node the
        Sentinels name master now (the first node if none answers)."""
        if not self.sentinel:
            return self._redis
        m = self.master_index()
        return self.nodes[m if m is not None else 0]

    def _start(self, binary, seed):
        """Redis, then the proxies, the brokers and the resource."""
        self.set_clock("+0")
        redis_conf = [{} for _ in range(self.nbrokers)]
        if self.want_cluster:
            self.cluster = Cluster(self.tmpdir, CLUSTER_MASTERS, 1,
                                   NODE_TIMEOUT_MS, extra=CLUSTER_ARGS)
            redis_conf = [{"cluster": self.cluster.seeds()}] * self.nbrokers
            self.proxies = []
        elif self.sentinel:
            self._start_sentinel(seed)
            redis_conf = [{"sentinels": ["127.0.0.1:%d" % r.port
                                         for r in rs],
                           "master_name": MASTER_NAME}
                          for rs in self.relays]
        else:
            self._redis = lbtest.Redis(self.tmpdir, extra=AOF,
                                       clock=self.redis_clock)
            self._redis.own_port = False     # a restart keeps the port
            self.proxies = [Proxy(self._redis.port, seed + i,
                                  "proxy-b%d" % i)
                            for i in range(self.nbrokers)]
        base = {"LOCKBROKER_CHAOS_FAULT": self.variant}
        # DONT_FAKE_MONOTONIC: libfaketime moves CLOCK_MONOTONIC with the
        # wall clock otherwise, which no real clock jump does.
        faked = dict(base, LD_PRELOAD=FAKETIME_LIB, FAKETIME_NO_CACHE="1",
                     FAKETIME_TIMESTAMP_FILE=self.clock_file,
                     DONT_FAKE_MONOTONIC="1")
        for i in range(self.nbrokers):
            port = self.cluster.masters()[0] if self.cluster else \
                self.proxies[i].port
            self.brokers.append(ChaosBroker(
                self.tmpdir, port, binary,
                faked if i == 1 else base, "b%d" % i, redis_conf[i]))
        self.resource = FencedResource()

    # The Sentinel topology. Node k listens on its own port, and everyone
    # else reaches it through ports that stand for it: links[k] (its
    # replicas and the Sentinels: the node announces that port, so the
    # Sentinels name it as the master's address) and each broker's own
    # proxy to it (the broker's Sentinel relays turn links[k]'s port into
    # it). So a broker's link faults act on its path to whichever node is
    # master, and the replica's stream can be dropped on its way.

    def _start_sentinel(self, seed):
        """Two nodes (n0 master, n1 its replica through links[0]), three
        Sentinels, and per broker its proxies and Sentinel relays."""
        ports = [lbtest.free_port() for _ in range(2)]
        self.links = [ReplicationLink(p, seed + 10 + k, "link-n%d" % k)
                      for k, p in enumerate(ports)]
        for k, p in enumerate(ports):
            d = os.path.join(self.tmpdir, "n%d" % k)
            os.mkdir(d)
            node = lbtest.Redis(d, port=p, extra=self._node_args(
                k, 0 if k else None), clock=self.redis_clock)
            node.name = "n%d" % k
            self.nodes.append(node)
        self.wait_replica(1, 15)
        # Its first replica gave the master a new replication id: the
        # marker seeded at its start is made again with it, or the first
        # grants would wait a grace period.
        self.nodes[0].seed_incarnation()
        for j in range(SENTINELS):
            self.sentinels.append(self._sentinel(j))
        self._wait_sentinels(20)
        self.proxies = [ProxyGroup([Proxy(p, seed + 2 * i + k,
                                          "proxy-b%d-n%d" % (i, k))
                                    for k, p in enumerate(ports)])
                        for i in range(self.nbrokers)]
        self.relays = [[SentinelRelay(
            sp, {self.links[k].port: self.proxies[i].members[k].port
                 for k in range(2)}, seed, "sentinel-relay-b%d-%d" % (i, j))
            for j, (sp, _) in enumerate(self.sentinels)]
            for i in range(self.nbrokers)]

    def _node_args(self, k, master=None):
        """redis-server arguments of node k, a replica of node master
        (through its link) unless None."""
        args = AOF + ["--replica-announce-ip", "127.0.0.1",
                      "--replica-announce-port", str(self.links[k].port)]
        if master is not None:
            args += ["--replicaof", "127.0.0.1", str(self.links[master].port)]
        return args

    def _sentinel(self, j):
        """Start Sentinel j; (its port, its process)."""
        port = lbtest.free_port()
        d = os.path.join(self.tmpdir, "s%d" % j)
        os.mkdir(d)
        conf = os.path.join(d, "sentinel.conf")
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndir %s\n"
                    "sentinel monitor %s 127.0.0.1 %d 2\n"
                    "sentinel down-after-milliseconds %s %d\n"
                    "sentinel failover-timeout %s %d\n" % (
                        port, d, MASTER_NAME, self.links[0].port,
                        MASTER_NAME, DOWN_AFTER_MS, MASTER_NAME,
                        FAILOVER_TIMEOUT_MS))
        proc = subprocess.Popen(
            [lbtest.REDIS_SERVER, conf, "--sentinel", "--logfile",
             os.path.join(d, "sentinel.log")], stdout=subprocess.DEVNULL)
        return port, proc

    def _ask_sentinel(self, port, *args):
        """One Sentinel's answer, or None."""
        try:
            r = lbtest.Resp(port)
            try:
                return r(*args)
            finally:
                r.close()
        except (OSError, ValueError, AssertionError):
            return None

    def _wait_sentinels(self, timeout):
        """Until every Sentinel knows the replica and the other two (a
        failover needs two to agree, and one elected by two)."""
        def ready():
            for port, _ in self.sentinels:
                if not self._ask_sentinel(port, "SENTINEL", "replicas",
                                          MASTER_NAME):
                    return False
                s = self._ask_sentinel(port, "SENTINEL", "sentinels",
                                       MASTER_NAME)
                if not s or len(s) < SENTINELS - 1:
                    return False
            return True
        lbtest.wait_for(ready, timeout, 0.2)

    def master_index(self, all_agree=False):
        """The node the Sentinels name master (the first that answers; with
        all_agree, only if every Sentinel names it), or None."""
        seen = set()
        for port, _ in self.sentinels:
            a = self._ask_sentinel(port, "SENTINEL",
                                   "get-master-addr-by-name", MASTER_NAME)
            k = next((k for k, l in enumerate(self.links)
                      if isinstance(a, list) and len(a) == 2 and
                      a[1] == str(l.port)), None)
            if not all_agree:
                if k is not None:
                    return k
                continue
            seen.add(k)
        return seen.pop() if len(seen) == 1 else None

    def wait_replica(self, k, timeout):
        """Until node k replicates its master (link up, in sync)."""
        lbtest.wait_for(lambda: "master_link_status:up" in
                        self._node_info(k), timeout, 0.1)

    def _node_info(self, k):
        """INFO replication of node k, or ""."""
        try:
            return self.nodes[k]("INFO", "replication") or ""
        except (OSError, ValueError, AssertionError):
            return ""

    def restart_redis(self, node):
        """Start a killed Redis again on its port: with Sentinel, as a
        replica of the node the Sentinels name master now, if another."""
        if self.sentinel:
            k = self.nodes.index(node)
            m = self.master_index()
            node.extra = self._node_args(k, m if m not in (None, k)
                                         else None)
        node.start()

    def resources(self, broker):
        """broker.resources(), without its connections to a cluster's
        nodes (then a third value: how many)."""
        return broker.resources(set(self.cluster.nodes) if self.cluster
                                else None)

    def bad_log_lines(self):
        """Every line of a broker's or a cluster node's log that says one
        of BAD_LOG_TEXTS: [(whose log, the line)]."""
        texts = [(b.name, b.logtext()) for b in self.brokers]
        if self.cluster:
            for p, n in self.cluster.nodes.items():
                try:
                    with open(os.path.join(n.tmpdir, "redis.log"),
                              errors="replace") as f:
                        texts.append(("node %d" % p, f.read()))
                except OSError:
                    pass
        return [(who, line.strip()[:300]) for who, text in texts
                for line in text.splitlines()
                if any(bad in line for bad in BAD_LOG_TEXTS)]

    def step_redis_clock(self, ms):
        """Step every Redis node's wall clock by ms (forward if
        positive), as NTP or an operator would."""
        self.redis_offset_ms += ms
        fd = os.open(self.redis_clock, os.O_WRONLY)
        try:
            os.pwrite(fd, struct.pack("q", self.redis_offset_ms), 0)
        finally:
            os.close(fd)

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
        for r in [self._redis] + self.nodes:
            if r and r.proc and r.proc.poll() is None:
                r.proc.send_signal(signal.SIGCONT)
                r.kill()
        for _, proc in self.sentinels:
            proc.kill()
            proc.wait()
        if self.cluster:
            if keep:    # the nodes' logs beside the brokers'
                for p, n in self.cluster.nodes.items():
                    try:
                        shutil.copy(os.path.join(n.tmpdir, "redis.log"),
                                    os.path.join(self.tmpdir,
                                                 "redis-%d.log" % p))
                    except OSError:
                        pass
            self.cluster.stop()
        for p in list(self.proxies or ()) + self.links + [
                r for rs in self.relays for r in rs]:
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
                try:
                    codes[b.name] = b.stop(timeout=10)
                except subprocess.TimeoutExpired:
                    codes[b.name] = "no exit within 10 s: " + b.diagnose()
                    b.proc.kill()
                    b.proc.wait()
                    b.proc = None
                    b.logf.close()
        return codes

    def wait_quiet(self, broker, baseline_fds, timeout=5.0):
        """Resources once fds settle at the baseline (or the last reading):
        closes and Redis reconnects finish asynchronously."""
        end = time.monotonic() + timeout
        while True:
            fds, rss = self.resources(broker)[:2]
            if fds == baseline_fds or time.monotonic() > end:
                return fds, rss
            time.sleep(0.2)

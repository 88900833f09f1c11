"""Redis Sentinel: the broker finds the master through a Sentinel and
follows it when the Sentinel fails over to the replica."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from lbtest import (REDIS_SERVER, Broker, Redis, Resp, free_port, main,
                    holds_for, wait_for, wait_until)
from test_told import drain
from test_truth import locks_of


def master_and_replica(test, prefix, link=False):
    """test.tmpdir, test.master and test.replica (replicating), all
    removed after the test; with link, the replica reaches its master
    through test.link (a Link)."""
    test.tmpdir = tempfile.mkdtemp(prefix=prefix)
    test.addCleanup(shutil.rmtree, test.tmpdir, ignore_errors=True)
    mdir, rdir = (os.path.join(test.tmpdir, d) for d in ("m", "r"))
    os.mkdir(mdir)
    os.mkdir(rdir)
    test.master = Redis(mdir)
    test.addCleanup(test.master.kill)
    port = test.master.port
    if link:
        test.link = Link(port)
        test.addCleanup(test.link.close)
        port = test.link.port
    test.replica = Redis(rdir, extra=["--replicaof", "127.0.0.1",
                                      str(port)])
    test.addCleanup(test.replica.kill)
    wait_for(lambda: "master_link_status:up" in
             test.replica("INFO", "replication"), 10)
    # A master's first replica gives it a new replication id: its seeded
    # marker is made again with it (a broker would make a new
    # incarnation otherwise, and wait its grace period).
    test.master.seed_incarnation()


def start_sentinel(test):
    """test.sport and test.sentinel: one Sentinel watching test.master
    (fails over after 300 ms down), stopped after the test."""
    test.sport = free_port()
    conf = os.path.join(test.tmpdir, "sentinel.conf")
    with open(conf, "w") as f:
        f.write("port %d\nbind 127.0.0.1\ndir %s\n"
                "sentinel monitor mymaster 127.0.0.1 %d 1\n"
                "sentinel down-after-milliseconds mymaster 300\n"
                "sentinel failover-timeout mymaster 3000\n"
                % (test.sport, test.tmpdir, test.master.port))
    test.sentinel = subprocess.Popen(
        [REDIS_SERVER, conf, "--sentinel", "--logfile",
         os.path.join(test.tmpdir, "sentinel.log")],
        stdout=subprocess.DEVNULL)
    test.addCleanup(test.sentinel.wait)
    test.addCleanup(test.sentinel.kill)

    def replicas():
        r = Resp(test.sport)
        try:
            return r("SENTINEL", "replicas", "mymaster")
        finally:
            r.close()
    wait_for(replicas, 15)


class Sentinel(unittest.TestCase):

    def setUp(self):
        master_and_replica(self, "lbsentinel-")
        start_sentinel(self)
        redis = {"sentinels": ["127.0.0.1:%d" % self.sport],
                 "master_name": "mymaster", "reconnect_min_ms": 50,
                 "reconnect_max_ms": 500, "trust_ms": 1000}
        self.broker = Broker(self.tmpdir, self.master.port,
                             {"redis": redis})
        self.addCleanup(self._stop_broker, self.broker)
        self.waiting = Broker(self.tmpdir, self.master.port,
                              {"redis": dict(redis, wait_replicas=1)},
                              name="waiting")
        self.addCleanup(self._stop_broker, self.waiting)

    def _stop_broker(self, broker):
        self.assertEqual(broker.stop(), 0)

    def test_follows_failover(self):
        c, w = self.broker.client(), self.waiting.client()
        for b in (self.broker, self.waiting):
            self.assertIn("master mymaster is at 127.0.0.1:%d (from "
                          "Sentinel)" % self.master.port, b.logtext())
        # wait_replicas 1: the grant is on the replica before the OK.
        reply = w.cmd("ACQUIRE a")
        f1 = int(reply.split()[1])
        self.assertEqual(self.replica("GET", "lockbroker:{a}").split()[0],
                         reply.split()[3])
        self.assertEqual(w.cmd("RELEASE a"), "OK")
        self.assertEqual(self.master("WAIT", 1, 1000), 1)
        self.master.kill()
        for b in (self.broker, self.waiting):
            wait_for(lambda: "master mymaster is at 127.0.0.1:%d (switched)"
                     % self.replica.port in b.logtext(), 20)

        def granted():
            reply = c.cmd("ACQUIRE a WAIT 0")
            return reply if reply.startswith("OK ") else None
        reply = wait_for(granted, 10, 0.05)
        self.assertGreater(int(reply.split()[1]), f1)
        self.assertEqual(self.replica("GET", "lockbroker:{a}").split()[0],
                         reply.split()[3])
        self.assertEqual(c.cmd("RELEASE a"), "OK")
        # The new master has no replica: a grant cannot reach one, so it
        # is released and refused.
        reply = wait_for(lambda: w.cmd("ACQUIRE b WAIT 0").startswith(
            "ERR UNAVAILABLE the grant did not reach"), 10, 0.05)
        self.assertIn("lock b: granted, but 0 of 1 replicas have it; "
                      "released", self.waiting.logtext())
        wait_for(lambda: self.replica("EXISTS", "lockbroker:{b}") == 0, 2)
        c.close()
        w.close()


class Link(threading.Thread):
    """A TCP forwarder between a replica and its master; frozen, it drops
    what the master sends, as a lagging link loses it: the replica then
    misses writes it never learns of."""

    def __init__(self, upstream_port):
        super().__init__(daemon=True)
        self.upstream = upstream_port
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(4)
        self.port = self.lsock.getsockname()[1]
        self.frozen = False
        self.start()

    def run(self):
        while True:
            try:
                down, _ = self.lsock.accept()
                up = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                return
            for src, dst, drop in ((down, up, False), (up, down, True)):
                threading.Thread(target=self.pump, args=(src, dst, drop),
                                 daemon=True).start()

    def pump(self, src, dst, drop):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if not (drop and self.frozen):
                    dst.sendall(data)
        except OSError:
            pass
        for x in (src, dst):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.lsock.close()


class LaggingFailover(unittest.TestCase):
    """Sentinel promotes a replica that missed the last grant (issue 15's
    first row): nobody else is granted that name while its holder has not
    been told EVENT LOST, and the new grant's fence is higher."""

    def setUp(self):
        master_and_replica(self, "lblag-", link=True)
        start_sentinel(self)
        self.broker = Broker(self.tmpdir, self.master.port, {"redis": {
            "sentinels": ["127.0.0.1:%d" % self.sport],
            "master_name": "mymaster", "reconnect_min_ms": 50,
            "reconnect_max_ms": 300, "trust_ms": 3000}})
        self.addCleanup(lambda: self.assertEqual(self.broker.stop(), 0))

    def test_promoted_replica_missed_a_grant(self):
        a, b, c = (self.broker.client() for _ in range(3))
        for x in (a, b, c):
            self.addCleanup(x.close)
        old = a.cmd("ACQUIRE kept TTL 60000")
        self.assertRegex(old, r"^OK ")
        self.assertEqual(self.master("WAIT", 1, 2000), 1)
        self.link.frozen = True
        lag = b.cmd("ACQUIRE lag TTL 60000")
        self.assertRegex(lag, r"^OK ")
        holds_for(lambda: self.replica("GET", "lockbroker:{lag}") is None,
                  0.2, "the grant kept from the frozen replica")
        self.master.kill()
        wait_for(lambda: "(switched)" in self.broker.logtext(), 20)
        # Refused while the broker learns of the new master's incarnation
        # and its grace period runs; then either b has it back (TIMEOUT)
        # or b was told, and c gets it with a higher fence.
        r = wait_until(
            lambda: (lambda r: None if r.startswith("ERR UNAVAILABLE")
                     else r)(c.cmd("ACQUIRE lag WAIT 0")),
            15, "lag answered past ERR UNAVAILABLE")
        self.assertIn(r.split()[0], ("OK", "TIMEOUT"), r)
        got = r if r.startswith("OK ") else None
        b.sock.settimeout(0.5)
        told = []
        try:
            while True:
                told.append(b.line())
        except OSError:
            pass
        if got is not None:
            self.assertIn("EVENT LOST lag %s unavailable" % lag.split()[1],
                          told)
            self.assertGreater(int(got.split()[1]), int(lag.split()[1]))
        else:  # put back in the grace period: b keeps it
            self.assertEqual(told, [])
            self.assertIn("LOCK lag %s" % lag.split()[1],
                          " ".join(b.until_end("LOCKS")))


class MinReplicas(unittest.TestCase):
    """min-replicas-to-write on the master (the split-brain guard): a
    master cut off from its replicas refuses writes after max-lag, the
    incarnation beat (a script that may write) with them, so its brokers stop
    trusting their holds; and a new incarnation's grace period includes
    max-lag."""

    def setUp(self):
        master_and_replica(self, "lbminrep-")
        self.master("CONFIG", "SET", "min-replicas-to-write", "1")
        self.master("CONFIG", "SET", "min-replicas-max-lag", "1")
        self.broker = Broker(self.tmpdir, self.master.port,
                             {"redis": {"trust_ms": 600}})
        self.addCleanup(lambda: self.assertEqual(self.broker.stop(), 0))
        self.addCleanup(self.replica.proc.send_signal, signal.SIGCONT)

    def test_cut_off_master_stops_vouching(self):
        c = self.broker.client()
        self.addCleanup(c.close)
        fence = c.cmd("ACQUIRE m TTL 60000").split()[1]
        self.assertNotIn("min-replicas-to-write 0", self.broker.logtext())
        self.replica.proc.send_signal(signal.SIGSTOP)
        start = time.monotonic()
        c.sock.settimeout(6)
        self.assertEqual(c.line(), "EVENT LOST m %s unavailable" % fence)
        # max-lag (1 s, counted by Redis in whole seconds) + trust_ms
        self.assertLess(time.monotonic() - start, 1 + 1 + 0.6 + 1)
        self.replica.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: self.master("SET", "probe", "1") == "OK", 10, 0.1)
        self.assertEqual(self.master("FLUSHALL"), "OK")
        r = c.cmd("ACQUIRE x WAIT 0")
        while "not checked yet" in r:
            r = c.cmd("ACQUIRE x WAIT 0")
        m = __import__("re").search(r"no grant for (\d+) ms", r)
        self.assertIsNotNone(m, r)
        # trust_ms 600 stretched by the drift (613), clock_step_ms (1000),
        # and max-lag 1 s + 2 s: a master cut off from its replica takes
        # writes for up to 1.9 s with max-lag 1 (its lag is whole seconds
        # since the replica's last ACK, and counted once a second).
        self.assertGreater(int(m.group(1)), 613 + 1000 + 3000 - 500)


class ReplicatedRenewals(unittest.TestCase):
    """redis.wait_replicas: a renewal and an EXTEND count only once
    replicated, as a grant does (issue 15): with the replica stopped, a
    session holder is told EVENT LOST when its last replicated lease ends,
    and an EXTEND answers ERR UNAVAILABLE."""

    def setUp(self):
        master_and_replica(self, "lbreplica-")
        self.broker = Broker(self.tmpdir, self.master.port,
                             {"redis": {"wait_replicas": 1,
                                        "command_timeout_ms": 300},
                              "locks": {"lease_ms": 900}})
        self.addCleanup(lambda: self.assertEqual(self.broker.stop(), 0))

    def test_unreplicated_renewal_is_not_trusted(self):
        c = self.broker.client()
        self.addCleanup(c.close)
        e = self.broker.client()
        self.addCleanup(e.close)
        # With the replica running, a grant whose WAIT it did not answer
        # within the 300 ms command timeout (a loaded machine: seen under
        # ASan) is released and refused: asked again until granted.
        for client, req in ((c, "ACQUIRE s WAIT 0"),
                            (e, "ACQUIRE x TTL 5000 WAIT 0")):
            wait_until(lambda: client.cmd(req).startswith("OK "), 10,
                       "%r granted" % req)
        os.kill(self.replica.proc.pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            self.assertEqual(
                e.cmd("EXTEND x 60000"), "ERR UNAVAILABLE the extension "
                "did not reach redis.wait_replicas replicas in time")
            # Renewals reach the master but not the replica: the lease
            # the holder may trust ends within one lease of the stop.
            c.sock.settimeout(5)
            self.assertRegex(c.line(), r"^EVENT LOST s \d+ (expired|unavailable)$")
            self.assertLess(time.monotonic() - start, 0.9 + 0.6)
        finally:
            os.kill(self.replica.proc.pid, signal.SIGCONT)


class FrozenMaster(unittest.TestCase):
    """The old master frozen (SIGSTOP), not killed, while Sentinel
    promotes the replica: the broker leaves it at the switch, its
    requests there answered as of unknown outcome, and grants again
    from the new master within the grace period (it used to wait on the
    frozen one's replies, answering ERR UNAVAILABLE to everything)."""

    def setUp(self):
        master_and_replica(self, "lbfrozen-")
        start_sentinel(self)
        self.broker = Broker(self.tmpdir, self.master.port,
                             {"redis": {"sentinels":
                                        ["127.0.0.1:%d" % self.sport],
                                        "master_name": "mymaster",
                                        "reconnect_min_ms": 50,
                                        "reconnect_max_ms": 500,
                                        "command_timeout_ms": 5000,
                                        "trust_ms": 1000}})
        self.addCleanup(lambda: self.assertEqual(self.broker.stop(), 0))
        self.addCleanup(self.master.proc.send_signal, signal.SIGCONT)

    def test_grants_again_after_the_switch(self):
        c = self.broker.client()
        self.addCleanup(c.close)
        self.assertRegex(c.cmd("ACQUIRE a WAIT 0"), r"^OK ")
        self.assertEqual(self.master("WAIT", 1, 1000), 1)
        self.master.proc.send_signal(signal.SIGSTOP)
        # A request in flight on the frozen master when it is switched.
        w = self.broker.client()
        self.addCleanup(w.close)
        w.send("ACQUIRE b WAIT 0")
        wait_for(lambda: "master mymaster is at 127.0.0.1:%d (switched)"
                 % self.replica.port in self.broker.logtext(), 20)
        switched = time.monotonic()
        w.sock.settimeout(3)
        self.assertRegex(w.line(), r"^(OK |ERR UNAVAILABLE )")
        reply = wait_for(lambda: (lambda r: r if r.startswith("OK ")
                                  else None)(c.cmd("ACQUIRE n WAIT 0")),
                         10, 0.05)
        # The grace period (trust_ms 1000, stretched by twice the drift,
        # and clock_step_ms) and a reconnection; far below the 5 s a
        # request waits for its answer.
        self.assertLess(time.monotonic() - switched, 4)
        self.assertGreater(int(reply.split()[1]), 0)


def replid_of(redis):
    """Its master_replid (INFO replication)."""
    return redis("INFO", "replication").split(
        "master_replid:")[1].split("\r")[0]


class FailBackNeverReplica(unittest.TestCase):
    """A master m frozen (SIGSTOP) past a failover to its replica r, then
    resumed and promoted back (SENTINEL FAILOVER) before Sentinel made it
    r's replica (Sentinel waits 8 s for that): it keeps its run_id and,
    never a replica, its replication id, so its incarnation marker still
    names it; only Sentinel's config-epoch, raised by each failover, says
    that r granted in between. z holds x on r; its broker is cut off from
    the Sentinel (following it back, it would find m's marker older than
    r's and make a new incarnation itself) and then loses r. A broker
    that never knew r's incarnation must not grant x on m before z is
    told EVENT LOST x: it used to grant it at once."""

    # z trusts x for trust_ms less a beat (a quarter) after r is gone:
    # 1.5 s, far more than the new broker takes to start and ask.
    TRUST_MS = 2000

    def setUp(self):
        master_and_replica(self, "lbfailback-")
        start_sentinel(self)
        self.addCleanup(self.master.proc.send_signal, signal.SIGCONT)
        # z's broker asks the Sentinel through a Link, frozen to cut it
        # off: it then hears of no switch.
        self.slink = Link(self.sport)
        self.addCleanup(self.slink.close)
        self.b1 = self.start_broker("b1", self.slink.port)

    def start_broker(self, name, sport):
        b = Broker(self.tmpdir, self.master.port, {"redis": {
            "sentinels": ["127.0.0.1:%d" % sport],
            "master_name": "mymaster", "reconnect_min_ms": 50,
            "reconnect_max_ms": 500, "trust_ms": self.TRUST_MS}},
            name=name)
        self.addCleanup(lambda: self.assertEqual(b.stop(), 0))
        return b

    def ask_sentinel(self, *args):
        r = Resp(self.sport)
        try:
            return r(*args)
        finally:
            r.close()

    def master_fields(self):
        """SENTINEL MASTER mymaster, as a dict."""
        f = self.ask_sentinel("SENTINEL", "MASTER", "mymaster")
        return dict(zip(f[::2], f[1::2]))

    def test_promoted_back_without_being_a_replica(self):
        m, r = self.master, self.replica
        m_replid = replid_of(m)
        z = self.b1.client()
        self.addCleanup(z.close)
        m.proc.send_signal(signal.SIGSTOP)
        self.b1.wait_log("master mymaster is at 127.0.0.1:%d (switched)"
                         % r.port, timeout=20)
        # r is a new incarnation to b1: x is granted past its grace period.
        got = wait_until(
            lambda: (lambda a: a if a.startswith("OK ") else None)(
                z.cmd("ACQUIRE x WAIT 0")), 20, "x granted to z on r")
        fence = got.split()[1]
        self.slink.frozen = True
        m.proc.send_signal(signal.SIGCONT)
        # NOGOODSLAVE until the Sentinel has heard m again (its INFO);
        # then m, which Sentinel counts r's replica though it says it is a
        # master, is promoted: REPLICAOF NO ONE to a master changes
        # nothing in it.
        wait_until(lambda: self.ask_sentinel(
            "SENTINEL", "FAILOVER", "mymaster") == "OK", 6,
            "SENTINEL FAILOVER taken")
        # SENTINEL MASTER names m once the switch is made (+switch-master).
        master = wait_until(lambda: (lambda f: f if f["port"] == str(m.port)
                                     else None)(self.master_fields()),
                            10, "m master again")
        self.assertEqual(master["config-epoch"], "2")
        self.assertEqual(replid_of(m), m_replid)
        with open(os.path.join(self.tmpdir, "sentinel.log")) as f:
            self.assertNotIn("+convert-to-slave", f.read())
        # r goes before the new broker starts: z is told within trust_ms
        # of this, and a grace period begun after it is longer.
        r.kill()
        b2 = self.start_broker("b2", self.sport)
        c = b2.client()
        self.addCleanup(c.close)
        ra = c.cmd("ACQUIRE x WAIT 0")
        told = drain(z, 0.001)
        self.assertFalse(ra.startswith("OK ") and not any(
            e.startswith("EVENT LOST x ") for e in told),
            "x granted on m while z holds it, untold: %r" % ra)
        self.assertRegex(b2.logtext(), r"(first|new) lock data "
                         r"\(incarnation \d+\): no grant for")

        def answered():
            a = c.cmd("ACQUIRE x WAIT 0")
            return None if a.startswith("ERR UNAVAILABLE") else a
        self.assertRegex(wait_until(
            answered, self.TRUST_MS * 1.02 / 1000 + 1 + 10,
            "x granted past the grace period"), r"^OK ")
        told += drain(z, 0.001)
        self.assertIn("EVENT LOST x %s unavailable" % fence, told)
        self.assertEqual(locks_of(z), [])


if __name__ == "__main__":
    main()

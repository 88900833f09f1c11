"""Redis Sentinel: the broker finds the master through a Sentinel and
follows it when the Sentinel fails over to the replica."""

import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from lbtest import (REDIS_SERVER, Broker, Redis, Resp, free_port, main,
                    wait_for)


def master_and_replica(test, prefix):
    """test.tmpdir, test.master and test.replica (replicating), all
    removed after the test."""
    test.tmpdir = tempfile.mkdtemp(prefix=prefix)
    test.addCleanup(shutil.rmtree, test.tmpdir, ignore_errors=True)
    mdir, rdir = (os.path.join(test.tmpdir, d) for d in ("m", "r"))
    os.mkdir(mdir)
    os.mkdir(rdir)
    test.master = Redis(mdir)
    test.addCleanup(test.master.kill)
    test.replica = Redis(rdir, extra=["--replicaof", "127.0.0.1",
                                      str(test.master.port)])
    test.addCleanup(test.replica.kill)
    wait_for(lambda: "master_link_status:up" in
             test.replica("INFO", "replication"), 10)


class Sentinel(unittest.TestCase):

    def setUp(self):
        master_and_replica(self, "lbsentinel-")
        self.sport = free_port()
        conf = os.path.join(self.tmpdir, "sentinel.conf")
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndir %s\n"
                    "sentinel monitor mymaster 127.0.0.1 %d 1\n"
                    "sentinel down-after-milliseconds mymaster 300\n"
                    "sentinel failover-timeout mymaster 3000\n"
                    % (self.sport, self.tmpdir, self.master.port))
        self.sentinel = subprocess.Popen(
            [REDIS_SERVER, conf, "--sentinel", "--logfile",
             os.path.join(self.tmpdir, "sentinel.log")],
            stdout=subprocess.DEVNULL)
        self.addCleanup(self._stop_sentinel)
        wait_for(lambda: self._sentinel("SENTINEL", "replicas", "mymaster"),
                 15)
        redis = {"sentinels": ["127.0.0.1:%d" % self.sport],
                 "master_name": "mymaster", "reconnect_min_ms": 50,
                 "reconnect_max_ms": 500}
        self.broker = Broker(self.tmpdir, self.master.port,
                             {"redis": redis})
        self.addCleanup(self._stop_broker, self.broker)
        self.waiting = Broker(self.tmpdir, self.master.port,
                              {"redis": dict(redis, wait_replicas=1)},
                              name="waiting")
        self.addCleanup(self._stop_broker, self.waiting)

    def _sentinel(self, *args):
        r = Resp(self.sport)
        try:
            return r(*args)
        finally:
            r.close()

    def _stop_sentinel(self):
        self.sentinel.kill()
        self.sentinel.wait()

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
        self.assertRegex(c.cmd("ACQUIRE s"), r"^OK ")
        e = self.broker.client()
        self.addCleanup(e.close)
        self.assertRegex(e.cmd("ACQUIRE x TTL 5000"), r"^OK ")
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


if __name__ == "__main__":
    main()

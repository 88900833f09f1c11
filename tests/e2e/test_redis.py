"""The broker and its Redis: scripts cached or not, Redis restarts."""

import threading
import unittest

from lbtest import (Broker, BrokerTest, Redis, free_port, main, wait_for,
                    wait_until)


class Scripts(BrokerTest):
    # A restart below: its grace period well within a reply's time.
    conf = {"redis": {"trust_ms": 1000}}

    def worker(self, client, name, stop, errors, count):
        while not stop.is_set():
            for line, want in (("ACQUIRE %s TTL 5000" % name, "OK "),
                               ("STATUS " + name, "OK HELD"),
                               ("EXTEND %s 6000" % name, "OK 6000"),
                               ("RELEASE " + name, "OK")):
                reply = client.cmd(line)
                if not reply.startswith(want):
                    errors.append((line, reply))
                count[0] += 1

    def test_script_flush_fails_no_request(self):
        stop, errors, count = threading.Event(), [], [0]
        threads = [threading.Thread(target=self.worker,
                                    args=(self.client(), "f%d" % i, stop,
                                          errors, count))
                   for i in range(4)]
        for t in threads:
            t.start()
        for _ in range(20):  # a flush after every few requests
            n = count[0]
            wait_until(lambda: count[0] >= n + 5 or errors, 10,
                       "5 more requests")
            self.assertEqual(self.redis("SCRIPT", "FLUSH"), "OK")
        stop.set()
        for t in threads:
            t.join(30)
        self.assertEqual(errors, [])
        self.assertGreater(count[0], 100)
        self.assertGreater(int(self.broker.info()["redis_noscript_total"]), 0)

    def test_serves_again_after_redis_restart(self):
        a = self.client()
        self.assertRegex(a.cmd("ACQUIRE before"), r"^OK ")
        self.redis.kill()
        wait_for(lambda: self.broker.info()["redis_up"] == "0", 5)
        self.redis.start()  # same port, empty dataset: scripts are gone too
        wait_for(lambda: self.broker.info()["redis_up"] == "1", 10)
        # A new incarnation (another Redis process, no marker): the lock
        # is put back in its grace period, and grants resume after it
        # (test_forget has the details).
        self.assertRegex(a.cmd("ACQUIRE after WAIT 4000"), r"^OK \d+ ")
        self.assertEqual(sorted(l.split()[1] for l in a.until_end("LOCKS")
                                if l.startswith("LOCK ")), ["after", "before"])
        self.assertIn("redis command: connection lost", self.broker.logtext())

    def test_unavailable_names_what_redis_said(self):
        from lbtest import free_port
        a = self.client()
        # A replica (of a master that is not there) refuses writes.
        self.assertEqual(self.redis("REPLICAOF", "127.0.0.1",
                                    str(free_port())), "OK")
        try:
            self.assertEqual(a.cmd("ACQUIRE ro WAIT 0"),
                             "ERR UNAVAILABLE Redis answered READONLY")
        finally:
            self.assertEqual(self.redis("REPLICAOF", "NO", "ONE"), "OK")
        # Made master again, Redis has another replication id: its data
        # is a new incarnation (test_forget's FailBack), granted after
        # the grace period.
        self.assertRegex(a.cmd("ACQUIRE ro WAIT 0"), r"^ERR UNAVAILABLE "
                         r"Redis (holds lock data|forgot its locks)")
        self.assertRegex(a.cmd("ACQUIRE ro WAIT 30000"), r"^OK ")


    def test_a_refusing_redis_is_logged_once_not_per_request(self):
        """A refusal that is Redis's state, not one request's (here
        NOREPLICAS: min-replicas-to-write without its replica), is
        logged once, not once for each request it refuses; each request
        still gets it in its ERR UNAVAILABLE."""
        a = self.client()
        self.assertRegex(a.cmd("ACQUIRE first WAIT 0"), r"^OK ")
        self.assertEqual(self.redis("CONFIG", "SET", "min-replicas-to-write",
                                    "1"), "OK")
        try:
            for i in range(40):
                self.assertEqual(a.cmd("ACQUIRE r%d WAIT 0" % i),
                                 "ERR UNAVAILABLE Redis answered NOREPLICAS")
        finally:
            self.redis("CONFIG", "SET", "min-replicas-to-write", "0")
        self.assertEqual(self.broker.logtext().count("NOREPLICAS"), 1)


class Outage(unittest.TestCase):
    def test_an_outage_is_one_line_per_connection(self):
        """A Redis that cannot be reached is logged once per connection
        (command, subscriber) while it lasts, however often the broker
        tries (every 20 ms or so here); the tries are debug lines; the
        connect that ends it says how long it took."""
        import shutil
        import tempfile
        tmp = tempfile.mkdtemp(prefix="lboutage-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        port = free_port()
        b = Broker(tmp, port, {"redis": {"reconnect_min_ms": 10,
                                         "reconnect_max_ms": 20},
                               "log": {"level": "debug"}},
                   name="outage", wait_redis=False)
        self.addCleanup(b.stop)
        # A hundred tries each (the debug lines), logged once.
        for what in ("command", "subscriber"):
            wait_until(lambda: b.logtext().count(
                "debug: redis %s: retrying in" % what) >= 100,
                what="a hundred tries of the %s connection" % what)
        log = b.logtext()
        self.assertEqual(log.count("cannot connect"), 2, log[-2000:])
        self.assertNotRegex(log, r"(info|warning): redis \w+: retrying")
        r = Redis(tmp, port=port)
        self.addCleanup(r.kill)
        wait_until(lambda: b.logtext().count("after") >= 2,
                   what="both connections back")
        self.assertRegex(b.logtext(), r"redis command: connected to "
                         r"127\.0\.0\.1:%d after \d+ failed attempts in "
                         r"\d+ s" % port)


class NeverGranted(BrokerTest):
    conf = {"redis": {"trust_ms": 1000}}

    def test_a_refused_acquire_owes_no_release(self):
        """An ACQUIRE that never ran in Redis (no connection; the grace
        period after Redis forgot; a refusal such as NOREPLICAS) was
        granted nothing: the broker owes no release for it and does not
        log one. One Redis may have run unseen (no answer in time) is
        released when Redis answers again."""
        a = self.client()
        self.assertRegex(a.cmd("ACQUIRE warm WAIT 0"), r"^OK ")
        self.assertEqual(a.cmd("RELEASE warm"), "OK")
        self.assertEqual(self.redis("FLUSHALL"), "OK")
        wait_until(lambda: a.cmd("ACQUIRE g WAIT 0").startswith(
            "ERR UNAVAILABLE Redis forgot its locks"),
            what="an ACQUIRE refused in the grace period")
        self.redis("CONFIG", "SET", "min-replicas-to-write", "1")
        try:
            self.assertEqual(a.cmd("ACQUIRE n WAIT 0"),
                             "ERR UNAVAILABLE Redis answered NOREPLICAS")
        finally:
            self.redis("CONFIG", "SET", "min-replicas-to-write", "0")
        self.redis.kill()
        wait_until(lambda: self.broker.info()["redis_up"] == "0",
                   what="the broker sees Redis gone")
        self.assertEqual(a.cmd("ACQUIRE d WAIT 0"),
                         "ERR UNAVAILABLE no connection to Redis "
                         "(reconnecting)")
        self.assertNotIn("will release it", self.broker.logtext())
        self.assertNotIn("lease ran out before", self.broker.logtext())


class UnixAndDb(BrokerTest):

    def test_unix_socket_and_select(self):
        import os
        from lbtest import Resp
        path = os.path.join(self.tmpdir, "redis.sock")
        self.redis.kill()
        self.redis.extra = ["--unixsocket", path, "--unixsocketperm", "700"]
        self.redis.start()
        self.redis.seed_incarnation(db=3)
        b = self.start_broker({"redis": {"unix": path, "db": 3}},
                              name="unix")
        self.assertIn("redis command: connected to %s" % path, b.logtext())
        c = self.client(b)
        token = c.cmd("ACQUIRE u").split()[3]
        r = Resp(path=path)
        try:
            self.assertEqual(r("SELECT", 3), "OK")
            self.assertEqual(r("GET", "lockbroker:{u}").split()[0], token)
            self.assertEqual(r("SELECT", 0), "OK")
            self.assertIsNone(r("GET", "lockbroker:{u}"))
        finally:
            r.close()


if __name__ == "__main__":
    main()

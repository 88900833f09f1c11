"""Redis faults: kill -9 under load, SIGSTOP with waiters, releases Redis
could not hear about, AUTH and ACL users."""

import os
import signal
import threading
import time

from lbtest import LATE, BrokerTest, Redis, main, wait_for, wait_until

AOF = ["--appendonly", "yes", "--appendfsync", "always"]



# The channels and commands docs/sidecar.md lets the broker's Redis user
# use, read from the doc itself so that the two cannot drift apart.
def sidecar_acl():
    doc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                       "docs", "sidecar.md")
    with open(doc) as f:
        line = next(l for l in f if "ACL SETUSER lockbroker" in l)
    channels = [w for w in line.split("-@all", 1)[0].split()
                if w.startswith("&")]
    return channels + ["-@all"] + line.split("-@all", 1)[1].split()


class Faults(BrokerTest):
    # trust_ms 1000: the grace period after a restart of Redis (another
    # incarnation, even with the append-only file) is about a second.
    conf = {"redis": {"command_timeout_ms": 500, "reconnect_min_ms": 50,
                      "reconnect_max_ms": 1000, "trust_ms": 1000},
            "locks": {"retry_min_ms": 5, "retry_max_ms": 200}}

    def setUp(self):
        super().setUp()
        # Durable Redis, so a restart keeps fences (and locks).
        self.redis.kill()
        self.redis.extra = AOF
        self.redis.start()
        self.redis.seed_incarnation()  # a restart to set it up, not a test
        self.wait_grants()

    def test_kill_9_redis_under_load(self):
        stop = threading.Event()
        results, errors, lock = [], [], threading.Lock()

        def worker(i):
            c = self.broker.client()
            name = "load%d" % (i % 4)
            try:
                while not stop.is_set():
                    t0 = time.monotonic()
                    reply = c.cmd("ACQUIRE %s WAIT 0 TTL 2000" % name)
                    took = time.monotonic() - t0
                    with lock:
                        results.append((took, reply))
                    if reply.startswith("OK "):
                        with lock:
                            results.append((0, "FENCE %s %s" % (
                                name, reply.split()[1])))
                        t0 = time.monotonic()
                        rel = c.cmd("RELEASE " + name)
                        with lock:
                            results.append((time.monotonic() - t0, rel))
            except OSError as e:
                errors.append(repr(e))
            finally:
                c.close()

        threads = [threading.Thread(target=worker, args=(i,))
                   for i in range(20)]
        for t in threads:
            t.start()

        def replies(kind):
            with lock:
                return sum(1 for _, r in results if r.startswith(kind))
        # Under load: grants and releases, more than a hundred OK replies
        # (what the last assertion below counts) before Redis is killed.
        wait_until(lambda: replies("OK") > 100 or errors, 10,
                   "100 grants and releases")
        mark = self.broker.log_mark()
        self.redis.kill()
        wait_until(lambda: replies("ERR UNAVAILABLE") >= 1 or errors, 10,
                   "a refusal while Redis is down")
        # Down until the broker's reconnect back-off is at its cap (from
        # 50 ms, doubled, to trust_ms / 8): its fourth retry.
        wait_until(lambda: self.broker.logtext()[mark:].count(
            "redis command: retrying in") >= 4, 10, "four reconnect retries")
        self.redis.start()
        up = time.monotonic()
        wait_for(lambda: self.broker.info()["redis_up"] == "1", 5)
        back = time.monotonic() - up
        with lock:
            n = len(results)
        wait_until(lambda: len(results) >= n + 20 or errors, 10,
                   "20 more replies once Redis is back")
        stop.set()
        for t in threads:
            t.join(30)
        self.assertEqual(errors, [])
        self.assertLess(back, (1.0 + 0.2) * LATE)  # reconnect_max_ms
        kinds = {}
        for took, reply in results:
            if reply.startswith("FENCE"):
                continue
            self.assertLess(took, 0.5 + 0.1, reply)
            kind = reply.split()[0] if not reply.startswith("ERR") else \
                " ".join(reply.split()[:2])
            self.assertIn(kind, ("OK", "TIMEOUT", "ERR UNAVAILABLE",
                                 "ERR NOTHELD"), reply)
            kinds[kind] = kinds.get(kind, 0) + 1
        self.assertGreater(kinds.get("ERR UNAVAILABLE", 0), 0)
        self.assertGreater(kinds.get("OK", 0), 100)
        fences = [r.split()[1:] for _, r in results if r.startswith("FENCE")]
        self.assertEqual(len(fences), len(set(map(tuple, fences))),
                         "a fence was granted twice")
        # And it serves again, without a restart of the broker (after the
        # grace period of the restarted Redis).
        c = self.client()
        self.assertRegex(c.cmd("ACQUIRE after WAIT 3000"), r"^OK ")

    def test_sigstop_redis_waiters_served_in_order(self):
        holder = self.client()
        self.assertRegex(holder.cmd("ACQUIRE st"), r"^OK ")
        waiters = [self.client() for _ in range(20)]
        for i, w in enumerate(waiters):
            w.send("ACQUIRE st")
            wait_for(lambda: self.broker.info()["waiters"] == str(i + 1))
        mark = self.broker.log_mark()
        os.kill(self.redis.proc.pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            self.assertRegex(holder.cmd("RELEASE st"), r"^ERR UNAVAILABLE ")
            self.assertLess(time.monotonic() - start, 0.5 + 0.1)
            # Stopped until the broker gives up on its connection.
            self.broker.wait_log("no reply for", mark, timeout=10)
        finally:
            os.kill(self.redis.proc.pid, signal.SIGCONT)
        fences = []
        for w in waiters:
            reply = w.line()
            self.assertRegex(reply, r"^OK \d+ ")
            fences.append(int(reply.split()[1]))
            self.assertEqual(w.cmd("RELEASE st"), "OK")
        self.assertEqual(fences, sorted(set(fences)))
        self.assertEqual(self.broker.info()["waiters"], "0")
        # Nothing came back for 3 x command_timeout_ms: it reconnected.
        self.assertRegex(self.broker.logtext(),
                         r"redis command: no reply for \d+ ms; reconnecting")

    def test_grant_that_comes_after_its_lease_is_not_given(self):
        a, b = self.client(), self.client()
        os.kill(self.redis.proc.pid, signal.SIGSTOP)
        try:
            a.send("ACQUIRE slow TTL 100 WAIT 0")
            b.send("ACQUIRE slow2 TTL 100 WAIT 3000")
            # Redis grants both 300 ms after they asked, past their 100 ms
            # leases: the time passing is the fault.
            time.sleep(0.3)
        finally:
            os.kill(self.redis.proc.pid, signal.SIGCONT)
        self.assertEqual(a.line(), "ERR UNAVAILABLE the grant came after "
                         "its lease ended; Redis is slow")
        # The waiter asks again and gets a lease it can use.
        reply = b.line()
        self.assertRegex(reply, r"^OK \d+ 100 ")
        # A new grant (the late one's fence is not reused).
        self.assertEqual(reply.split()[1],
                         self.redis("GET", "lockbroker:{slow2}:fence"))
        info = self.broker.info()
        self.assertEqual(info["late_grants_total"], "2")
        wait_for(lambda: not self.redis("EXISTS", "lockbroker:{slow}"), 2)

    def test_release_done_when_redis_returns(self):
        a = self.client()
        self.assertRegex(a.cmd("ACQUIRE late TTL 60000"), r"^OK ")
        self.redis.kill()
        self.assertRegex(a.cmd("RELEASE late"), r"^ERR UNAVAILABLE ")
        self.redis.start()  # the AOF brings the lock back
        wait_for(lambda: self.redis("EXISTS", "lockbroker:{late}") == 0, 5)
        wait_for(lambda: "lock late: released after Redis came back" in
                 self.broker.logtext(), 5)

    def test_release_not_needed_when_lease_ran_out(self):
        a = self.client()
        self.assertRegex(a.cmd("ACQUIRE gone TTL 300"), r"^OK ")
        self.redis.kill()
        self.assertRegex(a.cmd("RELEASE gone"), r"^ERR UNAVAILABLE ")
        # The outage outlasts the 300 ms lease: its length is the test,
        # and the lease's end shows nothing before Redis is back.
        time.sleep(0.4)
        self.redis.start()
        wait_for(lambda: "lock gone: its lease ran out before Redis came "
                         "back" in self.broker.logtext(), 5)


class Outage(BrokerTest):
    """A Redis that goes away and comes back (restarted, empty) within
    5/8 of redis.trust_ms costs no hold: the broker tries to reconnect at
    least every eighth of trust_ms (docs/internals.md, Connections to
    Redis), and its holds were vouched for at most a beat (a quarter) before
    Redis went."""
    conf = {"redis": {"trust_ms": 8000}}

    def test_reconnect_delays_stay_under_an_eighth_of_trust(self):
        b = self.start_broker({"redis": {"trust_ms": 2000}}, name="short")
        self.redis.kill()
        # The outage itself: its length is the test.
        time.sleep(3)
        self.redis.start()
        delays = [int(l.split("retrying in ")[1].split()[0])
                  for l in b.logtext().splitlines() if "retrying in" in l]
        self.assertGreater(len(delays), 8)
        self.assertLessEqual(max(delays), 250)

    def test_holds_kept_through_an_outage_within_the_bound(self):
        clients = [self.client() for _ in range(3)]
        for i, c in enumerate(clients):
            self.assertRegex(c.cmd("ACQUIRE out%d" % i), r"^OK ")
        self.redis.kill()
        # The outage itself, its length the test's: 5/8 of 8000 ms is
        # 5 s, room for a beat.
        time.sleep(3.5)
        self.redis.start()
        # Put back during the grace period (about trust_ms), not lost.
        probe = self.client()
        wait_for(lambda: probe.cmd("ACQUIRE probe WAIT 0").startswith("OK "),
                 20, 0.2)
        for i, c in enumerate(clients):
            lines = c.until_end("LOCKS")
            self.assertTrue(any(l.startswith("LOCK out%d " % i)
                                for l in lines), lines)


class Auth(BrokerTest):
    """Redis with requirepass, and with an ACL user."""

    def setUp(self):
        import tempfile, shutil
        self.tmpdir = tempfile.mkdtemp(prefix="lbtest-")
        self.addCleanup(shutil.rmtree, self.tmpdir, ignore_errors=True)
        self.redis = Redis(self.tmpdir, extra=["--requirepass", "r3dis-pw"],
                           password="r3dis-pw")
        self.addCleanup(self.redis.kill)
        # The ACL docs/sidecar.md gives (Redis checks what scripts call).
        self.redis("ACL", "SETUSER", "broker", "on", ">broker-pw",
                   "~lockbroker:*", *sidecar_acl())
        self.clients, self.brokers = [], []

    def test_requirepass(self):
        b = self.start_broker({"redis": {"password": "r3dis-pw"}})
        self.assertRegex(self.client(b).cmd("ACQUIRE p"), r"^OK ")

    def test_acl_user_and_password_file(self):
        path = os.path.join(self.tmpdir, "redis.pw")
        with open(path, "w") as f:
            f.write("broker-pw\n")
        b = self.start_broker({"redis": {"username": "broker",
                                         "password_file": path}})
        c = self.client(b)
        self.assertRegex(c.cmd("ACQUIRE acl"), r"^OK ")
        self.assertRegex(c.cmd("WHO acl"), r"^HOLDER ")
        self.assertEqual(c.line(), "END")
        self.assertEqual(c.cmd("RELEASE acl"), "OK")
        self.assertRegex(c.cmd("ACQUIRE acl SHARED TTL 5000"), r"^OK ")
        self.assertRegex(c.cmd("STATUS acl"), r"^OK HELD \d+ \d+ SHARED 1$")
        self.assertEqual(c.cmd("EXTEND acl 6000"), "OK 6000")
        self.assertEqual(c.cmd("RELEASE acl"), "OK")
        self.assertRegex(c.cmd("FILL acl"), r"^OK ")
        self.assertEqual(c.cmd("RELEASE acl"), "OK")

    def test_wrong_password(self):
        from lbtest import Broker
        b = Broker(self.tmpdir, self.redis.port,
                   {"redis": {"password": "wrong", "reconnect_min_ms": 50,
                              "reconnect_max_ms": 200}},
                   wait_redis=False)
        self.brokers.append(b)
        self.addCleanup(self._kill, b)
        c = self.client(b)
        wait_for(lambda: b.logtext().count("AUTH failed") >= 2, 5)
        self.assertIn("WRONGPASS", b.logtext())
        self.assertRegex(c.cmd("ACQUIRE w WAIT 0"), r"^ERR UNAVAILABLE ",
                         b.logtext())
        self.assertEqual(c.cmd("PING"), "PONG")

    def test_no_request_before_auth_answers(self):
        # Redis is stopped: the connection is accepted (the kernel does it)
        # but AUTH is not answered. A request must not go out meanwhile: it
        # would reach Redis unauthenticated, where a long one is a protocol
        # error ("unauthenticated multibulk length") and not UNAVAILABLE.
        from lbtest import Broker
        os.kill(self.redis.proc.pid, signal.SIGSTOP)
        try:
            b = Broker(self.tmpdir, self.redis.port,
                       {"redis": {"password": "wrong"}}, wait_redis=False)
            self.brokers.append(b)
            self.addCleanup(self._kill, b)
            c = self.client(b)
            wait_for(lambda: "redis command: socket connected" in
                     b.logtext(), 5)
            c.send("ACQUIRE w WAIT 0\n")
            # Refused at once, with Redis still stopped: had it gone out,
            # no answer would come until Redis runs again.
            self.assertRegex(c.line(), r"^ERR UNAVAILABLE ")
        finally:
            os.kill(self.redis.proc.pid, signal.SIGCONT)
        wait_for(lambda: "AUTH failed" in b.logtext(), 5)
        self.assertRegex(c.cmd("ACQUIRE w WAIT 0"), r"^ERR UNAVAILABLE ")
        self.assertNotIn("unauthenticated", b.logtext())


if __name__ == "__main__":
    main()

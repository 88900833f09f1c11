#!/usr/bin/env python3
"""When Redis forgets (docs/protocol.md §8, docs/operations.md): FLUSHALL, a
restart without persistence, a failover to a replica that missed writes.
Nobody is granted a name in the grace period that follows, holders get their
locks back (or are told EVENT LOST before anyone else is granted), fences
never repeat or go back, and a broker that cannot hear Redis stops trusting
its holds after redis.trust_ms."""

import os
import signal
import sys
import time

from lbtest import (LATE, SLOW, Broker, BrokerTest, Redis, free_port, main,
                    wait_for, wait_until)
from test_told import drain

TRUST_MS = 600
CONF = {"redis": {"trust_ms": TRUST_MS}}
GRACE_S = TRUST_MS * 1.02 / 1000.0


def fence_of(reply):
    assert reply.startswith("OK "), reply
    return int(reply.split()[1])


def locks_of(c):
    return [l.split()[1] for l in c.until_end("LOCKS")
            if l.startswith("LOCK ")]


def refused_until_grace_ends(c, name):
    """ACQUIRE name WAIT 0 is never OK while the grace period runs;
    returns its answer once that is no longer ERR UNAVAILABLE, and the
    refusals before it."""
    seen = []

    def answered():
        r = c.cmd("ACQUIRE %s WAIT 0" % name)
        assert not r.startswith("OK "), (r, seen)
        if r.startswith("ERR UNAVAILABLE"):
            seen.append(r)
            return None
        return r
    r = wait_until(answered, GRACE_S + 5, "an answer past the grace period",
                   step=0.02)
    return r, seen


class Forget(BrokerTest):
    conf = CONF

    def test_fence_is_redis_clock_in_microseconds(self):
        a = self.client()
        before = int(time.time() * 1e6)
        f1 = fence_of(a.cmd("ACQUIRE clock"))
        self.assertGreaterEqual(f1, before - 5000000)
        self.assertLess(f1, 2 ** 53)
        self.assertEqual(a.cmd("RELEASE clock"), "OK")
        self.assertGreater(fence_of(a.cmd("ACQUIRE clock")), f1)

    def test_flushall_holders_keep_their_locks_and_nobody_else_gets_them(self):
        a, s, b = self.client(), self.client(), self.client()
        fa = fence_of(a.cmd("ACQUIRE fx TTL 30000"))
        fs = fence_of(s.cmd("ACQUIRE fs"))          # a session lock
        self.assertEqual(self.redis("FLUSHALL"), "OK")
        r, seen = refused_until_grace_ends(b, "fx")
        self.assertEqual(r, "TIMEOUT")              # a has it back
        self.assertTrue(seen, "no grace period was seen")
        self.assertIn("grace period", seen[-1])
        self.assertEqual(b.cmd("ACQUIRE fs WAIT 0"), "TIMEOUT")
        self.assertEqual(locks_of(a), ["fx"])
        self.assertEqual(locks_of(s), ["fs"])
        who = b.until_end("WHO fx")
        self.assertEqual(who[0].split()[1], str(fa))
        # A name granted now has a fence above every earlier one.
        self.assertGreater(fence_of(b.cmd("ACQUIRE fnew")), max(fa, fs))
        self.assertEqual(a.cmd("VALIDATE fx %d" % fa), "OK VALID")
        self.assertEqual(a.cmd("RELEASE fx"), "OK")
        self.assertEqual(s.cmd("RELEASE fs"), "OK")
        self.assertNotIn("EVENT", a.buf.decode() + s.buf.decode())

    def test_flushall_waiters_keep_their_order(self):
        """The queue is forgotten with the rest: once the broker knows,
        each of its waiters takes its place again, in the order they
        asked, so a request made after the loss does not go before
        them."""
        h, w1, w2, w3, probe = (self.client() for _ in range(5))
        fence_of(h.cmd("ACQUIRE fq TTL 30000"))
        w1.send("ACQUIRE fq WAIT 30000")
        w2.send("ACQUIRE fq WAIT 30000")
        queued = lambda: self.redis("ZCARD", "lockbroker:{fq}:queue")
        wait_for(lambda: queued() == 2)
        self.assertEqual(self.redis("FLUSHALL"), "OK")
        r, _ = refused_until_grace_ends(probe, "fq")
        self.assertEqual(r, "TIMEOUT")              # h has it back
        wait_for(lambda: queued() == 2)  # w1 and w2 queued again
        w3.send("ACQUIRE fq WAIT 30000")
        wait_for(lambda: queued() == 3)
        self.assertEqual(h.cmd("RELEASE fq"), "OK")
        self.assertRegex(w1.line(), r"^OK ")
        self.assertEqual(w1.cmd("RELEASE fq"), "OK")
        self.assertRegex(w2.line(), r"^OK ")
        self.assertEqual(w2.cmd("RELEASE fq"), "OK")
        self.assertRegex(w3.line(), r"^OK ")

    def test_flushall_frees_a_kept_lock_whose_connection_closed(self):
        """A kept lock outlives its connection in Redis only: no broker
        holds it, so none puts it back, and Redis forgetting it frees it
        once the grace period is over (docs/protocol.md §8)."""
        a, b = self.client(), self.client()
        fa = fence_of(a.cmd("ACQUIRE kf TTL 30000 KEEP"))
        a.close()
        wait_for(lambda: b.info()["clients"] == "1")   # b alone
        self.assertEqual(b.cmd("ACQUIRE kf WAIT 0"), "TIMEOUT")
        self.assertEqual(self.redis("FLUSHALL"), "OK")
        r = b.cmd("ACQUIRE kf WAIT 0")
        self.assertRegex(r, r"^ERR UNAVAILABLE ")   # the grace period
        self.assertGreater(fence_of(b.cmd("ACQUIRE kf WAIT 10000")), fa)

    def test_restart_without_persistence(self):
        a, b = self.client(), self.client()
        fa = fence_of(a.cmd("ACQUIRE rx TTL 30000"))
        self.redis.kill()
        self.redis.start()       # same port, empty, another run_id
        wait_for(lambda: self.broker.info()["redis_up"] == "1", 10)
        r, _ = refused_until_grace_ends(b, "rx")
        self.assertEqual(r, "TIMEOUT")
        self.assertEqual(locks_of(a), ["rx"])
        self.assertGreater(fence_of(b.cmd("ACQUIRE rnew")), fa)
        self.assertEqual(a.cmd("RELEASE rx"), "OK")
        self.assertIn("incarnation", self.broker.logtext())

    def test_older_data_does_not_give_an_old_fence_again(self):
        """Redis comes back with older data (a restart from a snapshot
        taken before the last writes): a grant released since is still in
        it. Its token asking again gets a new fence, above every fence
        granted before, not the old one (found by a review, 3 of 3)."""
        a, b = self.client(), self.client()
        f1 = fence_of(a.cmd("ACQUIRE ox TTL 60000 TOKEN tok1"))
        self.assertEqual(self.redis("SAVE"), "OK")
        self.assertEqual(a.cmd("RELEASE ox"), "OK")
        f2 = fence_of(b.cmd("ACQUIRE ox TTL 60000"))
        self.redis.kill()
        self.redis.start()   # loads the snapshot: tok1 holds ox there
        # b's grant is put back over that leftover; tok1 is refused.
        r = wait_until(
            lambda: (lambda r: None if r.startswith("ERR UNAVAILABLE")
                     else r)(a.cmd("ACQUIRE ox TTL 60000 TOKEN tok1 WAIT 0")),
            GRACE_S + 5, "tok1 answered past ERR UNAVAILABLE")
        self.assertEqual(r, "TIMEOUT")
        self.assertEqual(locks_of(b), ["ox"])
        self.assertEqual(a.cmd("VALIDATE ox %d" % f1), "OK STALE")
        self.assertEqual(a.cmd("VALIDATE ox %d" % f2), "OK VALID")
        # Once b releases, tok1 gets a fence above f2, not f1 again.
        self.assertEqual(b.cmd("RELEASE ox"), "OK")
        self.assertGreater(fence_of(a.cmd("ACQUIRE ox TTL 60000 TOKEN tok1")),
                           f2)

    def test_two_brokers_flushall(self):
        """The broker that did not notice first is gated in Redis too: it
        grants nothing either until the grace period is over."""
        other = self.start_broker(CONF, name="other")
        a = self.client()
        b = self.client(other)
        fa = fence_of(a.cmd("ACQUIRE tb TTL 30000"))
        self.assertEqual(self.redis("FLUSHALL"), "OK")
        r, _ = refused_until_grace_ends(b, "tb")
        self.assertEqual(r, "TIMEOUT")
        self.assertEqual(locks_of(a), ["tb"])
        self.assertGreater(fence_of(b.cmd("ACQUIRE tb2")), fa)

    def test_brokers_that_disagree_on_trust_ms_are_told(self):
        """The grace period is made by whichever broker notices first: a
        broker that trusts its holds longer than that is a misconfiguration,
        and is said so (at a beat: an idle broker beats at its next
        request)."""
        self.start_broker({"redis": {"trust_ms": 2000}}, name="longer")
        self.assertRegex(self.client().cmd("ACQUIRE busy"), r"^OK ")
        wait_for(lambda: "another broker's grace period is 3041 ms" in
                 self.broker.logtext(), 5)

    def test_redis_silent_past_trust_ms_loses_every_hold(self):
        a = self.client()
        self.assertRegex(a.cmd("ACQUIRE quiet TTL 60000"), r"^OK ")
        os.kill(self.redis.proc.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            a.sock.settimeout(5)
            line = a.line()
            waited = time.monotonic() - t0
        finally:
            os.kill(self.redis.proc.pid, signal.SIGCONT)
        self.assertRegex(line, r"^EVENT LOST quiet \d+ unavailable$")
        self.assertLess(waited, TRUST_MS / 1000.0 + 0.5 * LATE)
        self.assertEqual(locks_of(a), [])


class FailBack(BrokerTest):
    """A master made a replica (its replica promoted) and then master
    again before it caught up: Sentinel promoting a former master that
    missed writes, or an operator's REPLICAOF NO ONE. Its run_id is the
    one it had when it last served, so its markers still name it; what
    its successor granted in between is not in it. Redis gave it another
    replication id when it was made master again, and the marker keeps
    the one it was confirmed on: a new incarnation."""

    conf = CONF

    def test_a_former_master_back_with_older_data(self):
        m = self.redis
        r = Redis(self.tmpdir, extra=("--replicaof", "127.0.0.1",
                                      str(m.port)))
        self.addCleanup(r.kill)
        wait_until(lambda: "master_link_status:up" in
                   r("INFO", "replication"), 10, "the replica in sync")
        # A master's first replica gives it a new replication id too,
        # and so a grace period (docs/operations.md, When Redis forgets).
        self.wait_grants()
        a = self.client()
        self.assertRegex(a.cmd("ACQUIRE fb WAIT 0"), r"^OK ")
        self.assertEqual(a.cmd("RELEASE fb"), "OK")
        wait_until(lambda: m("WAIT", 1, 1000) == 1, 10, "fb replicated")
        # The replica is promoted; the master is made a replica of a
        # Redis that is not there, so it misses what is written next.
        self.assertEqual(r("REPLICAOF", "NO", "ONE"), "OK")
        self.assertEqual(m("REPLICAOF", "127.0.0.1", str(free_port())), "OK")
        b1 = Broker(self.tmpdir, r.port, CONF, name="b1")
        self.brokers.append(b1)
        z = self.client(b1)
        wait_until(lambda: z.cmd("ACQUIRE fb TTL 60000 WAIT 0")
                   .startswith("OK "), GRACE_S + 10, "fb granted to z")
        # The successor goes; the former master serves again, with
        # what it had.
        r.kill()
        self.assertEqual(m("REPLICAOF", "NO", "ONE"), "OK")
        ra = a.cmd("ACQUIRE fb WAIT 0")
        told = drain(z, 0.001)
        self.assertFalse(ra.startswith("OK ") and not any(
            e.startswith("EVENT LOST fb ") for e in told),
            "fb granted to a while z holds it, untold: %r" % ra)
        self.assertIn("new lock data", self.broker.logtext())
        # a gets it once the grace period is over: z was told by then.
        def answered():
            r = a.cmd("ACQUIRE fb WAIT 0")
            return None if r.startswith("ERR UNAVAILABLE") else r
        self.assertRegex(wait_until(answered, GRACE_S + 10,
                                    "fb granted past the grace period"),
                         r"^OK ")
        told += drain(z, 0.001)
        self.assertIn("EVENT LOST fb", "\n".join(told))
        self.assertEqual(locks_of(z), [])


class ForgetFresh(BrokerTest):
    """A Redis no broker has used: its first incarnation has a grace
    period too (nobody can tell it from one that forgot)."""

    conf = {"redis": {"trust_ms": 3000}}

    def setUp(self):
        import shutil
        import tempfile
        self.tmpdir = tempfile.mkdtemp(prefix="lbtest-")
        self.addCleanup(shutil.rmtree, self.tmpdir, ignore_errors=True)
        self.redis = Redis(self.tmpdir, seed=False)
        self.addCleanup(self.redis.kill)
        self.clients, self.brokers = [], []
        self.broker = self.start_broker(self.conf)

    def test_first_grants_wait_for_the_grace_period(self):
        """A first start on an unused Redis makes the first incarnation:
        its grace period is waited, and said at info, not as a warning (a
        broker that knew no earlier incarnation has no holds to put
        back; one that did warns, test_fleet)."""
        c = self.client()
        wait_for(lambda: "info: redis: first lock data" in
                 self.broker.logtext(), 5)
        self.assertNotIn("warning: redis: new lock data",
                         self.broker.logtext())
        self.assertRegex(c.cmd("ACQUIRE first WAIT 0"),
                         r"^ERR UNAVAILABLE .*grace period")
        t0 = time.monotonic()
        self.assertRegex(c.cmd("ACQUIRE first WAIT 10000"), r"^OK ")
        self.assertGreater(time.monotonic() - t0, 1.0)
        self.assertEqual(self.redis("HGET", "lockbroker:incarnation",
                                    "runid"),
                         self.redis("INFO", "server").split(
                             "run_id:")[1].split("\r")[0])


class BackAndForth(BrokerTest):
    """Brokers that followed the master to another Redis and back (a
    failover Sentinel undid, or two Redis acting as masters for a while):
    the marker they find again is older than the one they knew, and may
    have missed what was granted under that one."""

    conf = CONF

    def switch(self, px, redis):
        px.upstream_port = redis.port
        self.assertIsNotNone(px.reset())

    def test_back_on_an_older_incarnation(self):
        sys.path.insert(0, os.path.join(os.path.dirname(
            os.path.abspath(__file__)), "..", "chaos"))
        from proxy import Proxy
        other = Redis(self.tmpdir, seed=False)
        self.addCleanup(other.kill)
        px0, px1 = Proxy(self.redis.port), Proxy(self.redis.port)
        self.addCleanup(px0.stop)
        self.addCleanup(px1.stop)
        b0 = Broker(self.tmpdir, px0.port, CONF, name="b0")
        b1 = Broker(self.tmpdir, px1.port, CONF, name="b1")
        self.brokers += [b0, b1]
        self.wait_grants(b0)
        self.wait_grants(b1)
        # b1 follows the master to the other Redis: a new incarnation
        # there; once its grace period is over, h is granted x there.
        self.switch(px1, other)
        h = self.client(b1)
        wait_for(lambda: h.cmd("ACQUIRE x TTL 30000 WAIT 0")
                 .startswith("OK "), 10 * SLOW, 0.05)
        # b0 follows it there too (and learns that incarnation), then
        # back, and so does b1.
        self.switch(px0, other)
        self.wait_grants(b0)
        self.switch(px0, self.redis)
        self.switch(px1, self.redis)
        # The first Redis never saw h's grant: b0 grants nobody x until
        # b1 has put it back there.
        g = self.client(b0)
        r, _ = refused_until_grace_ends(g, "x")
        self.assertEqual(r, "TIMEOUT")
        self.assertEqual(locks_of(h), ["x"])
        self.assertNotIn("EVENT", h.buf.decode())


if __name__ == "__main__":
    main()

"""Redis's wall clock stepped under live leases. Redis expires keys and
answers TIME by its wall clock; the broker trusts a lease by its own
monotonic clock. A forward step up to redis.clock_step_ms is covered by
the margin every lease carries in Redis; beyond it the broker notices the
step at its next beat (Redis's time ran ahead of its own) and confirms
every hold again, told lost if Redis no longer has it. Redis runs under
tests/shim/clockshift.c, which moves its wall clock and nothing else.
Each test failed on the code before the fix it names."""

import re
import time

from lbtest import LATE, SLOW, BrokerTest, main
from test_truth import KEY, LOST_RE, fence_of, next_line, read_until


def trusted(c, name):
    """The ms of validity LOCKS shows for name, and the monotonic time
    just after its reply came."""
    for line in c.until_end("LOCKS"):
        w = line.split()
        if w[0] == "LOCK" and w[1] == name:
            return int(w[3]), time.monotonic()
    raise AssertionError("%s is not in LOCKS" % name)


class RedisClock(BrokerTest):
    """A Redis under tests/shim/clockshift.c, and a broker."""

    redis_clock = True


class ClockStep(RedisClock):
    conf = {"redis": {"trust_ms": 1000}, "locks": {"lease_ms": 3000}}

    def assert_redis_outlasts_trust(self, c, name):
        """Redis keeps name's lease at least as long as the broker lets
        c trust it: the broker's end is read first, Redis's after, so
        Redis's end is at least its PTTL plus the time between them."""
        left, after = trusted(c, name)
        before = time.monotonic()
        pttl = self.redis("PTTL", KEY % name)
        self.assertGreaterEqual(
            pttl + (before - after) * 1000, left,
            "%s: Redis ends the lease before the holder is told "
            "(PTTL %d ms, trusted %d ms)" % (name, pttl, left))

    def test_step_within_the_bound(self):
        """A 1 s forward step (what chrony's makestep 1.0 allows) under a
        20 s lock and a session lock: neither ends in Redis before its
        holder stops trusting it, and nobody else gets them. It used to
        end 0.8 s before its holder was told."""
        a, s = self.client(), self.client()
        fence_of(a.cmd("ACQUIRE x TTL 20000"))
        fence_of(s.cmd("ACQUIRE y"))
        self.redis.set_clock(1000)
        self.assert_redis_outlasts_trust(a, "x")
        self.assert_redis_outlasts_trust(s, "y")
        other = self.client(self.start_broker(self.conf, name="other"))
        self.assertEqual(other.cmd("ACQUIRE x WAIT 0"), "TIMEOUT")
        self.assertEqual(other.cmd("ACQUIRE y WAIT 0"), "TIMEOUT")
        # Holds within the bound are kept: nothing is lost.
        self.assertIsNone(next_line(a, 1.5))
        self.assertIsNone(next_line(s, 0.1))
        self.assert_redis_outlasts_trust(a, "x")
        self.assert_redis_outlasts_trust(s, "y")

    def test_step_beyond_the_bound_is_noticed(self):
        """A 25 s forward step: a 20 s lock is gone from Redis at once,
        and its holder is told within a beat and a round trip, not when
        its own lease would have ended (about 19 s later, before). A 60 s
        lock stays, trusted no longer than Redis keeps it now."""
        a, b = self.client(), self.client()
        fence = fence_of(a.cmd("ACQUIRE x TTL 20000"))
        fence_of(b.cmd("ACQUIRE y TTL 60000"))
        # A beat answered before the step, so that the broker knows
        # Redis's clock from before it: beats come every trust_ms / 4
        # (250 ms) and no reply tells a client when one was answered, so
        # a beat period passes.
        time.sleep(0.3)
        self.redis.set_clock(25000)
        start = time.monotonic()
        line, seen = read_until(a, LOST_RE, 3 * LATE)
        self.assertIsNotNone(line, "no EVENT LOST within 3 s (got %r)"
                             % seen)
        self.assertRegex(line, r"^EVENT LOST x %d (expired|stolen)$"
                         % fence)
        self.assertLess(time.monotonic() - start, 1.5 * LATE)
        self.assertIn("clock", self.broker.logtext())
        self.assert_redis_outlasts_trust(b, "y")
        self.assertIsNone(next_line(b, 0.1))


class SkewedRestart(RedisClock):
    """Older data comes back on a Redis whose clock is behind the one
    that granted since: the new incarnation's id (its clock) must still
    be above those grants' fences, or a grant released since looks
    current (issue: VALIDATE said VALID, and the same token got its old,
    lower fence back)."""

    conf = {"redis": {"trust_ms": 300, "reconnect_min_ms": 20,
                      "reconnect_max_ms": 100}}

    def test_leftover_on_a_host_behind(self):
        x, y = self.client(), self.client()
        f = fence_of(x.cmd("ACQUIRE n TTL 60000 TOKEN tx"))
        self.assertEqual(self.redis("SAVE"), "OK")   # X's grant in it
        self.assertEqual(x.cmd("RELEASE n"), "OK")
        f2 = fence_of(y.cmd("ACQUIRE n TTL 60000"))
        self.assertEqual(y.cmd("RELEASE n"), "OK")
        self.assertGreater(f2, f)
        # The snapshot comes back on a host 0.9 s behind (within
        # clock_step_ms): an incarnation made by its clock alone would
        # be below f.
        self.redis.kill()
        self.redis.set_clock(-900)
        self.redis.start()
        self.wait_grants()
        self.assertEqual(x.cmd("VALIDATE n %d" % f), "OK STALE")
        g = fence_of(self.client().cmd("ACQUIRE n WAIT 0"))
        self.assertGreater(g, f2)
        self.assertGreater(fence_of(x.cmd("ACQUIRE m TTL 1000 TOKEN tx")),
                           f2)


if __name__ == "__main__":
    main()

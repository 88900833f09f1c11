"""Leases the broker renews, and EVENT LOST when a holder loses its lock."""

import re
import time

from lbtest import STEP, BrokerTest, holds_for, main, wait_for

LOST = re.compile(r"^EVENT LOST (\S+) (\d+) (\w+)$")


class Leases(BrokerTest):
    conf = {"locks": {"lease_ms": 300},
            "redis": {"command_timeout_ms": 3000}}

    def test_session_lock_renewed_while_idle(self):
        a, b = self.client(), self.client()
        fence = a.cmd("ACQUIRE s").split()[1]
        seen = []

        def live():
            seen.append(self.redis("PTTL", "lockbroker:{s}"))
            return 0 < seen[-1] <= 300 + STEP
        holds_for(live, 3.0, "a live 300 ms lease in Redis", step=0.01)
        self.assertGreater(len(seen), 100)
        self.assertRegex(b.cmd("STATUS s"), r"^OK HELD \d+ %s$" % fence)
        self.assertRegex(a.until_end("LOCKS")[0], r"^LOCK s %s \d+ SESSION$" % fence)
        self.assertEqual(b.cmd("VALIDATE s " + fence), "OK VALID")
        self.assertGreater(int(self.broker.info()["renewals_total"]), 20)

    def test_fixed_lease_expires_with_event(self):
        a, b = self.client(), self.client()
        start = time.monotonic()
        fence = a.cmd("ACQUIRE f TTL 200").split()[1]
        event = a.line()
        took = time.monotonic() - start
        self.assertEqual(event, "EVENT LOST f %s expired" % fence)
        self.assertGreater(took, 0.150)
        self.assertLess(took, 0.250)
        self.assertEqual(a.until_end("LOCKS"), [])
        wait_for(lambda: b.cmd("STATUS f") == "OK FREE", 1)
        self.assertEqual(self.broker.info()["lost_expired_total"], "1")

    def test_extend_moves_the_end(self):
        a = self.client()
        fence = a.cmd("ACQUIRE e TTL 200").split()[1]
        self.assertEqual(a.cmd("EXTEND e 400"), "OK 400")
        start = time.monotonic()
        self.assertEqual(a.line(), "EVENT LOST e %s expired" % fence)
        self.assertGreater(time.monotonic() - start, 0.340)

    def test_deleted_behind_our_back_is_stolen(self):
        """The lock key and its fence counter deleted (the counter alone
        remembering the lease would have it put back): the next renewal
        finds it gone."""
        a, b = self.client(), self.client()
        fence = a.cmd("ACQUIRE st").split()[1]
        self.assertEqual(self.redis("DEL", "lockbroker:{st}",
                                    "lockbroker:{st}:fence"), 2)
        start = time.monotonic()
        self.assertEqual(a.line(), "EVENT LOST st %s stolen" % fence)
        self.assertLess(time.monotonic() - start, 0.150)  # next renewal
        self.assertEqual(a.until_end("LOCKS"), [])
        # Someone else's lock under that name is left alone.
        self.assertRegex(b.cmd("ACQUIRE st WAIT 0"), r"^OK ")
        self.assertRegex(a.cmd("ACQUIRE st WAIT 0"), r"^TIMEOUT$")

    def test_unavailable_when_redis_stops_answering(self):
        """Redis gone, a session holder is told when its lease's validity
        ends (300 ms after its last renewal was sent), not when a renewal
        times out (redis.command_timeout_ms, 3000 ms here) nor when trust
        runs out (trust_ms, 5000): which of them told it is what the time
        shows, so the bound is half way from the lease to the next,
        whatever the machine's load adds to either."""
        a = self.client()
        fence = a.cmd("ACQUIRE un").split()[1]
        start = time.monotonic()
        self.redis.kill()
        self.assertEqual(a.line(), "EVENT LOST un %s unavailable" % fence)
        self.assertLess(time.monotonic() - start, (0.300 + 3.000) / 2)
        self.assertEqual(a.until_end("LOCKS"), [])

    def test_keep_lock_wrong_token(self):
        a, b = self.client(), self.client()
        _, fence, _, tok = a.cmd("ACQUIRE k TTL 60000 KEEP").split()
        self.hang_up(a)
        self.assertRegex(b.cmd("RELEASE k TOKEN not-the-token"), r"^ERR NOTHELD ")
        self.assertRegex(b.cmd("EXTEND k 1000 TOKEN not-the-token"), r"^ERR NOTHELD ")
        self.assertEqual(self.redis("GET", "lockbroker:{k}").split()[0], tok)
        self.assertEqual(b.cmd("VALIDATE k " + fence), "OK VALID")
        self.assertEqual(b.cmd("RELEASE k TOKEN " + tok), "OK")
        self.assertEqual(b.cmd("VALIDATE k " + fence), "OK STALE")


class MaxHold(BrokerTest):
    conf = {"locks": {"lease_ms": 300, "max_hold_ms": 500}}

    def test_maxhold(self):
        a, b = self.client(), self.client()
        b_waits = b
        start = time.monotonic()
        fence = a.cmd("ACQUIRE mh").split()[1]
        b_waits.send("ACQUIRE mh")
        self.assertEqual(a.line(), "EVENT LOST mh %s maxhold" % fence)
        took = time.monotonic() - start
        self.assertGreater(took, 0.45)
        self.assertLess(took, 0.60)
        m = re.match(r"^OK (\d+) ", b_waits.line())
        self.assertGreater(int(m.group(1)), int(fence))


class LockDelay(BrokerTest):
    conf = {"locks": {"lock_delay_ms": 300}}

    def test_vanished_holder_keeps_lock_for_delay(self):
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE ld"), r"^OK ")
        b.send("ACQUIRE ld")
        wait_for(lambda: self.broker.info()["waiters"] == "1")
        start = time.monotonic()
        a.close()  # no QUIT: abnormal
        self.assertRegex(b.line(), r"^OK ")
        took = time.monotonic() - start
        self.assertGreater(took, 0.25)
        self.assertLess(took, 0.40)

    def test_quit_releases_at_once(self):
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE lq"), r"^OK ")
        b.send("ACQUIRE lq")
        wait_for(lambda: self.broker.info()["waiters"] == "1")
        start = time.monotonic()
        self.assertEqual(a.cmd("QUIT"), "OK")
        self.assertRegex(b.line(), r"^OK ")
        self.assertLess(time.monotonic() - start, 0.1)


if __name__ == "__main__":
    main()

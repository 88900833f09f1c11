"""Fair across brokers (docs/protocol.md §4, Waiting): one first-come-first-
served queue per name for every broker sharing the Redis. A waiter takes
its place (a ticket) when its broker first asks; a release hands the name
to the first live ticket, on whichever broker, and wakes only that broker;
a broker that dies leaves the queue within a bound; a waiter that leaves
takes its ticket with it."""

import bisect
import signal
import threading
import time

from lbtest import (LATE, SLOW, STEP, BrokerTest, main, redis_conn_ports,
                    stopped, tcp_peer_closed, tcp_unread, wait_for,
                    wait_until)

QUEUE = "lockbroker:{%s}:queue"


def waiters(broker):
    return int(broker.info()["waiters"])


class Fairness(BrokerTest):
    conf = {"locks": {"retry_min_ms": 20, "retry_max_ms": 200},
            "redis": {"command_timeout_ms": 500}}

    def queued(self, name):
        return self.redis("ZCARD", QUEUE % name)

    def test_round_robin_across_four_brokers(self):
        """4 brokers x 8 clients on one name, each holding a moment and
        asking again: every client is granted, in the order the requests
        were sent (first come, first served whichever broker), so the
        clients take turns."""
        brokers = [self.broker] + [self.start_broker(self.conf, name="b%d" % i)
                                   for i in range(1, 4)]
        clients = [(i, self.client(brokers[i % 4])) for i in range(32)]
        grants, lock = [], threading.Lock()
        # Every client asks first at the same moment: a client whose
        # thread started first must not take turns alone while the
        # others' threads are still starting (a slow sanitized build).
        start = threading.Barrier(len(clients))
        stop = time.monotonic() + 3.0 * SLOW

        def run(i, c):
            start.wait(30)
            while time.monotonic() < stop:
                # The request left between these two readings (a thread
                # can be held up between a send and a clock read).
                before = time.monotonic()
                c.send("ACQUIRE hot")
                sent = time.monotonic()
                reply = c.line()
                fence = int(reply.split()[1])
                with lock:
                    grants.append((sent, fence, i, before))
                # The hold: a moment's work, a round trip.
                self.assertEqual(c.cmd("PING"), "PONG")
                self.assertEqual(c.cmd("RELEASE hot"), "OK")

        threads = [threading.Thread(target=run, args=ic) for ic in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        fences = [g[1] for g in grants]
        self.assertEqual(len(set(fences)), len(fences), "a fence twice")
        counts = [sum(1 for g in grants if g[2] == i) for i in range(32)]
        self.assertGreater(min(counts), 0, counts)
        self.assertGreater(len(grants), 5 * 32, "too few grants to judge")
        # First come, first served: a request sent a clear margin (the
        # way from client to Redis on a loaded machine; a round of 32
        # grants takes about as long) after another one was on its way
        # is granted after it. The first two rounds (everyone asking at
        # once) are left out: the grants after the 64 lowest fences
        # (fences are Redis's clock in µs, not a count).
        margin = 0.05 * SLOW
        first = sorted(fences)[2 * len(clients)]
        judged = [g for g in grants if g[1] > first]
        by_before = sorted(judged, key=lambda g: g[3])
        befores = [g[3] for g in by_before]
        later_min = [float("inf")] * (len(by_before) + 1)
        for k in range(len(by_before) - 1, -1, -1):
            later_min[k] = min(later_min[k + 1], by_before[k][1])
        out = []
        for sent, fence, i, _ in judged:
            k = bisect.bisect_right(befores, sent + margin)
            if fence > later_min[k]:
                out.append((round(sent, 4), fence, i))
        self.assertEqual(out, [], "granted after a later request")
        # Turns: max/min grants per client within 1.2 (a round or so of
        # difference at the edges of the run, when threads start and stop).
        self.assertLessEqual(max(counts), 1.2 * min(counts) + 1, counts)

    def test_release_wakes_only_the_next_broker(self):
        """A release hands the name to the next ticket's broker alone: one
        message, on that broker's channel; nothing on the release channel
        every broker hears."""
        other = self.start_broker(self.conf, name="other")
        third = self.start_broker(self.conf, name="third")
        psub = self.redis.connect()
        self.addCleanup(psub.close)
        self.assertEqual(psub("PSUBSCRIBE", "lockbroker:*")[0], "psubscribe")
        h = self.client()
        self.assertRegex(h.cmd("ACQUIRE w"), r"^OK ")
        b, c = self.client(other), self.client(third)
        b.send("ACQUIRE w")
        wait_for(lambda: self.queued("w") == 1)
        c.send("ACQUIRE w")
        wait_for(lambda: self.queued("w") == 2)
        self.assertEqual(h.cmd("RELEASE w"), "OK")
        self.assertRegex(b.line(), r"^OK ")
        to_b = psub._read()
        self.assertEqual(to_b[:2], ["pmessage", "lockbroker:*"])
        self.assertTrue(to_b[2].startswith("lockbroker:to:"), to_b)
        self.assertEqual(self.queued("w"), 1)
        self.assertEqual(b.cmd("RELEASE w"), "OK")
        self.assertRegex(c.line(), r"^OK ")
        to_c = psub._read()
        self.assertTrue(to_c[2].startswith("lockbroker:to:"), to_c)
        self.assertNotEqual(to_c[2], to_b[2])
        self.assertEqual(self.queued("w"), 0)
        # Nothing else was said, to anyone.
        psub.sock.settimeout(0.3 * LATE)
        with self.assertRaises(OSError):
            psub._read()

    def test_try_once_never_jumps_the_queue(self):
        """A free name whose queue has a live ticket goes to that ticket:
        WAIT 0 (which takes no ticket) gets TIMEOUT, on any broker, and a
        waiter queues behind the ticket."""
        other = self.start_broker(self.conf, name="other")
        # A ticket of a live broker that is not one of these two.
        now = self.redis("TIME")
        until = int(now[0]) * 1000 + int(now[1]) // 1000 + 60000
        self.redis("ZADD", QUEUE % "t", 1, "elsewhere#1")
        self.redis("HSET", "lockbroker:{t}:tickets", "elsewhere#1",
                   "tok-else 60000 EXCLUSIVE elsewhere 1@- 0")
        self.redis("HSET", "lockbroker:{t}:brokers", "elsewhere",
                   "%d 1" % until)
        self.assertEqual(self.client().cmd("ACQUIRE t WAIT 0"), "TIMEOUT")
        self.assertEqual(self.client(other).cmd("ACQUIRE t WAIT 0"),
                         "TIMEOUT")
        w = self.client(other)
        self.assertEqual(w.cmd("ACQUIRE t WAIT 300"), "TIMEOUT")
        self.assertEqual(self.redis("EXISTS", "lockbroker:{t}"), 0)
        self.assertEqual(self.redis("ZRANGE", QUEUE % "t", 0, -1),
                         ["elsewhere#1"])
        # That broker is gone (its entry ended): the queue moves on.
        self.redis("HSET", "lockbroker:{t}:brokers", "elsewhere", "1 1")
        self.assertRegex(w.cmd("ACQUIRE t WAIT 1000"), r"^OK ")
        self.assertEqual(self.queued("t"), 0)

    def test_waiter_that_leaves_takes_its_ticket(self):
        """WAIT running out, a disconnect, and a half-close each take the
        waiter's ticket out of the queue."""
        other = self.start_broker(self.conf, name="other")
        h = self.client()
        self.assertRegex(h.cmd("ACQUIRE l"), r"^OK ")
        a = self.client(other)
        self.assertEqual(a.cmd("ACQUIRE l WAIT 300"), "TIMEOUT")
        wait_for(lambda: self.queued("l") == 0)
        b = self.client(other)
        b.send("ACQUIRE l")
        wait_for(lambda: self.queued("l") == 1)
        b.close()
        wait_for(lambda: self.queued("l") == 0)
        c = self.client(other)
        c.send("ACQUIRE l WAIT 60000")
        wait_for(lambda: self.queued("l") == 1)
        self.assertEqual(h.cmd("RELEASE l"), "OK")
        self.assertRegex(c.line(), r"^OK ")
        self.assertEqual(self.queued("l"), 0)
        self.assertEqual(self.redis("HLEN", "lockbroker:{l}:tickets"), 0)

    def test_handed_to_a_waiter_that_left(self):
        """A ticket handed the name after its waiter left (the cancel had
        not run yet) is released by its broker, and the name goes on to
        the next ticket."""
        other = self.start_broker(self.conf, name="other")
        h = self.client()
        self.assertRegex(h.cmd("ACQUIRE g"), r"^OK ")
        gone, nxt = self.client(other), self.client(other)
        gone.send("ACQUIRE g")
        wait_for(lambda: self.queued("g") == 1)
        nxt.send("ACQUIRE g")
        wait_for(lambda: self.queued("g") == 2)
        # Keep the cancel from running: the ticket stays first.
        first = self.redis("ZRANGE", QUEUE % "g", 0, 0)[0]
        gone.close()
        wait_for(lambda: waiters(other) == 1)
        self.redis("ZADD", QUEUE % "g", 0, first)
        self.redis("HSET", "lockbroker:{g}:tickets", first,
                   "tok-gone 60000 EXCLUSIVE x 0@- 0")
        start = time.monotonic()
        self.assertEqual(h.cmd("RELEASE g"), "OK")
        self.assertRegex(nxt.line(), r"^OK ")
        # Not left to the hand-over's 500 ms lease: released at once.
        self.assertLess(time.monotonic() - start, 0.4 * LATE)

    def test_leaving_while_confirming_a_hand_over(self):
        """A waiter whose connection closes while its broker confirms
        another broker's hand-over to it has left: its broker asks
        nothing more for it and keeps serving everyone. (It took such a
        waiter for a try-once still on its first try; that try-once took
        its place again at every answer, and with its Redis link cut,
        every answer came within the same turn of the loop: the broker
        answered nobody, not even INFO, and ignored SIGTERM.)"""
        import os
        import sys
        from lbtest import Broker
        sys.path.insert(0, os.path.join(os.path.dirname(
            os.path.abspath(__file__)), "..", "chaos"))
        from proxy import Proxy
        px = Proxy(self.redis.port, name="to-b1")
        self.addCleanup(px.stop)
        # Its retries far apart: the waiter's first try is its only one.
        b1 = Broker(self.tmpdir, px.port,
                    {"locks": {"retry_min_ms": 30000, "retry_max_ms": 30000},
                     "redis": {"command_timeout_ms": 5000 * LATE}},
                    name="b1")
        self.brokers.append(b1)
        self.addCleanup(self._kill, b1)
        h = self.client()
        self.assertRegex(h.cmd("ACQUIRE n TTL 20000"), r"^OK ")
        a = b1.client()
        a.send("ACQUIRE n WAIT 60000")
        wait_for(lambda: self.queued("n") == 1)
        # b1 hears of the hand-over 1.5 s late and its confirmation
        # (EXTEND) takes 1.5 s each way: in Redis when the waiter leaves.
        px.set_mode("delay", delay_ms=1500)
        self.assertEqual(h.cmd("RELEASE n"), "OK")
        # b1 has the news and sends its confirmation (1.5 s to Redis);
        # the waiter leaves meanwhile, and b1 reads that it has.
        b1.wait_info("handovers_in_total", 1)
        self.hang_up(a, b1)
        self.assertIsNotNone(px.reset())  # the confirmation gets no answer
        px.set_mode("pass")
        # It serves: INFO, then a try-once, once Redis is back for it.
        wait_for(lambda: b1.info()["waiters"] == "0", 10 * SLOW)
        c = b1.client()
        wait_for(lambda: c.cmd("ACQUIRE other WAIT 0").startswith("OK "),
                 10 * SLOW, 0.05)
        c.close()

    def test_handed_to_a_gone_waiter_whose_token_asks_again(self):
        """A hand-over to a waiter that left is released by its broker,
        unless its token asks again there meanwhile (a client retrying
        with its own TOKEN): that ACQUIRE runs first in Redis and finds
        the grant its token's, and the release must not delete it from
        under the OK (found by a review: both held the name). The broker
        is stopped so that the three reach it in that order."""
        other = self.start_broker(self.conf, name="other")
        third = self.start_broker(self.conf, name="third")
        h, a = self.client(), self.client(other)
        d, c = self.client(other), self.client(third)
        self.assertRegex(h.cmd("ACQUIRE r"), r"^OK ")
        a.send("ACQUIRE r TOKEN mine WAIT 5000")
        wait_for(lambda: self.queued("r") == 1)
        c.send("ACQUIRE r WAIT 3000")
        wait_for(lambda: self.queued("r") == 2)
        ports = redis_conn_ports(other, self.redis.port)

        def news():  # what Redis sent other, unread
            return sum(tcp_unread(p, self.redis.port) for p in ports)
        a_port, d_port = (c.sock.getsockname()[1] for c in (a, d))
        other.proc.send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: stopped(other.proc.pid), what="other stopped")
            a.close()
            wait_until(lambda: tcp_peer_closed(other.port, a_port),
                       what="a's end in other's socket")
            d.send("ACQUIRE r TOKEN mine TTL 5000 WAIT 3000")
            wait_until(lambda: tcp_unread(other.port, d_port) > 0,
                       what="d's ACQUIRE in other's socket")
            before = news()
            self.assertEqual(h.cmd("RELEASE r"), "OK")
            wait_until(lambda: news() > before,
                       what="the hand-over in other's socket")
        finally:
            other.proc.send_signal(signal.SIGCONT)
        self.assertRegex(d.line(), r"^OK \d+ 5000 mine$")
        # Through other's Redis connection, after any release it sent.
        self.assertRegex(d.cmd("STATUS r"), r"^OK HELD ")
        self.assertTrue(self.redis("GET", "lockbroker:{r}").startswith(
            "mine "))
        self.assertEqual(d.cmd("RELEASE r"), "OK")
        self.assertRegex(c.line(), r"^OK ")

    def test_killed_broker_stalls_the_queue_a_bounded_time(self):
        """A broker killed with SIGKILL while its clients queue first: the
        others are granted within 2 x retry_max_ms + command_timeout_ms of
        its last try, plus a retry (docs/protocol.md §4, Waiting)."""
        dead = self.start_broker(self.conf, name="dead")
        h = self.client()
        self.assertRegex(h.cmd("ACQUIRE k"), r"^OK ")
        for _ in range(3):
            self.client(dead).send("ACQUIRE k")
        wait_for(lambda: self.queued("k") == 3)
        w = self.client()
        w.send("ACQUIRE k")
        wait_for(lambda: self.queued("k") == 4)
        dead.proc.send_signal(signal.SIGKILL)
        dead.proc.wait()
        self.brokers.remove(dead)
        start = time.monotonic()
        self.assertEqual(h.cmd("RELEASE k"), "OK")
        self.assertRegex(w.line(), r"^OK ")
        took = time.monotonic() - start
        bound = (2 * 200 + 500 + STEP + 200) / 1000
        self.assertLess(took, bound * LATE + 0.3, took)
        self.assertEqual(self.queued("k"), 0)


if __name__ == "__main__":
    main()

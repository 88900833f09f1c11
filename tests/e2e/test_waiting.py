"""Waiting without polling: FIFO queues, handoff across brokers, deadlines."""

import os
import re
import signal
import select
import socket
import threading
import time

from lbtest import LATE, STEP, BrokerTest, main, wait_for, wait_until


def waiters(broker):
    return int(broker.info()["waiters"])


class Waiting(BrokerTest):
    conf = {"locks": {"retry_min_ms": 400, "retry_max_ms": 1000}}

    def evalsha_calls(self):
        r = self.redis.connect()
        try:
            stats = r("INFO", "commandstats")
        finally:
            r.close()
        m = re.search(r"cmdstat_evalsha:calls=(\d+)", stats)
        return int(m.group(1)) if m else 0

    def test_fifo_ten_clients_no_overlap(self):
        holder = self.client()
        self.assertRegex(holder.cmd("ACQUIRE q"), r"^OK ")
        clients = [self.client() for _ in range(10)]
        events, lock = [], threading.Lock()

        def run(i, c):
            reply = c.line()  # the grant, whenever it comes
            with lock:
                events.append(("grant", i, time.monotonic(), reply))
            # The hold itself, the workload's: a holder's work takes a
            # while, and no event ends it.
            time.sleep(0.02)
            with lock:
                events.append(("release", i, time.monotonic(), None))
            self.assertEqual(c.cmd("RELEASE q"), "OK")

        threads = []
        for i, c in enumerate(clients):
            c.send("ACQUIRE q")
            wait_for(lambda: waiters(self.broker) == i + 1)
            t = threading.Thread(target=run, args=(i, c))
            t.start()
            threads.append(t)
        self.assertEqual(holder.cmd("RELEASE q"), "OK")
        for t in threads:
            t.join(30)
        grants = [e for e in events if e[0] == "grant"]
        self.assertEqual([g[1] for g in grants], list(range(10)))
        for g in grants:
            self.assertRegex(g[3], r"^OK \d+ ")
        fences = [int(g[3].split()[1]) for g in grants]
        self.assertEqual(fences, sorted(set(fences)))
        # Each grant came after the previous holder let go.
        order = [(e[0], e[1]) for e in sorted(events, key=lambda e: e[2])]
        self.assertEqual(order, [(k, i) for i in range(10)
                                 for k in ("grant", "release")])
        self.assertEqual(waiters(self.broker), 0)

    def test_wait_deadline(self):
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE d"), r"^OK ")
        start = time.monotonic()
        self.assertEqual(b.cmd("ACQUIRE d WAIT 250"), "TIMEOUT")
        took = time.monotonic() - start
        self.assertGreaterEqual(took, 0.250)
        self.assertLess(took, 0.300)
        self.assertEqual(waiters(self.broker), 0)
        # Requests behind a waiting ACQUIRE wait for it, in order.
        b.send("ACQUIRE d WAIT 100\nPING\nSTATUS d")
        self.assertEqual(b.line(), "TIMEOUT")
        self.assertEqual(b.line(), "PONG")
        self.assertRegex(b.line(), r"^OK HELD ")

    def test_try_once_does_not_jump_the_queue(self):
        a, b, c = self.client(), self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE j"), r"^OK ")
        b.send("ACQUIRE j")
        wait_for(lambda: waiters(self.broker) == 1)
        self.assertEqual(c.cmd("ACQUIRE j WAIT 0"), "TIMEOUT")
        self.assertEqual(a.cmd("RELEASE j"), "OK")
        self.assertRegex(b.line(), r"^OK ")

    def test_waiter_that_leaves_leaves_the_queue(self):
        a, b, c = self.client(), self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE w"), r"^OK ")
        b.send("ACQUIRE w")
        wait_for(lambda: waiters(self.broker) == 1)
        c.send("ACQUIRE w WAIT 5000")
        wait_for(lambda: waiters(self.broker) == 2)
        b.close()
        wait_for(lambda: waiters(self.broker) == 1)
        self.assertEqual(a.cmd("RELEASE w"), "OK")
        self.assertRegex(c.line(), r"^OK ")
        self.assertEqual(self.redis("EXISTS", "lockbroker:{w}"), 1)

    def test_cancel_ends_a_wait_and_keeps_the_connection(self):
        """CANCEL ends the wait in progress (CANCELLED, then its own OK);
        the connection's other locks stay, its place in the queue goes
        (the next waiter is granted at the release), and the connection
        goes on serving."""
        a, b, c = self.client(), self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE cw"), r"^OK ")
        self.assertRegex(b.cmd("ACQUIRE other"), r"^OK ")
        b.send("ACQUIRE cw WAIT 30000")
        wait_for(lambda: waiters(self.broker) == 1)
        c.send("ACQUIRE cw WAIT 30000")
        wait_for(lambda: waiters(self.broker) == 2)
        t0 = time.monotonic()
        b.send("CANCEL")
        self.assertEqual(b.line(), "CANCELLED")
        self.assertEqual(b.line(), "OK")
        self.assertLess(time.monotonic() - t0, 0.2 * LATE)
        self.assertEqual(waiters(self.broker), 1)
        self.assertEqual([l.split()[1] for l in b.until_end("LOCKS")
                          if l.startswith("LOCK ")], ["other"])
        self.assertEqual(a.cmd("RELEASE cw"), "OK")
        self.assertRegex(c.line(), r"^OK ")
        # Nothing in flight: CANCEL is answered OK and changes nothing.
        self.assertEqual(b.cmd("CANCEL"), "OK")
        self.assertEqual(self.broker.info()["cancels_total"], "1")
        self.assertEqual(b.cmd("RELEASE other"), "OK")

    def test_cancel_in_the_same_write_and_behind_other_requests(self):
        """ACQUIRE and CANCEL in one write: the wait is cancelled. A
        CANCEL pipelined behind another request is an ordinary request
        in its turn: it cancels nothing."""
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE cs"), r"^OK ")
        b.send("ACQUIRE cs WAIT 30000\r\nCANCEL\r\n")
        self.assertEqual(b.line(), "CANCELLED")
        self.assertEqual(b.line(), "OK")
        b.send("ACQUIRE cs WAIT 700\nPING\nCANCEL")
        self.assertEqual(b.line(), "TIMEOUT")
        self.assertEqual(b.line(), "PONG")
        self.assertEqual(b.line(), "OK")
        self.assertEqual(a.cmd("RELEASE cs"), "OK")

    def test_cancel_with_blanks_and_after_an_empty_line(self):
        """Blanks around the word and empty lines before it are ignored,
        as for any request (docs/protocol.md §1)."""
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE cb"), r"^OK ")
        for cancel in (" CANCEL", "cancel \t", "\n\r\nCANCEL"):
            b.send("ACQUIRE cb WAIT 30000")
            wait_for(lambda: waiters(self.broker) == 1)
            b.send(cancel)
            self.assertEqual(b.line(), "CANCELLED")
            self.assertEqual(b.line(), "OK")
        self.assertEqual(a.cmd("RELEASE cb"), "OK")

    def test_try_once_behind_a_cancelled_wait_is_answered_at_end_of_input(self):
        """A cancelled waiter's try may still be in Redis when a try-once
        behind it is read and the input ends: the try-once is no wait, so
        it and every line after it are answered before the close (§1)."""
        for _ in range(5):
            c = self.client()
            c.send("ACQUIRE ph WAIT 30000\nCANCEL\nACQUIRE ph WAIT 0\n"
                   "PING")
            c.sock.shutdown(socket.SHUT_WR)
            self.assertEqual(c.line(), "CANCELLED")
            self.assertEqual(c.line(), "OK")
            self.assertRegex(c.line(), r"^(OK \d+ |TIMEOUT$)")
            self.assertEqual(c.line(), "PONG")
            self.assertRaises(ConnectionError, c.line)
            wait_for(lambda: self.redis("EXISTS", "lockbroker:{ph}") == 0)

    def test_cancel_of_a_waiter_on_a_busy_broker_queue(self):
        """A cancelled waiter on another broker than the holder's gives
        up its ticket: the name goes to the next waiter, not to nobody
        for a hand-over lease."""
        other = self.start_broker(self.conf, name="other")
        a, b, c = self.client(), self.client(other), self.client()
        self.assertRegex(a.cmd("ACQUIRE cq"), r"^OK ")
        b.send("ACQUIRE cq WAIT 30000")
        wait_for(lambda: waiters(other) == 1)
        self.wait_queued("cq")  # its try has queued its ticket in Redis
        c.send("ACQUIRE cq WAIT 30000")
        wait_for(lambda: waiters(self.broker) == 1)
        self.assertEqual(b.cmd("CANCEL"), "CANCELLED")
        self.assertEqual(b.line(), "OK")
        t0 = time.monotonic()
        self.assertEqual(a.cmd("RELEASE cq"), "OK")
        self.assertRegex(c.line(), r"^OK ")
        self.assertLess(time.monotonic() - t0, 0.5 * LATE)

    def test_local_handoff_is_immediate(self):
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE h"), r"^OK ")
        b.send("ACQUIRE h")
        wait_for(lambda: waiters(self.broker) == 1)
        self.wait_queued("h")  # its first try is done
        start = time.monotonic()
        self.assertEqual(a.cmd("RELEASE h"), "OK")
        self.assertRegex(b.line(), r"^OK ")
        self.assertLess(time.monotonic() - start, 0.020 * LATE)

    def test_local_release_hands_over_without_freeing(self):
        sub = self.redis.connect()
        self.addCleanup(sub.close)
        self.assertEqual(sub("SUBSCRIBE", "lockbroker:released")[0],
                         "subscribe")
        a, b = self.client(), self.client()
        fence = int(a.cmd("ACQUIRE ho").split()[1])
        calls = self.evalsha_calls()
        b.send("ACQUIRE ho")
        wait_for(lambda: waiters(self.broker) == 1)
        self.wait_queued("ho")
        # Held here: the waiter took its place in the queue every broker
        # shares (one script), then leaves Redis alone until the release.
        self.assertEqual(self.evalsha_calls(), calls + 1)
        self.assertEqual(self.redis("ZCARD", "lockbroker:{ho}:queue"), 1)
        self.assertEqual(a.cmd("RELEASE ho"), "OK")
        self.assertGreater(int(b.line().split()[1]), fence)
        # One script did it (release and grant): never free, nothing said.
        self.assertEqual(self.evalsha_calls(), calls + 2)
        self.assertEqual(self.redis("ZCARD", "lockbroker:{ho}:queue"), 0)
        self.assertEqual(select.select([sub.sock], [], [], 0.2)[0], [])
        # Nobody else waits: a release says nothing either.
        self.assertEqual(b.cmd("RELEASE ho"), "OK")
        self.assertEqual(select.select([sub.sock], [], [], 0.2)[0], [])
        # A waiter on another broker: the release hands it the name with
        # one message on that broker's own channel; nothing is broadcast.
        psub = self.redis.connect()
        self.addCleanup(psub.close)
        self.assertEqual(psub("PSUBSCRIBE", "lockbroker:to:*")[0],
                         "psubscribe")
        self.assertRegex(a.cmd("ACQUIRE ho"), r"^OK ")
        other = self.start_broker(self.conf, name="other")
        c = self.client(other)
        c.send("ACQUIRE ho")
        wait_for(lambda: self.redis("ZCARD", "lockbroker:{ho}:queue") == 1)
        self.assertEqual(a.cmd("RELEASE ho"), "OK")
        m = psub._read()
        self.assertEqual(m[:2], ["pmessage", "lockbroker:to:*"])
        w = m[3].split()
        self.assertEqual(w[0], "ho")
        self.assertRegex(c.line(), r"^OK %s " % w[2])
        if select.select([sub.sock], [], [], 0.2)[0]:
            self.fail("published: %r" % (sub._read(),))

    def test_wrong_token_release_does_not_end_a_wait(self):
        a, b, c = self.client(), self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE wt"), r"^OK ")
        b.send("ACQUIRE wt WAIT 3000")
        wait_for(lambda: waiters(self.broker) == 1)
        self.assertRegex(c.cmd("RELEASE wt TOKEN nottheholder"),
                         r"^ERR NOTHELD ")
        # Past whatever Redis answered the broker before (one connection,
        # in order): still held, still waiting.
        self.assertRegex(c.cmd("STATUS wt"), r"^OK HELD ")
        self.assertEqual(waiters(self.broker), 1)
        self.assertEqual(a.cmd("RELEASE wt"), "OK")
        self.assertRegex(b.line(), r"^OK ")

    def test_two_brokers_handoff_over_pubsub(self):
        other = self.start_broker(self.conf, name="other")
        a, b = self.client(), self.client(other)
        self.assertRegex(a.cmd("ACQUIRE x"), r"^OK ")
        b.send("ACQUIRE x")
        wait_for(lambda: waiters(other) == 1)
        # Its first try is done; the next is >= 200 ms out.
        self.wait_queued("x")
        start = time.monotonic()
        a.send("RELEASE x")
        self.assertRegex(b.line(), r"^OK ")
        took = time.monotonic() - start
        self.assertEqual(a.line(), "OK")
        self.assertLess(took, 0.020 * LATE)

    def test_timed_out_waiter_grant_is_undone(self):
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE u TTL 150"), r"^OK ")
        # The lease runs out just as the wait does; whatever wins, the
        # lock is not left held by nobody.
        self.assertIn(b.cmd("ACQUIRE u WAIT 150").split()[0], ("OK", "TIMEOUT"))
        # A grant that lost the race is undone in Redis, in good time
        # (far sooner than a lease would end it).
        wait_until(lambda: not self.redis("EXISTS", "lockbroker:{u}") or
                   len(b.until_end("LOCKS")) == 1, 2,
                   "u free, or b's")


class Churn(BrokerTest):
    """Waiters that time out, leave mid-attempt and come back, on two
    brokers at once: the broker must stay consistent and lose nothing."""

    conf = {"locks": {"lease_ms": 200, "retry_min_ms": 1, "retry_max_ms": 20}}

    def test_churn(self):
        import random
        other = self.start_broker(self.conf, name="other")
        rng = random.Random(7)
        stop = time.monotonic() + 3.0
        errors = []

        def worker(seed):
            r = random.Random(seed)
            broker = self.broker if seed % 2 else other
            c = broker.client()
            try:
                while time.monotonic() < stop:
                    name = "c%d" % r.randrange(3)
                    line = "ACQUIRE %s WAIT %d" % (name, r.randrange(0, 40))
                    if r.random() < 0.3:
                        line += " TTL %d" % r.randrange(10, 100)
                    if r.random() < 0.2:
                        c.send(line)  # and leave while it is in flight
                        c.close()
                        c = broker.client()
                        continue
                    reply = c.cmd(line)
                    if reply.startswith("EVENT LOST"):
                        reply = c.line()
                    if reply.startswith("OK"):
                        # The hold itself, the workload's: a holder's work takes a
                        # while, and no event ends it.
                        time.sleep(r.random() * 0.01)
                        rel = c.cmd("RELEASE " + name)
                        if rel.startswith("EVENT LOST"):
                            rel = c.line()
                        if rel not in ("OK",) and not rel.startswith("ERR NOTHELD"):
                            errors.append(rel)
                    elif reply != "TIMEOUT":
                        errors.append(reply)
            except OSError as e:
                errors.append(repr(e))
            finally:
                c.close()

        threads = [threading.Thread(target=worker, args=(rng.random(),))
                   for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        self.assertEqual(errors, [])
        for b in (self.broker, other):
            wait_for(lambda: b.info()["waiters"] == "0", 5)
            wait_for(lambda: b.info()["locks_held"] == "0", 5)
        wait_for(lambda: not self.redis("KEYS", "lockbroker:{c?}"), 5)


class TwoBrokersKill(BrokerTest):
    conf = {"locks": {"lease_ms": 1000}}

    def test_kill_9_holder_broker(self):
        other = self.start_broker(name="other")
        a, b = self.client(), self.client(other)
        self.assertRegex(a.cmd("ACQUIRE k"), r"^OK ")
        b.send("ACQUIRE k")
        wait_for(lambda: waiters(other) == 1)
        self.wait_queued("k")
        start = time.monotonic()
        self.broker.proc.send_signal(signal.SIGKILL)
        self.broker.proc.wait()
        self.brokers.remove(self.broker)
        self.assertRegex(b.line(), r"^OK ")
        took = time.monotonic() - start
        # The lease, and its margin in Redis for a step of Redis's clock.
        self.assertLess(took, 1.0 + STEP / 1000 + 0.1)


class Limits(BrokerTest):
    conf = {"limits": {"max_waiters": 2}}

    def test_max_waiters(self):
        a = self.client()
        self.assertRegex(a.cmd("ACQUIRE m"), r"^OK ")
        w1, w2, w3 = self.client(), self.client(), self.client()
        w1.send("ACQUIRE m")
        w2.send("ACQUIRE m WAIT 10000")
        wait_for(lambda: waiters(self.broker) == 2)
        self.assertEqual(w3.cmd("ACQUIRE m"), "ERR LIMIT too many waiters")
        self.assertEqual(w3.cmd("ACQUIRE m WAIT 0"), "TIMEOUT")
        self.assertEqual(a.cmd("RELEASE m"), "OK")
        self.assertRegex(w1.line(), r"^OK ")


class DefaultWait(BrokerTest):
    conf = {"locks": {"default_wait_ms": 200}}

    def test_default_wait_applies_without_wait(self):
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE dw"), r"^OK ")
        start = time.monotonic()
        self.assertEqual(b.cmd("ACQUIRE dw"), "TIMEOUT")
        self.assertGreaterEqual(time.monotonic() - start, 0.2)

    def test_wait_minus_one_waits_until_granted(self):
        # -1 means "until granted" in WAIT as in locks.default_wait_ms;
        # other negatives and fractions stay ERR ARGS.
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE wm"), r"^OK ")
        b.send("ACQUIRE wm WAIT -1")
        # Nothing is said until well past the 200 ms default.
        self.assertEqual(select.select([b.sock], [], [], 0.5)[0], [])
        self.assertEqual(a.cmd("RELEASE wm"), "OK")
        self.assertRegex(b.line(), r"^OK ")
        for bad in ("WAIT -2", "WAIT 1.5", "WAIT -1.0"):
            self.assertEqual(
                a.cmd("ACQUIRE wm2 " + bad),
                "ERR ARGS WAIT wants milliseconds, a plain decimal", bad)


if __name__ == "__main__":
    main()

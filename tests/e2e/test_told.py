"""What a holder is told, and when, where a token is shared or answers
race, against a real Redis: news of a release heard before the grant's
own answer; a token asking in the other family, asking again and leaving,
or released from another connection; a same-token grant that misses its
replicas; a token's grant through two brokers, one lease ending; the
broker itself paused past a lease; and every waiter told ERR SHUTDOWN when
the broker stops. The helpers and TruthBase are test_truth.py's."""

import signal
import socket
import struct
import tempfile
import time

from lbtest import LATE, SLOW, Redis, main, tcp_unread, wait_for, wait_until
from test_truth import (KEY, LOST_RE, TruthBase, fence_of, locks_of,
                        next_line, read_until)


def drain(c, timeout):
    """The lines c gets within timeout seconds of quiet."""
    out = []
    while True:
        line = next_line(c, timeout)
        if line is None:
            return out
        out.append(line)


class NewsBeforeAnswer(TruthBase):
    conf = {"redis": {"command_timeout_ms": 3000}}

    def test_release_heard_before_the_grants_answer(self):
        """Another broker's '<name> released <fence> <broker>' reached the
        subscriber before the grant's own answer reached the command
        connection: the holder must be told all the same."""
        other = self.start_broker(self.conf, name="other")
        for i in range(3):
            a, z = self.client(), self.client(other)
            woke = self.stall_redis(None)
            self.send_into_stall(a, "ACQUIRE x%d TTL 60000 TOKEN T%d" %
                                 (i, i))
            self.send_into_stall(z, "RELEASE x%d TOKEN T%d" % (i, i),
                                 broker=other)
            woke()
            self.assertGreater(fence_of(a.line()), 0)
            self.assertEqual(z.line(), "OK")
            self.assert_lost(a, "x%d" % i, ("revoked",), 2 * LATE)
            self.assertEqual(locks_of(a), [])


class SameTokenBookkeeping(TruthBase):
    conf = {"redis": {"command_timeout_ms": 2000}}

    def test_other_family_keeps_the_hold(self):
        """A token asking for its name in the other family gets ERR ARGS
        and keeps what it holds: its request changes no lease."""
        a = self.client()
        f1 = fence_of(a.cmd("ACQUIRE x TTL 60000 TOKEN T"))
        self.assertEqual(a.cmd("ACQUIRE x SHARED TTL 100 TOKEN T"),
                         "ERR ARGS this token holds it exclusively")
        # Nothing said for well past a 100 ms lease.
        self.assertEqual(drain(a, 0.6), [])
        self.assertEqual(locks_of(a), ["x"])
        self.assertGreater(self.redis("PTTL", KEY % "x"), 50000)

    def test_regrant_whose_client_left_is_released(self):
        """A holder re-sends its ACQUIRE with its token and resets the
        connection while it is in Redis: the grant nobody wants is
        released, not left for its whole lease."""
        a, c = self.client(), self.client()
        f1 = fence_of(a.cmd("ACQUIRE x TTL 60000 TOKEN T"))
        woke = self.stall_redis(None)
        self.send_into_stall(a, "ACQUIRE x TTL 60000 TOKEN T")
        a.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                          struct.pack("ii", 1, 0))
        a.sock.close()
        self.clients.remove(a)
        woke()
        wait_for(lambda: self.redis("EXISTS", KEY % "x") == 0, 5 * SLOW)
        self.assertGreater(fence_of(c.cmd("ACQUIRE x WAIT 0")), f1)

    def test_release_tells_the_tokens_other_holds_when_sent(self):
        """A RELEASE by token from another connection: the holder is told
        when it is sent, not after Redis answers (the grant may be gone at
        any moment from then)."""
        a, b = self.client(), self.client()
        f1 = fence_of(a.cmd("ACQUIRE x TTL 60000 TOKEN T"))
        woke = self.stall_redis(1)
        b.send("RELEASE x TOKEN T")
        line, _ = read_until(a, LOST_RE, 0.5 * LATE)
        self.assertIsNotNone(line, "not told while Redis ran the RELEASE")
        self.assertEqual(line, "EVENT LOST x %d revoked" % f1)
        woke()
        self.assertEqual(b.line(), "OK")


class Replicated(TruthBase):
    # WAIT's timeout is half the command timeout: 1 s, so that a loaded
    # machine's replica still confirms the grant the test expects to be.
    conf = {"redis": {"wait_replicas": 1, "command_timeout_ms": 2000},
            "locks": {"retry_min_ms": 1500, "retry_max_ms": 3000}}

    def setUp(self):
        self.replica = None
        super().setUp()

    def start_broker(self, conf=None, name="broker"):
        if self.replica is None:
            self.replica = Redis(tempfile.mkdtemp(dir=self.tmpdir), extra=[
                "--replicaof", "127.0.0.1", str(self.redis.port)])
            self.addCleanup(self.replica.kill)
            self.addCleanup(self.replica.proc.send_signal, signal.SIGCONT)
            wait_for(lambda: "master_link_status:up" in
                     self.replica("INFO", "replication"))
            # Its first replica gave the master a new replication id.
            self.redis.seed_incarnation()
        return super().start_broker(conf, name)

    def test_unreplicated_regrant_spares_the_hold(self):
        """A waiter with the token of a hold here gets the same grant back
        but misses redis.wait_replicas: the grant it shares with the hold
        is not released."""
        z, a, b = self.client(), self.client(), self.client()
        f1 = fence_of(z.cmd("ACQUIRE x TOKEN Z"))
        a.send("ACQUIRE x TOKEN T WAIT 30000")
        self.broker.wait_info("waiters", 1)
        self.wait_queued("x")  # its first try is done
        b.send("ACQUIRE x TOKEN T WAIT 30000")
        self.broker.wait_info("waiters", 2)
        self.assertEqual(z.cmd("RELEASE x"), "OK")
        self.assertGreater(fence_of(a.line()), f1)
        self.replica.proc.send_signal(signal.SIGSTOP)
        self.assertRegex(b.line(), r"^ERR UNAVAILABLE ")
        self.assertIsNotNone(self.redis("GET", KEY % "x"),
                             "the failed WAIT released A's grant")
        self.assertEqual(locks_of(a), ["x"])


class CrossBrokerExpiry(TruthBase):
    conf = {"redis": {"command_timeout_ms": 1000}}

    def test_expiry_here_leaves_a_grant_brokers_share(self):
        """A holds a token's grant through broker 1 with a short lease, B
        the same token through broker 2 with a long one: A's expiry must
        not release what B still holds."""
        other = self.start_broker(self.conf, name="other")
        a, b = self.client(), self.client(other)
        f1 = fence_of(a.cmd("ACQUIRE x TTL 1000 TOKEN T"))
        self.assertEqual(fence_of(b.cmd("ACQUIRE x TTL 60000 TOKEN T")), f1)
        self.assert_lost(a, "x", ("expired",), 3 * LATE)
        self.assertEqual(drain(b, 0.5), [])
        self.assertEqual(locks_of(b), ["x"])
        self.assertIsNotNone(self.redis("GET", KEY % "x"))


class PausedBroker(TruthBase):

    def test_locks_after_a_pause_does_not_list_an_expired_hold(self):
        """The broker itself paused (SIGSTOP, a VM stall) past a hold's
        validity while LOCKS waited in its socket: when it runs again the
        request may be read before the expiry timer runs, and must still
        not list the hold; EVENT LOST comes first."""
        c = self.client()
        self.assertRegex(c.cmd("ACQUIRE p TTL 300"), r"^OK ")
        self.assertRegex(c.cmd("ACQUIRE q TTL 60000"), r"^OK ")
        self.broker.proc.send_signal(signal.SIGSTOP)
        try:
            # The pause itself, past p's 300 ms: its length is the test.
            time.sleep(0.5)
            c.send("LOCKS")
            port = c.sock.getsockname()[1]
            wait_until(lambda: tcp_unread(self.broker.port, port) > 0,
                       what="LOCKS in the paused broker's socket")
        finally:
            self.broker.proc.send_signal(signal.SIGCONT)
        end, before = read_until(c, r"^END$", 5 * SLOW)
        self.assertIsNotNone(end, before)
        self.assertRegex(before[0], r"^EVENT LOST p \d+ expired$")
        self.assertEqual([l.split()[1] for l in before
                          if l.startswith("LOCK ")], ["q"])


class StopWithManyWaiters(TruthBase):
    conf = {"limits": {"max_clients": 2000}}

    def test_every_waiter_hears_shutdown(self):
        """SIGTERM with many waiters on many names: the name table must
        not shrink under the walk that tells them ERR SHUTDOWN."""
        n = 600
        ws = []
        # Held in Redis by nobody here: each name lives only through its
        # waiter, and goes (the table may shrink) as it is told.
        for i in range(n):
            self.redis("SET", KEY % ("n%d" % i), "someone", "PX", 60000)
        for i in range(n):
            w = self.client()
            w.send("ACQUIRE n%d" % i)
            ws.append(w)
        wait_for(lambda: self.broker.info().get("waiters") == str(n),
                 10 * SLOW)
        self.broker.proc.send_signal(signal.SIGTERM)
        got = {}
        for w in ws:
            try:
                line = w.line()
            except (ConnectionError, OSError):
                line = "<closed, no reply>"
            got[line] = got.get(line, 0) + 1
        self.assertEqual(got, {"ERR SHUTDOWN the broker is stopping": n})
        self.assertEqual(self.broker.stop(), 0)


if __name__ == "__main__":
    main()

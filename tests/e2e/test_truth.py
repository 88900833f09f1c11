"""The truth of LOCKS: while a client lists a name in LOCKS and has not been
told EVENT LOST, nobody else holds that name. Regression tests for the ways
a slow, paused or partly disconnected Redis (or a release through another
broker) let a broker keep trusting a hold that Redis no longer gave it, and
for the fixes that came with them (fenced owed releases, VALIDATE with a
token, a corrupt fence counter, a try-once FILL that spun on Redis).

Redis runs with --enable-debug-command so that a test can stall it with
DEBUG SLEEP (sent on a raw socket, the reply read only afterwards) and make
one of the broker's requests time out while Redis still runs it."""

import os
import re
import select
import shutil
import signal
import socket
import tempfile
import time

from lbtest import (LATE, SLOW, STEP, BrokerTest, Redis, Resp, holds_for,
                    main, port_of, redis_conn_ports, tcp_unread, wait_for,
                    wait_until)

ADMIN = "adm1n-secret"
OK_RE = r"^OK (\d+) (\d+) (\S+)$"
LOST_RE = r"^EVENT LOST (\S+) (\d+) (\S+)$"
KEY = "lockbroker:{%s}"


def fence_of(reply):
    """The fence of an `OK <fence> <ttl_ms> <token>` grant."""
    m = re.match(OK_RE, reply)
    assert m, "not a grant: %r" % reply
    return int(m.group(1))


def next_line(c, timeout):
    """The client's next line within timeout seconds, or None."""
    end = time.monotonic() + timeout
    while b"\n" not in c.buf:
        left = end - time.monotonic()
        if left <= 0 or not select.select([c.sock], [], [], left)[0]:
            return None
        chunk = c.sock.recv(65536)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        c.buf += chunk
    line, c.buf = c.buf.split(b"\n", 1)
    return line.decode(errors="replace")


def read_until(c, pattern, timeout):
    """Read lines until one matches pattern (a regex): (match, lines read
    before it); (None, lines) if none came within timeout seconds."""
    end = time.monotonic() + timeout
    seen = []
    while True:
        line = next_line(c, max(0.0, end - time.monotonic()))
        if line is None:
            return None, seen
        if re.match(pattern, line):
            return line, seen
        seen.append(line)


def locks_of(c):
    """The names in the client's LOCKS (an EVENT line on the way is
    skipped)."""
    return [l.split()[1] for l in c.until_end("LOCKS")
            if l.startswith("LOCK ")]


def resp_send(r, *args):
    """Send a command on a raw Resp connection without reading its reply
    (read it later with r._read())."""
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    r.sock.sendall(out)


class TruthBase(BrokerTest):
    conf = {"redis": {"command_timeout_ms": 200}}

    def setUp(self):
        # BrokerTest.setUp, with a Redis that takes DEBUG SLEEP.
        self.tmpdir = tempfile.mkdtemp(prefix="lbtest-")
        self.addCleanup(shutil.rmtree, self.tmpdir, ignore_errors=True)
        self.redis = Redis(self.tmpdir,
                           extra=["--enable-debug-command", "yes"])
        self.addCleanup(self.redis.kill)
        self.clients = []
        self.brokers = []
        self.broker = self.start_broker(self.conf)

    def stall_redis(self, seconds):
        """DEBUG SLEEP on a raw socket, without waiting for its reply:
        Redis runs nothing else meanwhile. Returns a function that waits
        for the sleep to end. With seconds None, Redis is stopped
        (SIGSTOP) until that function is called: for a test that must see
        a request arrive in the stall, however long the machine's load
        makes the broker take to send it."""
        if seconds is None:
            os.kill(self.redis.proc.pid, signal.SIGSTOP)
            state = {"done": False}

            def resume():
                if not state["done"]:
                    state["done"] = True
                    os.kill(self.redis.proc.pid, signal.SIGCONT)
            self.addCleanup(resume)
            return resume
        r, probe = Resp(self.redis.port), Resp(self.redis.port)
        for c in (r, probe):
            c.sock.settimeout(30 * SLOW)
            self.assertEqual(c("PING"), "PONG")  # connected and accepted
        resp_send(r, "DEBUG", "SLEEP", seconds)
        # Return once Redis sleeps: a PING sent after it is not answered.
        while True:
            resp_send(probe, "PING")
            if not select.select([probe.sock], [], [], 0.03)[0]:
                break
            self.assertEqual(probe._read(), "PONG")
        state = {"done": False}

        def wait():
            if not state["done"]:
                state["done"] = True
                assert r._read() == "OK"
                assert probe._read() == "PONG"
                r.close()
                probe.close()
        self.addCleanup(wait)
        return wait

    def send_into_stall(self, c, line, broker=None):
        """Send line on c, and wait until the broker's (c's: self.broker
        unless said) request has reached the stalled Redis (unread in its
        socket there)."""
        ports = redis_conn_ports(broker or self.broker, self.redis.port)

        def unread():
            return sum(tcp_unread(self.redis.port, p) for p in ports)
        before = unread()
        c.send(line)
        wait_until(lambda: unread() > before,
                   what="the request in the stalled Redis's socket")

    def blocked(self, broker):
        """True when a Redis connection of broker's is held by a pause."""
        ports = redis_conn_ports(broker, self.redis.port)
        return any(port_of(f["addr"]) in ports and "b" in f["flags"]
                   for f in self.redis.client_list())

    def admin(self, broker):
        c = self.client(broker)
        self.assertEqual(c.cmd("AUTH " + ADMIN), "OK")
        return c

    def assert_lost(self, c, name, reasons, timeout, what=""):
        """c is told EVENT LOST <name> ... <one of reasons> within timeout;
        returns its fence."""
        line, seen = read_until(c, LOST_RE, timeout)
        self.assertIsNotNone(
            line, "no EVENT LOST %s within %.1f s%s (got %r)" %
            (name, timeout, what, seen))
        m = re.match(LOST_RE, line)
        self.assertEqual(m.group(1), name, line)
        self.assertIn(m.group(3), reasons, line)
        return int(m.group(2))

    def evals(self):
        """How many EVALSHA and EVAL calls Redis has run."""
        info = self.redis("INFO", "commandstats")
        n = 0
        for cmd in ("evalsha", "eval"):
            m = re.search(r"cmdstat_%s:calls=(\d+)" % cmd, info)
            if m:
                n += int(m.group(1))
        return n


class OwedRelease(TruthBase):

    def test_owed_release_spares_a_newer_grant(self):
        """Case 1: a timed-out RELEASE, re-sent later, deletes only the
        grant it was meant for, not a newer grant to the same token."""
        job, third = self.client(), self.client()
        f1 = fence_of(job.cmd("ACQUIRE job TTL 60000 KEEP TOKEN job-1"))
        woke = self.stall_redis(0.35)
        self.assertRegex(job.cmd("RELEASE job TOKEN job-1"),
                         r"^ERR UNAVAILABLE ")
        # The job takes the lock again at once, same token.
        reply = job.cmd("ACQUIRE job TTL 60000 KEEP TOKEN job-1 WAIT %d" %
                        (5000 * SLOW))
        self.assertGreater(fence_of(reply), f1, reply)
        woke()
        # The broker re-sends what it owes meanwhile (its retry timer, or
        # a reconnect): grant 2 is watched across a window that covers
        # both, since a release that does not run shows no event.
        holds_for(lambda: self.redis("GET", KEY % "job") is not None, 1.5,
                  "grant 2 in Redis (the owed release of grant 1 spared it)")
        value = self.redis("GET", KEY % "job")
        self.assertTrue(value.startswith("job-1 "), value)
        self.assertEqual(third.cmd("ACQUIRE job WAIT 0"), "TIMEOUT")


class SameGrantAgain(TruthBase):
    """Found by the chaos suite's belief checker after the first fixes: a
    same-token ACQUIRE gets the same grant (same fence) back, so a fence
    alone cannot keep a release meant for it from deleting it."""
    conf = {"redis": {"command_timeout_ms": 2500},
            "locks": {"lease_ms": 1000}}

    def test_owed_release_spares_a_same_fence_regrant(self):
        """A RELEASE refused by a BUSY Redis (so it never ran) is owed; the
        client acquires again with its token and gets grant 1 back; the
        owed release must not be sent after that ACQUIRE."""
        a, c = self.client(), self.client()
        self.assertEqual(self.redis("CONFIG", "SET", "busy-reply-threshold",
                                    "100"), "OK")
        f1, token = a.cmd("ACQUIRE n TTL 8000").split()[1:4:2]
        busy = Resp(self.redis.port)
        self.addCleanup(busy.close)
        resp_send(busy, "EVAL", "while 1 do end", 0)
        wait_until(lambda: "BUSY" in str(self.redis("PING")),
                   what="Redis to answer BUSY")
        self.assertEqual(a.cmd("RELEASE n TOKEN " + token),
                         "ERR UNAVAILABLE Redis answered BUSY")
        a.send("ACQUIRE n TTL 8000 TOKEN %s WAIT %d" % (token, 5000 * SLOW))
        self.broker.wait_info("waiters", 1)  # refused BUSY, trying again
        self.assertEqual(self.redis("SCRIPT", "KILL"), "OK")
        self.assertEqual(fence_of(a.line()), int(f1))  # the same grant
        # Watched past the owed release's retry (command_timeout_ms after
        # it was refused): a release that does not run shows no event.
        holds_for(lambda: self.redis("GET", KEY % "n") is not None, 3.5,
                  "the re-grant in Redis (the owed release spared it)")
        self.assertEqual(c.cmd("ACQUIRE n WAIT 0"), "TIMEOUT")
        self.assertEqual(locks_of(a), ["n"])



class SameTokenInFlight(TruthBase):
    # clock_drift 0.5: the broker trusts half of a lease, so a hold ends
    # here while Redis still holds its key.
    conf = {"redis": {"command_timeout_ms": 2500},
            "locks": {"clock_drift": 0.5}}

    def test_lost_hold_spares_a_same_token_regrant_in_flight(self):
        """A's hold of the token ends here (its trusted half of a 1.2 s
        lease) while B's same-token ACQUIRE waits in a sleeping Redis that
        still holds the key: the broker must not release the token after
        B's ACQUIRE, which gets grant 1 back."""
        a, b, c = self.client(), self.client(), self.client()
        f1, token = a.cmd("ACQUIRE n TTL 1200").split()[1:4:2]
        # Redis sleeps across the end of the trusted half (600 ms).
        woke = self.stall_redis(0.9)
        b.send("ACQUIRE n TTL %d TOKEN %s WAIT 0" % (3000 * SLOW, token))
        self.assert_lost(a, "n", ("expired",), 2 * SLOW)
        woke()
        self.assertEqual(fence_of(b.line()), int(f1))
        # Through the broker's Redis connection, after any release it
        # sent for the lost hold (at the loss, or at B's answer).
        self.assertEqual(c.cmd("ACQUIRE n WAIT 0"), "TIMEOUT")
        self.assertIsNotNone(self.redis("GET", KEY % "n"),
                             "the lost hold's release deleted B's re-grant")
        self.assertEqual(locks_of(b), ["n"])


class SameTokenShorter(TruthBase):

    def test_same_token_shorter_lease_ends_the_first_hold(self):
        """Case 2: a same-token ACQUIRE with a shorter TTL on another
        connection shortens the first holder's validity to the new
        lease."""
        a, b, c = self.client(), self.client(), self.client()
        f = fence_of(a.cmd("ACQUIRE x TTL 60000 TOKEN T1"))
        self.assertEqual(fence_of(b.cmd("ACQUIRE x TTL 100 TOKEN T1")), f)
        self.assertEqual(
            self.assert_lost(a, "x", ("expired", "stolen", "revoked"),
                             2.0 * LATE, " for the first holder"), f)
        reply = c.cmd("ACQUIRE x WAIT %d" % (3000 * SLOW))
        self.assertRegex(reply, OK_RE)
        self.assertNotIn("x", locks_of(a))


class RevokeRecheck(TruthBase):
    conf = {"redis": {"command_timeout_ms": 200, "reconnect_min_ms": 300,
                      "reconnect_max_ms": 300}}

    def setUp(self):
        super().setUp()
        self.other = self.start_broker(
            {"auth": {"admin_secret": ADMIN},
             "redis": {"command_timeout_ms": 200}}, name="other")

    def test_revoke_heard_when_the_recheck_times_out(self):
        """Case 3a: a REVOKE published while broker 1's subscriber was
        away is told even when the check after re-subscribing gets no
        answer (writes paused) the first time."""
        a, adm = self.client(), self.admin(self.other)
        f = fence_of(a.cmd("ACQUIRE x TTL 60000"))
        self.redis("CLIENT", "KILL", "TYPE", "pubsub")
        self.assertEqual(adm.cmd("REVOKE x"), "OK 1")
        self.assertEqual(self.redis("CLIENT", "PAUSE", 700, "WRITE"), "OK")
        self.assertEqual(
            self.assert_lost(a, "x", ("revoked",), 5.0 * LATE), f)
        self.assertNotIn("x", locks_of(a))

    def broker_conns(self, broker):
        """{"cmd": id, "sub": id}: the broker's two Redis connections."""
        ports = redis_conn_ports(broker, self.redis.port)
        self.assertEqual(len(ports), 2, "expected 2 Redis connections")
        ids = {}
        for l in self.redis("CLIENT", "LIST").splitlines():
            fields = dict(kv.split("=", 1) for kv in l.split() if "=" in kv)
            if int(fields["addr"].rsplit(":", 1)[1]) in ports:
                ids["sub" if "P" in fields["flags"] else "cmd"] = fields["id"]
        self.assertEqual(sorted(ids), ["cmd", "sub"], ids)
        return ids

    def test_revoke_while_both_connections_drop(self):
        """Case 3b: broker 1 loses both Redis connections and a REVOKE
        comes through broker 2 meanwhile; the holder is told every time
        (12 trials). The subscriber goes first, the REVOKE at once, the
        command connection 0.1 s later: the subscriber is mostly back
        (150-300 ms) before the command connection, so the first check
        after re-subscribing finds no connection to send on."""
        adm = self.admin(self.other)
        r = self.redis.connect()
        self.addCleanup(r.close)
        untold = []
        for i in range(12):
            a = self.client()
            name = "x%d" % i
            f = fence_of(a.cmd("ACQUIRE %s TTL 60000" % name))
            ids = self.broker_conns(self.broker)
            self.assertEqual(r("CLIENT", "KILL", "ID", ids["sub"]), 1)
            self.assertEqual(adm.cmd("REVOKE " + name), "OK 1")
            # The fault's schedule (see above): its 0.1 s is the race.
            time.sleep(0.1)
            self.assertEqual(r("CLIENT", "KILL", "ID", ids["cmd"]), 1)
            line, _ = read_until(a, LOST_RE, 3.0 * LATE)
            if line is None:
                untold.append(i)
            else:
                self.assertRegex(line, r"^EVENT LOST %s %d (revoked|stolen)$"
                                 % (name, f))
                self.assertNotIn(name, locks_of(a))
            wait_for(lambda: self.broker.info()["redis_up"] == "1",
                     10 * SLOW)
            wait_for(lambda: len(redis_conn_ports(self.broker,
                                                  self.redis.port)) == 2,
                     10 * SLOW)
            a.close()
            self.clients.remove(a)
        self.assertEqual(untold, [], "trials whose holder was never told")


class ShorterExtend(TruthBase):

    def test_timed_out_extend_assumes_the_shorter_lease(self):
        """Case 4: an EXTEND that shortens the lease and times out still
        ran in Redis; the broker assumes the shorter lease."""
        a, c = self.client(), self.client()
        f = fence_of(a.cmd("ACQUIRE x TTL 60000"))
        woke = self.stall_redis(0.35)
        a.send("EXTEND x 100")
        line, before = read_until(a, r"^(OK|ERR)", 5 * SLOW)
        self.assertRegex(line or "", r"^ERR UNAVAILABLE ")
        woke()
        lost = [l for l in before if re.match(LOST_RE, l)]
        if not lost:
            self.assertEqual(
                self.assert_lost(a, "x", ("expired", "unavailable"),
                                 2.0 * LATE, " after the timed-out EXTEND"),
                f)
        else:
            self.assertRegex(lost[0], r"^EVENT LOST x %d " % f)
        self.assertRegex(c.cmd("ACQUIRE x WAIT %d" % (3000 * SLOW)), OK_RE)
        self.assertNotIn("x", locks_of(a))

    def test_timed_out_same_token_regrant_assumes_the_shorter_lease(self):
        """Case 4, same-token variant: a same-token ACQUIRE with a
        shorter TTL that times out still ran in Redis; the first holder is
        told its lock is lost."""
        a, b, c = self.client(), self.client(), self.client()
        f = fence_of(a.cmd("ACQUIRE y TTL 60000 TOKEN T"))
        woke = self.stall_redis(0.35)
        self.assertRegex(b.cmd("ACQUIRE y TTL 100 TOKEN T"),
                         r"^ERR UNAVAILABLE ")
        woke()
        self.assertEqual(
            self.assert_lost(a, "y", ("expired", "unavailable", "stolen",
                                      "revoked"), 2.0 * LATE), f)
        self.assertRegex(c.cmd("ACQUIRE y WAIT %d" % (3000 * SLOW)), OK_RE)
        self.assertNotIn("y", locks_of(a))


class ShorterRenewal(TruthBase):
    # Session leases of 6 s, renewed every 2 s; a reload shortens them to
    # 1.8 s (renewed every 0.6 s).
    conf = {"redis": {"command_timeout_ms": 200},
            "locks": {"lease_ms": 6000}}
    short = {"redis": {"command_timeout_ms": 200},
             "locks": {"lease_ms": 1800}}

    def test_timed_out_shorter_renewal_ends_the_hold_in_time(self):
        """Case 4, renewal variant: the first renewal after a reload
        lowered locks.lease_ms runs in Redis but its answer comes too late;
        the holder must be told EVENT LOST before anyone else can be
        granted."""
        other = self.start_broker(self.conf, name="other")
        a = self.client()
        fence_of(a.cmd("ACQUIRE s"))
        granted = time.monotonic()
        self.broker.reload(self.short)
        b = self.client(other)
        b.send("ACQUIRE s WAIT %d" % (20000 * SLOW))
        # The first renewal (PEXPIRE 1800) goes at grant + 2000 ms: Redis
        # sleeps across it, so it times out (200 ms) and runs at the wake;
        # writes are then paused, so later renewals cannot get through
        # until long after its 1800 ms ended.
        if time.monotonic() > granted + 1.6:
            self.skipTest("too slow to set up before the first renewal")
        # The stall and the pause are placed around the renewal due at
        # grant + 2000 ms, which no event announces (Redis, stalled,
        # cannot show it arrive).
        time.sleep(max(0.0, granted + 1.7 - time.monotonic()))
        woke = self.stall_redis(0.7)
        stalled = time.monotonic()
        # Past that renewal, sent into the stalled Redis, which cannot
        # show it arrive (as above).
        time.sleep(max(0.0, granted + 2.1 - time.monotonic()))
        pauser = Resp(self.redis.port)
        self.addCleanup(pauser.close)
        pauser.sock.settimeout(30 * SLOW)
        resp_send(pauser, "CLIENT", "PAUSE", 2500, "WRITE")
        if time.monotonic() > stalled + 0.6:
            self.skipTest("too slow to pause writes before the wake")
        woke()
        self.assertEqual(pauser._read(), "OK")
        paused = time.monotonic()
        # The set-up: the short renewal (1800 ms, and STEP more in Redis)
        # ran in Redis before the pause, and its answer came too late.
        pttl = self.redis("PTTL", KEY % "s")
        if not (0 < pttl <= 1800 + STEP and int(self.broker.info().get(
                "renewal_failures_total", "1")) >= 1):
            self.skipTest("the first renewal missed the stall")
        # Nobody can be granted while writes are paused; the holder must
        # have been told by then (its hold is valid to about
        # renewal + 1780 ms, the lease in Redis ends at wake + 1800 ms
        # and the clock step's margin, STEP).
        order = []
        end = paused + 10.0 * LATE
        while len(order) < 2 and time.monotonic() < end:
            for who, c in (("a", a), ("b", b)):
                if who in [o[0] for o in order]:
                    continue
                line = next_line(c, 0.01)
                if line is not None and (who == "b" or
                                         re.match(LOST_RE, line)):
                    order.append((who, line, time.monotonic() - paused))
        self.assertTrue(order, "nothing came")
        self.assertEqual(order[0][0], "a",
                         "someone else was granted before the holder was "
                         "told: %r" % order)
        self.assertRegex(order[0][1], r"^EVENT LOST s \d+ (unavailable|"
                         r"expired|stolen)$")
        self.assertLess(order[0][2], 2.3,
                        "the holder was told only after writes resumed: "
                        "%r" % order)


class FillTryOnce(TruthBase):
    conf = {"redis": {"command_timeout_ms": 1000}}

    def test_half_closed_fill_does_not_spin(self):
        """Case 5: a FILL that became a try-once (its client half-closed)
        and finds its leader done answers once, without hammering
        Redis."""
        other = self.start_broker(self.conf, name="other")
        leader = self.client()
        token = re.match(OK_RE, leader.cmd("FILL f")).group(3)
        # A FILL waiter refused lately marks the name, so the leader's
        # release through its token counts as the leader's (DONE).
        y = self.client(other)
        self.assertEqual(y.cmd("FILL f WAIT 100"), "TIMEOUT")
        z = self.client(other)
        self.assertEqual(self.redis("CLIENT", "PAUSE", 600, "WRITE"), "OK")
        paused = time.monotonic()
        # Held back by the pause in this order: the release, then the
        # waiter's first try (which watches the leader here).
        z.send("RELEASE f TOKEN " + token)
        wait_until(lambda: self.blocked(other), what="the release paused")
        w = self.client()
        w.send("FILL f")
        w.sock.shutdown(socket.SHUT_WR)
        self.assertEqual(z.line(), "OK")  # the pause is over
        before = self.evals()
        # A window of time, its scripts counted all along: a rate.
        holds_for(lambda: self.evals() - before < 50, 1.0,
                  "fewer than 50 scripts run in 1 s")
        answer = next_line(w, 5.0 * LATE)
        self.assertTrue(answer is not None and
                        (answer in ("TIMEOUT", "DONE") or
                         re.match(OK_RE, answer)), answer)
        self.assertTrue(wait_for(w.closed, 5 * SLOW))
        self.assertEqual(w.buf, b"", "more than one answer")


class ReleaseElsewhere(TruthBase):

    def test_release_by_token_on_another_broker_tells_the_holder(self):
        """Case 6: RELEASE ... TOKEN through another broker tells the
        holder's broker, and the holder is told EVENT LOST revoked."""
        other = self.start_broker(self.conf, name="other")
        a, b, c = self.client(), self.client(other), self.client(other)
        fa = fence_of(a.cmd("ACQUIRE x TTL 60000 TOKEN tA"))
        self.assertEqual(b.cmd("RELEASE x TOKEN tA"), "OK")
        self.assertEqual(
            self.assert_lost(a, "x", ("revoked",), 1.0 * LATE), fa)
        self.assertNotIn("x", locks_of(a))
        self.assertRegex(c.cmd("ACQUIRE x WAIT 0"), OK_RE)


class LateRegrant(TruthBase):
    conf = {"redis": {"command_timeout_ms": 1000}}

    def test_late_same_token_regrant_is_not_ok(self):
        """Case 7: a same-token re-grant whose answer comes after its own
        lease ended is never answered OK."""
        a, b = self.client(), self.client()
        self.assertGreater(fence_of(a.cmd("ACQUIRE x TTL 60000 TOKEN T")), 0)
        woke = self.stall_redis(0.35)
        reply = b.cmd("ACQUIRE x TTL 100 TOKEN T")
        woke()
        self.assertEqual(reply, "ERR UNAVAILABLE the grant came after its "
                         "lease ended; Redis is slow")


class CorruptFence(TruthBase):

    def test_corrupt_fence_grants_nothing(self):
        """Case 8: with a corrupt fence counter, ACQUIRE answers ERR
        INTERNAL and leaves no lock behind."""
        c = self.client()
        self.redis("SET", KEY % "f" + ":fence", "abc")
        self.assertRegex(c.cmd("ACQUIRE f WAIT 0"), r"^ERR INTERNAL ")
        self.assertEqual(self.redis("EXISTS", KEY % "f"), 0,
                         "a lock nobody holds was left in Redis")
        self.assertEqual(locks_of(c), [])

    def test_corrupt_fence_at_hand_over(self):
        """Case 8, hand-over: a release that cannot hand over (no fence
        can be made) still releases, and the waiter gets ERR INTERNAL
        instead of an orphan lock."""
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE h"), OK_RE)
        b.send("ACQUIRE h WAIT %d" % (5000 * SLOW))
        wait_for(lambda: self.broker.info()["waiters"] == "1")
        self.wait_queued("h")  # its first try is done
        self.redis("SET", KEY % "h" + ":fence", "abc")
        self.assertEqual(a.cmd("RELEASE h"), "OK")
        self.assertEqual(b.line(), "ERR INTERNAL unexpected reply from Redis")
        self.assertEqual(self.redis("EXISTS", KEY % "h"), 0,
                         "a lock nobody holds was left in Redis")
        self.assertEqual(locks_of(a), [])
        self.assertEqual(locks_of(b), [])


class ValidateToken(TruthBase):
    # A FLUSHALL below: its grace period (trust_ms) within a reply's time.
    conf = {"redis": {"command_timeout_ms": 200, "trust_ms": 1000}}

    def test_validate_with_token(self):
        """Case 9: VALIDATE <name> <fence> TOKEN <t> is VALID only for a
        holder with that fence and that token, exclusive or shared."""
        a, b = self.client(), self.client()
        fa = fence_of(a.cmd("ACQUIRE v TOKEN tv"))
        self.assertEqual(a.cmd("VALIDATE v %d TOKEN tv" % fa), "OK VALID")
        self.assertEqual(a.cmd("VALIDATE v %d TOKEN other" % fa), "OK STALE")
        self.assertEqual(a.cmd("VALIDATE v %d TOKEN tv" % (fa + 1)),
                         "OK STALE")
        self.assertEqual(a.cmd("RELEASE v"), "OK")
        # Redis forgets: the next fence is still a new one (§5), so the
        # old holder's fence alone is stale.
        self.assertEqual(self.redis("FLUSHALL"), "OK")
        fb = fence_of(b.cmd("ACQUIRE v TOKEN tb WAIT 4000"))
        self.assertGreater(fb, fa)
        self.assertEqual(a.cmd("VALIDATE v %d" % fa), "OK STALE")
        self.assertEqual(a.cmd("VALIDATE v %d TOKEN tv" % fb), "OK STALE")
        self.assertEqual(a.cmd("VALIDATE v %d TOKEN tb" % fb), "OK VALID")
        # Shared holders: each has its own fence and token.
        r1, r2 = self.client(), self.client()
        f1 = fence_of(r1.cmd("ACQUIRE sv SHARED TOKEN s1"))
        f2 = fence_of(r2.cmd("ACQUIRE sv SHARED TOKEN s2"))
        self.assertEqual(a.cmd("VALIDATE sv %d TOKEN s1" % f1), "OK VALID")
        self.assertEqual(a.cmd("VALIDATE sv %d TOKEN s2" % f2), "OK VALID")
        self.assertEqual(a.cmd("VALIDATE sv %d TOKEN s2" % f1), "OK STALE")
        self.assertEqual(a.cmd("VALIDATE sv %d TOKEN s1" % f2), "OK STALE")
        self.assertEqual(r1.cmd("RELEASE sv"), "OK")
        self.assertEqual(a.cmd("VALIDATE sv %d TOKEN s1" % f1), "OK STALE")


if __name__ == "__main__":
    main()

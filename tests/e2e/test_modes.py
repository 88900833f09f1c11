"""Lock modes (issue 9): SHARED readers and writers, LIMIT semaphores,
FILL single-flight, WHO, admin REVOKE; on two brokers sharing one Redis."""

import datetime
import random
import re
import select
import socket
import struct
import threading
import time

from lbtest import LATE, SLOW, BrokerTest, main, wait_for, wait_until

ADMIN = "adm1n-secret"
OK_RE = r"^OK (\d+) (\d+) (\S+)$"


def waiters(broker):
    return int(broker.info()["waiters"])


def fence_of(reply):
    """The fence of an `OK <fence> <ttl_ms> <token>` grant."""
    m = re.match(OK_RE, reply)
    assert m, "not a grant: %r" % reply
    return int(m.group(1))


def poll_lines(clients, duration, want=None):
    """Collect the lines the clients receive within duration seconds, or
    until want lines in all have arrived: {index: [line, ...]}."""
    end = time.monotonic() + duration
    got = {}
    by_sock = {c.sock: c for c in clients}
    index = {id(c): i for i, c in enumerate(clients)}
    while True:
        for c in clients:
            while b"\n" in c.buf:
                line, c.buf = c.buf.split(b"\n", 1)
                got.setdefault(index[id(c)], []).append(
                    line.decode(errors="replace"))
        if want is not None and sum(map(len, got.values())) >= want:
            return got
        left = end - time.monotonic()
        if left <= 0:
            return got
        ready = select.select(list(by_sock), [], [], left)[0]
        for s in ready:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("broker closed a connection")
            by_sock[s].buf += chunk


def max_overlap(intervals):
    """The most intervals (start, end) open at one moment."""
    points = sorted([(s, 1) for s, _ in intervals] +
                    [(e, -1) for _, e in intervals])  # -1 sorts first
    n = best = 0
    for _, d in points:
        n += d
        best = max(best, n)
    return best


def kill_connection(c):
    """Vanish without QUIT: close with a reset."""
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                      struct.pack("ii", 1, 0))
    c.sock.close()


class ModesBase(BrokerTest):
    conf = {"auth": {"admin_secret": ADMIN}}

    def second(self):
        return self.start_broker(self.conf, name="other")

    def admin(self, broker=None):
        c = self.client(broker)
        self.assertEqual(c.cmd("AUTH " + ADMIN), "OK")
        return c

    def assert_granted_between(self, since, t0, t1):
        """WHO's grant time: UTC to the millisecond, within [t0, t1]."""
        self.assertRegex(since, r"\.\d{3}Z$")
        t = datetime.datetime.strptime(since, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
        self.assertGreaterEqual(t, t0 - 0.05)
        self.assertLessEqual(t, t1 + 0.05)

    def quiet(self, clients, duration=0.3):
        """Assert none of the clients is told anything for a while."""
        got = poll_lines(clients, duration)
        self.assertEqual(got, {}, "expected no replies yet")


class Acceptance(ModesBase):
    """The four acceptance tests of the issue."""

    def test_semaphore_32_clients_two_brokers(self):
        other = self.second()
        clients = ([self.client() for _ in range(16)] +
                   [self.client(other) for _ in range(16)])
        lock = threading.Lock()
        state = {"n": 0, "max": 0}
        intervals, fences, errors = [], [], []
        barrier = threading.Barrier(len(clients))

        def run(i, c):
            r = random.Random(i)
            try:
                barrier.wait(10)
                reply = c.cmd("ACQUIRE sem LIMIT 3 WAIT %d" % (30000 * SLOW))
                if not re.match(OK_RE, reply):
                    errors.append("%d: %s" % (i, reply))
                    return
                with lock:
                    start = time.monotonic()
                    state["n"] += 1
                    state["max"] = max(state["max"], state["n"])
                    fences.append(fence_of(reply))
                # The hold itself, the workload's: a holder's work takes a
                # while, and no event ends it.
                time.sleep(r.uniform(0.05, 0.1))
                with lock:
                    state["n"] -= 1
                    intervals.append((start, time.monotonic()))
                rel = c.cmd("RELEASE sem")
                if rel != "OK":
                    errors.append("%d: RELEASE: %s" % (i, rel))
            except Exception as e:  # reported below, not lost in a thread
                errors.append("%d: %r" % (i, e))

        threads = [threading.Thread(target=run, args=(i, c))
                   for i, c in enumerate(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60 * SLOW)
        self.assertFalse(any(t.is_alive() for t in threads))
        self.assertEqual(errors, [])
        self.assertEqual(len(intervals), 32)            # all served
        self.assertLessEqual(state["max"], 3)           # by the counter
        self.assertLessEqual(max_overlap(intervals), 3)  # by the intervals
        self.assertGreaterEqual(state["max"], 2)        # and it is shared
        self.assertEqual(len(set(fences)), 32)          # fences distinct
        for b in (self.broker, other):
            wait_for(lambda: b.info()["locks_held"] == "0", 5 * SLOW)
        self.assertEqual(self.client().cmd("STATUS sem"), "OK FREE")

    def test_reader_stream_does_not_starve_writer(self):
        other = self.second()
        lock = threading.Lock()
        readers, errors = [], []
        stop = threading.Event()

        def reader(i, c):
            try:
                # Staggered, a new reader each ~55 ms: the stream's shape
                # is the test's (holds that overlap without a gap).
                time.sleep(i * 0.055)
                while not stop.is_set():
                    reply = c.cmd("ACQUIRE rw SHARED TTL 500 WAIT %d"
                                  % (10000 * SLOW))
                    if not re.match(OK_RE, reply):
                        errors.append("reader %d: %s" % (i, reply))
                        return
                    start = time.monotonic()
                    # The hold itself, the workload's: a reader's work takes
                    # a while, and no event ends it.
                    time.sleep(0.3)
                    end = time.monotonic()
                    with lock:
                        readers.append((start, end, fence_of(reply)))
                    rel = c.cmd("RELEASE rw")
                    if rel != "OK":
                        errors.append("reader %d: RELEASE: %s" % (i, rel))
                        return
            except Exception as e:
                errors.append("reader %d: %r" % (i, e))

        clients = [self.client(self.broker if i % 2 else other)
                   for i in range(6)]
        threads = [threading.Thread(target=reader, args=(i, c))
                   for i, c in enumerate(clients)]
        for t in threads:
            t.start()
        try:
            # Let the stream run: every reader has been through once.
            wait_for(lambda: len(readers) >= 8 or errors, 10 * SLOW)
            self.assertEqual(errors, [])
            w = self.client()
            start = time.monotonic()
            reply = w.cmd("ACQUIRE rw WAIT 5000")
            took = time.monotonic() - start
            w_start = time.monotonic()
            self.assertRegex(reply, OK_RE)
            # One reader lease (500 ms) at most, plus a margin.
            self.assertLess(took, (0.5 + 0.3) * LATE)
            with lock:
                before = [f for _, _, f in readers]
            self.assertGreater(fence_of(reply), max(before))
            # While the writer holds, the name is exclusively its.
            st = self.client(other).cmd("STATUS rw")
            self.assertRegex(st, r"^OK HELD \d+ %d$" % fence_of(reply))
            who = self.client(other).until_end("WHO rw")
            self.assertEqual(len(who), 1, who)
            self.assertEqual(who[0].split()[1:4:2],
                             [str(fence_of(reply)), "EXCLUSIVE"])
            # Held until every reader has asked again and been made to
            # wait.
            wait_until(lambda: waiters(self.broker) + waiters(other) ==
                       len(clients), what="every reader waiting")
            w_end = time.monotonic()
            self.assertEqual(w.cmd("RELEASE rw"), "OK")
            # Readers come back after the writer.
            n = len(readers)
            wait_for(lambda: len(readers) >= n + 3 or errors, 10 * SLOW)
        finally:
            stop.set()
            for t in threads:
                t.join(30 * SLOW)
        self.assertEqual(errors, [])
        overlapping = [(s, e) for s, e, _ in readers
                       if e > w_start and s < w_end]
        self.assertEqual(overlapping, [], "a reader held with the writer")
        self.assertTrue(any(s >= w_end for s, _, _ in readers))
        # The readers did share the name.
        self.assertGreaterEqual(max_overlap([(s, e) for s, e, _ in readers]),
                                2)
        fences = [f for _, _, f in readers]
        self.assertEqual(len(set(fences)), len(fences))

    def fill_round(self, name, n, other):
        """n callers, half on each broker, FILL the name at once; returns
        (leader index, leader fence, callers); the others wait."""
        callers = [self.client(self.broker if i % 2 else other)
                   for i in range(n)]
        for c in callers:
            c.send("FILL %s WAIT %d" % (name, 30000 * SLOW))
        first = poll_lines(callers, 10 * SLOW, want=1)
        self.assertEqual(len(first), 1, first)
        (lead, lines), = first.items()
        self.assertEqual(len(lines), 1, lines)
        self.assertRegex(lines[0], OK_RE)
        # Nobody else is answered: the others wait for the leader.
        self.quiet(callers)
        wait_for(lambda: waiters(self.broker) + waiters(other) == n - 1,
                 5 * SLOW)
        return lead, fence_of(lines[0]), callers

    def test_fill_100_callers_one_leader_rest_done(self):
        other = self.second()
        lead, fence, callers = self.fill_round("f", 100, other)
        rest = [c for i, c in enumerate(callers) if i != lead]
        self.assertEqual(callers[lead].cmd("RELEASE f"), "OK")
        got = poll_lines(rest, 10 * SLOW, want=99)
        self.assertEqual(sorted(got), list(range(99)))
        self.assertEqual({i: l for i, l in got.items() if l != ["DONE"]}, {})
        for b in (self.broker, other):
            self.assertEqual(waiters(b), 0)
        self.assertEqual(self.client().cmd("STATUS f"), "OK FREE")
        self.assertRegex(callers[0].cmd("PING"), "PONG")

    def test_fill_leader_killed_next_leads(self):
        other = self.second()
        lead, fence, callers = self.fill_round("f2", 20, other)
        kill_connection(callers[lead])
        rest = [c for i, c in enumerate(callers) if i != lead]
        # Exactly one waiter becomes the leader, with a higher fence.
        first = poll_lines(rest, 10 * SLOW, want=1)
        self.assertEqual(len(first), 1, first)
        (lead2, lines), = first.items()
        self.assertEqual(len(lines), 1, lines)
        self.assertRegex(lines[0], OK_RE)
        self.assertGreater(fence_of(lines[0]), fence)
        rest2 = [c for i, c in enumerate(rest) if i != lead2]
        self.quiet(rest2)
        self.assertEqual(rest[lead2].cmd("RELEASE f2"), "OK")
        got = poll_lines(rest2, 10 * SLOW, want=18)
        self.assertEqual(sorted(got), list(range(18)))
        self.assertEqual({i: l for i, l in got.items() if l != ["DONE"]}, {})

    def test_revoke_reaches_holder_on_other_broker(self):
        other = self.second()
        h = self.client()
        fence = fence_of(h.cmd("ACQUIRE rv"))
        w = self.client()
        w.send("ACQUIRE rv WAIT %d" % (5000 * SLOW))
        wait_for(lambda: waiters(self.broker) == 1)
        adm = self.admin(other)
        start = time.monotonic()
        adm.send("REVOKE rv")
        self.assertTrue(select.select([h.sock], [], [], 2 * SLOW)[0],
                        "no EVENT LOST")
        took = time.monotonic() - start
        self.assertEqual(h.line(), "EVENT LOST rv %d revoked" % fence)
        self.assertLess(took, 0.100 * LATE)
        self.assertEqual(adm.line(), "OK 1")
        # The waiter is granted, with a higher fence.
        self.assertTrue(select.select([w.sock], [], [], 2 * SLOW)[0],
                        "waiter not granted")
        granted = time.monotonic() - start
        f2 = fence_of(w.line())
        self.assertGreater(f2, fence)
        self.assertLess(granted, 0.3 * LATE)
        # The holder's connection goes on; it holds nothing now.
        self.assertEqual(h.until_end("LOCKS"), [])
        self.assertEqual(h.cmd("RELEASE rv"), "ERR NOTHELD this connection "
                         "does not hold it (give TOKEN <t> for a grant made "
                         "elsewhere)")
        self.assertRegex(adm.cmd("STATUS rv"), r"^OK HELD \d+ %d$" % f2)


class Shared(ModesBase):

    def test_two_readers_distinct_fences_and_valid(self):
        other = self.second()
        a, b = self.client(), self.client(other)
        f1 = fence_of(a.cmd("ACQUIRE s SHARED"))
        f2 = fence_of(b.cmd("ACQUIRE s SHARED WAIT 0"))
        self.assertGreater(f2, f1)
        c = self.client()
        self.assertEqual(c.cmd("VALIDATE s %d" % f1), "OK VALID")
        self.assertEqual(c.cmd("VALIDATE s %d" % f2), "OK VALID")
        self.assertEqual(c.cmd("VALIDATE s %d" % (f2 + 1)), "OK STALE")
        self.assertEqual(a.cmd("RELEASE s"), "OK")
        self.assertEqual(c.cmd("VALIDATE s %d" % f1), "OK STALE")
        self.assertEqual(c.cmd("VALIDATE s %d" % f2), "OK VALID")
        self.assertEqual(b.cmd("RELEASE s"), "OK")
        self.assertEqual(c.cmd("STATUS s"), "OK FREE")
        # One fence counter for every mode.
        f3 = fence_of(c.cmd("ACQUIRE s"))
        self.assertGreater(f3, f2)
        self.assertEqual(c.cmd("RELEASE s"), "OK")
        f4 = fence_of(c.cmd("ACQUIRE s LIMIT 2"))
        self.assertGreater(f4, f3)

    def test_writer_waits_for_readers(self):
        other = self.second()
        r1, r2 = self.client(), self.client(other)
        f1 = fence_of(r1.cmd("ACQUIRE x SHARED"))
        f2 = fence_of(r2.cmd("ACQUIRE x SHARED"))
        w = self.client()
        self.assertEqual(w.cmd("ACQUIRE x WAIT 0"), "TIMEOUT")
        w.send("ACQUIRE x WAIT %d" % (5000 * SLOW))
        wait_for(lambda: waiters(self.broker) == 1)
        self.quiet([w])
        self.assertEqual(r1.cmd("RELEASE x"), "OK")
        self.quiet([w])  # one reader still holds
        self.assertEqual(r2.cmd("RELEASE x"), "OK")
        self.assertTrue(select.select([w.sock], [], [], 2 * SLOW)[0])
        fw = fence_of(w.line())
        self.assertGreater(fw, max(f1, f2))
        # Now readers wait for the writer.
        self.assertEqual(r1.cmd("ACQUIRE x SHARED WAIT 0"), "TIMEOUT")
        r1.send("ACQUIRE x SHARED WAIT %d" % (5000 * SLOW))
        self.quiet([r1])
        self.assertEqual(w.cmd("RELEASE x"), "OK")
        self.assertGreater(fence_of(r1.line()), fw)

    def test_waiting_writer_stops_new_readers(self):
        other = self.second()
        r1 = self.client()
        f1 = fence_of(r1.cmd("ACQUIRE wq SHARED"))
        w = self.client()
        w.send("ACQUIRE wq WAIT %d" % (5000 * SLOW))
        wait_for(lambda: waiters(self.broker) == 1)
        self.wait_queued("wq")  # its first try is done: refused, marker left
        # A new reader, here or on the other broker, does not jump it.
        for b in (self.broker, other):
            r = self.client(b)
            self.assertEqual(r.cmd("ACQUIRE wq SHARED WAIT 0"), "TIMEOUT")
        r2 = self.client(other)
        r2.send("ACQUIRE wq SHARED WAIT %d" % (5000 * SLOW))
        self.quiet([w, r2])
        self.assertEqual(r1.cmd("RELEASE wq"), "OK")
        self.assertTrue(select.select([w.sock], [], [], 2 * SLOW)[0])
        fw = fence_of(w.line())
        self.assertGreater(fw, f1)
        self.quiet([r2])
        self.assertEqual(w.cmd("RELEASE wq"), "OK")
        self.assertTrue(select.select([r2.sock], [], [], 2 * SLOW)[0])
        self.assertGreater(fence_of(r2.line()), fw)

    def test_shared_on_exclusive_waits(self):
        a, b = self.client(), self.client()
        fa = fence_of(a.cmd("ACQUIRE ex"))
        self.assertEqual(b.cmd("ACQUIRE ex SHARED WAIT 0"), "TIMEOUT")
        start = time.monotonic()
        self.assertEqual(b.cmd("ACQUIRE ex SHARED WAIT 300"), "TIMEOUT")
        self.assertGreaterEqual(time.monotonic() - start, 0.3)
        b.send("ACQUIRE ex SHARED WAIT %d" % (5000 * SLOW))
        self.quiet([b], 0.1)
        self.assertEqual(a.cmd("RELEASE ex"), "OK")
        self.assertGreater(fence_of(b.line()), fa)

    def test_status_who_locks_of_shared(self):
        other = self.second()
        a, b = self.client(), self.client(other)
        t0 = time.time()
        f1 = fence_of(a.cmd("ACQUIRE sh SHARED TTL 5000"))
        f2 = fence_of(b.cmd("ACQUIRE sh SHARED TTL 1000"))
        t1 = time.time()
        c = self.client()
        m = re.match(r"^OK HELD (\d+) (\d+) SHARED (\d+)$", c.cmd("STATUS sh"))
        self.assertTrue(m, "STATUS of a SHARED name")
        ttl, fence, holders = map(int, m.groups())
        self.assertGreater(ttl, 4000)  # the longest lease, not the last
        self.assertLessEqual(ttl, 5000)
        self.assertEqual(fence, f2)    # the latest grant's
        self.assertEqual(holders, 2)
        who = c.until_end("WHO sh")
        self.assertEqual(len(who), 2, who)
        seen = {}
        for line in who:
            w = line.split()
            self.assertEqual(len(w), 7, line)
            self.assertEqual(w[0], "HOLDER")
            self.assertEqual(w[3], "SHARED")
            seen[int(w[1])] = w
        self.assertEqual(sorted(seen), [f1, f2])
        self.assertTrue(seen[f1][4].endswith(":%d" % self.broker.proc.pid))
        self.assertTrue(seen[f2][4].endswith(":%d" % other.proc.pid))
        self.assertRegex(seen[f1][5], r"^[^@\s]+@127\.0\.0\.1:%d$"
                         % a.sock.getsockname()[1])
        self.assertRegex(seen[f2][5], r"^[^@\s]+@127\.0\.0\.1:%d$"
                         % b.sock.getsockname()[1])
        for w in seen.values():
            self.assertLessEqual(int(w[2]), 5000)
            self.assert_granted_between(w[6], t0, t1)
        locks = a.until_end("LOCKS")
        self.assertEqual(len(locks), 1)
        self.assertRegex(locks[0], r"^LOCK sh %d \d+ FIXED SHARED$" % f1)
        # REVOKE removes every holder, on both brokers.
        adm = self.admin()
        self.assertEqual(adm.cmd("REVOKE sh"), "OK 2")
        self.assertEqual(a.line(), "EVENT LOST sh %d revoked" % f1)
        self.assertEqual(b.line(), "EVENT LOST sh %d revoked" % f2)
        self.assertEqual(c.cmd("STATUS sh"), "OK FREE")
        self.assertEqual(c.until_end("WHO sh"), [])


class Limit(ModesBase):

    def test_limit_2_third_try_once_times_out(self):
        other = self.second()
        a, b, c = self.client(), self.client(other), self.client()
        ra = a.cmd("ACQUIRE l LIMIT 2")
        rb = b.cmd("ACQUIRE l LIMIT 2 WAIT 0")
        self.assertNotEqual(ra.split()[3], rb.split()[3])  # own tokens
        self.assertGreater(fence_of(rb), fence_of(ra))
        self.assertEqual(c.cmd("ACQUIRE l LIMIT 2 WAIT 0"), "TIMEOUT")
        start = time.monotonic()
        self.assertEqual(c.cmd("ACQUIRE l LIMIT 2 WAIT 200"), "TIMEOUT")
        self.assertGreaterEqual(time.monotonic() - start, 0.2)
        self.assertRegex(c.cmd("STATUS l"),
                         r"^OK HELD \d+ %d LIMIT=2 2$" % fence_of(rb))
        c.send("ACQUIRE l LIMIT 2 WAIT %d" % (5000 * SLOW))
        self.quiet([c], 0.1)
        self.assertEqual(b.cmd("RELEASE l"), "OK")
        self.assertGreater(fence_of(c.line()), fence_of(rb))
        # A plain (exclusive) ACQUIRE waits for every holder.
        self.assertEqual(b.cmd("ACQUIRE l WAIT 0"), "TIMEOUT")
        self.assertRegex(a.until_end("LOCKS")[0],
                         r"^LOCK l %d \d+ SESSION LIMIT=2$" % fence_of(ra))
        who = b.until_end("WHO l")
        self.assertEqual(len(who), 2, who)
        self.assertEqual({w.split()[3] for w in who}, {"LIMIT=2"})

    def test_mode_mismatch_is_refused_at_once(self):
        other = self.second()
        a, b = self.client(), self.client(other)
        fence_of(a.cmd("ACQUIRE mm LIMIT 3"))
        start = time.monotonic()
        self.assertEqual(b.cmd("ACQUIRE mm LIMIT 2 WAIT 5000"),
                         "ERR ARGS the lock is held with LIMIT 3")
        self.assertEqual(b.cmd("ACQUIRE mm SHARED WAIT 5000"),
                         "ERR ARGS the lock is held with LIMIT 3")
        self.assertLess(time.monotonic() - start, 1.0 * LATE)  # no waiting
        fence_of(b.cmd("ACQUIRE mm LIMIT 3 WAIT 0"))
        fence_of(a.cmd("ACQUIRE ms SHARED"))
        self.assertEqual(b.cmd("ACQUIRE ms LIMIT 3 WAIT 5000"),
                         "ERR ARGS the lock is held SHARED")
        self.assertEqual(b.cmd("PING"), "PONG")

    def test_bad_mode_arguments(self):
        c = self.client()
        self.assertEqual(c.cmd("ACQUIRE b SHARED LIMIT 2"),
                         "ERR ARGS SHARED and LIMIT exclude each other")
        self.assertEqual(c.cmd("ACQUIRE b LIMIT 2 SHARED"),
                         "ERR ARGS SHARED and LIMIT exclude each other")
        for bad in ("LIMIT 0", "LIMIT 10001", "LIMIT x", "LIMIT -1",
                    "LIMIT", "SHARED SHARED", "LIMIT 2 LIMIT 2"):
            self.assertRegex(c.cmd("ACQUIRE b " + bad), r"^ERR ARGS ", bad)
        self.assertEqual(c.cmd("STATUS b"), "OK FREE")
        # Ten words after the verb, in any order, are fine.
        reply = c.cmd("ACQUIRE b LIMIT 10000 TOKEN tk-1 KEEP WAIT 0 TTL 1000")
        m = re.match(OK_RE, reply)
        self.assertTrue(m, reply)
        self.assertEqual(m.group(2, 3), ("1000", "tk-1"))
        self.assertRegex(c.cmd("STATUS b"), r"^OK HELD \d+ \d+ LIMIT=10000 1$")

    def test_limit_holder_with_ttl_expires(self):
        a, b, c = self.client(), self.client(), self.client()
        start = time.monotonic()
        fa = fence_of(a.cmd("ACQUIRE e LIMIT 2 TTL 200"))
        fb = fence_of(b.cmd("ACQUIRE e LIMIT 2"))
        self.assertEqual(a.line(), "EVENT LOST e %d expired" % fa)
        took = time.monotonic() - start
        self.assertGreaterEqual(took, 0.19)
        self.assertLess(took, 0.5 * LATE)
        self.assertEqual(a.until_end("LOCKS"), [])
        # Its slot is free again; the other holder keeps its own.
        wait_for(lambda: c.cmd("STATUS e").endswith(" 1"), 2 * SLOW)
        self.assertRegex(c.cmd("STATUS e"), r"^OK HELD \d+ %d LIMIT=2 1$" % fb)
        self.assertEqual(c.cmd("VALIDATE e %d" % fa), "OK STALE")
        self.assertEqual(c.cmd("VALIDATE e %d" % fb), "OK VALID")
        self.assertGreater(fence_of(c.cmd("ACQUIRE e LIMIT 2 WAIT 0")), fb)
        self.quiet([b], 0.1)  # b was not told anything


class Fill(ModesBase):

    def test_fill_try_once_and_timeout(self):
        a, b = self.client(), self.client()
        m = re.match(OK_RE, a.cmd("FILL fi"))
        self.assertTrue(m)
        self.assertEqual(m.group(2), "10000")  # a session lease
        self.assertEqual(b.cmd("FILL fi WAIT 0"), "TIMEOUT")
        start = time.monotonic()
        self.assertEqual(b.cmd("FILL fi WAIT 200"), "TIMEOUT")
        self.assertGreaterEqual(time.monotonic() - start, 0.2)
        self.assertRegex(a.until_end("LOCKS")[0],
                         r"^LOCK fi %s \d+ SESSION FILL$" % m.group(1))
        self.assertRegex(b.cmd("STATUS fi"), r"^OK HELD \d+ %s$" % m.group(1))
        who = b.until_end("WHO fi")
        self.assertEqual(len(who), 1, who)
        self.assertEqual(who[0].split()[1:4:2], [m.group(1), "FILL"])
        self.assertEqual(a.cmd("RELEASE fi"), "OK")
        # Free again: a try-once leads (never DONE).
        r = b.cmd("FILL fi WAIT 0 TTL 1000 TOKEN fill-tk")
        self.assertRegex(r, r"^OK \d+ 1000 fill-tk$")
        self.assertGreater(fence_of(r), int(m.group(1)))

    def test_fill_waiter_behind_queued_readers_is_told_done(self):
        """A FILL waiter on a broker where a writer and readers also wait
        for the name asks Redis along with their tries: when its leader
        finishes it is told DONE while the writer that got the name still
        holds it, not after the readers are let in."""
        lead, w, r, f = (self.client() for _ in range(4))
        fence = fence_of(lead.cmd("FILL fq"))
        w.send("ACQUIRE fq WAIT %d" % (30000 * SLOW))
        wait_for(lambda: waiters(self.broker) == 1)
        r.send("ACQUIRE fq SHARED WAIT %d" % (30000 * SLOW))
        wait_for(lambda: waiters(self.broker) == 2)
        f.send("FILL fq WAIT %d" % (30000 * SLOW))
        wait_for(lambda: waiters(self.broker) == 3)
        self.assertEqual(lead.cmd("RELEASE fq"), "OK")  # done, handed on
        self.assertGreater(fence_of(w.line()), fence)
        start = time.monotonic()
        f.sock.settimeout(5 * SLOW)  # it would wait for the writer
        self.assertEqual(f.line(), "DONE")
        # Within a few retry intervals (locks.retry_max_ms, 1 s), while
        # the writer holds the name and the reader still waits.
        self.assertLess(time.monotonic() - start, 3 * SLOW)
        self.assertEqual(waiters(self.broker), 1)
        self.assertEqual(w.cmd("RELEASE fq"), "OK")
        self.assertRegex(r.line(), OK_RE)

    def test_fill_leader_revoked_next_leads(self):
        other = self.second()
        a, b, c = self.client(), self.client(other), self.client()
        fa = fence_of(a.cmd("FILL fr"))
        b.send("FILL fr WAIT %d" % (5000 * SLOW))
        c.send("FILL fr WAIT %d" % (5000 * SLOW))
        wait_for(lambda: waiters(self.broker) == 1 and waiters(other) == 1)
        self.assertEqual(self.admin().cmd("REVOKE fr"), "OK 1")
        self.assertEqual(a.line(), "EVENT LOST fr %d revoked" % fa)
        got = poll_lines([b, c], 2 * SLOW, want=1)
        self.assertEqual(len(got), 1, got)
        (i, lines), = got.items()
        self.assertGreater(fence_of(lines[0]), fa)
        leader, follower = (b, c) if i == 0 else (c, b)
        self.quiet([follower])
        self.assertEqual(leader.cmd("RELEASE fr"), "OK")
        self.assertEqual(follower.line(), "DONE")


class Who(ModesBase):

    def test_who_exclusive(self):
        other = self.second()
        a = self.client()
        t0 = time.time()
        m = re.match(OK_RE, a.cmd("ACQUIRE wx"))
        t1 = time.time()
        self.assertTrue(m)
        for c in (self.client(), self.client(other)):
            who = c.until_end("WHO wx")
            self.assertEqual(len(who), 1, who)
            w = who[0].split()
            self.assertEqual(len(w), 7, who)
            self.assertEqual(w[:2], ["HOLDER", m.group(1)])
            self.assertGreater(int(w[2]), 0)
            self.assertLessEqual(int(w[2]), 10000)
            self.assertEqual(w[3], "EXCLUSIVE")
            self.assertIn(":", w[4])
            self.assertTrue(w[4].endswith(":%d" % self.broker.proc.pid), w[4])
            self.assertRegex(w[5], r"^[^@\s]+@127\.0\.0\.1:%d$"
                             % a.sock.getsockname()[1])
            self.assert_granted_between(w[6], t0, t1)

    def test_who_free_and_bad_name(self):
        c = self.client()
        self.assertEqual(c.until_end("WHO nobody"), [])
        self.assertRegex(c.cmd("WHO"), r"^ERR ARGS ")
        self.assertRegex(c.cmd("WHO a\x7fb"), r"^ERR PROTO ")
        self.assertEqual(c.cmd("PING"), "PONG")


class Revoke(ModesBase):

    def test_revoke_needs_admin_auth(self):
        c = self.client()
        fence_of(c.cmd("ACQUIRE na"))
        self.assertEqual(c.cmd("REVOKE na"),
                         "ERR NOAUTH REVOKE needs AUTH with auth.admin_secret")
        self.assertEqual(c.cmd("PING"), "PONG")  # still open
        self.assertRegex(c.cmd("STATUS na"), r"^OK HELD ")
        # Only admin_secret is set: ordinary commands need no AUTH, and
        # AUTH with it makes the connection an admin.
        self.assertEqual(c.cmd("AUTH " + ADMIN), "OK")
        self.assertEqual(c.cmd("REVOKE free-name"), "OK 0")
        self.assertEqual(c.cmd("REVOKE na"), "OK 1")
        self.assertRegex(c.line(), r"^EVENT LOST na \d+ revoked$")
        # A wrong AUTH still closes.
        d = self.client()
        self.assertEqual(d.cmd("AUTH nope"), "ERR AUTH wrong secret")
        wait_for(d.closed)


class RevokeBothSecrets(BrokerTest):
    conf = {"auth": {"secret": "s3cret", "admin_secret": ADMIN}}

    def test_admin_is_the_admin_secret_only(self):
        c = self.client()
        self.assertEqual(c.cmd("AUTH s3cret"), "OK")
        fence_of(c.cmd("ACQUIRE bs"))
        self.assertEqual(c.cmd("REVOKE bs"),
                         "ERR NOAUTH REVOKE needs AUTH with auth.admin_secret")
        self.assertEqual(c.cmd("PING"), "PONG")
        adm = self.client()
        self.assertEqual(adm.cmd("STATUS bs"), "ERR NOAUTH AUTH first")
        self.assertEqual(adm.cmd("AUTH " + ADMIN), "OK")
        self.assertRegex(adm.cmd("STATUS bs"), r"^OK HELD ")  # authenticated
        self.assertEqual(adm.cmd("REVOKE bs"), "OK 1")
        self.assertRegex(c.line(), r"^EVENT LOST bs \d+ revoked$")


class RevokeOff(BrokerTest):

    def test_revoke_off_without_admin_secret(self):
        c = self.client()
        self.assertEqual(c.cmd("AUTH anything"), "OK")
        self.assertEqual(c.cmd("REVOKE x"),
                         "ERR NOAUTH REVOKE is off: auth.admin_secret is not set")
        self.assertEqual(c.cmd("PING"), "PONG")



class Review(ModesBase):
    """Cases a review found wrong in the first version."""
    conf = {"auth": {"admin_secret": ADMIN},
            "redis": {"reconnect_min_ms": 100, "reconnect_max_ms": 200}}

    def test_revoke_heard_after_the_subscriber_was_away(self):
        # The REVOKE message is published while this broker has no
        # subscriber: a fixed lock (never renewed) is still told, once the
        # subscriber is back and the broker checks its holds.
        c = self.client()
        f = fence_of(c.cmd("ACQUIRE z TTL 30000"))
        a = self.admin()
        self.redis("CLIENT", "KILL", "TYPE", "pubsub")
        self.assertEqual(a.cmd("REVOKE z"), "OK 1")
        got = poll_lines([c], 2.0 * SLOW, want=1)
        self.assertEqual(got, {0: ["EVENT LOST z %d revoked" % f]})
        self.assertEqual(c.until_end("LOCKS"), [])

    def test_same_token_in_the_other_family_is_refused(self):
        c = self.client()
        self.assertRegex(c.cmd("ACQUIRE x TTL 60000 KEEP TOKEN tok1"), OK_RE)
        self.assertEqual(c.cmd("ACQUIRE x SHARED TOKEN tok1"),
                         "ERR ARGS this token holds it exclusively")
        self.assertEqual(len(c.until_end("LOCKS")), 1)  # still held here
        self.assertEqual(self.redis("GET", "lockbroker:{x}").split()[0], "tok1")
        d = self.client()
        self.assertRegex(d.cmd("ACQUIRE y LIMIT 2 TOKEN tok2"), OK_RE)
        self.assertEqual(d.cmd("ACQUIRE y TOKEN tok2"),
                         "ERR ARGS this token holds it with LIMIT 2")
        self.assertEqual(len(d.until_end("LOCKS")), 1)
        self.assertEqual(d.cmd("RELEASE y"), "OK")

    def test_fill_after_the_leaders_release_is_never_done(self):
        # A FILL sent right after the leader's RELEASE (same broker, the
        # release still in Redis) must not be told DONE: the work it asks
        # for was done before it asked. A try-once never hears DONE.
        for i in range(20):
            leader, w1, w2 = self.client(), self.client(), self.client()
            self.assertRegex(leader.cmd("FILL f%d" % i), OK_RE)
            leader.send("RELEASE f%d" % i)
            w1.send("FILL f%d WAIT 0" % i)
            w2.send("FILL f%d WAIT 300" % i)
            self.assertEqual(leader.line(), "OK")
            r1, r2 = w1.line(), w2.line()
            self.assertNotEqual(r1, "DONE", "try-once told DONE")
            self.assertNotEqual(r2, "DONE", "told DONE for an earlier fill")
            for c, r in ((w1, r1), (w2, r2)):
                if r.startswith("OK"):
                    self.assertEqual(c.cmd("RELEASE f%d" % i), "OK")
                else:
                    self.assertIn(r, ("TIMEOUT",))
            for c in (leader, w1, w2):
                c.close()
                self.clients.remove(c)

    def test_who_follows_a_same_token_regrant(self):
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE k TTL 60000 KEEP TOKEN kt"), OK_RE)
        a_id = a.cmd("WHO k").split()[5]
        self.assertEqual(a.line(), "END")
        self.assertRegex(b.cmd("ACQUIRE k TTL 60000 KEEP TOKEN kt"), OK_RE)
        b_id = b.cmd("WHO k").split()[5]
        self.assertEqual(b.line(), "END")
        self.assertNotEqual(a_id, b_id)


    def test_a_lock_taken_by_an_older_broker(self):
        # Older brokers stored just the token in the lock key; such a lock
        # is still theirs to release, and WHO shows it without an entry.
        self.redis("SET", "lockbroker:{old}", "oldtok", "PX", "60000")
        self.redis("SET", "lockbroker:{old}:fence", "7")
        c = self.client()
        self.assertEqual(c.cmd("ACQUIRE old WAIT 0"), "TIMEOUT")
        self.assertRegex(c.cmd("WHO old"), r"^HOLDER - \d+ - - - -$")
        self.assertEqual(c.line(), "END")
        self.assertEqual(c.cmd("VALIDATE old 7"), "OK VALID")
        self.assertEqual(c.cmd("EXTEND old 30000 TOKEN oldtok"), "OK 30000")
        self.assertEqual(c.cmd("RELEASE old TOKEN oldtok"), "OK")
        self.assertEqual(self.redis("EXISTS", "lockbroker:{old}"), 0)
        self.assertGreater(fence_of(c.cmd("ACQUIRE old")), 7)
        value = self.redis("GET", "lockbroker:{old}").split()
        self.assertEqual(value[1], "EXCLUSIVE")
        # Stored as <hostname>:<pid>:<random> (WHO shows <hostname>:<pid>).
        self.assertRegex(value[2], r":%d:[0-9a-f]{8}$" % self.broker.proc.pid)


    def test_second_writer_still_keeps_readers_out(self):
        # Two writers wait for readers; the first gets the name and holds
        # it a while. A reader that asks meanwhile must not get in when
        # the first writer leaves: the second, still waiting, has kept the
        # writer mark alive.
        other = self.second()
        r1, r2 = self.client(), self.client(other)
        self.assertRegex(r1.cmd("ACQUIRE ww SHARED"), OK_RE)
        self.assertRegex(r2.cmd("ACQUIRE ww SHARED"), OK_RE)
        w1, w2 = self.client(), self.client(other)
        w1.send("ACQUIRE ww WAIT %d" % (10000 * SLOW))
        w2.send("ACQUIRE ww WAIT %d" % (10000 * SLOW))
        wait_for(lambda: waiters(self.broker) == 1 and waiters(other) == 1)
        self.wait_queued("ww", 2)  # both refused by the readers: both marked
        self.assertEqual(r1.cmd("RELEASE ww"), "OK")
        self.assertEqual(r2.cmd("RELEASE ww"), "OK")
        got = poll_lines([w1, w2], 2.0 * SLOW, want=1)
        self.assertEqual(len(got), 1, got)
        first = w1 if 0 in got else w2
        second = w2 if first is w1 else w1
        self.assertRegex(got[0 if first is w1 else 1][0], OK_RE)
        # On the first writer's broker: its release wakes this reader there
        # at once, while the second writer hears of it over pub/sub.
        reader = self.client(None if first is w1 else other)
        reader.send("ACQUIRE ww SHARED WAIT %d" % (10000 * SLOW))
        self.wait_queued("ww", 2)  # the second writer's and the reader's
        # The second writer tries again meanwhile, on its retry timer,
        # which nothing announces: the time passing is the test's.
        time.sleep(1.5)
        self.assertEqual(first.cmd("RELEASE ww"), "OK")
        got = poll_lines([second, reader], 2.0 * SLOW, want=1)
        self.assertIn(0, got, "the reader got in before the waiting writer")
        self.assertRegex(got[0][0], OK_RE)
        self.quiet([reader], 0.3)
        self.assertEqual(second.cmd("RELEASE ww"), "OK")
        self.assertRegex(reader.line(), OK_RE)

    def test_limit_waiters_are_served_in_arrival_order_across_brokers(self):
        # LIMIT 1 held on one broker; six waiters arrive in turn, on the
        # two brokers alternately (the holder's broker second). Each is
        # granted in the order it came, whichever broker it is on: one
        # queue per name in Redis, readers and semaphores included. (Before
        # readers took tickets, a release woke every broker and this
        # broker's own waiters went first.)
        other = self.second()
        h = self.client()
        self.assertRegex(h.cmd("ACQUIRE lq LIMIT 1"), OK_RE)
        ws = []
        for i in range(6):
            b = other if i % 2 == 0 else self.broker
            c = self.client(b)
            c.send("ACQUIRE lq LIMIT 1 WAIT %d" % (10000 * SLOW))
            n = sum(1 for w in ws if w[0] is b) + 1
            wait_for(lambda: waiters(b) == n)
            self.wait_queued("lq", i + 1)  # its try took its place in Redis
            ws.append((b, c))
        self.assertEqual(h.cmd("RELEASE lq"), "OK")
        for i, (_, c) in enumerate(ws):
            got = poll_lines([w for _, w in ws[i:]], 3.0 * SLOW, want=1)
            self.assertEqual(list(got), [0], "waiter %d of 6 was not next: "
                             "%r" % (i + 1, got))
            self.assertRegex(got[0][0], OK_RE)
            self.assertEqual(c.cmd("RELEASE lq"), "OK")

    def test_reader_queued_before_a_writer_goes_first(self):
        # A writer holds; a reader queues on the other broker, then a
        # writer here. The reader is first in the one queue, so the
        # holder's release lets the reader in, not this broker's writer.
        other = self.second()
        h = self.client()
        self.assertRegex(h.cmd("ACQUIRE rw1"), OK_RE)
        r = self.client(other)
        r.send("ACQUIRE rw1 SHARED WAIT %d" % (10000 * SLOW))
        wait_for(lambda: waiters(other) == 1)
        self.wait_queued("rw1")
        w = self.client()
        w.send("ACQUIRE rw1 WAIT %d" % (10000 * SLOW))
        wait_for(lambda: waiters(self.broker) == 1)
        self.wait_queued("rw1", 2)
        self.assertEqual(h.cmd("RELEASE rw1"), "OK")
        got = poll_lines([r, w], 3.0 * SLOW, want=1)
        self.assertEqual(list(got), [0], got)
        fr = fence_of(got[0][0])
        self.quiet([w])
        self.assertEqual(r.cmd("RELEASE rw1"), "OK")
        self.assertGreater(fence_of(w.line()), fr)


if __name__ == "__main__":
    main()

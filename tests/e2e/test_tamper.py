"""Lock data changed behind the brokers' backs, by someone with access to
Redis: a lock key deleted or renamed by hand, every key of the prefix
deleted, an evicting policy switched on for a moment. While a client
lists a name in LOCKS and has not been told EVENT LOST, nobody else holds
it (docs/protocol.md, What a holder can rely on). Each test failed on the
code before the fix it names."""

import re
import signal
import time

from lbtest import LATE, SLOW, BrokerTest, Resp, main, wait_for
from test_truth import (KEY, LOST_RE, fence_of, locks_of, next_line,
                        read_until)

TRUST = 1000
ADMIN = "adm1n-secret"
CONF = {"redis": {"trust_ms": TRUST},
        "limits": {"max_locks_per_client": 1000},
        "auth": {"admin_secret": ADMIN}}


class Tamper(BrokerTest):
    conf = CONF

    def setUp(self):
        super().setUp()
        self.other = self.start_broker(self.conf, name="other")

    def test_deleted_lock_key_is_not_granted(self):
        """DEL, UNLINK or RENAME of a held lock key: no broker grants the
        name while its lease would still have run (its fence counter
        remembers when that is), and its holder keeps it: it used to be
        granted elsewhere within milliseconds, its holder told nothing."""
        a, s, u = self.client(), self.client(), self.client()
        fence_of(a.cmd("ACQUIRE x TTL 20000"))
        fence_of(s.cmd("ACQUIRE y"))
        fence_of(u.cmd("ACQUIRE z TTL 20000 KEEP"))
        self.assertEqual(self.redis("DEL", KEY % "x"), 1)
        self.assertEqual(self.redis("RENAME", KEY % "y", "junk"), "OK")
        self.assertEqual(self.redis("UNLINK", KEY % "z"), 1)
        o = self.client(self.other)
        for name in ("x", "y", "z"):
            self.assertEqual(o.cmd("ACQUIRE %s WAIT 0" % name), "TIMEOUT")
        # Confirmed within trust_ms: put back, as it was.
        wait_for(lambda: all(self.redis("EXISTS", KEY % n) == 1
                             for n in "xyz"), 3 * TRUST / 1000.0 * LATE)
        for c, name in ((a, "x"), (s, "y"), (u, "z")):
            self.assertEqual(locks_of(c), [name])
            self.assertEqual(o.cmd("ACQUIRE %s WAIT 0" % name), "TIMEOUT")
        self.assertEqual(a.cmd("RELEASE x"), "OK")
        self.assertRegex(o.cmd("ACQUIRE x WAIT 0"), r"^OK ")

    def test_release_after_the_key_was_deleted(self):
        """The holder releases a name whose key was deleted before a
        broker noticed: the name is free at once, not kept for what is
        left of the lease the counter remembers."""
        a = self.client()
        f = fence_of(a.cmd("ACQUIRE x TTL 60000"))
        self.assertEqual(self.redis("DEL", KEY % "x"), 1)
        self.assertEqual(a.cmd("RELEASE x"), "OK")
        o = self.client(self.other)
        self.assertGreater(fence_of(o.cmd("ACQUIRE x WAIT 0")), f)

    def test_shared_key_deleted_then_a_reader_releases(self):
        """The "=shared" lock key deleted, then the reader with the newest
        fence releases: the other reader still holds the name, and no
        writer is granted it (the release was taken for an exclusive
        grant's, and a writer granted while a reader held it, told
        nothing)."""
        a, b = self.client(), self.client()
        fence_of(a.cmd("ACQUIRE s SHARED TTL 20000"))
        fence_of(b.cmd("ACQUIRE s SHARED TTL 20000"))
        self.assertEqual(self.redis("DEL", KEY % "s"), 1)
        self.assertEqual(b.cmd("RELEASE s"), "OK")
        o = self.client(self.other)
        self.assertEqual(o.cmd("ACQUIRE s WAIT 0"), "TIMEOUT")
        self.assertEqual(locks_of(a), ["s"])

    def test_shared_key_and_counter_deleted(self):
        """A reader's "=shared" and fence counter deleted, its entry in
        :holders left: a writer is still refused while it holds (the
        plain grant's path looked at the lock key and the counter only)."""
        a = self.client()
        fence_of(a.cmd("ACQUIRE s SHARED TTL 20000"))
        self.assertEqual(self.redis("DEL", KEY % "s", KEY % "s" + ":fence"),
                         2)
        o = self.client(self.other)
        self.assertEqual(o.cmd("ACQUIRE s TTL 20000 WAIT 0"), "TIMEOUT")
        self.assertEqual(locks_of(a), ["s"])

    def test_grant_of_two_brokers_deleted_then_released(self):
        """One grant held through two brokers (the same token), its key
        deleted, then released through one: the other broker's holder is
        told at once, as without the DEL (it was told only at its next
        confirmation, up to redis.trust_ms after another broker granted
        the name)."""
        a, b = self.client(), self.client(self.other)
        f = fence_of(a.cmd("ACQUIRE x TTL 60000 TOKEN t1"))
        self.assertEqual(fence_of(b.cmd("ACQUIRE x TTL 60000 TOKEN t1")), f)
        self.assertEqual(self.redis("DEL", KEY % "x"), 1)
        self.assertEqual(b.cmd("RELEASE x"), "OK")
        line, seen = read_until(a, LOST_RE, 1.0 * LATE)
        self.assertEqual(line, "EVENT LOST x %d revoked" % f, seen)

    def test_extend_after_the_key_was_deleted(self):
        """The holder's EXTEND after its key was deleted moves the lease
        the counter remembers (it answered NOTHELD, dropped the hold, and
        left the name blocked for the rest of the old lease)."""
        a = self.client()
        fence_of(a.cmd("ACQUIRE x TTL 60000"))
        self.assertEqual(self.redis("DEL", KEY % "x"), 1)
        self.assertEqual(a.cmd("EXTEND x 1000"), "OK 1000")
        self.assertEqual(locks_of(a), ["x"])
        self.assertEqual(a.cmd("RELEASE x"), "OK")
        o = self.client(self.other)
        self.assertRegex(o.cmd("ACQUIRE x WAIT 0"), r"^OK ")

    def test_holder_gone_after_its_key_was_deleted(self):
        """The holder disconnects after its key was deleted: its broker's
        own release frees the name at once (it was left to the rest of
        its lease, the grant's brokers being unknown)."""
        a = self.client()
        fence_of(a.cmd("ACQUIRE x TTL 600000"))
        self.assertEqual(self.redis("DEL", KEY % "x"), 1)
        a.close()
        o = self.client(self.other)
        wait_for(lambda: o.cmd("ACQUIRE x WAIT 0").startswith("OK "),
                 2 * LATE, 0.05)

    def test_put_back_grant_of_two_brokers_released(self):
        """One grant held through two brokers, its key deleted and put
        back by one of them, then released through it: the other
        broker's holder is told at once (the put-back named only the
        broker that made it, so the release was not announced)."""
        a, b = self.client(), self.client(self.other)
        f = fence_of(a.cmd("ACQUIRE x TTL 60000 TOKEN t1"))
        fence_of(b.cmd("ACQUIRE x TTL 60000 TOKEN t1"))
        self.assertEqual(self.redis("DEL", KEY % "x"), 1)
        wait_for(lambda: self.redis("EXISTS", KEY % "x") == 1,
                 3 * TRUST / 1000.0 * LATE)
        self.assertEqual(a.cmd("RELEASE x"), "OK")
        line, seen = read_until(b, LOST_RE, 1.0 * LATE)
        self.assertEqual(line, "EVENT LOST x %d revoked" % f, seen)

    def test_revoke_after_the_key_was_deleted(self):
        """REVOKE of a name whose key was deleted: its holder is told, as
        without the DEL (REVOKE found no holder, told nobody, and freed
        the name)."""
        a = self.client()
        f = fence_of(a.cmd("ACQUIRE x TTL 60000"))
        self.assertEqual(self.redis("DEL", KEY % "x"), 1)
        adm = self.client(self.other)
        self.assertEqual(adm.cmd("AUTH " + ADMIN), "OK")
        self.assertEqual(adm.cmd("REVOKE x"), "OK 1")
        line, seen = read_until(a, LOST_RE, 1.0 * LATE)
        self.assertEqual(line, "EVENT LOST x %d revoked" % f, seen)

    def test_limit_holders_deleted(self):
        """A LIMIT 1 holder's :holders deleted: nobody else is let in
        while the counter remembers its lease (a second LIMIT 1 holder
        was, for the rest of the first's lease)."""
        a = self.client()
        fence_of(a.cmd("ACQUIRE s LIMIT 1 TTL 20000"))
        self.assertEqual(self.redis("DEL", KEY % "s" + ":holders"), 1)
        o = self.client(self.other)
        self.assertEqual(o.cmd("ACQUIRE s LIMIT 1 TTL 20000 WAIT 0"),
                         "TIMEOUT")

    def test_every_key_deleted_holders_told_within_trust(self):
        """Every lock key and fence counter deleted (the marker kept, so
        Redis serves the same incarnation): each holder is told within
        trust_ms and a round trip, not when its lease would have ended
        (a minute later, before)."""
        c = self.client()
        names = ["n%d" % i for i in range(50)]
        for n in names:
            fence_of(c.cmd("ACQUIRE %s TTL 60000" % n))
        r = Resp(self.redis.port)
        keys = r("KEYS", "lockbroker:{*")
        start = time.monotonic()
        self.assertGreaterEqual(r("DEL", *keys), 100)
        r.close()
        lost = set()
        while len(lost) < len(names):
            line, seen = read_until(c, LOST_RE, 3 * TRUST / 1000.0 * LATE)
            self.assertIsNotNone(line, "told %d of %d" %
                                 (len(lost), len(names)))
            lost.add(line.split()[2])
        self.assertLess(time.monotonic() - start,
                        (TRUST / 1000.0 + 0.5) * LATE)
        self.assertEqual(locks_of(c), [])

    def test_eviction_switched_on_for_a_moment(self):
        """An evicting policy and a maxmemory just below what Redis uses,
        for a moment, then back to noeviction (volatile-ttl, so that the
        lock keys and fence counters go, and not the marker, which has no
        expiry: its loss would be a new incarnation anyway): the brokers notice the eviction
        (evicted_keys), make a new incarnation, and put the holds back
        in its grace period: no holder loses its lock, and no name is
        held on two brokers. Before, the other broker took the evicted
        names, nobody told (and with holds only confirmed, their holders
        were told they lost them)."""
        holders = [self.client() for _ in range(4)]
        names = []
        for i in range(400):
            n = "e%d" % i
            fence_of(holders[i % 4].cmd("ACQUIRE %s TTL 60000" % n))
            names.append(n)
        # The brokers paused meanwhile (far less than trust_ms), so that
        # what was evicted can be counted before they put it back.
        for b in self.brokers:
            b.proc.send_signal(signal.SIGSTOP)
        try:
            used = int(re.search(r"used_memory:(\d+)",
                                 self.redis("INFO", "memory")).group(1))
            self.redis("CONFIG", "SET", "maxmemory-policy", "volatile-ttl")
            self.redis("CONFIG", "SET", "maxmemory", used - 500000)
            self.redis("SET", "filler", "x" * 100)
            self.redis("CONFIG", "SET", "maxmemory", 0)
            self.redis("CONFIG", "SET", "maxmemory-policy", "noeviction")
            left = sum(self.redis("EXISTS", KEY % n, KEY % n + ":fence")
                       for n in names) // 2
        finally:
            for b in self.brokers:
                b.proc.send_signal(signal.SIGCONT)
        evicted = int(re.search(r"evicted_keys:(\d+)",
                                self.redis("INFO", "stats")).group(1))
        self.assertLess(left, len(names), "no lock was evicted")
        # Past the grace period a new incarnation would have: time that
        # must pass, for a grace period that no event shows (none began).
        time.sleep((TRUST * 1.02 + 1000 + 2 * TRUST) / 1000.0 * LATE)
        o = self.client(self.other)
        granted = set()
        for n in names:
            r = o.cmd("ACQUIRE %s WAIT 0" % n)
            if r.startswith("OK "):
                granted.add(n)
            else:
                self.assertEqual(r, "TIMEOUT")
        held = set()
        for h in holders:
            held.update(locks_of(h))
        both = held & granted
        self.assertEqual(both, set(), "%d names held on both brokers "
                         "(%d keys evicted)" % (len(both), evicted))
        self.assertEqual(len(held), len(names), "%d of %d lock keys "
                         "evicted, %d holders told they lost them" %
                         (len(names) - left, len(names),
                          len(names) - len(held)))
        self.assertEqual(granted, set())
        self.assertIn("evicted", self.broker.logtext())


class LockDelayTamper(BrokerTest):
    conf = {"redis": {"trust_ms": TRUST}, "locks": {"lock_delay_ms": 500}}

    def test_lock_delay_after_the_key_was_deleted(self):
        """A holder vanishes after its key was deleted: the name is kept
        for the lock delay, not for the rest of its 10-minute lease."""
        a = self.client()
        fence_of(a.cmd("ACQUIRE x TTL 600000"))
        self.assertEqual(self.redis("DEL", KEY % "x"), 1)
        a.close()
        o = self.client()
        wait_for(lambda: o.cmd("ACQUIRE x WAIT 0").startswith("OK "),
                 3 * LATE, 0.05)


class BackwardStep(BrokerTest):
    """Redis's clock stepped back after names were released: they stay
    free (the counter of a released name remembered a lease again)."""

    conf = CONF
    redis_clock = True

    def test_released_names_stay_free(self):
        a = self.client()
        fence_of(a.cmd("ACQUIRE x TTL 5000"))
        self.assertEqual(a.cmd("RELEASE x"), "OK")
        self.redis.set_clock(-30000)
        self.assertRegex(a.cmd("ACQUIRE x WAIT 0"), r"^OK ")


if __name__ == "__main__":
    main()

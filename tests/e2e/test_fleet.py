#!/usr/bin/env python3
"""Many brokers on one Redis (docs/internals.md, Channels): what
each broker costs Redis when it holds nothing or little, and that an event
reaches only the brokers it concerns."""

import time

from lbtest import (LATE, BrokerTest, Listener, holds_for, main, wait_for,
                    wait_quiet, wait_until)

TRUST_MS = 600


def changes(redis):
    """Redis's writes since its last save (INFO persistence)."""
    info = redis("INFO", "persistence")
    return int(info.split("rdb_changes_since_last_save:")[1].split("\r")[0])


def calls(redis, command):
    """How many times Redis ran command (INFO commandstats)."""
    info = redis("INFO", "commandstats")
    key = "cmdstat_%s:calls=" % command
    return int(info.split(key)[1].split(",")[0]) if key in info else 0


def noreplicas(redis):
    """How many commands Redis refused for want of replicas."""
    info = redis("INFO", "errorstats")
    key = "errorstat_NOREPLICAS:count="
    return int(info.split(key)[1].split("\r")[0]) if key in info else 0


def locks(c):
    return [l.split()[1] for l in c.until_end("LOCKS") if l.startswith("LOCK ")]


class Beat(BrokerTest):
    conf = {"redis": {"trust_ms": TRUST_MS}}

    def test_beats_write_nothing(self):
        """The trust beat (every trust_ms / 4) and the confirmations of a
        broker's holds read; they write nothing, which a thousand brokers
        would each add to the AOF and to the replicas' stream."""
        c = self.client()
        self.assertRegex(c.cmd("ACQUIRE held TTL 60000"), r"^OK ")
        # Past the grant's own writes and its first confirmation; then a
        # window of six beats (every 150 ms: within 3 * trust_ms).
        self.broker.wait_info("confirms_total", 1)
        before, scripts = changes(self.redis), calls(self.redis, "evalsha")
        start = time.monotonic()
        wait_until(lambda: calls(self.redis, "evalsha") - scripts >= 6,
                   what="six beats")
        self.assertLess(time.monotonic() - start, 3 * TRUST_MS / 1000.0)
        self.assertEqual(changes(self.redis), before)
        self.assertEqual(c.cmd("RELEASE held"), "OK")

    def test_idle_broker_sends_nothing(self):
        """A broker that holds nothing and has nobody waiting has nothing
        to vouch for: it sends Redis nothing at all (here for 20 beat
        periods; with the default trust_ms, a minute is 48), and its next
        request still finds Redis and is granted."""
        c = self.client()
        self.assertRegex(c.cmd("ACQUIRE once WAIT 0"), r"^OK ")
        self.assertEqual(c.cmd("RELEASE once"), "OK")
        # Quiet from its next beat on: Redis shows its connection idle.
        wait_quiet(self.redis, self.broker)
        before = self.redis("INFO", "commandstats")
        # Every command but INFO (the test's own): not one more call in
        # a window of 20 beat periods (3 s), watched all along.
        strip = lambda info: sorted(l for l in info.split("\r\n")
                                    if l.startswith("cmdstat_") and
                                    not l.startswith("cmdstat_info:"))
        holds_for(lambda: strip(self.redis("INFO", "commandstats")) ==
                  strip(before), 20 * TRUST_MS / 4 / 1000.0,
                  "no command sent to Redis")
        self.assertRegex(c.cmd("ACQUIRE again WAIT 0"), r"^OK ")

    def test_idle_broker_asks_until_redis_first_answers(self):
        """A broker whose first ask of the incarnation was refused (a
        master without its min-replicas: NOREPLICAS) keeps asking while
        it holds nothing: it is up (redis_up, /healthz) as soon as Redis
        answers, not at its first request."""
        self.redis("CONFIG", "SET", "min-replicas-to-write", "1")
        try:
            b = self.start_broker(self.conf, name="refused", wait_redis=False)
            wait_for(lambda: b.info().get("redis_up") == "0")
            refused = noreplicas(self.redis)
            wait_until(lambda: noreplicas(self.redis) >= refused + 2,
                       what="two more asks refused")
            self.assertEqual(b.info().get("redis_up"), "0")
        finally:
            self.redis("CONFIG", "SET", "min-replicas-to-write", "0")
        wait_for(lambda: b.info().get("redis_up") == "1", 5)

    def test_quiet_broker_grants_after_a_loss(self):
        """Redis forgot (FLUSHALL) while this broker was quiet: another
        broker, holding a lock, made the new incarnation and its grace
        period is over; the quiet broker's next request is sent after a
        beat, and a try-once is answered from the new incarnation, not
        with ERR UNAVAILABLE."""
        busy = self.start_broker(self.conf, name="busy")
        h = self.client(busy)
        self.assertRegex(h.cmd("ACQUIRE kept TTL 60000"), r"^OK ")
        c = self.client()
        # Quiet from its next beat on: Redis shows its connection idle.
        wait_quiet(self.redis, self.broker)
        self.assertEqual(self.redis("FLUSHALL"), "OK")
        wait_for(lambda: "new lock data" in busy.logtext())
        probe = self.client(busy)       # until the grace period is over
        wait_for(lambda: probe.cmd("ACQUIRE probe WAIT 0").startswith("OK "),
                 10, 0.05)
        self.assertRegex(c.cmd("ACQUIRE after WAIT 0"), r"^OK ")
        self.assertEqual(locks(h), ["kept"])


class Events(BrokerTest):
    """Each event goes to the brokers it concerns, on their own channels
    (lockbroker:to:<broker>), never to the channel every broker hears:
    with a thousand brokers, one REVOKE is not a thousand deliveries."""

    conf = {"auth": {"admin_secret": "adm1n-secret"}}

    def setUp(self):
        super().setUp()
        self.others = [self.start_broker(self.conf, name="b%d" % i)
                       for i in (1, 2, 3)]
        self.to = {b: self.channel_of(b) for b in [self.broker] + self.others}
        self.psub = Listener(self.redis.port)
        self.addCleanup(self.psub.close)

    def said(self):
        """Every (channel, message) published since the last call."""
        return self.psub.take(0.3 * LATE)

    def channel_of(self, broker):
        """broker's own channel: WHO shows <hostname>:<pid> of a grant it
        made; the channel has the random part too."""
        c = self.client(broker)
        self.assertRegex(c.cmd("ACQUIRE whoami"), r"^OK ")
        host_pid = c.until_end("WHO whoami")[0].split()[4]
        self.assertEqual(c.cmd("RELEASE whoami"), "OK")
        chans = self.redis("PUBSUB", "CHANNELS",
                           "lockbroker:to:%s:*" % host_pid)
        self.assertEqual(len(chans), 1, chans)
        return chans[0]

    def test_revoke_tells_only_the_holders_broker(self):
        h = self.client(self.others[0])
        f = h.cmd("ACQUIRE r TTL 30000").split()[1]
        to = self.to[self.others[0]]
        adm = self.client()
        self.assertEqual(adm.cmd("AUTH adm1n-secret"), "OK")
        self.said()
        self.assertEqual(adm.cmd("REVOKE r"), "OK 1")
        self.assertEqual(h.line(), "EVENT LOST r %s revoked" % f)
        self.assertEqual(self.said(), [(to, "r revoked " + f)])

    def test_token_release_elsewhere_tells_only_the_holders_broker(self):
        h = self.client(self.others[0])
        f = h.cmd("ACQUIRE t TTL 30000 TOKEN tok-t").split()[1]
        to = self.to[self.others[0]]
        self.said()
        x = self.client(self.others[1])
        self.assertEqual(x.cmd("RELEASE t TOKEN tok-t"), "OK")
        self.assertEqual(h.line(), "EVENT LOST t %s revoked" % f)
        said = self.said()
        self.assertEqual([c for c, _ in said], [to], said)
        self.assertRegex(said[0][1], r"^t released %s \S+$" % f)

    def test_shortened_then_released_tells_only_the_holders_broker(self):
        h = self.client(self.others[0])
        f = h.cmd("ACQUIRE s TTL 30000 TOKEN tok-s").split()[1]
        to = self.to[self.others[0]]
        self.said()
        x = self.client(self.others[1])
        self.assertRegex(x.cmd("ACQUIRE s TTL 10000 TOKEN tok-s"),
                         r"^OK %s " % f)
        self.assertEqual(h.line(), "EVENT LOST s %s revoked" % f)
        said = self.said()
        self.assertEqual([c for c, _ in said], [to], said)
        self.assertRegex(said[0][1], r"^s shortened %s \S+$" % f)
        # Both brokers' ids are in the entry now (WHO shows each as
        # <hostname>:<pid>): the release by the second tells the first,
        # and nobody else.
        both = x.until_end("WHO s")[0].split()[4].split(",")
        host = both[0].split(":")[0]
        self.assertEqual(both, ["%s:%d" % (host, b.proc.pid)
                                for b in self.others[:2]])
        self.assertEqual(x.cmd("RELEASE s"), "OK")
        said = self.said()
        self.assertEqual([c for c, _ in said], [to], said)
        self.assertRegex(said[0][1], r"^s released %s \S+$" % f)

    def test_release_wakes_only_the_brokers_of_marked_waiters(self):
        lead = self.client(self.others[0])
        f = lead.cmd("FILL fl").split()[1]
        w = self.client(self.others[2])
        w.send("FILL fl WAIT 30000")
        wait_for(lambda: self.redis("EXISTS", "lockbroker:{fl}:waiting"))
        self.said()
        self.assertEqual(lead.cmd("RELEASE fl"), "OK")
        self.assertEqual(w.line(), "DONE")
        self.assertEqual(self.said(), [(self.to[self.others[2]], "fl")])


class Shared(BrokerTest):
    """A grant one token holds through several brokers, after Redis forgot
    it (a FLUSHALL) and their holds were put back: the entry names each
    broker again, so a release through one tells the others."""

    conf = {"redis": {"trust_ms": TRUST_MS}}

    def test_put_back_grant_names_every_broker(self):
        b1 = self.start_broker(self.conf, name="b1")
        b2 = self.start_broker(self.conf, name="b2")
        h0, h1 = self.client(), self.client(b1)
        f = h0.cmd("ACQUIRE pb TTL 60000 TOKEN tpb").split()[1]
        self.assertRegex(h1.cmd("ACQUIRE pb TTL 60000 TOKEN tpb"),
                         r"^OK %s " % f)
        self.assertEqual(self.redis("FLUSHALL"), "OK")
        # Both holds back, both brokers in the entry (each confirms within
        # trust_ms, after the grace period's put-back).
        wait_for(lambda: len(self.who_brokers(h0, "pb")) == 2,
                 (TRUST_MS * 1.02 + 1 + 1000 + 2 * TRUST_MS) / 1000.0 + 2)
        x = self.client(b2)
        wait_for(lambda: x.cmd("ACQUIRE probe WAIT 0").startswith("OK "),
                 10, 0.05)   # the grace period is over
        self.assertEqual(h0.cmd("RELEASE pb"), "OK")
        self.assertEqual(h1.line(), "EVENT LOST pb %s revoked" % f)
        self.assertRegex(x.cmd("ACQUIRE pb WAIT 0"), r"^OK ")

    @staticmethod
    def who_brokers(c, name):
        who = c.until_end("WHO " + name)
        return who[0].split()[4].split(",") if who else []


class Wakes(BrokerTest):
    """A release wakes every waiter it concerns at once, not at its next
    retry (locks.retry_min_ms, 4 s here)."""

    conf = {"locks": {"retry_min_ms": 4000, "retry_max_ms": 8000}}

    def test_fill_waiter_told_done_when_the_name_is_handed_on(self):
        """A FILL leader's release hands the name to another broker's
        queued ticket; a FILL waiter on a third broker learns at once that
        its leader is done."""
        b1 = self.start_broker(self.conf, name="b1")
        b2 = self.start_broker(self.conf, name="b2")
        lead, w, fw = self.client(), self.client(b1), self.client(b2)
        self.assertRegex(lead.cmd("FILL fh"), r"^OK ")
        w.send("ACQUIRE fh WAIT 30000")
        wait_for(lambda: self.redis("ZCARD", "lockbroker:{fh}:queue") == 1)
        fw.send("FILL fh WAIT 30000")
        # Marked by its refused try: it waits for its retry (4 s) now.
        wait_for(lambda: self.redis("EXISTS", "lockbroker:{fh}:waiting"))
        start = time.monotonic()
        self.assertEqual(lead.cmd("RELEASE fh"), "OK")
        self.assertRegex(w.line(), r"^OK ")
        self.assertEqual(fw.line(), "DONE")
        self.assertLess(time.monotonic() - start, 1.0 * LATE)



class Waiting(BrokerTest):
    """A waiter whose ticket is queued behind a holder is handed the name
    by the holder's release (a message to its broker): it does not ask
    Redis again and again meanwhile, which over a fleet is a try per
    waiter and broker for every grant."""

    def test_queued_waiter_waits_for_its_hand_over(self):
        other = self.start_broker(name="other")
        h, w = self.client(), self.client(other)
        self.assertRegex(h.cmd("ACQUIRE q TTL 30000"), r"^OK ")
        w.send("ACQUIRE q WAIT 30000")
        wait_for(lambda: self.redis("ZCARD", "lockbroker:{q}:queue") == 1)
        scripts = calls(self.redis, "evalsha")
        # At most the two brokers' beats (every 1.25 s) and a try to keep
        # the ticket live (every locks.retry_max_ms, 1 s) in 0.8 s; a
        # back-off from locks.retry_min_ms (5 ms) would have tried 7 times.
        holds_for(lambda: calls(self.redis, "evalsha") - scripts <= 3, 0.8,
                  "at most 3 scripts run")
        start = time.monotonic()
        self.assertEqual(h.cmd("RELEASE q"), "OK")
        self.assertRegex(w.line(), r"^OK ")
        self.assertLess(time.monotonic() - start, 0.1 * LATE)

if __name__ == "__main__":
    main()

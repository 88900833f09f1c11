#!/usr/bin/env python3
"""Checks of lbcluster.py, the Redis Cluster harness, against the cluster
itself: each test would fail if the harness were wrong (a slot computed
differently from Redis, a move that left one node pointing elsewhere, a
failover that returned before the roles swapped). One cluster for the
whole file: forming one costs about 2 s (a master says cluster_state:ok
no sooner than 2 s after it starts), so the tests share it and each
leaves it settled, with three shards of a master and a replica."""

import os
import random
import shutil
import signal
import tempfile
import time
import unittest

import lbtest
from lbcluster import (SLOTS, Cluster, lock_key, pipeline, slot_of,
                       slot_of_name, slot_tag)

NODE_TIMEOUT_MS = 1500


def moved_to(reply):
    """(slot, port) of a MOVED or ASK error, else None."""
    if not isinstance(reply, RuntimeError):
        return None
    f = str(reply).split()
    if f[0] not in ("MOVED", "ASK"):
        return None
    return int(f[1]), int(f[2].rsplit(":", 1)[1])


@unittest.skipIf(lbtest.WRAPPER, "tests the harness, not the daemon")
class ClusterFixture(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmpdir = tempfile.mkdtemp(prefix="lbcluster-")
        cls.addClassCleanup(shutil.rmtree, cls.tmpdir, True)
        t0 = time.monotonic()
        cls.cluster = Cluster(cls.tmpdir, node_timeout_ms=NODE_TIMEOUT_MS)
        cls.addClassCleanup(cls.cluster.stop)
        print("cluster formed and seeded in %.2f s" %
              (time.monotonic() - t0))

    def setUp(self):
        self.c = self.cluster
        self.assertEqual(len(self.c.masters()), 3)

    def key_on(self, master, word="k"):
        """A key in a slot master serves (its first)."""
        return "%s{%s}" % (word, slot_tag(self.c.slots_of(master)[0]))

    def assert_served_by(self, key, port, value):
        """Every live node but port answers MOVED to port for key (replicas
        too: they send clients to their master), and port has value."""
        slot = slot_of(key)
        for p in self.c.live_ports():
            r = self.c.node(p)("GET", key)
            if p == port:
                self.assertEqual(r, value, "%s on %d" % (key, p))
            else:
                self.assertEqual(moved_to(r), (slot, port),
                                 "%s on %d: %r" % (key, p, r))

    def assert_all_say(self, slot, port):
        """Every live node's own map (CLUSTER NODES) gives slot to port:
        asked first thing after a change, before gossip could mend a
        harness that returned early."""
        for p in self.c.live_ports():
            self.assertEqual(self.c.view(p).owner(slot), port,
                             "slot %d's master according to %d" % (slot, p))

    def test_slot_of_is_redis_keyslot(self):
        rnd = random.Random(31)
        alphabet = "ab{}:x0"
        keys = ["", "{}", "{}x", "x{}", "{{}}", "{a{b}c}", "a{{b}}c",
                "}{a}", "{a}}", "{{a}", "a{b", "a}b", "lockbroker:{n}:q",
                "\u00e9{\u00e8}"]
        keys += ["".join(rnd.choice(alphabet)
                         for _ in range(rnd.randint(1, 12)))
                 for _ in range(400)]
        node = self.c.node(self.c.masters()[0]).connect()
        try:
            got = pipeline(node, [("CLUSTER", "KEYSLOT", k) for k in keys])
        finally:
            node.close()
        for k, s in zip(keys, got):
            self.assertEqual(slot_of(k), s, "slot of %r" % k)
        # src/slot.c's tag of each slot, whose keys are the slot's marker.
        for s in range(SLOTS):
            self.assertEqual(slot_of("{%s}" % slot_tag(s)), s)

    def test_names_in_each_shard(self):
        """Each name's lock key is served by the master it is listed
        under (SET there answers, no MOVED)."""
        shards = self.c.names_in_each_shard(2)
        self.assertEqual(sorted(shards), self.c.masters())
        for seed in self.c.seeds():
            host, port = seed.rsplit(":", 1)
            self.assertEqual(host, "127.0.0.1")
            self.assertEqual(self.c.node(int(port))("ROLE")[0], "master")
        self.assertEqual(len(self.c.seeds()), 3)
        for master, names in shards.items():
            self.assertEqual(len(names), 2)
            for name in names:
                self.assertEqual(slot_of_name(name),
                                 self.c.node(master)("CLUSTER", "KEYSLOT",
                                                     lock_key(name)))
                self.assertEqual(self.c.node(master)(
                    "EXISTS", lock_key(name) + ":probe"), 0)
        slot = slot_of_name(shards[self.c.masters()[0]][0])
        for name in self.c.names_in_slot(slot, 3):
            self.assertEqual(slot_of_name(name), slot)

    def test_move_slot(self):
        """Every key of the slot (more than one GETKEYSINSLOT's worth, and
        its incarnation marker) is on the new owner after move_slot, and
        every other node sends clients there at once."""
        src, dst = self.c.masters()[:2]
        slot = self.c.slots_of(src)[7]
        tag = slot_tag(slot)
        keys = ["k%d{%s}" % (i, tag) for i in range(150)]
        node = self.c.node(src).connect()
        try:
            pipeline(node, [("SET", k, k) for k in keys])
        finally:
            node.close()
        steps = []
        mig = self.c.move_slot(slot, dst, on_step=steps.append)
        self.assert_all_say(slot, dst)
        self.assertEqual(sorted(steps), sorted(keys + [
            "lockbroker:{%s}incarnation" % tag]))
        self.assertEqual(mig.src, src)
        self.assertEqual(self.c.master_of(slot), dst)
        self.assertEqual(self.c.node(dst)("CLUSTER", "COUNTKEYSINSLOT", slot),
                         151)
        self.assertEqual(self.c.node(src)("CLUSTER", "COUNTKEYSINSLOT", slot),
                         0)
        self.assert_served_by(keys[0], dst, keys[0])
        self.assert_served_by(keys[-1], dst, keys[-1])

    def test_mid_migration_tryagain_ask(self):
        """Half-migrated: a script over two keys of one tag, one moved,
        gets TRYAGAIN; over two keys the source lacks, ASK to the target,
        which runs it after ASKING (and without, sends it back)."""
        src, dst = self.c.masters()[1:3]
        slot = self.c.slots_of(src)[11]
        tag = slot_tag(slot)
        a, b, c, d = ("%s{%s}" % (w, tag) for w in "abcd")
        self.assertEqual(self.c.node(src)("MSET", a, "1", b, "2"), "OK")
        script = "return redis.call('MGET', KEYS[1], KEYS[2])"
        mig = self.c.begin_migration(slot, dst)
        # Should a check fail, the slot is moved all the same: the other
        # tests share the cluster.
        self.addCleanup(lambda: mig.finished or self.c.finish_migration(mig))
        self.c.migrate_key(mig, a)
        self.assertEqual(self.c.node(src)("GET", b), "2")
        r = self.c.node(src)("EVAL", script, 2, a, b)
        self.assertTrue(str(r).startswith("TRYAGAIN"), r)
        r = self.c.node(src)("EVAL", script, 2, c, d)
        self.assertEqual(moved_to(r), (slot, dst), r)
        self.assertTrue(str(r).startswith("ASK"), r)
        self.assertEqual(moved_to(self.c.node(dst)("EVAL", script, 2, c, d)),
                         (slot, src))
        # The target, asked, runs a script whose keys it has all, or of
        # one key; one of several keys it lacks waits for the end of the
        # migration (TRYAGAIN), as on the source.
        conn = self.c.node(dst).connect()
        try:
            self.assertEqual(conn("ASKING"), "OK")
            self.assertEqual(conn("EVAL", script, 2, a, a), ["1", "1"])
            self.assertEqual(conn("ASKING"), "OK")
            self.assertEqual(conn("EVAL", "return redis.call('GET', KEYS[1])",
                                  1, c), None)
            self.assertEqual(conn("ASKING"), "OK")
            r = conn("EVAL", script, 2, c, d)
            self.assertTrue(str(r).startswith("TRYAGAIN"), r)
        finally:
            conn.close()
        self.c.hold_open(mig, 0.1)  # pause_between_keys' pause
        self.c.finish_migration(mig)
        self.assert_all_say(slot, dst)
        with self.assertRaisesRegex(AssertionError, "no longer slot"):
            self.c.hold_open(mig, 0.1)
        self.assertIn(b, mig.moved)
        self.assert_served_by(b, dst, "2")
        self.assertEqual(self.c.node(dst)("EVAL", script, 2, a, b),
                         ["1", "2"])

    def test_failover_each_mode(self):
        """Each mode on its own shard: the replica is master, the old
        master its replica, a key written with WAIT 1 is there, and every
        node sends clients to the new master at once."""
        for master, mode in zip(self.c.masters(),
                                ("default", "FORCE", "TAKEOVER")):
            with self.subTest(mode=mode):
                key = self.key_on(master, "f" + mode)
                conn = self.c.node(master).connect()
                try:
                    self.assertEqual(conn("SET", key, mode), "OK")
                    self.assertEqual(conn("WAIT", 1, 5000), 1)
                finally:
                    conn.close()
                rep = self.c.replica_of(master)
                new = self.c.failover(master, mode)
                self.assert_all_say(self.c.slots_of(new)[0], new)
                self.assertEqual(new, rep)
                self.assertEqual(self.c.node(new)("ROLE")[0], "master")
                role = self.c.node(master)("ROLE")
                self.assertEqual((role[0], role[2]), ("slave", new))
                self.assertEqual(self.c.replicas_of(new), [master])
                self.assert_served_by(key, new, mode)

    def test_kill_master(self):
        """A killed master's replica is promoted no sooner than
        cluster-node-timeout and within the bound below, with what was
        written with WAIT 1; the old master, restarted, replicates it."""
        t = self.c.cluster_node_timeout() / 1000
        self.assertEqual(t, NODE_TIMEOUT_MS / 1000)
        master = self.c.masters()[0]
        key = self.key_on(master, "kill")
        conn = self.c.node(master).connect()
        try:
            self.assertEqual(conn("SET", key, "v"), "OK")
            self.assertEqual(conn("WAIT", 1, 5000), 1)
        finally:
            conn.close()
        rep = self.c.replica_of(master)
        t0 = time.monotonic()
        new = self.c.kill_master(master)
        took = time.monotonic() - t0
        # The others mark it failing (PFAIL) once it has not answered a
        # ping for the node timeout t, and failed (FAIL) once a majority of
        # masters' reports meet, which gossip carries within another t at
        # most; its replica then waits 500 ms plus up to 500 ms at random
        # (rank 0) before it asks for votes; the votes, its broadcast of
        # the new configuration and this test's polls take a round trip or
        # two, for which (and for a loaded machine) we allow a second more.
        bound = t + t + 1.0 + 1.0
        print("promoted after %.2f s (node timeout %.1f s, bound %.1f s)" %
              (took, t, bound))
        self.assertEqual(new, rep)
        self.assertGreaterEqual(took, t)
        self.assertLessEqual(took, bound)
        self.assertEqual(self.c.node(new)("GET", key), "v")
        self.assert_served_by(key, new, "v")
        self.c.restart(master)
        role = self.c.node(master)("ROLE")
        self.assertEqual((role[0], role[2], role[3]),
                         ("slave", new, "connected"))
        self.assertEqual(self.c.replicas_of(new), [master])

    def test_wait_replicated(self):
        """wait_replicated waits for a replica that lags (stopped here
        behind the harness's back, so that it still counts as live) and
        returns once it has the write."""
        master = self.c.masters()[2]
        rep = self.c.replica_of(master)
        key = self.key_on(master, "repl")
        pid = self.c.node(rep).proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            self.assertEqual(self.c.node(master)("SET", key, "x"), "OK")
            with self.assertRaisesRegex(AssertionError, "at offset"):
                self.c.wait_replicated(master, timeout=0.3)
        finally:
            os.kill(pid, signal.SIGCONT)
        self.c.wait_replicated(master)
        conn = self.c.node(rep).connect()
        try:
            self.assertEqual(conn("READONLY"), "OK")
            self.assertEqual(conn("GET", key), "x")
        finally:
            conn.close()

    def test_promote_stale(self):
        """A replica cut off before a write is promoted without it; what
        was written before the cut is there; the old master, restarted,
        replicates it."""
        master = self.c.masters()[2]
        old, missed = self.key_on(master, "old"), self.key_on(master, "new")
        self.assertEqual(self.c.node(master)("SET", old, "1"), "OK")
        self.c.wait_replicated(master)
        rep = self.c.promote_stale(
            master, lambda: self.c.node(master)("SET", missed, "1"))
        self.assertEqual(self.c.node(rep)("GET", old), "1")
        self.assertIsNone(self.c.node(rep)("GET", missed))
        self.c.restart(master)
        self.assertEqual(self.c.node(master)("ROLE")[:3],
                         ["slave", "127.0.0.1", rep])

    def test_pause_master(self):
        """A master stopped past the node timeout is replaced; resumed, it
        replicates its successor."""
        master = self.c.masters()[1]
        rep = self.c.replica_of(master)
        self.c.pause(master)
        self.c.wait_promoted(master, rep)
        self.assertEqual(self.c.master_of(self.c.slots_of(rep)[0]), rep)
        self.c.resume(master)
        role = self.c.node(master)("ROLE")
        self.assertEqual((role[0], role[2]), ("slave", rep))


if __name__ == "__main__":
    lbtest.main()

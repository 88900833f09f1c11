#!/usr/bin/env python3
"""The broker on a real Redis Cluster (three masters, a replica each, on
loopback): names on every shard; a slot moved under a held name (MOVED),
and half moved (ASK, TRYAGAIN); a shard failed over (CLUSTER FAILOVER,
FORCE and TAKEOVER) or its master killed; a moved slot's new master
failed over and back before an idle broker's request reaches it through
MOVED. What must hold: a holder in LOCKS not told EVENT LOST is the only
holder of its name, holders in the other shards are not touched (no
check, no new incarnation of their slots), and a failed shard's holders
are put back or told."""

import os
import re
import shutil
import tempfile
import threading
import time
import unittest

from lbcluster import Cluster, lock_key, slot_of_name, slot_tag
from lbtest import WRAPPER, Broker, Redis, holds_for, main, wait_until
from test_told import drain
from test_truth import fence_of, locks_of, next_line

NODE_TIMEOUT_MS = 1000
# A short trust: a grace period is trust_ms * 1.02 + clock_step_ms +
# cluster-node-timeout + 1 s, 3.1 s here (docs/protocol.md §8). Under
# valgrind a broker's beat can be late by more than a second: 4 s.
TRUST_MS = 4000 if WRAPPER else 1000
CONF = {"redis": {"trust_ms": TRUST_MS, "clock_step_ms": 100,
                  "command_timeout_ms": 2000},
        "log": {"level": os.environ.get("LBLOG", "info")}}
ADMIN = "cluster-admin-secret"
GRACE_S = (TRUST_MS * 1.02 + 100 + NODE_TIMEOUT_MS + 1000) / 1000


class ClusterTest(unittest.TestCase):
    """One cluster for the class; brokers and clients per test."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="lbcluster-")
        # A master down stops only its own slots (docs/operations.md,
        # Redis Cluster); with full coverage required every node answers
        # CLUSTERDOWN until its replica is promoted.
        cls.cluster = Cluster(cls.tmp, node_timeout_ms=NODE_TIMEOUT_MS,
                              extra=("--cluster-require-full-coverage",
                                     "no"))

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.tmpdir = tempfile.mkdtemp(prefix="lbtest-", dir=self.tmp)
        self.brokers, self.clients = [], []

    def tearDown(self):
        for c in self.clients:
            c.close()
        for b in self.brokers:
            code = b.stop()
            if code != 0:
                print(b.logtext()[-6000:])
            self.assertEqual(code, 0, "%s did not exit cleanly" % b.name)
        for b in self.brokers:
            self.assertNotIn("non local key", b.logtext())
        self.assertNotIn("non local key", self.cluster.logs())

    def broker(self, name="broker", seed=None, redis=None):
        """A broker that knows the cluster by one seed node (a master),
        with redis's settings over CONF's."""
        seed = seed or self.cluster.masters()[0]
        conf = {g: dict(k) for g, k in CONF.items()}
        conf["redis"].update(redis or {})
        conf["redis"]["cluster"] = ["127.0.0.1:%d" % seed]
        conf["auth"] = {"admin_secret": ADMIN}
        b = Broker(self.tmpdir, seed, conf, name=name)
        self.brokers.append(b)
        wait_until(lambda: b.info().get("redis_up") == "1",
                   what="%s up on the cluster" % name)
        return b

    def client(self, b):
        c = b.client()
        self.clients.append(c)
        return c

    def nodes_info(self, c):
        """INFO's redis_node<i> lines: {addr: {field: int}}."""
        out = {}
        for k, v in c.info().items():
            if k.startswith("redis_node"):
                f = dict(x.split("=", 1) for x in v.split(","))
                addr = f.pop("addr")
                out[addr] = {k2: int(v2) for k2, v2 in f.items()}
        return out

    def incarnations(self, c, port):
        return self.nodes_info(c)["127.0.0.1:%d" % port]["incarnations"]

    def command_clients(self, port):
        """The node's clients that are not its replicas, a subscriber or
        this very CLIENT LIST: the brokers' command connections."""
        out = self.cluster.node(port)("CLIENT", "LIST")
        out = out.decode() if isinstance(out, bytes) else out
        return [c for c in out.splitlines() if " flags=N " in c and
                " cmd=client|list" not in c]

    def assert_refused(self, c, name):
        """A try-once for name is not granted (another holds it)."""
        r = c.cmd("ACQUIRE %s WAIT 0" % name)
        self.assertFalse(r.startswith("OK "), "%s granted twice: %r" %
                         (name, r))

    def assert_told_nothing(self, c, seconds):
        self.assertEqual(drain(c, seconds), [])


class Shards(ClusterTest):
    def test_names_on_every_shard(self):
        """Names on each master: granted, stored on the master of their
        slot (every key of a name there), refused to another broker while
        held, shown by WHO and revoked through it, handed to its waiter
        when released; each master's figures in INFO."""
        b1, b2 = self.broker("b1"), self.broker("b2")
        a, z = self.client(b1), self.client(b2)
        shards = self.cluster.names_in_each_shard(2)
        names = [n for ns in shards.values() for n in ns]
        fences = {n: fence_of(a.cmd("ACQUIRE %s" % n)) for n in names}
        self.assertEqual(sorted(locks_of(a)), sorted(names))
        for master, ns in shards.items():
            for n in ns:
                self.assertEqual(self.cluster.master_of(slot_of_name(n)),
                                 master)
                self.assertEqual(self.cluster.node(master)(
                    "EXISTS", lock_key(n)), 1)
                self.assert_refused(z, n)
        # WHO and REVOKE on every shard, through the other broker.
        adm = self.client(b2)
        self.assertEqual(adm.cmd("AUTH " + ADMIN), "OK")
        for ns in shards.values():
            who = adm.until_end("WHO %s" % ns[0])
            self.assertEqual(len(who), 1, who)
            self.assertIn(str(fences[ns[0]]), who[0])
            self.assertEqual(adm.cmd("REVOKE %s" % ns[1]), "OK 1")
            self.assertEqual(next_line(a, 5), "EVENT LOST %s %d revoked" %
                             (ns[1], fences[ns[1]]))
        waiter = self.client(b2)
        waiter.send("ACQUIRE %s WAIT 10000" % names[0])
        self.assertEqual(a.cmd("RELEASE %s" % names[0]), "OK")
        self.assertGreater(fence_of(waiter.line()), fences[names[0]])
        info = self.nodes_info(a)
        self.assertEqual(sorted(info), sorted(
            "127.0.0.1:%d" % m for m in shards))
        for addr, f in info.items():
            self.assertEqual(f["up"], 1, addr)
            self.assertGreater(f["requests"], 0, addr)
        self.assertEqual(b1.info()["redis_up"], "1")

    def test_a_known_slot_costs_one_call_per_grant(self):
        """A grant in a slot whose incarnation the broker knows is one
        script call, however long the slot went unheard: the gate in the
        script vouches for it (docs/protocol.md §8), and the hold it
        made is trusted as one vouched by the beat, not lost for want
        of an answer it did not ask for."""
        b = self.broker()
        a = self.client(b)
        name = "known-slot"
        master = self.cluster.master_of(slot_of_name(name))
        fence_of(a.cmd("ACQUIRE %s" % name))
        self.assertEqual(a.cmd("RELEASE %s" % name), "OK")
        # Idle (no beat) for longer than the broker trusts an answer.
        self.assert_told_nothing(a, TRUST_MS * 1.5 / 1000)

        def evals():
            s = self.cluster.node(master)("INFO", "commandstats")
            return int(s.split("cmdstat_evalsha:calls=")[1].split(",")[0])
        before = evals()
        fence_of(a.cmd("ACQUIRE %s" % name))
        self.assertEqual(evals() - before, 1)
        self.assert_told_nothing(a, TRUST_MS * 2.5 / 1000)
        self.assertEqual(locks_of(a), [name])

    def test_found_by_host_and_port(self):
        """redis.host/port naming one node of a cluster works as
        redis.cluster does: the broker finds the map and the masters."""
        seed = self.cluster.masters()[1]
        b = Broker(self.tmpdir, seed, CONF, name="direct")
        self.brokers.append(b)
        b.wait_log("is a cluster's node")
        wait_until(lambda: b.info().get("redis_up") == "1",
                   what="up on the cluster")
        a = self.client(b)
        for ns in self.cluster.names_in_each_shard(1, base="d").values():
            fence_of(a.cmd("ACQUIRE %s" % ns[0]))
            self.assertEqual(a.cmd("RELEASE %s" % ns[0]), "OK")


    def test_a_replica_among_the_seeds_leaves_the_broker_up(self):
        """A seed that is a replica is closed once the map shows it serves
        no slots. Closing it said the broker was down (redis_up 0) when
        its INFO answered (or timed out) after every master's, and nothing
        said up again (a restarted broker in the chaos suite stayed
        "down" for good, and /healthz with it). Here the replica answers
        last for sure: it is stopped until the broker is up."""
        m = self.cluster.masters()[0]
        rep = self.cluster.replica_of(m)
        self.cluster.pause(rep)
        self.addCleanup(lambda: rep in self.cluster.paused and
                        self.cluster.resume(rep))
        conf = {g: dict(k) for g, k in CONF.items()}
        conf["redis"]["cluster"] = ["127.0.0.1:%d" % p for p in (rep, m)]
        b = Broker(self.tmpdir, m, conf, name="seeds")
        self.brokers.append(b)
        wait_until(lambda: b.info().get("redis_up") == "1",
                   what="up on the cluster")
        self.cluster.resume(rep, settle=False)
        b.wait_log("127.0.0.1:%d serves no slots" % rep)
        self.assertEqual(b.info().get("redis_up"), "1")


class OneNode(unittest.TestCase):
    def one_node(self):
        """A cluster of one unseeded node serving every slot, and a broker
        on it, up."""
        tmp = tempfile.mkdtemp(prefix="lbone-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        r = Redis(tmp, extra=["--cluster-enabled", "yes",
                              "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                              "--cluster-config-file",
                              os.path.join(tmp, "nodes.conf")], seed=False)
        self.addCleanup(r.kill)
        self.assertEqual(r("CLUSTER", "ADDSLOTSRANGE", 0, 16383), "OK")
        wait_until(lambda: "cluster_state:ok" in r("CLUSTER", "INFO"),
                   what="the one node's cluster_state:ok")
        conf = {g: dict(k) for g, k in CONF.items()}
        conf["redis"]["cluster"] = ["127.0.0.1:%d" % r.port]
        b = Broker(tmp, r.port, conf, name="one")
        self.addCleanup(b.stop)
        wait_until(lambda: b.info().get("redis_up") == "1",
                   what="up on the one node")
        c = b.client()
        self.addCleanup(c.close)
        return r, b, c

    def test_a_cluster_of_one_node(self):
        """A cluster of one master, as Redis forms it without
        cluster-announce-ip: the node gives its own address as empty in
        CLUSTER SHARDS (meaning the one asked), and the broker serves
        every slot from it; redis_up is 0 while nothing is served."""
        r, b, c = self.one_node()
        # The slots' first incarnations, made at start, end together.
        c.sock.settimeout(3 * GRACE_S)
        self.assertTrue(c.cmd("ACQUIRE one").startswith("OK "))
        self.assertEqual(c.cmd("RELEASE one"), "OK")
        self.assertIn("16384 slots of 16384 served, by 1 masters",
                      b.logtext())

    def test_a_fresh_cluster_is_made_at_start(self):
        """On a cluster no broker has used, every slot's first incarnation
        (and its grace period) is made when the broker first reaches its
        node, not at each slot's first request: once that grace period is
        over, a name in any slot is granted at once."""
        r, b, c = self.one_node()
        b.wait_log("16384 slots of 127.0.0.1:%d have no lock data yet" %
                   r.port)
        wait_until(lambda: r("DBSIZE") == 16384,
                   what="every slot's marker made")

        def grace_left():
            line = c.info()["redis_node0"]
            return int(line.split("grace_ms=")[1].split(",")[0])
        # Made within a second of each other, their grace periods all
        # end within the first's doubled.
        wait_until(lambda: grace_left() == 0, timeout=2 * GRACE_S,
                   what="the grace periods over")
        # Names of slots never used: no grace period of their own.
        names = ["fresh%d" % i for i in range(40)]
        self.assertGreater(len({slot_of_name(n) for n in names}), 30)
        for n in names:
            reply = c.cmd("ACQUIRE %s WAIT 0" % n)
            self.assertTrue(reply.startswith("OK "), (n, reply))
        self.assertEqual(b.logtext().count("no grant for"), 0)


    def test_a_master_losing_its_data_is_logged_once(self):
        """A master that lost its data (FLUSHALL here) is a new incarnation
        of each of its slots in use: logged once, not once a slot; INFO
        counts them all."""
        r, b, c = self.one_node()
        names = ["lost%d" % i for i in range(20)]
        self.assertEqual(len({slot_of_name(n) for n in names}), 20)

        def incarnations():
            line = c.info()["redis_node0"]
            return int(line.split("incarnations=")[1].split(",")[0])
        wait_until(lambda: "have no lock data yet" in b.logtext(),
                   what="the fresh slots made")
        c.sock.settimeout(3 * GRACE_S)
        for n in names:
            self.assertTrue(c.cmd("ACQUIRE %s TTL 600000" % n).startswith(
                "OK "), n)
        before = incarnations()
        self.assertEqual(r("FLUSHALL"), "OK")
        wait_until(lambda: incarnations() >= before + 20,
                   timeout=4 * TRUST_MS / 1000,
                   what="a new incarnation of each slot held")
        self.assertEqual(b.logtext().count("lock data of slot"), 1)


class Resharding(ClusterTest):
    def test_slot_moved_under_a_held_name(self):
        """A held name's slot moved to another master (every key, then
        SETSLOT NODE): its requests meet MOVED and follow it; the slot is
        a new incarnation (its marker names the old master), so the hold
        is put back, same fence, and nobody else is granted it; the
        holder is told nothing and releases it where it is now."""
        b1, b2 = self.broker("b1"), self.broker("b2")
        a, z = self.client(b1), self.client(b2)
        name = self.cluster.names_in_each_shard(1, base="mv").popitem()[1][0]
        slot = slot_of_name(name)
        src = self.cluster.master_of(slot)
        dst = [m for m in self.cluster.masters() if m != src][0]
        f = fence_of(a.cmd("ACQUIRE %s" % name))
        before = self.incarnations(a, dst)
        self.cluster.move_slot(slot, dst)
        self.assertEqual(self.cluster.node(dst)("EXISTS", lock_key(name)), 1)
        # Each try of the other broker meets the move too.
        holds_for(lambda: not z.cmd("ACQUIRE %s WAIT 0" % name).startswith(
            "OK "), 2 * GRACE_S, "%s refused while held" % name)
        self.assertEqual(drain(a, 0.1), [])
        self.assertEqual(locks_of(a), [name])
        self.assertGreater(self.incarnations(a, dst), before)
        # z's broker read the map before the move and sent nothing since:
        # its first try met MOVED from the old master.
        self.assertGreater(self.nodes_info(z)[
            "127.0.0.1:%d" % src]["redirects"], 0)
        st = z.cmd("STATUS %s" % name)
        self.assertIn(str(f), st)
        self.assertEqual(a.cmd("RELEASE %s" % name), "OK")
        self.assertGreater(fence_of(z.cmd("ACQUIRE %s WAIT 10000" % name)), f)

    def test_half_moved_slot(self):
        """A slot half way through a migration (MIGRATING/IMPORTING, some
        keys moved): a request on its names meets ASK or TRYAGAIN before
        its script runs, and is sent again until it can be served or its
        time is up (ERR UNAVAILABLE): a script's keys include keys that do
        not exist, which neither end has, so Redis answers TRYAGAIN until
        the slot is moved. Nothing is half written ("non local key":
        tearDown), the holder is told nothing, and a waiter on the slot is
        granted once the migration is done (after the slot's new
        incarnation's grace period)."""
        b1, b2 = self.broker("b1"), self.broker("b2")
        a, z, w = self.client(b1), self.client(b2), self.client(b2)
        # Two names in one slot: "<tag>}x" hashes as "<tag>".
        tag = "hm"
        moved, stays = tag + "}x", tag + "}y"
        slot = slot_of_name(moved)
        self.assertEqual(slot_of_name(stays), slot)
        f = fence_of(a.cmd("ACQUIRE %s" % moved))
        src = self.cluster.master_of(slot)
        dst = [m for m in self.cluster.masters() if m != src][0]
        redirects = self.nodes_info(z)["127.0.0.1:%d" % src]["redirects"]
        mig = self.cluster.begin_migration(slot, dst)
        finished = []

        def finish():
            if not finished:
                finished.append(1)
                self.cluster.finish_migration(mig)
        self.addCleanup(finish)
        marker = "lockbroker:{%s}incarnation" % slot_tag(slot)
        for k in self.cluster.node(src)("CLUSTER", "GETKEYSINSLOT", slot,
                                        100):
            if k.startswith(lock_key(moved)) or k == marker:
                self.cluster.migrate_key(mig, k)
        r = z.cmd("ACQUIRE %s WAIT 0" % moved)
        self.assertFalse(r.startswith("OK "), r)
        self.assertGreater(self.nodes_info(z)[
            "127.0.0.1:%d" % src]["redirects"], redirects)
        # A waiter on the slot, granted once the migration is done.
        w.sock.settimeout(30)
        w.send("ACQUIRE %s WAIT 30000" % stays)
        done = threading.Timer(0.5, finish)
        done.start()
        self.addCleanup(done.join)
        self.assertTrue(w.line().startswith("OK "))
        done.join()
        self.assertEqual(self.cluster.master_of(slot), dst)
        self.assertEqual(drain(a, 0.1), [])
        self.assertEqual(locks_of(a), [moved])
        self.assertIn(str(f), z.cmd("STATUS %s" % moved))
        self.assertEqual(a.cmd("RELEASE %s" % moved), "OK")


class Failover(ClusterTest):
    def watch_twice(self, a, z, fences, may_lose):
        """For two grace periods z tries each name a holds: a grant to z
        is a name granted twice unless a was told EVENT LOST for it first
        (the broker tells before anyone can be granted, so the line is
        there once z has its answer). Only names in may_lose may be told.
        The names a still holds."""
        held = set(fences)

        def told(wait):
            for line in drain(a, wait):
                self.assertTrue(line.startswith("EVENT LOST "), line)
                n = line.split()[2]
                self.assertIn(n, may_lose, line)
                held.discard(n)

        def granted_twice():
            told(0.05)
            for n in sorted(held):
                if z.cmd("ACQUIRE %s WAIT 0" % n).startswith("OK "):
                    told(0.2)
                    if n in held:
                        return True
                    self.assertEqual(z.cmd("RELEASE %s" % n), "OK")
            return False
        holds_for(lambda: not granted_twice(), 2 * GRACE_S,
                  "each held name granted once")
        told(0.05)
        return held

    def hold_everywhere(self, a, base):
        shards = self.cluster.names_in_each_shard(2, base=base)
        fences = {}
        for ns in shards.values():
            for n in ns:
                fences[n] = fence_of(a.cmd("ACQUIRE %s" % n))
        return shards, fences

    def check_failover(self, mode):
        """A shard failed over (mode): its holders are put back or told;
        the other shards' holders are not touched (no new incarnation of
        their slots, nothing told); no name is granted to another while
        a holder lists it untold."""
        b1, b2 = self.broker("b1"), self.broker("b2")
        a, z = self.client(b1), self.client(b2)
        shards, fences = self.hold_everywhere(a, "f" + mode.lower())
        failed = sorted(shards)[1]
        others = [m for m in shards if m != failed]
        before = {m: self.incarnations(a, m) for m in others}
        # Every hold's grant on the replicas before the failover.
        for m in shards:
            self.cluster.wait_replicated(m)
        new = self.cluster.failover(failed, mode)
        held = self.watch_twice(a, z, fences, shards[failed])
        self.assertEqual(sorted(locks_of(a)), sorted(held))
        for m in others:
            self.assertEqual(self.incarnations(a, m), before[m], m)
        self.assertGreater(self.incarnations(a, new), 0)
        # The old master, a replica now, serves no slots: the brokers
        # close their command connections to it.
        try:
            wait_until(lambda: self.command_clients(failed) == [], 10,
                       "the brokers' connections to %d closed" % failed)
        except AssertionError as e:
            raise AssertionError("%s: %r" % (
                e, self.command_clients(failed))) from None
        # Closed on purpose: the brokers are still up.
        for b in (a, z):
            self.assertEqual(b.info().get("redis_up"), "1")
        for n in held:
            self.assertIn(str(fences[n]), z.cmd("STATUS %s" % n))
            self.assertEqual(a.cmd("RELEASE %s" % n), "OK")

    def test_failover(self):
        self.check_failover("default")

    def test_failover_force(self):
        self.check_failover("FORCE")

    def test_failover_takeover(self):
        self.check_failover("TAKEOVER")

    def test_a_failed_over_shard_is_made_new_at_once(self):
        """After a failover, every slot of the shard needs a new
        incarnation (its markers were confirmed on the old master's
        process). The broker makes them all when it first reaches the
        new master, not each at its slot's first grant: once one grace
        period has passed, a name in a slot nobody used since is granted
        at once."""
        b1 = self.broker("b1")
        a = self.client(b1)
        shards = self.cluster.names_in_each_shard(2, base="fo")
        failed = sorted(shards)[0]
        first, fresh = shards[failed]
        self.assertNotEqual(slot_of_name(first), slot_of_name(fresh))
        self.assertTrue(a.cmd("ACQUIRE %s WAIT 0" % first).startswith("OK "))
        self.assertEqual(a.cmd("RELEASE %s" % first), "OK")
        self.cluster.wait_replicated(failed)
        self.cluster.failover(failed, "default")
        # The first request meets MOVED: b1 reaches the new master.
        wait_until(lambda: a.cmd("ACQUIRE %s WAIT 0" % first).startswith(
            "OK "), 3 * GRACE_S, "%s granted on the new master" % first)
        # The pass over the shard's slots ends (logged), and the grace
        # period of the slots made in it with it. Without the pass, none
        # is made until its first request, which then waits.
        end = time.monotonic() + 30
        wait_until(lambda: time.monotonic() > end or "were last served by "
                   "another Redis process" in b1.logtext(), 40, "the pass")
        # One grace period from the pass on: an interval, not an event.
        time.sleep(GRACE_S)
        r = a.cmd("ACQUIRE %s WAIT 0" % fresh)
        self.assertTrue(r.startswith("OK "), "%s: %r" % (fresh, r))

    def test_master_killed(self):
        """A master killed: its replica is promoted after the node
        timeout. Holds in that shard hear nothing for redis.trust_ms and
        are lost (told), or are put back; holds elsewhere are kept, and
        nothing is granted twice. The killed node comes back as a
        replica."""
        b1, b2 = self.broker("b1"), self.broker("b2")
        a, z = self.client(b1), self.client(b2)
        shards, fences = self.hold_everywhere(a, "k")
        failed = sorted(shards)[2]
        others = [n for m, ns in shards.items() if m != failed for n in ns]
        for m in shards:
            self.cluster.wait_replicated(m)
        self.cluster.kill_master(failed)
        self.addCleanup(self.cluster.restart, failed)
        held = self.watch_twice(a, z, fences, shards[failed])
        self.assertTrue(set(others) <= held)
        self.assertEqual(sorted(locks_of(a)), sorted(held))
        for n in set(fences) - held:  # free once told and its grace over
            wait_until(lambda: z.cmd("ACQUIRE %s WAIT 0" % n).startswith(
                "OK "), 3 * GRACE_S, "%s granted after the loss" % n)


class FrozenMaster(ClusterTest):
    def test_a_resumed_master_does_not_grant_behind_its_successor(self):
        """A master stopped (SIGSTOP) past cluster-node-timeout: its
        replica is promoted, and b2's client takes name n there once the
        grace period is over. b1 heard of none of it: it still routes n
        to the stopped master, where a's ACQUIRE waits in the socket. The
        master resumed runs it before it learns it was replaced; its
        marker and run_id are unchanged, so the gate passes. b1 heard
        nothing from that master for longer than cluster-node-timeout, so
        it holds the reply until another master's map says the slot is
        still served there: it is not, and a is not told OK while z
        holds n."""
        b1 = self.broker("b1")
        z2 = self.client(b1)  # b1's INFO
        # b2 gives up on the stopped master soon, and finds its successor.
        b2 = self.broker("b2", redis={"command_timeout_ms": 500})
        a, z = self.client(b1), self.client(b2)
        shards = self.cluster.names_in_each_shard(2, base="dm")
        # Not b1's seed: its subscriber, stopped too, would reconnect to
        # another node and refresh b1's map before the ACQUIRE.
        frozen = max(shards, key=lambda p: p != self.cluster.masters()[0])
        n, m = shards[frozen]
        for c in (a, z):
            self.assertTrue(c.cmd("ACQUIRE %s WAIT 0" % n).startswith("OK "))
            self.assertEqual(c.cmd("RELEASE %s" % n), "OK")
        self.cluster.wait_replicated(frozen)
        rep = self.cluster.replica_of(frozen)
        self.cluster.pause(frozen)
        self.addCleanup(lambda: frozen in self.cluster.paused and
                        self.cluster.resume(frozen))
        self.cluster.wait_promoted(frozen, rep)
        # b2 finds the new master through m (its requests to the stopped
        # one time out; the first are still in that master's socket, so
        # not n), then grants n there once the grace period is over.
        wait_until(lambda: any(w in z.cmd("ACQUIRE %s WAIT 0" % m)
                               for w in ("grace", "OK ")),
                   GRACE_S + 10, "b2 to find the new master")
        wait_until(lambda: z.cmd("ACQUIRE %s WAIT 0" % n).startswith("OK "),
                   3 * GRACE_S + 10, "n granted to z on the new master")
        at = "127.0.0.1:%d" % frozen
        sent = self.nodes_info(z2)[at]["requests"]
        a.send("ACQUIRE %s WAIT 0" % n)
        wait_until(lambda: self.nodes_info(z2)[at]["requests"] > sent, 10,
                   "the ACQUIRE sent to the stopped master")
        self.cluster.resume(frozen, settle=False)
        ra = next_line(a, 10)
        self.assertFalse(ra.startswith("OK "),
                         "%s granted to a while z holds it: %r" % (n, ra))
        self.assertIn("answered after a silence", ra)
        self.assertIn("the map no longer names it", b1.logtext())
        self.assertGreaterEqual(int(b1.info()["redis_deposed_total"]), 1)
        self.assertIn(n, locks_of(z))
        self.assertNotIn(n, locks_of(a))
        self.assertEqual(z.cmd("RELEASE %s" % n), "OK")
        self.cluster.wait_settled(what="with %d resumed" % frozen)
        # The broker serves n again, from the new master.
        wait_until(lambda: a.cmd("ACQUIRE %s WAIT 0" % n).startswith("OK "),
                   3 * GRACE_S, "n granted to a after the failover")


class FailBack(ClusterTest):
    def test_a_former_master_made_master_again(self):
        """A master failed over to its replica becomes that replica's
        replica; its link cut, it misses what the new master grants (z
        takes n there). The new master stops and the old one takes over
        (CLUSTER FAILOVER TAKEOVER) with what it had: its run_id is the
        one its markers name, but Redis gave it another replication id,
        so n's slot is a new incarnation there. Neither b1 (which knew
        the old master all along and was idle) nor b3 (started after the
        failback) grants n while z lists it untold."""
        b1 = self.broker("b1")
        a = self.client(b1)
        shards = self.cluster.names_in_each_shard(1, base="fb")
        old = sorted(shards)[0]
        n, = shards[old]
        marker = "lockbroker:{%s}incarnation" % slot_tag(slot_of_name(n))
        self.assertTrue(a.cmd("ACQUIRE %s WAIT 0" % n).startswith("OK "))
        self.assertEqual(a.cmd("RELEASE %s" % n), "OK")
        self.cluster.wait_replicated(old)
        stale = self.cluster.node(old)("HGET", marker, "id")
        new = self.cluster.failover(old)
        self.cluster.cut_replica(new)
        self.addCleanup(lambda: old in self.cluster.paused and
                        self.cluster.resume(old))
        b2 = self.broker("b2", seed=new, redis={"command_timeout_ms": 500})
        z = self.client(b2)
        wait_until(lambda: z.cmd("ACQUIRE %s TTL 60000 WAIT 0" % n)
                   .startswith("OK "), 3 * GRACE_S + 10,
                   "n granted to z on the new master")
        self.cluster.pause(new)
        self.addCleanup(lambda: new in self.cluster.paused and
                        self.cluster.resume(new))
        self.cluster.resume(old, settle=False)
        self.assertEqual(self.cluster.node(old)("CLUSTER", "FAILOVER",
                                                "TAKEOVER"), "OK")
        self.cluster.wait_settled(
            lambda v: v.owner(slot_of_name(n)) == old,
            what="%d serving n again" % old)
        told = []
        for c in (a, self.client(self.broker("b3", seed=old))):
            r = c.cmd("ACQUIRE %s WAIT 0" % n)
            told += drain(z, 0.001)
            self.assertFalse(r.startswith("OK ") and not any(
                e.startswith("EVENT LOST %s " % n) for e in told),
                "%s granted while z holds it, untold: %r" % (n, r))
        node = self.cluster.node(old)
        self.assertNotEqual(node("HGET", marker, "id"), stale)
        self.assertIn("master_replid:%s\r" % node("HGET", marker, "replid"),
                      node("INFO", "replication"))


class MovedFailBack(ClusterTest):
    # A longer trust than the other tests': z's broker, cut off from the
    # master that serves n at the end, goes on trusting its hold (untold)
    # for this long after its last answer, and the takeover before b1's
    # request takes well under it, so what the old code did there is a
    # grant beside an untold holder, not just one in a grace period.
    trust_ms = max(TRUST_MS, 4000)
    grace_s = (trust_ms * 1.02 + 100 + NODE_TIMEOUT_MS + 1000) / 1000

    def idle_broker(self, name, seed):
        """A broker whose start is over: its last map asked and every
        master's slots read (lockdb_seed) before it returns, so that from
        here on it asks Redis nothing until a client asks it something,
        and keeps the slot map it has. Each master's connect asks for the
        map, later ones held back for a moment on a timer, and each pass
        over a master's slots reads them a few at a time: neither says
        when it is done. So one slot is served by nobody while it starts
        (a map with a slot nobody serves is asked for again until every
        slot is served, which is said once), and one marker is missing on
        each master (its pass ends saying it made one: slots nothing here
        uses)."""
        c = self.cluster
        masters = c.masters()
        unserved = c.slots_of(seed)[-1]
        for m in masters:
            marker = "lockbroker:{%s}incarnation" % slot_tag(
                c.slots_of(m)[-2])
            self.assertEqual(c.node(m)("DEL", marker), 1)
        # The seed first: a master's pings claim its slots, which a node
        # that dropped the slot before would take back.
        for p in [seed] + [p for p in c.live_ports() if p != seed]:
            self.assertEqual(c.node(p)("CLUSTER", "DELSLOTS", unserved), "OK")
        wait_until(lambda: all(c.view(p).owner(unserved) is None
                               for p in c.live_ports()), 10,
                   "slot %d served by nobody" % unserved)
        b = self.broker(name, seed=seed, redis={"trust_ms": self.trust_ms})
        for m in masters:
            said = re.compile(r"1 of the \d+ slots of 127\.0\.0\.1:%d have "
                              "no lock data" % m)
            wait_until(lambda: said.search(b.logtext()), 10,
                       "%s's pass over %d's slots" % (name, m))
        for m in masters:
            self.assertEqual(c.node(m)("CLUSTER", "SETSLOT", unserved,
                                       "NODE", c.ids[seed]), "OK")
        c.wait_settled(what="slot %d served again" % unserved)
        b.wait_log("16384 slots of 16384 served")
        return b

    def test_a_moved_request_is_judged_on_the_master_it_reaches(self):
        """A request that MOVED sends to another master carries that
        master's run_id to the gate (lib/process.lua), not the first
        one's. Here n's slot is moved from src to dst with its keys (its
        marker names src's run_id, as src confirmed it), then dst fails
        over to its replica new, dst is cut off (stopped, its link
        dropped), and b2's client z takes n on new (a new incarnation of
        the slot there, its grace period waited). Then new stops and dst
        takes over with what it had: n's slot without z's grant, and the
        marker naming src. b2 cannot reach dst (its Redis user does not
        exist there: a partition between that broker and that master), so
        z holds n, untold, until b2's trust runs out. b1 was idle all
        along and still sends n to src, which answers MOVED. It was sent
        again to dst with src's run_id, and there a marker naming that
        run_id on another Redis passes as one a slot's migration brought
        (the ASK rule): b1 granted n at once while z held it untold. Now
        it goes with dst's run_id: no marker confirmed there, so b1 makes
        the slot's new incarnation and refuses n in its grace period, in
        which z is told it lost n; only then is n granted to b1."""
        c = self.cluster
        shards = c.names_in_each_shard(1, base="mb")
        src, dst, other = sorted(shards)
        n, = shards[src]
        slot = slot_of_name(n)
        marker = "lockbroker:{%s}incarnation" % slot_tag(slot)
        src_runid = c.node(src)("INFO", "server").split(
            "run_id:")[1].split("\r")[0]
        # b1 knows the map before the move, and n's incarnation on src.
        # Its seed (and subscriber) is a master nothing here stops.
        b1 = self.idle_broker("b1", other)
        a = self.client(b1)
        self.assertTrue(a.cmd("ACQUIRE %s WAIT 0" % n).startswith("OK "))
        self.assertEqual(a.cmd("RELEASE %s" % n), "OK")
        c.move_slot(slot, dst)
        c.wait_replicated(dst)
        new = c.failover(dst)
        user = ("lbcut", "cutpw")
        for p in c.live_ports():
            if p != dst:
                self.assertEqual(c.node(p)(
                    "ACL", "SETUSER", user[0], "on", ">" + user[1], "~*",
                    "&*", "+@all"), "OK")
        held = []

        def grant_on_new():
            b2 = self.broker("b2", seed=other,
                             redis={"trust_ms": self.trust_ms,
                                    "username": user[0],
                                    "password": user[1]})
            z = self.client(b2)
            wait_until(lambda: z.cmd("ACQUIRE %s WAIT 0" % n).startswith(
                "OK "), 3 * self.grace_s + 10, "n granted to z on %d" % new)
            held.append(z)
        c.takeover_stale(new, during=grant_on_new)
        z, = held
        self.assertEqual(c.master_of(slot), dst)
        # Nobody has made n's slot a new incarnation on dst yet.
        self.assertEqual(c.node(dst)("HGET", marker, "runid"), src_runid)
        redirects = self.nodes_info(a)["127.0.0.1:%d" % src]["redirects"]
        r = a.cmd("ACQUIRE %s WAIT 0" % n)
        told = drain(z, 0.001)
        self.assertGreater(self.nodes_info(a)["127.0.0.1:%d" % src][
            "redirects"], redirects, "b1's ACQUIRE did not meet MOVED")
        self.assertFalse(r.startswith("OK "),
                         "%s granted to b1 after MOVED while z holds it "
                         "(z told %r): %r" % (n, told, r))
        self.assertNotEqual(c.node(dst)("HGET", marker, "runid"), src_runid)

        def granted():
            r = a.cmd("ACQUIRE %s WAIT 0" % n)
            told.extend(drain(z, 0.001))
            return r.startswith("OK ")
        wait_until(granted, 3 * self.grace_s, "n granted to b1 at last")
        self.assertTrue(any(e.startswith("EVENT LOST %s " % n)
                            for e in told), told)


class TwoFrozen(ClusterTest):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="lbcluster-")
        cls.cluster = Cluster(cls.tmp, masters=5,
                              node_timeout_ms=NODE_TIMEOUT_MS,
                              extra=("--cluster-require-full-coverage",
                                     "no"))

    def test_two_masters_stopped_do_not_stall_the_broker(self):
        """Two masters of five stopped (SIGSTOP) at once, both replaced by
        their replicas. The kernel still takes connections and requests
        for them, so a broker that asked them for the map waited on them
        for as long as they stayed stopped, and granted nothing in their
        shards meanwhile. Now a map that went unanswered sends the next
        ask elsewhere: a name of the stopped shard is granted on its new
        master within its grace period."""
        a, b = self.cluster.masters()[:2]
        n, = self.cluster.names_in_each_shard(1, base="tf")[a]
        b2 = self.broker("b2", seed=a, redis={"command_timeout_ms": 500})
        z = self.client(b2)
        self.assertTrue(z.cmd("ACQUIRE %s WAIT 0" % n).startswith("OK "))
        self.assertEqual(z.cmd("RELEASE %s" % n), "OK")
        self.cluster.wait_replicated()
        for m in (a, b):
            self.cluster.pause(m)
            self.addCleanup(lambda m=m: m in self.cluster.paused and
                            self.cluster.resume(m))
        self.cluster.wait_settled(
            lambda v: not {a, b} & {p for _, _, p in v.slot_map()},
            what="both stopped masters replaced")
        wait_until(lambda: z.cmd("ACQUIRE %s WAIT 0" % n).startswith("OK "),
                   2 * GRACE_S + 5, "%s granted on its new master" % n)
        self.assertEqual(z.cmd("RELEASE %s" % n), "OK")
        for m in (a, b):
            self.cluster.resume(m, settle=False)
        self.cluster.wait_settled(what="with both resumed")


if __name__ == "__main__":
    main()

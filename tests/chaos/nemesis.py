"""The nemesis: one fault at a time, each healed after a while and followed
by a liveness probe of every broker. Seeded, so a run can be replayed in
its choices (not in its timing)."""

import itertools
import os
import shutil
import signal
import threading
import time

from topology import lbtest  # the e2e harness, on the path topology set
from lbcluster import Cluster, slot_of_name, lock_key  # noqa: E402
from workers import COLD, NAMES  # noqa: E402

KINDS = ("pause_broker", "pause_redis", "pause_worker", "kill_broker",
         "kill_redis", "proxy_cut", "proxy_delay", "proxy_lossy",
         "redis_slow", "clock_jump", "redis_drop", "flushall", "wipe_redis",
         "eviction", "evict_window", "redis_clock_step", "tamper")
# The Sentinel topology (chaos.py --sentinel) adds a failover to a replica
# that missed the last writes, and one away from a master frozen, not
# killed.
SENTINEL_KINDS = KINDS + ("lagging_failover", "frozen_failover")
# The cluster topology (chaos.py --cluster) keeps the kinds that need no
# proxy and no single Redis, and adds a shard's failovers (CLUSTER
# FAILOVER on a replica, a master stopped or killed, a replica that missed
# writes promoted) and a slot moved while its names are held and waited
# on. Each leaves every shard with a master and a replica again.
CLUSTER_FAILOVER_KINDS = ("shard_failover", "master_paused",
                          "stale_promotion", "stale_takeover",
                          "stale_failback", "master_killed")
CLUSTER_KINDS = ("pause_broker", "pause_worker", "kill_broker",
                 "clock_jump") + CLUSTER_FAILOVER_KINDS + ("reshard_held",)
FAILOVER_MODES = ("default", "FORCE", "TAKEOVER")
# stale_takeover: how long the replica misses writes before it takes over.
TAKEOVER_LAG_S = (1.0, 2.0)
# stale_failback: how long the old master misses its successor's writes
# before it takes over again: past the successor's grace period (4.5 s,
# CLUSTER_LIVENESS_S), so that the successor has granted meanwhile.
FAILBACK_LAG_S = (5.0, 7.0)
# reshard_held: the pause after each key of the slot moved (the slot half
# moved meanwhile, as an operator's resharding tool leaves it).
MIGRATE_PAUSE_S = (0.2, 0.6)
# The kinds that break a broker's Redis link (rec["proxies"] names whose)
# or Redis itself (every broker's): news on the subscriber connection (a
# release or a shortened lease through the other broker, a REVOKE) comes
# late or is missed, until the broker has subscribed again.
LINK_KINDS = ("proxy_cut", "proxy_delay", "proxy_lossy", "redis_slow",
              "redis_drop", "pause_redis", "kill_redis", "flushall",
              "wipe_redis", "lagging_failover", "frozen_failover") + \
    CLUSTER_FAILOVER_KINDS + ("reshard_held",)
# The self-test wants the faults that make stale holders and late grants:
# Redis stalls and slow links (400-800 ms each way) whose round trips stay
# under the 2.5 s command timeout (so the late answer still arrives) but
# exceed a 500 ms lease plus the checkers' slack.
SELF_TEST_KINDS = ("proxy_delay", "redis_slow", "pause_redis",
                   "pause_worker", "pause_broker")
# Variants that need faults of their own in the self-test. owed_blind
# breaks only a release the broker owes to Redis, which needs a RELEASE
# that Redis does not answer within the command timeout (2.5 s), for a
# lease still running when the broker sends it again: Redis stalled
# 2.7-4 s (workers.py's long leases, then the same token again).
# no_tickets breaks the order of waiters across brokers, which the
# fairness checker judges only outside faults of a waiter's broker, its
# link or Redis: only stopped workers (which excuse their own waiters).
SELF_TEST_KINDS_OF = {"owed_blind": ("pause_redis",),
                      "no_tickets": ("pause_worker",),
                      "no_grace": ("flushall", "wipe_redis"),
                      "no_clock_fence": ("flushall", "wipe_redis"),
                      "no_confirm": ("tamper",),
                      "no_eviction_check": ("evict_window",),
                      # a script that names undeclared keys meets a slot
                      # half moved under load
                      "lock_key_only": ("reshard_held",),
                      # a shard failed over, its data lost or not
                      "one_scope": ("stale_takeover",)}
# ... and that variant's tamper made the way that shows it: every key of
# held names deleted.
TAMPER_HOW_OF = {"no_confirm": ("wipe",)}
# ... and wiping, in that variant, the keys of long leases (PTTL above
# WIPE_LONG_MS), whose holders workers.py holds past the bound then.
WIPE_LONG_OF = ("no_confirm",)
WIPE_LONG_MS = 2500
# The taker (Nemesis._after_tamper): its lease, how long it holds what it
# gets, and the worker number its grants are journalled under (none of
# the workers', so no worker's stop excuses it).
TAKER_TTL_MS, TAKER_HOLD_S, TAKER_W = 3000, 2.0, 99
# owed_blind's sweeper (Nemesis._after_pause_redis): how long after each
# stall it tries the cold names, and how often.
SWEEP_OF = ("owed_blind",)
SWEEP_S, SWEEP_EVERY_S = 8.0, 0.02
PAUSE_REDIS_S_OF = {"owed_blind": (2.7, 4.0)}
LIVENESS_S = 4.0        # grants again within the grace period (2 s) + 2 s
# On a cluster the grace period also covers cluster-node-timeout + 1 s
# (docs/protocol.md §8): 1.02 + 1 + 1.5 + 1 s, + 2 s.
CLUSTER_LIVENESS_S = 6.5
LAG_S = (2.0, 4.0)      # lagging_failover: how long the replica misses writes
FAILOVER_WAIT_S = 20.0  # ... and the longest a promotion may take
EVICTION_POLICY = "allkeys-lru"
# evict_window: how long Redis evicts (shorter than the brokers go
# between reads of the policy, a second here, so that mostly they do not
# see it, only what it evicted),
EVICT_S = (0.05, 0.2)   # evict_window
EVICT_SEEN_S = 1.5      # ... whose keys evicted the brokers see by then
EVICT_POLICY = "volatile-lru"  # ... every key with an expiry
CLOCK_JUMPS = ("+300s", "-120s", "+3600s", "-30s")
# redis_clock_step: a forward step of every Redis node's wall clock,
# within redis.clock_step_ms (1000, the brokers' default) less the drift a
# lease is trusted short of.
CLOCK_STEP_MS = (300, 900)
MARKER = "lockbroker:incarnation"


def _in_slot(base, slot):
    """Fresh names base<i> whose lock data is in slot."""
    return (n for n in (base + str(i) for i in itertools.count(1))
            if slot_of_name(n) == slot)


def _evicted_keys(r):
    """Redis's evicted_keys (INFO stats), which only goes up."""
    return int(r("INFO", "stats").split("evicted_keys:")[1].split("\r")[0])


class Nemesis(threading.Thread):
    """Runs the fault schedule in its own thread until stop() or the end
    of the run; self.faults is the log the checkers read."""

    def __init__(self, topo, worker_pids, held, rng, duration,
                 self_test=None, weights=None, journal=None):
        """self_test: None, or the variant the self-test runs (the
        nemesis then makes the faults that variant needs); weights: kind ->
        how many of it each round holds (1 unless named); journal: where
        the taker's grants go (workers.Journal), read with the workers'."""
        self.weights = weights or {}
        self.journal = journal
        self._takers = []
        super().__init__(name="nemesis", daemon=True)
        self.topo, self.worker_pids, self.held = topo, worker_pids, held
        self.rng, self.self_test = rng, self_test
        self.duration = duration
        self.faults = []
        self.kill_stats = []        # INFO of brokers just before kill -9
        self._stop_ev = threading.Event()
        self._bag = []
        self._moved = {}    # reshard_held's holder and waiter, by fault

    def stop(self):
        """Heal the fault in progress now and end the schedule."""
        self._stop_ev.set()
        self.join(60)
        for t in self._takers:
            t.join(10)

    def run(self):
        """Space faults 10 +- 5 s apart, scaled down for runs under 120 s
        so that one sees nearly every kind (and a 60 s run at least 4
        faults)."""
        t0 = time.monotonic()
        end = t0 + self.duration
        kinds = self._kinds()
        mean = min(10.0, self.duration / (len(kinds) - 1.0))
        if self.self_test:
            mean = min(5.0, self.duration / 12.0)
        next_at = t0 + self.rng.uniform(0.3, 0.6) * mean
        while not self._stop_ev.wait(max(0.0, next_at - time.monotonic())):
            if time.monotonic() > end - 4.0:
                break
            started = time.monotonic()
            self.one(self._next_kind())
            next_at = max(started + self.rng.uniform(0.5, 1.5) * mean,
                          time.monotonic() + 0.5)

    def _next_kind(self):
        """Every kind once (shuffled; a weighted kind its weight's times)
        in a round before the next round."""
        if not self._bag:
            kinds = self._kinds()
            if self.self_test:
                kinds = SELF_TEST_KINDS_OF.get(self.self_test,
                                               SELF_TEST_KINDS)
            self._bag = [k for k in kinds
                         for _ in range(self.weights.get(k, 1))]
            self.rng.shuffle(self._bag)
        return self._bag.pop()

    def _kinds(self):
        """The topology's fault kinds."""
        if self.topo.cluster:
            return CLUSTER_KINDS
        return SENTINEL_KINDS if self.topo.sentinel else KINDS

    def one(self, kind):
        """Inject, wait, heal, probe; the record goes to self.faults."""
        rec = {"n": len(self.faults) + 1, "kind": kind,
               "t_start": time.monotonic()}
        self.faults.append(rec)
        try:
            heal = getattr(self, "_" + kind)(rec)
        except Exception as e:          # a fault that cannot start is noted
            rec.update(error=repr(e)[:200], t_heal=time.monotonic(),
                       liveness=[])
            return
        # The fault is fully in effect from t_active to t_heal_begin;
        # t_start..t_heal is the widest window it can have had an effect.
        rec["t_active"] = time.monotonic()
        self._stop_ev.wait(rec["hold_s"])
        rec["t_heal_begin"] = time.monotonic()
        try:
            heal()
        except Exception as e:
            rec["error"] = "heal: " + repr(e)[:200]
        rec["t_heal"] = time.monotonic()
        rec["liveness"] = self.probe(rec)
        after = getattr(self, "_after_" + kind, None)
        if after is not None and "error" not in rec:
            after(rec)

    def _hold(self, lo, hi):
        """How long a fault lasts: 1-5 s unless the kind says otherwise."""
        return self.rng.uniform(lo, hi)

    # One method per kind: inject, fill in the record, return the heal.

    def _pause_broker(self, rec):
        """SIGSTOP a broker: its holders' leases run out unrenewed and
        its EVENT LOST come late, while the other broker grants."""
        b = self.rng.choice(self.topo.brokers)
        rec.update(target=b.name, hold_s=self._hold(1, 3 if self.self_test
                                                    else 5))
        b.signal(signal.SIGSTOP)
        return lambda: b.signal(signal.SIGCONT)

    def _pause_redis(self, rec):
        """SIGSTOP Redis: every try and renewal stalls, then all answers
        come at once, late."""
        r = self.topo.redis
        if self.self_test in PAUSE_REDIS_S_OF:
            hold = self._hold(*PAUSE_REDIS_S_OF[self.self_test])
        elif self.self_test:
            hold = self._hold(1.0, 1.9)
        else:
            hold = self._hold(1, 5)
        rec.update(target="redis", hold_s=hold)
        r.proc.send_signal(signal.SIGSTOP)
        return lambda: r.proc.send_signal(signal.SIGCONT)

    def _pause_worker(self, rec):
        """SIGSTOP a worker holding a lock: the GC-pause case, a holder
        that wakes up stale and still writes and releases."""
        w = self._holding_worker()
        pid = self.worker_pids[w]
        rec.update(target="w%d" % w, worker=w,
                   holding={"ttl": self.held[2 * w],
                            "session": self.held[2 * w + 1]},
                   hold_s=self._hold(1.5, 4) if self.self_test
                   else self._hold(1, 5))
        os.kill(pid, signal.SIGSTOP)
        return lambda: os.kill(pid, signal.SIGCONT)

    def _holding_worker(self):
        """A worker holding a TTL lock (its lease will run out while it
        sleeps), else one holding any lock, else any worker."""
        n = len(self.worker_pids)
        for slot in (0, 1):
            ws = [w for w in range(n) if self.held[2 * w + slot] > 0]
            if ws:
                return self.rng.choice(ws)
        return self.rng.randrange(n)

    def _kill_broker(self, rec):
        """kill -9 a broker: its clients reconnect, its locks linger until
        their leases end; the restart must come back clean."""
        b = self.rng.choice(self.topo.brokers)
        rec.update(target=b.name, hold_s=self._hold(1, 5))
        self.kill_stats.append(dict(b.stats(), broker=b.name))
        b.stop(sig=signal.SIGKILL)
        return b.start

    def _kill_redis(self, rec):
        """kill -9 Redis: fences must survive the restart (AOF, fsync
        always) and both brokers must reconnect."""
        r = self.topo.redis
        rec.update(target="redis", hold_s=self._hold(1, 5))
        self._node(rec, r)
        r.kill()
        # same port, same AOF directory (with Sentinel, a replica of the
        # new master if the Sentinels failed over meanwhile)
        return lambda: self.topo.restart_redis(r)

    def _flushall(self, rec):
        """FLUSHALL: Redis forgets every lock and fence counter at once.
        Nobody may be granted a held name before its holder is told, and
        no fence may repeat or go back (docs/operations.md, When Redis
        forgets)."""
        rec.update(target="redis", hold_s=0.2)
        self.topo.redis("FLUSHALL")
        return lambda: None

    def _wipe_redis(self, rec):
        """kill -9 Redis and restart it with its append-only file gone:
        a restart without persistence (another run_id, nothing kept)."""
        r = self.topo.redis
        rec.update(target="redis", hold_s=self._hold(0.5, 2))
        self._node(rec, r)
        r.kill()
        shutil.rmtree(os.path.join(r.tmpdir, "appendonlydir"),
                      ignore_errors=True)
        return lambda: self.topo.restart_redis(r)

    def _node(self, rec, r):
        """With Sentinel, note which node a Redis fault hit."""
        if self.topo.sentinel:
            rec["node"] = r.name

    def _lagging_failover(self, rec):
        """Sentinel fails over to a replica that missed the last writes:
        the master's stream to its replica is dropped for 2-4 s while the
        load runs (grants, releases and fence counters the replica never
        gets), then the master is killed (-9) and the Sentinels promote
        the replica. Pausing the replica would lose nothing: it catches up
        before the Sentinels act. The heal starts the old master again, as
        a replica of the new one, so the next failover has a replica."""
        topo = self.topo
        m = topo.master_index(all_agree=True)
        if m is None:
            raise RuntimeError("the Sentinels do not agree on a master")
        topo.wait_replica(1 - m, 10)
        old, link = topo.nodes[m], topo.links[m]
        rec.update(target="redis", node=old.name, lag_s=round(
            self.rng.uniform(*LAG_S), 2), hold_s=0.2)
        link.frozen = True
        try:
            self._stop_ev.wait(rec["lag_s"])
            rec["t_kill"] = time.monotonic()
            old.kill()
        finally:
            link.frozen = False
        rec["dropped_bytes"] = link.dropped
        link.dropped = 0
        end = time.monotonic() + FAILOVER_WAIT_S
        while topo.master_index(all_agree=True) != 1 - m:
            if time.monotonic() > end:
                rec["promoted"] = False
                return lambda: topo.restart_redis(old)
            time.sleep(0.05)
        rec["promoted_after_s"] = round(time.monotonic() - rec["t_kill"], 2)
        return lambda: topo.restart_redis(old)

    def _eviction(self, rec):
        """Memory pressure under noeviction: maxmemory set far below what
        Redis uses, so every write (every script: grants, renewals,
        releases, the incarnation beat) is refused with OOM for 1-4 s
        (how=oom); nothing is evicted, nothing may be lost. Or Redis is
        told to evict (maxmemory-policy allkeys-lru, no limit: nothing is
        evicted yet) for 2-5 s (how=policy), which the brokers must see
        within redis.trust_ms and refuse every grant for."""
        r = self.topo.redis
        how = self.rng.choice(("oom", "policy"))
        rec.update(target="redis", how=how)
        self._node(rec, r)
        if how == "oom":
            rec["hold_s"] = self._hold(1, 4)
            key, value = "maxmemory", "1"
        else:
            rec["hold_s"] = self._hold(2, 5)
            key, value = "maxmemory-policy", EVICTION_POLICY
        before = r("CONFIG", "GET", key)[1]
        if r("CONFIG", "SET", key, value) != "OK":
            raise RuntimeError("CONFIG SET %s %s refused" % (key, value))

        def heal():
            got = r("CONFIG", "SET", key, before)
            if got != "OK":
                raise RuntimeError("CONFIG SET %s %s: %r" % (key, before,
                                                              got))
        return heal

    def _evict_window(self, rec):
        """volatile-lru and a maxmemory 200 KB below what Redis
        uses, for 0.05-0.2 s, then noeviction and no limit again: Redis
        evicts lock keys, fence counters, queues, every key with an
        expiry, but not the incarnation marker, which has none (were it
        evicted, the brokers would see a new incarnation by that alone).
        The brokers see evicted_keys move at their next beat and make a
        new incarnation; until then another broker may grant a name whose
        key and counter both went (the bound docs/protocol.md §3 states)."""
        r = self.topo.redis
        rec.update(target="redis")
        self._node(rec, r)
        before = {k: r("CONFIG", "GET", k)[1]
                  for k in ("maxmemory", "maxmemory-policy")}
        used = int(r("INFO", "memory").split("used_memory:")[1]
                   .split("\r")[0])
        evicted0 = _evicted_keys(r)
        rec["marker_before"] = r("HGET", MARKER, "id")
        rec["hold_s"] = self._hold(*EVICT_S)
        r("CONFIG", "SET", "maxmemory-policy", EVICT_POLICY)
        r("CONFIG", "SET", "maxmemory", max(1, used - 200000))

        def heal():
            rec["evicted_keys"] = _evicted_keys(r) - evicted0
            for k, v in before.items():
                got = r("CONFIG", "SET", k, v)
                if got != "OK":
                    raise RuntimeError("CONFIG SET %s %s: %r" % (k, v, got))
        return heal

    def _after_evict_window(self, rec):
        """The marker within redis.trust_ms (1 s) of the heal, by which
        every broker beat (every quarter of it): keys evicted make a new
        incarnation (the eviction checker). The liveness probe may be
        granted before that."""
        end = rec["t_heal"] + EVICT_SEEN_S
        while True:
            rec["marker_after"] = self.topo.redis("HGET", MARKER, "id")
            if rec["marker_after"] != rec["marker_before"] or \
                    time.monotonic() > end:
                return
            time.sleep(0.05)

    def _frozen_failover(self, rec):
        """The master frozen (SIGSTOP), not killed, while the Sentinels
        promote its replica: a broker waiting on its replies must leave it
        at the switch and grant again from the new master once its grace
        period is over. It stays frozen 0.5-2 s past the promotion; the
        heal resumes it, and the Sentinels make it a replica."""
        topo = self.topo
        m = topo.master_index(all_agree=True)
        if m is None:
            raise RuntimeError("the Sentinels do not agree on a master")
        topo.wait_replica(1 - m, 10)
        old = topo.nodes[m]
        rec.update(target="redis", node=old.name)
        rec["t_freeze"] = time.monotonic()
        old.proc.send_signal(signal.SIGSTOP)
        end = time.monotonic() + FAILOVER_WAIT_S
        while topo.master_index(all_agree=True) != 1 - m:
            if time.monotonic() > end:
                rec.update(promoted=False, hold_s=0)
                return lambda: old.proc.send_signal(signal.SIGCONT)
            time.sleep(0.05)
        rec["promoted_after_s"] = round(time.monotonic() - rec["t_freeze"],
                                        2)
        rec["hold_s"] = self._hold(0.5, 2)
        return lambda: old.proc.send_signal(signal.SIGCONT)

    def _proxy(self, rec, mode, both=False, **kw):
        """Put one broker's Redis proxy (or both) in mode; the heal is back
        to pass. rec["proxies"] names the brokers whose link it breaks."""
        ps = list(range(len(self.topo.proxies)))
        if not both:
            ps = [self.rng.choice(ps)]
        rec.update(target="+".join("proxy-b%d" % i for i in ps),
                   proxies=ps, hold_s=self._hold(1, 5), **kw)
        for i in ps:
            self.topo.proxies[i].set_mode(mode, **kw)
        return lambda: [self.topo.proxies[i].set_mode("pass") for i in ps]

    def _proxy_cut(self, rec):
        """Partition one broker from Redis: its reconnects are refused."""
        return self._proxy(rec, "cut")

    def _proxy_delay(self, rec, both=False):
        """Slow one broker's Redis link: grants come back near or past
        their validity (the broker must give those back)."""
        lo, hi = (400, 800) if self.self_test else (200, 800)
        heal = self._proxy(rec, "delay", both,
                           delay_ms=self.rng.randint(lo, hi))
        if self.self_test:
            rec["hold_s"] = self._hold(3, 5)
        return heal

    def _redis_slow(self, rec):
        """Both brokers' links slow at once: every grant in the window is
        late, so no broker can win the lock on a fast link meanwhile."""
        return self._proxy_delay(rec, both=True)

    def _proxy_lossy(self, rec):
        """Reset one broker's Redis connections at random."""
        return self._proxy(rec, "lossy", loss=0.05)

    def _redis_drop(self, rec):
        """Drop both of one broker's Redis connections (command and
        subscriber) at once, 1-3 times a few hundred ms apart, without
        refusing the reconnects: by the proxy (RST from both sides) or by
        Redis (CLIENT KILL ADDR of each, in one MULTI). Requests in flight
        are lost (owed releases), and so are messages on the release
        channel until the broker has subscribed again."""
        i = self.rng.randrange(len(self.topo.proxies))
        how = self.rng.choice(("proxy_reset", "client_kill"))
        n = self.rng.randint(1, 3)
        gaps = [self.rng.uniform(0.2, 0.8) for _ in range(n - 1)]
        rec.update(target="proxy-b%d" % i, proxies=[i], how=how,
                   hold_s=0.2, drops=[])
        for k in range(n):
            if k:
                time.sleep(gaps[k - 1])
            t = time.monotonic()
            dropped = self._drop_links(i, how)
            rec["drops"].append([round(t - rec["t_start"], 3), dropped])
        return lambda: None

    def _drop_links(self, i, how):
        """Drop broker i's Redis connections once; how many went."""
        p = self.topo.proxies[i]
        if how == "proxy_reset":
            return p.reset()
        addrs = p.upstream_addrs()
        if not addrs:
            return 0
        r = self.topo.redis.connect()
        try:
            r("MULTI")
            for a in addrs:
                r("CLIENT", "KILL", "ADDR", a)
            got = r("EXEC")
        finally:
            r.close()
        return sum(x for x in got if isinstance(x, int)) \
            if isinstance(got, list) else 0

    def _clock_jump(self, rec):
        """Jump b1's wall clock: leases use CLOCK_MONOTONIC, so nothing
        may change."""
        offset = self.rng.choice(CLOCK_JUMPS)
        b = self.topo.brokers[1]
        rec.update(target=b.name, offset=offset, hold_s=self._hold(1, 5))
        before = b.stats().get("uptime_s")
        self.topo.set_clock(offset)
        # Leases must not notice; INFO's uptime shows what does.
        time.sleep(0.1)
        rec["uptime_s"] = "%s->%s" % (before, b.stats().get("uptime_s"))
        return lambda: self.topo.set_clock("+0")

    def _redis_clock_step(self, rec):
        """Step every Redis node's wall clock forward by 0.3-0.9 s, within
        redis.clock_step_ms: Redis then ends keys that much earlier than
        it would have, and the margin every lease has in Redis must cover
        it. A real step stays: nothing to heal (steps add up over a run,
        which the brokers see as Redis's clock running ahead)."""
        ms = self.rng.randint(*CLOCK_STEP_MS)
        rec.update(target="redis", step_ms=ms, hold_s=self._hold(1, 3))
        self.topo.step_redis_clock(ms)
        return lambda: None

    def _tamper(self, rec):
        """Someone with access to Redis changes the lock data by hand:
        DEL, UNLINK or RENAME of 1-3 held lock keys alone (their fence
        counters remember the leases: nobody may be granted those names,
        and their brokers put the keys back), or DEL of the incarnation
        marker (a new incarnation: its grace period, holds put back), or
        (how=wipe) DEL of 3-6 held lock keys (waited for, if any) with
        their fence counters:
        data loss, whose holders are told within redis.trust_ms, and whose
        names another broker may grant meanwhile (the bound
        docs/protocol.md §3 states)."""
        r = self.topo.redis
        how = self.rng.choice(TAMPER_HOW_OF.get(
            self.self_test, ("del", "unlink", "rename", "marker", "wipe")))
        rec.update(target="redis", how=how, hold_s=0.2, keys=[])
        self._node(rec, r)
        if how == "marker":
            rec["keys"] = [MARKER] if r("DEL", MARKER) == 1 else []
            return lambda: None
        # Lock keys only: "lockbroker:{<name>}", no suffix; for a wipe,
        # those someone waits for if any (another grant comes at once).
        keys = [k for k in r("KEYS", "lockbroker:{*}") or []
                if isinstance(k, str) and k.endswith("}")]
        if how == "wipe" and self.self_test in WIPE_LONG_OF:
            # Long leases (workers.py's, held long in this self-test):
            # their holders go on past the bound if nobody tells them.
            keys = [k for k in keys if r("PTTL", k) > WIPE_LONG_MS] or keys
        elif how == "wipe":
            waited = [k for k in keys
                      if r("EXISTS", k + ":queue", k + ":waiting") > 0]
            keys = waited or keys
        n = self.rng.randint(*((3, 6) if how == "wipe" else (1, 3)))
        for k in self.rng.sample(keys, min(len(keys), n)):
            if how == "rename":
                gone = r("RENAME", k, "tampered:" + k) == "OK"
            elif how == "wipe":
                gone = r("DEL", k, k + ":fence") >= 1
            else:
                gone = r(how.upper(), k) == 1
            if gone:
                rec["keys"].append(k)

        def heal():
            for k in rec["keys"]:
                if how == "rename":
                    r("DEL", "tampered:" + k)
        return heal

    def _after_tamper(self, rec):
        """After a wipe, a taker on another broker tries each wiped name
        at once and holds what it gets for TAKER_HOLD_S: a grant the
        holder's broker must tell its holder of within the bound
        (LOSS_BOUND_S), or the overlap is a violation. Without it only a
        worker that happened to try the name in that window showed an
        untold holder (no_confirm, caught by chance)."""
        if rec.get("how") != "wipe" or self.journal is None:
            return
        names = [k[len("lockbroker:{"):-1] for k in rec["keys"]]
        for i, name in enumerate(names):
            b = self.topo.brokers[(rec["n"] + i) % len(self.topo.brokers)]
            t = threading.Thread(target=self._take, args=(
                b, name, "taker%d.%d" % (rec["n"], i)), daemon=True)
            t.start()
            self._takers.append(t)

    def _take(self, b, name, client, hold_apart=False):
        """ACQUIRE name WAIT 0 through b; granted, hold it TAKER_HOLD_S
        (in a thread of its own if hold_apart) and release it, journalled
        as a worker's grant is. Whether it was granted."""
        if not b.pid:
            return False
        g = {"type": "grant", "client": client, "w": TAKER_W,
             "broker": self.topo.brokers.index(b), "kind": "ttl",
             "wait": 0, "name": name, "mode": "exclusive", "writes": [],
             "taker": True}
        try:
            c = lbtest.Client(b.port, timeout=5)
        except OSError:
            return False
        try:
            g["t_sent"] = time.monotonic()
            ok = c.cmd("ACQUIRE %s TTL %d WAIT 0" % (name, TAKER_TTL_MS))
        except (OSError, ConnectionError):
            c.close()
            return False
        if not ok.startswith("OK "):
            c.close()
            return False
        w = ok.split()
        g.update(t_granted=time.monotonic(), fence=int(w[1]), ttl=int(w[2]),
                 token=w[3])
        if not hold_apart:
            self._hold_taken(c, g)
            return True
        t = threading.Thread(target=self._hold_taken, args=(c, g),
                             daemon=True)
        t.start()
        self._takers.append(t)
        return True

    def _hold_taken(self, c, g):
        """The taker's hold of g on c: TAKER_HOLD_S, then RELEASE."""
        try:
            self._stop_ev.wait(TAKER_HOLD_S)
            g["t_release_sent"] = time.monotonic()
            c.send("RELEASE %s" % g["name"])
            while True:     # an EVENT LOST first, if it lost the name
                line = c.line()
                if not line.startswith("EVENT "):
                    break
                if line.startswith("EVENT LOST %s " % g["name"]):
                    # Read after the hold: it held no longer than that.
                    g.update(t_lost=g["t_release_sent"],
                             lost_reason=line.split()[-1])
            g["release_reply"] = line
            g["t_release_reply"] = time.monotonic()
        except (OSError, ConnectionError):
            g["t_disconnect"] = time.monotonic()
        finally:
            c.close()
            self.journal.put(g)

    def _after_pause_redis(self, rec):
        """In owed_blind's self-test, the sweeper after each stall: for
        SWEEP_S it tries every cold name in turn (through each broker in
        turn) and holds what it gets. An owed release sent again that
        deleted its holder's newer grant of the same token (workers.py's
        reuse, held 2.5-4.5 s) leaves the name free in Redis while its
        holder holds it: the sweeper takes it, and belief sees both.
        Before, only a worker that happened to try the name did."""
        if self.self_test not in SWEEP_OF or self.journal is None:
            return
        t = threading.Thread(target=self._sweep, args=(rec["n"],),
                             daemon=True)
        t.start()
        self._takers.append(t)

    def _sweep(self, n):
        """_after_pause_redis's sweeper."""
        end, i = time.monotonic() + SWEEP_S, 0
        while time.monotonic() < end and not self._stop_ev.is_set():
            b = self.topo.brokers[i % len(self.topo.brokers)]
            self._take(b, COLD[i % len(COLD)], "sweep%d.%d" % (n, i),
                       hold_apart=True)
            i += 1
            self._stop_ev.wait(SWEEP_EVERY_S)

    # The cluster topology's kinds.

    def _held_by_master(self):
        """{master port: the workers' names it serves that are held now
        (their lock key exists)}, every master a key."""
        c = self.topo.cluster
        view = c.view(c.masters()[0])
        out = {m: [] for m in c.masters()}
        for n in NAMES:
            m = view.owner(slot_of_name(n))
            if c.node(m)("EXISTS", lock_key(n)) == 1:
                out.setdefault(m, []).append(n)
        return out

    def _shard(self, rec):
        """A master to fail over: one serving held names if any; the
        record names it, its held names and a slot of one of them (the
        liveness probe's second name)."""
        held = self._held_by_master()
        busy = [m for m, ns in held.items() if ns]
        m = self.rng.choice(sorted(busy or held))
        rec.update(target="redis", node=m, names_held=held[m])
        rec["probe_slot"] = slot_of_name(self.rng.choice(held[m])) \
            if held[m] else self.topo.cluster.slots_of(m)[0]
        return m

    def _shard_failover(self, rec):
        """CLUSTER FAILOVER (default, FORCE or TAKEOVER) on the replica of
        a master serving held names: the shard's slots get a new master
        and a new incarnation (a grace period for their names only), and
        the old master becomes its replica."""
        c = self.topo.cluster
        m = self._shard(rec)
        rec["mode"] = self.rng.choice(FAILOVER_MODES)
        t = time.monotonic()
        rec["promoted"] = c.failover(m, rec["mode"])
        rec["promoted_after_s"] = round(time.monotonic() - t, 2)
        rec["hold_s"] = self._hold(0.5, 2)
        return lambda: None

    def _master_paused(self, rec):
        """SIGSTOP a master serving held names past cluster-node-timeout:
        its replica is promoted while it still holds its sockets open and
        its last writes unanswered; the heal resumes it, and it must rejoin
        as the new master's replica."""
        c = self.topo.cluster
        m = self._shard(rec)
        rep = c.replica_of(m)
        rec["t_freeze"] = time.monotonic()
        c.pause(m)
        try:
            c.wait_promoted(m, rep)
        except AssertionError:
            c.resume(m)
            raise
        rec.update(promoted=rep, promoted_after_s=round(
            time.monotonic() - rec["t_freeze"], 2),
            hold_s=self._hold(0.5, 2))
        return lambda: c.resume(m)

    def _stale_promotion(self, rec):
        """A replica that missed 2-4 s of writes (grants, releases, fence
        counters) promoted: lbcluster's promote_stale cuts it off while
        the load runs, then kills the master; the heal starts the old
        master again, and it rejoins as a replica."""
        m = self._stale(rec, LAG_S, self.topo.cluster.promote_stale)
        return lambda: self.topo.cluster.restart(m)

    def _stale_takeover(self, rec):
        """A replica that missed 1-2 s of writes made master at once
        (lbcluster's takeover_stale: CLUSTER FAILOVER TAKEOVER while the
        master is stopped for a moment, then resumed to become its
        replica): within redis.trust_ms, so the brokers still trust the
        holds whose grants the new master never got, and must put them
        back in its grace period (the put_back checker)."""
        self._stale(rec, TAKEOVER_LAG_S, self.topo.cluster.takeover_stale)
        return lambda: None

    def _stale_failback(self, rec):
        """A master failed over (CLUSTER FAILOVER), cut off from its
        successor for 5-7 s while the load runs (past the successor's
        grace period: it grants meanwhile), then made master again by
        CLUSTER FAILOVER TAKEOVER (lbcluster's takeover_stale on the
        successor): its run_id is the one its markers name, its data
        older than what was granted. The successor rejoins as its
        replica."""
        c = self.topo.cluster

        def back(m, during):
            rec["successor"] = c.failover(m, "default")
            return c.takeover_stale(rec["successor"], during)
        self._stale(rec, FAILBACK_LAG_S, back)
        return lambda: None

    def _stale(self, rec, lag, promote):
        """promote(master, during) a replica of a master serving held
        names, cut off for lag seconds (rec's lag_s) while the load runs;
        the master's port."""
        m = self._shard(rec)
        rec["names"] = self._names_of(m)
        rec["lag_s"] = round(self.rng.uniform(*lag), 2)
        t = time.monotonic()

        def during():
            self._stop_ev.wait(rec["lag_s"])
            rec["t_kill"] = time.monotonic()
        rec["promoted"] = promote(m, during)
        rec.update(promoted_after_s=round(time.monotonic() - t, 2),
                   hold_s=self._hold(0.5, 2))
        return m

    def _names_of(self, master):
        """The workers' names master serves now."""
        view = self.topo.cluster.view(master)
        return [n for n in NAMES if view.owner(slot_of_name(n)) == master]

    def _master_killed(self, rec):
        """kill -9 a master serving held names: its replica is promoted
        after cluster-node-timeout; the heal starts the old one again
        (empty: no persistence) and it rejoins as a replica."""
        c = self.topo.cluster
        m = self._shard(rec)
        rec["t_kill"] = time.monotonic()
        rec["promoted"] = c.kill_master(m)
        rec.update(promoted_after_s=round(
            time.monotonic() - rec["t_kill"], 2), hold_s=self._hold(0.5, 2))
        return lambda: c.restart(m)

    def _reshard_held(self, rec):
        """Move the slot of a held name (waited on, if any is) to another
        master as an operator does: IMPORTING, MIGRATING, its keys moved
        one at a time with a pause after each while the load runs, then
        SETSLOT NODE everywhere. A name of the slot is held through b0 and
        waited on through b1 all the while (_after_reshard_held)."""
        c = self.topo.cluster
        held = self._held_by_master()
        names = sorted(n for ns in held.values() for n in ns)
        waited = [n for n in names
                  if c.at(lock_key(n))("EXISTS", lock_key(n) + ":queue")]
        name = self.rng.choice(waited or names or list(NAMES))
        slot = slot_of_name(name)
        src = c.master_of(slot)
        dst = self.rng.choice([m for m in c.masters() if m != src])
        rec.update(target="redis", node=src, to=dst, slot=slot,
                   probe_slot=slot, names_held=[
                       n for n in names if slot_of_name(n) == slot],
                   waited=name in waited,
                   pause_s=round(self.rng.uniform(*MIGRATE_PAUSE_S), 2))
        self._moved[rec["n"]] = self._hold_and_wait(slot, rec)
        mig = c.begin_migration(slot, dst)
        try:
            c.migrate_keys(mig, pause_between_keys=rec["pause_s"])
        finally:
            rec["keys_moved"] = len(mig.moved)
            c.finish_migration(mig)
        rec["hold_s"] = self._hold(0.2, 1)
        return lambda: None

    def _hold_and_wait(self, slot, rec):
        """A fresh name of slot held (a session lock) through b0, and an
        ACQUIRE of it sent through b1, not read yet: (name, holder,
        waiter), or None when a broker is down or the grant is refused."""
        b0, b1 = self.topo.brokers[0], self.topo.brokers[1]
        if not (b0.pid and b1.pid):
            return None
        name = Cluster.names_in_slot(slot, 1, base="moved.%d." % rec["n"])[0]
        holder = lbtest.Client(b0.port, timeout=10)
        if not holder.cmd("ACQUIRE %s WAIT 5000" % name).startswith("OK "):
            holder.close()
            return None
        waiter = lbtest.Client(b1.port, timeout=10)
        waiter.send("ACQUIRE %s WAIT 120000" % name)
        rec["moved_name"] = name
        return name, holder, waiter

    def _after_reshard_held(self, rec):
        """The waiter on the moved name must be granted it within the
        liveness window of its holder's RELEASE, after the move: one more
        entry in rec["liveness"]."""
        got = self._moved.pop(rec["n"], None)
        if got is None:
            return
        name, holder, waiter = got
        res = {"broker": "b1 waiter on %s" % name, "ok": False, "tries": 1,
               "last": ""}
        try:
            holder.send("RELEASE %s" % name)
            t = time.monotonic()
            waiter.sock.settimeout(CLUSTER_LIVENESS_S)
            while not res["last"].startswith(("OK", "ERR", "TIMEOUT")):
                res["last"] = waiter.line()
            if res["last"].startswith("OK "):
                res.update(ok=True, after_s=round(time.monotonic() - t, 3))
        except (OSError, ConnectionError, ValueError) as e:
            res["last"] = repr(e)[:100]
        finally:
            holder.close()
            waiter.close()
        rec["liveness"].append(res)

    # Liveness.

    def probe(self, rec):
        """Each live broker must grant a free name to a try-once within
        LIVENESS_S of the heal; probed in parallel, one thread each."""
        out = [None] * len(self.topo.brokers)
        self._probe_home(rec)

        def go(i, b):
            out[i] = self._probe_one(b, rec)
        ts = [threading.Thread(target=go, args=(i, b))
              for i, b in enumerate(self.topo.brokers)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return out

    def _probe_home(self, rec):
        """On a cluster, the slot of a worker's name (one the load keeps
        using) in which the liveness probe takes fresh names."""
        if self.topo.cluster:
            rec["probe_home"] = slot_of_name(self.rng.choice(NAMES))

    def _probe_one(self, b, rec):
        """ACQUIRE <fresh name> WAIT 0 until OK or the deadline; on a
        cluster, then the same for fresh names in the slot the fault hit
        (probe_slot), whose shard failed over or which moved."""
        deadline = rec["t_heal"] + (CLUSTER_LIVENESS_S if self.topo.cluster
                                    else LIVENESS_S)
        res = {"broker": b.name, "ok": False, "tries": 0, "last": ""}
        if not b.pid:
            res["last"] = "broker down"
            return res
        base = "probe.%d.%s." % (rec["n"], b.name)
        names = [(base + str(i) for i in itertools.count(1))]
        if self.topo.cluster:
            # A slot's first use after its shard failed over starts its
            # grace period: fresh names in a slot the load keeps using,
            # then in the slot the fault hit.
            slots = [rec["probe_home"], rec.get("probe_slot")]
            names = [_in_slot(base, s) for s in slots if s is not None]
        for gen in names:
            res["ok"] = False
            if not self._probe_names(b, gen, deadline, res):
                break
            res["after_s"] = round(time.monotonic() - rec["t_heal"], 3)
        if res["ok"]:
            return res
        # A broker that does not even answer INFO is stuck: say where.
        hung = b.diagnose()
        if hung:
            res["hung"] = hung
        return res

    @staticmethod
    def _probe_names(b, names, deadline, res):
        """Try-once the next of names until one is granted (True) or the
        deadline passes (False); counts tries and the last reply in res."""
        while time.monotonic() < deadline:
            res["tries"] += 1
            name = next(names)
            try:
                c = lbtest.Client(b.port, timeout=max(
                    0.05, deadline - time.monotonic()))
                try:
                    res["last"] = c.cmd("ACQUIRE %s WAIT 0" % name)
                    if res["last"].startswith("OK "):
                        c.cmd("QUIT")
                        res["ok"] = True
                        return True
                finally:
                    c.close()
            except (OSError, ConnectionError) as e:
                res["last"] = repr(e)[:100]
            time.sleep(0.05)
        return False

"""The Lua scripts of src/lua/, run on their own against a real
redis-server on fixture keys, with the same text the broker embeds
(src/lua/embed.py's expand) and the keys each script declares: a script can
be checked without the daemon. The last test checks that an error in a
script names its .lua file and line, in Redis's reply and the broker's
log."""

import os
import re
import sys
import tempfile

from lbtest import BrokerTest, Resp, free_port, main, wait_for

LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                   "..", "..", "src", "lua")
sys.path.insert(0, LUA)
import embed  # noqa: E402

CH = "lockbroker:released"
ME, OTHER = "host:1:aaaaaaaa", "host:2:bbbbbbbb"
TO_ME = "lockbroker:to:" + ME     # this broker's own channel
INC = "inc1"                 # the incarnation the tests' brokers know
MARK = "lockbroker:incarnation"
B = 9 * 10 ** 15             # counters start here, above Redis's clock in µs
KEEP = 600000                # lib/keep.lua: a counter outlives its lease so


def f(n):
    """The n-th fence of a name whose counter started at B."""
    return B + n


def info(mode="EXCLUSIVE", broker=ME):
    return "%s %s 7@127.0.0.1:5000 1795333721000" % (mode, broker)


class Scripts(BrokerTest):
    """One Redis per test (the broker BrokerTest starts is not used)."""

    def setUp(self):
        super().setUp()
        self.r = Resp(self.redis.port)
        self.addCleanup(self.r.close)
        # The seeded marker (lbtest.Redis), under the tests' own id.
        self.r("HSET", MARK, "id", INC, "grace", "0")
        self.calls = None

    def batched(self, *steps, carry=None):
        """Each step (a function that makes calls with acquire() and
        release()) made, then all their calls run as one call of
        batch.lua (with carry's flags, a script's file name), as the
        broker sends one turn's calls: their replies, in order (a
        release's as release() gives it)."""
        self.calls = []
        for step in steps:
            step()
        calls, self.calls = self.calls, None
        keys = [k for _, ks, _ in calls for k in ks]
        argv = [len(calls)]
        for script, k, args in calls:
            argv += [{"acquire": 1, "release": 2, "check": 3}[script],
                     len(k), len(args)]
            argv += list(args)
        out = self.r("EVAL", embed.expand(os.path.join(LUA, "batch.lua"),
                                          carry=carry),
                     len(keys), *keys, *argv)
        if isinstance(out, RuntimeError):
            return out
        self.assertEqual(len(out), len(calls))
        return [r[0] if s == "release" and isinstance(r, list) and
                len(r) == 1 else r for (s, _, _), r in zip(calls, out)]

    def keys(self, script, name, marker=MARK):
        """Every key script declares (embed.keys), for name: the broker
        passes them all (lockdb_script.c); marker for /incarnation."""
        path = os.path.join(LUA, script + ".lua")
        return [marker if k == "/incarnation" else
                k[1:].join(["lockbroker:", ""]) if k.startswith("/") else
                "lockbroker:{%s}%s" % (name, k) for k in embed.keys(path)]

    def run_script(self, script, name, *args, cost=None, marker=MARK):
        """With every key the script declares, as the broker passes them.
        Fence counters start at B (unless a test set one), so that the
        fences the tests expect do not depend on Redis's clock. A dict
        cost gets the commands the script ran: name -> calls."""
        path = os.path.join(LUA, script + ".lua")
        keys = self.keys(script, name, marker)
        self.r("SET", "lockbroker:{%s}:fence" % name, B, "NX")
        if self.calls is not None:  # batched(): run later, in one call
            self.calls.append((script, keys, args))
            return None
        if cost is not None:
            self.r("CONFIG", "RESETSTAT")
        out = self.r("EVAL", embed.expand(path), len(keys), *keys, *args)
        if cost is not None:
            for line in self.r("INFO", "commandstats").splitlines():
                m = re.match(r"cmdstat_([^:]+):calls=(\d+)", line)
                if m and m.group(1).split("|")[0] not in ("eval", "config"):
                    cost[m.group(1)] = int(m.group(2))
        return out

    def acquire(self, name, token, ttl=10000, mark=0, inf=None, fill=0,
                watch=0, clear=0, ticket="", least=0, live=700, inc=INC,
                rid="", cost=None, marker=MARK):
        return self.run_script(
            "acquire", name, token, ttl, mark, inf or info(), fill, watch,
            clear, CH, name, ticket, least, live, inc, rid, cost=cost,
            marker=marker)

    def release(self, name, token, fence=0, done=1, broker=ME, cost=None,
                marker=MARK, inc=INC):
        """1 released, 0 not ours; a hand-over's list as it is."""
        r = self.run_script("release", name, token, CH, name, done, 1000,
                            fence, broker, 300, "lockbroker:to:", 700, inc,
                            "", cost=cost, marker=marker)
        return r[0] if isinstance(r, list) and len(r) == 1 else r

    def ran_out(self, name):
        """name's lease runs out in Redis: its lock key goes, and its
        fence counter remembers no lease any more (lib/fence.lua)."""
        self.r("DEL", "lockbroker:{%s}" % name)
        self.r("PEXPIRE", "lockbroker:{%s}:fence" % name, KEEP // 2)

    def plain(self, name):
        """The fence a plain grant's value carries (lib/plain.lua), or
        None."""
        v = self.r("GET", "lockbroker:{%s}" % name).split()
        return int(v[5]) if len(v) == 6 else None

    def subscribe(self):
        """A subscriber to the channel every broker hears and to ME's
        own (lib/tell.lua: news goes to the brokers it concerns)."""
        sub = Resp(self.redis.port)
        self.addCleanup(sub.close)
        sub.sock.sendall(b"SUBSCRIBE %s %s\r\n" % (CH.encode(),
                                                  TO_ME.encode()))
        self.assertEqual(sub._read(), ["subscribe", CH, 1])
        self.assertEqual(sub._read(), ["subscribe", TO_ME, 2])
        return sub

    def test_declared_keys(self):
        """Every script declares its keys; the lock key comes first. The
        text Redis runs reads only the keys it is passed, every one it
        declares but perhaps the lock key, and makes no key of its own
        from a suffix."""
        for f in sorted(os.listdir(LUA)):
            if f.endswith(".lua") and f != "markers.lua":
                path = os.path.join(LUA, f)
                ks = embed.keys(path)
                first = "/incarnation" if f == "incarnation.lua" else ""
                self.assertEqual(ks[0], first, f)
                self.assertEqual(len(ks), len(set(ks)), f)
                if f == "batch.lua":  # (each call's keys, after the first)
                    continue
                text = embed.expand(path)
                used = {int(i) for i in re.findall(r"KEYS\[(\d+)\]", text)}
                # (cancel.lua touches no lock key: its keys are routed by it)
                self.assertLessEqual(set(range(2, len(ks) + 1)), used, f)
                self.assertLessEqual(used, set(range(1, len(ks) + 1)), f)
                for k in ks[1:]:
                    self.assertNotIn("'%s'" % k, text, f)
                self.assertNotRegex(text, r"KEYS\[\d+\] \.\. '[:/]", f)

    def test_flags(self):
        """Every script's first line is its flags (Redis 7): what must go
        on when Redis is above maxmemory may (allow-oom), what only reads
        says so (no-writes), and a grant may not: the flags its header
        explains. A batch has the flags of the script it carries."""
        want = {"acquire.lua": "", "share.lua": "",
                "release.lua": "allow-oom", "blind_release.lua": "allow-oom",
                "cancel.lua": "allow-oom", "extend.lua": "allow-oom",
                "check.lua": "allow-oom", "revoke.lua": "allow-oom",
                "incarnation.lua": "allow-oom", "status.lua": "no-writes",
                "who.lua": "no-writes", "batch.lua": "",
                "markers.lua": "no-writes,allow-cross-slot-keys"}
        for f in sorted(os.listdir(LUA)):
            if f.endswith(".lua"):
                fl = want[f] and " flags=" + want[f]
                text = embed.expand(os.path.join(LUA, f))
                self.assertEqual(text.split("\n")[0], "#!lua" + fl, f)
                with open(os.path.join(LUA, f)) as src:
                    head = src.read().split("-- KEYS:")[0]
                self.assertIn("-- Flags: " if f not in (
                    "incarnation.lua", "batch.lua") else "", head, f)
        for w in embed.wraps(os.path.join(LUA, "batch.lua")):
            text = embed.expand(os.path.join(LUA, "batch.lua"), carry=w)
            fl = want[w] and " flags=" + want[w]
            self.assertEqual(text.split("\n")[0], "#!lua" + fl, w)

    def test_markers(self):
        """markers.lua, the one script that declares no key (it reads the
        markers of many slots of a cluster's node, passed as arguments):
        it only reads, and says which are there (1), are not (0), or
        were confirmed on another Redis process than the run_id it is
        given (2: a failover since)."""
        path = os.path.join(LUA, "markers.lua")
        self.assertEqual(embed.keys(path), [])
        text = embed.expand(path)
        self.assertEqual(re.findall(r"redis\.p?call\('(\w+)'", text),
                         ["INFO", "INFO", "HMGET"])
        self.r("HSET", MARK, "runid", "r1")
        before = self.r("HGETALL", MARK)
        missing = "lockbroker:{x}incarnation"
        for runid, want in (("r1", [1, 0, 1]), ("r2", [2, 0, 2]),
                            ("", [1, 0, 1])):
            self.assertEqual(self.r("EVAL", text, 0, runid, MARK, missing,
                                    MARK), want, runid)
        self.assertEqual(self.r("HGETALL", MARK), before)
        self.assertEqual(self.r("EXISTS", missing), 0)

    def test_a_full_redis(self):
        """Above maxmemory (noeviction) a grant is refused before it runs,
        whole, alone or batched, and nothing is written; a release, a
        renewal, a check, a REVOKE, the beat and a STATUS still run."""
        self.assertEqual(self.acquire("h", "t")[0], 1)
        self.assertEqual(self.acquire("k", "t")[0], 1)
        self.assertEqual(self.acquire("r", "t")[0], 1)
        used = int(self.r("INFO", "memory").split("used_memory:")[1].split(
            "\r")[0])
        self.r("CONFIG", "SET", "maxmemory", used // 2)
        self.addCleanup(self.r, "CONFIG", "SET", "maxmemory", 0)
        before = sorted(self.r("KEYS", "*"))
        for out in (self.acquire("x", "t"),
                    self.share("x", "t", "SHARED", 0),
                    self.acquire("h", "w", mark=700, ticket=ME + "#1",
                                 least=1),
                    self.batched(lambda: self.acquire("x", "t"),
                                 lambda: self.acquire("y", "t"),
                                 carry="acquire.lua")):
            self.assertIsInstance(out, RuntimeError)
            self.assertTrue(str(out).startswith("OOM "), out)
        self.assertEqual(sorted(self.r("KEYS", "*")), before)
        self.assertEqual(self.run_script("extend", "h", "t", 20000, f(1), ME,
                                         CH, "h", INC, ""), 1)
        self.assertEqual(self.run_script("check", "h", "t", f(1), 0, "",
                                         INC, "")[0], 1)
        self.assertEqual(self.run_script("status", "h", f(1), "t", INC)[0],
                         1)
        self.assertEqual(self.run_script("revoke", "r", CH, "r", 1000), 1)
        self.assertEqual(self.run_script("incarnation", "", "", 1000, 0, 0,
                                         "")[0], INC)
        self.assertEqual(self.batched(lambda: self.release("h", "t"),
                                      lambda: self.release("k", "t"),
                                      carry="release.lua"), [1, 1])
        self.assertEqual(self.r("KEYS", "lockbroker:{[hk]}"), [])

    def test_named_keys_and_arguments(self):
        """Every script names its keys and arguments at its top, and the
        text Redis runs has none of those names left: each use reads
        KEYS[i] or ARGV[j] where it is, the declaration lines are empty
        (user_script:N is line N of the file), and no constant of lib/ is
        left unwritten. embed.py refuses a bare KEYS[ in a body and a
        name declared again."""
        for f in sorted(os.listdir(LUA)):
            if not f.endswith(".lua"):
                continue
            path = os.path.join(LUA, f)
            names, args = embed.declared(path)
            text = embed.expand(path)
            with open(path) as src:
                lines = src.read().split("\n")
            if f != "batch.lua":  # (its wrapped scripts are added)
                self.assertEqual(len(text.split("\n")), len(lines), f)
            code = embed.code_of(text)
            for n in list(names) + list(embed.constants()):
                self.assertIsNone(re.search(r"(?<![\w.])%s\b" % n, code),
                                  (f, n))
            for no, line in enumerate(lines):
                if embed.NAME.match(line):
                    self.assertEqual(text.split("\n")[no], "", (f, no))
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "bad.lua")
            for body in ("return KEYS[1]\n", "local lockKey = 1\n",
                         "lockKey = 'x'\n"):
                with open(bad, "w") as out:
                    out.write("-- KEYS: lock\nlocal lockKey = KEYS[1]\n" +
                              body)
                with self.assertRaises(SystemExit, msg=body):
                    embed.expand(bad)

    def test_acquire_grant_regrant_refuse(self):
        self.assertEqual(self.acquire("a", "t1"), [1, f(1)])
        self.assertEqual(self.r("GET", "lockbroker:{a}"),
                         "t1 %s %d" % (info(), f(1)))
        self.assertEqual(self.acquire("a", "t1", ttl=5000), [1, f(1)])
        self.assertEqual(self.r("GET", "lockbroker:{a}"), "t1 " + info())
        self.assertLessEqual(self.r("PTTL", "lockbroker:{a}"), 5000)
        r = self.acquire("a", "t2", mark=700)
        self.assertEqual(r[0], 0)
        self.assertEqual(r[2:], [f(1), 0, 0])
        # Waited for by ME (until when, on Redis's clock).
        self.assertGreater(int(self.r("HGET", "lockbroker:{a}:waiting", ME)),
                           int(self.r("TIME")[0]) * 1000)
        once = self.acquire("a", "t2")  # a try-once marks nothing
        self.assertEqual((once[0], once[2], once[3]), (0, f(1), 0))

    def test_plain_release_is_compare_and_delete(self):
        """A grant made while nobody waits carries its fence in the lock
        key's value: its release is a GET, a DEL and the counter's
        PEXPIRE (it remembers no lease then, lib/fence.lua), and it still
        compares the token and the fence. The grant: the gate, EXISTS of
        the marks, PTTL of the counter (a lease it remembers), its GET,
        and two SETs."""
        cost = {}
        self.assertEqual(self.acquire("p", "t", cost=cost), [1, f(1)])
        self.assertEqual(cost, {"hmget": 1, "time": 1, "exists": 1,
                                "pttl": 1, "get": 1, "set": 2})
        self.assertEqual(self.plain("p"), f(1))
        self.assertEqual(self.release("p", "t", fence=f(2)), 0)
        self.assertEqual(self.release("p", "u", fence=f(1)), 0)
        cost = {}
        self.assertEqual(self.release("p", "t", fence=f(1), cost=cost), 1)
        self.assertEqual(cost, {"get": 1, "del": 1, "pexpire": 1})
        self.assertEqual(self.r("EXISTS", "lockbroker:{p}"), 0)
        # A counter gone meanwhile (by hand): the value's fence decides.
        self.acquire("p", "t")
        self.r("DEL", "lockbroker:{p}:fence")
        self.assertEqual(self.release("p", "t", fence=f(2)), 1)
        # WHO shows the entry, not the fence after it.
        self.acquire("p", "t")
        self.assertEqual(self.run_script("who", "p")[1],
                         "%s %s" % (self.plain("p"), info()))

    def test_waiters_take_the_fence_off(self):
        """Every waiter that marks a name an exclusive holder holds makes
        its release look for the marks: a waiter without a ticket is
        announced, a ticket is handed the name, a FILL waiter's end is
        marked done; a try-once marks nothing and leaves the fence."""
        sub = self.subscribe()
        ttl = lambda n: self.r("PTTL", "lockbroker:{%s}" % n)
        self.acquire("w1", "h", ttl=60000)
        self.assertEqual(self.acquire("w1", "x")[0], 0)  # WAIT 0
        self.assertEqual(self.plain("w1"), f(1))
        self.assertEqual(self.acquire("w1", "w", mark=700)[0], 0)
        self.assertIsNone(self.plain("w1"))
        self.assertGreater(ttl("w1"), 50000)  # the lease is kept
        self.assertEqual(self.release("w1", "h", f(1)), 1)
        self.assertEqual(sub._read(), ["message", TO_ME, "w1"])
        # A ticket.
        self.acquire("w2", "h")
        self.acquire("w2", "a", mark=700, ticket=ME + "#1", least=1)
        self.assertIsNone(self.plain("w2"))
        self.assertEqual(self.release("w2", "h", f(1)), [1, f(2), 1, "a"])
        # A FILL waiter: the holder's release marks the work done.
        self.acquire("w3", "h")
        self.assertEqual(self.acquire("w3", "w", fill=1, mark=700)[0], 0)
        self.assertIsNone(self.plain("w3"))
        # :fill is set only with :waiting, and ends no later (the fast
        # path and a plain release ask for :waiting alone); the ends on
        # Redis's clock, as two PTTLs are read a millisecond apart.
        self.assertLessEqual(
            self.r("PEXPIRETIME", "lockbroker:{w3}:fill"),
            self.r("PEXPIRETIME", "lockbroker:{w3}:waiting"))
        self.assertEqual(self.release("w3", "h", f(1)), 1)
        self.assertEqual(self.r("GET", "lockbroker:{w3}:done"), str(f(1)))
        self.assertEqual(sub._read(), ["message", TO_ME, "w3"])
        # A reader, with a ticket and without.
        for tk in ("", ME + "#2"):
            self.acquire("w4", "h")
            self.assertEqual(self.share("w4", "r", "SHARED", 0, ticket=tk,
                                        least=2)[0], 0)
            self.assertIsNone(self.plain("w4"))
            self.assertEqual(self.release("w4", "h", self.r(
                "GET", "lockbroker:{w4}:fence")), 1)
            if tk == "":
                self.assertEqual(sub._read(), ["message", TO_ME, "w4"])
            self.r("DEL", "lockbroker:{w4}:waiting", "lockbroker:{w4}:queue")
        # Marks already there: the grant is not plain.
        self.r("HSET", "lockbroker:{w5}:waiting", ME, 2 ** 50)
        self.r("PEXPIRE", "lockbroker:{w5}:waiting", 60000)
        self.assertEqual(self.acquire("w5", "h")[0], 1)
        self.assertIsNone(self.plain("w5"))
        self.assertEqual(self.release("w5", "h"), 1)
        self.assertEqual(sub._read(), ["message", TO_ME, "w5"])

    def test_acquire_corrupt_counter_leaves_nothing(self):
        self.r("SET", "lockbroker:{c}:fence", "abc")
        self.assertIsInstance(self.acquire("c", "t"), RuntimeError)
        self.assertIsNone(self.r("GET", "lockbroker:{c}"))

    def test_counter_past_exact_doubles_leaves_nothing(self):
        """A counter of 2^53 or more would give a fence no longer exact
        in Lua's numbers (the next could equal it): refused, as a counter
        that is not an integer is; a negative one is below the clock."""
        self.r("SET", "lockbroker:{c}:fence", str(2 ** 53))
        self.assertIsInstance(self.acquire("c", "t"), RuntimeError)
        self.assertIsNone(self.r("GET", "lockbroker:{c}"))
        self.assertEqual(self.r("GET", "lockbroker:{c}:fence"), str(2 ** 53))
        self.r("SET", "lockbroker:{c}:fence", str(2 ** 53 - 2))
        self.assertEqual(self.acquire("c", "t"), [1, 2 ** 53 - 1])
        self.r("SET", "lockbroker:{n}:fence", "-7")
        g = self.acquire("n", "t")
        self.assertEqual(g[0], 1)
        self.assertGreater(g[1], 10 ** 15)  # Redis's clock in µs

    def test_regrant_through_another_broker(self):
        """A shorter same-token lease through another broker is told to
        the broker that stored the entry, and both are in it now."""
        sub = self.subscribe()
        self.assertEqual(self.acquire("s", "t", ttl=60000), [1, f(1)])
        self.assertEqual(self.acquire("s", "t", ttl=500,
                                      inf=info(broker=OTHER)), [1, f(1)])
        self.assertEqual(sub._read(),
                         ["message", TO_ME,
                          "s shortened %d %s" % (f(1), OTHER)])
        self.assertEqual(self.r("GET", "lockbroker:{s}").split()[2],
                         ME + "," + OTHER)

    def test_fill_done(self):
        self.assertEqual(self.acquire("f", "lead", fill=1), [1, f(1)])
        self.assertEqual(self.acquire("f", "w", fill=1, mark=700)[0], 0)
        self.assertEqual(self.release("f", "lead", f(1), done=2), 1)
        self.assertEqual(self.acquire("f", "w", fill=1, watch=f(1)),
                         [2, f(1)])
        # A :done that is not a number (a leader's release copies a
        # counter set by hand) says nothing: the FILL tries as usual.
        self.r("SET", "lockbroker:{f}:done", "x")
        self.assertEqual(self.acquire("f", "w", fill=1, watch=f(1)),
                         [1, f(2)])

    def test_release_compares_token_and_fence(self):
        self.acquire("r", "t")
        self.assertEqual(self.release("r", "other"), 0)
        self.assertEqual(self.release("r", "t", fence=f(9)), 0)
        self.assertEqual(self.r("EXISTS", "lockbroker:{r}"), 1)
        self.assertEqual(self.release("r", "t", fence=f(1)), 1)
        self.assertEqual(self.r("EXISTS", "lockbroker:{r}"), 0)

    def test_release_through_another_broker_is_announced(self):
        sub = self.subscribe()
        self.acquire("x", "t")
        self.assertEqual(self.release("x", "t", broker=OTHER), 1)
        self.assertEqual(sub._read(),
                         ["message", TO_ME,
                          "x released %d %s" % (f(1), OTHER)])

    def test_own_release_leaves_a_grant_brokers_share(self):
        self.acquire("y", "t", ttl=60000)
        self.acquire("y", "t", ttl=60000, inf=info(broker=OTHER))
        self.assertEqual(self.release("y", "t", f(1), done=0), 0)
        self.assertEqual(self.r("EXISTS", "lockbroker:{y}"), 1)
        self.assertEqual(self.release("y", "t", f(1), done=1), 1)

    def share(self, name, tok, mode="LIMIT=2", n=2, mark=700, ticket="",
              least=0, broker=ME):
        return self.run_script("share", name, tok, 10000, mark,
                               info(mode, broker), mode, n, CH, name, INC,
                               "", ticket, least, 700)

    def test_share_limit_and_writer(self):
        def share(tok, mode="LIMIT=2", n=2):
            return self.share("m", tok, mode, n)
        self.assertEqual(share("a"), [1, f(1)])
        self.assertEqual(share("b"), [1, f(2)])
        self.assertEqual(share("c")[0], 0)
        self.assertEqual(share("c", "SHARED", 0), [3, 2])
        self.assertEqual(self.r("GET", "lockbroker:{m}"), "=shared")
        w = self.acquire("m", "w", mark=700)
        self.assertEqual((w[0], w[3]), (0, 1))
        self.assertEqual(self.r("EXISTS", "lockbroker:{m}:writer"), 1)
        self.assertEqual(self.release("m", "a", fence=f(2)), 0)
        self.assertEqual(self.release("m", "a", fence=f(1)), 1)

    def test_refusal_names_the_first_ticket_when_it_is_ours(self):
        """The broker's try behind another of its own tickets is told
        which (its waiter then asks); another broker's try is not."""
        self.acquire("hq", "h")
        self.acquire("hq", "a", mark=700, ticket=ME + "#2", least=1)
        self.acquire("hq", "b", mark=700, ticket=ME + "#1", least=1)
        self.ran_out("hq")
        r = self.acquire("hq", "b", mark=700, ticket=ME + "#1", least=1)
        self.assertEqual((r[0], r[1], r[4]), (0, -1, 2))
        r = self.acquire("hq", "c", mark=700, ticket=OTHER + "#1", least=1,
                         inf=info(broker=OTHER))
        self.assertEqual((r[0], r[4]), (0, 0))
        s = self.share("hq", "d", "SHARED", 0, ticket=ME + "#3", least=1)
        self.assertEqual((s[0], s[4]), (0, 2))
        self.assertEqual(self.acquire("hq", "a", ticket=ME + "#2",
                                      least=1)[0], 1)

    def test_readers_queue_in_order(self):
        """Readers take tickets in the one queue: behind a writer's
        ticket they stay behind it, a LIMIT lets them in in their order, a
        try without a ticket never jumps the queue, and a release tells
        the brokers of the first readers' tickets (not a writer's hand-over)
        to try."""
        q = "lockbroker:{o}:queue"
        self.assertEqual(self.share("o", "r1", "SHARED", 0), [1, f(1)])
        # A writer queues behind the reader (its ticket, no writer mark).
        w = self.acquire("o", "w", mark=700, ticket=ME + "#1", least=1)
        self.assertEqual((w[0], w[3]), (0, 0))
        self.assertEqual(self.r("EXISTS", "lockbroker:{o}:writer"), 0)
        # A later reader, on another broker, stays behind the writer; so
        # does a try-once.
        r2 = self.share("o", "r2", "SHARED", 0, ticket=OTHER + "#1",
                        least=1, broker=OTHER)
        self.assertEqual(r2[0], 0)
        self.assertEqual(self.share("o", "r3", "SHARED", 0, mark=0)[0], 0)
        self.assertEqual(self.r("ZRANGE", q, 0, -1), [ME + "#1", OTHER + "#1"])
        # The last reader goes: the writer is handed the name, nothing else.
        self.assertEqual(self.release("o", "r1", f(1)), [1, f(2), 1, "w"])
        self.assertTrue(self.r("GET", "lockbroker:{o}").startswith("w "))
        # The writer goes: the reader's broker is told to try, and it is
        # let in, first in the queue.
        sub = Resp(self.redis.port)
        self.addCleanup(sub.close)
        sub("SUBSCRIBE", "lockbroker:to:" + OTHER)
        self.assertEqual(self.release("o", "w", f(2)), 1)
        self.assertEqual(sub._read(),
                         ["message", "lockbroker:to:" + OTHER, "o"])
        self.assertEqual(self.r("EXISTS", "lockbroker:{o}"), 0)
        self.assertEqual(self.acquire("o", "x")[0], 0)  # never jumps
        self.assertEqual(self.share("o", "r2", "SHARED", 0,
                                    ticket=OTHER + "#1", least=1,
                                    broker=OTHER), [1, f(3)])
        self.assertEqual(self.r("ZCARD", q), 0)
        # LIMIT 2: behind a writer, three readers queue; once it goes, the
        # first two get in (whichever asks first), the third waits for a
        # place.
        self.assertEqual(self.share("l", "a"), [1, f(1)])
        self.assertEqual(self.acquire("l", "w", mark=700, ticket=ME + "#8",
                                      least=8)[0], 0)
        self.assertEqual(self.share("l", "b", ticket=ME + "#9",
                                    least=8)[0], 0)
        self.assertEqual(self.release("l", "a", f(1)), [1, f(2), 8, "w"])
        self.assertEqual(self.share("l", "c", ticket=OTHER + "#3",
                                    least=3, broker=OTHER)[0], 0)
        self.assertEqual(self.share("l", "d", ticket=OTHER + "#4",
                                    least=3, broker=OTHER)[0], 0)
        self.assertEqual(self.release("l", "w", f(2)), 1)  # b, c, d wait
        self.assertEqual(self.share("l", "d", ticket=OTHER + "#4",
                                    least=3, broker=OTHER)[0], 0)
        self.assertEqual(self.share("l", "c", ticket=OTHER + "#3",
                                    least=3, broker=OTHER), [1, f(3)])
        self.assertEqual(self.share("l", "d", ticket=OTHER + "#4",
                                    least=3, broker=OTHER)[0], 0)
        self.assertEqual(self.share("l", "b", ticket=ME + "#9",
                                    least=9), [1, f(4)])
        self.assertEqual(self.r("ZRANGE", "lockbroker:{l}:queue", 0, -1),
                         [OTHER + "#4"])

    def test_tickets_queue_and_hand_over(self):
        """A refused try with a ticket takes its place; a free name goes to
        the first live ticket only; a release hands the name to it: this
        broker's ticket with its own ttl (the reply says which), another's
        with at most the handoff and a message on its channel."""
        q = "lockbroker:{q}:queue"
        self.assertEqual(self.acquire("q", "h"), [1, f(1)])
        r = self.acquire("q", "a", mark=700, ticket=ME + "#5", least=5)
        self.assertEqual(r[0], 0)
        r = self.acquire("q", "b", ttl=60000, mark=700,
                         ticket=OTHER + "#1", least=1)
        self.assertEqual(r[0], 0)
        self.assertEqual(self.r("ZRANGE", q, 0, -1), [ME + "#5", OTHER + "#1"])
        # A ticket needs no announcement: no :waiting mark.
        self.assertEqual(self.r("EXISTS", "lockbroker:{q}:waiting"), 0)
        self.assertEqual(self.release("q", "h", f(1)), [1, f(2), 5, "a"])
        self.assertTrue(self.r("GET", "lockbroker:{q}").startswith("a "))
        self.assertGreater(self.r("PTTL", "lockbroker:{q}"), 9000)
        sub = Resp(self.redis.port)
        self.addCleanup(sub.close)
        sub("SUBSCRIBE", "lockbroker:to:" + OTHER)
        self.assertEqual(self.release("q", "a", f(2)), [1, f(3), 0])
        self.assertEqual(sub._read(), ["message", "lockbroker:to:" + OTHER,
                                       "q 1 %d b 300" % f(3)])
        self.assertLessEqual(self.r("PTTL", "lockbroker:{q}"), 300)
        self.assertEqual(self.r("ZCARD", q), 0)
        # The hand-over's lease ran out unconfirmed: the name is free, and
        # a ticket first in the queue keeps it from anyone else.
        self.ran_out("q")
        self.acquire("q", "c", mark=700, ticket=OTHER + "#2", least=1)
        self.assertEqual(self.acquire("q", "d")[0], 0)  # WAIT 0
        self.assertEqual(self.acquire("q", "e", mark=700, ticket=ME + "#6",
                                      least=6)[0], 0)
        self.assertEqual(self.acquire("q", "c", ticket=OTHER + "#2",
                                      least=2), [1, f(4)])
        self.assertEqual(self.r("ZRANGE", q, 0, -1), [ME + "#6"])
        # A ticket below its broker's least is dead: pruned, not handed.
        self.acquire("q", "f", mark=700, ticket=OTHER + "#3", least=3)
        self.acquire("q", "g", mark=700, ticket=OTHER + "#4", least=4)
        self.assertEqual(self.release("q", "c", f(4)), [1, f(5), 6, "e"])
        self.assertEqual(self.release("q", "e", f(5)), [1, f(6), 0])
        self.assertTrue(self.r("GET", "lockbroker:{q}").startswith("g "))
        # Nobody asked for longer than a live broker waits (Redis stood
        # still): every broker's time starts again, nobody is dropped.
        qb = "lockbroker:{q}:brokers"
        self.acquire("q", "p1", mark=700, ticket=OTHER + "#9", least=9)
        self.r("HSET", qb, OTHER, "1000 9", "=last", "500")
        self.assertEqual(self.acquire("q", "p2")[0], 0)  # still first
        self.assertEqual(self.r("ZRANGE", q, 0, -1), [OTHER + "#9"])
        self.assertGreater(int(self.r("HGET", qb, OTHER).split()[0]), 10**12)
        self.r("ZREM", q, OTHER + "#9")
        # cancel takes a ticket out.
        self.acquire("q", "h2", mark=700, ticket=ME + "#7", least=7)
        self.assertEqual(self.run_script("cancel", "q", ME + "#7"), 1)
        self.assertEqual(self.run_script("cancel", "q", ME + "#7"), 0)
        self.assertEqual(self.r("ZCARD", q), 0)

    def test_what_a_hand_over_costs(self):
        """The contended path asks Redis nothing twice (issue 16): a try
        with a ticket that takes its place behind a holder, and a release
        that hands the name to it, each read the clock once (the gate's
        TIME), the counter and each ticket's data once, the queue's head
        and its broker's entry in one HMGET, and skip the EXISTS of a lock
        key the release just deleted."""
        def queue(token, n):
            """token's try with ticket n, refused: the commands it ran."""
            cost = {}
            r = self.acquire("c", token, mark=700, ticket=ME + "#%d" % n,
                             least=1, cost=cost)
            self.assertEqual(r[0], 0)
            return cost

        self.acquire("c", "h")
        # The gate, EXISTS queue waiting, the lease the counter remembers
        # (PTTL: held, so no SET NX is tried), the lock key, the counter,
        # the queue's (empty) head, PTTL, unplain's SET, and qtake's
        # eight.
        self.assertEqual(queue("a", 1), {"hmget": 1, "time": 1, "exists": 1,
                                         "get": 2, "set": 1, "zrange": 2,
                                         "pttl": 2, "zscore": 1, "zadd": 1,
                                         "hset": 2, "pexpire": 3})
        # The head (a's ticket) is read with its broker's entry.
        self.assertEqual(queue("b", 2), {"hmget": 2, "time": 1, "exists": 1,
                                         "get": 2, "zrange": 2, "pttl": 1,
                                         "zscore": 1, "zadd": 1, "hset": 2,
                                         "pexpire": 3})
        cost = {}
        self.assertEqual(self.release("c", "h", f(1), cost=cost),
                         [1, f(2), 1, "a"])
        # GET lock and counter, DEL, the counter's lease forgotten
        # (PEXPIRE), EXISTS queue and :fill (done 1), the gate, the head,
        # its data, the counter's SET, qdrop, the grant's SET and the
        # writer mark's DEL.
        self.assertEqual(cost, {"get": 2, "del": 2, "exists": 2,
                                "pexpire": 1, "hmget": 2, "time": 1,
                                "zrange": 1, "hget": 1, "set": 2, "zrem": 1,
                                "hdel": 1})

    def test_extend_status_who_check_revoke(self):
        self.acquire("e", "t", ttl=60000)
        ext = lambda fence, ttl: self.run_script(
            "extend", "e", "t", ttl, fence, ME, CH, "e", INC, "")
        check = lambda fence: self.run_script("check", "e", "t", fence, 0,
                                              "", INC, "")
        self.assertEqual(ext(f(2), 1000), 0)
        self.assertEqual(ext(f(1), 30000), 1)
        st = self.run_script("status", "e", f(1), "t", INC)
        self.assertEqual(st[0], 1)
        self.assertEqual(st[2:], [f(1), 1, -1, 1])
        self.assertEqual(self.run_script("status", "e", f(1), "u", INC)[5],
                         0)
        who = self.run_script("who", "e")
        self.assertEqual(who[1], "%d %s" % (f(1), info()))
        held = check(f(1))       # held, and how long it has left
        self.assertEqual(held[0], 1)
        self.assertTrue(0 < held[1] <= self.r("PTTL", "lockbroker:{e}") + 5,
                        held)
        self.assertEqual(check(f(2)), [0, 0])
        self.assertEqual(self.run_script("revoke", "e", CH, "e", 5000), 1)
        self.assertEqual(check(f(1)), [0, f(1)])

    def test_fence_is_at_least_redis_clock(self):
        """A counter below Redis's clock in µs (or gone) gives the clock."""
        t = self.r("TIME")
        now = int(t[0]) * 10 ** 6 + int(t[1])
        self.r("SET", "lockbroker:{k}:fence", 5)
        g = self.acquire("k", "t")
        self.assertEqual(g[0], 1)
        self.assertGreaterEqual(g[1], now)
        self.assertLess(g[1], now + 60 * 10 ** 6)
        self.assertEqual(int(self.r("GET", "lockbroker:{k}:fence")), g[1])
        self.assertEqual(self.release("k", "t", g[1]), 1)
        self.assertGreater(self.acquire("k", "t")[1], g[1])

    def test_fence_counter_outlives_the_last_lease_by_minutes(self):
        """The counter goes ten minutes (lib/keep.lua) after the last
        lease set on the name (grant, renewal, hand-over, shared grant),
        and five once it is released, so unused names leave nothing in
        Redis; while it lives, releases compare with it."""
        keep = KEEP
        fk = "lockbroker:{d}:fence"
        pttl = lambda k=fk: self.r("PTTL", k)
        g = self.acquire("d", "t", ttl=10000)
        self.assertEqual(g[0], 1)
        self.assertTrue(keep + 9000 < pttl() <= keep + 10000, pttl())
        ext = self.run_script("extend", "d", "t", 60000, g[1], ME, CH, "d",
                              INC, "")
        self.assertEqual(ext, 1)
        self.assertTrue(keep + 59000 < pttl() <= keep + 60000, pttl())
        # A waiter's ticket is handed the name with its own ttl.
        self.acquire("d", "w", ttl=20000, mark=700, ticket=ME + "#1",
                     least=1)
        h = self.release("d", "t", g[1])
        self.assertEqual(h[:1] + h[2:], [1, 1, "w"])
        self.assertTrue(keep + 19000 < pttl() <= keep + 20000, pttl())
        self.assertEqual(self.release("d", "w", h[1]), 1)
        # Released: no lease left to remember, the counter goes five
        # minutes later.
        self.assertTrue(keep / 2 - 1000 < pttl() <= keep / 2, pttl())
        # A shared grant keeps its counter too.
        self.share("ds", "r", "SHARED", 0)
        self.assertGreater(pttl("lockbroker:{ds}:fence"), keep)

    def test_gate(self):
        """Nothing is granted (or extended, or checked) for a broker whose
        incarnation is not the marker's, nor granted in a grace period."""
        self.assertEqual(self.acquire("g", "t", inc="old"), [-1, 0])
        # Another Redis process than the marker was confirmed on.
        self.r("HSET", MARK, "runid", "run-a")
        self.assertEqual(self.acquire("g", "t", rid="run-b"), [-1, 0])
        self.assertEqual(self.acquire("g", "t", rid="run-a")[0], 1)
        self.assertEqual(self.release("g", "t"), 1)
        self.assertEqual(self.r("EXISTS", "lockbroker:{g}"), 0)
        self.r("DEL", MARK)
        self.assertEqual(self.acquire("g", "t"), [-1, 0])
        self.r("HSET", MARK, "id", INC, "grace", 2 ** 52)
        r = self.acquire("g", "t")
        self.assertEqual(r[0], -2)
        self.assertGreater(r[1], 10 ** 9)
        # A waiter with a ticket keeps its place meanwhile; a try-once
        # and a ticket-less waiter take none.
        self.assertEqual(self.acquire("g", "w", mark=700, ticket=ME + "#3",
                                      least=3)[0], -2)
        self.assertEqual(self.acquire("g", "x", ticket=OTHER + "#1",
                                      least=1)[0], -2)
        self.assertEqual(self.r("ZRANGE", "lockbroker:{g}:queue", 0, -1),
                         [ME + "#3"])
        # A plain grant's holder, waited for meanwhile, looks for the
        # marks when it goes (a reader's ticket too).
        self.r("SET", "lockbroker:{gp}", "h %s %d" % (info(), f(1)),
               "PX", 60000)
        self.assertEqual(self.acquire("gp", "w", mark=700, ticket=ME + "#4",
                                      least=4)[0], -2)
        self.assertIsNone(self.plain("gp"))
        self.r("SET", "lockbroker:{gr}", "h %s %d" % (info(), f(1)),
               "PX", 60000)
        self.assertEqual(self.share("gr", "r", "SHARED", 0, ticket=ME + "#5",
                                    least=5)[0], -2)
        self.assertIsNone(self.plain("gr"))
        self.r("DEL", "lockbroker:{g}:queue", "lockbroker:{g}:tickets",
               "lockbroker:{g}:brokers")
        share = self.run_script("share", "g", "t", 1000, 0, info("SHARED"),
                                "SHARED", 0, CH, "g", INC, "")
        self.assertEqual(share[0], -2)
        self.assertEqual(self.r("EXISTS", "lockbroker:{g}"), 0)
        self.assertEqual(self.run_script("extend", "g", "t", 1000, 0, ME, CH,
                                         "g", "old", ""), -1)
        self.assertEqual(self.run_script("check", "g", "t", 1, 0, "", "old",
                                         ""), [-1, 0])
        # Another Redis process than the marker's (a promoted replica):
        # not trusted before the broker asked incarnation.lua.
        self.r("HSET", MARK, "runid", "run-a")
        self.assertEqual(self.run_script("extend", "g", "t", 1000, 0, ME, CH,
                                         "g", INC, "run-b"), -1)
        self.assertEqual(self.run_script("check", "g", "t", 1, 0, "", INC,
                                         "run-b"), [-1, 0])

    def test_remembered_lease(self):
        """The fence counter remembers the lease (lib/fence.lua): with the
        lock key deleted by hand while it runs, acquire and share refuse
        (ms: what is left of it), check puts the grant back for it (also
        batched), and a release with its fence frees the name; a release
        leaves no lease remembered."""
        g = self.acquire("r", "t", ttl=30000)
        self.assertEqual(g[0], 1)
        fence_key = "lockbroker:{r}:fence"
        self.assertGreater(self.r("PTTL", fence_key), KEEP + 29000)
        self.r("DEL", "lockbroker:{r}")
        no = self.acquire("r", "u")
        self.assertEqual(no[0], 0)
        self.assertTrue(29000 < no[1] <= 30000, no)
        no = self.run_script("share", "r", "u", 10000, 0, info("SHARED"),
                             "SHARED", 0, CH, "r", INC, "", "", 0, 700)
        self.assertEqual(no[0], 0)
        value = "t " + info()
        put = self.batched(lambda: self.run_script(
            "check", "r", "t", g[1], 0, value, INC, ""))[0]
        self.assertEqual(put[0], 1)
        self.assertTrue(29000 < put[1] <= 30000, put)
        # As it was, but for its broker: unknown (the key said which).
        self.assertEqual(self.r("GET", "lockbroker:{r}"),
                         "t " + info(broker="?"))
        # Not another grant's fence, nor one whose lease ended: not put
        # back.
        self.r("DEL", "lockbroker:{r}")
        self.assertEqual(self.run_script("check", "r", "t", g[1] - 1, 0,
                                         value, INC, "")[0], 0)
        self.assertEqual(self.release("r", "t", fence=g[1]), 1)
        self.assertLessEqual(self.r("PTTL", fence_key), KEEP // 2)
        self.assertEqual(self.run_script("check", "r", "t", g[1], 0, value,
                                         INC, "")[0], 0)
        self.assertEqual(self.acquire("r", "u")[0], 1)
        self.assertEqual(self.release("r", "u"), 1)
        self.assertLessEqual(self.r("PTTL", fence_key), KEEP // 2)

    def test_incarnation_sees_eviction(self):
        """The marker remembers Redis's evicted_keys: a count that moved
        makes a new incarnation, and one that did not, none; a broker
        that allows eviction does not look. The id is Redis's time plus
        the skew asked for, in µs."""
        self.r("DEL", MARK)
        made = self.run_script("incarnation", "", "run-a", 300, 1, 1000)
        t = self.r("TIME")
        now_us = int(t[0]) * 10 ** 6 + int(t[1])
        self.assertTrue(now_us + 900000 < int(made[0]) <= now_us + 10 ** 6,
                        (made, now_us))
        self.assertEqual(made[5], 0)
        self.assertEqual(self.r("HGET", MARK, "evicted"), "0")
        self.assertEqual(self.run_script("incarnation", "", "run-a", 300, 1,
                                         1000)[0], made[0])
        # One key evicted: Redis under maxmemory with an evicting policy.
        self.r("SET", "victim", "x", "PX", 60000)
        used = int(re.search(r"used_memory:(\d+)",
                             self.r("INFO", "memory")).group(1))
        self.r("CONFIG", "SET", "maxmemory-policy", "volatile-ttl")
        self.r("CONFIG", "SET", "maxmemory", used - 1000)
        self.r("SET", "w", "1")
        self.r("CONFIG", "SET", "maxmemory", 0)
        self.r("CONFIG", "SET", "maxmemory-policy", "noeviction")
        allowed = self.run_script("incarnation", "", "run-a", 300, 0, 1000)
        self.assertEqual((allowed[0], allowed[5]), (made[0], -1))
        again = self.run_script("incarnation", "", "run-a", 300, 1, 1000)
        self.assertNotEqual(again[0], made[0])
        self.assertEqual(again[2], 1)
        self.assertGreater(again[5], 0)
        self.assertEqual(self.run_script("incarnation", "", "run-a", 300, 1,
                                         1000)[0], again[0])

    def test_incarnation_older_than_known(self):
        """A broker that knew a later incarnation than the marker's (it
        followed the master elsewhere and back) makes a new one; one that
        knew the same or an earlier one, or none, does not."""
        self.r("DEL", MARK)
        made = self.run_script("incarnation", "", "run-a", 300, 0, 0)
        for known in ("", made[0], str(int(made[0]) - 1)):
            self.assertEqual(self.run_script("incarnation", "", "run-a", 300,
                                             0, 0, known)[:3:2],
                             [made[0], 0], known)
        later = str(int(made[0]) + 1)
        again = self.run_script("incarnation", "", "run-a", 300, 0, 0, later)
        self.assertEqual(again[2], 1)
        self.assertGreater(int(again[0]), int(later))
        self.assertEqual(self.run_script("incarnation", "", "run-a", 300, 0,
                                         0, later)[:3:2], [again[0], 0])

    def test_incarnation_behind_sentinels_epoch(self):
        """A broker that finds its master through Sentinel passes the
        master's config-epoch: a marker whose epoch is below it (a master
        stopped past a failover and made master again before it was a
        replica: its run_id and replid unchanged) is a new incarnation,
        stamped with the epoch; one at or above it is kept; a marker
        without epoch is behind once. A broker without Sentinel passes ""
        and does not look."""
        self.r("DEL", MARK)
        made = self.run_script("incarnation", "", "run-a", 300, 0, 0, "", "")
        self.assertIsNone(self.r("HGET", MARK, "epoch"))
        first = self.run_script("incarnation", "", "run-a", 300, 0, 0, "",
                                "3")
        self.assertNotEqual(first[0], made[0])
        self.assertEqual(first[2], 1)
        self.assertEqual(self.r("HGET", MARK, "epoch"), "3")
        for epoch in ("3", "2", "0", ""):
            self.assertEqual(self.run_script("incarnation", "", "run-a", 300,
                                             0, 0, "", epoch)[:3:2],
                             [first[0], 0], epoch)
        later = self.run_script("incarnation", "", "run-a", 300, 0, 0, "",
                                "5")
        self.assertEqual(later[2], 1)
        self.assertGreater(int(later[0]), int(first[0]))
        self.assertEqual(self.r("HGET", MARK, "epoch"), "5")
        self.assertEqual(self.run_script("incarnation", "", "run-a", 300, 0,
                                         0, "", "5")[:3:2], [later[0], 0])

    def test_incarnation(self):
        """Made when missing or confirmed on another Redis process; kept
        (with what is left of its grace period) otherwise."""
        self.r("DEL", MARK)
        made = self.run_script("incarnation", "", "run-a", 300, 0, 0)
        self.assertEqual((made[1], made[2], made[3]), (300, 1, 300))
        t = self.r("TIME")       # and Redis's time, in ms
        self.assertLess(abs(int(t[0]) * 1000 + int(t[1]) // 1000 - made[4]),
                        1000)
        same = self.run_script("incarnation", "", "run-a", 5000, 0, 0)
        self.assertEqual((same[0], same[2]), (made[0], 0))
        self.assertLessEqual(same[1], 300)
        self.assertEqual(same[3], 5000)   # the longest any broker needs
        self.assertEqual(self.run_script("incarnation", "", "", 300, 0, 0)[0],
                         made[0])      # a broker that may not read run_id
        other = self.run_script("incarnation", "", "run-b", 300, 0, 0)
        self.assertNotEqual(other[0], made[0])
        # A new incarnation waits as long as the longest need known.
        self.assertEqual((other[1], other[2], other[3]), (5000, 1, 5000))
        self.assertEqual(self.r("HGET", MARK, "runid"), "run-b")

    def replid(self, field="master_replid", section="replication"):
        return re.search(field + r":(\w+)",
                         self.r("INFO", section)).group(1)

    def test_another_replication_id(self):
        """A master made a replica and master again (a failback to a
        former master that may have missed its successor's writes) keeps
        its run_id but not its replication id (INFO's master_replid):
        the marker remembers the one it was made or confirmed on, and
        the gate, check, extend and markers.lua treat another as another
        Redis process, as incarnation.lua does (a new incarnation), and
        so a marker without one (made by an older broker). A script run on another Redis
        than the run_id it is given (a slot's importing master, reached
        by ASK) judges the marker by its runid alone, and writes no
        replid there."""
        rid = self.replid("run_id", "server")
        self.r("DEL", MARK)
        made = self.run_script("incarnation", "", rid, 300, 0, 0)
        self.assertEqual(self.r("HGET", MARK, "replid"), self.replid())
        self.r("HSET", MARK, "grace", 0)
        inc = made[0]
        g = self.acquire("f", "t", inc=inc, rid=rid)
        self.assertEqual(g[0], 1)
        before = self.replid()
        self.r("REPLICAOF", "127.0.0.1", str(free_port()))
        self.r("REPLICAOF", "NO", "ONE")
        self.assertNotEqual(self.replid(), before)
        self.assertEqual(self.acquire("f2", "t", inc=inc, rid=rid), [-1, 0])
        self.assertEqual(self.run_script("extend", "f", "t", 1000, 0, ME, CH,
                                         "f", inc, rid), -1)
        self.assertEqual(self.run_script("check", "f", "t", g[1], 0, "", inc,
                                         rid), [-1, 0])
        text = embed.expand(os.path.join(LUA, "markers.lua"))
        self.assertEqual(self.r("EVAL", text, 0, rid, MARK), [2])
        # A broker that may not read INFO does not look.
        self.assertEqual(self.acquire("f3", "t", inc=inc, rid="")[0], 1)
        # Run elsewhere than rid's Redis: as if ASK sent it to the master
        # importing the slot, whose marker came from rid's.
        self.r("HSET", MARK, "runid", "run-src")
        self.assertEqual(self.acquire("f4", "t", inc=inc,
                                      rid="run-src")[0], 1)
        kept = self.run_script("incarnation", "", "run-src", 300, 0, 0)
        self.assertEqual((kept[0], kept[2]), (inc, 0))
        self.assertEqual(self.r("HGET", MARK, "replid"), before)
        self.r("HSET", MARK, "runid", rid)
        again = self.run_script("incarnation", "", rid, 300, 0, 0)
        self.assertEqual(again[2], 1)
        self.assertNotEqual(again[0], inc)
        self.assertEqual(self.r("HGET", MARK, "replid"), self.replid())
        self.assertEqual(self.r("EVAL", text, 0, rid, MARK), [1])
        # An older broker's marker, without replid, cannot tell a
        # failback: another process's, once (on rid's Redis; elsewhere,
        # as under ASK, its runid is what counts).
        self.r("HDEL", MARK, "replid")
        self.r("HSET", MARK, "grace", 0)
        self.assertEqual(self.acquire("f5", "t", inc=again[0], rid=rid),
                         [-1, 0])
        self.assertEqual(self.r("EVAL", text, 0, rid, MARK), [2])
        self.r("HSET", MARK, "runid", "run-src")
        self.assertEqual(self.acquire("f5", "t", inc=again[0],
                                      rid="run-src")[0], 1)
        kept = self.run_script("incarnation", "", "run-src", 300, 0, 0)
        self.assertEqual((kept[0], kept[2]), (again[0], 0))
        self.assertIsNone(self.r("HGET", MARK, "replid"))
        self.r("HSET", MARK, "runid", rid)
        made = self.run_script("incarnation", "", rid, 300, 0, 0)
        self.assertEqual(made[2], 1)
        self.assertEqual(self.r("HGET", MARK, "replid"), self.replid())

    def test_check_puts_a_forgotten_hold_back_in_the_grace_period(self):
        entry = "t " + info()
        put = lambda fence, inc=INC: self.run_script(
            "check", "p", "t", fence, 30000, entry, inc, "")
        self.r("HSET", MARK, "grace", "0")
        self.assertEqual(put(f(3)), [0, 0])      # no grace period: lost
        self.assertEqual(self.r("EXISTS", "lockbroker:{p}"), 0)
        t = self.r("TIME")
        self.r("HSET", MARK, "grace", int(t[0]) * 1000 + 60000)
        self.assertEqual(put(f(3)), [1, 30000])  # put back, for 30 s
        self.assertEqual(self.r("GET", "lockbroker:{p}"), entry)
        self.assertEqual(int(self.r("GET", "lockbroker:{p}:fence")), f(3))
        self.assertGreater(self.r("PTTL", "lockbroker:{p}"), 29000)
        held = put(f(3))                         # held: nothing to do
        self.assertEqual(held[0], 1)
        self.assertTrue(29000 < held[1] <= 30000, held)
        self.assertEqual(put(f(2)), [0, 0])      # not its fence
        self.r("DEL", "lockbroker:{p}")
        self.r("SET", "lockbroker:{p}:fence", f(5))
        self.assertEqual(put(f(3)), [0, 0])      # a newer grant came
        self.assertEqual(self.r("EXISTS", "lockbroker:{p}"), 0)

    def test_leftover_of_older_data(self):
        """In an incarnation made after a grant (its fence below the
        incarnation's id), the grant is a leftover unless check.lua found
        it held: its token gets a new fence, VALIDATE says it is free."""
        t = self.r("TIME")
        now_us = int(t[0]) * 10 ** 6 + int(t[1])
        old = now_us - 10 ** 6
        self.r("HSET", MARK, "id", str(now_us))
        inc = str(now_us)
        for name, keep in (("l1", False), ("l2", True)):
            self.r("SET", "lockbroker:{%s}" % name, "tok " + info(),
                   "PX", 60000)
            self.r("SET", "lockbroker:{%s}:fence" % name, old)
            if keep:   # a broker found it held (or put it back)
                self.assertEqual(self.run_script(
                    "check", name, "tok", old, 60000, "tok " + info(), inc,
                    "")[0], 1)
            st = self.run_script("status", name, old, "tok", inc)
            self.assertEqual(st[0], 1 if keep else 0)
            g = self.acquire(name, "tok", inc=inc)
            self.assertEqual(g[0], 1)
            if keep:
                self.assertEqual(g[1], old)       # the same grant
            else:
                self.assertGreaterEqual(g[1], now_us)

    def batch_steps(self, p):
        """Calls on names p + "x" and p + "y": grants, refusals, a ticket
        handed the name by a release, a release that is not ours, and a
        release then a grant of one name."""
        x, y = p + "x", p + "y"
        return [
            lambda: self.acquire(x, "h"),
            lambda: self.acquire(x, "o"),  # WAIT 0
            lambda: self.acquire(x, "w", mark=700, ticket=ME + "#1",
                                 least=1),
            lambda: self.release(x, "h", f(1)),
            lambda: self.acquire(y, "h", ttl=60000),
            lambda: self.release(y, "nobody"),
            lambda: self.release(y, "h", f(1)),
            lambda: self.acquire(y, "h2"),
            lambda: self.acquire(y, "h3", fill=1, mark=700),
        ]

    def test_batch_answers_each_call_as_alone(self):
        """batch.lua runs the calls of one turn in order, each with its
        own script's text: the same replies, and the same keys after, as
        the same calls made one by one."""
        alone = [step() for step in self.batch_steps("a")]
        self.assertEqual(alone[0], [1, f(1)])
        self.assertEqual(alone[3], [1, f(2), 1, "w"])
        self.assertEqual(alone[7], [1, f(2)])
        # (a refusal's "look again in" in whole seconds: time passed)
        sec = lambda rs: [[0, round(r[1] / 1000)] + r[2:] if isinstance(
            r, list) and len(r) == 5 else r for r in rs]
        self.assertEqual(sec(self.batched(*self.batch_steps("b"))),
                         sec(alone))
        for suffix in ("", ":fence", ":queue", ":tickets", ":waiting",
                       ":fill"):
            for n in ("x", "y"):
                a, b = ("lockbroker:{%s%s}%s" % (p, n, suffix)
                        for p in "ab")
                self.assertEqual(self.r("TYPE", a), self.r("TYPE", b), b)
                if self.r("TYPE", a) == "string":
                    self.assertEqual(self.r("GET", a), self.r("GET", b), b)
                self.assertEqual(self.r("PTTL", a) > 0,
                                 self.r("PTTL", b) > 0, b)

    def test_batch_gate_and_errors(self):
        """One gate for a marker: with another incarnation every grant in
        it waits. A call whose command fails (a key of another type) has
        the error as its reply; the calls after it still run."""
        self.r("HSET", MARK, "id", "another")
        self.assertEqual(self.batched(lambda: self.acquire("g1", "t"),
                                      lambda: self.acquire("g2", "t")),
                         [[-1, 0], [-1, 0]])
        self.r("HSET", MARK, "id", INC)
        # The gate's answer is per incarnation asked (the broker learnt
        # a new one between two calls of a turn).
        self.assertEqual(self.batched(
            lambda: self.acquire("g3", "t", inc="older"),
            lambda: self.acquire("g4", "t")), [[-1, 0], [1, f(1)]])
        self.r("HSET", "lockbroker:{e1}:queue", "a", "b")
        out = self.batched(lambda: self.acquire("e0", "t"),
                           lambda: self.acquire("e1", "t"),
                           lambda: self.acquire("e2", "t"))
        self.assertEqual(out[0], [1, f(1)])
        self.assertIsInstance(out[1], RuntimeError)
        self.assertIn("WRONGTYPE", str(out[1]))
        self.assertEqual(out[2], [1, f(1)])
        self.assertIsNone(self.r("GET", "lockbroker:{e1}"))

    def test_a_master_without_its_replicas(self):
        """A master that min-replicas-to-write stops refuses every script
        that may write before it runs (NOREPLICAS), allow-oom or not: the
        beat above all, as such a master vouches for nothing; status and
        who (no-writes) are answered."""
        self.assertEqual(self.acquire("n", "t")[0], 1)
        self.r("CONFIG", "SET", "min-replicas-to-write", 1)
        self.addCleanup(self.r, "CONFIG", "SET", "min-replicas-to-write", 0)
        for out in (self.run_script("incarnation", "", "", 1000, 0, 0, ""),
                    self.release("n", "t"), self.acquire("m", "t"),
                    self.run_script("extend", "n", "t", 20000, f(1), ME, CH,
                                    "n", INC, "")):
            self.assertIsInstance(out, RuntimeError)
            self.assertTrue(str(out).startswith("NOREPLICAS "), out)
        self.assertEqual(self.run_script("status", "n", f(1), "t", INC)[0],
                         1)
        self.assertEqual(len(self.run_script("who", "n")), 2)
        self.assertIsNotNone(self.r("GET", "lockbroker:{n}"))

    def test_batch_calls_with_their_own_markers(self):
        """Each call of a batch carries all its own keys, its marker too
        (on a cluster each slot has its own): a call is gated by its own
        marker, once per marker for the calls that ask it the same, and
        its reply is the one it has alone."""
        other = "lockbroker:{s2}incarnation"
        self.r("HSET", other, "id", "inc2", "grace", "0")
        out = self.batched(
            lambda: self.acquire("m1", "t"),
            lambda: self.acquire("m2", "t", marker=other),
            lambda: self.acquire("m3", "t", marker=other, inc="inc2"),
            lambda: self.acquire("m4", "t"),
            lambda: self.acquire("m5", "t", inc="inc2"))
        self.assertEqual(out, [[1, f(1)], [-1, 0], [1, f(1)], [1, f(1)],
                               [-1, 0]])
        # A marker in its grace period holds back its own calls alone.
        self.r("HSET", other, "grace", 2 ** 52)
        out = self.batched(
            lambda: self.acquire("g1", "t", marker=other, inc="inc2"),
            lambda: self.acquire("g2", "t"),
            lambda: self.acquire("g3", "t", marker=other, inc="inc2"))
        self.assertEqual([o[0] for o in out], [-2, 1, -2])
        self.assertEqual(self.r("EXISTS", "lockbroker:{g1}",
                                "lockbroker:{g3}"), 0)
        self.assertEqual(self.batched(
            lambda: self.release("m3", "t"),
            lambda: self.release("m1", "t"),
            lambda: self.release("m2", "t", marker=other)), [1, 1, 0])

    def test_errors_name_the_lua_file_and_line(self):
        """Lines of a script are lines of its file (an include is joined
        onto its one line), and the broker's log names the file."""
        path = os.path.join(LUA, "share.lua")
        with open(path) as f:
            line = 1 + [l.strip() for l in f].index("-- include holders.lua")
        self.r("SET", "lockbroker:{w}", "=shared")
        self.r("SET", "lockbroker:{w}:holders", "not a set")
        err = self.run_script("share", "w", "t", 1000, 0, info("SHARED"),
                              "SHARED", 0, CH, "w", INC, "")
        self.assertIsInstance(err, RuntimeError)
        self.assertIn("user_script:%d" % line, str(err))
        c = self.client()
        # (a wait: the broker learns the tests' incarnation id first)
        self.assertRegex(c.cmd("ACQUIRE w SHARED WAIT 5000"),
                         r"^ERR INTERNAL ")
        wait_for(lambda: "src/lua/share.lua:%d" % line in
                 self.broker.logtext())


if __name__ == "__main__":
    main()

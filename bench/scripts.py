#!/usr/bin/env python3
"""What the broker's scripts cost Redis per uncontended lock, without the
broker: acquire.lua and release.lua replayed at a private redis-server,
64 names at a time pipelined, each call alone (as a broker sends a turn
with one call) and as batch.lua carrying 4, 8, 16 and 64 calls (as it
sends a busy turn). The sizes take turns, several rounds each, so that
this machine's drift falls on all of them alike.

    bench/scripts.py [--rounds R] [--cycles N] [--tree DIR]

Prints, per acquire+release cycle: Redis's CPU (used_cpu_sys +
used_cpu_user of INFO cpu over the replay, its reads and writes of one
pipelined connection included), the time Redis counted inside EVALSHA
(INFO commandstats), and how much of that the commands the scripts
called took themselves (the rest is Lua and redis.call's own work). Uses
the same script text the broker embeds (src/lua/embed.py). --tree DIR
also replays the scripts of another checkout (DIR/src/lua), in the same
rounds on the same Redis, each round's figures printed: one whose
embed.py passes a script only some of its keys (passed()) is sent those,
in its own batch layout."""

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, HERE)
from compare import commandstats  # noqa: E402 (bench/compare.py)
from lbtest import Redis, Resp  # noqa: E402

MARK = "lockbroker:incarnation"
NAMES = 10000
PIPE = 64


def embed_of(tree):
    """tree's src/lua/embed.py, as a module of its own."""
    path = os.path.join(tree, "src", "lua", "embed.py")
    spec = importlib.util.spec_from_file_location("embed_%d" % id(tree),
                                                  path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cpu_s(r):
    """Redis's used_cpu_sys + used_cpu_user (s), from INFO cpu."""
    out = 0.0
    for line in r("INFO", "cpu").splitlines():
        if line.startswith(("used_cpu_sys:", "used_cpu_user:")):
            out += float(line.split(":")[1])
    return out


def acquire_args(name, inc):
    """acquire.lua's ARGV for a try-once exclusive ACQUIRE, as lockdb.c
    sends it."""
    return ["tok-" + name, 10000, 0, "EXCLUSIVE bench:1:aaaaaaaa 7 1", 0, 0,
            0, "lockbroker:released", name, "", 0, 30000, inc, ""]


def release_args(name, fence, inc):
    return ["tok-" + name, "lockbroker:released", name, 1, 60000, fence,
            "bench:1:aaaaaaaa", 2000, "lockbroker:to:", 30000, inc, ""]


class Replay:
    def __init__(self, r, inc, tree=ROOT):
        self.r, self.inc = r, inc
        self.embed = embed_of(tree)
        # (a checkout whose scripts are passed only some keys)
        self.some = hasattr(self.embed, "passed")
        self.sha, self.keys = {}, {}
        load = lambda script, **kw: r("SCRIPT", "LOAD", self.embed.expand(
            self.lua(tree, script), **kw))
        for s in ("acquire", "release"):
            self.sha[s] = load(s)
            if self.some:
                self.sha["batch " + s] = load("batch")
                self.keys[s] = self.embed.passed(self.lua(tree, s))
            else:  # batch.lua with this script's flags, as the broker
                self.sha["batch " + s] = load("batch", carry=s + ".lua")
                self.keys[s] = self.embed.keys(self.lua(tree, s))

    @staticmethod
    def lua(tree, script):
        return os.path.join(tree, "src", "lua", script + ".lua")

    def keys_of(self, script, name):
        """The keys script is passed, for name, as lockdb_script.c makes
        them."""
        return [MARK if k == "/incarnation" else "lockbroker:{%s}%s" % (
            name, k) for k in self.keys[script]]

    def pipeline(self, cmds):
        """Send cmds (lists of arguments) in one write; their replies."""
        out = b""
        for args in cmds:
            out += b"*%d\r\n" % len(args)
            for a in args:
                a = str(a).encode()
                out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.r.sock.sendall(out)
        return [self.r._read() for _ in cmds]

    def calls(self, size, calls):
        """calls: (script, name, args), all of one script; EVALSHA each
        alone (size 1) or batch.lua with size of them at a time, each
        call with all its keys."""
        if size == 1:
            return self.pipeline([["EVALSHA", self.sha[s],
                                   len(self.keys[s])] + self.keys_of(s, n) +
                                  a for s, n, a in calls])
        cmds = []
        for i in range(0, len(calls), size):
            part = calls[i:i + size]
            args = ["EVALSHA", self.sha["batch " + part[0][0]]]
            if self.some:  # each call's lock key, then the others once
                keys = [self.keys_of(s, n)[0] for s, n, _ in part]
                keys += self.keys_of(part[0][0], part[0][1])[1:]
            else:
                keys = [k for s, n, _ in part for k in self.keys_of(s, n)]
            args += [len(keys)] + keys + [len(part)]
            for s, _, a in part:
                args += [1 if s == "acquire" else 2]
                args += [len(a)] if self.some else [len(self.keys[s]),
                                                    len(a)]
                args += a
            cmds.append(args)
        return [r for rs in self.pipeline(cmds) for r in rs]

    def cycles(self, size, first):
        """PIPE acquire+release cycles on names first.. (mod NAMES)."""
        names = ["n%d" % ((first + i) % NAMES) for i in range(PIPE)]
        got = self.calls(size, [("acquire", n, acquire_args(n, self.inc))
                                for n in names])
        if any(not isinstance(g, list) or g[0] != 1 for g in got):
            sys.exit("acquire not granted: %r" % got[:3])
        rel = self.calls(size, [("release", n, release_args(n, g[1],
                                                            self.inc))
                                for n, g in zip(names, got)])
        if any(g != [1] for g in rel):
            sys.exit("release not done: %r" % rel[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=12800,
                    help="cycles per size per round")
    ap.add_argument("--tree", help="another checkout's scripts too")
    opts = ap.parse_args()
    sizes = [1, 4, 8, 16, 64]
    tmp = tempfile.mkdtemp(prefix="lbscripts-")
    redis = Redis(tmp)
    try:
        r = Resp(redis.port)
        inc = r("HGET", MARK, "id")
        trees = [("this", Replay(r, inc))]
        if opts.tree:
            trees.insert(0, (opts.tree, Replay(r, inc, opts.tree)))
        total = {(t, s): [0, 0.0, 0, 0] for t, _ in trees for s in sizes}
        first = 0
        for rnd in range(opts.rounds):
            for size in sizes:
                for t, replay in trees:
                    r("CONFIG", "RESETSTAT")
                    c0 = cpu_s(r)
                    for _ in range(opts.cycles // PIPE):
                        replay.cycles(size, first)
                        first += PIPE
                    c1 = cpu_s(r)
                    st = commandstats(r, "usec")
                    n = opts.cycles // PIPE * PIPE
                    row = [n, (c1 - c0) * 1e6, st.get("evalsha", 0),
                           sum(v for k, v in st.items()
                               if k not in ("evalsha", "config", "info"))]
                    if len(trees) > 1:
                        print("round %d, %s, %d per EVALSHA: %.2f µs CPU, "
                              "%.2f in EVALSHA / cycle" % (
                                  rnd + 1, t, size, row[1] / n, row[2] / n),
                              flush=True)
                    total[(t, size)] = [x + y for x, y in zip(
                        total[(t, size)], row)]
        print("| scripts | calls per EVALSHA | Redis CPU µs / cycle "
              "| inside EVALSHA | of which its commands |")
        print("|---|---|---|---|---|")
        for size in sizes:
            for t, _ in trees:
                n, cpu, ev, inner = total[(t, size)]
                print("| %s | %s | %.2f | %.2f | %.2f |" % (
                    t, "1 (alone)" if size == 1 else size, cpu / n,
                    ev / n, inner / n))
        r.close()
    finally:
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What the broker's scripts cost Redis per uncontended lock, without the
broker: acquire.lua and release.lua replayed at a private redis-server,
64 names at a time pipelined, each call alone (as a broker sends a turn
with one call) and as batch.lua carrying 4, 8, 16 and 64 calls (as it
sends a busy turn). The sizes take turns, several rounds each, so that
this machine's drift falls on all of them alike.

    bench/scripts.py [--rounds R] [--cycles N]

Prints, per acquire+release cycle: Redis's CPU (utime+stime from /proc
over the replay, its reads and writes of one pipelined connection
included), the time Redis counted inside EVALSHA (INFO commandstats), and
how much of that the commands the scripts called took themselves (the
rest is Lua and redis.call's own work). Uses the same script text the
broker embeds (src/lua/embed.py)."""

import argparse
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "src", "lua"))
sys.path.insert(0, HERE)
import embed  # noqa: E402
from compare import commandstats, cpu_us  # noqa: E402 (bench/compare.py)
from lbtest import Redis, Resp  # noqa: E402

MARK = "lockbroker:incarnation"
NAMES = 10000
PIPE = 64


def acquire_args(name, inc):
    """acquire.lua's ARGV for a try-once exclusive ACQUIRE, as lockdb.c
    sends it."""
    return ["tok-" + name, 10000, 0, "EXCLUSIVE bench:1:aaaaaaaa 7 1", 0, 0,
            0, "lockbroker:released", name, "", 0, 30000, inc, ""]


def release_args(name, fence, inc):
    return ["tok-" + name, "lockbroker:released", name, 1, 60000, fence,
            "bench:1:aaaaaaaa", 2000, "lockbroker:to:", 30000, inc, ""]


class Replay:
    def __init__(self, r, inc):
        self.r, self.inc = r, inc
        self.sha = {}
        for s in ("acquire", "release", "batch"):
            text = embed.expand(os.path.join(ROOT, "src", "lua", s + ".lua"))
            self.sha[s] = r("SCRIPT", "LOAD", text)

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
        """calls: (script, name, args); EVALSHA each alone (size 1) or
        batch.lua with size of them at a time."""
        if size == 1:
            return self.pipeline([["EVALSHA", self.sha[s], 2,
                                   "lockbroker:{%s}" % n, MARK] + a
                                  for s, n, a in calls])
        cmds = []
        for i in range(0, len(calls), size):
            part = calls[i:i + size]
            args = ["EVALSHA", self.sha["batch"], len(part) + 1]
            args += ["lockbroker:{%s}" % n for _, n, _ in part]
            args += [MARK, len(part)]
            for s, _, a in part:
                args += [1 if s == "acquire" else 2, len(a)] + a
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
    opts = ap.parse_args()
    sizes = [1, 4, 8, 16, 64]
    tmp = tempfile.mkdtemp(prefix="lbscripts-")
    redis = Redis(tmp)
    try:
        r = Resp(redis.port)
        inc = r("HGET", MARK, "id")
        replay = Replay(r, inc)
        total = {s: [0, 0.0, 0, 0] for s in sizes}
        first = 0
        for _ in range(opts.rounds):
            for size in sizes:
                r("CONFIG", "RESETSTAT")
                c0 = cpu_us(redis.proc.pid)
                for _ in range(opts.cycles // PIPE):
                    replay.cycles(size, first)
                    first += PIPE
                c1 = cpu_us(redis.proc.pid)
                st = commandstats(r, "usec")
                t = total[size]
                t[0] += opts.cycles // PIPE * PIPE
                t[1] += c1 - c0
                t[2] += st.get("evalsha", 0)
                t[3] += sum(v for k, v in st.items()
                            if k not in ("evalsha", "config", "info"))
        print("| calls per EVALSHA | Redis CPU µs / cycle | inside EVALSHA "
              "| of which its commands |")
        print("|---|---|---|---|")
        for size in sizes:
            n, cpu, ev, inner = total[size]
            print("| %s | %.2f | %.2f | %.2f |" % (
                "1 (alone)" if size == 1 else size, cpu / n, ev / n,
                inner / n))
        r.close()
    finally:
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What confirming idle holds costs Redis: every hold is confirmed in Redis
at least once every redis.trust_ms (check.lua, batched), so a broker with
many holds and nothing else to do still costs Redis work. This measures
it: one broker on a private redis-server, first with no hold, then with N
fixed-lease holds that nobody touches, each phase D seconds, and prints
Redis's CPU (utime+stime from /proc) per second in each, the difference
per 10,000 holds, and the script calls and checks per second.

    bench/confirm.py [-n HOLDS] [-d SECONDS] [--trust-ms MS]

Needs a build: meson compile -C build (lockbrokerd)."""

import argparse
import os
import shutil
import socket
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, HERE)
from compare import commandstats, cpu_us  # noqa: E402 (bench/compare.py)
import lbtest  # noqa: E402

CLIENTS = 10


def hold_all(port, n):
    """n fixed-lease holds (an hour each) over CLIENTS connections, each
    sending its ACQUIREs 32 at a time (limits.max_pending's default);
    returns the open sockets."""
    socks = []
    for c in range(CLIENTS):
        s = socket.create_connection(("127.0.0.1", port))
        f = s.makefile("rb")
        names = list(range(c, n, CLIENTS))
        for i in range(0, len(names), 32):
            batch = names[i:i + 32]
            s.sendall(b"".join(b"ACQUIRE idle%d TTL 3600000 WAIT 0\n" % j
                               for j in batch))
            for _ in batch:
                line = f.readline()
                if not line.startswith(b"OK "):
                    sys.exit("confirm: %r" % line)
        socks.append(s)
    return socks


def phase(b, resp, seconds):
    """Redis's CPU in ms per second, and its calls per second, over
    seconds of the broker idling; and the broker's confirms_total."""
    c0, s0 = cpu_us(b.redis.proc.pid), commandstats(resp)
    k0 = int(b.broker.info()["confirms_total"])
    time.sleep(seconds)
    c1, s1 = cpu_us(b.redis.proc.pid), commandstats(resp)
    k1 = int(b.broker.info()["confirms_total"])
    calls = {k: (s1.get(k, 0) - s0.get(k, 0)) / seconds for k in s1}
    calls.pop("info", None)  # ours
    return ((c1 - c0) / 1000 / seconds, calls, (k1 - k0) / seconds)


class Setup:
    def __init__(self, tmp, trust_ms):
        self.redis = lbtest.Redis(tmp)
        self.broker = lbtest.Broker(
            tmp, self.redis.port,
            {"log": {"level": "warning"},
             "redis": {"trust_ms": trust_ms},
             "limits": {"max_locks_per_client": 1000000}})

    def close(self):
        self.broker.stop()
        self.redis.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=10000)
    ap.add_argument("-d", type=float, default=20)
    ap.add_argument("--trust-ms", type=int, default=5000)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="lbconfirm-")
    try:
        b = Setup(tmp, a.trust_ms)
        resp = lbtest.Resp(b.redis.port)
        idle = phase(b, resp, a.d)
        socks = hold_all(b.broker.port, a.n)
        time.sleep(a.trust_ms / 1000)  # every hold past its first check
        held = phase(b, resp, a.d)
        for s in socks:
            s.close()
        resp.close()
        b.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    per10k = (held[0] - idle[0]) * 10000 / a.n
    print("redis.trust_ms %d, %d idle holds, %g s per phase" %
          (a.trust_ms, a.n, a.d))
    print("Redis CPU: %.2f ms/s with no hold, %.2f ms/s with them: "
          "%.2f ms/s per 10,000 holds (%.2f %% of a core)" %
          (idle[0], held[0], per10k, per10k / 10))
    print("script calls/s: %.1f with no hold, %.1f with them; checks/s %.0f"
          % (idle[1].get("evalsha", 0) + idle[1].get("eval", 0),
             held[1].get("evalsha", 0) + held[1].get("eval", 0), held[2]))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Handoff latency: the time from a holder's RELEASE to the waiting client's
OK, over N handoffs, on one broker and across two brokers sharing a Redis.
Starts its own redis-server and lockbrokerd(s) on free loopback ports.

    bench/handoff.py [-n 1000] [--lockbrokerd build/src/lockbrokerd]

Measured from a Python client, so each figure includes some tens of
microseconds of client overhead on both ends."""

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))


def run(n, brokers):
    """n handoffs between two clients; returns latencies in ms."""
    a = brokers[0].client()
    b = brokers[-1].client()
    assert a.cmd("ACQUIRE bench-handoff").startswith("OK ")
    holder, waiter = a, b
    wb = brokers[-1]
    out = []
    for _ in range(n):
        waiter.send("ACQUIRE bench-handoff")
        # Wait until the waiter's first try has come back refused.
        while wb.info()["waiters"] != "1":
            pass
        time.sleep(0.003)
        t0 = time.perf_counter()
        holder.send("RELEASE bench-handoff")
        reply = waiter.line()
        t1 = time.perf_counter()
        assert reply.startswith("OK "), reply
        assert holder.line() == "OK"
        out.append((t1 - t0) * 1000)
        holder, waiter = waiter, holder
        wb = brokers[0] if wb is brokers[-1] else brokers[-1]
    a.close()
    b.close()
    return out


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def parser(doc):
    """The options every bench script here takes."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--lockbrokerd", default=os.path.join(
        HERE, "..", "build", "src", "lockbrokerd"))
    return ap


@contextlib.contextmanager
def two_brokers(lockbrokerd, conf):
    """A private redis-server and two lockbrokerd on it, for the block."""
    os.environ["LOCKBROKERD"] = os.path.abspath(lockbrokerd)
    import lbtest
    lbtest.LOCKBROKERD = os.environ["LOCKBROKERD"]
    tmp = tempfile.mkdtemp(prefix="lbbench-")
    redis = lbtest.Redis(tmp)
    b1 = lbtest.Broker(tmp, redis.port, conf, name="b1")
    b2 = lbtest.Broker(tmp, redis.port, conf, name="b2")
    try:
        yield b1, b2
    finally:
        b1.stop()
        b2.stop()
        redis.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = parser(__doc__)
    ap.add_argument("-n", type=int, default=1000)
    args = ap.parse_args()
    with two_brokers(args.lockbrokerd, {"log": {"level": "warning"}}) as (
            b1, b2):
        print("%-12s %8s %8s %8s %8s" % ("handoff", "n", "p50 ms",
                                        "p99 ms", "max ms"))
        for label, brokers in (("one broker", [b1]),
                               ("two brokers", [b1, b2])):
            lat = run(args.n, brokers)
            print("%-12s %8d %8.3f %8.3f %8.3f" % (
                label, len(lat), statistics.median(lat), pct(lat, 99),
                max(lat)))

if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Figures for the lock modes, on two brokers sharing one Redis (each
started here on free loopback ports):

  revoke   REVOKE sent on broker 2 -> EVENT LOST at a holder on broker 1
  writer   how long a writer waits while readers (TTL 500, each holding
           300 ms, 3 per broker) keep the name shared without a break
  fill     100 FILL callers (50 per broker): RELEASE of the leader -> the
           last DONE
  limit    32 clients (16 per broker) looping ACQUIRE LIMIT 3 / hold 1 ms /
           RELEASE: grants per second, and the most holders seen at once

    bench/modes.py [-n 200] [--lockbrokerd build/src/lockbrokerd]

Python clients: each figure includes their overhead (tens of us a line)."""

import select
import statistics
import threading
import time

from handoff import parser, pct, two_brokers  # bench/handoff.py

ADMIN = "bench-admin"


def revoke(b1, b2, n):
    holder, admin = b1.client(), b2.client()
    assert admin.cmd("AUTH " + ADMIN) == "OK"
    out = []
    for i in range(n):
        assert holder.cmd("ACQUIRE rv%d TTL 60000" % i).startswith("OK ")
        t0 = time.perf_counter()
        admin.send("REVOKE rv%d" % i)
        line = holder.line()
        out.append((time.perf_counter() - t0) * 1000)
        assert line.startswith("EVENT LOST rv%d " % i), line
        assert admin.line() == "OK 1"
    return out


def writer(b1, b2, rounds):
    out = []
    for r in range(rounds):
        name, stop = "rw%d" % r, threading.Event()

        def reader(broker, delay):
            c = broker.client()
            time.sleep(delay)
            while not stop.is_set():
                if c.cmd("ACQUIRE %s SHARED TTL 500 WAIT 5000" %
                         name).startswith("OK "):
                    time.sleep(0.3)
                    c.cmd("RELEASE " + name)
            c.close()

        ts = [threading.Thread(target=reader, args=(b, i * 0.055))
              for i, b in enumerate([b1, b2] * 3)]
        for t in ts:
            t.start()
        time.sleep(1.0)
        w = b1.client()
        t0 = time.perf_counter()
        reply = w.cmd("ACQUIRE %s WAIT 10000" % name)
        out.append((time.perf_counter() - t0) * 1000)
        assert reply.startswith("OK "), reply
        w.cmd("RELEASE " + name)
        stop.set()
        for t in ts:
            t.join()
        w.close()
    return out


def fill(b1, b2, rounds):
    out = []
    for r in range(rounds):
        name = "fill%d" % r
        leader = b1.client()
        assert leader.cmd("FILL " + name).startswith("OK ")
        cs = [(b1 if i % 2 else b2).client() for i in range(99)]
        for c in cs:
            c.send("FILL " + name)
        while int(b1.info()["waiters"]) + int(b2.info()["waiters"]) < 99:
            time.sleep(0.005)
        time.sleep(0.05)
        t0 = time.perf_counter()
        leader.send("RELEASE " + name)
        left = {c.sock: c for c in cs}
        while left:
            for s in select.select(list(left), [], [], 5)[0]:
                line = left[s].line()
                assert line == "DONE", line
                del left[s]
        out.append((time.perf_counter() - t0) * 1000)
        for c in cs + [leader]:
            c.close()
    return out


def limit(b1, b2, secs):
    lock, state = threading.Lock(), {"n": 0, "max": 0, "grants": 0}
    end = time.monotonic() + secs

    def client(broker):
        c = broker.client()
        while time.monotonic() < end:
            if not c.cmd("ACQUIRE sem LIMIT 3 WAIT 5000").startswith("OK "):
                continue
            with lock:
                state["n"] += 1
                state["max"] = max(state["max"], state["n"])
                state["grants"] += 1
            time.sleep(0.001)
            with lock:
                state["n"] -= 1
            c.cmd("RELEASE sem")
        c.close()

    ts = [threading.Thread(target=client, args=(b,))
          for b in [b1, b2] * 16]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return state["grants"] / (time.monotonic() - t0), state["max"]


def main():
    ap = parser(__doc__)
    ap.add_argument("-n", type=int, default=200)
    args = ap.parse_args()
    conf = {"log": {"level": "warning"}, "auth": {"admin_secret": ADMIN}}
    with two_brokers(args.lockbrokerd, conf) as (b1, b2):
        lat = revoke(b1, b2, args.n)
        print("revoke: n %d, REVOKE -> EVENT LOST on the other broker: "
              "p50 %.3f ms, p99 %.3f ms, max %.3f ms" % (
                  len(lat), statistics.median(lat), pct(lat, 99), max(lat)))
        lat = writer(b1, b2, 5)
        print("writer: %d rounds, wait behind a reader stream (lease "
              "500 ms): median %.0f ms, max %.0f ms" % (
                  len(lat), statistics.median(lat), max(lat)))
        lat = fill(b1, b2, 5)
        print("fill: %d rounds of 100 callers, leader's RELEASE -> last of "
              "99 DONE: median %.1f ms, max %.1f ms" % (
                  len(lat), statistics.median(lat), max(lat)))
        rate, most = limit(b1, b2, 3.0)
        print("limit: 32 clients, LIMIT 3, hold 1 ms: %.0f grants/s, at "
              "most %d holders at once" % (rate, most))

if __name__ == "__main__":
    main()

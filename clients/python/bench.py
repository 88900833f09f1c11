#!/usr/bin/env python3
"""Uncontended acquire/release cycles per second, and the CPU seconds this
client process spends per cycle, against one broker: N workers, each
locking and releasing names of its own for D seconds. Prints one JSON line.

    python3 bench.py [-n WORKERS] [-d SECONDS] [--sync] [--addr A --secret S]

Without --addr (and $LOCKBROKER_ADDR) it starts clients/testenv.py for its
broker. asyncio by default (N tasks); --sync uses N threads and Client."""

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import lockbroker  # noqa: E402


async def run_async(addr, secret, workers, seconds):
    counts = [0] * workers
    async with lockbroker.AsyncClient(addr, secret) as c:
        end = time.monotonic() + seconds

        async def worker(i):
            name = "bench-%d-%d" % (os.getpid(), i)
            while time.monotonic() < end:
                lease = await c.lock(name, wait=5)
                await lease.release()
                counts[i] += 1
        await asyncio.gather(*(worker(i) for i in range(workers)))
    return sum(counts)


def run_sync(addr, secret, workers, seconds):
    counts = [0] * workers
    with lockbroker.Client(addr, secret) as c:
        end = time.monotonic() + seconds

        def worker(i):
            name = "bench-%d-%d" % (os.getpid(), i)
            while time.monotonic() < end:
                c.acquire(name, wait=5).release()
                counts[i] += 1
        threads = [threading.Thread(target=worker, args=(i,))
                   for i in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return sum(counts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", "--workers", type=int, default=8)
    ap.add_argument("-d", "--duration", type=float, default=5.0)
    ap.add_argument("--sync", action="store_true")
    ap.add_argument("--addr", default=os.environ.get("LOCKBROKER_ADDR"))
    ap.add_argument("--secret", default=os.environ.get("LOCKBROKER_SECRET"))
    a = ap.parse_args()
    env = None
    if a.addr is None:
        env = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "..", "testenv.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        hello = json.loads(env.stdout.readline())
        a.addr, a.secret = hello["addr"], hello["secret"]
    try:
        cpu, wall = time.process_time(), time.monotonic()
        if a.sync:
            cycles = run_sync(a.addr, a.secret, a.workers, a.duration)
        else:
            cycles = asyncio.run(run_async(a.addr, a.secret, a.workers,
                                           a.duration))
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    finally:
        if env is not None:
            env.stdin.close()
            env.wait(30)
    print(json.dumps({
        "client": "python-" + ("sync" if a.sync else "asyncio"),
        "workers": a.workers, "seconds": round(wall, 3), "cycles": cycles,
        "cycles_per_s": round(cycles / wall, 1),
        "cpu_s_per_cycle": round(cpu / max(cycles, 1), 7)}))


if __name__ == "__main__":
    main()

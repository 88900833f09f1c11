#!/usr/bin/env python3
"""The client libraries (clients/) against lockbench's raw-protocol client,
on the same broker, in one run: uncontended ACQUIRE/RELEASE cycles per
second with W concurrent workers (each on names of its own) for D seconds,
the client process's CPU per cycle, and the broker's.

    python3 bench/clients.py [-w WORKERS] [-d SECONDS] [--only python,go]

One private redis-server and one lockbrokerd (build/src/lockbrokerd, no
AUTH: lockbench sends none); each client runs in turn against them:
lockbench (-s uncontended -c W), Python asyncio (W tasks on one
AsyncClient), Python blocking (W threads on one Client), Node.js (W async
workers on one Client) and Go (W goroutines on one Client, built first so
that the compiler is not counted). Each library's benchmark measures its own
CPU (getrusage / process.cpuUsage) and prints one JSON line; lockbench's
CPU is its rusage as our child. The broker's CPU is read from /proc around
each run. Then (--hold N, default 1,000) the asyncio and Node clients each
hold N session locks at once from one process: their RSS and connections
(the broker's INFO clients). Prints Markdown tables, and the JSON lines."""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, HERE)
from compare import cpu_us  # noqa: E402
import lbtest  # noqa: E402

LOCKBENCH = os.path.join(ROOT, "build", "bench", "lockbench")
CLIENTS = os.path.join(ROOT, "clients")


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_json(cmd, env=None, cwd=None):
    """Run cmd; its last JSON line, and its rusage CPU seconds."""
    c0 = children_cpu_s()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env,
                         cwd=cwd, timeout=300)
    cpu = children_cpu_s() - c0
    if out.returncode != 0:
        sys.exit("clients: %s failed:\n%s" % (" ".join(cmd),
                                               out.stderr[-2000:]))
    return json.loads([l for l in out.stdout.splitlines()
                       if l.startswith("{")][-1]), cpu


# Hold N locks at once from one process: its RSS before and after, then
# wait for a line on stdin (the broker's INFO counts the connections).
HOLD_PY = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[2])
import lockbroker
def rss():
    return int([l for l in open('/proc/self/status')
                if l.startswith('VmRSS:')][0].split()[1])
async def main(n):
    async with lockbroker.AsyncClient() as c:
        r0 = rss()
        leases = await asyncio.gather(*(c.lock('hold-py-%d' % i, wait=30)
                                        for i in range(n)))
        print(json.dumps({'held': len(leases), 'rss_kib_before': r0,
                          'rss_kib_after': rss()}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
asyncio.run(main(int(sys.argv[1])))
"""
HOLD_JS = """
const { Client } = require(process.argv[2]);
const rss = () => Math.round(process.memoryUsage().rss / 1024);
(async () => {
  const c = new Client(); const n = Number(process.argv[1]);
  const r0 = rss();
  const leases = await Promise.all(Array.from({ length: n },
    (_, i) => c.acquire('hold-js-' + i, { wait: 30000 })));
  console.log(JSON.stringify({ held: leases.length, rss_kib_before: r0,
                               rss_kib_after: rss() }));
  process.stdin.once('data', async () => { await c.close(); process.exit(0); });
})();
"""


def hold(name, cmd, env, broker, n):
    """One process holding n locks: its figures and the broker's clients."""
    before = int(broker.info()["clients"])
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, env=env)
    try:
        res = json.loads(p.stdout.readline())
        res["connections"] = int(broker.info()["clients"]) - before - 1
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait(60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    print("| %s | %d | %d | %d | %.1f |" % (
        name, res["held"], res["connections"], res["rss_kib_after"],
        (res["rss_kib_after"] - res["rss_kib_before"]) / max(res["held"], 1)),
        flush=True)
    return dict(res, bench="hold " + name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-w", "--workers", type=int, default=8)
    ap.add_argument("-d", type=float, default=5)
    ap.add_argument("--only", default="lockbench,python,python-sync,node,go")
    ap.add_argument("--hold", type=int, default=1000,
                    help="then the asyncio and Node clients hold this many "
                    "locks at once (0: not)")
    a = ap.parse_args()
    only = a.only.split(",")
    tmp = tempfile.mkdtemp(prefix="lbclients-bench-")
    redis = lbtest.Redis(tmp)
    broker = lbtest.Broker(tmp, redis.port, {"log": {"level": "warning"}})
    addr = "127.0.0.1:%d" % broker.port
    env = dict(os.environ, LOCKBROKER_ADDR=addr)
    env.pop("LOCKBROKER_SECRET", None)
    w, d = str(a.workers), str(a.d)
    runs = []
    try:
        gobench = os.path.join(tmp, "gobench")
        if "go" in only:
            subprocess.run(["go", "build", "-o", gobench, "./bench"],
                           cwd=os.path.join(CLIENTS, "go"), check=True,
                           env=dict(env, GOPROXY="off"))
        plan = [
            ("lockbench", [LOCKBENCH, "--broker", addr, "-s", "uncontended",
                           "-c", w, "-d", d]),
            ("python", [sys.executable, os.path.join(CLIENTS, "python",
                                                     "bench.py"),
                        "-n", w, "-d", d, "--addr", addr]),
            ("python-sync", [sys.executable, os.path.join(
                CLIENTS, "python", "bench.py"), "-n", w, "-d", d, "--addr",
                addr, "--sync"]),
            ("node", ["node", os.path.join(CLIENTS, "node", "bench.js"),
                      "--workers", w, "--seconds", d]),
            ("go", [gobench, "-workers", w, "-duration", d + "s"]),
        ]
        for name, cmd in plan:
            if name not in only:
                continue
            b0 = cpu_us(broker.proc.pid)
            res, cpu = run_json(cmd, env=env)
            b1 = cpu_us(broker.proc.pid)
            if name == "lockbench":
                cycles, per_s = res["ops"], res["ops_per_s"]
                client_cpu = cpu / max(cycles, 1)
            else:
                cycles, per_s = res["cycles"], res["cycles_per_s"]
                client_cpu = res["cpu_s_per_cycle"]
            runs.append(dict(res, bench=name))
            print("| %s | %s | %.0f | %.1f | %.1f |" % (
                name, w, per_s, client_cpu * 1e6,
                (b1 - b0) / max(cycles, 1)), flush=True)
        if a.hold:
            print()
            print("| client | locks held | connections | RSS KiB | KiB "
                  "per lock |")
            print("|---|---|---|---|---|")
            runs.append(hold("python asyncio", [
                sys.executable, "-c", HOLD_PY, str(a.hold),
                os.path.join(CLIENTS, "python")], env, broker, a.hold))
            runs.append(hold("node", [
                "node", "-e", HOLD_JS, str(a.hold),
                os.path.join(CLIENTS, "node")], env, broker, a.hold))
    finally:
        broker.stop()
        redis.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    for r in runs:
        print(json.dumps(r))


if __name__ == "__main__":
    print("| client | workers | cycles/s | client CPU µs/cycle | "
          "broker CPU µs/cycle |")
    print("|---|---|---|---|---|")
    main()

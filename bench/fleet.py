#!/usr/bin/env python3
"""A fleet of brokers on one Redis (a sidecar beside every application
instance): what the brokers cost Redis when they hold nothing, and how many
deliveries each kind of event costs, for this build and, side by side in
the same run, for another (--baseline, an older lockbrokerd).

For each N in --brokers: a private redis-server, N brokers on it, left
alone for two trust periods (so that each settles), then D seconds in
which Redis's CPU (INFO cpu: its own getrusage), its commands per second
(INFO commandstats, less our own INFO), its writes per second
(rdb_changes_since_last_save) and its connections are read.

Events, on --event-brokers brokers: a REVOKE, a RELEASE ... TOKEN through
another broker, a shorter same-token ACQUIRE through another broker and
then its RELEASE there, and the RELEASE of a FILL leader with a waiter on a
third broker; a pattern subscriber of ours sees every message, and each
one's deliveries are the subscribers of its channel (PUBSUB NUMSUB, ours
not counted).

    bench/fleet.py [--brokers 1,10,100] [-d SECONDS] [--trust-ms MS]
                   [--event-brokers N] [--baseline OLD-LOCKBROKERD]
    bench/fleet.py --load 1,8,32 [-d SECONDS] [--baseline ...]

--load instead runs lockbench's uncontended load (200 clients) and its
contended one (32 clients on one name, 1 ms holds) spread over N brokers,
and straight to Redis, and prints per operation Redis's CPU, its commands
(those its scripts ran included) and its script calls.

Needs a build: meson compile -C build (lockbrokerd)."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, HERE)
from compare import commandstats, raise_nofile  # noqa: E402
import lbtest  # noqa: E402

ADMIN = "fleet-admin-secret"


def start(tmp, redis_port, n, trust_ms, binary, first=0):
    """n brokers on redis_port, each in its own directory's config."""
    lbtest.LOCKBROKERD = binary
    out = []
    for i in range(first, first + n):
        out.append(lbtest.Broker(
            tmp, redis_port,
            {"log": {"level": "warning"}, "redis": {"trust_ms": trust_ms},
             "auth": {"admin_secret": ADMIN}},
            name="b%d" % i))
    return out


def idle(binary, n, seconds, trust_ms):
    """Redis's figures with n idle brokers: CPU ms/s, commands/s, writes/s,
    connections."""
    tmp = tempfile.mkdtemp(prefix="lbfleet-")
    redis = lbtest.Redis(tmp, extra=["--maxclients", "20000"])
    brokers = []
    try:
        brokers = start(tmp, redis.port, n, trust_ms, binary)
        time.sleep(2 * trust_ms / 1000.0 + 1)
        resp = lbtest.Resp(redis.port)
        info = lambda: resp("INFO", "everything")
        s0, i0 = commandstats(resp), info()
        time.sleep(seconds)
        s1, i1 = commandstats(resp), info()
        calls = sum(s1.get(k, 0) - s0.get(k, 0) for k in s1
                    if k != "info") / seconds
        field = lambda i, k: float(i.split(k + ":")[1].split("\r")[0])
        cpu = sum(field(i1, k) - field(i0, k)
                  for k in ("used_cpu_sys", "used_cpu_user"))
        writes = (field(i1, "rdb_changes_since_last_save") -
                  field(i0, "rdb_changes_since_last_save")) / seconds
        conns = int(field(i1, "connected_clients")) - 1
        resp.close()
        return cpu * 1000 / seconds, calls, writes, conns
    finally:
        for b in brokers:
            b.stop()
        redis.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def deliveries(resp, channels):
    """How many subscribers got these messages (ours not counted)."""
    total = 0
    for ch in channels:
        subs = resp("PUBSUB", "NUMSUB", ch)[1]
        total += subs
    return total


def events(binary, n, trust_ms):
    """Deliveries per event kind with n brokers."""
    tmp = tempfile.mkdtemp(prefix="lbfleet-")
    redis = lbtest.Redis(tmp)
    brokers = []
    out = {}
    try:
        brokers = start(tmp, redis.port, n, trust_ms, binary)
        resp = lbtest.Resp(redis.port)
        ear = lbtest.Listener(redis.port)
        c = [b.client() for b in brokers[:3]]
        assert c[0].cmd("AUTH " + ADMIN) == "OK"

        def measure(kind, *steps):
            ear.take()
            for step in steps:
                step()
            out[kind] = deliveries(resp, [ch for ch, _ in ear.take()])

        # Each takes c[1]'s hold: it reads EVENT LOST.
        assert c[1].cmd("ACQUIRE rv TTL 30000").startswith("OK ")
        measure("REVOKE", lambda: c[0].cmd("REVOKE rv"), c[1].line)
        assert c[1].cmd("ACQUIRE tk TTL 30000 TOKEN fleet-t").startswith("OK")
        measure("RELEASE TOKEN elsewhere",
                lambda: c[2].cmd("RELEASE tk TOKEN fleet-t"), c[1].line)
        assert c[1].cmd("ACQUIRE sh TTL 30000 TOKEN fleet-s").startswith("OK")
        measure("shortened, then released",
                lambda: c[2].cmd("ACQUIRE sh TTL 10000 TOKEN fleet-s"),
                c[1].line, lambda: c[2].cmd("RELEASE sh"))
        assert c[1].cmd("FILL fl").startswith("OK ")
        c[2].send("FILL fl WAIT 30000")
        time.sleep(0.3)
        measure("FILL released", lambda: c[1].cmd("RELEASE fl"))
        for x in c:
            x.close()
        resp.close()
        return out
    finally:
        for b in brokers:
            b.stop()
        redis.kill()
        shutil.rmtree(tmp, ignore_errors=True)


LOCKBENCH = os.path.join(ROOT, "build", "bench", "lockbench")


def load(binary, n, scenario, conns, seconds, trust_ms):
    """lockbench's scenario with conns connections spread over n brokers
    (n 0: straight to Redis, lockbench's direct client): ops/s and, per
    op (a cycle, or a contended grant), Redis's CPU in µs, its commands
    (those scripts run included) and its script calls."""
    tmp = tempfile.mkdtemp(prefix="lbfleet-")
    redis = lbtest.Redis(tmp, extra=["--maxclients", "20000"])
    brokers = []
    try:
        brokers = start(tmp, redis.port, n, trust_ms, binary)
        resp = lbtest.Resp(redis.port)
        target = (sum((["--broker", "127.0.0.1:%d" % b.port]
                       for b in brokers), []) or
                  ["--redis", "127.0.0.1:%d" % redis.port])
        cmd = [LOCKBENCH] + target + ["-s", scenario, "-c", str(conns),
                                      "-d", str(seconds)]
        cpu = lambda: sum(float(resp("INFO", "cpu").split(k + ":")[1]
                                .split("\r")[0])
                          for k in ("used_cpu_sys", "used_cpu_user"))
        c0, s0 = cpu(), commandstats(resp)
        out = subprocess.run(cmd, capture_output=True, text=True,
                             timeout=seconds + 300)
        c1, s1 = cpu(), commandstats(resp)
        if out.returncode != 0:
            sys.exit("fleet: %s failed:\n%s" % (" ".join(cmd[:6]),
                                                 out.stderr[-2000:]))
        res = json.loads([l for l in out.stdout.splitlines()
                          if l.startswith("{")][-1])
        ops = max(res["ops"], 1)
        d = {k: s1.get(k, 0) - s0.get(k, 0) for k in s1}
        d.pop("info", None)
        scripts = d.get("evalsha", 0) + d.get("eval", 0)
        resp.close()
        return (res["ops_per_s"], (c1 - c0) * 1e6 / ops,
                sum(d.values()) / ops, scripts / ops)
    finally:
        for b in brokers:
            b.stop()
        redis.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def loads(builds, ns, seconds, trust_ms):
    """The issue's two loads over n brokers: 200 clients cycling
    uncontended, and 32 clients on one name (contended, 1 ms holds)."""
    print("| load | build | brokers | ops/s | Redis µs/op | commands/op | "
          "scripts/op |")
    print("|---|---|---|---|---|---|---|")
    for scenario, conns in (("uncontended", 200), ("contended", 32)):
        r = load(None, 0, scenario, conns, seconds, trust_ms)
        print("| %s %d | direct Redis | 0 | %.0f | %.1f | %.2f | %.2f |" % (
            (scenario, conns) + r))
        for n in ns:
            for name, binary in builds:
                r = load(binary, n, scenario, conns, seconds, trust_ms)
                print("| %s %d | %s | %d | %.0f | %.1f | %.2f | %.2f |" % (
                    (scenario, conns, name, n) + r))
                sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", default="1,10,100")
    ap.add_argument("-d", type=float, default=10)
    ap.add_argument("--trust-ms", type=int, default=5000)
    ap.add_argument("--event-brokers", type=int, default=8)
    ap.add_argument("--baseline")
    ap.add_argument("--load", metavar="N1,N2", help="instead: lockbench's "
                    "uncontended (200 clients) and contended (32) loads "
                    "over N brokers, and straight to Redis")
    a = ap.parse_args()
    if a.event_brokers < 3:
        ap.error("--event-brokers: at least 3 (a holder's, another's, "
                 "a waiter's)")
    raise_nofile()
    builds = [("this", os.path.join(ROOT, "build", "src", "lockbrokerd"))]
    if a.baseline:
        builds.append(("baseline", a.baseline))
    if a.load:
        loads(builds, [int(x) for x in a.load.split(",")], a.d, a.trust_ms)
        return
    print("redis.trust_ms %d; idle phases of %g s" % (a.trust_ms, a.d))
    print("| build | brokers | Redis CPU ms/s | per broker µs/s (less "
          "Redis alone) | "
          "commands/s | writes/s | connections |")
    print("|---|---|---|---|---|---|---|")
    alone = idle(builds[0][1], 0, a.d, a.trust_ms)[0]
    print("| (Redis alone) | 0 | %.2f | | | | |" % alone)
    for n in [int(x) for x in a.brokers.split(",")]:
        for name, binary in builds:
            cpu, calls, writes, conns = idle(binary, n, a.d, a.trust_ms)
            print("| %s | %d | %.2f | %.1f | %.1f | %.1f | %d |" % (
                name, n, cpu, (cpu - alone) * 1000 / n, calls, writes,
                conns))
            sys.stdout.flush()
    print()
    print("deliveries per event, %d brokers" % a.event_brokers)
    rows = {name: events(binary, a.event_brokers, a.trust_ms)
            for name, binary in builds}
    print("| event | " + " | ".join(n for n, _ in builds) + " |")
    print("|---|" + "---|" * len(builds))
    for kind in rows["this"]:
        print("| %s | %s |" % (kind, " | ".join(
            str(rows[n][kind]) for n, _ in builds)))


if __name__ == "__main__":
    main()

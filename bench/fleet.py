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
    bench/fleet.py --restart 1000 [--tcp-backlog N] [--baseline ...]
    bench/fleet.py --write [--brokers 1,100,300,1000] [-d SECONDS] ...

--load instead runs lockbench's uncontended load (200 clients) and its
contended one (32 clients on one name, 1 ms holds) spread over N brokers,
and straight to Redis, and prints per operation Redis's CPU, its commands
(those its scripts ran included) and its script calls.

--restart instead kills Redis (-9) under N brokers, every tenth holding a
lock, starts it again on its append-only file, and reads how soon the
brokers' connections were back and each broker granted again, and whether
every hold was kept or its holder told (--tcp-backlog sets Redis's).

--write runs all of it (--load 1,8,32,100,300 and --restart 1000 unless
given) and puts the tables between the markers in docs/performance.md.

Needs a build: meson compile -C build (lockbrokerd)."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
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
        mem = field(i1, "used_memory") / 1e6
        resp.close()
        return cpu * 1000 / seconds, calls, writes, conns, mem
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


def sample_clients(port, t0, out, stop):
    """(s since t0, Redis's clients less ours) every 20 ms until stop."""
    while not stop.is_set():
        try:
            r = lbtest.Resp(port)
            info = r("INFO", "clients")
            r.close()
            out.append((time.monotonic() - t0, int(info.split(
                "connected_clients:")[1].split("\r")[0]) - 1))
        except (OSError, ValueError, AssertionError, IndexError):
            pass
        time.sleep(0.02)


def restart(binary, n, trust_ms, backlog):
    """A Redis restart (kill -9, then started again on its append-only
    file, with tcp-backlog backlog) under n brokers, every tenth of them
    holding a lock: when the brokers were connected again (Redis's
    connected_clients, read every 20 ms: how many by 0.1, 0.5, 1 and 2 s,
    and when all), when each granted again (a try-once on each broker,
    every 50 ms), the grace period they waited, and whether every hold was
    kept or its holder told."""
    tmp = tempfile.mkdtemp(prefix="lbfleet-")
    redis = lbtest.Redis(tmp, extra=["--maxclients", "20000", "--appendonly",
                                     "yes", "--appendfsync", "always",
                                     "--tcp-backlog", str(backlog)])
    redis.own_port = False               # a restart keeps the port
    brokers, clients = [], []
    try:
        brokers = start(tmp, redis.port, n, trust_ms, binary)
        clients = [b.client() for b in brokers]
        holders = clients[::10]
        for i, c in enumerate(holders):
            assert c.cmd("ACQUIRE held-%d TTL 600000" % i).startswith("OK ")
        time.sleep(2 * trust_ms / 1000.0)
        redis.kill()
        t0 = time.monotonic()
        redis.start()
        t_up = time.monotonic() - t0
        conns, served, stop = [], {}, threading.Event()
        sampler = threading.Thread(target=sample_clients,
                                   args=(redis.port, t0, conns, stop))
        sampler.start()
        pending = list(range(n))
        while pending and time.monotonic() - t0 < 30 + 3 * trust_ms / 1e3:
            for i in pending:
                clients[i].send("ACQUIRE probe-%d WAIT 0" % i)
            for i in list(pending):
                reply = clients[i].line()
                while reply.startswith("EVENT "):
                    clients[i].events = getattr(clients[i], "events", [])
                    clients[i].events.append(reply)
                    reply = clients[i].line()
                if reply.startswith("OK "):
                    served[i] = time.monotonic() - t0
                    pending.remove(i)
                    assert clients[i].cmd("RELEASE probe-%d" % i) == "OK"
            time.sleep(0.05)
        stop.set()
        sampler.join()
        kept = told = 0
        for i, c in enumerate(holders):
            lines = c.until_end("LOCKS")
            if any(l.startswith("LOCK held-%d " % i) for l in lines):
                kept += 1
            elif any("LOST held-%d " % i in e
                     for e in getattr(c, "events", []) + lines):
                told += 1
        grace = [l for l in open(brokers[0].log, errors="replace")
                 if "no grant for" in l]
        full = next((t for t, k in conns if k >= 2 * n), None)
        by = {"by_%gs" % s: max([k for t, k in conns if t <= s] or [0])
              for s in (0.1, 0.5, 1, 2)}
        return dict(by, brokers=n, tcp_backlog=backlog, redis_up_s=t_up,
                    connections=2 * n, all_connected_s=full,
                    first_served_s=min(served.values()) if served else None,
                    all_served_s=max(served.values()) if len(served) == n
                    else None, not_served=len(pending),
                    grace_logged=grace[-1].split("redis: ")[-1].strip()
                    if grace else None,
                    holds=len(holders), kept=kept, told=told)
    finally:
        for c in clients:
            c.close()
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


OUT = []


def out(line=""):
    """A line of the report: printed now, and kept for --write."""
    print(line)
    sys.stdout.flush()
    OUT.append(line)


def idles(builds, ns, seconds, trust_ms):
    """Redis's cost of n idle brokers, per build."""
    out("Idle brokers (redis.trust_ms %d; %g s each):" % (trust_ms, seconds))
    out()
    out("| build | brokers | Redis CPU ms/s | per broker µs/s (less Redis "
        "alone) | commands/s | writes/s | connections | Redis memory MB |")
    out("|---|---|---|---|---|---|---|---|")
    alone = idle(builds[0][1], 0, seconds, trust_ms)
    out("| (Redis alone) | 0 | %.2f | | | | | %.1f |" % (alone[0], alone[4]))
    for n in ns:
        for name, binary in builds:
            cpu, calls, writes, conns, mem = idle(binary, n, seconds,
                                                  trust_ms)
            out("| %s | %d | %.2f | %.1f | %.1f | %.1f | %d | %.1f |" % (
                name, n, cpu, (cpu - alone[0]) * 1000 / n, calls, writes,
                conns, mem))


def deliveries_table(builds, n, trust_ms):
    """Deliveries per event kind on n brokers, per build."""
    out("Deliveries per event, %d brokers:" % n)
    out()
    rows = {name: events(binary, n, trust_ms) for name, binary in builds}
    out("| event | " + " | ".join(b for b, _ in builds) + " |")
    out("|---|" + "---|" * len(builds))
    for kind in rows["this"]:
        out("| %s | %s |" % (kind, " | ".join(
            str(rows[b][kind]) for b, _ in builds)))


def loads(builds, ns, seconds, trust_ms):
    """The issue's two loads over n brokers: 200 clients cycling
    uncontended, and 32 clients on one name (contended, 1 ms holds)."""
    out("The same load spread over N brokers (%g s each):" % seconds)
    out()
    out("| load | build | brokers | ops/s | Redis µs/op | commands/op | "
        "scripts/op |")
    out("|---|---|---|---|---|---|---|")
    for scenario, conns in (("uncontended", 200), ("contended", 32)):
        r = load(None, 0, scenario, conns, seconds, trust_ms)
        out("| %s %d | direct Redis | 0 | %.0f | %.1f | %.2f | %.2f |" % (
            (scenario, conns) + r))
        for n in ns:
            for name, binary in builds:
                r = load(binary, n, scenario, conns, seconds, trust_ms)
                out("| %s %d | %s | %d | %.0f | %.1f | %.2f | %.2f |" % (
                    (scenario, conns, name, n) + r))


def restarts(builds, ns, trust_ms, backlog):
    """A Redis restart under n brokers, per build."""
    out("A Redis restart (kill -9, restarted on its append-only file; "
        "tcp-backlog %d):" % backlog)
    out()
    out("| build | brokers | connections back by 0.5 s / 1 s / 2 s | all "
        "back | grace period | first grant | last broker's first grant | "
        "holds kept / told / of |")
    out("|---|---|---|---|---|---|---|---|")
    for n in ns:
        for name, binary in builds:
            r = restart(binary, n, trust_ms, backlog)
            print(json.dumps(dict(r, build=name)))
            f = lambda v: "%.2f s" % v if v is not None else "never"
            g = r["grace_logged"] and r["grace_logged"].split(
                "no grant for ")[1].split(" ms")[0]
            out("| %s | %d | %d / %d / %d of %d | %s | %s ms | %s | %s | "
                "%d / %d / %d |" % (
                    name, n, r["by_0.5s"], r["by_1s"], r["by_2s"],
                    r["connections"], f(r["all_connected_s"]), g,
                    f(r["first_served_s"]), f(r["all_served_s"]),
                    r["kept"], r["told"], r["holds"]))


BEGIN = "<!-- bench/fleet.py --write: begin -->"
END = "<!-- bench/fleet.py --write: end -->"


def write(path):
    """Put the report between path's markers."""
    with open(path) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        sys.exit("fleet: %s has no %s ... %s" % (path, BEGIN, END))
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    with open(path, "w") as f:
        f.write(head + BEGIN + "\n" + "\n".join(OUT).strip("\n") + "\n" +
                END + tail)


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
    ap.add_argument("--restart", metavar="N1,N2", help="instead: a Redis "
                    "restart under N brokers, and how long until each "
                    "grants again")
    ap.add_argument("--tcp-backlog", type=int, default=511,
                    help="--restart: Redis's tcp-backlog (its default 511)")
    ap.add_argument("--write", action="store_true",
                    help="all of it (--brokers, events, --load, default "
                    "1,8,32,100,300, and --restart, default 1000), and "
                    "into docs/performance.md")
    a = ap.parse_args()
    if a.event_brokers < 3:
        ap.error("--event-brokers: at least 3 (a holder's, another's, "
                 "a waiter's)")
    raise_nofile()
    builds = [("this", os.path.join(ROOT, "build", "src", "lockbrokerd"))]
    if a.baseline:
        builds.append(("baseline", a.baseline))
    nums = lambda v: [int(x) for x in v.split(",")]
    if a.write:
        out("`python3 bench/fleet.py --write --brokers %s -d %g%s` on "
            "this machine, %s:" % (a.brokers, a.d, " --baseline OLD" if
                                   a.baseline else "",
                                   time.strftime("%Y-%m-%d")))
        out()
    if a.load or a.write:
        loads(builds, nums(a.load or "1,8,32,100,300"), a.d, a.trust_ms)
        if not a.write:
            return
        out()
    if a.restart or a.write:
        restarts(builds, nums(a.restart or "1000"), a.trust_ms,
                 a.tcp_backlog)
        if not a.write:
            return
        out()
    idles(builds, nums(a.brokers), a.d, a.trust_ms)
    out()
    deliveries_table(builds, a.event_brokers, a.trust_ms)
    if a.write:
        write(os.path.join(ROOT, "docs", "performance.md"))


if __name__ == "__main__":
    main()

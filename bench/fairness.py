#!/usr/bin/env python3
"""Fairness across brokers: one name, 1 ms holds, 32 clients
spread round-robin over 1, 2 and 4 brokers sharing one Redis (the shapes
1 x 32, 2 x 16 and 4 x 8), all measured in one run on one machine.

Starts its own redis-server and, for every lockbench run, fresh
lockbrokerd processes on free loopback ports; runs bench/lockbench
-s contended with one --broker per broker. Around each run it takes:

  - Redis INFO commandstats: every cmdstat_*'s calls (the commands the
    scripts run inside count too on Redis 7), EVALSHA+EVAL apart, and
    PUBLISH apart; our own INFO and SUBSCRIBE calls are left out;
  - each broker's INFO: grants_total, releases_total, handovers_total,
    handovers_in_total (absent on builds without the queue across brokers);
  - the messages Redis sent on the brokers' channels, counted by a
    pattern subscriber of ours (P* : P+"released" goes to every broker,
    P+"to:<broker>" to one);
  - utime+stime of Redis and of each broker from /proc/PID/stat.

Each round runs the three shapes, then (unless --no-handoff) two handoff
runs (two clients, no hold) of at most 5 s: on one broker, and on two
(every hand-over crosses brokers). There are --repeat rounds, and the
tables show each figure's median (grants/s also as a ratio to the 1 x 32
run of the same build and round). --baseline LOCKBROKERD adds one run
per shape, in the first round, of another build (labelled
--baseline-label, "baseline" unless given): e.g. one from before the queue
across brokers.

    bench/fairness.py [-d SECONDS] [--repeat 3] [--write]
                      [--lockbrokerd build/src/lockbrokerd]
                      [--baseline /tmp/lb-old/build/src/lockbrokerd]

Needs a build: meson compile -C build (lockbench and lockbrokerd)."""

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, HERE)
from compare import (commandstats, cpu_us, machine, raise_nofile,  # noqa
                     write_doc)  # bench/compare.py

BEGIN, END = "<!-- fairness:begin -->", "<!-- fairness:end -->"
PREFIX = "lockbroker:"
SHAPES = [(1, 32), (2, 16), (4, 8)]
HANDOFF_S = 5  # the handoff runs: at most this long
BROKER_CONF = {"log": {"level": "warning"},
               "limits": {"max_clients": 100000, "max_waiters": 100000}}
# Broker counters that should not move in these runs. (Not timeouts_total:
# a waiter whose first try is in Redis when lockbench exits is answered
# TIMEOUT, as a try-once; lockbench's wait_timeouts counts those it read.)
ODD_KEYS = ["late_grants_total", "errors_total",
            "lost_expired_total", "lost_stolen_total",
            "lost_unavailable_total", "lost_revoked_total",
            "redis_timeouts_total", "renewal_failures_total"]


def eval_usec(redis):
    """The microseconds Redis spent in EVALSHA and EVAL (INFO
    commandstats' usec, which includes the commands a script runs)."""
    return sum(int(m.group(1)) for m in re.finditer(
        r"cmdstat_eval(?:sha)?:calls=\d+,usec=(\d+)",
        redis("INFO", "commandstats")))


class Listener:
    """A pattern subscriber that counts the messages on the brokers'
    channels: P+"released" (every broker hears it) and P+"to:..." (one)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.f = self.sock.makefile("rb")
        self.lock = threading.Lock()
        self.counts = {"released": 0, "to": 0, "other": 0}
        self.sock.sendall(b"*2\r\n$10\r\nPSUBSCRIBE\r\n$%d\r\n%s*\r\n" % (
            len(PREFIX) + 1, PREFIX.encode()))
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def read(self):
        line = self.f.readline()
        if not line:
            raise ConnectionError
        kind, rest = line[:1], line[1:-2]
        if kind == b"*":
            return [self.read() for _ in range(int(rest))]
        if kind == b"$":
            return self.f.read(int(rest) + 2)[:-2].decode(errors="replace")
        return rest.decode()

    def loop(self):
        try:
            while True:
                msg = self.read()
                if not isinstance(msg, list) or msg[0] != "pmessage":
                    continue
                ch = msg[2][len(PREFIX):]
                key = ("released" if ch == "released" else
                       "to" if ch.startswith("to:") else "other")
                with self.lock:
                    self.counts[key] += 1
        except (OSError, ValueError, ConnectionError):
            pass

    def snapshot(self):
        with self.lock:
            return dict(self.counts)

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(2)


class Bench:
    def __init__(self, build, tmp, duration):
        import lbtest
        self.lbtest = lbtest
        self.tmp = tmp
        self.duration = duration
        self.lockbench = os.path.join(build, "bench", "lockbench")
        self.redis = lbtest.Redis(tmp, extra=["--maxclients", "100000"])
        self.listener = Listener(self.redis.port)
        self.nrun = 0

    def snapshot(self, brokers):
        s = {"cmd": commandstats(self.redis),
             "eval_usec": eval_usec(self.redis),
             "redis_cpu": cpu_us(self.redis.proc.pid),
             "cpu": [cpu_us(b.proc.pid) for b in brokers],
             "info": [b.info() for b in brokers],
             "msgs": self.listener.snapshot()}
        return s

    def run(self, lockbrokerd, nbrokers, clients, label,
            scenario="contended"):
        """One lockbench run over nbrokers fresh brokers: contended (1 ms
        holds), or handoff (two clients, no hold)."""
        self.nrun += 1
        self.lbtest.LOCKBROKERD = lockbrokerd
        brokers = []
        try:
            for i in range(nbrokers):
                brokers.append(self.lbtest.Broker(
                    self.tmp, self.redis.port, BROKER_CONF,
                    name="r%d-b%d" % (self.nrun, i)))
            time.sleep(0.2)
            cmd = [self.lockbench]
            for b in brokers:
                cmd += ["--broker", "127.0.0.1:%d" % b.port]
            if scenario == "contended":
                cmd += ["-s", "contended", "-c", str(nbrokers * clients),
                        "--hold-us", "1000", "-d", str(self.duration)]
            else:
                cmd += ["-s", "handoff", "-d",
                        str(min(self.duration, HANDOFF_S))]
            before = self.snapshot(brokers)
            out = subprocess.run(cmd, capture_output=True, text=True,
                                 timeout=self.duration + 120)
            # The brokers see the clients leave: their last releases and
            # cancels fall in the window too (a few dozen commands).
            time.sleep(0.3)
            after = self.snapshot(brokers)
        finally:
            codes = [b.stop() for b in brokers]
        if out.returncode != 0:
            sys.exit("fairness: %s failed:\n%s" % (" ".join(cmd),
                                                     out.stderr))
        if any(codes):
            sys.exit("fairness: a broker exited %s" % codes)
        sys.stderr.write("%s %s %dx%d:\n%s%s" % (
            label, scenario, nbrokers, clients, out.stdout, out.stderr))
        logs = []
        for b in brokers:
            text = b.logtext().strip()
            if text:
                logs.append("%s: %s" % (b.name, text[-2000:]))
        line = [l for l in out.stdout.splitlines() if l.startswith("{")][-1]
        lb = json.loads(line)
        lb["command"] = "lockbench " + " ".join(
            re.sub(r"127\.0\.0\.1:\d+", "B", a) for a in cmd[1:])
        r = figures(label, nbrokers, clients, lb, before, after, logs)
        r["scenario"] = scenario
        return r

    def close(self):
        self.listener.close()
        self.redis.kill()


def delta_info(before, after, key):
    """Sum over the brokers of a counter's growth; None if absent."""
    if any(key not in i for i in before["info"] + after["info"]):
        return None
    return sum(int(a[key]) - int(b[key])
               for b, a in zip(before["info"], after["info"]))


def per(a, b):
    return None if a is None or not b else a / b


def figures(label, nbrokers, clients, lb, before, after, logs):
    """What one run measured, as a flat dict (None: not measured)."""
    cmd = {k: after["cmd"].get(k, 0) - before["cmd"].get(k, 0)
           for k in after["cmd"]}
    ours = ("info", "psubscribe", "subscribe", "client|list")
    total = sum(v for k, v in cmd.items() if k not in ours)
    evals = cmd.get("evalsha", 0) + cmd.get("eval", 0)
    grants = delta_info(before, after, "grants_total")
    releases = delta_info(before, after, "releases_total")
    hand = delta_info(before, after, "handovers_total")
    hand_in = delta_info(before, after, "handovers_in_total")
    msgs = {k: after["msgs"][k] - before["msgs"][k] for k in after["msgs"]}
    cpu = [a - b for b, a in zip(before["cpu"], after["cpu"])]
    gpc = lb["grants_per_client"] or []
    woken = msgs["to"] + msgs["released"] * nbrokers
    return {
        "build": label, "brokers": nbrokers, "clients": clients,
        "grants_s": lb["ops_per_s"],
        "grants_per_broker": lb["grants_per_broker"],
        "fairness": lb["fairness"],
        "min_grants": lb["min_grants"], "max_grants": lb["max_grants"],
        "clients_at_0": sum(1 for g in gpc if g == 0),
        "wait_p50_ms": lb["wait_p50_ms"], "wait_p99_ms": lb["wait_p99_ms"],
        "wait_p999_ms": lb["wait_p999_ms"],
        "handoff_p50_ms": lb["handoff_p50_ms"],
        "handoff_p99_ms": lb["handoff_p99_ms"],
        "handoff_max_ms": lb.get("handoff_max_ms"),
        "lag_max_ms": lb.get("timer_lag_max_ms"),
        "handoffs": lb["handoffs"],
        "cross_handoffs": lb["cross_handoffs"],
        "cross_share": per(lb["cross_handoffs"], lb["handoffs"]),
        "handoffs_s": lb["handoffs_per_s"],
        "cross_p50_ms": lb["cross_handoff_p50_ms"],
        "cross_p99_ms": lb["cross_handoff_p99_ms"],
        "grants": grants, "releases": releases,
        "redis_cmds_per_grant": per(total, grants),
        "evalsha_per_grant": per(evals, grants),
        "us_per_evalsha": per(after["eval_usec"] - before["eval_usec"],
                              evals),
        "publish_per_release": per(cmd.get("publish", 0), releases),
        "msgs_to": msgs["to"], "msgs_released": msgs["released"],
        "woken_per_release": per(woken, releases),
        "handovers": hand, "handovers_in": hand_in,
        "in_per_handover": per(hand_in, hand),
        "handover_share": per(hand, releases),
        "broker_cpu_us_per_grant": [per(c, grants) for c in cpu],
        "brokers_cpu_us_per_grant": per(sum(cpu), grants),
        "redis_cpu_us_per_grant": per(after["redis_cpu"] -
                                      before["redis_cpu"], grants),
        "errors": lb["errors"], "timer_lag_p99_ms": lb["timer_lag_p99_ms"],
        "odd": {k: d for k in ODD_KEYS
                for d in [delta_info(before, after, k)] if d} | (
                    {"lockbench wait_timeouts": lb["wait_timeouts"]}
                    if lb.get("wait_timeouts") else {}),
        "broker_logs": logs, "lockbench": lb,
    }


def med(xs):
    """Median of the numbers; None when none was measured. A fairness of
    None (a client got nothing) counts as infinite."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(runs, base_by_round):
    """The median over a shape's runs of every figure, and the ratio of
    grants/s to the 1 x 32 run of the same build and round."""
    s = {"build": runs[0]["build"], "brokers": runs[0]["brokers"],
         "clients": runs[0]["clients"], "n": len(runs)}
    for k in ["grants_s", "handoffs_s", "cross_share", "wait_p50_ms", "wait_p99_ms", "wait_p999_ms",
              "handoff_p50_ms", "handoff_p99_ms", "cross_p50_ms",
              "cross_p99_ms", "redis_cmds_per_grant", "evalsha_per_grant",
              "publish_per_release", "woken_per_release", "in_per_handover",
              "handover_share", "brokers_cpu_us_per_grant",
              "redis_cpu_us_per_grant", "us_per_evalsha"]:
        s[k] = med([r[k] for r in runs])
    fair = [r["fairness"] if r["fairness"] is not None else float("inf")
            for r in runs]
    s["fairness"] = statistics.median(fair)
    s["fairness_worst"] = max(fair)
    s["clients_at_0"] = max(r["clients_at_0"] for r in runs)
    for k in ("handoff_max_ms", "lag_max_ms"):
        xs = [r[k] for r in runs if r[k] is not None]
        s[k] = max(xs) if xs else None
    s["min_grants"] = min(r["min_grants"] for r in runs)
    s["grants_per_broker"] = [med(col) for col in
                              zip(*[r["grants_per_broker"] for r in runs])]
    s["broker_cpu_us_per_grant"] = [
        med(col) for col in zip(*[r["broker_cpu_us_per_grant"]
                                  for r in runs])]
    s["vs_1x32"] = med([per(r["grants_s"], base_by_round.get(
        (r["build"], r["round"]))) for r in runs])
    s["errors"] = sum(r["errors"] for r in runs)
    return s


def f(v, prec=None):
    if v is None:
        return "—"
    if v == float("inf"):
        return "∞"
    if isinstance(v, int):
        return str(v)
    if prec is None:
        prec = 3 if abs(v) < 10 else 1 if abs(v) < 1000 else 0
    return "%.*f" % (prec, v)


def fair_cell(s):
    cell = f(s["fairness"])
    if s["n"] > 1 and s["fairness_worst"] != s["fairness"]:
        cell += " (worst %s)" % f(s["fairness_worst"])
    if s["clients_at_0"]:
        cell += ", **%d client(s) at 0**" % s["clients_at_0"]
    return cell


def cost_row(s, shape):
    return "| %s | %s | %s (%s) | %s | %s | %s | %s | %s | %s (%s) | %s |" % (
        s["build"], shape, f(s["redis_cmds_per_grant"], 1),
        f(s["evalsha_per_grant"], 2), f(s["us_per_evalsha"], 1),
        f(s["publish_per_release"], 2),
        f(s["woken_per_release"], 2), f(s["handover_share"], 3),
        f(s["in_per_handover"], 3), f(s["brokers_cpu_us_per_grant"], 0),
        " ".join(f(c, 0) for c in s["broker_cpu_us_per_grant"]),
        f(s["redis_cpu_us_per_grant"], 0))


def tables(sums, hsums):
    out = ["| build | brokers × clients | grants/s | × 1×32 | grants per "
           "broker | fairness max/min | wait p50 / p99 (ms) | "
           "release→grant p50 / p99 / max (ms) | hand-overs across brokers | "
           "across brokers p50 / p99 (ms) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for s in sums:
        out.append("| %s | %d × %d | %s | %s | %s | %s | %s / %s | %s / %s "
                   "/ %s | %s | %s / %s |" % (
                       s["build"], s["brokers"], s["clients"],
                       f(s["grants_s"]), f(s["vs_1x32"]),
                       " ".join(f(g, 0) for g in s["grants_per_broker"]),
                       fair_cell(s), f(s["wait_p50_ms"]),
                       f(s["wait_p99_ms"]), f(s["handoff_p50_ms"]),
                       f(s["handoff_p99_ms"]), f(s["handoff_max_ms"]),
                       "—" if s["cross_share"] is None else
                       "%.0f %%" % (100 * s["cross_share"]),
                       f(s["cross_p50_ms"]), f(s["cross_p99_ms"])))
    if hsums:
        out += ["", "| build | handoff, no hold | hand-overs/s | "
                "release→grant p50 / p99 / max (ms) |", "|---|---|---|---|"]
        for s in hsums:
            out.append("| %s | %s | %s | %s / %s / %s |" % (
                s["build"], "2 clients on 1 broker" if s["brokers"] == 1
                else "2 clients on 2 brokers (every hand-over crosses)",
                f(s["handoffs_s"]), f(s["handoff_p50_ms"]),
                f(s["handoff_p99_ms"]), f(s["handoff_max_ms"])))
    out += ["", "| build | run | Redis commands / grant "
            "(EVALSHA) | Redis µs / EVALSHA | PUBLISH / release | brokers "
            "woken / release | hand-overs / release | handovers_in / "
            "handovers | broker CPU µs / grant (each) | Redis CPU µs / "
            "grant |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for s in sums:
        out.append(cost_row(s, "%d × %d" % (s["brokers"], s["clients"])))
    for s in hsums:
        out.append(cost_row(s, "handoff, %d broker%s" % (
            s["brokers"], "s" if s["brokers"] > 1 else "")))
    return "\n".join(out)


def check(v, ok):
    if v is None:
        return "—"
    return "yes" if ok(v) else "**no**"


def targets(sums, hsums, label):
    by = {(s["brokers"], s["clients"]): s for s in sums
          if s["build"] == label}
    one, four = by.get((1, 32)), by.get((4, 8))
    if one is None or four is None:
        return ""
    rows = [("4 × 8 fairness max/min, no client at 0", "≤ 1.2",
             "%s (worst %s), %d at 0" % (f(four["fairness"]),
                                         f(four["fairness_worst"]),
                                         four["clients_at_0"]),
             check(four["fairness_worst"],
                   lambda v: v <= 1.2 and not four["clients_at_0"])),
            ("4 × 8 grants/s over the same round's 1 × 32", "≥ 0.9",
             "%s (%s against %s)" % (f(four["vs_1x32"]),
                                     f(four["grants_s"]),
                                     f(one["grants_s"])),
             check(four["vs_1x32"], lambda v: v >= 0.9)),
            ("4 × 8 p99 wait (ms)", "≤ 60", f(four["wait_p99_ms"]),
             check(four["wait_p99_ms"], lambda v: v <= 60)),
            ("4 × 8 release→grant across brokers, p50 (ms)", "≤ 0.300",
             f(four["cross_p50_ms"]),
             check(four["cross_p50_ms"], lambda v: v <= 0.3))]
    two = [s for s in hsums if s["brokers"] == 2]
    if two:
        rows.append(("handoff on 2 brokers (no hold), release→grant p50 "
                     "(ms)", "≤ 0.300", f(two[0]["handoff_p50_ms"]),
                     check(two[0]["handoff_p50_ms"], lambda v: v <= 0.3)))
    ours = [s for s in sums + hsums if s["build"] == label]
    woken = [s["woken_per_release"] for s in ours
             if s["woken_per_release"] is not None]
    rows += [("4 × 8 Redis commands per grant (EVALSHA per grant)",
              "stated", "%s (%s)" % (f(four["redis_cmds_per_grant"], 1),
                                     f(four["evalsha_per_grant"], 2)), ""),
             ("brokers woken per release (every run above)", "≤ 1",
              " / ".join(f(w, 2) for w in woken),
              check(max(woken) if woken else None, lambda v: v <= 1.0))]
    out = ["| target | wanted | measured | met |",
           "|---|---|---|---|"]
    out += ["| %s | %s | %s | %s |" % r for r in rows]
    return "\n".join(out)


def oddities(runs):
    """One line: what went wrong in any run, or that nothing did."""
    bad = ["%s %s %d×%d: %s" % (
        r["build"], r["scenario"], r["brokers"], r["clients"],
        ", ".join(["lockbench errors %d" % r["errors"]] * bool(r["errors"])
                  + ["%s +%d" % kv for kv in sorted(r["odd"].items())]))
        for r in runs if r["errors"] or r["odd"]]
    if not bad:
        return ("In every run: no lockbench error, no wait answered TIMEOUT, "
                "and no broker counted a late grant, an ERR, an EVENT LOST, "
                "a failed renewal or a Redis timeout.")
    return "Not clean: " + "; ".join(bad) + "."


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-d", "--duration", type=float, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--lockbrokerd", default=None,
                    help="the broker to measure (default BUILD/src/"
                    "lockbrokerd)")
    ap.add_argument("--label", default=None,
                    help="its name in the table (default: git describe)")
    ap.add_argument("--baseline", default=None, metavar="LOCKBROKERD",
                    help="also run each shape once with this broker")
    ap.add_argument("--baseline-label", default="baseline")
    ap.add_argument("--no-handoff", dest="handoff", action="store_false",
                    help="skip the handoff runs (1 and 2 brokers)")
    ap.add_argument("--write", action="store_true",
                    help="put the tables into docs/performance.md")
    ap.add_argument("--json", default=None, metavar="FILE",
                    help="write every run's figures to FILE too")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    lbd = os.path.abspath(args.lockbrokerd or
                          os.path.join(build, "src", "lockbrokerd"))
    # "this", not a commit: docs/performance.md carries no commit hashes.
    label = args.label or "this"
    raise_nofile()

    tmp = tempfile.mkdtemp(prefix="lbfair-")
    bench = Bench(build, tmp, args.duration)
    runs = []
    try:
        for rnd in range(args.repeat):
            for nb, nc in SHAPES:
                r = bench.run(lbd, nb, nc, label)
                r["round"] = rnd
                runs.append(r)
                if args.baseline and rnd == 0:
                    r = bench.run(os.path.abspath(args.baseline), nb, nc,
                                  args.baseline_label)
                    r["round"] = rnd
                    runs.append(r)
            if args.handoff:
                for nb in (1, 2):
                    r = bench.run(lbd, nb, 2 // nb, label, "handoff")
                    r["round"] = rnd
                    runs.append(r)
    finally:
        bench.close()
        shutil.rmtree(tmp, ignore_errors=True)

    sums, hsums = [], []
    cont = [r for r in runs if r["scenario"] == "contended"]
    base_by_round = {(r["build"], r["round"]): r["grants_s"] for r in cont
                     if (r["brokers"], r["clients"]) == (1, 32)}
    for lab in [label] + ([args.baseline_label] if args.baseline else []):
        for nb, nc in SHAPES:
            rs = [r for r in cont if r["build"] == lab and
                  (r["brokers"], r["clients"]) == (nb, nc)]
            if rs:
                sums.append(summarise(rs, base_by_round))
    for nb in (1, 2):
        rs = [r for r in runs if r["scenario"] == "handoff" and
              r["brokers"] == nb]
        if rs:
            hsums.append(summarise(rs, {}))
    text = "\n".join([
        "Measured on %s; `bench/fairness.py -d %g --repeat %d%s`: %d "
        "lockbench runs of %g s, contended (one name, 1 ms holds, 32 "
        "clients round-robin over the brokers), the shapes alternating%s; "
        "%s: medians of %d runs per shape%s." % (
            machine(), args.duration, args.repeat,
            " --baseline …" if args.baseline else "", len(runs),
            args.duration, ", then handoff runs of %g s" % min(
                args.duration, HANDOFF_S) if args.handoff else "",
            label, args.repeat,
            ("; %s (before the queue across brokers): one run per shape, "
             "in the first round" % args.baseline_label)
            if args.baseline else ""),
        "", tables(sums, hsums), "", targets(sums, hsums, label), "",
        oddities(runs), "",
        "<details><summary>lockbench runs (one JSON line each)</summary>",
        "", "```"] + [json.dumps(r["lockbench"]) for r in runs] +
        ["```", "", "</details>"])
    print(text)
    for r in runs:
        what = (r["build"], r["scenario"], r["brokers"], r["clients"])
        for l in r["broker_logs"]:
            sys.stderr.write("fairness: broker log, %s %s %dx%d: %s\n" %
                             (what + (l,)))
        if r["odd"] or r["errors"]:
            sys.stderr.write("fairness: %s %s %dx%d: lockbench errors %d, "
                             "broker counters %s\n" % (what + (
                                 r["errors"], r["odd"])))
    print(json.dumps({"summary": sums + hsums}))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"runs": runs, "summary": sums}, fh, indent=1)
    if args.write:
        write_doc(text, BEGIN, END, "fairness")
    return 0


if __name__ == "__main__":
    sys.exit(main())

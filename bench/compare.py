#!/usr/bin/env python3
"""The standard comparison: lockbrokerd against the direct-Redis client
(SET NX PX, Lua release, polling), same connections, same run, one machine.

Starts its own redis-server and lockbrokerd on free loopback ports (a fresh
broker for every broker run, so its memory peak is that run's), runs
bench/lockbench for each scenario against both, and prints a table of the
figures with the ratios and the targets (issue 16's: uncontended cycles/s
at least 0.8 of direct Redis's over TCP and 1.0 over the broker's Unix
socket, the others as issue 7 set them). With --write it puts
the table into docs/performance.md between its markers.

    bench/compare.py [-d SECONDS] [--write] [--only SCENARIO ...]
    bench/compare.py --smoke        CI: a 2-second uncontended run, JSON out
    bench/compare.py --cluster [-d SECONDS] [--rounds N] [--write]
                                    one Redis, a cluster of 1 master and one
                                    of 3, side by side (bench/cluster.py)
    bench/compare.py --tls [-d SECONDS] [--rounds N] [--write]
                                    uncontended over plain TCP and over TLS
                                    (the broker's TLS listener), alternated

Needs a build: meson compile -C build (lockbench and lockbrokerd)."""

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
DOC = os.path.join(ROOT, "docs", "performance.md")
BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"
TLS_BEGIN, TLS_END = "<!-- compare --tls: begin -->", \
    "<!-- compare --tls: end -->"
CLUSTER_BEGIN = "<!-- compare --cluster: begin -->"
CLUSTER_END = "<!-- compare --cluster: end -->"

BROKER_CONF = {"log": {"level": "warning"},
               "limits": {"max_clients": 100000, "max_waiters": 100000}}


TICK = os.sysconf("SC_CLK_TCK")


def cpu_us(pid):
    """utime+stime of PID in microseconds, from /proc/PID/stat."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3): utime and stime are fields 14, 15.
    return (int(fields[11]) + int(fields[12])) * 1e6 / TICK


def commandstats(redis, field="calls"):
    """cmdstat name -> calls (or field: "usec")."""
    out = {}
    for line in redis("INFO", "commandstats").splitlines():
        m = re.match(r"cmdstat_([^:]+):.*\b%s=(\d+)" % field, line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def raise_nofile():
    """As many descriptors as the hard limit allows; returns that."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class Bench:
    def __init__(self, build, tmp):
        self.build = build
        self.tmp = tmp
        self.lockbench = os.path.join(build, "bench", "lockbench")
        import lbtest
        self.lbtest = lbtest
        self.redis = lbtest.Redis(tmp, extra=["--maxclients", "100000"])
        self.resp = lbtest.Resp(self.redis.port)

    def cost(self):
        """CPU so far of Redis and of lockbench's (reaped) processes, in
        µs, and Redis's calls by command."""
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (cpu_us(self.redis.proc.pid),
                (ru.ru_utime + ru.ru_stime) * 1e6,
                commandstats(self.resp))

    def run(self, target, scenario, args, duration, unix=False, tls=None):
        """One lockbench run; returns its JSON line as a dict. unix: the
        clients reach the broker over a Unix socket, as a sidecar's do;
        tls: over its TLS listener, with these certificates (lbtls)."""
        broker = None
        if target == "broker":
            conf = dict(BROKER_CONF)
            path = os.path.join(self.tmp, "lb.sock")
            if unix:
                conf["listen"] = {"unix": path}
            if tls:
                conf["tls"] = {"port": self.lbtest.free_port(),
                               "certificate": tls.server[0],
                               "key": tls.server[1]}
            broker = self.lbtest.Broker(self.tmp, self.redis.port, conf,
                                        name="bench")
            addr, pid = "127.0.0.1:%d" % broker.port, broker.proc.pid
            if unix:
                addr = path
            if tls:
                addr = "127.0.0.1:%d" % conf["tls"]["port"]
                args = args + ["--tls", tls.ca]
        else:
            addr, pid = "127.0.0.1:%d" % self.redis.port, self.redis.proc.pid
        cmd = [self.lockbench, "--" + target, addr, "-s", scenario,
               "-d", str(duration), "--pid", str(pid)] + args
        before = self.cost()
        b0 = cpu_us(broker.proc.pid) if broker is not None else 0
        try:
            out = subprocess.run(cmd, capture_output=True, text=True,
                                 timeout=duration + 120)
            after = self.cost()
            b1 = cpu_us(broker.proc.pid) if broker is not None else 0
        finally:
            if broker is not None:
                code = broker.stop()
                if code != 0:
                    sys.exit("compare: the broker exited %d" % code)
        if out.returncode != 0:
            sys.exit("compare: %s failed:\n%s" % (" ".join(cmd), out.stderr))
        sys.stderr.write(out.stdout)
        line = [l for l in out.stdout.splitlines() if l.startswith("{")][-1]
        res = json.loads(line)
        res["command"] = "lockbench " + " ".join(cmd[1:2] + cmd[3:])
        # Per cycle (uncontended) or grant: CPU of each process from /proc
        # (a 10 ms clock tick: coarse for short runs), and what Redis ran,
        # the commands inside scripts included.
        ops = max(res["ops"], 1)
        calls = {k: after[2].get(k, 0) - before[2].get(k, 0)
                 for k in after[2]}
        res["cpu_us_per_op"] = {
            "redis": round((after[0] - before[0]) / ops, 2),
            "broker": round((b1 - b0) / ops, 2) if broker else None,
            "lockbench": round((after[1] - before[1]) / ops, 2)}
        res["redis_calls_per_op"] = round(
            sum(calls.values()) / ops, 2)
        res["redis_scripts_per_op"] = round(
            (calls.get("evalsha", 0) + calls.get("eval", 0)) / ops, 2)
        return res

    def close(self):
        self.resp.close()
        self.redis.kill()


def scale_size(nofile):
    """Idle and waiting connections for scale: 10,000 each if the
    descriptor limit lets both ends hold them, else as many as it does."""
    n = min(10000, (nofile - 300) // 2 // 100 * 100)
    return max(n, 100)


def fmt(v, unit=""):
    if v is None:
        return "—"
    if isinstance(v, float):
        v = ("%.3f" % v) if abs(v) < 10 else ("%.0f" % v if abs(v) >= 1000
                                               else "%.1f" % v)
    return "%s%s" % (v, unit)


def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def check(value, op, target):
    if value is None:
        return "—"
    ok = value >= target if op == ">=" else value <= target
    return "yes" if ok else "**no**"


def rows_uncontended(b, r, u):
    tput = ratio(b["ops_per_s"], r["ops_per_s"])
    p99 = ratio(b["p99_ms"], r["p99_ms"])
    utput = ratio(u["ops_per_s"], r["ops_per_s"])
    up99 = ratio(u["p99_ms"], r["p99_ms"])
    return [
        ("uncontended", "cycles/s", fmt(b["ops_per_s"]), fmt(r["ops_per_s"]),
         fmt(tput, "×"), "≥ 0.8× direct", check(tput, ">=", 0.8)),
        ("uncontended", "p99 cycle (ms)", fmt(b["p99_ms"]), fmt(r["p99_ms"]),
         fmt(p99, "×"), "≤ 2× direct", check(p99, "<=", 2.0)),
        ("uncontended, clients on the broker's Unix socket (sidecar)",
         "cycles/s", fmt(u["ops_per_s"]), fmt(r["ops_per_s"]),
         fmt(utput, "×"), "≥ 1.0× direct", check(utput, ">=", 1.0)),
        ("uncontended, clients on the broker's Unix socket (sidecar)",
         "p99 cycle (ms)", fmt(u["p99_ms"]), fmt(r["p99_ms"]),
         fmt(up99, "×"), "", ""),
    ] + rows_cost(b, r, u)


def rows_cost(b, r, u):
    """Where the CPU goes per uncontended cycle (issue 16's figures)."""
    bc, rc, uc = (x["cpu_us_per_op"] for x in (b, r, u))
    rr = ratio(bc["redis"], rc["redis"])
    br = ratio(bc["broker"], rc["redis"])
    return [
        ("uncontended", "broker CPU µs / cycle (TCP; Unix socket)",
         "%s; %s" % (fmt(bc["broker"]), fmt(uc["broker"])),
         "Redis: %s" % fmt(rc["redis"]), fmt(br, "×"),
         "≤ 1× Redis's per direct cycle", check(br, "<=", 1.0)),
        ("uncontended", "Redis CPU µs / cycle", fmt(bc["redis"]),
         fmt(rc["redis"]), fmt(rr, "×"), "≤ 0.5× direct",
         check(rr, "<=", 0.5)),
        ("uncontended", "load generator CPU µs / cycle",
         fmt(bc["lockbench"]), fmt(rc["lockbench"]),
         fmt(ratio(bc["lockbench"], rc["lockbench"]), "×"), "", ""),
        ("uncontended", "Redis commands / cycle (scripts)",
         "%s (%s)" % (fmt(b["redis_calls_per_op"]),
                      fmt(b["redis_scripts_per_op"])),
         "%s (%s)" % (fmt(r["redis_calls_per_op"]),
                      fmt(r["redis_scripts_per_op"])), "", "", ""),
    ]


def rows_contended(b, r1, r100):
    def both(key):
        return "%s / %s" % (fmt(r1[key]), fmt(r100[key]))
    return [
        ("contended", "grants/s", fmt(b["ops_per_s"]), both("ops_per_s"),
         "", "≥ 900", check(b["ops_per_s"], ">=", 900)),
        ("contended", "fairness max/min", fmt(b["fairness"]),
         both("fairness"), "", "≤ 1.2", check(b["fairness"], "<=", 1.2)),
        ("contended", "p99 wait incl. pending (ms)", fmt(b["wait_p99_ms"]),
         both("wait_p99_ms"), "", "≤ 50",
         check(b["wait_p99_ms"], "<=", 50)),
        # A few starved clients are under 1 % of the waits: p99.9 shows them.
        ("contended", "p99.9 wait incl. pending (ms)",
         fmt(b["wait_p999_ms"]), both("wait_p999_ms"), "", "", ""),
    ]


def rows_handoff(b, r):
    return [
        ("handoff", "median release→grant (ms)", fmt(b["handoff_p50_ms"]),
         fmt(r["handoff_p50_ms"]), "", "≤ 0.100",
         check(b["handoff_p50_ms"], "<=", 0.1)),
        ("handoff", "handoffs/s", fmt(b["handoffs_per_s"]),
         fmt(r["handoffs_per_s"]), fmt(ratio(b["handoffs_per_s"],
                                            r["handoffs_per_s"]), "×"),
         "", ""),
    ]


def rows_scale(b, r, n):
    mib = None if b["hwm_kib"] is None else b["hwm_kib"] / 1024
    rmib = None if r["hwm_kib"] is None else r["hwm_kib"] / 1024
    label = "scale %d+%d" % (n, n)
    return [
        (label, "peak RSS (MiB; Redis's for direct)", fmt(mib), fmt(rmib),
         "", "≤ 64", check(mib, "<=", 64)),
        (label, "p99 ACQUIRE+RELEASE meanwhile (ms)", fmt(b["p99_ms"]),
         fmt(r["p99_ms"]), "", "≤ 2", check(b["p99_ms"], "<=", 2)),
        (label, "waiters still waiting at the end", fmt(b["pending_waits"]),
         fmt(r["pending_waits"]), "", "", ""),
    ]


def table(rows):
    out = ["| scenario | figure | broker | direct Redis | ratio | target "
           "| met |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out)


def machine():
    redis = subprocess.run(["redis-server", "--version"], capture_output=True,
                           text=True).stdout.split()
    ver = next((w[2:] for w in redis if w.startswith("v=")), "?")
    return "%s, %d cores, Linux %s, Redis %s, %s" % (
        platform.node() or "this machine", os.cpu_count(), platform.release(),
        ver, time.strftime("%Y-%m-%d"))


def write_doc(text, begin=BEGIN, end=END, who="compare"):
    """Put text into docs/performance.md between the markers begin and
    end (bench/fairness.py writes its own section with it too)."""
    with open(DOC) as f:
        doc = f.read()
    pat = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if not pat.search(doc):
        sys.exit("%s: %s has no %s … %s markers" % (who, DOC, begin, end))
    doc = pat.sub(lambda m: begin + "\n" + text + "\n" + end, doc)
    with open(DOC, "w") as f:
        f.write(doc)


def compare_tls(build, args):
    """Uncontended cycles over plain TCP and over TLS to one broker setup,
    alternated for --rounds; the medians side by side, with the broker's
    CPU per cycle, into docs/performance.md with --write."""
    import lbtls
    tmp = tempfile.mkdtemp(prefix="lbcompare-")
    bench = Bench(build, tmp)
    certs = lbtls.Certs(os.path.join(tmp, "certs"))
    a, d = ["-c", "64", "-k", "10000"], args.duration
    plain, tls = [], []
    try:
        for _ in range(args.rounds):
            plain.append(bench.run("broker", "uncontended", a, d))
            tls.append(bench.run("broker", "uncontended", a, d, tls=certs))
    finally:
        bench.close()
        shutil.rmtree(tmp, ignore_errors=True)

    def med(runs, f):
        v = sorted(f(r) for r in runs)
        return v[len(v) // 2]
    figs = [("cycles/s", lambda r: r["ops_per_s"]),
            ("p99 cycle (ms)", lambda r: r["p99_ms"]),
            ("broker CPU µs / cycle", lambda r: r["cpu_us_per_op"]["broker"]),
            ("Redis CPU µs / cycle", lambda r: r["cpu_us_per_op"]["redis"]),
            ("load generator CPU µs / cycle",
             lambda r: r["cpu_us_per_op"]["lockbench"])]
    out = ["| uncontended, 64 connections | plain TCP | TLS | TLS / plain |",
           "|---|---|---|---|"]
    for name, f in figs:
        p, t = med(plain, f), med(tls, f)
        out.append("| %s | %s | %s | %s |" % (name, fmt(p), fmt(t),
                                              fmt(ratio(t, p), "×")))
    bad = [r for r in plain + tls if r["errors"] or not r["ops"]]
    text = "\n".join([
        "Measured on %s; `bench/compare.py --tls -d %g --rounds %d`, %g s "
        "per run, a fresh broker for each, plain and TLS alternated; "
        "medians." % (machine(), d, args.rounds, d), "", "\n".join(out), "",
        "<details><summary>lockbench runs (one JSON line each)</summary>", "",
        "```"] + [json.dumps(x) for x in plain + tls] +
        ["```", "", "</details>"])
    print(text)
    if bad:
        sys.exit("compare: %d run(s) with errors or no cycles" % len(bad))
    if args.write:
        write_doc(text, TLS_BEGIN, TLS_END)
    return 0


def compare_cluster(build, args):
    """bench/cluster.py's run: its table, into docs/performance.md with
    --write; fails if a run had errors or a CROSSSLOT reply."""
    import cluster
    text, bad = cluster.main(os.path.join(build, "bench", "lockbench"),
                             args, BROKER_CONF, cpu_us, machine())
    print(text)
    if bad:
        sys.exit("compare: errors or CROSSSLOT in %d run(s)" % len(bad))
    if args.write:
        write_doc(text, CLUSTER_BEGIN, CLUSTER_END)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-d", "--duration", type=float, default=10)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--write", action="store_true",
                    help="put the table into docs/performance.md")
    ap.add_argument("--only", nargs="+", default=[],
                    choices=["uncontended", "contended", "handoff", "scale"])
    ap.add_argument("--smoke", action="store_true",
                    help="one 2-second uncontended broker run (CI)")
    ap.add_argument("--cluster", action="store_true",
                    help="one Redis, a cluster of 1 master, one of 3")
    ap.add_argument("--tls", action="store_true",
                    help="uncontended over plain TCP and over TLS")
    ap.add_argument("--rounds", type=int, default=3,
                    help="--cluster, --tls: rounds of the setups, "
                    "alternated")
    ap.add_argument("--cluster-scenarios", nargs="+",
                    default=["uncontended", "contended"],
                    choices=["uncontended", "contended"])
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    os.environ["LOCKBROKERD"] = os.path.join(build, "src", "lockbrokerd")
    import lbtest
    lbtest.LOCKBROKERD = os.environ["LOCKBROKERD"]
    nofile = raise_nofile()
    if args.cluster:
        return compare_cluster(build, args)
    if args.tls:
        return compare_tls(build, args)

    tmp = tempfile.mkdtemp(prefix="lbcompare-")
    bench = Bench(build, tmp)
    d = args.duration
    want = set(args.only or ["uncontended", "contended", "handoff", "scale"])
    rows, runs = [], []
    try:
        if args.smoke:
            res = bench.run("broker", "uncontended", ["-c", "16"], 2)
            print(json.dumps(res))
            return 0 if res["ops"] > 0 and res["errors"] == 0 else 1
        if "uncontended" in want:
            a = ["-c", "64", "-k", "10000"]
            b, r = bench.run("broker", "uncontended", a, d), \
                bench.run("redis", "uncontended", a, d)
            u = bench.run("broker", "uncontended", a, d, unix=True)
            runs += [b, r, u]
            rows += rows_uncontended(b, r, u)
        if "contended" in want:
            a = ["-c", "32", "--hold-us", "1000"]
            b = bench.run("broker", "contended", a, d)
            r1 = bench.run("redis", "contended", a + ["--poll-ms", "1"], d)
            r100 = bench.run("redis", "contended", a + ["--poll-ms", "100"], d)
            runs += [b, r1, r100]
            rows += rows_contended(b, r1, r100)
        if "handoff" in want:
            b = bench.run("broker", "handoff", [], d)
            r = bench.run("redis", "handoff", ["--poll-ms", "1"], d)
            runs += [b, r]
            rows += rows_handoff(b, r)
        if "scale" in want:
            n = scale_size(nofile)
            a = ["--idle", str(n), "--waiters", str(n), "--scale-names",
                 "100", "-c", "8"]
            b = bench.run("broker", "scale", a, d)
            r = bench.run("redis", "scale", a + ["--poll-ms", "100"], d)
            runs += [b, r]
            rows += rows_scale(b, r, n)
    finally:
        bench.close()
        shutil.rmtree(tmp, ignore_errors=True)

    text = "\n".join([
        "Measured on %s; `bench/compare.py -d %g`, %g s per run. Direct "
        "Redis for contended: polling every 1 ms / every 100 ms."
        % (machine(), d, d), "", table(rows), "",
        "<details><summary>lockbench runs (one JSON line each)</summary>", "",
        "```"] + [json.dumps(x) for x in runs] + ["```", "", "</details>"])
    print(text)
    if args.write:
        write_doc(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""lockbrokerd on a Redis Cluster beside one Redis, in one run
(bench/compare.py --cluster): the same lockbench scenarios against a
broker on (a) one redis-server, (b) a cluster of one master and (c) a
cluster of three masters (no replicas, cluster-require-full-coverage
no), a fresh broker for every run, the setups alternated over a few
rounds so that the machine's noise shows in each round's figures.

Per run: cycles (grants) per second; the broker's CPU per cycle (from
/proc); each redis-server's CPU (INFO cpu, used_cpu_sys +
used_cpu_user, before and after) per cycle of the run and per cycle that
shard served (its share of the run's script calls); and what would show
a request touching two shards or sent to the wrong one: each master's
CROSSSLOT, MOVED, ASK and TRYAGAIN error replies (INFO errorstats) and
the broker's own count of redirects (INFO redis_node<i>)."""

import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import lbtest
from lbcluster import Cluster

SETUPS = ("one Redis", "cluster, 1 master", "cluster, 3 masters")
ERRORS = ("CROSSSLOT", "MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")
SCENARIOS = {"uncontended": ["-c", "64", "-k", "10000"],
             "contended": ["-c", "32", "--hold-us", "1000"]}


def info(resp, section):
    """INFO section as a dict of its name:value lines."""
    out = {}
    for line in resp("INFO", section).splitlines():
        if ":" in line and not line.startswith("#"):
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def node_stats(resp):
    """One redis-server's counters: CPU in µs, script calls, error
    replies by prefix."""
    cpu = info(resp, "cpu")
    calls, usec = {}, {}
    for k, v in info(resp, "commandstats").items():
        m = re.search(r"\bcalls=(\d+),usec=(\d+)", v)
        if m:
            calls[k[len("cmdstat_"):]] = int(m.group(1))
            usec[k[len("cmdstat_"):]] = int(m.group(2))
    errs = {}
    for k, v in info(resp, "errorstats").items():
        m = re.search(r"\bcount=(\d+)", v)
        if m:
            errs[k[len("errorstat_"):]] = int(m.group(1))
    return {"cpu_us": (float(cpu["used_cpu_sys"]) +
                       float(cpu["used_cpu_user"])) * 1e6,
            "scripts": calls.get("evalsha", 0) + calls.get("eval", 0),
            # Scripts do not show by name; INFO runs in scripts only
            # (besides this bench's own three a snapshot): in every gated
            # one (INFO replication, lib/process.lua) and in
            # incarnation.lua.
            "info": calls.get("info", 0), "info_usec": usec.get("info", 0),
            "sys_us": float(cpu["used_cpu_sys"]) * 1e6,
            "errors": errs}


def broker_redirects(broker):
    """The broker's redirects (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) summed
    over its masters (INFO's redis_node<i> lines, src/metrics.c); None on
    one Redis (it has no per-node lines)."""
    lines = [v for k, v in broker.info().items()
             if re.match(r"redis_node\d+$", k)]
    if not lines:
        return None
    total = 0
    for v in lines:
        m = re.search(r"\bredirects=(\d+)", v)
        if m is None:
            sys.exit("compare: no redirects= in the broker's %r" % v)
        total += int(m.group(1))
    return total


class Setup:
    """The redis-servers of one setup, kept for the whole run: their
    ports (masters), a connection to each for INFO, and the broker
    configuration that points at them."""

    def __init__(self, name, tmp, masters):
        self.name = name
        self.cluster = None
        extra = ["--maxclients", "100000"]
        if masters == 0:
            self.redis = lbtest.Redis(tmp, extra=extra)
            self.ports = [self.redis.port]
            self.conf = {}
        else:
            # A lone node never learns its address from a peer and gives
            # it as "" in CLUSTER SHARDS: announced, the broker finds it.
            self.cluster = Cluster(
                tmp, masters=masters, replicas=0, node_timeout_ms=15000,
                extra=tuple(extra + ["--cluster-require-full-coverage",
                                     "no", "--cluster-announce-ip",
                                     "127.0.0.1"]))
            self.ports = sorted(self.cluster.masters())
            self.conf = {"redis": {"cluster": ["127.0.0.1:%d" % p
                                               for p in self.ports]}}
        self.resps = [lbtest.Resp(p) for p in self.ports]

    def stats(self):
        """Each master's counters now, in the order of self.ports."""
        return [node_stats(r) for r in self.resps]

    def close(self):
        for r in self.resps:
            r.close()
        if self.cluster is not None:
            self.cluster.stop()
        else:
            self.redis.kill()


def start_broker(setup, tmp, base_conf):
    """A fresh broker on setup, once it serves every slot (on a cluster
    it learns the map after it starts)."""
    conf = {g: dict(k) for g, k in base_conf.items()}
    for g, k in setup.conf.items():
        conf.setdefault(g, {}).update(k)
    b = lbtest.Broker(tmp, setup.ports[0], conf, name="bench")
    lbtest.wait_until(lambda: b.info().get("redis_up") == "1",
                      what="the broker up on %s" % setup.name)
    return b


def run(lockbench, tmp, setup, scenario, duration, base_conf, cpu_us):
    """One lockbench run against a fresh broker on setup."""
    b = start_broker(setup, tmp, base_conf)
    cmd = [lockbench, "--broker", "127.0.0.1:%d" % b.port, "-s",
           scenario, "-d", str(duration), "--pid", str(b.proc.pid)] + \
        SCENARIOS[scenario]
    try:
        before, b0 = setup.stats(), cpu_us(b.proc.pid)
        out = subprocess.run(cmd, capture_output=True, text=True,
                             timeout=duration + 120)
        after, b1 = setup.stats(), cpu_us(b.proc.pid)
        redirects = broker_redirects(b)
    finally:
        code = b.stop()
    if code != 0:
        sys.exit("compare: the broker on %s exited %d" % (setup.name, code))
    if out.returncode != 0:
        sys.exit("compare: %s failed:\n%s" % (" ".join(cmd), out.stderr))
    res = json.loads([l for l in out.stdout.splitlines()
                      if l.startswith("{")][-1])
    return figures(res, setup, before, after, b1 - b0, redirects)


def figures(res, setup, before, after, broker_us, redirects):
    """A run's figures per cycle, per shard and summed."""
    ops = max(res["ops"], 1)
    cpu = [a["cpu_us"] - o["cpu_us"] for o, a in zip(before, after)]
    scripts = [a["scripts"] - o["scripts"] for o, a in zip(before, after)]
    infos = sum(a["info"] - o["info"] - 3 for o, a in zip(before, after))
    sys_us = sum(a["sys_us"] - o["sys_us"] for o, a in zip(before, after))
    info_us = sum(a["info_usec"] - o["info_usec"]
                  for o, a in zip(before, after))
    errs = {e: sum(a["errors"].get(e, 0) - o["errors"].get(e, 0)
                   for o, a in zip(before, after)) for e in ERRORS}
    total = max(sum(scripts), 1)
    # The cycles a shard served: its share of the run's script calls.
    served = [ops * s / total for s in scripts]
    # Uncontended: a whole cycle's p99; contended: a wait's, pending
    # waits included (compare.py's figures for each).
    p99 = res["p99_ms"] if res["scenario"] == "uncontended" else \
        res["wait_p99_ms"]
    return {"setup": setup.name, "scenario": res["scenario"],
            "ops": res["ops"], "ops_per_s": res["ops_per_s"],
            "p99_ms": p99, "errors": res["errors"],
            "broker_us": broker_us / ops,
            "redis_us": [c / ops for c in cpu], "redis_sum_us": sum(cpu) / ops,
            "redis_us_served": [c / s if s else None
                                for c, s in zip(cpu, served)],
            "share": [s / total for s in scripts],
            "scripts_per_op": sum(scripts) / ops,
            "info_per_op": max(infos, 0) / ops,
            # Of Redis's CPU: the system's (reads, writes, epoll), and
            # the INFO calls in scripts (commandstats' usec).
            "redis_sys_us": sys_us / ops, "script_info_us": info_us / ops,
            "fairness": res.get("fairness"),
            "min_grants": res.get("min_grants"),
            "max_grants": res.get("max_grants"),
            "pending_waits": res.get("pending_waits"),
            "errors_redis": errs, "redirects_broker": redirects}


def f1(v):
    return "—" if v is None else ("%.0f" % v if v >= 100 else "%.1f" % v)


def row(r, rnd):
    per = " / ".join(f1(x) for x in r["redis_us"])
    served = " / ".join(f1(x) for x in r["redis_us_served"])
    share = " / ".join("%.0f %%" % (100 * x) for x in r["share"])
    e = r["errors_redis"]
    redir = "%d / %d / %d" % (e["MOVED"], e["ASK"], e["TRYAGAIN"])
    spread = "—" if r["min_grants"] is None else "%d–%d" % (
        r["min_grants"], r["max_grants"])
    return "| %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %.2f (%.2f) | " \
        "%d | %s; %s | %s |" % (
        r["setup"], rnd, r["ops_per_s"], f1(r["p99_ms"]), f1(r["broker_us"]),
        per, f1(r["redis_sum_us"]), served, share, r["scripts_per_op"],
        r["info_per_op"], e["CROSSSLOT"], redir,
        "—" if r["redirects_broker"] is None else r["redirects_broker"],
        spread)


P99 = {"uncontended": "a cycle",
       "contended": "a wait, those still waiting at the end included"}
HEAD = ["| setup | round | cycles/s | p99 (ms) | broker CPU µs / "
        "cycle | Redis CPU µs / cycle, each master | Redis CPU µs / cycle, "
        "sum | Redis CPU µs / cycle the master served | cycles served | "
        "scripts / cycle (INFO in them) | CROSSSLOT | MOVED / ASK / TRYAGAIN; broker's "
        "redirects | grants per client, least–most |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def by_share(r, k):
    """r[k] with the masters in order of cycles served, most first."""
    order = sorted(range(len(r["share"])), key=lambda i: -r["share"][i])
    return [r[k][i] for i in order]


def median_row(runs):
    """The median of the rounds, figure by figure; the masters in order of
    cycles served (a contended name's master differs from run to run)."""
    m = dict(runs[0])
    for k in ("ops_per_s", "p99_ms", "broker_us", "redis_sum_us",
              "scripts_per_op", "info_per_op"):
        m[k] = statistics.median(r[k] for r in runs)
    for k in ("redis_us", "redis_us_served", "share"):
        per = [by_share(r, k) for r in runs]
        m[k] = [statistics.median(p[i] for p in per if p[i] is not None)
                if any(p[i] is not None for p in per) else None
                for i in range(len(runs[0][k]))]
    m["errors_redis"] = {e: sum(r["errors_redis"][e] for r in runs)
                         for e in ERRORS}
    b = [r["redirects_broker"] for r in runs]
    m["redirects_broker"] = None if None in b else sum(b)
    g = [r["min_grants"] for r in runs]
    m["min_grants"] = None if None in g else min(g)
    m["max_grants"] = None if None in g else max(r["max_grants"]
                                                 for r in runs)
    return row(m, "median")


def tables(results, scenarios):
    out = []
    for s in scenarios:
        head = HEAD if s == "uncontended" else \
            [h.replace("cycle", "grant") for h in HEAD]
        out += ["", "%s (lockbench -s %s %s; p99 of %s):" % (
            s.capitalize(), s, " ".join(SCENARIOS[s]), P99[s]), ""] + head
        for name in SETUPS:
            runs = [r for r in results if r[1]["setup"] == name and
                    r[1]["scenario"] == s]
            out += [row(r, str(rnd)) for rnd, r in runs]
            out.append(median_row([r for _, r in runs]))
    return out


def idle(setups, seconds=5):
    """Each master's CPU per second with no broker: the cluster's own
    work (its bus, its cron) beside one Redis's cron."""
    before = [s.stats() for s in setups]
    time.sleep(seconds)
    after = [s.stats() for s in setups]
    return "; ".join("%s %s" % (s.name, " / ".join(
        "%.0f" % ((a["cpu_us"] - b["cpu_us"]) / seconds)
        for b, a in zip(bs, as_))) for s, bs, as_ in zip(setups, before, after))


def main(lockbench, args, base_conf, cpu_us, machine):
    """Every setup, every scenario, args.rounds times, alternated."""
    scenarios = args.cluster_scenarios
    setups, results = [], []
    tmp = tempfile.mkdtemp(prefix="lbcluster-bench-")
    try:
        for name, masters in zip(SETUPS, (0, 1, 3)):
            setups.append(Setup(name, tmp, masters))
        quiet = idle(setups)
        for rnd in range(1, args.rounds + 1):
            for s in scenarios:
                for setup in setups:
                    r = run(lockbench, tmp, setup, s, args.duration,
                            base_conf, cpu_us)
                    sys.stderr.write("round %d %s: %s\n" % (rnd, s,
                                                            json.dumps(r)))
                    results.append((rnd, r))
    finally:
        for setup in setups:
            setup.close()
        shutil.rmtree(tmp, ignore_errors=True)
    bad = [r for _, r in results if r["errors"] or
           r["errors_redis"]["CROSSSLOT"]]
    text = "\n".join([
        "Measured on %s; `bench/compare.py --cluster -d %g --rounds %d`, "
        "%g s per run, a fresh broker for each, the setups alternated; "
        "in a median row, each run's masters are taken in order of what "
        "they served, most first (a contended name's master differs from "
        "run to run)."
        % (machine, args.duration, args.rounds, args.duration), "",
        "Idle, no broker, Redis CPU µs per second per master: %s." % quiet]
        + tables(results, scenarios) + [
            "", "<details><summary>each run (one JSON line each)"
            "</summary>", "", "```"]
        + [json.dumps(dict(r, round=n)) for n, r in results]
        + ["```", "", "</details>"])
    return text, bad


if __name__ == "__main__":
    sys.exit("run it as bench/compare.py --cluster")

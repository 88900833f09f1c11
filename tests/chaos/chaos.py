#!/usr/bin/env python3
"""lockbroker chaos suite: two brokers on one durable Redis (or Sentinel's
master and replica, or a Redis Cluster of three shards), 8 worker
processes x 8 connections hammering 11 lock names (two of them held SHARED
or with LIMIT), a nemesis breaking things, and checkers that read what
happened. Exits 0 only if no violation was found. See
tests/chaos/README.md."""

import argparse
import json
import multiprocessing
import os
import random
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))

import checkers  # noqa: E402
import report  # noqa: E402
import workers  # noqa: E402
import nemesis  # noqa: E402
from nemesis import Nemesis  # noqa: E402
from topology import BROKER_CONF, LEASE_MS, Topology  # noqa: E402

VARIANTS = ("none", "no_fence", "blind_release", "no_validity", "no_limit",
            "no_foreign_notice", "owed_blind", "no_tickets", "no_grace",
            "no_clock_fence", "no_confirm", "no_eviction_check")
# The variants broken only on a cluster, which the cluster topology's
# self-test (--self-test --cluster) runs instead of the others.
CLUSTER_VARIANTS = ("lock_key_only", "one_scope")
# The checker each broken variant is for. The self-test passes only if
# each variant is caught, and caught by this one.
CATCHES = {"no_fence": "fences", "blind_release": "overlaps",
           "no_validity": "late_grants", "no_limit": "modes",
           "no_foreign_notice": "belief",
           # the newer grant its owed release deleted, the name then
           # taken by another (the sweeper): either invariant checker
           "owed_blind": ("overlaps", "belief"),
           "no_tickets": "fairness", "no_grace": "overlaps",
           "no_clock_fence": "fences",
           # a hold Redis lost, its holder not told: whichever of the two
           # invariant checkers sees the other holder first
           "no_confirm": ("overlaps", "belief"),
           "no_eviction_check": "eviction",
           # a script that names a key it was not passed fails half
           # applied in a slot being moved: Redis and the broker say so
           "lock_key_only": "cluster_logs",
           # a shard's new incarnation puts back another slot's holds,
           # not its own: those its new master never got are told stolen
           "one_scope": "put_back"}


def catchers(variant):
    """The checkers any of which catching variant passes its self-test."""
    c = CATCHES.get(variant)
    return c if isinstance(c, tuple) else (c,) if c else ()
# Load the self-test changes for a variant (workers.py cfg keys): owed_blind
# breaks only a release owed to Redis for a lease still running when it is
# sent again, i.e. workers.py's long leases; with 5 % of the cold names'
# acquires long it is caught in about one run in two within 60 s, with
# half of them long within seconds.
SELF_TEST_LOAD = {"owed_blind": {"long_share": 0.5},
                  # no_confirm: holds whose keys and counters were deleted
                  # go untold until their lease ends; long ones show it,
                  # held past the bound on a holder's late news (1.3 s)
                  # while the nemesis's taker holds the name too.
                  "no_confirm": {"long_share": 0.5,
                                 "long_hold_s": (3.0, 5.0)},
                  # one_scope: holds a shard's failover lost outlive its
                  # grace period only if long.
                  "one_scope": {"long_share": 0.5}}
# Variants whose window a run may not open: owed_blind's needs a RELEASE
# of a long lease sent during a Redis stall, then the same token acquired
# again (workers.py's reuse). Once it opens, the nemesis's sweeper takes
# the name (Nemesis._after_pause_redis), as its taker does a wiped name
# for no_confirm; a run in which it never opened gets a second run with
# another seed.
BY_CHANCE = ("owed_blind",)
N_WORKERS, N_CONNS = 8, 8
COMMAND_TIMEOUT_S = BROKER_CONF["redis"]["command_timeout_ms"] / 1000.0
DEFAULT_BINARY = os.path.join(HERE, "..", "..", "build-chaos", "src",
                              "lockbrokerd")


class NotChaosBuild(Exception):
    """--fault-variant asked of a daemon built without chaos_faults."""


class RecheckError(Exception):
    """--recheck found no journals, or no fault log for them."""


def parse_args(argv):
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=60,
                   help="seconds of load and faults (per variant with "
                        "--self-test)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--fault-variant", choices=VARIANTS + CLUSTER_VARIANTS,
                   default="none",
                   help="run brokers broken on purpose (needs a build with "
                        "-Dchaos_faults=true)")
    p.add_argument("--self-test", action="store_true",
                   help="run each broken variant; pass if each is caught")
    p.add_argument("--only", metavar="V1,V2",
                   help="with --self-test: only these variants")
    p.add_argument("--sentinel", action="store_true",
                   help="a master, a replica and three Sentinels instead "
                        "of one Redis; adds the lagging_failover fault")
    p.add_argument("--cluster", action="store_true",
                   help="a Redis Cluster of three masters with a replica "
                        "each instead of one Redis; its faults are shard "
                        "failovers and slots moved (with --self-test: the "
                        "cluster variants)")
    p.add_argument("--weights", metavar="KIND=N,...", default="",
                   help="put each kind named N times (not once) into "
                        "every round of faults, e.g. lagging_failover=3 "
                        "for a run that must see many failovers")
    p.add_argument("--brokers", type=int, default=2,
                   help="how many brokers (at least 2; b1 runs under "
                   "libfaketime)")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--keep", action="store_true",
                   help="keep the temporary directory (journals, logs)")
    p.add_argument("--lockbrokerd", default=os.path.normpath(DEFAULT_BINARY))
    p.add_argument("--recheck", metavar="DIR",
                   help="run the checkers again over a kept run: DIR is "
                        "the directory --keep kept (its w*.jsonl journals, "
                        "and run.json: faults, writes, readings), or the "
                        "journal file a run with violations wrote")
    p.add_argument("--faults", metavar="FILE",
                   help="with --recheck, for a directory kept without "
                        "run.json: the --json the run wrote (its faults, "
                        "times and readings)")
    a = p.parse_args(argv)
    if a.brokers < 2:
        p.error("--brokers: at least 2")
    if a.seed is None:
        a.seed = int(time.time() * 1000) % 1000000
    return a


def main(argv=None):
    """Run once or self-test; print the summary, write the JSON."""
    args = parse_args(argv)
    try:
        if args.recheck:
            res = recheck(args.recheck, args.faults)
            print(report.summary(res))
            code, doc = (0 if res["ok"] else 1), res
        elif args.self_test:
            code, doc = self_test(args)
        else:
            res = run(args, args.fault_variant)
            print(report.summary(res))
            code, doc = (0 if res["ok"] else 1), res
    except (NotChaosBuild, RecheckError) as e:
        print("chaos: %s" % e, file=sys.stderr)
        return 2
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1, default=str)
    return code


def self_test(args):
    """Each broken variant must be caught by the checker it is for
    (CATCHES); others that saw it too are listed."""
    results, lines = {}, []
    variants = CLUSTER_VARIANTS if args.cluster else VARIANTS[1:]
    only = args.only.split(",") if args.only else variants
    for i, v in enumerate(variants):
        if v not in only:
            continue
        res = run(args, v, seed=args.seed + i, stop_when_caught=True)
        print(report.summary(res) + "\n")
        caught = [n for n in report.CHECKERS
                  if res["checks"].get(n, {}).get("violations")]
        second = False
        if not caught and v in BY_CHANCE:
            res = run(args, v, seed=args.seed + 1000 + i,
                      stop_when_caught=True)
            print(report.summary(res) + "\n")
            caught = [n for n in report.CHECKERS
                      if res["checks"].get(n, {}).get("violations")]
            second = True
        results[v] = {"caught_by": caught, "expected": catchers(v),
                      "ok": any(c in caught for c in catchers(v)),
                      "run_time_s": res["run_time_s"],
                      "violations": {n: len(res["checks"][n]["violations"])
                                     for n in res["checks"]},
                      "faults": [f["kind"] for f in res["faults"]],
                      "examples": {n: res["checks"][n]["violations"][:3]
                                   for n in caught}}
        lines.append("  %-18s %s (%.0f s%s)%s" % (
            v, "caught by " + ", ".join(caught) if caught else "NOT CAUGHT",
            res["run_time_s"], ", in a second run" if second else "",
            "" if results[v]["ok"] else
            "  (NOT by %s)" % " or ".join(catchers(v))))
    ok = all(r["ok"] for r in results.values())
    print("== self-test: %s\n%s" % ("PASS" if ok else "FAIL",
                                    "\n".join(lines)))
    return (0 if ok else 1), {"self_test": results, "ok": ok}


def parse_weights(text):
    """--weights: {kind: copies in every round}."""
    out = {}
    for item in filter(None, text.split(",")):
        kind, _, n = item.partition("=")
        if kind not in nemesis.SENTINEL_KINDS + nemesis.CLUSTER_KINDS or \
                not n.isdigit():
            sys.exit("--weights: %r is not KIND=N with a fault kind" % item)
        out[kind] = int(n)
    return out


def run(args, variant, seed=None, stop_when_caught=False):
    """One run of the whole topology; the result dict the report reads."""
    seed = args.seed if seed is None else seed
    t0 = time.monotonic()
    topo = Topology(args.lockbrokerd, variant, seed,
                    sentinel=getattr(args, "sentinel", False),
                    brokers=getattr(args, "brokers", 2),
                    cluster=getattr(args, "cluster", False))
    procs = []
    try:
        if variant != "none" and not topo.variant_active():
            raise NotChaosBuild(
                "%s ignores LOCKBROKER_CHAOS_FAULT=%s: build it with "
                "-Dchaos_faults=true" % (args.lockbrokerd, variant))
        base = {b.name: _settled(topo, b) for b in topo.brokers}
        res = _load_and_break(args, topo, seed, stop_when_caught, procs)
        res["readings"] = _end_readings(topo, base)
        res["exit_codes"] = topo.stop_brokers()
        if topo.cluster:
            res["log_lines"] = topo.bad_log_lines()
        res.update(variant=variant, seed=seed, duration=args.duration,
                   sentinel=topo.sentinel, cluster=bool(topo.cluster),
                   run_time_s=round(time.monotonic() - t0, 1))
        if args.keep:
            _keep_run(topo.tmpdir, res)
    finally:
        _kill_workers(procs)
        topo.close(keep=args.keep)
    return _judge(res)


# What a kept directory's run.json holds besides the journals (w*.jsonl):
# everything else the checkers and the report read.
RUN_KEYS = ("writes", "faults", "t0", "t_end", "readings", "exit_codes",
            "final_stats", "kill_stats", "workers_alive_at_end", "variant",
            "seed", "duration", "run_time_s", "sentinel", "cluster",
            "log_lines")


def _keep_run(tmpdir, res):
    """Write run.json into the kept directory, so that --recheck can
    judge the run again (with checkers written since)."""
    with open(os.path.join(tmpdir, "run.json"), "w") as f:
        json.dump({k: res[k] for k in RUN_KEYS if k in res}, f,
                  default=str)


def recheck(path, faults_file=None):
    """The checkers again over a kept run: its journals and its run.json
    (or, for a directory kept before run.json, the run's --json given as
    faults_file: faults and times, the readings and the INFO counters;
    without the resource's write log, stale_writes is the run's own
    verdict). path may also be the journal file of a run with violations
    (records, writes, faults, t_end)."""
    if os.path.isfile(path):
        with open(path) as f:
            run = json.load(f)
        records = run.pop("records")
    else:
        names = sorted(n for n in os.listdir(path)
                       if n.startswith("w") and n.endswith(".jsonl"))
        if not names:
            raise RecheckError("no journals (w*.jsonl) in %s" % path)
        records = [r for n in names
                   for r in workers.read_journal(os.path.join(path, n))]
        meta = os.path.join(path, "run.json")
        if os.path.exists(meta) and not faults_file:
            faults_file = meta
        if not faults_file:
            raise RecheckError(
                "%s has no run.json (kept before it was written): give the "
                "run's --json as --faults FILE" % path)
        with open(faults_file) as f:
            run = json.load(f)
    if "faults" not in run:
        raise RecheckError("no fault log in %s" % (faults_file or path))
    t_last = max([r.get(k) or 0 for r in records
                  for k in ("t", "t_reply", "t_granted", "t_release_reply",
                            "t_lost", "t_notheld", "t_disconnect")] + [0])
    res = {"records": records, "faults": run["faults"],
           "t0": run.get("t0", min([f["t_start"] for f in run["faults"]] +
                                   [t_last])),
           "t_end": run.get("t_end", t_last),
           "readings": run.get("readings"),
           "final_stats": run.get("final_stats", {}),
           "kill_stats": run.get("kill_stats", []),
           "workers_alive_at_end": run.get("workers_alive_at_end", []),
           "exit_codes": run.get("exit_codes"),
           "variant": run.get("variant", "none"),
           "seed": run.get("seed", 0), "duration": run.get("duration", 0),
           "sentinel": run.get("sentinel", False),
           "cluster": run.get("cluster", False),
           "log_lines": run.get("log_lines"),
           "run_time_s": run.get("run_time_s", 0)}
    old = run.get("checks", {})
    if res["readings"] is None and "resources" in old:
        res["readings"] = old["resources"].get("readings")
    writes = run.get("writes")
    res["writes"] = writes if writes is not None else []
    res = _judge(res, keep_journal=False)
    if writes is None and "stale_writes" in old:
        # The resource's write log lives in memory: a run that did not
        # keep it is judged by its own verdict.
        res["checks"]["stale_writes"] = dict(
            old["stale_writes"], not_rechecked="no write log: the run's "
            "own verdict")
        res["operations"]["writes_accepted"] = old["stale_writes"].get(
            "accepted", 0)
        res["operations"]["stale_writes_rejected"] = old[
            "stale_writes"].get("rejected", 0)
        res["violations"] = sum(len(c["violations"])
                                for c in res["checks"].values())
        res["ok"] = res["violations"] == 0
    if "broker_stats" in run and not run.get("final_stats"):
        res["broker_stats"] = run["broker_stats"]
    res["rechecked"] = path
    print("chaos: rechecking %s (%d records, %d faults)" % (
        path, len(records), len(res["faults"])))
    return res


def _load_and_break(args, topo, seed, stop_when_caught, procs):
    """Workers and nemesis for the duration; the collected records."""
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.RawValue("b", 0)
    held = ctx.RawArray("i", 2 * N_WORKERS)
    t0 = time.monotonic()
    journals = _start_workers(ctx, topo, seed, stop, held, procs,
                              SELF_TEST_LOAD.get(topo.variant, {})
                              if stop_when_caught else {})
    journals.append(os.path.join(topo.tmpdir, "wtaker.jsonl"))
    nem = Nemesis(topo, [p.pid for p in procs], held, random.Random(seed),
                  args.duration,
                  self_test=topo.variant if stop_when_caught else None,
                  weights=parse_weights(args.weights),
                  journal=workers.Journal(journals[-1]))
    nem.start()
    _watch(args.duration, catchers(topo.variant) if stop_when_caught
           else None, topo, nem, journals)
    nem.stop()
    stop.value = 1
    for p in procs:
        os.kill(p.pid, signal.SIGCONT)      # never leave one stopped
        p.join(30)
    return {"records": [r for j in journals for r in workers.read_journal(j)],
            "writes": topo.resource.snapshot(), "faults": nem.faults,
            "t0": t0, "t_end": time.monotonic(),
            "final_stats": {b.name: b.stats() for b in topo.brokers},
            "kill_stats": nem.kill_stats,
            "workers_alive_at_end": [p.name for p in procs if p.is_alive()]}


def _start_workers(ctx, topo, seed, stop, held, procs, load):
    """Spawn the worker processes (fresh interpreters: no fork of our
    threads); their journal paths. load: changes to the workers' cfg."""
    journals = []
    for w in range(N_WORKERS):
        journals.append(os.path.join(topo.tmpdir, "w%d.jsonl" % w))
        cfg = dict({"ports": topo.broker_ports(), "lease_ms": LEASE_MS,
                    "resource_port": topo.resource.port, "seed": seed,
                    "journal": journals[w], "conns": N_CONNS}, **load)
        p = ctx.Process(target=workers.worker_main, args=(w, cfg, stop, held),
                        name="w%d" % w)
        p.start()
        procs.append(p)
    return journals


def _watch(duration, catcher, topo, nem, journals):
    """Sleep out the run; in self-test (catcher: the checkers the variant
    is for), stop as soon as one of them sees a violation in what has been
    journalled so far."""
    end = time.monotonic() + duration
    while time.monotonic() < end:
        time.sleep(min(3.0, max(0.0, end - time.monotonic())))
        if not catcher:
            continue
        records = [r for j in journals for r in workers.read_journal(j)]
        found = checkers.run_all(records, topo.resource.snapshot(),
                                 list(nem.faults), time.monotonic(),
                                 COMMAND_TIMEOUT_S, log_lines=(
                                     topo.bad_log_lines() if topo.cluster
                                     else None))
        if any(found[c]["violations"] for c in catcher):
            return


def _settled(topo, broker):
    """A broker's baseline (fds beyond clients, RSS) once two readings a
    moment apart agree (Redis connections come up asynchronously)."""
    last = topo.resources(broker)
    for _ in range(20):
        time.sleep(0.25)
        now = topo.resources(broker)
        if now[0] == last[0]:
            return now
        last = now
    return last


def _end_readings(topo, base):
    """Each broker's fds and RSS after the workers left, against its
    baseline (a restarted broker against its first process's)."""
    out = []
    for b in topo.brokers:
        r = {"broker": b.name, "base_fds": base[b.name][0],
             "base_rss_kib": base[b.name][1]}
        try:
            fds, rss = topo.wait_quiet(b, r["base_fds"])
            r.update(end_fds=fds, end_rss_kib=rss)
            if topo.cluster:
                r["redis_conns"] = topo.resources(b)[2]
                r["redis_nodes"] = len(topo.cluster.nodes)
            if fds != r["base_fds"]:
                r["peers"] = b.peers()
        except (OSError, ValueError, KeyError) as e:
            r["error"] = "could not read: %r" % (e,)
        out.append(r)
    return out


def _kill_workers(procs):
    """Kill whatever worker is still alive (after a failure)."""
    for p in procs:
        if p.is_alive():
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.join(5)


def _judge(res, keep_journal=True):
    """Run the checkers and count violations (keep_journal: write the
    journals to /tmp if there are any, for a post-mortem)."""
    res["checks"] = checkers.run_all(res["records"], res["writes"],
                                     res["faults"], res["t_end"],
                                     COMMAND_TIMEOUT_S, res.pop("readings"),
                                     res.pop("log_lines", None))
    res["operations"] = report.operations(res["records"], res["checks"])
    res["grants_back"] = report.grants_back(res["faults"])
    if res.get("cluster"):
        res["cluster_faults"] = report.cluster_counts(res["faults"])
    res["broker_stats"] = report.broker_stats(res.pop("final_stats"),
                                              res.pop("kill_stats"))
    res["violations"] = sum(len(c["violations"])
                            for c in res["checks"].values())
    if res["workers_alive_at_end"]:
        res["violations"] += 1
        res["checks"]["liveness"]["violations"].append(
            "workers did not stop: %s" % res["workers_alive_at_end"])
    for name, code in sorted((res.get("exit_codes") or {}).items()):
        if code != 0:
            res["violations"] += 1
            res["checks"]["liveness"]["violations"].append(
                "%s did not exit cleanly after SIGTERM: %s" % (name, code))
    res["ok"] = res["violations"] == 0
    if not res["ok"] and res["variant"] == "none" and keep_journal:
        # What the clients saw, for a post-mortem of the violations (the
        # checkers are pure functions of it).
        fd, path = tempfile.mkstemp(prefix="lockbroker-chaos-journal-",
                                    suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({k: res[k] for k in ("records", "writes", "faults",
                                           "t_end")}, f)
        res["journal"] = path
        print("chaos: the journals are in %s" % path)
    del res["records"], res["writes"]
    return res


if __name__ == "__main__":
    sys.exit(main())

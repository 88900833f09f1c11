"""Turns a run's records and checker results into the summary a person
reads and the JSON a program reads."""

import collections
import re

from checkers import (FAIR_NAME, OVERTAKE_S, SHOW, STARVE_FACTOR,
                      mode_label, mode_names)

SHOW_EXPLAINED = 40        # the JSON has every one

CHECKERS = ("fences", "stale_writes", "overlaps", "modes", "belief",
            "late_grants", "liveness", "eviction", "resources",
            "fairness", "cluster_logs", "put_back")
# The cluster topology's faults that fail a shard over.
FAILOVER_KINDS = ("shard_failover", "master_paused", "stale_promotion",
                  "stale_takeover", "stale_failback", "master_killed")
STAT_KEYS = ("grants_total", "late_grants_total", "timeouts_total",
             "releases_total", "notheld_total", "renewal_failures_total",
             "lost_expired_total", "lost_stolen_total",
             "lost_unavailable_total", "redis_timeouts_total",
             "redis_connects_total", "redis_batched_total")


def operations(records, checks):
    """Counts of what the workers did and what they were told."""
    acq = collections.Counter()
    kinds, releases, lost = (collections.Counter() for _ in range(3))
    by_mode = collections.defaultdict(collections.Counter)
    shared = mode_names(r for r in records if r["type"] in ("acq", "grant"))
    stale, disconnects, unexpected = 0, 0, 0
    unavailable = collections.Counter()
    ops, same_token = collections.Counter(), collections.Counter()
    for r in records:
        if r["type"] == "op":
            ops["%s via %s: %s" % (r["op"], r["via"],
                                   _reply_kind(r.get("reply", "")))] += 1
        if r["type"] in ("acq", "grant") and r.get("reused_token"):
            same_token["after an owed release: " + (
                "ok" if r["type"] == "grant" else
                _reply_kind(r["reply"]))] += 1
        if r["type"] == "grant" and r.get("regrant_of"):
            same_token["held on another connection"] += 1
            same_token["their LOCKS listings"] += len(r.get("locks", ()))
            if r.get("lost_reason"):
                same_token["their EVENT LOST " + r["lost_reason"]] += 1
            continue
        if r["type"] == "grant":
            same_token["LOCKS listings while holding"] += len(
                r.get("locks", ()))
            same_token["long (TTL 8000) holds"] += bool(r.get("long"))
        if r["type"] in ("acq", "grant") and r["name"] in shared:
            by_mode["%s %s" % (r["name"], mode_label(r))][
                "ok" if r["type"] == "grant" else
                _reply_kind(r["reply"])] += 1
        if r["type"] == "acq":
            acq[_reply_kind(r["reply"])] += 1
            if r["reply"].startswith("ERR UNAVAILABLE"):
                unavailable[re.sub(r"\d+", "N", r["reply"][16:])] += 1
        elif r["type"] == "grant":
            acq["ok"] += 1
            kinds["%s %d" % (r["kind"], r["ttl"])] += 1
            if "release_reply" in r:
                releases[_reply_kind(r["release_reply"])] += 1
            if r.get("lost_reason"):
                lost[r["lost_reason"]] += 1
            stale += "woke_late_s" in r
            unexpected += bool(r.get("unexpected"))
        elif r["type"] == "disconnect":
            disconnects += 1
        elif r["type"] == "event":
            lost["unmatched " + r["reason"]] += 1
    sw = checks["stale_writes"]
    return {"acquires": dict(acq), "grants_by_kind": dict(kinds),
            "shared_names": {k: dict(v) for k, v in sorted(by_mode.items())},
            "releases": dict(releases), "event_lost": dict(lost),
            "holders_woken_past_deadline": stale,
            "broken_connections": disconnects,
            "unexpected_lines": unexpected,
            "writes_accepted": sw["accepted"],
            "unavailable": dict(unavailable.most_common()),
            "operations_on_own_grant": dict(sorted(ops.items())),
            "same_token": dict(sorted(same_token.items())),
            "stale_writes_rejected": sw["rejected"]}


def _reply_kind(reply):
    """OK, TIMEOUT, 'ERR CODE' or disconnect."""
    w = reply.split()
    if not w:
        return "empty"
    if w[0] == "ERR" and len(w) > 1:
        return "ERR " + w[1]
    return w[0].lower() if w[0] in ("OK", "TIMEOUT") else w[0]


def broker_stats(final, killed):
    """INFO counters summed over every broker process of the run."""
    out = collections.Counter()
    for s in list(final.values()) + killed:
        for k in STAT_KEYS:
            if k in s:
                out[k] += int(s[k])
    return dict(out)


def fault_lines(faults, t0):
    """One line per fault: when, what, how long, and the liveness probe."""
    lines = []
    for f in faults:
        extra = " ".join("%s=%s" % (k, f[k]) for k in
                         ("node", "delay_ms", "loss", "offset", "uptime_s",
                          "holding", "how", "drops", "lag_s",
                          "dropped_bytes", "promoted_after_s", "promoted",
                          "mode", "names_held", "slot", "to", "keys_moved",
                          "pause_s", "moved_name", "error")
                         if k in f)
        live = ", ".join(
            "%s %s" % (p["broker"], "ok %.2fs" % p["after_s"] if p["ok"]
                       else "FAILED") for p in f.get("liveness", []) if p)
        lines.append("  #%-2d %6.1fs-%6.1fs %-13s %-9s %s [%s]" % (
            f["n"], f["t_start"] - t0, f.get("t_heal", f["t_start"]) - t0,
            f["kind"], f.get("target", "?"), extra, live))
    return lines


def _pct(xs):
    """{n, p50, max} of a list of seconds (p50: the lower median)."""
    xs = sorted(xs)
    return {"n": len(xs), "p50": xs[(len(xs) - 1) // 2],
            "max": xs[-1]} if xs else {"n": 0}


def grants_back(faults):
    """Per fault kind, how long grants were refused after each fault: from
    its heal until every live broker granted the liveness probe a free
    name (the probe tries every 50 ms), p50 and max over the faults of the
    kind (one that never got them back within the probe's window counts
    as 'failed'); for lagging_failover also from the master's kill, and
    how long the Sentinels took to promote the replica."""
    per = collections.defaultdict(lambda: collections.defaultdict(list))
    for f in faults:
        probes = [p for p in f.get("liveness", []) if p and
                  p.get("last") != "broker down"]
        d = per[f["kind"]]
        if not probes or "t_heal" not in f:
            continue
        if not all(p["ok"] for p in probes):
            d["failed"].append(f["n"])
            continue
        back = max(p["after_s"] for p in probes)
        d["after_heal"].append(round(back, 3))
        if f.get("t_kill") is not None:
            d["after_kill"].append(round(f["t_heal"] + back - f["t_kill"],
                                         3))
        if f.get("promoted_after_s") is not None:
            d["promotion"].append(f["promoted_after_s"])
    return {k: {w: (v if w == "failed" else _pct(v)) for w, v in d.items()}
            for k, d in sorted(per.items())}


def cluster_counts(faults):
    """The cluster topology's shard failovers (by kind, and by mode for
    CLUSTER FAILOVER) and slot migrations, those of held names apart, and
    the keys moved; faults that failed to start are not counted."""
    done = [f for f in faults if "error" not in f]
    fo = [f for f in done if f["kind"] in FAILOVER_KINDS]
    mig = [f for f in done if f["kind"] == "reshard_held"]
    by = collections.Counter(
        f["kind"] + (" " + f["mode"] if f.get("mode") else "") for f in fo)
    return {"failovers": len(fo),
            "failovers_of_held_names": sum(bool(f.get("names_held"))
                                           for f in fo),
            "failovers_by_kind": dict(sorted(by.items())),
            "migrations": len(mig),
            "migrations_of_held_names": sum(bool(f.get("names_held"))
                                            for f in mig),
            "migrations_waited_on": sum(bool(f.get("waited")) for f in mig),
            "keys_moved": sum(f.get("keys_moved", 0) for f in mig),
            "failed_to_start": [f["n"] for f in faults if "error" in f]}


def grants_back_lines(gb):
    """The summary's lines for grants_back()."""
    out = ["grants refused after each fault, until every live broker "
           "granted again (s):"]
    for kind, d in gb.items():
        parts = []
        for w, label in (("after_heal", "after the heal"),
                         ("after_kill", "after the master's kill"),
                         ("promotion", "promotion took")):
            if d.get(w, {}).get("n"):
                parts.append("%s p50 %.2f max %.2f (%d)" % (
                    label, d[w]["p50"], d[w]["max"], d[w]["n"]))
        if d.get("failed"):
            parts.append("not within the liveness window: #%s" % ", #".join(
                str(n) for n in d["failed"]))
        out.append("  %-16s %s" % (kind, "; ".join(parts) or "no probe"))
    return out


def summary(res):
    """The human summary of one run."""
    ops, checks = res["operations"], res["checks"]
    out = ["== lockbroker chaos: variant %s, seed %d%s: %.0f s of load and "
           "faults (of %.0f s asked), %.0f s in all" % (
               res["variant"], res["seed"], ", Sentinel topology"
               if res.get("sentinel") else ", Redis Cluster topology"
               if res.get("cluster") else "", res["t_end"] - res["t0"],
               res["duration"], res["run_time_s"])]
    a = ops["acquires"]
    out.append("operations: acquires ok %d, timeout %d, errors %s, "
               "disconnected %d" % (
                   a.get("ok", 0), a.get("timeout", 0),
                   {k: v for k, v in a.items() if k.startswith("ERR")} or 0,
                   a.get("disconnect", 0)))
    if ops.get("unavailable"):
        out.append("  acquires answered ERR UNAVAILABLE: %s" % "; ".join(
            "%s %d" % kv for kv in ops["unavailable"].items()))
    out.append("  grants by kind %s; releases %s" % (ops["grants_by_kind"],
                                                      ops["releases"]))
    out.append("  SHARED/LIMIT names' acquires %s" % ops["shared_names"])
    out.append("  EVENT LOST %s; holders woken past their deadline %d; "
               "broken connections %d" % (
                   ops["event_lost"], ops["holders_woken_past_deadline"],
                   ops["broken_connections"]))
    out.append("  writes accepted %d, stale writes rejected %d" % (
        ops["writes_accepted"], ops["stale_writes_rejected"]))
    out.append("  acting on one's own grant through another connection: "
               "%s" % ops["operations_on_own_grant"])
    out.append("  same token: %s" % ops["same_token"])
    out.append("  brokers' INFO (summed over restarts): %s" %
               res["broker_stats"])
    out.append("faults: %s" % dict(collections.Counter(
        f["kind"] for f in res["faults"])))
    out += fault_lines(res["faults"], res["t0"])
    if res.get("cluster_faults"):
        cf = res["cluster_faults"]
        out.append("cluster: %d shard failovers (%d of held names) %s; %d "
                   "slot migrations (%d of held names, %d waited on), %d "
                   "keys moved; faults that failed to start: %s" % (
                       cf["failovers"], cf["failovers_of_held_names"],
                       cf["failovers_by_kind"], cf["migrations"],
                       cf["migrations_of_held_names"],
                       cf["migrations_waited_on"], cf["keys_moved"],
                       cf["failed_to_start"] or "none"))
    if res.get("grants_back") is not None:
        out += grants_back_lines(res["grants_back"])
    out.append("violations by checker:")
    for name in CHECKERS:
        if name in checks:
            out += _checker_lines(name, checks[name])
    for name, what in (("overlaps", "overlaps"),
                       ("modes", "SHARED/LIMIT overlaps"),
                       ("belief", "beliefs past a newer grant")):
        ex = checks[name]["explained"]
        out.append("explained %s: %d" % (what, len(ex)))
        out += ["  " + l for l in ex[:SHOW_EXPLAINED]]
        if len(ex) > SHOW_EXPLAINED:
            out.append("  ... %d more in the JSON" % (len(ex) -
                                                      SHOW_EXPLAINED))
    if "fairness" in checks:
        out += fairness_lines(checks["fairness"])
    out.append("liveness checks passed: %d of %d" % (
        checks["liveness"]["passed"],
        checks["liveness"]["passed"] + len(checks["liveness"]["violations"])))
    if res.get("exit_codes"):
        out.append("broker exit codes after SIGTERM: %s" % res["exit_codes"])
    variant = res.get("variant", "none")
    if variant != "none":   # the self-test: these are meant to be caught
        out.append("RESULT of variant %s, broken on purpose: %s" % (
            variant, "%d violations (caught)" % res["violations"]
            if not res["ok"] else "no violation (NOT caught)"))
    else:
        out.append("RESULT: %s" % ("PASS (no violation)" if res["ok"] else
                                   "FAIL (%d violations)" % res["violations"]))
    return "\n".join(out)


def fairness_lines(c, name=FAIR_NAME):
    """The fairness checker's figures (checkers.check_fairness)."""
    pc, wb = c["grants_per_client"], c["waiters_by_broker"]
    longest, worst = c["longest_wait"], c["worst_wait"]
    judged = sum(c["judged_by_broker"].values())
    lines = [
        "fairness of %s: grants by broker %s; per client max %d, min %d "
        "(%d clients, %d with none%s)" % (
            name, ", ".join("%s %d" % kv for kv in
                            c["grants_by_broker"].items()) or "none",
            pc["max"], pc["min"], pc["clients"], len(pc["with_none"]),
            ": " + " ".join(pc["with_none"]) if pc["with_none"] else ""),
        "  exclusive waiters %d (%s); judged %d (%s), excused %d (a fault "
        "met the wait: %s)" % (
            c["waiters"], "; ".join(
                "%s %s" % (b, ", ".join("%s %d" % kv for kv in
                                        sorted(o.items())))
                for b, o in wb.items()),
            judged, ", ".join("%s %d" % kv for kv in
                              c["judged_by_broker"].items()),
            c["waiters"] - judged, c["excused_waits"] or "none"),
        "  overtakes %d (a grant to a request sent > %.0f ms after a "
        "waiter not yet granted%s), %d more excused" % (
            c["overtakes"], OVERTAKE_S * 1e3,
            ": sent %d-%d ms after" % tuple(c["overtake_lead_ms"])
            if c.get("overtake_lead_ms") else "", c["overtakes_excused"]),
        "  starvation: judged where others were granted meanwhile, but "
        "not %d waits that met a stop or link fault of the other broker"
        % c.get("starvation_excused", 0)]
    for what, f in (("longest unexcused wait", longest),
                    ("worst unexcused wait against its bound", worst)):
        if f:
            lines.append("  %s %d ms: %s; %d holders ahead (%d granted "
                         "meanwhile) held it %d ms in all, %d x that (at "
                         "least %.0f ms each) is %d ms" % (
                             what, f["wait_ms"], f["waiter"],
                             f["holders_ahead"], f["granted_meanwhile"],
                             f["held_ms"], STARVE_FACTOR, OVERTAKE_S * 1e3,
                             f["bound_ms"]))
    return lines


def _checker_lines(name, c):
    """A checker's count, its notes, and its first violations."""
    notes = {k: (len(v) if isinstance(v, list) else v) for k, v in c.items()
             if k not in ("violations", "explained", "readings")}
    if name == "fairness":
        notes = {k: c[k] for k in ("overtakes", "overtakes_excused")}
    head = "  %-13s %d%s" % (name, len(c["violations"]),
                             "  (%s)" % notes if notes else "")
    lines = [head] + ["      " + v for v in c["violations"][:SHOW]]
    if len(c["violations"]) > SHOW:
        lines.append("      ... %d more" % (len(c["violations"]) - SHOW))
    if name == "resources":
        for r in c["readings"]:
            lines.append("      %s" % r)
    return lines

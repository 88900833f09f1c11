"""The checkers: pure functions over the workers' journals, the resource's
write log and the nemesis' fault log. Each returns a dict with at least
"violations" (a list; empty when the property held).

Every time is the client's time.monotonic(). A broker's lease starts at
a moment the client cannot see, somewhere between sending ACQUIRE and
reading OK; the checks below only use bounds that hold whichever it was.
"""

import collections

CLOCK_DRIFT = 0.01        # locks.clock_drift, the brokers' default
# A client's clock reading is off the broker's by its scheduling delays
# (both ways, on a loaded 2-core machine running other jobs too): 24 ms
# has been seen, so judge only what is later than this.
SLACK_S = 0.150
RSS_SLACK_KIB = 20 * 1024
SHOW = 20                 # violations listed per checker (all are counted)


def validity_end(g):
    """The earliest moment g's lease can have ended: the broker counts its
    validity from before it sent the try, which is after t_sent. For a
    session lock (renewed, unseen) this is a lower bound too."""
    return g["t_sent"] + (g["ttl"] * (1 - CLOCK_DRIFT) - 2) / 1000.0


def hold_end(g, t_end):
    """When the holder stopped using the lock: it sent RELEASE, read EVENT
    LOST, saw its connection break, or the run ended."""
    ends = [g[k] for k in ("t_release_sent", "t_lost", "t_disconnect")
            if g.get(k) is not None]
    return min(ends) if ends else t_end


def told_lost(g):
    """(when, how) the holder learnt it had lost the lock, or (None, None)
    if it never did: EVENT LOST, a broken connection, RELEASE NOTHELD."""
    told = []
    if g.get("t_lost") is not None:
        told.append((g["t_lost"], "EVENT LOST " + g.get("lost_reason", "?")))
    if g.get("t_disconnect") is not None:
        told.append((g["t_disconnect"], "connection broke"))
    if str(g.get("release_reply", "")).startswith("ERR NOTHELD"):
        told.append((g["t_release_reply"], "RELEASE answered NOTHELD"))
    return min(told) if told else (None, None)


def _windows(faults, kinds, target):
    """(start, heal) of the faults of these kinds on this target."""
    return [(f["t_start"], f.get("t_heal", float("inf"))) for f in faults
            if f["kind"] in kinds and f.get("target") == target]


def _during(windows, a, b):
    """Whether any window meets [a, b]."""
    return any(s <= b and e >= a for s, e in windows)


def _worker_paused(g, faults):
    """Whether g's worker was stopped between ACQUIRE and reading OK, so
    it may have read a timely OK late."""
    return _during(_windows(faults, ("pause_worker",), "w%d" % g["w"]),
                   g["t_sent"], g["t_granted"])


def _mode(g):
    """A hold's sharing mode: "exclusive", "shared" or "limit" (journals
    from before the modes have none: exclusive)."""
    return g.get("mode", "exclusive")


def _excludes(a, g):
    """Whether holds a and g exclude each other: one of them is exclusive.
    SHARED readers share, and so do LIMIT holders (up to their limit)."""
    return "exclusive" in (_mode(a), _mode(g))


def mode_names(grants):
    """The names held SHARED or with LIMIT at least once: the modes
    checker judges them, the overlaps checker the others."""
    return {g["name"] for g in grants if _mode(g) != "exclusive"}


def _by_name(grants):
    """Grants grouped by lock name, each group in grant order."""
    out = collections.defaultdict(list)
    for g in grants:
        out[g["name"]].append(g)
    for gs in out.values():
        gs.sort(key=lambda g: g["t_granted"])
    return out


def _brief(g, mode=True):
    """A grant in a few words (its mode too, unless exclusive)."""
    return "%s fence %d (%s%s %d ms, b%d)" % (
        g["client"], g["fence"], "" if _mode(g) == "exclusive" or not mode
        else mode_label(g) + ", ", g["kind"], g["ttl"], g["broker"])


def check_fences(grants, faults):
    """(1) Per name, no fence is granted twice and fences strictly increase
    in the order clients read their OKs: a fence read more than SLACK_S
    after a higher one is a violation. An OK its worker may have read late
    (the worker was paused meanwhile) is exempt from the order. The order
    binds two grants only if they exclude each other (one is exclusive):
    two readers, or two LIMIT holders, may be granted in one order and read
    in the other (one answer crossed a slow link), and that is no fault;
    their fences must still be unique."""
    viol, late_read = [], []
    for name, gs in _by_name(grants).items():
        first = {}
        for g in gs:
            if g["fence"] in first:
                viol.append("%s: fence %d granted twice: %s and %s" % (
                    name, g["fence"], _brief(first[g["fence"]]), _brief(g)))
            first.setdefault(g["fence"], g)
        seq = []
        for g in gs:
            if _worker_paused(g, faults):
                late_read.append("%s: %s" % (name, _brief(g)))
            else:
                seq.append(g)
        viol += _out_of_order(name, seq)
    return {"violations": viol, "exempt_read_late": late_read}


def _out_of_order(name, seq):
    """Grants of seq (in read order) whose fence is below that of one read
    more than SLACK_S before them and excluding them: any earlier grant for
    an exclusive one, an earlier exclusive grant for a SHARED or LIMIT one
    (for a name only ever held exclusively, every earlier grant)."""
    out, j, top = [], 0, {"any": None, "exclusive": None}
    for g in seq:
        while seq[j]["t_granted"] < g["t_granted"] - SLACK_S:
            for k in ("any", _mode(seq[j])):
                if k in top and (top[k] is None or
                                 seq[j]["fence"] > top[k]["fence"]):
                    top[k] = seq[j]
            j += 1
        best = top["any" if _mode(g) == "exclusive" else "exclusive"]
        if best is not None and g["fence"] < best["fence"]:
            out.append("%s: %s read %.0f ms after %s" % (
                name, _brief(g), (g["t_granted"] - best["t_granted"]) * 1e3,
                _brief(best)))
    return out


def check_stale_writes(writes):
    """(2) The resource never accepted a fence below one it had accepted;
    its refusals are counted (they are the fence doing its job)."""
    top, viol, rejected = {}, [], 0
    for w in sorted(writes, key=lambda w: w["t"]):
        best = top.get(w["name"], 0)
        if w["accepted"] and w["fence"] < best:
            viol.append("%s: accepted fence %d from %s after %d" % (
                w["name"], w["fence"], w["client"], best))
        if w["accepted"]:
            top[w["name"]] = max(best, w["fence"])
        else:
            rejected += 1
    return {"violations": viol, "rejected": rejected,
            "accepted": sum(1 for w in writes if w["accepted"])}


def check_overlaps(grants, faults, t_end):
    """(3) Two holders of one name at once is explained only if the older
    one (lower fence) had a lease that had surely ended when the newer was
    granted, and it was told so by its broker by then: news later than
    SLACK_S must be explained by its broker or worker being stopped. Names
    held SHARED or with LIMIT are the modes checker's."""
    viol, explained = [], []
    shared = mode_names(grants)
    for name, gs in _by_name(grants).items():
        if name in shared:
            continue
        for g, active in _open_holds(gs, t_end):
            for a in active:
                ok, line = _overlap(a, g, faults, t_end)
                (explained if ok else viol).append(line)
    return {"violations": viol, "explained": explained}


def _open_holds(gs, t_end):
    """For each grant of gs (one name, in read order): (the grant, the
    holds read before it still open when its OK was read)."""
    active = []
    for g in gs:
        active = [a for a in active if hold_end(a, t_end) > g["t_granted"]]
        yield g, list(active)
        active.append(g)


def _overlap(a, g, faults, t_end):
    """Judge one overlap of a (read first) and g: (explained, a line)."""
    old, new = (g, a) if g["fence"] < a["fence"] else (a, g)
    ms = (min(hold_end(a, t_end), hold_end(g, t_end)) - g["t_granted"]) * 1e3
    t_told, how = told_lost(old)
    margin = (new["t_granted"] - validity_end(old)) * 1e3
    line = "%s: %s overlaps %s for %.0f ms; older lease ended >= %.0f ms " \
           "before; holder told by %s" % (old["name"], _brief(old),
                                          _brief(new), ms, margin, how)
    if how is None or margin < 0:
        return False, line
    late_s = t_told - new["t_granted"]
    line += " %.0f ms after the newer grant" % (late_s * 1e3)
    if late_s <= SLACK_S:
        return True, line
    if _stopped(old, faults, new["t_granted"], t_told):
        return True, line + " (its broker or worker was stopped)"
    return False, line


def check_modes(grants, faults, t_end):
    """(4) The names held SHARED or with LIMIT n: an exclusive hold (a
    writer) overlapping any other hold, and more than n LIMIT holds open at
    once, are violations unless explained by the overlaps rule (3): a
    writer's overlap as a pair; n + k LIMIT holds open when one's OK is read
    only if at least k of them are explained out, each an older hold (lower
    fence) whose lease had surely ended by the grant of a newer one open at
    that moment and whose holder was told. Explained cases are listed."""
    viol, explained, grants_by = [], [], collections.Counter()
    shared = mode_names(grants)
    for name, gs in _by_name(grants).items():
        if name not in shared:
            continue
        for g, active in _open_holds(gs, t_end):
            grants_by["%s %s" % (name, mode_label(g))] += 1
            for a in active:
                if _excludes(a, g):
                    ok, line = _overlap(a, g, faults, t_end)
                    (explained if ok else viol).append(line)
            if _mode(g) == "limit":
                same = [a for a in active if _mode(a) == "limit"] + [g]
                if len(same) > g["limit"]:
                    ok, line = _over_limit(same, g, faults, t_end)
                    (explained if ok else viol).append(line)
    return {"violations": viol, "explained": explained,
            "grants": dict(sorted(grants_by.items()))}


def mode_label(g):
    """A hold's mode in a word or two: exclusive, shared, limit 2."""
    return "limit %d" % g["limit"] if _mode(g) == "limit" else _mode(g)


def _over_limit(same, g, faults, t_end):
    """Judge the LIMIT holds `same` (in read order, the last g) open at
    once, more than g's limit: (explained, a line). A hold is explained
    out when, paired with a newer one of them, the overlaps rule explains
    it as the older."""
    out = []
    for h in same:
        for h2 in same:
            if h2["fence"] <= h["fence"]:
                continue
            ok, line = _overlap(*sorted((h, h2), key=lambda x: x["t_granted"]),
                                faults=faults, t_end=t_end)
            if ok:
                out.append(line)
                break
    left = len(same) - len(out)
    line = "%s: %d LIMIT %d holds open when %s was read (%s); %d explained " \
        "out%s" % (g["name"], len(same), g["limit"], _brief(g, False),
                   ", ".join(_brief(h, False) for h in same[:-1]), len(out),
                   "".join(" | " + l for l in out))
    return left <= g["limit"], line


def _stopped(g, faults, a, b):
    """Whether g's broker or worker was stopped or dead within [a, b]."""
    return _during(_windows(faults, ("pause_broker", "kill_broker"),
                            "b%d" % g["broker"]), a, b) or \
        _during(_windows(faults, ("pause_worker",), "w%d" % g["w"]), a, b)


def check_late_grants(grants, acqs, faults, command_timeout_s):
    """(5) No OK for a lease whose validity had ended. Two bounds show it
    from outside the broker:
    - a try-once: its one try starts after t_sent, so an OK later than
      t_sent + validity (+ slack) came after the validity;
    - any grant read while its broker's Redis link was delayed d each way
      for the whole request: its last try took at least 2d, so 2d past the
      validity (+ slack) means the OK came after it.
    A try-once is not judged when its broker or worker was stopped, or when
    a waiter for the name left that broker within a command timeout before
    (its try may still be in Redis, and the try-once then waits for it)."""
    viol, excused = [], []
    left = _left_waiters(acqs)
    for g in grants:
        line = _late_by_delay(g, faults)
        if line:
            viol.append(line)
            continue
        if g["wait"] != 0:
            continue
        late_ms = (g["t_granted"] - validity_end(g)) * 1e3
        if late_ms <= SLACK_S * 1e3:
            continue
        line = "%s: %s try-once OK %.0f ms after its validity" % (
            g["name"], _brief(g), late_ms)
        if _stopped(g, faults, g["t_sent"], g["t_granted"]) or any(
                g["t_sent"] - command_timeout_s <= t <= g["t_sent"]
                for t in left.get((g["name"], g["broker"]), ())):
            excused.append(line)
        else:
            viol.append(line)
    return {"violations": viol, "excused": excused,
            "try_once_judged": sum(1 for g in grants if g["wait"] == 0)}


def _left_waiters(acqs):
    """(name, broker) -> times waiting ACQUIREs were answered without a
    grant (their last try may outlive the answer)."""
    out = collections.defaultdict(list)
    for a in acqs:
        if a["wait"] != 0:
            out[(a["name"], a["broker"])].append(a["t_reply"])
    return out


def _late_by_delay(g, faults):
    """The violation line if g was requested and read inside one delay
    of its broker's Redis proxy long enough to make any grant late."""
    for f in faults:
        if "delay_ms" not in f or g["broker"] not in f["proxies"] or \
                "t_active" not in f:
            continue
        end = f.get("t_heal_begin", float("inf"))
        if not f["t_active"] <= g["t_sent"] <= g["t_granted"] <= end:
            continue
        rtt_ms = 2 * f["delay_ms"]
        late_ms = rtt_ms - (g["ttl"] * (1 - CLOCK_DRIFT) - 2)
        if late_ms > SLACK_S * 1e3:
            return "%s: %s OK through a %d ms round trip, %.0f ms past " \
                   "its validity" % (g["name"], _brief(g), rtt_ms, late_ms)
    return None


def check_liveness(faults):
    """(6) After each heal every live broker granted a free name within
    the liveness window."""
    viol, passed = [], 0
    for f in faults:
        for p in f.get("liveness", []):
            if p and p["ok"]:
                passed += 1
            elif p:
                viol.append("fault %d %s: %s gave no grant (%d tries, last "
                            "%r)" % (f["n"], f["kind"], p["broker"],
                                     p["tries"], p["last"]))
    return {"violations": viol, "passed": passed}


def check_resources(readings):
    """(7) At the end each broker has its baseline fds (beyond connected
    clients) and an RSS within 20 MiB of its start."""
    viol = []
    for r in readings:
        if r.get("error"):
            viol.append("%s: %s" % (r["broker"], r["error"]))
            continue
        if r["end_fds"] != r["base_fds"]:
            viol.append("%s: %d fds beyond clients, %d at start" % (
                r["broker"], r["end_fds"], r["base_fds"]))
        if r["end_rss_kib"] - r["base_rss_kib"] > RSS_SLACK_KIB:
            viol.append("%s: RSS %d KiB, %d KiB at start" % (
                r["broker"], r["end_rss_kib"], r["base_rss_kib"]))
    return {"violations": viol, "readings": readings}


def run_all(records, writes, faults, t_end, command_timeout_s,
            readings=None):
    """Every checker; readings (fds, RSS) only at the very end."""
    grants = [r for r in records if r["type"] == "grant"]
    acqs = [r for r in records if r["type"] == "acq"]
    res = {
        "fences": check_fences(grants, faults),
        "stale_writes": check_stale_writes(writes),
        "overlaps": check_overlaps(grants, faults, t_end),
        "modes": check_modes(grants, faults, t_end),
        "late_grants": check_late_grants(grants, acqs, faults,
                                         command_timeout_s),
        "liveness": check_liveness(faults),
    }
    if readings is not None:
        res["resources"] = check_resources(readings)
    return res

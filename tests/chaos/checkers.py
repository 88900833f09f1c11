"""The checkers: pure functions over the workers' journals, the resource's
write log and the nemesis' fault log. Each returns a dict with at least
"violations" (a list; empty when the property held).

Every time is the client's time.monotonic(). A broker's lease starts at
a moment the client cannot see, somewhere between sending ACQUIRE and
reading OK; the checks below only use bounds that hold whichever it was.

Holds under one token are one holder's (a token acquired again on another
connection, docs/protocol.md §4, Same token again): no checker pairs them.
"""

import bisect
import collections
import math

CLOCK_DRIFT = 0.01        # locks.clock_drift, the brokers' default
STEP_S = 1.0              # redis.clock_step_ms, the brokers' default: every
                          # lease runs that much longer in Redis
# A client's clock reading is off the broker's by its scheduling delays
# (both ways, on a loaded 2-core machine running other jobs too): 24 ms
# has been seen, so judge only what is later than this.
SLACK_S = 0.150
RSS_SLACK_KIB = 20 * 1024
SHOW = 20                 # violations listed per checker (all are counted)
# The faults that keep news on a broker's subscriber connection from it
# (nemesis.LINK_KINDS): those with "proxies" break the links of the brokers
# named there, the others Redis itself. After the heal the broker connects
# again within redis.reconnect_max_ms and asks Redis about its holds.
# On a cluster, a shard's failover and a slot's move are Redis faults (the
# broker's connection to that master, and its subscriber connection if it
# was there, break or move).
CLUSTER_FAULT_KINDS = ("shard_failover", "master_paused", "stale_promotion",
                       "stale_takeover", "stale_failback", "master_killed",
                       "reshard_held")
LINK_KINDS = ("proxy_cut", "proxy_delay", "proxy_lossy", "redis_slow",
              "redis_drop", "pause_redis", "kill_redis", "flushall",
              "wipe_redis", "lagging_failover",
              "frozen_failover") + CLUSTER_FAULT_KINDS
RESUBSCRIBE_S = 1.0       # redis.reconnect_max_ms of the chaos brokers
# Lock data lost in the same incarnation (docs/protocol.md §3, the bounds
# on how late a holder can be told): a key and its fence counter deleted
# by hand (tamper how=wipe), the holder told when its broker confirms the
# hold, within redis.trust_ms (1 s here); keys evicted (evict_window),
# which the brokers notice at their next beat (a quarter of
# that): another broker may grant such a name before. (window after the
# fault's start within which that grant may come, the longest its
# holder may then go untold.)
LOSS_BOUND_S = {("tamper", "wipe"): (1.0 + 0.2, 1.0 + 0.3),
                ("evict_window", None): (0.25 + 0.35, 0.25 + 0.75)}
# How a holder is told of a hold its broker gave up and then released in
# Redis itself (lock_hold.c, lockhold_lost): the name may be granted at
# once after, before the lease would have ended.
GIVEN_UP = ("EVENT LOST unavailable", "EVENT LOST expired")
# Replies after which an operation may have acted in Redis.
_MAY_HAVE_RUN = ("OK", "ERR UNAVAILABLE", "disconnect", "unknown")


def validity_end(g):
    """The earliest moment g's lease can have ended, as the broker counts
    it (util_validity_end): from its start, in whole ms of the monotonic
    clock (the ms of the moment it sent the try, after t_sent: so no
    earlier than t_sent less 1 ms), the ttl less the drift in whole ms,
    less 2 ms. For a session lock (renewed, unseen) this is a lower bound
    too."""
    return g["t_sent"] - 0.001 + \
        (math.floor(g["ttl"] * (1 - CLOCK_DRIFT)) - 2) / 1000.0


def hold_end(g, t_end):
    """When the holder stopped using the lock: it sent RELEASE, read EVENT
    LOST, read ERR NOTHELD to its own EXTEND, saw its connection break, or
    the run ended."""
    ends = [g[k] for k in ("t_release_sent", "t_lost", "t_notheld",
                           "t_disconnect") if g.get(k) is not None]
    return min(ends) if ends else t_end


def told_lost(g):
    """(when, how) the holder learnt it had lost the lock, or (None, None)
    if it never did: EVENT LOST, a broken connection, NOTHELD to its
    RELEASE or to an EXTEND on its own connection."""
    told = []
    if g.get("t_lost") is not None:
        told.append((g["t_lost"], "EVENT LOST " + g.get("lost_reason", "?")))
    if g.get("t_disconnect") is not None:
        told.append((g["t_disconnect"], "connection broke"))
    if str(g.get("release_reply", "")).startswith("ERR NOTHELD"):
        told.append((g["t_release_reply"], "RELEASE answered NOTHELD"))
    if g.get("t_notheld") is not None:
        told.append((g["t_notheld"], "EXTEND answered NOTHELD"))
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


def _may_have_run(reply):
    """Whether an operation so answered may have acted in Redis."""
    return str(reply).startswith(_MAY_HAVE_RUN)


def _lease_bound(t_sent, ttl_ms):
    """The earliest moment a lease set by a request sent at t_sent for
    ttl_ms can end by the broker's count (validity_end's rule)."""
    return t_sent + (ttl_ms * (1 - CLOCK_DRIFT) - 2) / 1000.0


class Context:
    """What the pair rules need besides the two holds: the fault log, the
    end of the run, and, per token, what was done to its grant from other
    connections (workers.py's operations: an ACQUIRE again, a RELEASE or an
    EXTEND with the token) and by its other holds."""

    def __init__(self, grants, ops, faults, t_end):
        self.faults, self.t_end = faults, t_end
        self.ops = collections.defaultdict(list)
        for o in ops:
            if o.get("t_sent") is None:
                continue
            if _may_have_run(o.get("reply")):
                self.ops[o["token"]].append(o)
            elif o["op"] == "regrant" and o.get("reply") == "TIMEOUT":
                # Its try may still have been in Redis: granted late, the
                # broker gives it back at once (a release, at the earliest
                # when it was sent).
                self.ops[o["token"]].append(dict(o, op="late regrant",
                                                 ttl=None))
        self.holds = collections.defaultdict(list)
        for g in grants:
            self.holds[g["token"]].append(g)

    def lease_end(self, g):
        """The earliest moment g's lease can have ended: its validity
        (validity_end), or sooner if its token's grant was released or
        given a shorter lease after g was asked for: a RELEASE with the
        token from another connection (at its sending, at the earliest), an
        EXTEND or an ACQUIRE again (their own validity), another hold of
        the token still held then ending (its release, its validity, after
        which its broker releases, or its connection breaking: any time
        after its grant). Lenient on purpose: a token's holds are one
        holder, judged by the belief checker without any lease bound."""
        t0 = g["t_sent"]
        ends = [validity_end(g)]
        for o in self.ops.get(g["token"], ()):
            if o["t_sent"] >= t0:
                ends.append(_lease_bound(o["t_sent"], o["ttl"])
                            if o.get("ttl") else o["t_sent"])
        for h in self.holds.get(g["token"], ()):
            if h is g or hold_end(h, self.t_end) < t0:
                continue
            ends += [max(t0, validity_end(h))] + [
                max(t0, h[k]) for k in ("t_release_sent", "t_granted")
                if h.get(k) is not None and (
                    k != "t_granted" or h.get("t_disconnect") is not None)]
        return min(ends)

    def foreign(self, g, a, b):
        """The operations on g's token through the other broker than g's,
        sent after g was granted and before b, and the RELEASEs of its
        token's other holds there: their news reaches g's broker over its
        subscriber connection."""
        rels = [{"op": "release", "broker": h["broker"],
                 "t_sent": h["t_release_sent"]}
                for h in self.holds.get(g["token"], ())
                if h is not g and h.get("t_release_sent") is not None]
        return [o for o in list(self.ops.get(g["token"], ())) + rels
                if o.get("broker") is not None and o["broker"] != g["broker"]
                and g["t_sent"] <= o["t_sent"] <= b]

    def loss_excuse(self, g, t_new, t_told):
        """Why g's holder may be told only at t_told of a grant at t_new:
        lock data lost meanwhile (LOSS_BOUND_S), within its bound. A
        line, or None."""
        for f in self.faults:
            bound = LOSS_BOUND_S.get((f["kind"], f.get("how")))
            if bound is None or not f["t_start"] <= t_new <= \
                    f.get("t_heal", f["t_start"]) + bound[0]:
                continue
            if t_told - t_new <= bound[1]:
                return "%s #%d lost lock data: told within the bound" % (
                    f["kind"], f["n"])
        return None

    def link_excuse(self, g, a, b):
        """Why news on g's token through the other broker (foreign) may
        have reached g's broker only after b: a fault of g's broker's Redis
        link (or of Redis) between that news and b (plus the time to
        connect again after a heal). A line, or None."""
        for o in self.foreign(g, a, b):
            for f in self.faults:
                if f["kind"] not in LINK_KINDS or (
                        "proxies" in f and g["broker"] not in f["proxies"]):
                    continue
                heal = f.get("t_heal", float("inf")) + RESUBSCRIBE_S
                if f["t_start"] <= b and heal >= o["t_sent"]:
                    return "the %s through b%d %.0f ms before reached b%d " \
                        "during %s #%d" % (
                            o["op"], o["broker"], (a - o["t_sent"]) * 1e3,
                            g["broker"], f["kind"], f["n"])
        return None


def _same_holder(a, g):
    """Whether two holds are one holder's: the same token (acquired again
    on another connection, or after an owed release)."""
    return a["token"] == g["token"]


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
    """A grant in a few words (its mode too, unless exclusive; whose
    token it is, if it was acquired again with another's)."""
    return "%s fence %d (%s%s %d ms, b%d%s)" % (
        g["client"], g["fence"], "" if _mode(g) == "exclusive" or not mode
        else mode_label(g) + ", ", g["kind"], g["ttl"], g["broker"],
        ", %s's token" % g["regrant_of"] if g.get("regrant_of") else
        ", token again" if g.get("reused_token") else "")


def check_fences(grants, faults):
    """(1) Per name, no fence is granted twice and fences strictly increase
    in the order clients read their OKs: a fence read more than SLACK_S
    after a higher one is a violation. An OK its worker may have read late
    (the worker was paused meanwhile) is exempt from the order. The order
    binds two grants only if they exclude each other (one is exclusive):
    two readers, or two LIMIT holders, may be granted in one order and read
    in the other (one answer crossed a slow link), and that is no fault;
    their fences must still be unique. A token acquired again gets its
    grant's fence again: a fence may repeat under one token."""
    viol, late_read = [], []
    for name, gs in _by_name(grants).items():
        first = {}
        for g in gs:
            f = first.get(g["fence"])
            if f is not None and not _same_holder(f, g):
                viol.append("%s: fence %d granted twice: %s and %s" % (
                    name, g["fence"], _brief(f), _brief(g)))
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
    """(2) The resource never accepted a fence below one it had accepted,
    nor the highest one again from another grant (another token: two grants
    given one fence, which the resource cannot tell apart); its refusals
    are counted (they are the fence doing its job). A log written before
    writes carried the token is judged on the first rule only."""
    top, viol, rejected = {}, [], 0
    for w in sorted(writes, key=lambda w: w["t"]):
        best, who = top.get(w["name"], (0, None))
        if w["accepted"] and w["fence"] < best:
            viol.append("%s: accepted fence %d from %s after %d" % (
                w["name"], w["fence"], w["client"], best))
        elif (w["accepted"] and w["fence"] == best and who is not None and
              w.get("token") is not None and w["token"] != who[1]):
            viol.append("%s: accepted fence %d from %s (token %s) after "
                        "the same fence from %s (token %s)" % (
                            w["name"], w["fence"], w["client"], w["token"],
                            who[0], who[1]))
        if w["accepted"] and w["fence"] > best:
            top[w["name"]] = (w["fence"], (w["client"], w.get("token")))
        elif not w["accepted"]:
            rejected += 1
    return {"violations": viol, "rejected": rejected,
            "accepted": sum(1 for w in writes if w["accepted"])}


def check_overlaps(grants, ctx):
    """(3) Two holders of one name at once is explained only if the older
    one (lower fence) had a lease that had surely ended when the newer was
    granted, and it was told so by its broker by then: news later than
    SLACK_S must be explained by its broker or worker being stopped (or,
    when the older's grant was released or shortened through the other
    broker, by its broker's Redis link being broken then). Names held
    SHARED or with LIMIT are the modes checker's."""
    viol, explained = [], []
    shared = mode_names(grants)
    for name, gs in _by_name(grants).items():
        if name in shared:
            continue
        for g, active in _open_holds(gs, ctx.t_end):
            for a in active:
                if _same_holder(a, g):
                    continue
                ok, line = _overlap(a, g, ctx)
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


def _overlap(a, g, ctx):
    """Judge one overlap of a (read first) and g: (explained, a line)."""
    old, new = (g, a) if g["fence"] < a["fence"] else (a, g)
    ms = (min(hold_end(a, ctx.t_end), hold_end(g, ctx.t_end)) -
          g["t_granted"]) * 1e3
    t_told, how = told_lost(old)
    margin = (new["t_granted"] - ctx.lease_end(old)) * 1e3
    line = "%s: %s overlaps %s for %.0f ms; older lease ended >= %.0f ms " \
           "before; holder told by %s" % (old["name"], _brief(old),
                                          _brief(new), ms, margin, how)
    if margin < 0:
        # Its lease had not ended: only its broker giving it up (told
        # EVENT LOST, then released in Redis: a session lease whose
        # renewals did not get through, a stale hold not put back), or
        # lock data lost by hand or by eviction, explains that.
        if how in GIVEN_UP and t_told - new["t_granted"] <= SLACK_S:
            return True, line + " (its broker gave it up, told it, then " \
                "released it)"
        why = ctx.loss_excuse(old, new["t_granted"], t_told
                              if how is not None
                              else hold_end(old, ctx.t_end))
        return (True, line + " (%s)" % why) if why else (False, line)
    if how is None:
        # Never told (it released, or its connection ended): it held on
        # until then, which only a stop or a broken link may explain.
        t_told = hold_end(old, ctx.t_end)
        late_s = t_told - new["t_granted"]
        line += "; it held on %.0f ms after the newer grant" % (late_s * 1e3)
        if late_s <= SLACK_S:
            # It stopped within the slack of the newer grant, as one told
            # then would have (a release through the other broker while
            # its link was broken: its own release came first).
            return True, line
        if _stopped(old, ctx.faults, new["t_granted"], t_told):
            return True, line + " (its broker or worker was stopped)"
        why = ctx.link_excuse(old, new["t_granted"], t_told) or \
            ctx.loss_excuse(old, new["t_granted"], t_told)
        return (True, line + " (%s)" % why) if why else (False, line)
    late_s = t_told - new["t_granted"]
    line += " %.0f ms after the newer grant" % (late_s * 1e3)
    if late_s <= SLACK_S:
        return True, line
    if _stopped(old, ctx.faults, new["t_granted"], t_told):
        return True, line + " (its broker or worker was stopped)"
    why = ctx.link_excuse(old, new["t_granted"], t_told) or \
        ctx.loss_excuse(old, new["t_granted"], t_told)
    if why:
        return True, line + " (%s)" % why
    return False, line


def check_modes(grants, ctx):
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
        for g, active in _open_holds(gs, ctx.t_end):
            grants_by["%s %s" % (name, mode_label(g))] += 1
            for a in active:
                if _excludes(a, g) and not _same_holder(a, g):
                    ok, line = _overlap(a, g, ctx)
                    (explained if ok else viol).append(line)
            if _mode(g) == "limit":
                same = _one_per_token(
                    [a for a in active if _mode(a) == "limit"] + [g])
                if len(same) > g["limit"]:
                    ok, line = _over_limit(same, g, ctx)
                    (explained if ok else viol).append(line)
    return {"violations": viol, "explained": explained,
            "grants": dict(sorted(grants_by.items()))}


def mode_label(g):
    """A hold's mode in a word or two: exclusive, shared, limit 2."""
    return "limit %d" % g["limit"] if _mode(g) == "limit" else _mode(g)


def _one_per_token(holds):
    """holds with one per token (the last: a token holds once)."""
    last = {h["token"]: h for h in holds}
    return [h for h in holds if last[h["token"]] is h]


def _over_limit(same, g, ctx):
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
                                ctx=ctx)
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


def check_belief(grants, ctx):
    """(8) What a holder believes (docs/protocol.md §3, What a holder can
    rely on): while a client lists a name in LOCKS (from reading its OK
    until it sends RELEASE, reads EVENT LOST for it, or sees its connection
    break) nobody else is granted the name (in a conflicting mode; for
    LIMIT n, more than n tokens in all), and LOCKS says what the client was
    granted. Holds under one token are one holder. Unlike overlaps (3) no
    lease is assumed ended: the question is only what the client believed.
    - pairs: the older (lower fence) of two conflicting holds must stop
      believing within SLACK_S of the newer's OK (which came after its
      grant): later, it is explained only if its broker was stopped, or its
      worker was (unless LOCKS, asked after the newer OK + SLACK_S, still
      listed it: then the broker itself said so), or its grant was released
      or shortened through the other broker and its broker's Redis link
      was broken between that and its EVENT LOST (the news comes over the
      subscriber connection);
    - LIMIT n: when a LIMIT hold's OK is read, the holds still believed
      SLACK_S later (one per token) may be n + k only if k of them are
      explained out so, each against a newer one of them;
    - LOCKS: every listing read during a hold lists it, with its fence
      (else the broker dropped it without EVENT LOST), and lists nothing
      the client was not granted."""
    viol, explained, pairs = [], [], 0
    for name, gs in _by_name(grants).items():
        for new, before, after in _believed(gs, ctx.t_end):
            for old in before + after:
                if old["fence"] < new["fence"] and \
                        not _same_holder(old, new) and _excludes(old, new):
                    pairs += 1
                    ok, line = _belief_pair(old, new, ctx)
                    (explained if ok else viol).append(line)
            if _mode(new) == "limit":
                r = _belief_limit(before, new, ctx)
                if r is not None:
                    (explained if r[0] else viol).append(r[1])
    listings = _check_listings(grants, ctx.t_end, viol)
    return {"violations": viol, "explained": explained,
            "pairs_judged": pairs, "locks_listings": listings,
            "holds_of_other_connections": sum(
                1 for g in grants if g.get("regrant_of"))}


def _believed(gs, t_end):
    """For each hold g of one name (gs in read order): (g, the holds read
    before it still believed SLACK_S after its OK was read, the holds read
    after it while it was still believed)."""
    ends = [hold_end(g, t_end) for g in gs]
    active = []
    for i, g in enumerate(gs):
        t = g["t_granted"]
        active = [j for j in active if ends[j] > t + SLACK_S]
        after, k = [], i + 1
        while k < len(gs) and gs[k]["t_granted"] < ends[i]:
            if ends[k] > t + SLACK_S:
                after.append(gs[k])
            k += 1
        yield g, [gs[j] for j in active], after
        active.append(i)


def _belief_pair(old, new, ctx):
    """Judge one pair of _believed_pairs: (explained, a line)."""
    end = hold_end(old, ctx.t_end)
    t = new["t_granted"]
    line = "%s: %s believed it held the name %.0f ms after %s was " \
        "granted (%s)%s" % (old["name"], _brief(old), (end - t) * 1e3,
                            _brief(new), _belief_end(old, ctx.t_end),
                            _ops_note(old, ctx))
    listed = [s for s in old.get("locks", ())
              if s[0] > t + SLACK_S and _lists(s, old)]
    if listed:
        line += "; its LOCKS listed it %.0f ms after that grant" % (
            (listed[-1][0] - t) * 1e3)
    if _during(_windows(ctx.faults, ("pause_broker", "kill_broker"),
                        "b%d" % old["broker"]), t, end):
        return True, line + " (its broker was stopped)"
    if not listed and _during(_windows(ctx.faults, ("pause_worker",),
                                       "w%d" % old["w"]), t, end):
        return True, line + " (its worker was stopped)"
    why = ctx.link_excuse(old, t, end) or ctx.loss_excuse(old, t, end)
    if why:
        return True, line + " (%s)" % why
    return False, line


def _belief_end(g, t_end):
    """How g's belief ended, in words."""
    ends = [(g[k], w) for k, w in (
        ("t_release_sent", "then released"),
        ("t_notheld", "then its EXTEND answered NOTHELD"),
        ("t_disconnect", "then its connection broke"))
            if g.get(k) is not None]
    if g.get("t_lost") is not None:
        ends.append((g["t_lost"], "then told EVENT LOST %s" %
                     g.get("lost_reason")))
    return min(ends)[1] if ends else "until the end of the run"


def _ops_note(g, ctx):
    """What other connections did to g's grant while it was believed:
    operations with its token, and its token's other holds ending."""
    end = hold_end(g, ctx.t_end)
    out = []
    for o in ctx.ops.get(g["token"], ()):
        if g["t_granted"] <= o["t_sent"] <= end:
            out.append((o["t_sent"], "%s%s via %s b%d %s" % (
                o["op"], " %d ms" % o["ttl"] if o.get("ttl") else "",
                o["client"], o["broker"], o["reply"].split(" ")[0])))
    for h in ctx.holds.get(g["token"], ()):
        e = hold_end(h, ctx.t_end)
        if h is not g and g["t_granted"] <= e <= end:
            out.append((e, "%s (b%d) %s" % (
                h["client"], h["broker"],
                _belief_end(h, ctx.t_end).replace("then ", ""))))
    return "; its token: " + ", ".join(
        "%s at +%.0f ms" % (w, (t - g["t_granted"]) * 1e3)
        for t, w in sorted(out)) if out else ""


def _lists(snap, g):
    """Whether a LOCKS listing [t_sent, t_reply, locks] lists g."""
    return any(l[0] == g["name"] and l[1] == g["fence"] for l in snap[2])


def _belief_limit(before, g, ctx):
    """The LIMIT rule at g's OK (before: the holds read before it still
    believed SLACK_S later): None, or (explained, a line)."""
    held = _one_per_token([h for h in before if _mode(h) == "limit"] + [g])
    if len(held) <= g["limit"]:
        return None
    out = []
    for h in held:
        for h2 in held:
            if h2["fence"] <= h["fence"] or _same_holder(h, h2):
                continue
            ok, why = _belief_pair(h, h2, ctx)
            if ok:
                out.append(why)
                break
    line = "%s: %d LIMIT %d holds believed when %s was read (%s); %d " \
        "explained out%s" % (g["name"], len(held), g["limit"],
                             _brief(g, False), ", ".join(
                                 _brief(h, False) + _ops_note(h, ctx)
                                 for h in held if h is not g),
                             len(out), "".join(" | " + l for l in out))
    return len(held) - len(out) <= g["limit"], line


def _check_listings(grants, t_end, viol):
    """The LOCKS rule: each listing read during a hold lists it with its
    fence (unless it stopped believing before the reply was read), and
    whatever else a listing shows is a hold the client believed then.
    Appends to viol; returns how many listings were read."""
    by_client = collections.defaultdict(list)
    for g in grants:
        by_client[g["client"]].append(g)
    n = 0
    for g in grants:
        for snap in g.get("locks", ()):
            n += 1
            t_sent, t_reply, locks = snap
            if hold_end(g, t_end) > t_reply and not _lists(snap, g):
                got = [l for l in locks if l[0] == g["name"]]
                viol.append("%s: %s believed it held it but its LOCKS %.0f "
                            "ms after its OK %s" % (
                                g["name"], _brief(g),
                                (t_sent - g["t_granted"]) * 1e3,
                                "showed fence %d" % got[0][1] if got else
                                "did not list it (no EVENT LOST)"))
            for l in locks:
                if l[0] == g["name"] and l[1] == g["fence"]:
                    continue
                if not any(h["name"] == l[0] and h["fence"] == l[1] and
                           h["t_granted"] <= t_reply and
                           hold_end(h, t_end) >= t_sent
                           for h in by_client[g["client"]]):
                    viol.append("%s: LOCKS of %s listed %s fence %d, which "
                                "it did not believe it held" % (
                                    l[0], g["client"], l[0], l[1]))
    return n


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
                            "%r)%s" % (f["n"], f["kind"], p["broker"],
                                       p["tries"], p["last"],
                                       "; it does not answer INFO:\n" +
                                       p["hung"] if p.get("hung") else ""))
    return {"violations": viol, "passed": passed}


def check_eviction(faults):
    """(10) Keys evicted make a new incarnation (docs/protocol.md §8, When
    Redis forgets), in whose grace period holds are put back rather than
    lost: after each evict_window that evicted keys, the marker names
    another incarnation by the time the brokers grant again."""
    viol, passed = [], 0
    for f in faults:
        if f["kind"] != "evict_window" or not f.get("evicted_keys") or \
                "marker_after" not in f:
            continue
        if f["marker_after"] != f["marker_before"]:
            passed += 1
        else:
            viol.append("fault %d evict_window: %d keys evicted, and the "
                        "incarnation is still %s" % (
                            f["n"], f["evicted_keys"], f["marker_before"]))
    return {"violations": viol, "passed": passed}


def check_put_back(grants, ctx):
    """(12) On a cluster, a shard taken over by a replica that missed
    writes (stale_takeover: within redis.trust_ms, so the brokers still
    vouch for the holds it lost; stale_failback: the same by the former
    master, after its successor granted) is a new incarnation of its slots, in
    whose grace period every exclusive hold its brokers held there is put
    back (docs/protocol.md §8): none of them may be told EVENT LOST stolen
    from the fault's start until the grace period after its heal is over,
    unless its token was acted on from another connection meanwhile."""
    viol, judged = [], 0
    for f in ctx.faults:
        if f["kind"] not in ("stale_takeover", "stale_failback") or \
                "t_heal" not in f:
            continue
        a, b = f["t_start"], f["t_heal"] + CLUSTER_GRACE_S + RESUBSCRIBE_S
        for g in grants:
            if g["name"] not in f.get("names", ()) or \
                    _mode(g) != "exclusive" or g["t_granted"] > b or \
                    hold_end(g, ctx.t_end) < a:
                continue
            judged += 1
            if g.get("lost_reason") != "stolen" or not \
                    a <= g["t_lost"] <= b:
                continue
            if any(o["t_sent"] >= g["t_sent"] for o in
                   ctx.ops.get(g["token"], ())) or \
                    len(ctx.holds.get(g["token"], ())) > 1:
                continue
            viol.append("fault %d %s: %s told stolen %.0f ms "
                        "after the heal, not put back" % (
                            f["n"], f["kind"], _brief(g),
                            (g["t_lost"] - f["t_heal"]) * 1e3))
    return {"violations": viol, "judged": judged}


def check_cluster_logs(lines):
    """(11) On a cluster, no log of a broker or a node says "non local
    key" (a script touched a key it did not declare: during a migration it
    fails half applied) or "CROSSSLOT" (one request's keys in two slots):
    lines is [(whose log, the line)] of those that do."""
    return {"violations": ["%s: %s" % (who, line) for who, line in lines],
            "passed": not lines}


def check_resources(readings):
    """(7) At the end each broker has its baseline fds (beyond connected
    clients, and on a cluster its connections to the nodes, of which it
    has at most one per node and the subscriber's) and an RSS within 20
    MiB of its start."""
    viol = []
    for r in readings:
        if r.get("error"):
            viol.append("%s: %s" % (r["broker"], r["error"]))
            continue
        if r["end_fds"] != r["base_fds"]:
            viol.append("%s: %d fds beyond clients, %d at start" % (
                r["broker"], r["end_fds"], r["base_fds"]))
        if r.get("redis_conns", 0) > r.get("redis_nodes", 0) + 1:
            # On a cluster: one per node at most, and the subscriber's.
            viol.append("%s: %d connections to %d Redis nodes" % (
                r["broker"], r["redis_conns"], r["redis_nodes"]))
        if r["end_rss_kib"] - r["base_rss_kib"] > RSS_SLACK_KIB:
            viol.append("%s: RSS %d KiB, %d KiB at start" % (
                r["broker"], r["end_rss_kib"], r["base_rss_kib"]))
    return {"violations": viol, "readings": readings}


# (9) fairness: the hot name's exclusive waiters are served first come,
# first served across both brokers (docs/protocol.md §4, Waiting: one
# queue of tickets per name for every broker sharing the Redis).
FAIR_NAME = "hot"          # workers.HOT: waited on through both brokers
OVERTAKE_S = 0.050         # a request sent this much later asked later
STARVE_FACTOR = 10         # a wait beyond 10 x the holds ahead is starved
# A waiter's place is taken by its broker's first try (sent at once): a
# fault of its broker, of that broker's Redis link or of Redis, or a stop
# of its worker, can put it later in the queue, or out of it (a dead
# broker's tickets die after 2 x retry_max_ms + command_timeout_ms, 2.9 s;
# a broker back re-enters its waiters at the back). Waits meeting one, up
# to RESUBSCRIBE_S after its heal (the reconnect), are not judged.
_OWN_STOPS = ("pause_broker", "kill_broker")
# The other broker stopped, or its Redis link broken or slow: a release
# may hand the name to its ticket, which its broker confirms late or never
# (the hand-over lease, redis.command_timeout_ms, ends it), and a killed
# broker's tickets stay first until they die (2 x locks.retry_max_ms +
# command_timeout_ms after its last try, then one retry_max_ms): the one
# queue may stand still that long (the bound docs/protocol.md §4 states).
# Not an excuse for an overtake, only for a long wait.
HANDOVER_LEASE_S = 2.5 + 1.0  # command_timeout_ms, and clock_step_ms
# Redis restarted or forgot: the brokers see a new incarnation and grant
# nothing for its grace period (redis.trust_ms 1000 of the chaos brokers,
# stretched by 2 x clock_drift, and redis.clock_step_ms 1000), from when
# the first of them noticed. A tamper that deleted the marker is one too
# (_kind).
FORGET_KINDS = ("kill_redis", "wipe_redis", "flushall", "lagging_failover",
                "frozen_failover") + CLUSTER_FAULT_KINDS
GRACE_S = 1.0 * (1 + 2 * 0.01) + 1.0
# A cluster's grace period also covers cluster-node-timeout (1.5 s in the
# chaos cluster) + 1 s (docs/protocol.md §8).
CLUSTER_GRACE_S = GRACE_S + 1.5 + 1.0
# Redis refusing every script (eviction: OOM under noeviction, or an
# evicting policy the brokers refuse to grant under): no waiter can take or
# keep its ticket meanwhile, so none is owed its place (no news is lost:
# the scripts that would publish it do not run).
REFUSING_KINDS = ("eviction",)
DEAD_TICKETS_S = 2 * 0.2 + 2.5 + 0.2 + HANDOVER_LEASE_S


def _kind(f):
    """f's kind as the waiters meet it: a tamper that deleted the
    incarnation marker, or keys evicted, make a new incarnation, as a
    FLUSHALL does (every broker's waiters take their places again, after
    its grace period); a tamper that deleted held names' keys and counters
    loses data as a FLUSHALL does, without one."""
    if (f["kind"], f.get("how")) in (("tamper", "marker"),
                                     ("tamper", "wipe"),
                                     ("evict_window", None)):
        return "flushall"
    return f["kind"]


def _fair_excuse(w, faults, stalls=False):
    """Why waiter w's place in the queue is not owed to it (a fault that
    met its wait), or None. stalls: also a fault of the other broker or its
    link (it may hold the queue still for HANDOVER_LEASE_S after the heal,
    and DEAD_TICKETS_S after a kill)."""
    a, b = w["t_sent"], w["t_end"]
    for f in faults:
        k, heal = _kind(f), f.get("t_heal", float("inf")) + RESUBSCRIBE_S
        if k in FORGET_KINDS:
            heal += CLUSTER_GRACE_S if k in CLUSTER_FAULT_KINDS else GRACE_S
        if k in _OWN_STOPS and f.get("target") == "b%d" % w["broker"]:
            why = "its broker"
            if k == "kill_broker":
                # The killed process's tickets are another broker's to
                # the queue now: they hold it still until they die.
                heal = max(heal, f["t_start"] + DEAD_TICKETS_S)
        elif (k in LINK_KINDS or k in REFUSING_KINDS) and (
                "proxies" not in f or w["broker"] in f["proxies"]):
            why = "its broker's Redis link" if "proxies" in f else "Redis"
        elif k == "pause_worker" and f.get("target") == "w%d" % w["w"]:
            why = "its worker"
        elif stalls and (k in _OWN_STOPS or k in LINK_KINDS):
            why = "the other broker" if k in _OWN_STOPS else \
                "the other broker's Redis link"
            heal += HANDOVER_LEASE_S
            if k == "kill_broker":
                heal = max(heal, f["t_start"] + DEAD_TICKETS_S)
        else:
            continue
        if f["t_start"] <= b and heal >= a:
            return "%s #%d (%s)" % (k, f["n"], why)
    return None


def _fair_grants(grants, name, faults, t_end):
    """The grants of name, one per fence (a token acquired again keeps
    its fence: the same grant), each with when its holder asked for it
    (t_sent of its first record) and how long the name was its: from its
    grant (no sooner than OVERTAKE_S before its OK was read, unless a fault of
    its broker, link or worker may have delayed that OK: then from its
    ACQUIRE) until it was
    released (RELEASE answered), told lost (expired, or revoked by a
    shorter lease through another connection: a lease its broker did not
    release, its token held elsewhere, runs on in Redis by the margin every
    lease has there, STEP_S, and the drift its holder was told short of),
    or, if neither is known, its lease may have run on after the last of
    its holds ended (or the run did), margin included."""
    by_fence = collections.defaultdict(list)
    for g in grants:
        if g["name"] == name:
            by_fence[g["fence"]].append(g)
    out = []
    for fence, gs in by_fence.items():
        first = min(gs, key=lambda g: (bool(g.get("regrant_of")),
                                       g["t_granted"]))
        ends = []
        for g in gs:
            rel = str(g.get("release_reply", ""))
            if rel == "OK" or rel.startswith("ERR NOTHELD"):
                ends.append(g["t_release_reply"])
            elif g.get("lost_reason") in ("expired", "revoked"):
                ends.append(g["t_lost"] + STEP_S +
                            CLOCK_DRIFT * g["ttl"] / 1000.0)
            elif g.get("lost_reason") == "stolen":
                ends.append(g["t_lost"])
            elif g.get("t_notheld") is not None:
                ends.append(g["t_notheld"])
            else:
                ends.append(hold_end(g, t_end) + g["ttl"] / 1000.0 + STEP_S)
        out.append({"fence": fence, "token": first["token"],
                    "client": first["client"], "broker": first["broker"],
                    "t_sent": first["t_sent"],
                    "t_granted": first["t_granted"],
                    "wait": first.get("wait"), "rec": first,
                    "start": first["t_sent"] if _fair_excuse(
                        dict(first, t_end=first["t_granted"]), faults)
                    else max(first["t_sent"],
                             first["t_granted"] - OVERTAKE_S),
                    "end": max(ends)})
    out.sort(key=lambda x: x["t_granted"])
    return out


def _fair_waiters(grants, acqs, name, t_end):
    """The exclusive ACQUIREs of name that waited (WAIT > 0) on a
    client's own connection, each with how it ended: granted (its fence),
    TIMEOUT, an error or a broken connection (t_end: when its answer was
    read, or the end of the run)."""
    out = []
    for r in grants + acqs:
        if r["name"] != name or _mode(r) != "exclusive" or \
                not r.get("wait") or r.get("regrant_of"):
            continue
        w = {"client": r["client"], "w": r["w"], "broker": r["broker"],
             "t_sent": r["t_sent"], "wait": r["wait"],
             "token": r.get("token")}
        if r["type"] == "grant":
            w.update(outcome="granted", fence=r["fence"],
                     t_end=r["t_granted"])
        else:
            reply = str(r.get("reply", ""))
            w.update(outcome="TIMEOUT" if reply == "TIMEOUT" else
                     reply.split(" ")[0] if reply else "pending",
                     reply=reply, t_end=r.get("t_reply", t_end))
        out.append(w)
    out.sort(key=lambda w: w["t_sent"])
    return out


def _fair_ahead(w, fs, starts, max_len):
    """The grants to others that held the name during w's wait and came
    before its own grant (lower fence), and how long each held it then
    (clipped to the wait)."""
    lo = bisect.bisect_left(starts, w["t_sent"] - max_len)
    hi = bisect.bisect_right(starts, w["t_end"])
    out = []
    for g in fs[lo:hi]:
        if g["token"] == w["token"] or g["end"] < w["t_sent"] or \
                ("fence" in w and g["fence"] >= w["fence"]):
            continue
        out.append((g, max(0.0, min(g["end"], w["t_end"]) -
                           max(g["start"], w["t_sent"]))))
    return out


def _fair_cutoff(w):
    """The latest OK-read moment of a grant that surely came while w's
    ticket was still queued (w not granted: its broker's deadline, or the
    answer it read, less the slack)."""
    if w["outcome"] == "TIMEOUT":
        return w["t_sent"] + w["wait"] / 1000.0
    return w["t_end"] - SLACK_S


def _fair_overtakers(w, fs, t_granted, top, by_fence, fences):
    """The grants to others asked for more than OVERTAKE_S after w and
    made while w still waited: w granted, those with a lower fence (the
    counter orders grants) above every fence whose OK was read before w
    was sent; w not granted, those whose OK was read after w was sent and
    before _fair_cutoff."""
    if "fence" in w:
        f0 = top[bisect.bisect_left(t_granted, w["t_sent"])]
        cand = by_fence[bisect.bisect_right(fences, f0):
                        bisect.bisect_left(fences, w["fence"])]
    else:
        cand = fs[bisect.bisect_right(t_granted, w["t_sent"]):
                  bisect.bisect_right(t_granted, _fair_cutoff(w))]
    return [g for g in cand if g["token"] != w["token"] and
            g["t_sent"] > w["t_sent"] + OVERTAKE_S]


def _ms(t):
    """Seconds as whole milliseconds."""
    return "%.0f ms" % (t * 1e3)


def check_fairness(grants, acqs, faults, t_end, name=FAIR_NAME):
    """(9) One first-come-first-served queue per name across brokers
    (docs/protocol.md §4, Waiting), judged on the hot name's exclusive
    waiters (WAIT > 0), whichever broker they wait on:
    - overtaken: a grant to another token asked for more than OVERTAKE_S
      after the waiter's ACQUIRE, made while it still waited (a lower
      fence than its own grant; not granted, an OK read before its
      deadline), is a violation, unless the wait met a fault of its
      broker, its broker's Redis link or Redis, or a stop of its worker
      (up to RESUBSCRIBE_S after the heal): then its place was not sure;
    - starved: a wait longer than STARVE_FACTOR x the time the holders
      ahead of it (grants to others during the wait, before its own)
      held the name (each at least OVERTAKE_S: a hand-over), while the
      name was granted to others meanwhile, is a violation, unless the
      wait met one of those faults, or a stop of the other broker or a
      fault of its link (a hand-over to its ticket, or its dead tickets,
      may hold the queue: HANDOVER_LEASE_S + RESUBSCRIBE_S after the heal,
      DEAD_TICKETS_S after a kill).
    Figures: grants per broker and per client, waiters judged, overtakes
    (and those excused), the longest unexcused wait against its bound."""
    fs = _fair_grants(grants, name, faults, t_end)
    starts = sorted(g["start"] for g in fs)
    by_start = sorted(fs, key=lambda g: g["start"])
    max_len = max([min(g["end"], t_end) - g["start"] for g in fs] + [0.0])
    t_granted = [g["t_granted"] for g in fs]
    top = [0]                    # top[i]: the highest fence of fs[:i]
    for g in fs:
        top.append(max(top[-1], g["fence"]))
    by_fence = sorted(fs, key=lambda g: g["fence"])
    fences = [g["fence"] for g in by_fence]
    viol, excused_waits = [], collections.Counter()
    overtakes, overtakes_excused, judged = 0, 0, collections.Counter()
    outcomes = collections.defaultdict(collections.Counter)
    longest, worst, leads, stalled = None, None, [], 0
    waiters = _fair_waiters(grants, acqs, name, t_end)
    for w in waiters:
        outcomes["b%d" % w["broker"]][w["outcome"]] += 1
        why = _fair_excuse(w, faults)
        over = _fair_overtakers(w, fs, t_granted, top, by_fence, fences)
        if why:
            excused_waits[why.split(" ")[0]] += 1
            overtakes_excused += len(over)
            continue
        judged["b%d" % w["broker"]] += 1
        overtakes += len(over)
        leads += [round((g["t_sent"] - w["t_sent"]) * 1e3) for g in over]
        wait_s = w["t_end"] - w["t_sent"]
        head = "%s: %s (b%d, WAIT %d, at %.3f) %s after %s" % (
            name, w["client"], w["broker"], w["wait"], w["t_sent"],
            "granted fence %d" % w["fence"] if "fence" in w
            else w["outcome"], _ms(wait_s))
        if over:
            g = over[0]
            viol.append("%s: overtaken by %d grant%s to later requests, "
                        "first %s fence %d (b%d, WAIT %s) asked %s after "
                        "it, OK read at +%s" % (
                            head, len(over), "s" * (len(over) > 1),
                            g["client"], g["fence"], g["broker"],
                            g["wait"], _ms(g["t_sent"] - w["t_sent"]),
                            _ms(g["t_granted"] - w["t_sent"])))
        # Starvation: the wait against the holds ahead of it.
        ahead = _fair_ahead(w, by_start, starts, max_len)
        made = [g for g, _ in ahead if g["t_granted"] > w["t_sent"]]
        held = sum(max(s, OVERTAKE_S) for _, s in ahead)
        bound = STARVE_FACTOR * held
        fig = {"waiter": head, "wait_ms": round(wait_s * 1e3),
               "holders_ahead": len(ahead), "granted_meanwhile": len(made),
               "held_ms": round(sum(s for _, s in ahead) * 1e3),
               "bound_ms": round(bound * 1e3)}
        if _fair_excuse(w, faults, stalls=True):
            stalled += bool(made)
            continue
        if longest is None or wait_s > longest["wait_ms"] / 1e3:
            longest = fig
        if made and (worst is None or
                     wait_s / bound > worst["wait_ms"] / worst["bound_ms"]):
            worst = fig
        if made and wait_s > bound:
            viol.append("%s: starved: %d holders ahead held the name %s "
                        "(%d granted meanwhile), %d x that is %s" % (
                            head, len(ahead), _ms(sum(s for _, s in ahead)),
                            len(made), STARVE_FACTOR, _ms(bound)))
    per_client = collections.Counter(
        g["client"] for g in fs if not g["rec"].get("regrant_of"))
    clients = sorted({r["client"] for r in grants + acqs
                      if r.get("client") and not r.get("regrant_of") and
                      not r.get("taker")})    # the nemesis's: no worker
    counts = [per_client.get(c, 0) for c in clients] or [0]
    return {"violations": viol,
            "grants_by_broker": {"b%d" % b: n for b, n in sorted(
                collections.Counter(g["broker"] for g in fs).items())},
            "grants_per_client": {"max": max(counts), "min": min(counts),
                                  "clients": len(clients),
                                  "with_none": [c for c in clients
                                                if not per_client.get(c)]},
            "waiters": len(waiters),
            "waiters_by_broker": {b: dict(c) for b, c in
                                  sorted(outcomes.items())},
            "judged_by_broker": dict(sorted(judged.items())),
            "excused_waits": dict(excused_waits),
            "overtakes": overtakes, "overtakes_excused": overtakes_excused,
            "overtake_lead_ms": [min(leads), max(leads)] if leads else None,
            "starvation_excused": stalled,
            "longest_wait": longest, "worst_wait": worst}


def run_all(records, writes, faults, t_end, command_timeout_s,
            readings=None, log_lines=None):
    """Every checker; readings (fds, RSS) only at the very end; log_lines
    (check_cluster_logs') only on a cluster."""
    grants = [r for r in records if r["type"] == "grant"]
    acqs = [r for r in records if r["type"] == "acq"]
    ctx = Context(grants, [r for r in records if r["type"] == "op"],
                  faults, t_end)
    res = {
        "fences": check_fences(grants, faults),
        "stale_writes": check_stale_writes(writes),
        "overlaps": check_overlaps(grants, ctx),
        "modes": check_modes(grants, ctx),
        "belief": check_belief(grants, ctx),
        "late_grants": check_late_grants(grants, acqs, faults,
                                         command_timeout_s),
        "liveness": check_liveness(faults),
        "eviction": check_eviction(faults),
    }
    res["fairness"] = check_fairness(grants, acqs, faults, t_end)
    if readings is not None:
        res["resources"] = check_resources(readings)
    if log_lines is not None:
        res["cluster_logs"] = check_cluster_logs(log_lines)
        res["put_back"] = check_put_back(grants, ctx)
    return res

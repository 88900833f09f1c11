#!/usr/bin/env python3
"""Checkers on small made-up journals. Fairness (check_fairness): first
come first served passes, a later request granted first is an overtake, a
fault of the waiter's broker excuses it, a long wait while others got the
name for moments is starvation. Belief (check_belief): a LOCKS listing
that leaves out a hold its client was never told of is a violation; one
after an ERR NOTHELD to the holder's own EXTEND is not. Put back
(check_put_back): a hold told stolen after its shard's stale takeover is
a violation; one released, told expired, of another shard, or whose token
was released elsewhere is not. Overlaps (check_overlaps): a hold given up
at its validity's end, counted as the broker counts it, while its worker
was stopped, is explained. Python 3 stdlib:
python3 tests/chaos/test_checkers.py"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkers  # noqa: E402

_tokens = iter(range(1, 1000000))


def grant(client, broker, t_sent, t_granted, fence, hold, wait=3000):
    """A hold of hot, released (OK) after hold seconds."""
    w = int(client[1])
    end = t_granted + hold
    return {"type": "grant", "client": client, "w": w, "broker": broker,
            "kind": "ttl", "name": "hot", "mode": "exclusive",
            "wait": wait, "t_sent": t_sent, "t_granted": t_granted,
            "fence": fence, "ttl": 2000, "token": "t%d" % next(_tokens),
            "t_release_sent": end, "release_reply": "OK",
            "t_release_reply": end + 0.001}


def timeout(client, broker, t_sent, wait=3000):
    """A waiting ACQUIRE of hot answered TIMEOUT."""
    return {"type": "acq", "client": client, "w": int(client[1]),
            "broker": broker, "kind": "ttl", "name": "hot",
            "mode": "exclusive", "wait": wait, "t_sent": t_sent,
            "t_reply": t_sent + wait / 1000.0 + 0.001, "reply": "TIMEOUT"}


def judge(records, faults=()):
    """check_fairness over records."""
    return checkers.check_fairness(
        [r for r in records if r["type"] == "grant"],
        [r for r in records if r["type"] == "acq"], list(faults), 100.0)


class Fairness(unittest.TestCase):
    def test_first_come_first_served(self):
        recs = [grant("w0c0", 0, 10.0, 10.001, 1, 0.5),
                grant("w1c0", 1, 10.1, 10.502, 2, 0.5),
                grant("w2c0", 0, 10.2, 11.003, 3, 0.5),
                grant("w3c1", 1, 10.3, 11.504, 4, 0.5)]
        r = judge(recs)
        self.assertEqual(r["violations"], [])
        self.assertEqual(r["overtakes"], 0)
        self.assertEqual(r["grants_by_broker"], {"b0": 2, "b1": 2})
        self.assertEqual(r["grants_per_client"]["min"], 1)
        self.assertEqual(r["judged_by_broker"], {"b0": 2, "b1": 2})

    def test_later_request_granted_first(self):
        # w1c0 (b1) asked at 10.1, w2c0 (b0) at 10.3; w2c0 got fence 2.
        recs = [grant("w0c0", 0, 10.0, 10.001, 1, 0.5),
                grant("w2c0", 0, 10.3, 10.502, 2, 0.5),
                grant("w1c0", 1, 10.1, 11.003, 3, 0.5)]
        r = judge(recs)
        self.assertEqual(r["overtakes"], 1)
        self.assertEqual(len(r["violations"]), 1)
        self.assertIn("w1c0 (b1", r["violations"][0])
        self.assertIn("overtaken by 1 grant", r["violations"][0])

    def test_within_the_margin(self):
        # Asked 30 ms apart: either may be first.
        recs = [grant("w0c0", 0, 10.0, 10.001, 1, 0.5),
                grant("w2c0", 0, 10.13, 10.502, 2, 0.5),
                grant("w1c0", 1, 10.1, 11.003, 3, 0.5)]
        self.assertEqual(judge(recs)["violations"], [])

    def test_timed_out_while_later_ones_got_it(self):
        recs = [grant("w0c0", 0, 10.0, 10.001, 1, 0.2),
                timeout("w1c0", 1, 10.1, wait=1000),
                grant("w2c0", 0, 10.5, 10.6, 2, 0.2)]
        r = judge(recs)
        self.assertEqual(r["overtakes"], 1)
        self.assertIn("TIMEOUT", r["violations"][0])
        # Granted only after its deadline: no overtake.
        recs[2] = grant("w2c0", 0, 10.5, 11.2, 2, 0.2)
        self.assertEqual(judge(recs)["overtakes"], 0)

    def test_fault_of_its_broker_excuses(self):
        recs = [grant("w0c0", 0, 10.0, 10.001, 1, 0.5),
                grant("w2c0", 0, 10.3, 10.502, 2, 0.5),
                grant("w1c0", 1, 10.1, 11.003, 3, 0.5)]
        for f in ({"n": 1, "kind": "pause_broker", "target": "b1",
                   "t_start": 8.0, "t_heal": 9.5},
                  {"n": 1, "kind": "proxy_delay", "target": "proxy-b1",
                   "proxies": [1], "t_start": 10.05, "t_heal": 12.0},
                  {"n": 1, "kind": "pause_redis", "target": "redis",
                   "t_start": 10.2, "t_heal": 10.3},
                  {"n": 1, "kind": "pause_worker", "target": "w1",
                   "t_start": 10.0, "t_heal": 10.2}):
            r = judge(recs, [f])
            self.assertEqual(r["violations"], [], f)
            self.assertEqual(r["overtakes_excused"], 1)
        # The other broker's faults, or one long healed, do not.
        for f in ({"n": 1, "kind": "pause_broker", "target": "b0",
                   "t_start": 10.0, "t_heal": 10.2},
                  {"n": 1, "kind": "proxy_cut", "target": "proxy-b0",
                   "proxies": [0], "t_start": 10.0, "t_heal": 10.2},
                  {"n": 1, "kind": "pause_broker", "target": "b1",
                   "t_start": 7.0, "t_heal": 8.0},
                  {"n": 1, "kind": "clock_jump", "target": "b1",
                   "t_start": 10.0, "t_heal": 12.0}):
            self.assertEqual(judge(recs, [f])["overtakes"], 1, f)

    def test_starved(self):
        # w1c0 waits 3 s from 10.0 while the name is free, then held 10
        # and 20 ms by two waiters asked before it: a hold ahead counts
        # from OVERTAKE_S before its OK was read, at least OVERTAKE_S.
        recs = [grant("w9c0", 0, 8.0, 8.001, 1, 1.99),
                grant("w0c0", 0, 9.0, 10.5, 2, 0.01),
                grant("w2c0", 0, 9.1, 11.0, 3, 0.02),
                timeout("w1c0", 1, 10.0)]
        r = judge(recs)
        self.assertEqual(r["overtakes"], 0)
        self.assertEqual(len(r["violations"]), 1, r["violations"])
        self.assertIn("w1c0 (b1", r["violations"][0])
        self.assertIn("starved: 2 holders ahead", r["violations"][0])
        self.assertEqual(r["worst_wait"]["holders_ahead"], 2)
        self.assertEqual(r["worst_wait"]["bound_ms"], 1320)
        # A stop of the other broker meanwhile may hold the queue still.
        f = {"n": 1, "kind": "kill_broker", "target": "b0", "t_start": 8.0,
             "t_heal": 8.5}
        self.assertEqual(judge(recs, [f])["violations"], [])
        # Holders that held the name most of the wait: no starvation.
        recs[2] = grant("w2c0", 0, 9.1, 11.0, 3, 1.5)
        self.assertEqual(judge(recs)["violations"], [])

    def test_no_grant_meanwhile_is_no_starvation(self):
        # The holder at its arrival kept the name the whole wait.
        recs = [grant("w0c0", 0, 9.0, 9.001, 1, 0.0005),
                timeout("w1c0", 1, 10.0)]
        recs[0]["release_reply"] = "ERR UNAVAILABLE"
        self.assertEqual(judge(recs)["violations"], [])

    def test_same_grant_again_and_try_once(self):
        # A token acquired again keeps its fence: one grant. A try-once
        # granted ahead of a waiter jumps the queue.
        g = grant("w0c0", 0, 10.0, 10.001, 1, 0.5)
        again = dict(g, client="w0c0s", t_sent=10.2, t_granted=10.201,
                     regrant_of="w0c0", wait=0)
        recs = [g, again, grant("w1c0", 1, 10.1, 10.502, 2, 0.5)]
        self.assertEqual(judge(recs)["violations"], [])
        self.assertEqual(judge(recs)["grants_by_broker"], {"b0": 1, "b1": 1})
        recs.append(grant("w2c0", 0, 10.3, 10.45, 2, 0.05, wait=0))
        recs[2]["fence"] = 3
        self.assertEqual(judge(recs)["overtakes"], 1)


class Belief(unittest.TestCase):
    def listed_after(self, g, dt, lists):
        """A LOCKS listing read dt s after g's OK, listing g or not."""
        t = g["t_granted"] + dt
        g.setdefault("locks", []).append(
            [t, t + 0.001, [["hot", g["fence"], 1000, "ttl"]] if lists
             else []])

    def judge(self, grants):
        ctx = checkers.Context(grants, [], [], 100.0)
        return checkers.check_belief(grants, ctx)["violations"]

    def test_dropped_without_being_told(self):
        g = grant("w0c0", 0, 10.0, 10.001, 1, 1.5)
        self.listed_after(g, 0.5, True)
        self.listed_after(g, 0.8, False)
        v = self.judge([g])
        self.assertEqual(len(v), 1)
        self.assertIn("did not list it (no EVENT LOST)", v[0])

    def test_dropped_after_its_own_extend_was_answered_notheld(self):
        # docs/protocol.md, EXTEND: on ERR NOTHELD the holds are forgotten;
        # the holder read it and stops believing then.
        g = grant("w0c0", 0, 10.0, 10.001, 1, 1.5)
        self.listed_after(g, 0.5, True)
        g["t_notheld"] = g["t_granted"] + 0.7
        self.listed_after(g, 0.8, False)
        self.assertEqual(self.judge([g]), [])
        self.assertEqual(checkers.told_lost(g),
                         (g["t_notheld"], "EXTEND answered NOTHELD"))
        self.assertEqual(checkers.hold_end(g, 100.0), g["t_notheld"])


class PutBack(unittest.TestCase):
    """check_put_back: a hold a stale takeover of its shard lost is put
    back, not told stolen."""

    fault = {"n": 1, "kind": "stale_takeover", "t_start": 20.0,
             "t_heal": 23.0, "names": ["hot"]}

    def lost(self, g, t, reason):
        g.update(t_lost=t, lost_reason=reason)
        del g["t_release_sent"], g["release_reply"], g["t_release_reply"]
        return g

    def judge(self, grants, ops=()):
        ctx = checkers.Context(grants, list(ops), [self.fault], 100.0)
        return checkers.check_put_back(grants, ctx)

    def test_told_stolen_after_the_takeover(self):
        g = self.lost(grant("w0c0", 0, 19.0, 19.001, 1, 5), 22.5, "stolen")
        r = self.judge([g])
        self.assertEqual(len(r["violations"]), 1)
        self.assertIn("told stolen", r["violations"][0])

    def test_put_back_and_released(self):
        r = self.judge([grant("w0c0", 0, 19.0, 19.001, 1, 5)])
        self.assertEqual((r["violations"], r["judged"]), ([], 1))

    def test_lost_otherwise_or_elsewhere(self):
        # Told expired, a name of another shard, or its token released
        # through another connection (its broker may be told so).
        g1 = self.lost(grant("w0c0", 0, 19.0, 19.001, 1, 5), 21.0,
                       "expired")
        g2 = self.lost(grant("w1c0", 0, 19.0, 19.001, 2, 5), 22.5, "stolen")
        g2["name"] = "cold1"
        g3 = self.lost(grant("w2c0", 0, 19.0, 19.001, 3, 5), 22.5, "stolen")
        op = {"type": "op", "op": "release", "via": "other", "broker": 1,
              "token": g3["token"], "t_sent": 20.5, "reply": "OK"}
        self.assertEqual(self.judge([g1, g2, g3], [op])["violations"], [])


class Overlaps(unittest.TestCase):
    """check_overlaps: the lease bound is the broker's own, whole
    milliseconds and all."""

    def test_given_up_at_its_validity_while_its_worker_was_stopped(self):
        # From a 30-minute cluster run: w1c7's broker gave up its hold at
        # the end of its validity (counted from its start in whole ms,
        # up to 1 ms before t_sent: util_validity_end) and handed the name
        # to w4c7 on the same broker, 0.03 ms before the bound the checker
        # had (which took the start as t_sent); w1c7's worker was stopped
        # and read its EVENT LOST expired 4 s later.
        old = {"type": "grant", "client": "w1c7", "w": 1, "broker": 1,
               "kind": "ttl", "name": "cold4", "mode": "exclusive",
               "wait": 0, "t_sent": 77592.669676091,
               "t_granted": 77592.670161295, "fence": 1795881038976161,
               "ttl": 2000, "token": "a", "t_release_sent": 77598.806890164,
               "release_reply": "ERR NOTHELD",
               "t_release_reply": 77598.80713104, "t_lost": 77598.807121166,
               "lost_reason": "expired"}
        new = {"type": "grant", "client": "w4c7", "w": 4, "broker": 1,
               "kind": "ttl", "name": "cold4", "mode": "exclusive",
               "wait": 300, "t_sent": 77594.64047916,
               "t_granted": 77594.647664204, "fence": 1795881040953518,
               "ttl": 500, "token": "b", "t_release_sent": 77594.781614927,
               "release_reply": "OK", "t_release_reply": 77594.781876134}
        stop = {"n": 14, "kind": "pause_worker", "target": "w1",
                "t_start": 77594.472269145, "t_heal": 77598.785430836}
        ctx = checkers.Context([old, new], [], [stop], 77700.0)
        r = checkers.check_overlaps([old, new], ctx)
        self.assertEqual(r["violations"], [])
        self.assertIn("its broker or worker was stopped", r["explained"][0])
        # Without the stop it is one: told 4 s late.
        ctx = checkers.Context([old, new], [], [], 77700.0)
        self.assertEqual(len(checkers.check_overlaps(
            [old, new], ctx)["violations"]), 1)


class ClusterLogs(unittest.TestCase):
    def test_lines_are_violations(self):
        r = checkers.check_cluster_logs([("b0", "x non local key y")])
        self.assertEqual(r["violations"], ["b0: x non local key y"])
        self.assertEqual(checkers.check_cluster_logs([])["violations"], [])


if __name__ == "__main__":
    unittest.main()

"""Prometheus text at /metrics, /healthz, and INFO from the same table."""

import re
import time
import urllib.error
import urllib.request

from lbtest import BrokerTest, free_port, main, wait_for, wait_quiet, wait_until

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)'
                    r'(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? '
                    r'(-?[0-9.e+]+|\+Inf)$')


def parse(text):
    """A strict reader of the text format: returns {name: value} and
    {name: type}; fails on any line it does not understand."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge", "histogram"), line
            types[name] = kind
            continue
        m = SAMPLE.match(line)
        assert m, "not a sample: %r" % line
        key = m.group(1) + (m.group(2) or "")
        samples[key] = float(m.group(4))
        assert m.group(1) in types or re.sub(
            r"_(bucket|sum|count)$", "", m.group(1)) in types, line
    return samples, types


class Metrics(BrokerTest):

    def setUp(self):
        self.mport = free_port()
        self.conf = {"metrics": {"enabled": True, "port": self.mport}}
        super().setUp()

    def get(self, path):
        url = "http://127.0.0.1:%d%s" % (self.mport, path)
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def test_metrics_parse_and_move(self):
        status, text = self.get("/metrics")
        self.assertEqual(status, 200)
        before, types = parse(text)
        self.assertEqual(types["lockbroker_grants_total"], "counter")
        self.assertEqual(types["lockbroker_clients"], "gauge")
        self.assertEqual(types["lockbroker_wait_seconds"], "histogram")
        for name, kind in types.items():
            if kind == "counter":
                self.assertTrue(name.endswith("_total"), name)
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE m"), r"^OK ")
        self.assertEqual(b.cmd("ACQUIRE m WAIT 50"), "TIMEOUT")
        self.assertEqual(a.cmd("RELEASE m"), "OK")
        _, text = self.get("/metrics")
        after, _ = parse(text)
        self.assertEqual(after["lockbroker_grants_total"],
                         before["lockbroker_grants_total"] + 1)
        self.assertEqual(after["lockbroker_timeouts_total"],
                         before["lockbroker_timeouts_total"] + 1)
        self.assertEqual(after["lockbroker_releases_total"],
                         before["lockbroker_releases_total"] + 1)
        self.assertEqual(after["lockbroker_wait_seconds_count"],
                         before["lockbroker_wait_seconds_count"] + 2)
        self.assertEqual(after["lockbroker_hold_seconds_count"],
                         before["lockbroker_hold_seconds_count"] + 1)
        self.assertGreaterEqual(after["lockbroker_wait_seconds_sum"], 0.05)
        self.assertGreater(after["lockbroker_redis_rtt_seconds_count"], 0)
        # The TIMEOUT waited 50 ms: it is in the 0.05 bucket's +Inf side.
        self.assertEqual(after['lockbroker_wait_seconds_bucket{le="+Inf"}'],
                         after["lockbroker_wait_seconds_count"])
        self.assertEqual(after["lockbroker_redis_up"], 1)
        # EVENT LOST is one family, by reason; the process is described.
        self.assertEqual(types["lockbroker_lost_total"], "counter")
        for reason in ("expired", "stolen", "unavailable", "maxhold",
                       "revoked"):
            self.assertIn('lockbroker_lost_total{reason="%s"}' % reason,
                          after)
        self.assertNotIn("lockbroker_lost_expired_total", types)
        self.assertEqual(after['lockbroker_build_info{version="%s"}' %
                               a.info()["version"]], 1)
        self.assertGreater(after["process_open_fds"], 3)
        self.assertGreater(after["process_resident_memory_bytes"], 1 << 20)
        self.assertLess(abs(after["process_start_time_seconds"] -
                            time.time() + after["lockbroker_uptime_seconds"]),
                        5)
        # INFO shows the same numbers from the same table.
        info = a.info()
        self.assertEqual(float(info["grants_total"]),
                         after["lockbroker_grants_total"])
        self.assertEqual(float(info["wait_seconds_count"]),
                         after["lockbroker_wait_seconds_count"])

    def test_oldest_hold(self):
        # The age of the longest-held lock here, for the alert on a lock
        # held too long; 0 with none held.
        self.assertEqual(parse(self.get("/metrics")[1])[0]
                         ["lockbroker_oldest_hold_seconds"], 0)
        a, b = self.client(), self.client()
        asked = time.monotonic()
        self.assertRegex(a.cmd("ACQUIRE old"), r"^OK ")

        def oldest():
            return parse(self.get("/metrics")[1])[0][
                "lockbroker_oldest_hold_seconds"]
        wait_until(lambda: oldest() >= 0.3, 5, "an oldest hold of 0.3 s")
        # It does not run ahead of time.
        self.assertGreaterEqual(time.monotonic() - asked, 0.3)
        self.assertRegex(b.cmd("ACQUIRE new"), r"^OK ")
        age = parse(self.get("/metrics")[1])[0][
            "lockbroker_oldest_hold_seconds"]
        self.assertGreaterEqual(age, 0.3)
        self.assertLess(age, 30)
        self.assertEqual(a.cmd("RELEASE old"), "OK")
        self.assertLess(parse(self.get("/metrics")[1])[0]
                        ["lockbroker_oldest_hold_seconds"], 0.3)

    def test_evicting_redis_refuses_grants_and_fails_healthz(self):
        """A Redis whose maxmemory-policy may evict keys (read at every
        connect) gets no grants: ERR UNAVAILABLE with the policy, /healthz
        503, until it says noeviction again (issue 15)."""
        c = self.client()
        self.assertRegex(c.cmd("ACQUIRE e TTL 60000"), r"^OK ")
        self.redis("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
        self.redis("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        want = ("ERR UNAVAILABLE Redis maxmemory-policy is allkeys-lru; "
                "locks need noeviction")
        d = self.client()
        wait_for(lambda: d.cmd("ACQUIRE f WAIT 0") == want, 5)
        self.assertEqual(d.cmd("FILL g"), want)
        self.assertEqual(d.cmd("ACQUIRE h SHARED"), want)
        self.assertEqual(self.get("/healthz"), (503, want[16:] + "\n"))
        # Up, yet refusing: a gauge of its own (LockbrokerRedisRefused).
        metrics = parse(self.get("/metrics")[1])[0]
        self.assertEqual(metrics["lockbroker_redis_up"], 1)
        self.assertEqual(metrics["lockbroker_redis_refusing"], 1)
        self.assertIn("maxmemory-policy is allkeys-lru",
                      self.broker.logtext())
        self.redis("CONFIG", "SET", "maxmemory-policy", "noeviction")
        self.redis("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        wait_for(lambda: self.get("/healthz") == (200, "ok\n"), 5)
        self.assertEqual(parse(self.get("/metrics")[1])[0][
            "lockbroker_redis_refusing"], 0)
        self.assertRegex(d.cmd("ACQUIRE f WAIT 0"), r"^OK ")

    def test_allow_eviction_grants_loudly(self):
        self.redis("CONFIG", "SET", "maxmemory-policy", "volatile-ttl")
        b = self.start_broker({"redis": {"allow_eviction": True}},
                              name="allowing")
        wait_for(lambda: "maxmemory-policy is volatile-ttl" in b.logtext(), 5)
        self.assertRegex(self.client(b).cmd("ACQUIRE a WAIT 0"), r"^OK ")
        self.assertIn("granting anyway (redis.allow_eviction)", b.logtext())

    def test_healthz_is_plain_text_and_needs_the_subscriber(self):
        url = "http://127.0.0.1:%d/healthz" % self.mport
        with urllib.request.urlopen(url, timeout=5) as r:
            self.assertEqual(r.headers["Content-Type"],
                             "text/plain; charset=utf-8")
        # The subscriber alone goes (and comes back only after 2-4 s): no
        # news of REVOKEs or other brokers' releases meanwhile.
        port = free_port()
        b = self.start_broker({"metrics": {"enabled": True, "port": port},
                               "redis": {"reconnect_min_ms": 4000,
                                         "reconnect_max_ms": 4000}},
                              name="slow")
        self.mport = port
        self.assertEqual(self.get("/healthz"), (200, "ok\n"))
        for addr in [l.split("addr=")[1].split()[0] for l in
                     self.redis("CLIENT", "LIST", "TYPE", "pubsub").split("\n")
                     if "addr=" in l]:
            self.redis("CLIENT", "KILL", "ADDR", addr)
        wait_for(lambda: self.get("/healthz") ==
                 (503, "redis subscriber unavailable\n"), 2)
        self.assertIn("redis subscriber: connection lost", b.logtext())

    def test_evicting_policy_set_while_connected(self):
        """maxmemory-policy is read again while connected (every fourth
        incarnation beat), not only at connect."""
        b = self.start_broker({"redis": {"trust_ms": 400}}, name="beat")
        c = self.client(b)
        self.assertRegex(c.cmd("ACQUIRE before WAIT 0"), r"^OK ")
        self.redis("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
        def refused():
            r = c.cmd("ACQUIRE after WAIT 0")
            if r.startswith("OK "):     # not read yet
                self.assertEqual(c.cmd("RELEASE after"), "OK")
            return r == ("ERR UNAVAILABLE Redis maxmemory-policy is "
                         "allkeys-lru; locks need noeviction")
        try:
            wait_for(refused, 5)
        finally:
            self.redis("CONFIG", "SET", "maxmemory-policy", "noeviction")
        wait_for(lambda: c.cmd("ACQUIRE after WAIT 0").startswith("OK "), 5)

    def test_evicting_policy_and_back_on_a_quiet_broker(self):
        """A broker that holds nothing and has nobody waiting sends Redis
        nothing (docs/internals.md, When Redis forgets), but one that refuses grants
        for the policy keeps reading it: it grants again within a few
        beats of noeviction's return."""
        b = self.start_broker({"redis": {"trust_ms": 400}}, name="quiet")
        c = self.client(b)
        wait_quiet(self.redis, b)
        self.redis("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
        def refused():
            r = c.cmd("ACQUIRE q WAIT 0")
            if r.startswith("OK "):     # not read yet
                self.assertEqual(c.cmd("RELEASE q"), "OK")
            return r.startswith("ERR UNAVAILABLE Redis maxmemory-policy")
        try:
            wait_for(refused, 5)
            # Nothing held, nobody waits, yet it keeps reading the policy
            # (the case fixed): more beats, where one gone quiet sends
            # none.
            beats = self.redis.calls("evalsha")
            wait_until(lambda: self.redis.calls("evalsha") >= beats + 4, 5,
                       "four more beats")
        finally:
            self.redis("CONFIG", "SET", "maxmemory-policy", "noeviction")
        wait_for(lambda: c.cmd("ACQUIRE q WAIT 0").startswith("OK "), 2)

    def test_healthz_follows_redis(self):
        self.assertEqual(self.get("/healthz"), (200, "ok\n"))
        self.redis.kill()
        wait_for(lambda: self.get("/healthz")[0] == 503, 5)
        self.redis.start()
        wait_for(lambda: self.get("/healthz")[0] == 200, 10)
        self.assertEqual(self.get("/nothing")[0], 404)


if __name__ == "__main__":
    main()

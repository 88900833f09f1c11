"""Mutual exclusion, session locks, kept locks and tokens over the wire."""

import re
import time

from lbtest import STEP, BrokerTest, main, wait_for

GRANT = re.compile(r"^OK (\d+) (\d+) ([0-9a-f]{32})$")


class Basic(BrokerTest):
    conf = {"locks": {"lease_ms": 5000}}

    def grant(self, client, line):
        reply = client.cmd(line)
        m = GRANT.match(reply) or re.match(r"^OK (\d+) (\d+) (\S+)$", reply)
        self.assertIsNotNone(m, "not a grant: %r" % reply)
        return int(m.group(1)), int(m.group(2)), m.group(3)

    def test_hold_timeout_release_then_granted(self):
        a, b = self.client(), self.client()
        fa, ttl, _ = self.grant(a, "ACQUIRE x")
        self.assertEqual(ttl, 5000)
        self.assertEqual(b.cmd("ACQUIRE x WAIT 0"), "TIMEOUT")
        self.assertEqual(a.cmd("RELEASE x"), "OK")
        fb, _, _ = self.grant(b, "ACQUIRE x WAIT 0")
        self.assertGreater(fb, fa)

    def test_session_lock_lease_in_redis(self):
        a = self.client()
        fence, _, token = self.grant(a, "acquire s1")  # verbs ignore case
        self.assertEqual(self.redis("GET", "lockbroker:{s1}").split()[0], token)
        self.assertEqual(self.redis("GET", "lockbroker:{s1}:fence"), str(fence))
        pttl = self.redis("PTTL", "lockbroker:{s1}")
        self.assertTrue(4000 + STEP < pttl <= 5000 + STEP, pttl)

    def test_status_validate_and_locks(self):
        a, b = self.client(), self.client()
        self.assertEqual(b.cmd("STATUS v"), "OK FREE")
        fence, _, _ = self.grant(a, "ACQUIRE v TTL 3000")
        m = re.match(r"^OK HELD (\d+) (\d+)$", b.cmd("STATUS v"))
        self.assertIsNotNone(m)
        self.assertTrue(2000 < int(m.group(1)) <= 3000)
        self.assertEqual(int(m.group(2)), fence)
        self.assertEqual(b.cmd("VALIDATE v %d" % fence), "OK VALID")
        self.assertEqual(b.cmd("VALIDATE v %d" % (fence - 1)), "OK STALE")
        self.assertEqual(b.cmd("VALIDATE nothere 1"), "OK STALE")
        self.grant(a, "ACQUIRE w")
        locks = a.until_end("LOCKS")
        self.assertEqual(len(locks), 2)
        self.assertRegex(locks[0], r"^LOCK v %d \d+ FIXED$" % fence)
        self.assertRegex(locks[1], r"^LOCK w \d+ \d+ SESSION$")
        self.assertEqual(b.until_end("LOCKS"), [])

    def test_extend_moves_the_lease(self):
        a = self.client()
        self.grant(a, "ACQUIRE e TTL 1000")
        self.assertEqual(a.cmd("EXTEND e 60000"), "OK 60000")
        self.assertGreater(self.redis("PTTL", "lockbroker:{e}"), 50000)
        self.assertRegex(a.until_end("LOCKS")[0], r"^LOCK e \d+ 5\d{4} FIXED$")

    def test_extend_of_a_session_lock_is_refused(self):
        a = self.client()
        self.grant(a, "ACQUIRE se")
        self.assertEqual(a.cmd("EXTEND se 100"),
                         "ERR ARGS a session lock is renewed by the broker; "
                         "EXTEND is for TTL locks")
        self.assertRegex(a.until_end("LOCKS")[0], r"^LOCK se \d+ \d+ SESSION$")

    def test_disconnect_frees_within_100ms(self):
        for kind in ("", " TTL 60000"):
            a, b = self.client(), self.client()
            self.grant(a, "ACQUIRE gone" + kind)
            a.close()
            start = time.monotonic()
            wait_for(lambda: self.redis("EXISTS", "lockbroker:{gone}") == 0,
                     timeout=2, step=0.002)
            self.assertLess(time.monotonic() - start, 0.100)
            self.grant(b, "ACQUIRE gone WAIT 0")
            self.assertEqual(b.cmd("RELEASE gone"), "OK")

    def test_quit_releases_session_locks(self):
        a = self.client()
        self.grant(a, "ACQUIRE q")
        self.assertEqual(a.cmd("QUIT"), "OK")
        self.assertTrue(a.closed())
        wait_for(lambda: self.redis("EXISTS", "lockbroker:{q}") == 0, 1)

    def test_keep_survives_and_token_releases_elsewhere(self):
        a, b = self.client(), self.client()
        fence, _, tok = self.grant(a, "ACQUIRE k TTL 60000 KEEP")
        self.assertEqual(a.cmd("QUIT"), "OK")
        self.assertTrue(a.closed())
        # Refused in Redis after the session ended: a release it had sent
        # would have been there first.
        self.assertEqual(b.cmd("ACQUIRE k WAIT 0"), "TIMEOUT")
        self.assertEqual(self.redis("GET", "lockbroker:{k}").split()[0], tok)
        self.assertEqual(b.cmd("EXTEND k 30000 TOKEN " + tok), "OK 30000")
        self.assertEqual(b.cmd("RELEASE k TOKEN " + tok), "OK")
        self.assertEqual(self.redis("EXISTS", "lockbroker:{k}"), 0)
        self.assertEqual(b.cmd("RELEASE k TOKEN " + tok),
                         "ERR NOTHELD the lock is not held by this token")

    def test_same_token_grants_once(self):
        a, b = self.client(), self.client()
        f1, _, _ = self.grant(a, "ACQUIRE t TTL 10000 TOKEN job-42.a")
        # A retried request (here from another connection) gets its fence.
        f2, ttl, tok = self.grant(b, "ACQUIRE t TOKEN job-42.a TTL 20000")
        self.assertEqual((f2, ttl, tok), (f1, 20000, "job-42.a"))
        # The holding connection asking again with its token: same answer.
        f3, _, _ = self.grant(a, "ACQUIRE t TTL 10000 TOKEN job-42.a")
        self.assertEqual(f3, f1)
        self.assertEqual(self.redis("GET", "lockbroker:{t}:fence"), str(f1))

    def test_retry_on_new_connection_survives_the_old_one(self):
        a, b, c = self.client(), self.client(), self.client()
        f1, _, _ = self.grant(a, "ACQUIRE rt TTL 10000 TOKEN retry1")
        f2, _, _ = self.grant(b, "ACQUIRE rt TTL 10000 TOKEN retry1")
        self.assertEqual(f1, f2)
        self.hang_up(a)  # the first connection dies: the lock is b's now
        self.assertEqual(self.redis("GET", "lockbroker:{rt}").split()[0], "retry1")
        self.assertEqual(c.cmd("ACQUIRE rt WAIT 0"), "TIMEOUT")
        self.assertEqual(c.cmd("VALIDATE rt %d" % f1), "OK VALID")
        self.assertEqual(b.cmd("RELEASE rt"), "OK")

    def test_holder_asking_again_does_not_queue(self):
        a, w = self.client(), self.client()
        f1, _, tok = self.grant(a, "ACQUIRE hq")
        w.send("ACQUIRE hq")
        wait_for(lambda: self.broker.info()["waiters"] == "1")
        f2, _, _ = self.grant(a, "ACQUIRE hq TOKEN %s WAIT 0" % tok)
        f3, _, _ = self.grant(a, "ACQUIRE hq TOKEN " + tok)
        self.assertEqual((f2, f3), (f1, f1))
        self.assertEqual(a.cmd("RELEASE hq"), "OK")
        self.assertRegex(w.line(), GRANT.pattern)

    def test_release_by_token_elsewhere_revokes(self):
        a, b = self.client(), self.client()
        fence, _, _ = self.grant(a, "ACQUIRE rv TOKEN shared-1")
        self.assertEqual(b.cmd("RELEASE rv TOKEN shared-1"), "OK")
        self.assertEqual(a.line(), "EVENT LOST rv %d revoked" % fence)
        self.assertEqual(a.until_end("LOCKS"), [])

    def test_names_are_bytes_and_case_sensitive(self):
        a = self.client()
        name = "Caf\u00e9/{x}:y"
        f1, _, _ = self.grant(a, "ACQUIRE " + name)
        f2, _, _ = self.grant(a, "ACQUIRE " + name.lower())
        self.assertEqual(len(a.until_end("LOCKS")), 2)
        self.assertEqual(a.cmd("STATUS " + name)[:8], "OK HELD ")

    def test_info_and_help(self):
        a = self.client()
        info = a.info()
        for key in ("version", "uptime_s", "clients", "grants_total",
                    "redis_up", "locks_held"):
            self.assertIn(key, info)
        self.assertEqual(info["redis_up"], "1")
        self.grant(a, "ACQUIRE i")
        self.assertEqual(a.info()["locks_held"], "1")
        helps = a.until_end("HELP")
        verbs = [h.split()[0] for h in helps]
        for v in ("PING", "AUTH", "ACQUIRE", "RELEASE", "EXTEND", "STATUS",
                  "VALIDATE", "LOCKS", "INFO", "HELP", "QUIT"):
            self.assertIn(v, verbs)

    def test_half_closed_input_is_answered(self):
        a = self.client()
        a.send("ACQUIRE h\nSTATUS h\nRELEASE h\nSTATUS h\n")
        a.sock.shutdown(1)  # SHUT_WR, as printf ... | nc does
        self.assertRegex(a.line(), GRANT.pattern)
        self.assertRegex(a.line(), r"^OK HELD \d+ \d+$")
        self.assertEqual(a.line(), "OK")
        self.assertEqual(a.line(), "OK FREE")
        self.assertTrue(a.closed())

    def test_half_closed_input_is_answered_behind_a_holder_here(self):
        import os
        import signal
        holder, a = self.client(), self.client()
        self.grant(holder, "ACQUIRE hw")
        # A waiter's first try goes to Redis at once (for its place in the
        # queue of every broker). Redis stopped, that try is still there
        # when the input ends: the wait has not begun, and it becomes one
        # try, refused. (Had the refusal come first, the wait would have
        # begun, and leaving would cancel it: docs/protocol.md §1.)
        os.kill(self.redis.proc.pid, signal.SIGSTOP)
        try:
            n = self.broker.logtext().count("end of input")
            a.send("ACQUIRE hw WAIT 5000\nACQUIRE hw2 TTL 1000\nSTATUS hw\n")
            a.sock.shutdown(1)
            wait_for(lambda: self.broker.logtext().count("end of input") > n,
                     5)
        finally:
            os.kill(self.redis.proc.pid, signal.SIGCONT)
        self.assertEqual(a.line(), "TIMEOUT")
        self.assertRegex(a.line(), r"^OK \d+ 1000 ")
        self.assertRegex(a.line(), r"^OK HELD \d+ \d+$")
        self.assertTrue(a.closed())

    def test_unix_socket(self):
        import os
        from lbtest import Client
        path = os.path.join(self.tmpdir, "lb.sock")
        b2 = self.start_broker(name="unix",
                               conf={"listen": {"unix": path,
                                                "unix_mode": "0600"}})
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        c = Client(path=path)
        self.assertEqual(c.cmd("PING"), "PONG")
        self.grant(c, "ACQUIRE u")
        c.close()
        self.assertEqual(b2.stop(), 0)
        self.assertFalse(os.path.exists(path))


if __name__ == "__main__":
    main()

"""Every ERR code reachable here, and the connection rules around them."""

import socket
import time

from lbtest import Broker, BrokerTest, Client, main, wait_for


class Errors(BrokerTest):
    conf = {"limits": {"max_locks_per_client": 2, "max_line": 300,
                       "max_clients": 20, "max_pending": 4}}

    def test_unknown(self):
        a = self.client()
        self.assertEqual(a.cmd("FROB x"), "ERR UNKNOWN unknown command, try HELP")
        self.assertEqual(a.cmd("PING"), "PONG")

    def test_args(self):
        a = self.client()
        for line in ("ACQUIRE", "RELEASE", "EXTEND x", "STATUS", "STATUS a b",
                     "VALIDATE x", "PING extra", "LOCKS x",
                     "ACQUIRE x TTL", "ACQUIRE x TTL -1", "ACQUIRE x TTL 1e3",
                     "ACQUIRE x TTL 0x10", "ACQUIRE x TTL 18446744073709551616",
                     "ACQUIRE x TTL 0", "ACQUIRE x TTL 5", "ACQUIRE x TTL 100000000000",
                     "ACQUIRE x WAIT abc", "ACQUIRE x KEEP",
                     "ACQUIRE x TTL 100 TTL 100", "ACQUIRE x BOGUS",
                     "ACQUIRE x TOKEN bad/token", "ACQUIRE x TOKEN " + "a" * 65,
                     "RELEASE x TOKEN", "RELEASE x NOTTOKEN t",
                     "EXTEND x abc", "EXTEND x 100 TOKEN",
                     "VALIDATE x -3", "VALIDATE x 18446744073709551616",
                     " ".join(["PING"] * 17)):
            self.assertRegex(a.cmd(line), r"^ERR ARGS ", line)
        self.assertEqual(a.until_end("LOCKS"), [])

    def test_name(self):
        a = self.client()
        self.assertRegex(a.cmd("ACQUIRE " + "n" * 201), r"^ERR NAME ")
        self.assertRegex(a.cmd("STATUS " + "n" * 201), r"^ERR NAME ")
        self.assertRegex(a.cmd("ACQUIRE " + "n" * 200), r"^OK \d+ ")

    def test_held_and_notheld(self):
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE h"), r"^OK ")
        self.assertRegex(a.cmd("ACQUIRE h"), r"^ERR HELD ")
        self.assertRegex(a.cmd("ACQUIRE h TOKEN other"), r"^ERR HELD ")
        self.assertRegex(b.cmd("RELEASE h"), r"^ERR NOTHELD ")
        self.assertRegex(b.cmd("EXTEND h 1000"), r"^ERR NOTHELD ")

    def test_notheld_leaves_redis_untouched(self):
        a, b = self.client(), self.client()
        reply = a.cmd("ACQUIRE n TTL 30000").split()
        token = reply[3]
        before = self.redis("PTTL", "lockbroker:{n}")
        for line in ("RELEASE n", "EXTEND n 90000", "RELEASE n TOKEN wrong",
                     "EXTEND n 90000 TOKEN wrong"):
            self.assertRegex(b.cmd(line), r"^ERR NOTHELD ", line)
        self.assertEqual(self.redis("GET", "lockbroker:{n}").split()[0], token)
        after = self.redis("PTTL", "lockbroker:{n}")
        self.assertTrue(before - 1000 < after <= before, (before, after))
        self.assertEqual(a.cmd("RELEASE n"), "OK")

    def test_limit_locks_per_client(self):
        a = self.client()
        self.assertRegex(a.cmd("ACQUIRE l1"), r"^OK ")
        self.assertRegex(a.cmd("ACQUIRE l2"), r"^OK ")
        self.assertRegex(a.cmd("ACQUIRE l3"), r"^ERR LIMIT ")
        self.assertEqual(a.cmd("RELEASE l1"), "OK")
        self.assertRegex(a.cmd("ACQUIRE l3"), r"^OK ")

    def test_limit_max_clients(self):
        # Count from a connection of our own, so no earlier one is left.
        first = self.client()
        wait_for(lambda: first.info()["clients"] == "1")
        held = [first] + [self.client() for _ in range(19)]
        for c in held:
            self.assertEqual(c.cmd("PING"), "PONG")
        extra = Client(self.broker.port)
        self.assertEqual(extra.line(), "ERR LIMIT too many clients")
        self.assertTrue(extra.closed())
        extra.close()
        held.pop().close()
        wait_for(lambda: first.info()["clients"] == "19")

    def test_proto_control_bytes_keep_the_connection(self):
        a = self.client()
        for raw in (b"PING\x00\n", b"PI\rNG\n", b"\x01\x02\n", b"ACQUIRE a\x7fb\n"):
            a.send(raw)
            self.assertEqual(a.line(), "ERR PROTO control byte in request")
        self.assertEqual(a.cmd("PING"), "PONG")
        a.send(b"PING\r\n\r\n\n   \t\nPING\n")  # CR LF, empty lines ignored
        self.assertEqual(a.line(), "PONG")
        self.assertEqual(a.line(), "PONG")

    def test_proto_line_too_long_closes_others_fine(self):
        a, b = self.client(), self.client()
        self.assertRegex(b.cmd("ACQUIRE keep"), r"^OK ")
        self.assertEqual(a.cmd("PING " + "x" * 295), "ERR ARGS usage: PING")
        a.send("PING " + "x" * 400)
        self.assertEqual(a.line(), "ERR PROTO line too long")
        self.assertTrue(a.closed())
        # Without any newline at all, too.
        c = self.client()
        c.sock.sendall(b"y" * 5000)
        self.assertEqual(c.line(), "ERR PROTO line too long")
        self.assertTrue(c.closed())
        self.assertEqual(b.cmd("PING"), "PONG")
        self.assertEqual(len(b.until_end("LOCKS")), 1)

    def test_limit_pending_behind_a_wait(self):
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE pend"), r"^OK ")
        b.send("ACQUIRE pend WAIT 5000\n" + "PING\n" * 4)
        wait_for(lambda: self.broker.info()["waiters"] == "1")
        b.send("PING\n")  # the fifth behind it
        self.assertEqual(b.line(), "ERR LIMIT more than 4 requests queued "
                                   "behind one in progress")
        self.assertTrue(b.closed())
        self.assertEqual(self.broker.info()["waiters"], "0")
        self.assertEqual(a.cmd("PING"), "PONG")

    def test_waiter_leaving_with_input_queued_is_noticed(self):
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE wq"), r"^OK ")
        b.send("ACQUIRE wq\nPING\nPING\n")
        wait_for(lambda: self.broker.info()["waiters"] == "1")
        b.close()
        wait_for(lambda: self.broker.info()["waiters"] == "0", 2)

    def test_quit_releases_before_replies_drain(self):
        a, b = self.client(), self.client()
        self.assertRegex(a.cmd("ACQUIRE qd"), r"^OK ")
        a.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        a.send("HELP\n" * 3 + "QUIT\n")  # and never read the replies
        wait_for(lambda: self.redis("EXISTS", "lockbroker:{qd}") == 0, 2)
        self.assertRegex(b.cmd("ACQUIRE qd WAIT 0"), r"^OK ")

    def test_client_that_never_reads_is_dropped(self):
        a, b = self.client(), self.client()
        a.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.assertRegex(a.cmd("ACQUIRE nr"), r"^OK ")
        try:
            for _ in range(1500):  # ~30 MB of HELP replies asked for
                a.sock.sendall(b"HELP\n" * 100)
        except OSError:
            pass
        wait_for(lambda: "not reading its replies; closing" in
                 self.broker.logtext(), 5)
        wait_for(lambda: self.redis("EXISTS", "lockbroker:{nr}") == 0, 2)
        self.assertEqual(b.cmd("PING"), "PONG")

    def test_internal_on_foreign_key(self):
        # A key of another type under our prefix: Redis answers WRONGTYPE.
        self.redis("HSET", "lockbroker:{odd}", "f", "v")
        a = self.client()
        self.assertRegex(a.cmd("ACQUIRE odd"), r"^ERR INTERNAL ")
        self.assertEqual(a.cmd("PING"), "PONG")
        self.assertTrue(self.redis("TYPE", "lockbroker:{odd}") == "hash")

    def test_unavailable_when_redis_is_gone(self):
        a = self.client()
        self.assertRegex(a.cmd("ACQUIRE u TTL 60000"), r"^OK ")
        self.redis.kill()
        wait_for(lambda: self.broker.info()["redis_up"] == "0", 5)
        self.assertEqual(a.cmd("ACQUIRE v WAIT 0"), "ERR UNAVAILABLE no "
                         "connection to Redis (reconnecting)")
        for line in ("ACQUIRE v WAIT 0", "EXTEND u 1000", "STATUS u",
                     "VALIDATE u 1", "RELEASE u"):
            self.assertRegex(a.cmd(line), r"^ERR UNAVAILABLE ", line)
        # The broker took the RELEASE over: it is no longer this
        # connection's, and is done when Redis is back (test_faults).
        self.assertEqual(a.until_end("LOCKS"), [])
        self.assertEqual(a.cmd("PING"), "PONG")
        self.redis.start()
        wait_for(lambda: self.broker.info()["redis_up"] == "1", 10)
        # Another Redis process: a grace period, then grants again.
        self.assertRegex(a.cmd("ACQUIRE v WAIT 0"),
                         r"^ERR UNAVAILABLE Redis forgot its locks; "
                         r"no grant for \d+ ms \(grace period\)$")
        wait_for(lambda: a.cmd("ACQUIRE v WAIT 0").startswith("OK "), 10)


class Auth(BrokerTest):
    conf = {"auth": {"secret": "s3cret-of-some-length"}}

    def test_noauth_then_auth(self):
        a = self.client()
        self.assertEqual(a.cmd("PING"), "PONG")
        self.assertEqual(len(a.until_end("HELP")), 15)
        for line in ("ACQUIRE x", "STATUS x", "LOCKS", "INFO"):
            self.assertEqual(a.cmd(line), "ERR NOAUTH AUTH first")
        self.assertEqual(a.cmd("AUTH s3cret-of-some-length"), "OK")
        self.assertRegex(a.cmd("ACQUIRE x"), r"^OK ")

    def test_wrong_secret_closes(self):
        for guess in ("s3cret", "s3cret-of-some-lengtH", "x" * 100):
            a = self.client()
            self.assertEqual(a.cmd("AUTH " + guess), "ERR AUTH wrong secret")
            self.assertTrue(a.closed())

    def test_lines_before_auth_are_short(self):
        a = self.client()
        self.assertEqual(a.cmd("AUTH " + "x" * 130),
                         "ERR PROTO line too long")
        self.assertTrue(a.closed())
        b = self.client()
        self.assertEqual(b.cmd("AUTH s3cret-of-some-length"), "OK")
        self.assertRegex(b.cmd("STATUS " + "n" * 200), r"^OK FREE$")

    def test_quit_before_auth(self):
        a = self.client()
        self.assertEqual(a.cmd("QUIT"), "OK")
        self.assertTrue(a.closed())


class Timeouts(BrokerTest):
    conf = {"auth": {"secret": "sesame-sesame"},
            "limits": {"auth_timeout_s": 1, "idle_timeout_s": 1}}

    def test_auth_timeout(self):
        a = self.client()
        self.assertEqual(a.cmd("PING"), "PONG")
        start = time.monotonic()
        self.assertEqual(a.line(), "ERR NOAUTH no AUTH within 1 s")
        self.assertTrue(a.closed())
        self.assertGreater(time.monotonic() - start, 0.8)

    def test_idle_timeout_spares_waiters(self):
        a, w, idle = self.client(), self.client(), self.client()
        for c in (a, w, idle):
            self.assertEqual(c.cmd("AUTH sesame-sesame"), "OK")
        self.assertRegex(a.cmd("ACQUIRE it"), r"^OK ")
        w.send("ACQUIRE it WAIT 3000")
        for _ in range(4):
            # a keeps itself alive with PING through 2 s, past the idle
            # timeout: the time passing is the test's.
            time.sleep(0.5)
            self.assertEqual(a.cmd("PING"), "PONG")
        self.assertEqual(idle.line(), "ERR LIMIT idle for 1 s")
        self.assertTrue(idle.closed())
        self.assertEqual(a.cmd("RELEASE it"), "OK")
        self.assertRegex(w.line(), r"^OK ")  # waited 2 s, not dropped


if __name__ == "__main__":
    main()

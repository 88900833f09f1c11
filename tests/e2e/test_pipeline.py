"""Pipelined requests are answered in order, one reply each."""

import re
import signal

from lbtest import LATE, BrokerTest, main, tcp_unread, wait_for, wait_until


class Pipeline(BrokerTest):

    def test_100_requests_in_one_write(self):
        a, b = self.client(), self.client()
        self.assertRegex(b.cmd("ACQUIRE busy"), r"^OK ")
        lines, expect = [], []
        for i in range(20):
            name = "p%d" % i
            lines += ["ACQUIRE " + name, "STATUS " + name, "ACQUIRE busy WAIT 0",
                      "RELEASE " + name, "PING"]
            expect += [r"^OK \d+ 10000 [0-9a-f]{32}$", r"^OK HELD \d+ \d+$",
                       r"^TIMEOUT$", r"^OK$", r"^PONG$"]
        self.assertEqual(len(lines), 100)
        a.sock.sendall(("\n".join(lines) + "\n").encode())
        replies = [a.line() for _ in range(100)]
        for line, reply, pattern in zip(lines, replies, expect):
            self.assertRegex(reply, pattern, line)
        self.assertEqual(a.cmd("PING"), "PONG")  # nothing extra queued

    def test_multi_line_replies_stay_whole(self):
        a = self.client()
        a.send("ACQUIRE m1\nLOCKS\nHELP\nINFO\nPING\n")
        self.assertRegex(a.line(), r"^OK ")
        self.assertRegex(a.line(), r"^LOCK m1 ")
        self.assertEqual(a.line(), "END")
        out = []
        while True:
            out.append(a.line())
            if out[-1] == "END":
                break
        self.assertEqual(len(out), 16)  # 15 commands and END
        while True:
            l = a.line()
            if l == "END":
                break
            self.assertTrue(l.startswith("STAT "), l)
        self.assertEqual(a.line(), "PONG")

    def test_many_pipelined_pings(self):
        a = self.client()
        a.sock.sendall(b"PING\n" * 10000)
        for _ in range(10000):
            self.assertEqual(a.line(), "PONG")

    def in_one_turn(self, clients, lines):
        """Each client sends its line while the broker is stopped, so it
        finds them all there when it wakes: one turn of its loop."""
        self.broker.proc.send_signal(signal.SIGSTOP)
        try:
            for c, line in zip(clients, lines):
                c.send(line + "\n")
            for c in clients:
                port = c.sock.getsockname()[1]
                wait_until(lambda: tcp_unread(self.broker.port, port) > 0,
                           what="a line in the stopped broker's socket")
        finally:
            self.broker.proc.send_signal(signal.SIGCONT)

    def test_one_turns_acquires_and_releases_go_in_one_batch(self):
        """Requests from many clients read in one turn go to Redis as one
        batch (docs/internals.md, Batches), and each is answered as if
        it had gone alone: grants, a refusal, a release that is not
        ours, and releases."""
        holder = self.client()
        self.assertRegex(holder.cmd("ACQUIRE busy"), r"^OK ")
        cs = [self.client() for _ in range(24)]
        for c in cs:
            self.assertEqual(c.cmd("PING"), "PONG")
        before = int(self.broker.info()["redis_batched_total"])

        def one_turn(lines):
            self.in_one_turn(cs, lines)
            return [c.line() for c in cs]

        grants = one_turn(["ACQUIRE b%d WAIT 0" % i for i in range(22)] +
                          ["ACQUIRE busy WAIT 0",
                           "RELEASE busy TOKEN 0123456789abcdef"])
        for reply in grants[:22]:
            self.assertRegex(reply, r"^OK \d+ 10000 [0-9a-f]{32}$")
        self.assertEqual(grants[22], "TIMEOUT")
        self.assertRegex(grants[23], r"^ERR NOTHELD the lock is not held ")
        self.assertGreater(int(self.broker.info()["redis_batched_total"]),
                           before + 1)
        for i in range(22):
            self.assertIsNotNone(self.redis("GET", "lockbroker:{b%d}" % i))
        self.assertEqual(one_turn(["RELEASE b%d" % i for i in range(22)] +
                                  ["PING", "LOCKS"]), ["OK"] * 22 +
                         ["PONG", "END"])
        for i in range(22):
            self.assertIsNone(self.redis("GET", "lockbroker:{b%d}" % i))
        self.assertRegex(holder.cmd("RELEASE busy"), r"^OK$")

    def test_a_full_redis_refuses_a_turns_grants(self):
        """A batch holds one script's calls and has that script's flags:
        a full Redis refuses a turn's batch of acquires whole, as it
        refuses each of them alone, and runs its batch of releases
        (allow-oom)."""
        cs = [self.client() for _ in range(16)]
        for i, c in enumerate(cs[::2]):
            self.assertRegex(c.cmd("ACQUIRE x%d" % i), r"^OK ")
        for c in cs[1::2]:
            self.assertEqual(c.cmd("PING"), "PONG")
        self.assertEqual(self.redis("CONFIG", "SET", "maxmemory", "1"), "OK")
        self.addCleanup(self.redis, "CONFIG", "SET", "maxmemory", "0")
        self.in_one_turn(cs, [l for i in range(8) for l in (
            "RELEASE x%d" % i, "ACQUIRE y%d WAIT 0" % i)])
        for i in range(8):
            self.assertEqual(cs[2 * i].line(), "OK")
            self.assertEqual(cs[2 * i + 1].line(),
                             "ERR UNAVAILABLE Redis answered OOM")
            self.assertIsNone(self.redis("GET", "lockbroker:{y%d}" % i))
        self.assertGreater(int(self.broker.info()["redis_batched_total"]),
                           2)


if __name__ == "__main__":
    main()

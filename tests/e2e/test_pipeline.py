"""Pipelined requests are answered in order, one reply each."""

import re

from lbtest import BrokerTest, main


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
        self.assertEqual(len(out), 15)  # 14 commands and END
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


if __name__ == "__main__":
    main()

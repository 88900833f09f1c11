"""Hostile clients: each attack leaves the daemon serving others correctly,
with its RSS within 20 MiB of where it started."""

import re
import resource
import shutil
import socket
import subprocess
import time

from lbtest import BrokerTest, main, tcp_unread, wait_for, wait_until

MIB = 1024 * 1024


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Hostile(BrokerTest):
    conf = {"limits": {"max_clients": 1000}, "log": {"level": "info"}}

    def setUp(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = min(hard, 8192)
        if soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        super().setUp()
        self.good = self.client()
        self.assertRegex(self.good.cmd("ACQUIRE guard"), r"^OK ")
        self.base = rss(self.broker.proc.pid)

    def still_fine(self):
        """The other client is served and memory came back down."""
        self.assertEqual(self.good.cmd("PING"), "PONG")
        self.assertRegex(self.good.cmd("STATUS guard"), r"^OK HELD ")
        self.assertEqual(len(self.good.until_end("LOCKS")), 1)
        grown = rss(self.broker.proc.pid) - self.base
        self.assertLess(grown, 20 * MIB, "RSS grew %d bytes" % grown)

    def raw(self):
        s = socket.create_connection(("127.0.0.1", self.broker.port))
        s.settimeout(10)
        return s

    def test_megabyte_line_without_newline(self):
        s = self.raw()
        try:
            s.sendall(b"A" * MIB)
        except OSError:
            pass  # closed on us mid-send: fine
        data = s.recv(100)
        self.assertEqual(data, b"ERR PROTO line too long\n")
        s.close()
        self.still_fine()

    def test_100000_pipelined_pings(self):
        s = self.raw()
        s.sendall(b"PING\n" * 100000)
        got = b""
        while got.count(b"\n") < 100000:
            got += s.recv(1 << 20)
        self.assertEqual(got, b"PONG\n" * 100000)
        s.close()
        self.still_fine()

    def test_bad_bytes_and_numbers(self):
        c = self.client()
        for raw in (b"PING\x00", b"\rPING", b"A\x01\x02\x03", b"\x1f\x1e"):
            c.send(raw)
            self.assertEqual(c.line(), "ERR PROTO control byte in request")
        for n in ("18446744073709551616", "-1", "1e3", "0x10"):
            self.assertRegex(c.cmd("ACQUIRE n TTL " + n), r"^ERR ARGS ")
            self.assertRegex(c.cmd("VALIDATE n " + n), r"^ERR ARGS ")
        self.assertRegex(c.cmd("ACQUIRE " + "x" * 201), r"^ERR NAME ")
        self.assertRegex(c.cmd("ACQUIRE {br}ace}{ WAIT 0"), r"^OK ")
        self.assertEqual(c.cmd("RELEASE {br}ace}{"), "OK")
        self.still_fine()

    def test_2000_connections_over_max_clients(self):
        socks, refused = [], 0
        for _ in range(2000):
            s = socket.create_connection(("127.0.0.1", self.broker.port))
            socks.append(s)
        for s in socks[1000:]:
            s.settimeout(10)
            if s.recv(100) == b"ERR LIMIT too many clients\n":
                refused += 1
        # 1000 slots, minus the two this test already holds.
        self.assertGreaterEqual(refused, 1000)
        self.assertEqual(self.good.cmd("PING"), "PONG")
        for s in socks:
            s.close()
        wait_for(lambda: self.broker.info()["clients"] == "2", 10)
        self.still_fine()

    def test_500_half_lines_that_stall(self):
        socks = []
        for i in range(500):
            s = socket.create_connection(("127.0.0.1", self.broker.port))
            s.sendall(b"ACQUIRE half%d TT" % i)
            socks.append(s)
        # All of them taken in (the good client and INFO's too).
        self.broker.wait_info("clients", 502)
        self.still_fine()
        for s in socks:
            s.close()
        wait_for(lambda: self.broker.info()["clients"] == "2", 10)

    def test_10000_acquires_never_read(self):
        s = self.raw()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            s.sendall(b"".join(b"ACQUIRE p%d WAIT 0\n" % i
                               for i in range(10000)))
        except OSError:
            pass
        # Dealt with: dropped (ERR LIMIT), or its answers pile up unread
        # at its end.
        me = s.getsockname()[1]
        wait_until(lambda: self.broker.info()["clients"] == "2" or
                   tcp_unread(me, self.broker.port) > 0,
                   what="the hostile client dropped or its answers unread")
        self.still_fine()
        s.close()
        wait_for(lambda: self.broker.info()["locks_held"] == "1", 10)



class Guessing(BrokerTest):
    """A peer guessing the AUTH secret over fresh connections is held back
    (docs/protocol.md §4, AUTH), and the log does not flood."""
    conf = {"auth": {"secret": "right-secret"}, "log": {"level": "info"}}

    def test_wrong_auths_are_spaced_per_peer(self):
        conns = [self.client() for _ in range(6)]
        start = time.monotonic()
        for c in conns:
            c.send("AUTH wrong")
        done = []
        for c in conns:
            self.assertEqual(c.line(), "ERR AUTH wrong secret")
            done.append(time.monotonic() - start)
            self.assertTrue(c.closed())
        # The slots after 1..5 failures: 50+100+200+400+800 ms.
        self.assertGreater(max(done), 1.4, done)
        # The right secret from the same peer waits its slot, then works,
        # and the peer starts afresh.
        ok = self.client()
        self.assertEqual(ok.cmd("AUTH right-secret"), "OK")
        fresh = self.client()
        t = time.monotonic()
        self.assertEqual(fresh.cmd("AUTH right-secret"), "OK")
        self.assertLess(time.monotonic() - t, 1.0)
        lines = self.broker.logtext().count("AUTH failed")
        self.assertLess(lines, 6, "one log line per failure")

    def test_many_parallel_guesses_are_few_per_second(self):
        conns = [self.client() for _ in range(40)]
        start = time.monotonic()
        for c in conns:
            c.send("AUTH wrong")
        answered = 0
        for c in conns:
            c.sock.settimeout(0.1)
            try:
                while time.monotonic() - start < 3.0 and "\n" not in \
                        c.buf.decode(errors="replace"):
                    try:
                        chunk = c.sock.recv(4096)
                    except socket.timeout:
                        continue
                    if not chunk:
                        break
                    c.buf += chunk
            finally:
                answered += b"ERR AUTH" in c.buf
        # Without the back-off all 40 are answered at once.
        self.assertLess(answered, 12, answered)


class Keepalive(BrokerTest):
    """limits.tcp_keepalive_s: an accepted TCP connection has keepalive
    on, with the configured idle time (ss shows its timer)."""
    conf = {"limits": {"tcp_keepalive_s": 45}}

    def timer_of(self, c):
        port = c.sock.getsockname()[1]
        out = subprocess.run(
            ["ss", "-tnoH", "state", "established", "( dport = :%d )" % port],
            capture_output=True, text=True, check=True).stdout
        return out

    def test_keepalive_on_accepted_connections(self):
        if shutil.which("ss") is None:
            self.skipTest("ss (iproute2) is not installed")
        c = self.client()
        self.assertEqual(c.cmd("PING"), "PONG")
        out = self.timer_of(c)
        m = re.search(r"timer:\(keepalive,([0-9.]+)(m?s|min)", out)
        self.assertIsNotNone(m, out)
        self.assertLessEqual(float(m.group(1)), 45 if m.group(2) != "ms"
                             else 45000)
        # 0: the system's settings (2 hours on Linux).
        self.broker.reload({"limits": {"tcp_keepalive_s": 0}})
        c2 = self.client()
        self.assertEqual(c2.cmd("PING"), "PONG")
        out = self.timer_of(c2)
        m = re.search(r"timer:\(keepalive,([0-9.]+)min", out)
        self.assertIsNotNone(m, out)
        self.assertGreater(float(m.group(1)), 60, out)

if __name__ == "__main__":
    main()

"""Operating it: graceful stop on SIGTERM, reload on SIGHUP."""

import os
import shutil
import unittest
import signal
import subprocess
import time

from lbtest import STEP, BrokerTest, main, wait_for, wait_until


class Stop(BrokerTest):

    def test_sigterm_answers_waiters_and_releases(self):
        holder, waiter, keeper = self.client(), self.client(), self.client()
        self.assertRegex(holder.cmd("ACQUIRE s1"), r"^OK ")
        self.assertRegex(holder.cmd("ACQUIRE s2 TTL 60000"), r"^OK ")
        tok = keeper.cmd("ACQUIRE s3 TTL 60000 KEEP").split()[3]
        waiter.send("ACQUIRE s1")
        wait_for(lambda: self.broker.info()["waiters"] == "1")
        start = time.monotonic()
        self.assertEqual(self.broker.stop(), 0)
        self.assertLess(time.monotonic() - start, 2.0)
        self.assertEqual(waiter.line(), "ERR SHUTDOWN the broker is stopping")
        self.assertTrue(waiter.closed())
        self.assertTrue(holder.closed())
        self.assertEqual(self.redis("EXISTS", "lockbroker:{s1}"), 0)
        self.assertEqual(self.redis("EXISTS", "lockbroker:{s2}"), 0)
        # A kept lock outlives connections, and so this broker too.
        self.assertEqual(self.redis("GET", "lockbroker:{s3}").split()[0], tok)
        self.assertIn("signal 15: stopping", self.broker.logtext())

    def test_sigterm_with_redis_stopped(self):
        a = self.client()
        self.assertRegex(a.cmd("ACQUIRE p"), r"^OK ")
        os.kill(self.redis.proc.pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            self.assertEqual(self.broker.stop(), 0)
            took = time.monotonic() - start
        finally:
            os.kill(self.redis.proc.pid, signal.SIGCONT)
        self.assertLess(took, 1.0 + 0.5)  # command_timeout_ms + margin


    def test_sigterm_again_while_it_stops_still_exits_0(self):
        """systemd or an impatient operator may send SIGTERM again: the
        stop goes on, and its exit status stays 0 (the teardown that
        frees the signal events must not die by the next one)."""
        holders = [self.client() for _ in range(50)]
        for i, c in enumerate(holders):
            self.assertRegex(c.cmd("ACQUIRE t%d" % i), r"^OK ")
        p = self.broker.proc
        p.send_signal(signal.SIGTERM)
        while p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                break
            try:
                p.wait(0.0002)  # its exit, or the next SIGTERM
            except subprocess.TimeoutExpired:
                pass
        self.assertEqual(p.wait(), 0)
        self.assertIn("stopped", self.broker.logtext())


class Reload(BrokerTest):

    def test_reload_applies_reloadable_keys(self):
        a = self.client()
        self.assertRegex(a.cmd("ACQUIRE r1"), r"^OK ")
        self.assertRegex(a.cmd("ACQUIRE r2"), r"^OK ")
        port = self.broker.port
        self.broker.reload({"limits": {"max_locks_per_client": 2},
                            "listen": {"port": port + 1 if port < 65535 else port - 1},
                            "log": {"level": "info"}})
        log = self.broker.logtext()
        self.assertIn("reload: limits.max_locks_per_client changed", log)
        self.assertIn("reload: listen.port changed but needs a restart", log)
        self.assertIn("1 need a restart", log)
        self.assertRegex(a.cmd("ACQUIRE r3"), r"^ERR LIMIT ")
        b = self.client()  # still on the old port
        self.assertEqual(b.cmd("PING"), "PONG")
        # log.level went from debug to info: no more debug lines.
        mark = len(self.broker.logtext())
        c = self.client()
        c.cmd("PING")
        c.close()
        # Two round trips on b after c's end of input was sent: the
        # broker's loop has turned past it (a debug line would be there).
        for _ in range(2):
            self.assertEqual(b.cmd("PING"), "PONG")
        self.assertNotIn("debug:", self.broker.logtext()[mark:])

    def test_reload_shorter_lease_keeps_session_locks(self):
        a = self.client()
        fence = a.cmd("ACQUIRE lease").split()[1]
        self.broker.reload({"locks": {"lease_ms": 300}})
        # The renewal due at a third of the old lease (3.3 s) uses the new
        # lease, and every third of it from then on.
        key = "lockbroker:{lease}"
        wait_until(lambda: self.redis("PTTL", key) <= 300 + STEP, 10,
                   "a renewal with the new lease")
        renewed = int(self.broker.info()["renewals_total"])
        wait_until(lambda: int(self.broker.info()["renewals_total"]) >=
                   renewed + 2, 5, "two more renewals")
        self.assertEqual(a.cmd("VALIDATE lease " + fence), "OK VALID")
        self.assertLessEqual(self.redis("PTTL", "lockbroker:{lease}"),
                             300 + STEP)

    def test_bad_file_keeps_running_config(self):
        a = self.client()
        self.broker.reload(raw="limits = { max_clients = 0; };\n")
        log = self.broker.logtext()
        self.assertRegex(log, r"reload: .*broker.conf:1: limits.max_clients: "
                              r".*keeping the running configuration")
        self.assertEqual(a.cmd("PING"), "PONG")
        self.assertRegex(a.cmd("ACQUIRE still"), r"^OK ")

    def test_reload_auth_secret(self):
        self.broker.reload({"auth": {"secret": "now-needed"}})
        self.broker.secret = "now-needed"
        a = self.client()
        self.assertEqual(a.cmd("ACQUIRE z"), "ERR NOAUTH AUTH first")
        self.assertEqual(a.cmd("AUTH now-needed"), "OK")
        self.assertRegex(a.cmd("ACQUIRE z"), r"^OK ")


def _links_libsystemd():
    import subprocess
    from lbtest import LOCKBROKERD
    out = subprocess.run(["ldd", LOCKBROKERD], capture_output=True,
                         text=True).stdout
    return "libsystemd" in out


@unittest.skipUnless(_links_libsystemd(), "built without libsystemd")
class Watchdog(BrokerTest):
    """systemd's notifications: READY=1 once serving, STOPPING=1 on
    SIGTERM, and with WatchdogSec= (WATCHDOG_USEC) a WATCHDOG=1 from the
    loop every half interval, so a stuck loop gets the daemon restarted."""

    def notified(self, watchdog_usec):
        """A broker whose NOTIFY_SOCKET is ours: (broker, socket)."""
        import socket
        path = os.path.join(self.tmpdir, "notify-%s" % watchdog_usec)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        self.addCleanup(sock.close)
        env = dict(os.environ, NOTIFY_SOCKET=path)
        env.pop("WATCHDOG_USEC", None)
        env.pop("WATCHDOG_PID", None)
        if watchdog_usec:
            env["WATCHDOG_USEC"] = str(watchdog_usec)
        b = self.start_broker(name="notified-%s" % watchdog_usec, env=env)
        return b, sock

    @staticmethod
    def messages(sock, seconds):
        """Every datagram for that long, one string each."""
        got = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sock.settimeout(max(0.01, end - time.monotonic()))
            try:
                got.append(sock.recv(4096).decode())
            except OSError:
                pass
        return got

    def test_pings_every_half_interval(self):
        from lbtest import SLOW
        b, sock = self.notified(200000)  # WatchdogSec=200ms
        # (STATUS= lines: test_status_for_systemctl)
        got = [g for g in self.messages(sock, 1.0 * SLOW)
               if not g.startswith("STATUS=")]
        self.assertEqual(got[0], "READY=1")
        pings = got.count("WATCHDOG=1")
        # Every 100 ms: about 10 a second (fewer under valgrind).
        self.assertGreaterEqual(pings, 4, got)
        self.assertEqual(len(got), 1 + pings, got)
        self.assertIn("systemd watchdog: a ping every 100 ms", b.logtext())
        b.proc.send_signal(signal.SIGTERM)
        self.assertIn("STOPPING=1", self.messages(sock, 1.0 * SLOW))
        self.assertEqual(b.stop(), 0)

    def test_no_pings_without_watchdog(self):
        from lbtest import SLOW
        b, sock = self.notified(0)
        got = [g for g in self.messages(sock, 0.5 * SLOW)
               if not g.startswith("STATUS=")]
        self.assertEqual(got, ["READY=1"])
        self.assertNotIn("systemd watchdog", b.logtext())


class SocketActivation(BrokerTest):

    @unittest.skipUnless(shutil.which("systemd-socket-activate"),
                         "systemd-socket-activate is not installed")
    def test_passed_socket(self):
        import socket
        import subprocess
        from lbtest import LOCKBROKERD, Client, free_port
        port = free_port()
        log = os.path.join(self.tmpdir, "activated.log")
        with open(log, "wb") as out:
            p = subprocess.Popen(
                ["systemd-socket-activate", "-l", "127.0.0.1:%d" % port,
                 LOCKBROKERD, "-c", self.broker.conf],
                stdout=out, stderr=out)
        try:
            # The first connection starts it; it serves on the passed socket.
            c = wait_for(lambda: Client(port), 10)
            self.assertEqual(c.cmd("PING"), "PONG")
            # WAIT: the broker may still be learning Redis's incarnation.
            self.assertRegex(c.cmd("ACQUIRE act WAIT 3000"), r"^OK ")
            c.close()
            with open(log) as f:
                text = f.read()
            self.assertIn("from systemd", text)
            self.assertIn("listen.* ignored: sockets come from systemd", text)
        finally:
            p.send_signal(signal.SIGTERM)
            self.assertEqual(p.wait(10), 0)


class Exposure(BrokerTest):

    def test_refuses_wide_listen_without_secret(self):
        import subprocess
        from lbtest import LOCKBROKERD, render_conf
        conf = os.path.join(self.tmpdir, "wide.conf")
        with open(conf, "w") as f:
            f.write(render_conf({"listen": {"address": "0.0.0.0",
                                            "port": 1}}))
        for args in (["-t", "-c", conf], ["-c", conf]):
            p = subprocess.run([LOCKBROKERD] + args, capture_output=True,
                               text=True, timeout=10)
            self.assertEqual(p.returncode, 78)
            self.assertIn("wide.conf:1: listen.address: beyond loopback "
                          "needs auth.secret (or listen.insecure = true)",
                          p.stderr)


    def test_command_line(self):
        """--help and --version as -h and -V; a usage error exits 2, a
        configuration error 1."""
        import subprocess
        from lbtest import LOCKBROKERD

        def run(*args):
            return subprocess.run([LOCKBROKERD] + list(args),
                                  capture_output=True, text=True, timeout=10)
        for args in (["-h"], ["--help"]):
            p = run(*args)
            self.assertEqual((p.returncode, p.stderr), (0, ""))
            self.assertIn("--config file", p.stdout)
        for args in (["-V"], ["--version"]):
            p = run(*args)
            self.assertEqual(p.returncode, 0)
            self.assertRegex(p.stdout, r"^lockbrokerd \d+\.\d+\.\d+\n$")
        for args in (["--bogus"], ["-x"], ["-c"], ["left-over"]):
            p = run(*args)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn("usage: lockbrokerd", p.stderr)
        p = run("--config", os.path.join(self.tmpdir, "missing.conf"))
        self.assertEqual(p.returncode, 78)

    def test_journal_priorities(self):
        """Under systemd (JOURNAL_STREAM names its stderr) each line starts
        with its syslog priority and has no timestamp; JOURNAL_STREAM
        inherited by a process whose stderr goes elsewhere changes
        nothing."""
        import signal
        import subprocess
        from lbtest import LOCKBROKERD, free_port, render_conf
        conf = os.path.join(self.tmpdir, "j.conf")
        with open(conf, "w") as f:
            f.write(render_conf({
                "listen": {"address": "127.0.0.1", "port": free_port()},
                "redis": {"host": "127.0.0.1", "port": free_port()}}))
        for matching in (True, False):
            path = os.path.join(self.tmpdir, "stderr%d" % matching)
            with open(path, "w") as err:
                st = os.fstat(err.fileno())
                js = "%d:%d" % (st.st_dev, st.st_ino) if matching else "1:1"
                p = subprocess.Popen([LOCKBROKERD, "-c", conf], stderr=err,
                                     env=dict(os.environ, JOURNAL_STREAM=js))
                wait_for(lambda: "cannot connect" in open(path).read(), 5)
                p.send_signal(signal.SIGTERM)
                self.assertEqual(p.wait(10), 0)
            lines = open(path).read().splitlines()
            if matching:
                # The priority says the level; the text does not again.
                self.assertRegex(lines[0], r"^<6>listening on ")
                self.assertTrue(any(l.startswith("<4>redis command: "
                                                 "cannot connect")
                                    for l in lines), lines)
            else:
                self.assertRegex(lines[0], r"^\d{4}-\d\d-\d\dT[\d:.]+Z info: ")

    def test_listen_backlog(self):
        """The daemon's own sockets listen with listen.backlog (511 by
        default); a socket systemd passed keeps the backlog systemd made
        it with (lockbroker.socket: 511), not libevent's 128."""
        import signal
        import socket
        import subprocess
        from lbtest import LOCKBROKERD, free_port, render_conf

        def backlog(args):
            out = subprocess.run(["ss", "-lnH"] + args, capture_output=True,
                                 text=True, check=True).stdout.split()
            # [Netid] State Recv-Q Send-Q ...: a listener's Send-Q is its
            # backlog.
            return int(out[out.index("LISTEN") + 2]) if out else None

        def start(conf, env=None, pass_fds=(), shell=None):
            path = os.path.join(self.tmpdir, "backlog.conf")
            with open(path, "w") as f:
                f.write(render_conf(conf))
            argv = [LOCKBROKERD, "-c", path]
            if shell:
                argv = ["sh", "-c", shell + ' exec "$0" "$@"'] + argv
            log = open(os.path.join(self.tmpdir, "backlog.log"), "w")
            self.addCleanup(log.close)
            p = subprocess.Popen(argv, stderr=log, env=env,
                                 pass_fds=pass_fds)
            self.addCleanup(lambda: p.poll() is not None or
                            (p.send_signal(signal.SIGTERM), p.wait(10)))
            return p

        redis = {"host": "127.0.0.1", "port": free_port()}
        port, sock = free_port(), os.path.join(self.tmpdir, "b.sock")
        p = start({"listen": {"address": "127.0.0.1", "port": port,
                              "unix": sock, "backlog": 1000},
                   "redis": redis})
        wait_for(lambda: backlog(["-t", "sport = :%d" % port]) == 1000, 5)
        wait_for(lambda: backlog(["-x", "src", sock]) == 1000, 5)
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(10), 0)
        # Passed as systemd does: fd 3, LISTEN_FDS=1, LISTEN_PID its own.
        s = socket.socket()
        self.addCleanup(s.close)
        s.bind(("127.0.0.1", 0))
        s.listen(777)
        passed = s.getsockname()[1]
        p = start({"redis": redis}, pass_fds=(s.fileno(),),
                  env=dict(os.environ, LISTEN_FDS="1"),
                  shell="exec 3<&%d; export LISTEN_PID=$$;" % s.fileno())
        wait_for(lambda: "listening on socket 3 from systemd" in open(
            os.path.join(self.tmpdir, "backlog.log")).read(), 5)
        self.assertEqual(backlog(["-t", "sport = :%d" % passed]), 777)
        self.assertIsNone(p.poll())

    def test_status_for_systemctl(self):
        """Under systemd (NOTIFY_SOCKET) the daemon says READY=1, then a
        STATUS= line for systemctl status whenever what it says changes:
        whether Redis is connected, and how many locks are held and
        waited for."""
        import socket
        notify = os.path.join(self.tmpdir, "notify.sock")
        sd = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.addCleanup(sd.close)
        sd.bind(notify)
        sd.settimeout(0.2)
        said = []

        def status(want):
            try:
                while True:
                    said.extend(sd.recv(4096).decode().split("\n"))
            except socket.timeout:
                pass
            return any(l.startswith("STATUS=") and want in l for l in said)
        b = self.start_broker(env=dict(os.environ, NOTIFY_SOCKET=notify),
                              name="notified")
        wait_for(lambda: status("Redis connected; 0 locks held, 0 waiting"),
                 5)
        self.assertIn("READY=1", said)
        c = self.client(b)
        self.assertRegex(c.cmd("ACQUIRE shown"), r"^OK ")
        wait_for(lambda: status("Redis connected; 1 lock held, 0 waiting"),
                 5)
        self.redis.kill()
        wait_for(lambda: status("Redis not connected"), 5)

    def test_metrics_socket_from_systemd(self):
        """A socket systemd passes named "metrics" (lockbroker-metrics.socket,
        FileDescriptorName=metrics) serves /metrics and /healthz, and the
        others serve clients: a scrape reaches a socket-activated broker
        before any client did (it is what starts it), so LockbrokerDown
        means down."""
        import signal
        import socket
        import subprocess
        import urllib.request
        from lbtest import LOCKBROKERD, free_port, render_conf
        socks = []
        for _ in range(2):
            s = socket.socket()
            self.addCleanup(s.close)
            s.bind(("127.0.0.1", 0))
            s.listen(16)
            socks.append(s)
        clients, metrics = (s.getsockname()[1] for s in socks)
        path = os.path.join(self.tmpdir, "sdm.conf")
        with open(path, "w") as f:
            f.write(render_conf({"redis": {"host": "127.0.0.1",
                                           "port": free_port()},
                                 "metrics": {"enabled": True,
                                             "port": free_port()}}))
        log = os.path.join(self.tmpdir, "sdm.log")
        with open(log, "w") as err:
            p = subprocess.Popen(
                ["sh", "-c", 'exec 3<&%d 4<&%d; export LISTEN_PID=$$; '
                 'exec "$0" "$@"' % tuple(s.fileno() for s in socks),
                 LOCKBROKERD, "-c", path], stderr=err,
                pass_fds=[s.fileno() for s in socks],
                env=dict(os.environ, LISTEN_FDS="2",
                         LISTEN_FDNAMES="lockbroker.socket:metrics"))
        self.addCleanup(lambda: p.poll() is not None or
                        (p.send_signal(signal.SIGTERM), p.wait(10)))
        wait_for(lambda: "metrics on socket 4 from systemd" in
                 open(log).read(), 5)
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics,
                                    timeout=5) as r:
            self.assertIn("lockbroker_build_info", r.read().decode())
        c = socket.create_connection(("127.0.0.1", clients), timeout=5)
        self.addCleanup(c.close)
        c.sendall(b"PING\r\n")
        self.assertEqual(c.recv(64), b"PONG\n")

    @unittest.skipUnless(os.geteuid() == 0, "needs root to change users")
    def test_unix_socket_group(self):
        """listen.unix_group gives the Unix socket to a group, so that an
        unprivileged client in it may connect (with unix_mode "0660");
        one outside it may not. A group that does not exist is refused
        by -t."""
        import grp
        import pwd
        import socket
        import subprocess
        from lbtest import LOCKBROKERD, free_port, render_conf
        gid = grp.getgrnam("nogroup").gr_gid
        nobody = pwd.getpwnam("nobody").pw_uid
        sock = os.path.join(self.tmpdir, "g.sock")
        os.chmod(self.tmpdir, 0o755)
        b = self.start_broker({"listen": {"unix": sock,
                                          "unix_group": "nogroup"}},
                              name="group")
        wait_for(lambda: os.path.exists(sock), 5)
        st = os.stat(sock)
        self.assertEqual((st.st_gid, st.st_mode & 0o777), (gid, 0o660))

        def ping_as(groups):
            def drop():
                os.setgroups(groups)
                os.setgid(groups[0])
                os.setuid(nobody)
            code = ("import socket,sys\n"
                    "s=socket.socket(socket.AF_UNIX)\n"
                    "try: s.connect(sys.argv[1])\n"
                    "except PermissionError: print('denied'); sys.exit()\n"
                    "s.sendall(b'PING\\r\\n'); print(s.recv(64).decode().strip())")
            return subprocess.run(["python3", "-c", code, sock],
                                  preexec_fn=drop, capture_output=True,
                                  text=True, timeout=10).stdout.strip()
        self.assertEqual(ping_as([gid]), "PONG")
        self.assertEqual(ping_as([grp.getgrnam("users").gr_gid]), "denied")
        conf = os.path.join(self.tmpdir, "nogroup.conf")
        with open(conf, "w") as f:
            f.write(render_conf({"listen": {
                "unix": sock, "unix_group": "no-such-group-here"}}))
        p = subprocess.run([LOCKBROKERD, "-t", "-c", conf],
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 78)
        self.assertIn("listen.unix_group: no group named "
                      "\"no-such-group-here\"", p.stderr)

    def test_a_bad_configuration_is_an_error_in_the_journal(self):
        """A configuration the daemon refuses at start reaches the journal
        at priority 3 (err), the reason in the text, and the daemon exits
        78 (EX_CONFIG), which the unit's RestartPreventExitStatus= keeps
        systemd from retrying; -t says the same on a terminal."""
        import subprocess
        from lbtest import LOCKBROKERD
        conf = os.path.join(self.tmpdir, "bad.conf")
        with open(conf, "w") as f:
            f.write("listen = {\n  port = \"x\";\n};\n")
        path = os.path.join(self.tmpdir, "journal")
        with open(path, "w") as err:
            st = os.fstat(err.fileno())
            p = subprocess.run([LOCKBROKERD, "-c", conf], stderr=err,
                               timeout=10, env=dict(
                                   os.environ, JOURNAL_STREAM="%d:%d" % (
                                       st.st_dev, st.st_ino)))
        self.assertEqual(p.returncode, 78)
        lines = open(path).read().splitlines()
        self.assertEqual(len(lines), 1, lines)
        self.assertRegex(lines[0], r"^<3>lockbrokerd: .*bad\.conf:2: "
                         r"listen\.port: ")
        p = subprocess.run([LOCKBROKERD, "-t", "-c", conf],
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 78)
        self.assertRegex(p.stderr, r"^lockbrokerd: .*bad\.conf:2: "
                         r"listen\.port: ")

    def test_equal_secret_files_fail_the_check_and_the_start(self):
        import subprocess
        from lbtest import LOCKBROKERD, render_conf
        files = {}
        for key in ("user", "admin"):
            files[key] = os.path.join(self.tmpdir, key + ".secret")
            with open(files[key], "w") as f:
                f.write("same-secret\n")
        conf = os.path.join(self.tmpdir, "secrets.conf")
        with open(conf, "w") as f:
            f.write(render_conf({"auth": {
                "secret_file": files["user"],
                "admin_secret_file": files["admin"]}}))
        for args in (["-t", "-c", conf], ["-c", conf]):
            p = subprocess.run([LOCKBROKERD] + args, capture_output=True,
                               text=True, timeout=10)
            self.assertEqual(p.returncode, 78, p.stderr)
            self.assertIn("auth.admin_secret must differ from auth.secret",
                          p.stderr)
        with open(files["admin"], "w") as f:
            f.write("other-secret\n")
        p = subprocess.run([LOCKBROKERD, "-t", "-c", conf],
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)


if __name__ == "__main__":
    main()

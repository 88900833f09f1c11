"""lockctl, the command-line client, against a real redis-server and
lockbrokerd: mutual exclusion of `lockctl run`, the lock in COMMAND's
environment, exit codes, and the process group stopped when the lock is lost
(key deleted in Redis, TTL run out, broker killed, REVOKE); shared and
counting locks, `who`, `revoke`, and single-flight `fill`."""

import calendar
import fcntl
import os
import re
import shutil
import signal
import subprocess
import termios
import time

from lbtest import SLOW, BrokerTest, free_port, main, wait_for, wait_until

LOCKCTL = os.environ.get("LOCKCTL", "build/tools/lockctl")

EXIT_USAGE, EXIT_LOST, EXIT_NOTHELD = 64, 66, 67
EXIT_UNAVAILABLE, EXIT_BUSY, EXIT_AUTH = 69, 75, 77

GRANT = re.compile(r"^(\d+) (\d+) (\S+)$")
# who: "<fence> <ttl_ms> <mode> <broker> <client> <since_ms>"
HOLDER = re.compile(r"^(\d+) (\d+) (\S+) (\S+):(\d+) (\d+)@(\S+) (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)$")


def comm(pid):
    """The name pid runs as ("" once it is gone)."""
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def gone(pid):
    """True once pid has exited (a zombie counts as exited)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


class LockctlTest(BrokerTest):
    """BrokerTest plus helpers that run lockctl against this test's broker
    and kill whatever it started if a test fails half-way."""

    def setUp(self):
        super().setUp()
        self.pids = []  # COMMAND and grandchild pids, killed at cleanup
        self.addCleanup(self._kill_pids)

    def _kill_pids(self):
        for pid in self.pids:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)

    def env(self, **extra):
        env = dict(os.environ)
        env.pop("LOCKBROKER_SECRET", None)
        env["LOCKBROKER_ADDR"] = "127.0.0.1:%d" % self.broker.port
        env.update(extra)
        return env

    def path(self, name):
        return os.path.join(self.tmpdir, name)

    def slurp(self, name):
        with open(self.path(name)) as f:
            return f.read()

    def start(self, *args, env=None, **kw):
        """Start lockctl in the background; killed at cleanup if still up."""
        p = subprocess.Popen([LOCKCTL] + list(args), env=env or self.env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, **kw)
        self.addCleanup(self._reap, p)
        return p

    @staticmethod
    def _reap(p):
        if p.poll() is None:
            p.kill()
        p.communicate()

    def ctl(self, *args, env=None, timeout=10, **kw):
        """Run lockctl to the end: (exit code, stdout, stderr)."""
        p = self.start(*args, env=env, **kw)
        out, err = p.communicate(timeout=timeout * SLOW)
        return p.returncode, out, err

    def read_pid(self, name):
        wait_for(lambda: os.path.exists(self.path(name)) and
                 self.slurp(name).endswith("\n"))
        pid = int(self.slurp(name))
        self.pids.append(pid)
        return pid

    def status(self, name):
        return self.client().cmd("STATUS " + name)

    def secret_file(self, name, secret):
        path = self.path(name)
        with open(path, "w") as f:
            f.write(secret + "\n")
        return path

    def grant(self, *args):
        """lockctl acquire ARGS, which must succeed: (fence, ttl, token)."""
        rc, out, err = self.ctl("acquire", *args)
        self.assertEqual(rc, 0, err)
        m = GRANT.match(out.strip())
        self.assertIsNotNone(m, out)
        return int(m.group(1)), int(m.group(2)), m.group(3)

    def who(self, name):
        """lockctl who NAME: its lines, split into words."""
        rc, out, err = self.ctl("who", name)
        self.assertEqual(rc, 0, err)
        for line in out.splitlines():
            self.assertRegex(line, HOLDER)
        return [line.split() for line in out.splitlines()]

    def start_group(self, name, *opts, script="", grandchild="sleep 60"):
        """`lockctl run` of a shell that starts a grandchild (which ends up
        as `sleep 60`) in its own process group and waits; returns
        (lockctl, sh pid, sleep pid) once both are up."""
        cmd = (script + 'echo $$ > "$D/child"; %s & '
               'echo $! > "$D/grandchild"; wait' % grandchild)
        p = self.start("run", *opts, name, "--", "sh", "-c", cmd,
                       env=self.env(D=self.tmpdir))
        child, gc = self.read_pid("child"), self.read_pid("grandchild")
        # Until it has exec'd sleep, the grandchild is a copy of sh that
        # still has sh's TERM trap: a signal then is caught, not obeyed.
        wait_for(lambda: comm(gc) == "sleep", timeout=5 * SLOW)
        return p, child, gc

    def assert_group_gone(self, child, grandchild):
        self.assertTrue(gone(child), "COMMAND still running")
        self.assertTrue(gone(grandchild), "COMMAND's grandchild still running")


class Run(LockctlTest):
    def test_two_runs_never_overlap(self):
        script = ('s=$(date +%s.%N); sleep 0.5; e=$(date +%s.%N); '
                  'echo "$s $e" > "$D/$1"')
        t0 = time.time()
        runs = [self.start("run", "excl", "--", "sh", "-c", script, "sh", tag,
                           env=self.env(D=self.tmpdir))
                for tag in ("a", "b")]
        for p in runs:
            out, err = p.communicate(timeout=10 * SLOW)
            self.assertEqual(p.returncode, 0, err)
        spans = sorted(tuple(map(float, self.slurp(t).split()))
                       for t in ("a", "b"))
        (s1, e1), (s2, e2) = spans
        self.assertGreaterEqual(e1 - s1, 0.5)
        self.assertLessEqual(e1, s2, "the two COMMANDs overlapped: %r" % spans)
        # The second waited for the first: it could not start before
        # the first had held the lock for its whole sleep.
        self.assertGreaterEqual(s2 - t0, 0.5)
        self.assertEqual(self.status("excl"), "OK FREE")

    def test_lock_reaches_command_environment(self):
        script = ('echo "$LOCK_NAME $LOCK_FENCE $LOCK_TOKEN" > "$D/env.tmp"; '
                  'mv "$D/env.tmp" "$D/env"; '
                  'while [ ! -e "$D/go" ]; do sleep 0.02; done')
        # Above Redis's clock in µs, so the next fence is the counter's.
        self.redis("SET", "lockbroker:{envlock}:fence", "9000000000000041")
        p = self.start("run", "envlock", "--", "sh", "-c", script,
                       env=self.env(D=self.tmpdir))
        wait_for(lambda: os.path.exists(self.path("env")))
        name, fence, token = self.slurp("env").split()
        self.assertEqual(name, "envlock")
        self.assertEqual(fence, "9000000000000042")
        self.assertRegex(token, r"^[0-9a-f]{32}$")
        # While COMMAND runs the lock is held in Redis under that token.
        self.assertEqual(self.redis("GET", "lockbroker:{envlock}").split()[0], token)
        self.assertRegex(self.status("envlock"),
                         r"^OK HELD \d+ 9000000000000042$")
        open(self.path("go"), "w").close()
        out, err = p.communicate(timeout=10 * SLOW)
        self.assertEqual(p.returncode, 0, err)
        # Released at once, not left to its 10 s lease.
        self.assertEqual(self.status("envlock"), "OK FREE")

    def test_try_on_held_lock_exits_75_quickly(self):
        holder = self.client()
        self.assertRegex(holder.cmd("ACQUIRE busy"), r"^OK ")
        marker = self.path("ran")
        t0 = time.monotonic()
        rc, _, err = self.ctl("run", "--try", "busy", "--", "touch", marker)
        self.assertEqual(rc, EXIT_BUSY, err)
        self.assertLess(time.monotonic() - t0, 1.5 * SLOW)
        self.assertFalse(os.path.exists(marker), "COMMAND ran without lock")
        t0 = time.monotonic()
        rc, _, _ = self.ctl("run", "--wait", "300ms", "busy", "--", "touch",
                            marker)
        self.assertEqual(rc, EXIT_BUSY)
        self.assertGreaterEqual(time.monotonic() - t0, 0.3)
        self.assertFalse(os.path.exists(marker))
        rc, out, _ = self.ctl("acquire", "busy", "--ttl", "1000", "--try")
        self.assertEqual((rc, out), (EXIT_BUSY, ""))

    def test_exit_code_is_commands(self):
        self.assertEqual(self.ctl("run", "ec", "--", "sh", "-c", "exit 7")[0],
                         7)
        self.assertEqual(self.ctl("run", "ec", "--", "true")[0], 0)
        # Killed by a signal: 128 + N, as a shell reports it.
        rc, _, _ = self.ctl("run", "ec", "--", "sh", "-c", "kill -USR1 $$")
        self.assertEqual(rc, 128 + signal.SIGUSR1)
        rc, _, err = self.ctl("run", "ec", "--", "/nonexistent/command")
        self.assertEqual(rc, 127)
        self.assertIn("/nonexistent/command", err)
        noexec = self.path("noexec")
        open(noexec, "w").close()
        self.assertEqual(self.ctl("run", "ec", "--", noexec)[0], 126)
        # Without "--" the word after NAME starts COMMAND; its options
        # are its own.
        rc, out, _ = self.ctl("run", "ec", "echo", "--ttl", "x")
        self.assertEqual((rc, out), (0, "--ttl x\n"))
        self.assertEqual(self.status("ec"), "OK FREE")

    def test_signals_are_forwarded_to_the_group(self):
        script = 'trap "echo term > \\"$D/trapped\\"; exit 3" TERM; '
        p, child, grandchild = self.start_group("fw", script=script)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=10 * SLOW)
        self.assertEqual(p.returncode, 3, err)
        self.assertEqual(self.slurp("trapped"), "term\n")
        wait_for(lambda: gone(grandchild), timeout=2 * SLOW)
        self.assert_group_gone(child, grandchild)
        self.assertEqual(self.status("fw"), "OK FREE")

    def test_broker_killed_stops_the_group(self):
        p, child, grandchild = self.start_group("bk")
        t0 = time.monotonic()
        self.broker.proc.kill()
        out, err = p.communicate(timeout=10 * SLOW)
        self.assertEqual(p.returncode, EXIT_LOST, err)
        self.assertLess(time.monotonic() - t0, 2 * SLOW)
        self.assertIn("connection to the broker was closed", err)
        self.assert_group_gone(child, grandchild)
        self.assertEqual(self.broker.stop(), -signal.SIGKILL)

    def test_command_gets_the_terminal(self):
        """COMMAND in its own group can still read the terminal lockctl
        was started from (it is handed the foreground), and ^C reaches it."""
        master, slave = os.openpty()
        self.addCleanup(os.close, master)

        def controlling_tty():
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        def run(*cmd):
            p = subprocess.Popen(
                [LOCKCTL, "run", "tty", "--"] + list(cmd),
                stdin=slave, stdout=slave, stderr=slave,
                env=self.env(D=self.tmpdir), start_new_session=True,
                preexec_fn=controlling_tty)
            self.addCleanup(self._reap, p)
            return p

        p = run("sh", "-c", 'read x; echo "got $x" > "$D/tty"')
        os.write(master, b"hello\n")
        self.assertEqual(p.wait(timeout=10 * SLOW), 0)
        self.assertEqual(self.slurp("tty"), "got hello\n")
        p = run("sh", "-c", 'echo $$ > "$D/child"; exec sleep 60')
        self.read_pid("child")
        os.write(master, b"\x03")
        self.assertEqual(p.wait(timeout=10 * SLOW), 128 + signal.SIGINT)
        os.close(slave)
        self.assertEqual(self.status("tty"), "OK FREE")


class Flock(LockctlTest):
    """What people used to flock(1) expect: -w in seconds (or with a unit),
    -n, -E, a "lock busy" line that -q silences, and an outage that is not
    taken for a busy lock."""

    def hold(self, name):
        holder = self.client()
        self.assertRegex(holder.cmd("ACQUIRE " + name), r"^OK ")
        return holder

    def timed(self, *args, **kw):
        t0 = time.monotonic()
        rc, out, err = self.ctl(*args, **kw)
        return rc, err, time.monotonic() - t0

    def test_wait_takes_seconds_and_units(self):
        self.hold("fw")
        marker = self.path("ran")
        for wait, secs, said in (("0.6", 0.6, "0.6 s"), ("1", 1.0, "1 s"),
                                 ("0.5s", 0.5, "0.5 s"),
                                 ("450ms", 0.45, "0.45 s")):
            rc, err, took = self.timed("run", "-w", wait, "fw", "--",
                                       "touch", marker)
            self.assertEqual(rc, EXIT_BUSY, (wait, err))
            self.assertEqual(err, "lockctl: fw: lock busy (waited %s)\n"
                             % said)
            self.assertGreaterEqual(took, secs, wait)
            self.assertLess(took, secs + 2 * SLOW, wait)
        self.assertFalse(os.path.exists(marker), "COMMAND ran without lock")
        # -wVALUE, --wait=VALUE, and on acquire and fill too.
        self.assertEqual(self.ctl("run", "-w0.2", "fw", "--", "true")[0],
                         EXIT_BUSY)
        self.assertEqual(self.ctl("acquire", "fw", "--ttl", "5s",
                                  "--wait=0.2")[0], EXIT_BUSY)
        rc, _, err = self.ctl("fill", "-w", "0.2s", "fw", "--", "true")
        self.assertEqual(rc, EXIT_BUSY, err)

    def test_wait_zero_and_n_try_once(self):
        self.hold("f0")
        for opt in (["-w", "0"], ["-n"], ["--try"], ["-w", "0ms"]):
            rc, err, took = self.timed("run", *opt, "f0", "--", "true")
            self.assertEqual(rc, EXIT_BUSY, (opt, err))
            self.assertEqual(err, "lockctl: f0: lock busy (tried once)\n")
            self.assertLess(took, 1.5 * SLOW)

    def test_wait_is_granted_when_released(self):
        holder = self.hold("fg")
        p = self.start("run", "-w", "10", "fg", "--", "true")
        self.broker.wait_info("waiters", 1)
        self.assertEqual(holder.cmd("RELEASE fg"), "OK")
        out, err = p.communicate(timeout=10 * SLOW)
        self.assertEqual((p.returncode, err), (0, ""))

    def test_ttl_and_grace_take_units_bare_is_ms(self):
        self.assertEqual(self.grant("fu", "--ttl", "2s")[1], 2000)
        self.assertEqual(self.grant("fv", "--ttl", "1500")[1], 1500)
        self.assertEqual(self.grant("fx", "--ttl=0.5m")[1], 30000)
        rc, _, err = self.ctl("run", "--grace", "1.5s", "--ttl", "1m", "fy",
                              "--", "true")
        self.assertEqual(rc, 0, err)

    def test_bare_wait_that_looks_like_milliseconds_is_warned(self):
        rc, out, err = self.ctl("acquire", "fm", "--ttl", "5000", "-w",
                                "2000")
        self.assertEqual(rc, 0, err)
        self.assertIn("--wait 2000 means 2000 seconds", err)
        self.assertIn("2000ms", err)
        rc, out, err = self.ctl("acquire", "fn", "--ttl", "5000", "-w",
                                "2000s")
        self.assertEqual((rc, err), (0, ""))

    def test_conflict_exit_code(self):
        self.hold("fe")
        marker = self.path("ran")
        for opt, code in ((["-E", "3"], 3), (["-E1"], 1),
                          (["--conflict-exit-code", "0"], 0),
                          (["--conflict-exit-code=255"], 255)):
            rc, out, err = self.ctl("run", *opt, "-n", "fe", "--", "touch",
                                    marker)
            self.assertEqual(rc, code, (opt, err))
            self.assertIn("lock busy", err)
        rc, out, err = self.ctl("acquire", "fe", "--ttl", "9s", "-E", "9",
                                "-n")
        self.assertEqual((rc, out), (9, ""), err)
        self.assertFalse(os.path.exists(marker))
        # COMMAND's own status is still passed through when it runs.
        self.assertEqual(self.ctl("run", "-E", "3", "free", "--", "sh", "-c",
                                  "exit 5")[0], 5)

    def test_quiet(self):
        self.hold("fq")
        self.assertEqual(self.ctl("run", "-q", "-n", "fq", "--", "true"),
                         (EXIT_BUSY, "", ""))
        self.assertEqual(self.ctl("run", "--quiet", "-w", "0.1", "fq", "--",
                                  "true"), (EXIT_BUSY, "", ""))
        # -q is about a busy lock only: errors are still said.
        dead = self.env(LOCKBROKER_ADDR="127.0.0.1:%d" % free_port())
        rc, _, err = self.ctl("run", "-q", "-n", "x", "--", "true", env=dead)
        self.assertEqual(rc, EXIT_UNAVAILABLE)
        self.assertIn("connect", err)

    def test_redis_down_while_waiting_is_an_outage(self):
        self.hold("fr")
        rc, err, _ = self.timed("run", "-w", "0.3", "fr", "--", "true")
        self.assertEqual(rc, EXIT_BUSY, err)
        self.redis.kill()
        wait_for(lambda: self.broker.info().get("redis_up") == "0")
        try:
            rc, err, took = self.timed("run", "-w", "0.5", "-E", "3", "fr",
                                       "--", "true")
            self.assertEqual(rc, EXIT_UNAVAILABLE, err)
            self.assertIn("fr: lock not obtained: the broker cannot reach "
                          "Redis", err)
            self.assertIn("ERR UNAVAILABLE", err)
            self.assertNotIn("lock busy", err)
            self.assertGreaterEqual(took, 0.5)
            rc, out, err = self.ctl("acquire", "fr", "--ttl", "5s", "-w",
                                    "0.2")
            self.assertEqual((rc, out), (EXIT_UNAVAILABLE, ""), err)
        finally:
            self.redis.start()

    def test_usage_errors(self):
        dead = self.env(LOCKBROKER_ADDR="127.0.0.1:%d" % free_port())
        for args in (["-w", "1.5x"], ["-w", "-1"], ["-w", ""], ["-w", "."],
                     ["-w", "1e3"], ["-w", "1.0000000001"], ["-w", "1 s"],
                     ["-w", "99999999999999999999"], ["-E", "256"],
                     ["-E", "-1"], ["-E", "x"], ["-qn"], ["--quiet=1"],
                     ["-w", "1", "-n"], ["-E", "1", "-E", "2"], ["-w"]):
            rc, _, err = self.ctl("run", *args, "x", "--", "true", env=dead)
            self.assertEqual(rc, EXIT_USAGE, (args, err))
        rc, _, err = self.ctl("run", "-w", "1.5x", "x", "--", "true",
                              env=dead)
        self.assertIn("1500ms, 1.5s, 2m", err)
        for args in (["status", "-w", "1", "x"], ["release", "x", "--token",
                     "t", "-E", "3"], ["who", "-q", "x"]):
            self.assertEqual(self.ctl(*args, env=dead)[0], EXIT_USAGE, args)


class Lease(LockctlTest):
    """Short leases: renewals every 100 ms, so a loss is seen quickly
    (scaled when the broker runs under valgrind)."""

    lease = 300 * SLOW
    conf = {"locks": {"lease_ms": lease}}

    def wait_renewals(self, n):
        """Until the broker has renewed the lease n times."""
        wait_until(lambda: int(self.broker.info()["renewals_total"]) >= n,
                   5, "%d renewals" % n)

    def test_deleted_key_kills_the_group(self):
        p, child, grandchild = self.start_group("dk")
        self.wait_renewals(3)  # the lock is held and renewed
        self.assertIsNone(p.poll())
        t0 = time.monotonic()
        # The key and its fence counter: the key alone, while the counter
        # remembers its lease, is put back and the lock kept.
        self.assertEqual(self.redis("DEL", "lockbroker:{dk}",
                                    "lockbroker:{dk}:fence"), 2)
        out, err = p.communicate(timeout=10 * SLOW)
        elapsed = time.monotonic() - t0
        self.assertEqual(p.returncode, EXIT_LOST, err)
        self.assertIn("EVENT LOST dk", err)
        self.assert_group_gone(child, grandchild)
        # Within a renewal interval (lease / 3) and a second.
        self.assertLess(elapsed, self.lease / 3000 + 1.0 * SLOW)

    def test_broker_that_stops_answering_is_a_loss(self):
        p, child, grandchild = self.start_group("hung")
        self.wait_renewals(2)
        t0 = time.monotonic()
        self.broker.proc.send_signal(signal.SIGSTOP)
        try:
            out, err = p.communicate(timeout=10 * SLOW)
        finally:
            self.broker.proc.send_signal(signal.SIGCONT)
        self.assertEqual(p.returncode, EXIT_LOST, err)
        self.assertIn("did not answer PING in %d ms" % (self.lease // 2),
                      err)
        self.assert_group_gone(child, grandchild)
        # PING every 75 ms, 150 ms to answer, then up to 1 s for QUIT.
        self.assertLess(time.monotonic() - t0, 1.5 * SLOW)

    def test_sigkill_after_grace(self):
        # The whole group ignores SIGTERM (an ignored signal is inherited),
        # then only the grandchild: COMMAND exits at once, and lockctl
        # must still see to the rest of its group.
        for script, grandchild in (('trap "" TERM; ', "sleep 60"),
                                   ("", "sh -c 'trap \"\" TERM; "
                                        "exec sleep 60'")):
            p, child, grandchild = self.start_group(
                "gr", "--ttl", str(400 * SLOW), script=script,
                grandchild=grandchild)
            t0 = time.monotonic()
            out, err = p.communicate(timeout=10 * SLOW)
            elapsed = time.monotonic() - t0
            self.assertEqual(p.returncode, EXIT_LOST, err)
            self.assertIn("expired", err)
            self.assertIn("SIGKILL", err)
            self.assert_group_gone(child, grandchild)
            # A 400 ms lease, then the 1000 ms grace before SIGKILL.
            self.assertGreaterEqual(elapsed, 0.9)
            self.assertLess(elapsed, 3.0 * SLOW)
            os.unlink(self.path("child"))
            os.unlink(self.path("grandchild"))

    def start_group(self, name, *opts, **kw):
        return super().start_group(name, "--grace", "1000", *opts, **kw)


class Subcommands(LockctlTest):
    def test_acquire_status_release(self):
        rc, out, err = self.ctl("acquire", "k", "--ttl", "5000")
        self.assertEqual(rc, 0, err)
        m = GRANT.match(out.strip())
        self.assertIsNotNone(m, out)
        fence, ttl, token = int(m.group(1)), int(m.group(2)), m.group(3)
        self.assertEqual(ttl, 5000)
        # A kept lock: it outlives the lockctl that took it.
        self.assertEqual(self.redis("GET", "lockbroker:{k}").split()[0], token)
        rc, out, _ = self.ctl("status", "k")
        self.assertEqual(rc, 0)
        self.assertRegex(out, r"^HELD \d+ %d\n$" % fence)
        self.assertEqual(self.ctl("acquire", "k", "--ttl", "5000",
                                  "--try")[0], EXIT_BUSY)
        self.assertEqual(self.ctl("release", "k", "--token", token)[0], 0)
        self.assertEqual(self.ctl("status", "k")[1], "FREE\n")
        rc, _, err = self.ctl("release", "k", "--token", token)
        self.assertEqual(rc, EXIT_NOTHELD)
        self.assertIn("NOTHELD", err)
        # Our own token, and --keep said out loud.
        rc, out, _ = self.ctl("acquire", "k", "--ttl=2000", "--keep",
                              "--token", "job-7", "--wait", "1s")
        self.assertEqual(rc, 0)
        self.assertRegex(out, r"^\d+ 2000 job-7\n$")
        self.assertGreater(int(out.split()[0]), fence)
        self.assertEqual(self.ctl("release", "k", "--token", "job-7")[0], 0)

    def test_info_and_ping(self):
        rc, out, _ = self.ctl("info")
        self.assertEqual(rc, 0)
        stats = dict(line.split(" ", 1) for line in out.splitlines())
        self.assertEqual(stats["redis_up"], "1")
        self.assertIn("version", stats)
        self.assertEqual(self.ctl("ping")[:2], (0, "PONG\n"))

    def test_usage_errors_send_nothing(self):
        dead = self.env(LOCKBROKER_ADDR="127.0.0.1:%d" % free_port())
        for args in (["acquire", "x"], ["acquire", "x", "--ttl", "0"],
                     ["acquire", "x", "--ttl", "-5"],
                     ["run", "x", "--wait", "1", "--try", "--", "true"],
                     ["run", "x"], ["run", "x", "--"], ["release", "x"],
                     ["status"], ["status", "a b"], ["frobnicate"],
                     ["acquire", "x", "--ttl", "9", "--token", "bad/token"],
                     ["info", "extra"], ["ping", "--try"],
                     ["acquire", "x", "--ttl", "9", "--shared", "--limit",
                      "2"],
                     ["run", "--limit=2", "--shared", "x", "--", "true"],
                     ["acquire", "x", "--ttl", "9", "--limit", "0"],
                     ["acquire", "x", "--ttl", "9", "--limit", "10001"],
                     ["acquire", "x", "--ttl", "9", "--shared=1"],
                     ["fill", "x"], ["fill", "x", "--"],
                     ["fill", "--shared", "x", "--", "true"],
                     ["fill", "--wait", "1", "--try", "x", "--", "true"],
                     ["who"], ["who", "a", "b"], ["revoke"],
                     ["revoke", "x", "--try"], []):
            rc, out, err = self.ctl(*args, env=dead)
            self.assertEqual(rc, EXIT_USAGE, (args, err))
        rc, _, err = self.ctl("acquire", "x", env=dead)
        self.assertIn("lockctl run", err)
        rc, _, err = self.ctl("acquire", "x", "--ttl", "9", "--shared",
                              "--limit", "2", env=dead)
        self.assertIn("--shared and --limit exclude each other", err)

    def test_help_and_version(self):
        """--help and -h print the usage to stdout and exit 0, before or
        after a subcommand; --version and -V print the version; neither
        connects."""
        dead = self.env(LOCKBROKER_ADDR="127.0.0.1:%d" % free_port())
        for args in (["--help"], ["-h"], ["run", "--help"],
                     ["-s", "127.0.0.1:1", "--help"]):
            rc, out, err = self.ctl(*args, env=dead)
            self.assertEqual((rc, err), (0, ""), args)
            self.assertTrue(out.startswith("usage: lockctl"), (args, out))
        for args in (["--version"], ["-V"]):
            rc, out, err = self.ctl(*args, env=dead)
            self.assertEqual((rc, err), (0, ""), args)
            self.assertRegex(out, r"^lockctl \S+\n$")

    def test_revoke_is_off_without_admin_secret(self):
        self.grant("rv", "--ttl", "5000")
        rc, out, err = self.ctl("revoke", "rv")
        self.assertEqual((rc, out), (EXIT_AUTH, ""), err)
        self.assertIn("ERR NOAUTH", err)
        self.assertIn("auth.admin_secret", err)
        self.assertEqual(len(self.who("rv")), 1)

    def test_unavailable(self):
        dead = self.env(LOCKBROKER_ADDR="127.0.0.1:%d" % free_port())
        self.assertEqual(self.ctl("ping", env=dead)[0], EXIT_UNAVAILABLE)
        self.assertEqual(self.ctl("run", "x", "--", "true", env=dead)[0],
                         EXIT_UNAVAILABLE)
        self.redis.kill()
        wait_for(lambda: self.broker.info().get("redis_up") == "0")
        rc, _, err = self.ctl("status", "x")
        self.assertEqual(rc, EXIT_UNAVAILABLE)
        self.assertIn("ERR UNAVAILABLE", err)
        self.assertEqual(self.ctl("run", "--try", "x", "--", "true")[0],
                         EXIT_UNAVAILABLE)
        self.redis.start()

    def test_addresses(self):
        env = self.env()
        del env["LOCKBROKER_ADDR"]
        addr = "127.0.0.1:%d" % self.broker.port
        self.assertEqual(self.ctl("-s", addr, "ping", env=env)[0], 0)
        self.assertEqual(self.ctl("-s", "localhost:%d" % self.broker.port,
                                  "ping", env=env)[0], 0)
        path = self.path("lb.sock")
        self.start_broker({"listen": {"unix": path}}, name="unix")
        self.assertEqual(self.ctl("-u", path, "ping", env=env)[:2],
                         (0, "PONG\n"))
        self.assertEqual(self.ctl("ping", env=self.env(LOCKBROKER_ADDR=path))
                         [0], 0)
        rc, _, _ = self.ctl("-u", path, "run", "ux", "--", "true", env=env)
        self.assertEqual(rc, 0)
        self.assertEqual(self.ctl("-u", "lb.sock", "ping", env=env,
                                  cwd=self.tmpdir)[0], 0)
        for bad in ("/tmp/x.sock", "host:0", "host:99999", "[::1", ""):
            self.assertEqual(self.ctl("-s", bad, "ping", env=env)[0],
                             EXIT_USAGE, bad)


class Modes(LockctlTest):
    """--shared and --limit, and who."""

    def test_shared_from_two_processes(self):
        f1, _, t1 = self.grant("rd", "--ttl", "5000", "--shared")
        f2, _, t2 = self.grant("rd", "--ttl", "5000", "--shared", "--try")
        self.assertNotEqual(t1, t2)
        self.assertGreater(f2, f1)
        holders = self.who("rd")
        self.assertEqual(sorted(int(h[0]) for h in holders), [f1, f2])
        self.assertEqual({h[2] for h in holders}, {"SHARED"})
        # A writer is excluded while they read.
        self.assertEqual(self.ctl("acquire", "rd", "--ttl", "5000",
                                  "--try")[0], EXIT_BUSY)
        for t in (t1, t2):
            self.assertEqual(self.ctl("release", "rd", "--token", t)[0], 0)
        self.assertEqual(self.status("rd"), "OK FREE")

    def test_shared_runs_overlap(self):
        # Each COMMAND waits until the other's has started: both must
        # hold the lock at once, or this times out.
        script = ('touch "$D/$1"; '
                  'while [ ! -e "$D/$2" ]; do sleep 0.02; done')
        runs = [self.start("run", "--shared", "--wait", "5s", "sh-run",
                           "--", "sh", "-c", script, "sh", me, other,
                           env=self.env(D=self.tmpdir))
                for me, other in (("a", "b"), ("b", "a"))]
        for p in runs:
            out, err = p.communicate(timeout=10 * SLOW)
            self.assertEqual(p.returncode, 0, err)
        self.assertEqual(self.status("sh-run"), "OK FREE")

    def test_limit_third_holder_times_out(self):
        f1 = self.grant("sem", "--ttl", "5000", "--limit", "2")[0]
        f2 = self.grant("sem", "--ttl", "5000", "--limit=2", "--try")[0]
        t0 = time.monotonic()
        rc, out, err = self.ctl("acquire", "sem", "--ttl", "5000",
                                "--limit", "2", "--try")
        self.assertEqual((rc, out), (EXIT_BUSY, ""), err)
        self.assertLess(time.monotonic() - t0, 1.5 * SLOW)
        holders = self.who("sem")
        self.assertEqual(sorted(int(h[0]) for h in holders), [f1, f2])
        self.assertEqual({h[2] for h in holders}, {"LIMIT=2"})
        # Another n on a held name is refused at once, not waited for.
        rc, _, err = self.ctl("acquire", "sem", "--ttl", "5000",
                              "--limit", "3", "--wait", "5")
        self.assertEqual(rc, 70, err)
        self.assertIn("ERR ARGS", err)

    def test_who_shows_the_holder(self):
        self.assertEqual(self.ctl("who", "nobody")[:2], (0, ""))
        before = int(time.time() * 1000)
        fence, _, _ = self.grant("w", "--ttl", "5000")
        after = int(time.time() * 1000)
        [h] = self.who("w")
        m = HOLDER.match(" ".join(h))
        self.assertEqual(int(m.group(1)), fence)
        self.assertLessEqual(int(m.group(2)), 5000)
        self.assertEqual(m.group(3), "EXCLUSIVE")
        self.assertEqual(int(m.group(5)), self.broker.proc.pid)
        self.assertRegex(m.group(7), r"^127\.0\.0\.1:\d+$")
        since = calendar.timegm(time.strptime(m.group(8)[:19],
                                              "%Y-%m-%dT%H:%M:%S"))
        since = since * 1000 + int(m.group(8)[20:23])  # UTC, in ms
        self.assertGreaterEqual(since, before - 1000)
        self.assertLessEqual(since, after + 1000)

    def test_who_shows_a_run_holder_with_its_fence(self):
        script = ('echo $LOCK_FENCE > "$D/fence.tmp"; '
                  'mv "$D/fence.tmp" "$D/fence"; '
                  'while [ ! -e "$D/go" ]; do sleep 0.02; done')
        p = self.start("run", "--limit", "3", "wr", "--", "sh", "-c", script,
                       env=self.env(D=self.tmpdir))
        wait_for(lambda: os.path.exists(self.path("fence")))
        fence = int(self.slurp("fence"))
        [h] = self.who("wr")
        self.assertEqual((int(h[0]), h[2]), (fence, "LIMIT=3"))
        open(self.path("go"), "w").close()
        out, err = p.communicate(timeout=10 * SLOW)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(self.who("wr"), [])


class Revoke(LockctlTest):
    ADMIN = "adm1n-s3cret"
    conf = {"auth": {"admin_secret": ADMIN}}

    def test_revoke_stops_a_run_holder(self):
        p, child, grandchild = self.start_group("rv")
        # Without the admin secret: refused, the holder keeps it.
        rc, out, err = self.ctl("revoke", "rv")
        self.assertEqual((rc, out), (EXIT_AUTH, ""), err)
        self.assertIn("ERR NOAUTH", err)
        self.assertIn("auth.admin_secret", err)
        self.assertIsNone(p.poll())
        admin = self.secret_file("admin", self.ADMIN)
        rc, out, err = self.ctl("-a", admin, "revoke", "rv")
        self.assertEqual((rc, out), (0, "1\n"), err)
        out, err = p.communicate(timeout=10 * SLOW)
        self.assertEqual(p.returncode, EXIT_LOST, err)
        self.assertIn("EVENT LOST rv", err)
        self.assertIn("revoked", err)
        self.assert_group_gone(child, grandchild)
        self.assertEqual(self.status("rv"), "OK FREE")
        self.assertEqual(self.ctl("-a", admin, "revoke", "rv")[:2],
                         (0, "0\n"))

    def test_revoke_removes_every_shared_holder(self):
        for _ in range(3):
            self.grant("rs", "--ttl", "5000", "--shared")
        env = self.env(LOCKBROKER_SECRET=self.ADMIN)
        self.assertEqual(self.ctl("revoke", "rs", env=env)[:2], (0, "3\n"))
        self.assertEqual(self.who("rs"), [])

    def test_the_ordinary_secret_is_not_admin(self):
        b = self.start_broker({"auth": {"secret": "s3cret-w0rd",
                                        "admin_secret": self.ADMIN}},
                              name="both")
        env = self.env(LOCKBROKER_ADDR="127.0.0.1:%d" % b.port)
        plain = self.secret_file("plain", "s3cret-w0rd")
        admin = self.secret_file("admin", self.ADMIN)
        rc, out, err = self.ctl("-a", plain, "acquire", "rb", "--ttl",
                                "5000", env=env)
        self.assertEqual(rc, 0, err)
        rc, _, err = self.ctl("-a", plain, "revoke", "rb", env=env)
        self.assertEqual(rc, EXIT_AUTH, err)
        self.assertIn("ERR NOAUTH", err)
        # The admin secret passes where the ordinary one is asked for.
        self.assertEqual(len(self.ctl("-a", admin, "who", "rb",
                                      env=env)[1].splitlines()), 1)
        self.assertEqual(self.ctl("-a", admin, "revoke", "rb", env=env)[:2],
                         (0, "1\n"))


class Fill(LockctlTest):
    def fill(self, name, script, *opts):
        return self.start("fill", *opts, name, "--", "sh", "-c", script,
                          env=self.env(D=self.tmpdir))

    def wait_waiting(self, n):
        """Until n requests wait in the broker."""
        wait_for(lambda: int(self.broker.info()["waiters"]) >= n,
                 timeout=5 * SLOW)

    def test_concurrent_fills_run_once(self):
        script = 'sleep 1; echo "$LOCK_FENCE" >> "$D/out"'
        runs = [self.fill("cache", script) for _ in range(2)]
        results = [p.communicate(timeout=10 * SLOW) + (p.returncode,)
                   for p in runs]
        for out, err, rc in results:
            self.assertEqual(rc, 0, err)
            self.assertEqual(out, "")
        self.assertEqual(len(self.slurp("out").splitlines()), 1)
        self.assertEqual(self.status("cache"), "OK FREE")

    def test_done_waiter_runs_nothing(self):
        leader = self.fill("fd", 'touch "$D/started"; '
                           'while [ ! -e "$D/go" ]; do sleep 0.02; done; '
                           'echo leader >> "$D/out"')
        wait_for(lambda: os.path.exists(self.path("started")))
        [h] = self.who("fd")
        self.assertEqual(h[2], "FILL")
        # A try-once is never DONE: there is a leader, so TIMEOUT.
        rc, _, err = self.ctl("fill", "--try", "fd", "--", "sh", "-c",
                              'echo try >> "$D/out"',
                              env=self.env(D=self.tmpdir))
        self.assertEqual(rc, EXIT_BUSY, err)
        waiter = self.fill("fd", 'echo waiter >> "$D/out"')
        self.wait_waiting(1)
        open(self.path("go"), "w").close()
        for p in (leader, waiter):
            out, err = p.communicate(timeout=10 * SLOW)
            self.assertEqual((p.returncode, out), (0, ""), err)
        self.assertEqual(self.slurp("out"), "leader\n")
        self.assertEqual(self.status("fd"), "OK FREE")

    def test_failed_leader_hands_over(self):
        leader = self.fill("ff", 'touch "$D/started"; '
                           'while [ ! -e "$D/go" ]; do sleep 0.02; done; '
                           'echo leader >> "$D/out"; exit 3')
        wait_for(lambda: os.path.exists(self.path("started")))
        fence = int(self.who("ff")[0][0])
        waiter = self.fill("ff", 'echo "waiter $LOCK_FENCE" >> "$D/out"')
        self.wait_waiting(1)
        open(self.path("go"), "w").close()
        out, err = leader.communicate(timeout=10 * SLOW)
        self.assertEqual(leader.returncode, 3, err)
        out, err = waiter.communicate(timeout=10 * SLOW)
        self.assertEqual(waiter.returncode, 0, err)
        lines = self.slurp("out").splitlines()
        self.assertEqual(lines[0], "leader")
        self.assertEqual(lines[1].split()[0], "waiter")
        self.assertGreater(int(lines[1].split()[1]), fence)
        self.assertEqual(len(lines), 2)
        self.assertEqual(self.status("ff"), "OK FREE")


class Auth(LockctlTest):
    conf = {"auth": {"secret": "s3cret-w0rd"}}

    def test_secret_from_file_or_environment(self):
        rc, _, err = self.ctl("status", "a")
        self.assertEqual(rc, EXIT_AUTH)
        self.assertIn("NOAUTH", err)
        secret = self.path("secret")
        with open(secret, "w") as f:
            f.write("s3cret-w0rd\nsecond line ignored\n")
        self.assertEqual(self.ctl("-a", secret, "status", "a")[:2],
                         (0, "FREE\n"))
        self.assertEqual(self.ctl("-a", secret, "run", "a", "--", "true")[0],
                         0)
        env = self.env(LOCKBROKER_SECRET="s3cret-w0rd")
        self.assertEqual(self.ctl("status", "a", env=env)[0], 0)
        env = self.env(LOCKBROKER_SECRET="wrong")
        self.assertEqual(self.ctl("status", "a", env=env)[0], EXIT_AUTH)
        self.assertEqual(self.ctl("-a", self.path("none"), "ping")[0], 71)


class Valgrind(LockctlTest):
    def test_run_true_is_valgrind_clean(self):
        vg = shutil.which("valgrind")
        if vg is None:
            self.skipTest("no valgrind")
        with open(LOCKCTL, "rb") as f:
            if b"__asan_init" in f.read():
                self.skipTest("an ASan build (scripts/test sanitize)")
        p = subprocess.run(
            [vg, "--quiet", "--leak-check=full", "--error-exitcode=99",
             "--errors-for-leak-kinds=all", LOCKCTL, "run", "vg", "--",
             "true"], env=self.env(), capture_output=True, text=True,
            timeout=60 * SLOW)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = subprocess.run(
            [vg, "--quiet", "--leak-check=full", "--error-exitcode=99",
             "--errors-for-leak-kinds=all", LOCKCTL, "run", "--try", "vg",
             "--", "sh", "-c", "exit 3"], env=self.env(),
            capture_output=True, text=True, timeout=60 * SLOW)
        self.assertEqual(p.returncode, 3, p.stderr)


if __name__ == "__main__":
    main()

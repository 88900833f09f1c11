"""One convention for every client (docs/clients.md), against a real
redis-server and lockbrokerd: lockctl, examples/bash/with-lock.sh,
examples/python/lockclient.py and examples/node/lockclient.js find the
broker through LOCKBROKER_ADDR (or -s), take -w (seconds, or a unit), -n,
-E and -q alike, say "NAME: lock busy" on stderr, and exit with one table
of codes: 0 done, 64 usage, 69 unavailable (the broker refusing, or Redis
down while they waited), 75 busy, or -E's N."""

import os
import shutil
import subprocess
import sys
import time

from lbtest import SLOW, BrokerTest, free_port, main, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
LOCKCTL = os.environ.get("LOCKCTL", "build/tools/lockctl")
WITH_LOCK = os.path.join(ROOT, "examples", "bash", "with-lock.sh")
PY_CLIENT = os.path.join(ROOT, "examples", "python", "lockclient.py")
NODE_CLIENT = os.path.join(ROOT, "examples", "node", "lockclient.js")
NODE = shutil.which("node")

EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_BUSY = 64, 69, 75



def lockctl(name, opts):
    """lockctl's -s, -u and -a come before the subcommand, the rest after."""
    before, after = [], list(opts)
    while after and after[0] in ("-s", "-u", "-a"):
        before += after[:2]
        after = after[2:]
    return [LOCKCTL] + before + ["run"] + after + [name, "--", "true"]


# Each client's command line to take NAME with OPTS (and run `true`).
CLIENTS = {
    "lockctl": lockctl,
    "with-lock.sh": lambda name, opts: ["bash", WITH_LOCK] + opts + [name,
                                                                      "true"],
    "lockclient.py": lambda name, opts: [sys.executable, PY_CLIENT] + opts +
    [name],
}
if NODE is not None:
    CLIENTS["lockclient.js"] = lambda name, opts: [NODE, NODE_CLIENT] + \
        opts + [name]


class Convention(BrokerTest):
    def env(self, **extra):
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        for k in ("LOCKBROKER_SECRET", "LOCKBROKER_HOST", "LOCKBROKER_PORT",
                  "LOCKBROKER_UNIX"):
            env.pop(k, None)
        env["LOCKBROKER_ADDR"] = "127.0.0.1:%d" % self.broker.port
        env.update(extra)
        return env

    def run_client(self, client, name, *opts, env=None):
        """(exit code, stderr, seconds taken) of one client's run."""
        t0 = time.monotonic()
        p = subprocess.run(CLIENTS[client](name, list(opts)),
                           env=env or self.env(), capture_output=True,
                           text=True, timeout=30 * SLOW)
        return p.returncode, p.stderr, time.monotonic() - t0

    def each(self, check):
        """check(client) for every client, each a subtest."""
        for client in CLIENTS:
            with self.subTest(client=client):
                check(client)

    def hold(self, name):
        c = self.client()
        self.assertRegex(c.cmd("ACQUIRE " + name), r"^OK ")
        return c

    def test_success(self):
        # -w 5 is five seconds: granted at once on a free name.
        def check(client):
            rc, err, _ = self.run_client(client, "ok-" + client, "-w", "5")
            self.assertEqual(rc, 0, err)
            self.assertNotIn("lock busy", err)
            self.assertEqual(self.client().cmd("STATUS ok-" + client),
                             "OK FREE")
        self.each(check)

    def test_s_option_wins_over_the_environment(self):
        dead = self.env(LOCKBROKER_ADDR="127.0.0.1:%d" % free_port())
        addr = "127.0.0.1:%d" % self.broker.port
        def check(client):
            rc, err, _ = self.run_client(client, "s", "-s", addr, env=dead)
            self.assertEqual(rc, 0, err)
            rc, err, _ = self.run_client(client, "s", env=dead)
            self.assertEqual(rc, EXIT_UNAVAILABLE, err)
        self.each(check)

    def test_wait_in_seconds_is_granted_when_released(self):
        def check(client):
            name = "rel-" + client
            holder = self.hold(name)
            p = subprocess.Popen(CLIENTS[client](name, ["-w", "5"]),
                                 env=self.env(), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            self.addCleanup(p.kill)
            self.broker.wait_info("waiters", 1)
            self.assertEqual(holder.cmd("RELEASE " + name), "OK")
            out, err = p.communicate(timeout=30 * SLOW)
            self.assertEqual(p.returncode, 0, err)
        self.each(check)

    def test_busy(self):
        def check(client):
            name = "busy-" + client
            self.hold(name)
            rc, err, took = self.run_client(client, name, "-n")
            self.assertEqual(rc, EXIT_BUSY, err)
            self.assertIn("%s: lock busy (tried once)" % name, err)
            self.assertLess(took, 5 * SLOW)
            rc, err, took = self.run_client(client, name, "-w", "0.4")
            self.assertEqual(rc, EXIT_BUSY, err)
            self.assertIn("%s: lock busy (waited 0.4 s)" % name, err)
            self.assertGreaterEqual(took, 0.4)
            rc, err, _ = self.run_client(client, name, "--wait=300ms")
            self.assertEqual(rc, EXIT_BUSY, err)
            self.assertIn("lock busy (waited 0.3 s)", err)
        self.each(check)

    def test_conflict_exit_code_and_quiet(self):
        def check(client):
            name = "e-" + client
            self.hold(name)
            rc, err, _ = self.run_client(client, name, "-E", "3", "-n")
            self.assertEqual(rc, 3, err)
            rc, err, _ = self.run_client(client, name, "-E1", "-w", "0")
            self.assertEqual(rc, 1, err)
            rc, err, _ = self.run_client(client, name,
                                         "--conflict-exit-code=0", "-n")
            self.assertEqual(rc, 0, err)
            self.assertIn("lock busy", err)
            rc, err, _ = self.run_client(client, name, "-q", "-n")
            self.assertEqual((rc, err), (EXIT_BUSY, ""))
        self.each(check)

    def test_outage_broker_refusing(self):
        dead = self.env(LOCKBROKER_ADDR="127.0.0.1:%d" % free_port())
        def check(client):
            rc, err, _ = self.run_client(client, "x", "-w", "1", env=dead)
            self.assertEqual(rc, EXIT_UNAVAILABLE, err)
            # -E is for a busy lock, not for an outage.
            rc, err, _ = self.run_client(client, "x", "-E", "3", "-n",
                                         env=dead)
            self.assertEqual(rc, EXIT_UNAVAILABLE, err)
        self.each(check)

    def test_outage_redis_down_while_waiting(self):
        """The broker answers TIMEOUT to a wait that runs out while Redis
        is away: the clients must not call that busy."""
        self.redis.kill()
        wait_for(lambda: self.broker.info().get("redis_up") == "0")
        try:
            def check(client):
                rc, err, took = self.run_client(client, "down", "-w", "0.5",
                                                "-E", "3")
                self.assertEqual(rc, EXIT_UNAVAILABLE, err)
                self.assertIn("cannot reach Redis", err)
                self.assertNotIn("lock busy", err)
                self.assertGreaterEqual(took, 0.5)
                rc, err, _ = self.run_client(client, "down", "-n")
                self.assertEqual(rc, EXIT_UNAVAILABLE, err)
            self.each(check)
        finally:
            self.redis.start()

    def test_usage(self):
        dead = self.env(LOCKBROKER_ADDR="127.0.0.1:%d" % free_port())
        def check(client):
            for opts in (["--frobnicate"], ["-w", "1.5x"], ["-w", "-1"],
                         ["-E", "256"], ["-E", "x"], ["--wait"],
                         ["-s", "host:0"], ["-s", "/a/socket"]):
                rc, err, _ = self.run_client(client, "x", *opts, env=dead)
                self.assertEqual(rc, EXIT_USAGE, (opts, err))
        self.each(check)

    def test_one_environment_variable(self):
        # The old per-client variables are refused, not silently ignored
        # (the clients would reach 127.0.0.1:7878 instead).
        def check(client):
            if client == "lockctl":
                return  # it only ever read LOCKBROKER_ADDR
            for old in ({"LOCKBROKER_HOST": "127.0.0.1",
                         "LOCKBROKER_PORT": str(self.broker.port)},
                        {"LOCKBROKER_PORT": str(self.broker.port)},
                        {"LOCKBROKER_UNIX": "/nonexistent.sock"}):
                env = self.env(**old)
                del env["LOCKBROKER_ADDR"]
                rc, err, _ = self.run_client(client, "x", env=env)
                self.assertEqual(rc, EXIT_USAGE, err)
                self.assertIn("LOCKBROKER_ADDR", err)
        self.each(check)


class UnixSocket(BrokerTest):
    def setUp(self):
        super().setUp()
        self.path = os.path.join(self.tmpdir, "lb.sock")
        self.start_broker({"listen": {"unix": self.path}}, name="unix")

    def test_addr_may_be_a_socket_path(self):
        env = dict(os.environ, LOCKBROKER_ADDR=self.path)
        for client in CLIENTS:
            if client == "with-lock.sh":
                continue  # /dev/tcp: TCP only, a usage error below
            with self.subTest(client=client):
                p = subprocess.run(CLIENTS[client]("u", []), env=env,
                                   capture_output=True, text=True,
                                   timeout=30 * SLOW)
                self.assertEqual(p.returncode, 0, p.stderr)
        p = subprocess.run(CLIENTS["with-lock.sh"]("u", []), env=env,
                           capture_output=True, text=True, timeout=30 * SLOW)
        self.assertEqual(p.returncode, EXIT_USAGE, p.stderr)
        self.assertIn("Unix socket", p.stderr)


if __name__ == "__main__":
    main()

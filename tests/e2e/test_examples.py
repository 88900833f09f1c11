"""The client examples in examples/ against the real daemon: the bash
/dev/tcp wrapper, the Python client and the Node.js client."""

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import unittest

from lbtest import SLOW, BrokerTest, main, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
WITH_LOCK = os.path.join(EXAMPLES, "bash", "with-lock.sh")
PY_CLIENT = os.path.join(EXAMPLES, "python", "lockclient.py")
NODE_CLIENT = os.path.join(EXAMPLES, "node", "lockclient.js")
NODE = shutil.which("node")

sys.dont_write_bytecode = True  # no __pycache__ in examples/
sys.path.insert(0, os.path.dirname(PY_CLIENT))
import lockclient  # noqa: E402  (examples/python/lockclient.py)

TOKEN = re.compile(r"^[0-9a-f]{32}$")

# Run by with-lock.sh as its command: asks the broker, on its own
# connection, who holds the lock right now, and records that next to the
# LOCK_* environment it was given; exits with argv[4].
PROBE = r"""
import os, socket, sys
port, name, out, code = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
s = socket.create_connection(("127.0.0.1", int(port)))
s.sendall(b"STATUS " + name.encode() + b"\nQUIT\n")
f = s.makefile()
status = f.readline().strip()
with open(out, "w") as o:
    o.write("%s|%s|%s|%s|%s\n" % (status, os.environ.get("LOCK_NAME"),
            os.environ.get("LOCK_FENCE"), os.environ.get("LOCK_TTL_MS"),
            os.environ.get("LOCK_TOKEN")))
sys.exit(code)
"""


class BashExample(BrokerTest):
    conf = {"locks": {"lease_ms": 3000}}

    def run_script(self, *args, env=None, timeout=30):
        e = dict(os.environ,
                 LOCKBROKER_ADDR="127.0.0.1:%d" % self.broker.port)
        for k in ("LOCKBROKER_SECRET", "LOCKBROKER_HOST", "LOCKBROKER_PORT"):
            e.pop(k, None)
        e.update(env or {})
        return subprocess.run(["bash", WITH_LOCK] + list(args), env=e,
                              capture_output=True, text=True,
                              timeout=timeout * SLOW)

    def probe(self, name, out, code=0):
        return [sys.executable, "-c", PROBE, str(self.broker.port), name, out,
                str(code)]

    def test_runs_command_holding_the_lock_then_releases(self):
        out = os.path.join(self.tmpdir, "probe")
        r = self.run_script("job", *self.probe("job", out))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            status, name, fence, ttl, token = f.read().strip().split("|")
        # While the command ran, the broker said the lock was held with the
        # fence the command was handed.
        self.assertEqual(status, "OK HELD %s %s" % (status.split()[2], fence))
        self.assertEqual(name, "job")
        self.assertGreater(int(fence), 0)
        self.assertEqual(ttl, "3000")
        self.assertRegex(token, TOKEN)
        # Released afterwards, and the next run gets a higher fence.
        c = self.client()
        self.assertEqual(c.cmd("STATUS job"), "OK FREE")
        r = self.run_script("job", *self.probe("job", out))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            self.assertGreater(int(f.read().split("|")[2]), int(fence))
        self.assertEqual(self.broker.info()["releases_total"], "2")

    def test_command_status_is_passed_through(self):
        out = os.path.join(self.tmpdir, "probe")
        r = self.run_script("st", *self.probe("st", out, code=3))
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertTrue(os.path.exists(out))
        self.assertEqual(self.client().cmd("STATUS st"), "OK FREE")

    def test_fixed_ttl(self):
        out = os.path.join(self.tmpdir, "probe")
        r = self.run_script("--ttl", "5000", "fx", *self.probe("fx", out))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            self.assertEqual(f.read().split("|")[3], "5000")

    def test_timeout_does_not_run_the_command(self):
        holder = self.client()
        busy = holder.cmd("ACQUIRE busy")
        self.assertRegex(busy, r"^OK \d+ ")
        marker = os.path.join(self.tmpdir, "ran")
        r = self.run_script("-w", "0", "busy", "touch", marker)
        self.assertEqual(r.returncode, 75, r.stderr)
        self.assertIn("busy: lock busy (tried once)", r.stderr)
        self.assertFalse(os.path.exists(marker))
        t0 = time.monotonic()
        r = self.run_script("-w", "0.4", "busy", "touch", marker)
        self.assertEqual(r.returncode, 75, r.stderr)
        self.assertGreaterEqual(time.monotonic() - t0, 0.35)
        self.assertFalse(os.path.exists(marker))
        # The holder still has it.
        self.assertEqual(holder.cmd("VALIDATE busy " + busy.split()[1]),
                         "OK VALID")

    def test_err_reply(self):
        marker = os.path.join(self.tmpdir, "ran")
        r = self.run_script("--ttl", "5", "e", "touch", marker)
        self.assertEqual(r.returncode, 70)
        self.assertIn("ERR ARGS ttl must be between", r.stderr)
        r = self.run_script("n" * 201, "touch", marker)
        self.assertEqual(r.returncode, 70)
        self.assertIn("ERR NAME", r.stderr)
        self.assertFalse(os.path.exists(marker))

    def test_usage_and_unreachable(self):
        marker = os.path.join(self.tmpdir, "ran")
        self.assertEqual(self.run_script("onlyname").returncode, 64)
        self.assertEqual(self.run_script("-w", "-1", "x", "true").returncode, 64)
        # A name that would smuggle in a second request line.
        r = self.run_script("x\nRELEASE y", "touch", marker)
        self.assertEqual(r.returncode, 64)
        r = self.run_script("x", "touch", marker,
                            env={"LOCKBROKER_ADDR": "127.0.0.1:1"})
        self.assertEqual(r.returncode, 69)
        self.assertIn("cannot connect", r.stderr)
        self.assertFalse(os.path.exists(marker))

    def test_lost_during_command(self):
        # A 200 ms fixed lease runs out while the command sleeps: the
        # EVENT LOST line is waiting in front of the RELEASE reply.
        r = self.run_script("-t", "200", "short", "sleep", str(0.6 * SLOW))
        self.assertEqual(r.returncode, 66, r.stderr)
        self.assertRegex(r.stderr, r"EVENT LOST short \d+ expired")
        self.assertIn("lost", r.stderr)

    def test_closed_by_broker_during_command(self):
        # A connection that only holds locks is idle: the broker closes it
        # (ERR LIMIT idle, unasked) and releases the lock mid-command.
        b = self.start_broker({"limits": {"idle_timeout_s": 1}}, name="idle")
        r = self.run_script("idle", "sleep", str(1.8 * SLOW),
                            env={"LOCKBROKER_ADDR": "127.0.0.1:%d" % b.port})
        self.assertEqual(r.returncode, 66, r.stderr)
        self.assertIn("ERR LIMIT idle", r.stderr)
        self.assertIn("lock lost", r.stderr)

    def test_auth(self):
        b = self.start_broker({"auth": {"secret": "s3cret"}}, name="authed")
        marker = os.path.join(self.tmpdir, "ran")
        env = {"LOCKBROKER_ADDR": "127.0.0.1:%d" % b.port}
        r = self.run_script("a", "touch", marker, env=env)
        self.assertEqual(r.returncode, 77)
        self.assertIn("ERR NOAUTH", r.stderr)
        self.assertFalse(os.path.exists(marker))
        env["LOCKBROKER_SECRET"] = "s3cret"
        r = self.run_script("a", "touch", marker, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(marker))

    def test_two_runs_on_one_name_do_not_overlap(self):
        log = os.path.join(self.tmpdir, "log")
        # Each holder appends "start <fence>", sleeps, appends "end <fence>".
        body = ('echo "start $LOCK_FENCE" >> "$0"; sleep 0.4; '
                'echo "end $LOCK_FENCE" >> "$0"')
        results = []

        def run():
            results.append(self.run_script("-w", "10", "shared", "sh",
                                           "-c", body, log))

        threads = [threading.Thread(target=run) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in results:
            self.assertEqual(r.returncode, 0, r.stderr)
        with open(log) as f:
            lines = f.read().split()
        events = list(zip(lines[0::2], lines[1::2]))
        self.assertEqual(len(events), 6, events)
        fences = []
        for i in range(0, 6, 2):
            (s, fs), (e, fe) = events[i], events[i + 1]
            self.assertEqual((s, e), ("start", "end"), events)
            self.assertEqual(fs, fe, events)
            fences.append(int(fs))
        self.assertEqual(fences, sorted(set(fences)))  # each run higher


class PythonExample(BrokerTest):
    conf = {"locks": {"lease_ms": 3000}}

    def lc(self, **kw):
        c = lockclient.LockClient("127.0.0.1", self.broker.port, timeout=10 * SLOW,
                                  **kw)
        self.addCleanup(c.close)
        return c

    def test_fences_increase_and_release(self):
        a = self.lc()
        f1, ttl, tok = a.acquire("py")
        self.assertEqual(ttl, 3000)
        self.assertRegex(tok, TOKEN)
        self.assertEqual(a.status("py")[1], f1)
        self.assertTrue(a.validate("py", f1))
        self.assertEqual([l[0] for l in a.locks()], ["py"])
        a.release("py")
        self.assertIsNone(a.status("py"))
        self.assertFalse(a.validate("py", f1))
        f2, _, tok2 = a.acquire("py", wait=0)
        self.assertGreater(f2, f1)
        self.assertNotEqual(tok2, tok)
        b = self.lc()
        a.quit()  # releases at once
        f3, _, _ = b.acquire("py", wait=2000)
        self.assertGreater(f3, f2)
        self.assertEqual(self.redis("GET", "lockbroker:{py}:fence"), str(f3))

    def test_timeout_on_held_lock(self):
        a, b = self.lc(), self.lc()
        first = a.acquire("held")
        self.assertIsNotNone(first)
        self.assertIsNone(b.acquire("held", wait=0))
        t0 = time.monotonic()
        self.assertIsNone(b.acquire("held", wait=300))
        self.assertGreaterEqual(time.monotonic() - t0, 0.25)
        # A waiter is granted when the holder releases.
        got = []
        t = threading.Thread(target=lambda: got.append(b.acquire("held", wait=5000)))
        t.start()
        self.broker.wait_info("waiters", 1)
        a.release("held")
        t.join(10 * SLOW)
        self.assertGreater(got[0][0], first[0])

    def test_err_codes(self):
        a = self.lc()
        with self.assertRaises(lockclient.LockError) as cm:
            a.acquire("e", ttl=5)
        self.assertEqual(cm.exception.code, "ARGS")
        self.assertIn("ttl must be between", cm.exception.text)
        with self.assertRaises(lockclient.LockError) as cm:
            a.release("nothing")
        self.assertEqual(cm.exception.code, "NOTHELD")
        with self.assertRaises(lockclient.LockError) as cm:
            a.acquire("n" * 201)
        self.assertEqual(cm.exception.code, "NAME")
        a.acquire("h")
        with self.assertRaises(lockclient.LockError) as cm:
            a.acquire("h")
        self.assertEqual(cm.exception.code, "HELD")
        with self.assertRaises(ValueError):
            a.acquire("two words")
        a.ping()  # the connection is still in step

    def test_event_lost_for_short_ttl(self):
        seen = []
        a = self.lc(on_lost=seen.append)
        fence, ttl, _ = a.acquire("brief", ttl=200)
        self.assertEqual(ttl, 200)
        ev = a.lost.get(timeout=3 * SLOW)
        self.assertEqual(ev, ("brief", fence, "expired"))
        self.assertEqual(seen, [ev])
        self.assertEqual(a.locks(), [])
        with self.assertRaises(lockclient.LockError) as cm:
            a.release("brief")
        self.assertEqual(cm.exception.code, "NOTHELD")

    def test_keep_token_extend(self):
        a, b = self.lc(), self.lc()
        fence, ttl, tok = a.acquire("k", ttl=60000, keep=True, token="job-7")
        self.assertEqual((ttl, tok), (60000, "job-7"))
        self.assertEqual(a.extend("k", 90000), 90000)
        self.assertGreater(self.redis("PTTL", "lockbroker:{k}"), 60000)
        a.close()  # a kept lock outlives its connection
        # Its session over: the broker's clients are b and this INFO.
        self.broker.wait_info("clients", 2)
        self.assertEqual(b.status("k")[1], fence)
        b.release("k", token="job-7")
        self.assertIsNone(b.status("k"))

    def test_unix_socket_and_auth(self):
        path = os.path.join(self.tmpdir, "lb.sock")
        ub = self.start_broker({"listen": {"unix": path},
                                "auth": {"secret": "s3cret"}}, name="unix")
        with self.assertRaises(lockclient.LockError) as cm:
            lockclient.LockClient(path=path, secret="wrong")
        self.assertEqual(cm.exception.code, "AUTH")
        c = lockclient.LockClient(path=path, secret="s3cret")
        self.addCleanup(c.close)
        fence, _, _ = c.acquire("u")
        self.assertGreater(fence, 0)
        self.assertEqual(ub.info()["locks_held"], "1")
        c.quit()
        # The broker releases after it answers QUIT; the release is a
        # Redis round trip away.
        wait_for(lambda: self.lc().status("u") is None, timeout=2 * SLOW)

    def test_demo(self):
        r = subprocess.run([sys.executable, PY_CLIENT, "-s",
                            "127.0.0.1:%d" % self.broker.port, "demo-lock"],
                           capture_output=True, text=True, timeout=30 * SLOW)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        m = re.search(r"acquired demo-lock fence (\d+) ttl 3000 ms", r.stdout)
        self.assertIsNotNone(m, r.stdout)
        self.assertIn("valid: True", r.stdout)
        self.assertIn("released demo-lock", r.stdout)
        self.assertEqual(self.client().cmd("STATUS demo-lock"), "OK FREE")
        holder = self.client()
        again = holder.cmd("ACQUIRE demo-lock")
        self.assertRegex(again, r"^OK \d+ ")
        self.assertGreater(int(again.split()[1]), int(m.group(1)))
        r = subprocess.run([sys.executable, PY_CLIENT, "-s",
                            "127.0.0.1:%d" % self.broker.port, "-w", "0",
                            "demo-lock"],
                           capture_output=True, text=True, timeout=30 * SLOW)
        self.assertEqual(r.returncode, 75, r.stdout + r.stderr)
        self.assertIn("demo-lock: lock busy (tried once)", r.stderr)


# Drives examples/node/lockclient.js and prints what happened as JSON.
NODE_SCRIPT = r"""
const { LockClient, LockError } = require(process.argv[2]);
const port = Number(process.argv[3]);
(async () => {
  const out = {};
  const a = await LockClient.connect({ port });
  const b = await LockClient.connect({ port });
  const lost = new Promise((resolve) => a.once('lost', resolve));
  out.grant1 = await a.acquire('nodelock');
  out.status = await b.status('nodelock');
  out.tryOnce = await b.acquire('nodelock', { wait: 0 });
  const t0 = Date.now();
  out.waited = await b.acquire('nodelock', { wait: 300 });
  out.waitedMs = Date.now() - t0;
  out.locks = await a.locks();
  const pending = b.acquire('nodelock', { wait: 5000 });
  await a.release('nodelock');
  out.grant2 = await pending;
  out.validOld = await b.validate('nodelock', out.grant1.fence);
  try { await a.acquire('x', { ttl: 5 }); } catch (e) {
    out.err = { isLockError: e instanceof LockError, code: e.code, text: e.text };
  }
  out.brief = await a.acquire('brief', { ttl: 200 });
  out.lost = await lost;
  // (not STATUS brief: Redis keeps a lease a margin past what the broker
  // trusts, so the key may outlive EVENT LOST ... expired by a moment)
  out.pipelined = await Promise.all([a.ping(), a.locks()]);
  await a.quit();
  await b.quit();
  try { await a.ping(); } catch (e) { out.afterQuit = e.code; }
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
"""


@unittest.skipIf(NODE is None, "node is not on PATH")
class NodeExample(BrokerTest):
    conf = {"locks": {"lease_ms": 3000}}

    def node(self, *args, env=None):
        return subprocess.run([NODE] + list(args), capture_output=True,
                              text=True, timeout=30 * SLOW,
                              env=dict(os.environ, **(env or {})))

    def test_client(self):
        script = os.path.join(self.tmpdir, "drive.js")
        with open(script, "w") as f:
            f.write(NODE_SCRIPT)
        r = self.node(script, NODE_CLIENT, str(self.broker.port))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        out = json.loads(r.stdout)
        g1, g2 = out["grant1"], out["grant2"]
        self.assertEqual(g1["ttl"], 3000)
        self.assertRegex(g1["token"], TOKEN)
        self.assertEqual(out["status"]["fence"], g1["fence"])
        self.assertIsNone(out["tryOnce"])
        self.assertIsNone(out["waited"])
        self.assertGreaterEqual(out["waitedMs"], 250)
        self.assertEqual([(l["name"], l["kind"]) for l in out["locks"]],
                         [("nodelock", "SESSION")])
        self.assertGreater(g2["fence"], g1["fence"])
        self.assertFalse(out["validOld"])
        self.assertEqual(out["err"]["code"], "ARGS")
        self.assertTrue(out["err"]["isLockError"])
        self.assertEqual(out["lost"], {"name": "brief",
                                       "fence": out["brief"]["fence"],
                                       "reason": "expired"})
        self.assertEqual(out["pipelined"][1:], [[]])
        self.assertEqual(out["afterQuit"], "ECONNCLOSED")
        # Both connections quit: nothing is left held.
        self.assertEqual(self.broker.info()["locks_held"], "0")
        self.assertEqual(self.client().cmd("STATUS nodelock"), "OK FREE")

    def test_demo(self):
        env = {"LOCKBROKER_ADDR": "127.0.0.1:%d" % self.broker.port}
        r = self.node(NODE_CLIENT, "node-demo", env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        m = re.search(r"acquired node-demo fence (\d+) ttl 3000 ms", r.stdout)
        self.assertIsNotNone(m, r.stdout)
        self.assertIn("valid: true", r.stdout)
        self.assertIn("released node-demo", r.stdout)
        holder = self.client()
        again = holder.cmd("ACQUIRE node-demo")
        self.assertRegex(again, r"^OK \d+ ")
        self.assertGreater(int(again.split()[1]), int(m.group(1)))
        self.assertRegex(holder.cmd("STATUS node-demo"),
                         r"^OK HELD \d+ %s$" % again.split()[1])
        # The demo waits until granted: release and it gets the lock.
        p = subprocess.Popen([NODE, NODE_CLIENT, "node-demo"],
                             stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, **env))
        self.broker.wait_info("waiters", 1)
        self.assertEqual(holder.cmd("RELEASE node-demo"), "OK")
        stdout, _ = p.communicate(timeout=30 * SLOW)
        self.assertEqual(p.returncode, 0, stdout)
        m3 = re.search(r"acquired node-demo fence (\d+)", stdout)
        self.assertIsNotNone(m3, stdout)
        self.assertGreater(int(m3.group(1)), int(again.split()[1]))


if __name__ == "__main__":
    main()

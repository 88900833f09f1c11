#!/usr/bin/env python3
"""TLS for clients (docs/operations.md, TLS): a TLS listener beside the
plain one; client certificates that name identities, and those that are
refused (none under require, expired, signed by another CA); plain text,
garbage, cut and reset handshakes sent to the TLS port; a handshake that
stalls, dropped at the AUTH timeout while others are served; certificates
read again on SIGHUP (new connections get them, old ones keep working,
bad ones leave the running ones); the key as a systemd credential;
lockctl and the Python library over TLS."""

import json
import os
import random
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import unittest

from lbtest import SLOW, BrokerTest, Client, free_port, main, wait_until

# The Python library (clients/python), from the source tree.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "clients", "python"))
from lbtls import Certs

CERTS = None  # made once for the run (setUpModule)
LOCKCTL = os.environ.get("LOCKCTL", "build/tools/lockctl")


def setUpModule():
    global CERTS, CERTS_DIR
    CERTS_DIR = tempfile.mkdtemp(prefix="lbtls-")
    CERTS = Certs(CERTS_DIR)


def tearDownModule():
    shutil.rmtree(CERTS_DIR, ignore_errors=True)


class TLSClient(Client):
    """A client over TLS: who (a Certs pair) is its certificate."""

    def __init__(self, port, who=None, timeout=5, ca=None):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(ca or CERTS.ca)
        if who is not None:
            ctx.load_cert_chain(*who)
        raw = socket.create_connection(("127.0.0.1", port))
        raw.settimeout(timeout * SLOW)
        self.sock = ctx.wrap_socket(raw, server_hostname="localhost")
        self.buf = b""


def tls_conf(policy="require", **extra):
    tls = {"port": free_port(), "certificate": CERTS.server[0],
           "key": CERTS.server[1], "ca": CERTS.ca,
           "client_certificates": policy}
    tls.update(extra)
    return {"tls": tls,
            "auth": {"identities": [
                {"name": "billing", "certificate": "billing.example",
                 "names": ["billing/"], "rights": ["lock", "read"]},
                {"name": "orders", "certificate": "orders.example",
                 "secret": "orders-secret", "names": ["orders/"],
                 "rights": ["lock", "read"]}]},
            "limits": {"auth_timeout_s": 2}}


class TLSTest(BrokerTest):
    policy = "require"

    def start_broker(self, conf=None, name="broker", **kw):
        kw.setdefault("secret", "orders-secret")  # its INFO's AUTH
        return super().start_broker(conf, name, **kw)

    def setUp(self):
        self.conf = tls_conf(self.policy)
        super().setUp()
        self.tls_port = self.conf["tls"]["port"]

    def tls(self, who=None, **kw):
        c = TLSClient(self.tls_port, who, **kw)
        self.clients.append(c)
        return c

    def refused(self, who):
        """The handshake fails, or the connection closes at the first
        read (TLS 1.3 sends the refusal after the client's Finished)."""
        try:
            c = self.tls(who)
            c.send("PING")
            return c.closed()
        except (ssl.SSLError, ConnectionError):
            return True

    def stat(self, name):
        return int(self.broker.info()[name])


class Required(TLSTest):
    def test_a_certificate_names_its_identity(self):
        """A verified certificate is the identity whose certificate it
        names: no AUTH; its rights hold, WHO shows it."""
        c = self.tls(CERTS.billing)
        self.assertEqual(c.cmd("PING"), "PONG")
        self.assertTrue(c.cmd("ACQUIRE billing/a WAIT 0").startswith("OK "))
        self.assertEqual(c.cmd("ACQUIRE orders/a WAIT 0"),
                         "ERR DENIED billing may not lock orders/a")
        who = c.until_end("WHO billing/a")
        self.assertTrue(any("billing/" in w for w in who), who)
        self.assertIn("certificate of billing", self.broker.logtext())
        # The CN, when the certificate has no subjectAltName.
        o = self.tls(CERTS.cn_only)
        self.assertTrue(o.cmd("ACQUIRE orders/a WAIT 0").startswith("OK "))

    def test_bad_certificates_are_refused(self):
        """Under require: no certificate, an expired one, one signed by
        another CA of the same name: each refused, counted, and logged
        with the reason; the broker serves the next client."""
        self.assertTrue(self.refused(None))
        self.assertTrue(self.refused(CERTS.expired))
        self.assertTrue(self.refused(CERTS.rogue))
        wait_until(lambda: self.stat("tls_failures_total") == 3, 10,
                   "three failed handshakes")
        log = self.broker.logtext()
        self.assertIn("certificate refused: certificate has expired", log)
        self.assertIn("TLS handshake failed", log)
        c = self.tls(CERTS.billing)
        self.assertEqual(c.cmd("PING"), "PONG")

    def test_plain_text_to_the_tls_port(self):
        """Lines sent in clear to the TLS port: no reply, the connection
        closed, the broker unharmed."""
        c = Client(self.tls_port)
        self.clients.append(c)
        c.send("ACQUIRE billing/x WAIT 0\r\nPING")
        self.assertTrue(c.closed())
        self.assertEqual(c.buf, b"")
        self.assertEqual(self.client().cmd("PING"), "PONG")

    def test_a_stalled_handshake_is_dropped_at_the_auth_timeout(self):
        """A peer that connects and sends nothing (or half a hello) is
        closed after limits.auth_timeout_s; meanwhile others are served
        at once."""
        idle = Client(self.tls_port, timeout=10)
        half = Client(self.tls_port, timeout=10)
        self.clients += [idle, half]
        half.sock.sendall(b"\x16\x03\x01\x02\x00\x01")  # a hello begun
        t0 = time.monotonic()
        c = self.tls(CERTS.billing)
        self.assertEqual(c.cmd("PING"), "PONG")
        self.assertTrue(idle.closed())
        self.assertTrue(half.closed())
        self.assertGreaterEqual(time.monotonic() - t0, 1.5)
        self.assertIn("no TLS handshake within 2 s", self.broker.logtext())

    def test_plain_listener_beside(self):
        """The plain listener still serves, and asks for AUTH."""
        p = self.client()
        self.assertTrue(p.cmd("ACQUIRE orders/b WAIT 0").startswith(
            "ERR NOAUTH"))
        self.assertEqual(p.cmd("AUTH orders-secret"), "OK")
        self.assertTrue(p.cmd("ACQUIRE orders/b WAIT 0").startswith("OK "))


class Lockctl(TLSTest):
    def lockctl(self, *args, env=None):
        e = dict(os.environ)
        for v in ("LOCKBROKER_ADDR", "LOCKBROKER_SECRET", "LOCKBROKER_CA",
                  "LOCKBROKER_CERT", "LOCKBROKER_KEY"):
            e.pop(v, None)
        e.update(env or {})
        return subprocess.run(
            [LOCKCTL, "-s", "127.0.0.1:%d" % self.tls_port] + list(args),
            capture_output=True, text=True, timeout=30 * SLOW, env=e)

    def test_lockctl_over_tls(self):
        """lockctl with the CA and a client certificate (options or
        variables) runs a command under a lock as the certificate's
        identity; a broker certificate of another CA, or none of its
        own, is an outage (69) that says why."""
        cert = ["-T", CERTS.ca, "-C", CERTS.billing[0], "-K",
                CERTS.billing[1]]
        p = self.lockctl(*cert, "run", "billing/job", "--", "sh", "-c",
                         "echo ran")
        self.assertEqual((p.returncode, p.stdout), (0, "ran\n"), p.stderr)
        p = self.lockctl("who", "billing/job",
                         env={"LOCKBROKER_CA": CERTS.ca,
                              "LOCKBROKER_CERT": CERTS.billing[0],
                              "LOCKBROKER_KEY": CERTS.billing[1]})
        self.assertEqual(p.returncode, 0, p.stderr)
        p = self.lockctl(*cert, "run", "orders/job", "--", "true")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("DENIED", p.stderr)
        p = self.lockctl("-T", CERTS.rogue_ca, "who", "billing/job")
        self.assertEqual(p.returncode, 69)
        self.assertIn("certificate", p.stderr)
        p = self.lockctl("-T", CERTS.ca, "who", "billing/job")
        self.assertEqual(p.returncode, 69)  # require: refused
        p = self.lockctl("-C", CERTS.billing[0], "who", "x")
        self.assertEqual(p.returncode, 64)


class PythonClient(TLSTest):
    def test_the_python_library_over_tls(self):
        """clients/python with the CA and a client certificate: a lock as
        the certificate's identity; the same outside its names is
        refused; a broker certificate of another CA is Unavailable."""
        import lockbroker
        c = lockbroker.Client("127.0.0.1:%d" % self.tls_port, ca=CERTS.ca,
                              cert=CERTS.billing[0], key=CERTS.billing[1])
        try:
            with c.lock("billing/py", wait=5.0) as lease:
                self.assertGreater(lease.fence, 0)
            with self.assertRaises(lockbroker.LockbrokerError) as e:
                with c.lock("orders/py", wait=0):
                    pass
            self.assertIn("DENIED", str(e.exception))
        finally:
            c.close()
        bad = lockbroker.Client("127.0.0.1:%d" % self.tls_port,
                                ca=CERTS.rogue_ca, timeout=5)
        try:
            with self.assertRaises(lockbroker.Unavailable) as e:
                with bad.lock("billing/py", wait=0):
                    pass
            self.assertIn("TLS", str(e.exception))
        finally:
            bad.close()


class Hostile(TLSTest):
    def test_garbage_and_broken_handshakes(self):
        """Random bytes, a record header that promises 16 KiB and stops,
        a hello cut by a reset, a line too long inside TLS: each gets
        nothing but a closed connection (or ERR PROTO, inside TLS), and
        the broker goes on serving."""
        rng = random.Random(32)
        for i in range(40):
            c = Client(self.tls_port, timeout=10)
            self.clients.append(c)
            if i % 4 == 0:
                c.sock.sendall(b"\x16\x03\x03\x40\x00" + bytes(100))
                c.close()
                continue
            if i % 4 == 1:
                c.sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00")
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                  struct.pack("ii", 1, 0))
                c.close()  # a reset
                continue
            c.sock.sendall(bytes(rng.randrange(256)
                                 for _ in range(rng.randrange(1, 3000))))
            self.assertTrue(c.closed())
            self.assertEqual(c.buf, b"")
        t = self.tls(CERTS.billing)
        t.send("ACQUIRE billing/" + "x" * 600)
        self.assertTrue(t.line().startswith("ERR PROTO line too long"))
        self.assertTrue(t.closed())
        wait_until(lambda: self.stat("tls_failures_total") >= 20, 10,
                   "the garbage's handshakes failed")
        wait_until(lambda: self.stat("clients") == 1, 10,  # INFO's own
                   "every hostile connection gone")
        ok = self.tls(CERTS.billing)
        self.assertTrue(ok.cmd("ACQUIRE billing/h WAIT 0").startswith("OK "))


NODE = shutil.which("node")
NODE_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                        "..", "clients", "node")
NODE_SCRIPT = r"""
const { Client } = require(process.argv[1]);
(async () => {
  const c = new Client({ addr: process.argv[2] });
  const out = {};
  try {
    const lease = await c.acquire('billing/node', { wait: 5000 });
    out.fence = lease.fence;
    await lease.release();
    try { await c.acquire('orders/node', { wait: 0 }); out.other = 'granted'; }
    catch (e) { out.other = e.message; }
  } catch (e) { out.error = e.constructor.name + ': ' + e.message; }
  await c.close();
  console.log(JSON.stringify(out));
})();
"""


@unittest.skipIf(NODE is None, "node is not on PATH")
class NodeClient(TLSTest):
    def node(self, env):
        e = dict(os.environ, **env)
        p = subprocess.run([NODE, "-e", NODE_SCRIPT, NODE_LIB,
                            "127.0.0.1:%d" % self.tls_port],
                           capture_output=True, text=True, env=e,
                           timeout=30 * SLOW)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def test_the_node_library_over_tls(self):
        """clients/node with $LOCKBROKER_CA, _CERT and _KEY: a lock as the
        certificate's identity, DENIED outside it; a broker certificate
        of another CA is an UnavailableError."""
        out = self.node({"LOCKBROKER_CA": CERTS.ca,
                         "LOCKBROKER_CERT": CERTS.billing[0],
                         "LOCKBROKER_KEY": CERTS.billing[1]})
        self.assertGreater(out.get("fence", 0), 0, out)
        self.assertIn("DENIED", out["other"])
        out = self.node({"LOCKBROKER_CA": CERTS.rogue_ca})
        self.assertTrue(out.get("error", "").startswith("UnavailableError"),
                        out)


GO = shutil.which("go")
GO_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                      "..", "clients", "go")


@unittest.skipIf(GO is None, "go is not on PATH")
class GoClient(TLSTest):
    def test_the_go_library_over_tls(self):
        """clients/go's TestTLS against this broker's TLS listener."""
        env = dict(os.environ, LB_TLS_ADDR="127.0.0.1:%d" % self.tls_port,
                   LB_TLS_CA=CERTS.ca, LB_TLS_CERT=CERTS.billing[0],
                   LB_TLS_KEY=CERTS.billing[1], LB_TLS_ROGUE_CA=CERTS.rogue_ca,
                   GOFLAGS="-count=1", GOPROXY="off")
        env.setdefault("GOCACHE", os.path.join(tempfile.gettempdir(),
                                               "lbtest-gocache"))
        p = subprocess.run([GO, "test", "-run", "^TestTLS$", "-v", "."],
                           cwd=GO_LIB, capture_output=True, text=True,
                           env=env, timeout=300 * SLOW)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("--- PASS: TestTLS", p.stdout)


class Optional(TLSTest):
    policy = "optional"

    def test_no_certificate_then_auth(self):
        """Without a certificate the connection must AUTH; one that fails
        verification is refused, not let in without an identity."""
        c = self.tls()
        self.assertTrue(c.cmd("ACQUIRE orders/c WAIT 0").startswith(
            "ERR NOAUTH"))
        self.assertEqual(c.cmd("AUTH orders-secret"), "OK")
        self.assertTrue(c.cmd("ACQUIRE orders/c WAIT 0").startswith("OK "))
        self.assertTrue(self.refused(CERTS.rogue))
        self.assertTrue(self.refused(CERTS.expired))
        b = self.tls(CERTS.billing)
        self.assertTrue(b.cmd("ACQUIRE billing/c WAIT 0").startswith("OK "))


class Reload(TLSTest):
    def served_cn(self):
        """The CN of the certificate the TLS listener serves now."""
        c = self.tls(CERTS.billing)
        cert = c.sock.getpeercert()
        c.close()
        return dict(x[0] for x in cert["subject"])["commonName"]

    def test_sighup_swaps_the_certificates(self):
        """New certificates on SIGHUP for new connections; a connection
        made before keeps working; bad files keep the running ones."""
        old = self.tls(CERTS.billing)
        self.assertTrue(old.cmd("ACQUIRE billing/r WAIT 0").startswith(
            "OK "))
        self.assertEqual(self.served_cn(), "localhost")
        crt, key = CERTS.issue("server2", "localhost-2",
                               "DNS:localhost,IP:127.0.0.1")
        conf = dict(self.conf)
        conf["tls"] = dict(conf["tls"], certificate=crt, key=key)
        self.broker.reload(conf)
        self.assertIn("TLS certificates read again", self.broker.logtext())
        self.assertEqual(self.served_cn(), "localhost-2")
        self.assertEqual(old.cmd("PING"), "PONG")
        self.assertTrue(any(l.startswith("LOCK billing/r ")
                            for l in old.until_end("LOCKS")))
        # A key that does not match: the running certificates stay.
        conf["tls"] = dict(conf["tls"], key=CERTS.server[1])
        self.broker.reload(conf)
        self.assertIn("keeping the running certificates",
                      self.broker.logtext())
        self.assertEqual(self.served_cn(), "localhost-2")


class KeyCredential(BrokerTest):
    conf = None

    def setUp(self):
        self.creds = tempfile.mkdtemp(prefix="lbcreds-")
        self.addCleanup(shutil.rmtree, self.creds, ignore_errors=True)
        shutil.copy(CERTS.server[1], os.path.join(self.creds, "tls.key"))
        self.conf = tls_conf("none", key="tls.key")
        self.kw = {"env": dict(os.environ, CREDENTIALS_DIRECTORY=self.creds),
                   "secret": "orders-secret"}
        super().setUp()

    def start_broker(self, conf=None, name="broker", **kw):
        return super().start_broker(conf, name, **dict(self.kw, **kw))

    def test_the_key_as_a_credential(self):
        """tls.key names a credential (LoadCredential=): read from
        $CREDENTIALS_DIRECTORY, like the secrets."""
        c = TLSClient(self.conf["tls"]["port"])
        self.clients.append(c)
        self.assertEqual(c.cmd("PING"), "PONG")


if __name__ == "__main__":
    main()

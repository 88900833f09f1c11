#!/usr/bin/env python3
"""TLS to Redis (docs/operations.md, TLS to Redis). In a build with it
(meson -Dredis_tls=enabled), against redis-server --tls-port: locks taken,
released and handed to a waiter over TLS; Redis's tls-auth-clients met
with the broker's client certificate, and a broker without one refused;
a Redis certificate signed by another CA, or for another name, refused
with ERR UNAVAILABLE for clients and one log line naming the host and
OpenSSL's reason; redis.tls_server_name; certificates read again when
the settings change on reload; a Sentinel over TLS. In a build without
it: lockbrokerd -t refuses redis.tls = true and says why.

tests/meson.build runs the classes that fit the build: RedisTLS,
SentinelTLS and CheckWithTLS in one, CheckWithoutTLS in the other. Each
Redis has a plain port beside its TLS one: the test's own window on it
(seeding, ZCARD); the broker is given only the TLS port."""

import os
import shutil
import subprocess
import tempfile
import unittest

from lbtest import (LOCKBROKERD, REDIS_SERVER, Broker, Redis, Resp,
                    free_port, main, redis_conn_ports, render_conf,
                    wait_for, wait_until)
from lbtls import Certs

CERTS = None  # made once for the run (setUpModule)
CERTS_DIR = None


def setUpModule():
    global CERTS, CERTS_DIR
    CERTS_DIR = tempfile.mkdtemp(prefix="lbtls-")
    CERTS = Certs(CERTS_DIR)
    # A Redis certificate for the right names from another CA, and one
    # from the right CA for another name only.
    CERTS.redis_rogue = CERTS.issue("redis-rogue", "localhost",
                                    "DNS:localhost,IP:127.0.0.1",
                                    ca="rogue")
    CERTS.redis_other = CERTS.issue("redis-other", "other.example",
                                    "DNS:other.example")


def tearDownModule():
    shutil.rmtree(CERTS_DIR, ignore_errors=True)


def tls_args(port, cert, auth_clients):
    """redis-server's arguments for a TLS port with cert (a Certs pair),
    trusting the test CA for client certificates."""
    return ["--tls-port", str(port), "--tls-cert-file", cert[0],
            "--tls-key-file", cert[1], "--tls-ca-cert-file", CERTS.ca,
            "--tls-auth-clients", auth_clients]


class TLSRedis(Redis):
    """A redis-server with a TLS port (tls_port) beside its plain one."""

    def __init__(self, tmpdir, cert=None, auth_clients="no", password=None):
        self.tls_port = free_port()
        extra = tls_args(self.tls_port, cert or CERTS.server, auth_clients)
        if password:
            extra += ["--requirepass", password]
        super().__init__(tmpdir, extra=extra, password=password)


def redis_conf(port, **tls):
    """The broker's redis group: port, TLS on, the test CA, and tls (its
    tls_* keys); quick to try again, and to give up on a silent Redis."""
    conf = {"port": port, "tls": True, "tls_ca": CERTS.ca,
            "reconnect_min_ms": 20, "reconnect_max_ms": 200,
            "connect_timeout_ms": 300}
    conf.update(("tls_" + k, v) for k, v in tls.items())
    return conf


class RedisTLS(unittest.TestCase):
    """The broker to a Redis that speaks TLS only on the port it is given."""

    def setUp(self):
        self.tmpdir = tempfile.mkdtemp(prefix="lbrtls-")
        self.addCleanup(shutil.rmtree, self.tmpdir, ignore_errors=True)

    def redis(self, **kw):
        r = TLSRedis(self.tmpdir, **kw)
        self.addCleanup(r.kill)
        return r

    def broker(self, redis, wait_redis=True, name="broker", more=None,
               **tls):
        """A broker on redis's TLS port; more: other keys of its redis
        group; tls: its tls_* keys."""
        conf = dict(redis_conf(redis.tls_port, **tls), **(more or {}))
        b = Broker(self.tmpdir, redis.tls_port, {"redis": conf},
                   name=name, wait_redis=wait_redis)
        self.addCleanup(self.stop, b)
        return b

    def stop(self, b):
        code = b.stop()
        if code != 0:
            print(b.logtext()[-4000:])
        self.assertEqual(code, 0, "%s did not exit cleanly" % b.name)

    def client(self, b):
        c = b.client()
        self.addCleanup(c.close)
        return c

    def refused(self, redis, because, name="refused", said=None, **tls):
        """A broker whose TLS to redis fails: clients get ERR UNAVAILABLE,
        the connection is never taken for up, and its log says once,
        however often it tries again, that it cannot connect to the host
        because (OpenSSL's words), or said."""
        b = self.broker(redis, wait_redis=False, name=name, **tls)
        line = "redis command: " + (said or "cannot connect to "
                                    "127.0.0.1:%d: TLS: %s" % (
                                        redis.tls_port, because))
        b.wait_log(line)
        self.assertRegex(self.client(b).cmd("ACQUIRE x WAIT 0"),
                         r"^ERR UNAVAILABLE ")
        # More tries, the same one line.
        tries = "redis command: retrying in "
        wait_until(lambda: b.logtext().count(tries) >= 6,
                   what="the broker's tries again")
        self.assertEqual(b.logtext().count(line), 1, b.logtext()[-3000:])
        # Never in use: TCP connected, but no reply came through TLS.
        self.assertNotRegex(b.logtext(), r"redis \w+: connected to")
        self.assertEqual(b.info()["redis_up"], "0")
        return b

    def handover(self, b, redis):
        """A lock taken, waited for, released to the waiter."""
        a, w = self.client(b), self.client(b)
        self.assertRegex(a.cmd("ACQUIRE job"), r"^OK ")
        w.send("ACQUIRE job WAIT 5000")
        key = "lockbroker:{job}:queue"
        wait_until(lambda: redis("ZCARD", key) == 1, what="the waiter queued")
        self.assertEqual(a.cmd("RELEASE job"), "OK")
        self.assertRegex(w.line(), r"^OK ")
        self.assertEqual(w.cmd("RELEASE job"), "OK")

    def test_locks_over_tls(self):
        """Every connection goes to the TLS port, through TLS (a plain
        connection there gets nothing from Redis), and locks work."""
        redis = self.redis()
        b = self.broker(redis)
        self.handover(b, redis)
        self.assertIn("TLS to 127.0.0.1:%d: TLSv1.3" % redis.tls_port,
                      b.logtext())
        # The command and the subscriber connections: both on the TLS
        # port, none on the plain one.
        self.assertEqual(len(redis_conn_ports(b, redis.tls_port)), 2)
        self.assertEqual(redis_conn_ports(b, redis.port), [])

    def test_password_and_database(self):
        """AUTH and SELECT go through TLS after the handshake's PING (which
        a Redis with a password answers NOAUTH: the handshake is over all
        the same)."""
        redis = self.redis(password="s3cret")
        redis.seed_incarnation(db=2)
        b = self.broker(redis, more={"password": "s3cret", "db": 2})
        c = self.client(b)
        self.assertRegex(c.cmd("ACQUIRE indb TTL 60000"), r"^OK ")
        r = redis.connect()
        self.addCleanup(r.close)
        self.assertEqual(r("SELECT", 2), "OK")
        self.assertEqual(r("EXISTS", "lockbroker:{indb}"), 1)
        self.assertEqual(c.cmd("RELEASE indb"), "OK")

    def test_client_certificate_for_tls_auth_clients(self):
        """tls-auth-clients yes: the broker's certificate lets it in; a
        broker without one, or with one from another CA, is refused, and
        says so."""
        redis = self.redis(auth_clients="yes")
        b = self.broker(redis, certificate=CERTS.billing[0],
                        key=CERTS.billing[1])
        self.handover(b, redis)
        self.refused(redis, "Redis refused a broker without a certificate "
                     "(tls-auth-clients; redis.tls_certificate)")
        self.refused(redis, "Redis refused the broker's certificate "
                     "(redis.tls_certificate)", name="rogue",
                     certificate=CERTS.rogue[0], key=CERTS.rogue[1])

    def test_redis_certificate_from_another_ca(self):
        """Signed by a CA the broker does not trust (of the same name)."""
        redis = self.redis(cert=CERTS.redis_rogue)
        self.refused(redis, "certificate verify failed: "
                     "unable to get local issuer certificate")

    def test_redis_certificate_for_another_name(self):
        """The right CA, but the certificate does not name 127.0.0.1 (the
        host connected to) or redis.tls_server_name; naming it in
        redis.tls_server_name lets the broker in."""
        redis = self.redis(cert=CERTS.redis_other)
        self.refused(redis, "certificate verify failed: IP address mismatch")
        good = self.broker(redis, name="named",
                           server_name="other.example")
        self.handover(good, redis)
        redis2 = self.redis()
        self.refused(redis2, "certificate verify failed: hostname mismatch",
                     name="misnamed", server_name="wrong.example")

    def test_tls_to_a_plain_port(self):
        """redis.tls on a port where Redis speaks plain text: it waits for
        the end of a line that never comes, until the connect timeout."""
        redis = self.redis()
        redis.tls_port = redis.port
        self.refused(redis, None,
                     said="TLS handshake not answered within 300 ms")

    def test_unusable_files_stop_a_start(self):
        """A CA file with no certificate in it: the daemon does not start,
        and says which file and why."""
        redis = self.redis()
        bad = os.path.join(self.tmpdir, "empty.pem")
        open(bad, "w").close()
        conf = os.path.join(self.tmpdir, "bad.conf")
        with open(conf, "w") as f:
            f.write(render_conf({"listen": {"port": free_port()},
                                 "redis": redis_conf(redis.tls_port,
                                                     ca=bad)}))
        p = subprocess.run([LOCKBROKERD, "-c", conf], capture_output=True,
                           text=True, timeout=30)
        self.assertNotEqual(p.returncode, 0, p.stderr)
        self.assertIn("redis.tls: redis.tls_ca %s: " % bad, p.stderr)

    def test_reload_reads_certificates_again(self):
        """A reload that points redis.tls_ca at a file that cannot be
        used keeps the running certificates (said once, at the next
        connect); a good one is read at the next connect after it."""
        redis = self.redis()
        b = self.broker(redis)
        bad = os.path.join(self.tmpdir, "empty.pem")
        open(bad, "w").close()
        mark = b.log_mark()
        b.reload({"redis": redis_conf(redis.tls_port, ca=bad)})
        redis("CLIENT", "KILL", "TYPE", "normal")
        b.wait_log("redis: TLS: redis.tls_ca %s: " % bad, mark)
        b.wait_log("keeping the running certificates", mark)
        wait_until(lambda: b.info()["redis_up"] == "1",
                   what="the broker back on the running certificates")
        self.handover(b, redis)
        copy = os.path.join(self.tmpdir, "ca-copy.pem")
        shutil.copy(CERTS.ca, copy)
        mark = b.log_mark()
        b.reload({"redis": redis_conf(redis.tls_port, ca=copy)})
        redis("CLIENT", "KILL", "TYPE", "normal")
        b.wait_log("redis: TLS certificates read again", mark)
        wait_until(lambda: b.info()["redis_up"] == "1",
                   what="the broker back on the new certificates")
        self.handover(b, redis)


class SentinelTLS(unittest.TestCase):
    """A Sentinel that speaks TLS only, watching a master that does: the
    broker asks it over TLS, then takes locks from the master over TLS."""

    def test_locks_through_a_sentinel_over_tls(self):
        self.tmpdir = tempfile.mkdtemp(prefix="lbrtls-")
        self.addCleanup(shutil.rmtree, self.tmpdir, ignore_errors=True)
        master = TLSRedis(self.tmpdir)
        self.addCleanup(master.kill)
        sport = free_port()
        conf = os.path.join(self.tmpdir, "sentinel.conf")
        with open(conf, "w") as f:
            f.write("port 0\nbind 127.0.0.1\ndir %s\n"
                    "tls-port %d\ntls-cert-file %s\ntls-key-file %s\n"
                    "tls-ca-cert-file %s\ntls-auth-clients no\n"
                    "tls-replication yes\n"
                    "sentinel monitor mymaster 127.0.0.1 %d 1\n"
                    % (self.tmpdir, sport, CERTS.server[0], CERTS.server[1],
                       CERTS.ca, master.tls_port))
        sentinel = subprocess.Popen(
            [REDIS_SERVER, conf, "--sentinel", "--logfile",
             os.path.join(self.tmpdir, "sentinel.log")],
            stdout=subprocess.DEVNULL)
        self.addCleanup(sentinel.wait)
        self.addCleanup(sentinel.kill)
        redis = redis_conf(master.tls_port)
        redis.update(sentinels=["127.0.0.1:%d" % sport],
                     master_name="mymaster")
        b = Broker(self.tmpdir, master.tls_port, {"redis": redis})
        try:
            c = b.client()
            self.assertRegex(c.cmd("ACQUIRE s"), r"^OK ")
            self.assertEqual(c.cmd("RELEASE s"), "OK")
            c.close()
            log = b.logtext()
            self.assertIn("redis sentinel: TLS to 127.0.0.1:%d: TLSv1.3"
                          % sport, log)
            self.assertIn("redis command: TLS to 127.0.0.1:%d: TLSv1.3"
                          % master.tls_port, log)
        finally:
            self.assertEqual(b.stop(), 0, b.logtext()[-3000:])


def check(tmpdir, redis):
    """lockbrokerd -t on a file with this redis group: (status, output)."""
    conf = os.path.join(tmpdir, "check.conf")
    with open(conf, "w") as f:
        f.write(render_conf({"redis": redis}))
    p = subprocess.run([LOCKBROKERD, "-t", "-c", conf], capture_output=True,
                       text=True)
    return p.returncode, p.stdout + p.stderr, conf


class CheckWithTLS(unittest.TestCase):
    """A build with TLS to Redis: -t takes redis.tls and its files."""

    def test_check_accepts_redis_tls(self):
        tmp = tempfile.mkdtemp(prefix="lbrtls-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        code, out, conf = check(tmp, {"tls": True, "tls_ca": "/ca.pem"})
        self.assertEqual(code, 0, out)
        self.assertIn("configuration OK", out)


class CheckWithoutTLS(unittest.TestCase):
    """A build without it: -t refuses redis.tls = true, and says why."""

    def test_check_refuses_redis_tls(self):
        tmp = tempfile.mkdtemp(prefix="lbrtls-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        code, out, conf = check(tmp, {"tls": True})
        self.assertNotEqual(code, 0, out)
        self.assertIn("%s:1: redis.tls: this lockbrokerd was built without "
                      "TLS to Redis (meson setup -Dredis_tls=enabled; see "
                      "the README)" % conf, out)


if __name__ == "__main__":
    main()

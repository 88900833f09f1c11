"""Identities and permissions: several named secrets (auth.identities),
each allowed some rights (lock, read, revoke) on some name prefixes; a
request outside them is ERR DENIED and nothing reaches Redis; WHO, the log
and /metrics name the identity; a reload adds and removes identities, and
closes the connections of a removed one (docs/operations.md, Identities
and permissions)."""

import os
import re
import urllib.request

from lbtest import (Broker, BrokerTest, free_port, main, render_conf,
                    wait_until)

ADMIN = "adm1n-s3cret"
USER = "us3r-s3cret"
BILLING = "b1lling-s3cret"
OPS = "0ps-s3cret"
AUDIT = "aud1t-s3cret"

BASE_IDENTS = [
    {"name": "billing", "secret": BILLING, "names": ["billing/"],
     "rights": ["lock", "read"]},
    {"name": "ops", "secret": OPS, "names": ["ops/", "shared."],
     "rights": ["lock", "read", "revoke"]},
]


def render_idents(idents):
    """auth.identities as libconfig text."""
    out = []
    for i in idents:
        body = []
        for k, v in i.items():
            if isinstance(v, list):
                v = "[ %s ]" % ", ".join('"%s"' % x for x in v)
            else:
                v = '"%s"' % v
            body.append("%s = %s;" % (k, v))
        out.append("{ %s }" % " ".join(body))
    return "( %s )" % ",\n    ".join(out)


class IdentBroker(Broker):
    """A broker whose auth group has identities (render_conf knows no
    lists of groups); info() uses the admin secret."""

    def __init__(self, tmpdir, redis_port, idents, auth=None, **kw):
        self.idents = idents
        self.auth = {"admin_secret": ADMIN} if auth is None else auth
        super().__init__(tmpdir, redis_port, secret=ADMIN, **kw)

    def write_conf(self, conf=None, raw=None):
        if raw is None:
            sections = {g: dict(k) for g, k in self.base.items()}
            for group, keys in (conf or {}).items():
                sections.setdefault(group, {}).update(keys)
            auth = render_conf({"auth": self.auth}).rstrip("};\n")
            raw = render_conf(sections) + "%s\n  identities = %s; };\n" % (
                auth, render_idents(self.idents))
        super().write_conf(raw=raw)


class Identities(BrokerTest):
    conf = None

    def setUp(self):
        self.mport = free_port()
        super().setUp()

    def start_broker(self, conf=None, name="broker", idents=None, **kw):
        b = IdentBroker(self.tmpdir, self.redis.port,
                        BASE_IDENTS if idents is None else idents,
                        conf={"metrics": {"enabled": True,
                                          "port": self.mport}}
                        if name == "broker" else None,
                        name=name, **kw)
        self.brokers.append(b)
        self.addCleanup(self._kill, b)
        return b

    def authed(self, secret, broker=None):
        c = self.client(broker)
        self.assertEqual(c.cmd("AUTH " + secret), "OK")
        return c

    def metrics(self):
        url = "http://127.0.0.1:%d/metrics" % self.mport
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        return {m.group(1): int(m.group(2)) for m in re.finditer(
            r'^lockbroker_identity_(\w+\{[^}]*\}) (\d+)$', text, re.M)}

    def test_outside_its_prefix_is_denied_and_nothing_happens(self):
        """billing cannot take, release, extend, validate, read or revoke
        a name of ops's: ERR DENIED each time, ops's hold untouched and no
        script run in Redis."""
        ops = self.authed(OPS)
        m = re.match(r"^OK (\d+) \d+ ([0-9a-f]{32})$",
                     ops.cmd("ACQUIRE ops/deploy TTL 60000"))
        self.assertIsNotNone(m)
        fence, token = m.groups()
        billing = self.authed(BILLING)
        key = "lockbroker:{ops/deploy}"
        before = self.redis("GET", key) or self.redis("HGETALL", key)
        scripts = self.redis.calls("evalsha", "eval")
        for line, right in (
                ("ACQUIRE ops/deploy WAIT 0", "lock"),
                ("FILL ops/deploy", "lock"),
                ("RELEASE ops/deploy TOKEN " + token, "lock"),
                ("EXTEND ops/deploy 1000 TOKEN " + token, "lock"),
                ("VALIDATE ops/deploy %s TOKEN %s" % (fence, token), "lock"),
                ("STATUS ops/deploy", "read"),
                ("WHO ops/deploy", "read"),
                ("REVOKE ops/deploy", "revoke")):
            self.assertEqual(billing.cmd(line),
                             "ERR DENIED billing may not %s ops/deploy"
                             % right, line)
        self.assertEqual(self.redis.calls("evalsha", "eval"), scripts)
        self.assertEqual(self.redis("GET", key) or
                         self.redis("HGETALL", key), before)
        self.assertEqual(billing.cmd("LOCKS"), "END")
        self.assertEqual(ops.cmd("VALIDATE ops/deploy " + fence),
                         "OK VALID")
        self.assertEqual(billing.cmd("PING"), "PONG")

    def test_each_locks_its_own_names_and_who_names_it(self):
        """billing and ops each hold their own names; WHO's client word
        is <identity>/<id>@<peer>; ops reads its shared. prefix too."""
        billing = self.authed(BILLING)
        ops = self.authed(OPS)
        self.assertRegex(billing.cmd("ACQUIRE billing/run"), r"^OK \d+ ")
        self.assertRegex(ops.cmd("ACQUIRE ops/run"), r"^OK \d+ ")
        self.assertRegex(ops.cmd("ACQUIRE shared.cache SHARED"), r"^OK ")
        port = billing.sock.getsockname()[1]
        who = billing.until_end("WHO billing/run")
        self.assertEqual(len(who), 1)
        w = who[0].split(" ")
        self.assertEqual(len(w), 7)
        self.assertRegex(w[5], r"^billing/\d+@127\.0\.0\.1:%d$" % port)
        w = ops.until_end("WHO shared.cache")[0].split(" ")
        self.assertRegex(w[5], r"^ops/\d+@127\.0\.0\.1:\d+$")
        self.assertEqual(billing.cmd("RELEASE billing/run"), "OK")
        self.assertEqual(ops.cmd("RELEASE ops/run"), "OK")
        self.broker.wait_log("AUTH as billing")

    def test_admin_revokes_across_brokers(self):
        """The admin identity revokes on one broker what billing holds
        through another; ops, whose revoke right is for its prefixes,
        may not."""
        b2 = self.start_broker(name="broker2")
        billing = self.authed(BILLING)
        self.assertRegex(billing.cmd("ACQUIRE billing/nightly"), r"^OK \d+ ")
        ops = self.authed(OPS, b2)
        self.assertEqual(ops.cmd("REVOKE billing/nightly"),
                         "ERR DENIED ops may not revoke billing/nightly")
        admin = self.authed(ADMIN, b2)
        self.assertEqual(admin.cmd("REVOKE billing/nightly"), "OK 1")
        self.assertRegex(billing.line(),
                         r"^EVENT LOST billing/nightly \d+ revoked$")
        b2.wait_log("REVOKE billing/nightly as admin")
        self.assertRegex(ops.cmd("ACQUIRE ops/x"), r"^OK ")
        self.assertEqual(admin.cmd("REVOKE ops/x"), "OK 1")

    def test_reauth_changes_identity_only_holding_nothing(self):
        billing = self.authed(BILLING)
        self.assertRegex(billing.cmd("ACQUIRE billing/a"), r"^OK ")
        self.assertRegex(billing.cmd("AUTH " + OPS),
                         r"^ERR HELD AUTH as another identity only while "
                         r"holding nothing")
        self.assertEqual(billing.cmd("AUTH " + BILLING), "OK")
        self.assertEqual(billing.cmd("RELEASE billing/a"), "OK")
        self.assertEqual(billing.cmd("AUTH " + OPS), "OK")
        self.assertRegex(billing.cmd("ACQUIRE ops/a"), r"^OK ")
        self.assertEqual(billing.cmd("ACQUIRE billing/a"),
                         "ERR DENIED ops may not lock billing/a")

    def test_reload_adds_and_removes_identities(self):
        """A SIGHUP that adds audit lets it in; one that removes billing
        closes billing's connections (their locks released) and refuses
        its secret; ops, kept, goes on with its lock."""
        billing = self.authed(BILLING)
        ops = self.authed(OPS)
        self.assertRegex(billing.cmd("ACQUIRE billing/job"), r"^OK ")
        self.assertRegex(ops.cmd("ACQUIRE ops/job"), r"^OK ")
        c = self.client()
        self.assertEqual(c.cmd("AUTH " + AUDIT), "ERR AUTH wrong secret")
        self.broker.idents = BASE_IDENTS[1:] + [
            {"name": "audit", "secret": AUDIT, "names": ["*"],
             "rights": ["read"]}]
        self.broker.reload()
        self.assertTrue(billing.closed())
        self.broker.wait_log("its identity was removed by the reload")
        audit = self.authed(AUDIT)
        wait_until(lambda: audit.until_end("WHO billing/job") == [],
                   what="billing's lock released")
        self.assertRegex(audit.until_end("WHO ops/job")[0],
                         r"^HOLDER \d+ \d+ EXCLUSIVE \S+ ops/\d+@")
        self.assertEqual(audit.cmd("ACQUIRE x"),
                         "ERR DENIED audit may not lock x")
        c = self.client()
        self.assertEqual(c.cmd("AUTH " + BILLING), "ERR AUTH wrong secret")
        self.assertEqual(ops.cmd("RELEASE ops/job"), "OK")

    def test_per_identity_metrics(self):
        """Each identity's commands after AUTH (PING, QUIT, HELP not
        counted) and those denied; default has no secret, so no series."""
        billing = self.authed(BILLING)
        billing.cmd("PING")
        self.assertRegex(billing.cmd("ACQUIRE billing/m"), r"^OK ")
        billing.cmd("ACQUIRE ops/m")
        billing.cmd("WHO ops/m")
        m = self.metrics()
        self.assertEqual(m['requests_total{identity="billing"}'], 3)
        self.assertEqual(m['denied_total{identity="billing"}'], 2)
        self.assertEqual(m['requests_total{identity="ops"}'], 0)
        self.assertEqual(m['denied_total{identity="ops"}'], 0)
        self.assertIn('requests_total{identity="admin"}', m)
        self.assertNotIn('requests_total{identity="default"}', m)

    def test_duplicate_secret_in_a_file_is_refused(self):
        """Two identities with one secret, one of them from a credential
        file: -t fails with the file, line and both names (exit 78)."""
        import subprocess
        from lbtest import LOCKBROKERD
        creds = os.path.join(self.tmpdir, "creds")
        os.mkdir(creds, 0o700)
        with open(os.path.join(creds, "ops.secret"), "w") as f:
            f.write(BILLING + "\n")
        conf = os.path.join(self.tmpdir, "dup.conf")
        with open(conf, "w") as f:
            f.write("auth = {\n  identities = (\n"
                    "    { name = \"billing\"; secret = \"%s\";\n"
                    "      names = [ \"billing/\" ]; rights = [ \"lock\" ]; },"
                    "\n    { name = \"ops\"; secret_file = \"ops.secret\";\n"
                    "      names = [ \"*\" ]; rights = [ \"read\" ]; } );\n"
                    "};\n" % BILLING)
        env = dict(os.environ, CREDENTIALS_DIRECTORY=creds)
        p = subprocess.run([LOCKBROKERD, "-t", "-c", conf], env=env,
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 78, p.stderr)
        self.assertIn('dup.conf:5: auth.identities: "ops": the same secret '
                      'as "billing"', p.stderr)


class CredentialIdentity(BrokerTest):
    """An identity's secret as a systemd credential."""

    def setUp(self):
        self.creds_dir = None
        super().setUp()

    def start_broker(self, conf=None, name="broker", **kw):
        if self.creds_dir is None:
            self.creds_dir = os.path.join(self.tmpdir, "credentials")
            os.mkdir(self.creds_dir, 0o700)
            path = os.path.join(self.creds_dir, "lockbroker.billing")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(BILLING + "\n")
        idents = [{"name": "billing", "secret_file": "lockbroker.billing",
                   "names": ["billing/"], "rights": ["lock"]}]
        env = dict(os.environ, CREDENTIALS_DIRECTORY=self.creds_dir)
        b = IdentBroker(self.tmpdir, self.redis.port, idents, name=name,
                        env=env)
        self.brokers.append(b)
        self.addCleanup(self._kill, b)
        return b

    def test_secret_from_credentials_directory(self):
        c = self.client()
        self.assertEqual(c.cmd("ACQUIRE billing/x"), "ERR NOAUTH AUTH first")
        self.assertEqual(c.cmd("AUTH " + BILLING), "OK")
        self.assertRegex(c.cmd("ACQUIRE billing/x"), r"^OK \d+ ")
        self.assertEqual(c.cmd("STATUS billing/x"),
                         "ERR DENIED billing may not read billing/x")
        wrong = self.client()
        wrong.send("AUTH lockbroker.billing")
        self.assertTrue(wrong.closed())


class OldSecrets(BrokerTest):
    """auth.secret and auth.admin_secret alone, as before: every name for
    both, REVOKE only for the admin, and the same answers as before."""

    conf = {"auth": {"secret": USER, "admin_secret": ADMIN}}

    def test_two_secrets_as_before(self):
        c = self.client()
        self.assertEqual(c.cmd("ACQUIRE any"), "ERR NOAUTH AUTH first")
        self.assertEqual(c.cmd("AUTH " + USER), "OK")
        self.assertRegex(c.cmd("ACQUIRE any/name"), r"^OK \d+ ")
        self.assertRegex(c.until_end("WHO any/name")[0],
                         r"^HOLDER \d+ \d+ EXCLUSIVE \S+ default/\d+@")
        self.assertEqual(c.cmd("REVOKE any/name"),
                         "ERR NOAUTH REVOKE needs AUTH with "
                         "auth.admin_secret")
        adm = self.client()
        self.assertEqual(adm.cmd("AUTH " + ADMIN), "OK")
        self.assertEqual(adm.cmd("REVOKE any/name"), "OK 1")
        self.assertRegex(c.line(), r"^EVENT LOST any/name \d+ revoked$")
        wrong = self.client()
        wrong.send("AUTH nope")
        self.assertTrue(wrong.closed())


if __name__ == "__main__":
    main()

"""Secrets as systemd credentials: a *_file key whose value is not an
absolute path names a file in $CREDENTIALS_DIRECTORY (what LoadCredential=
gives a service), and is refused, by -t and by a start, when that variable
is not set (docs/configuration.md, Secret files as systemd credentials)."""

import os
import shutil
import subprocess
import tempfile

from lbtest import LOCKBROKERD, BrokerTest, Redis, main, render_conf

USER = "cred-user-s3cret"
ADMIN = "cred-admin-s3cret"
REDIS_PW = "cred-redis-pw"

CONF = {"auth": {"secret_file": "lockbroker.secret",
                 "admin_secret_file": "lockbroker.admin-secret"},
        "redis": {"password_file": "lockbroker.redis-password"}}


class Credentials(BrokerTest):
    """A Redis with a password; the broker's three secrets all come from
    a credentials directory, each file mode 0600 as systemd makes them."""

    def setUp(self):
        self.tmpdir = tempfile.mkdtemp(prefix="lbtest-")
        self.addCleanup(shutil.rmtree, self.tmpdir, ignore_errors=True)
        self.redis = Redis(self.tmpdir, extra=["--requirepass", REDIS_PW],
                           password=REDIS_PW)
        self.addCleanup(self.redis.kill)
        self.clients, self.brokers = [], []
        self.creds = os.path.join(self.tmpdir, "credentials")
        os.mkdir(self.creds, 0o700)
        for name, value in (("lockbroker.secret", USER),
                            ("lockbroker.admin-secret", ADMIN),
                            ("lockbroker.redis-password", REDIS_PW)):
            path = os.path.join(self.creds, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(value + "\n")

    def env(self, creds=True):
        env = dict(os.environ)
        env.pop("CREDENTIALS_DIRECTORY", None)
        if creds:
            env["CREDENTIALS_DIRECTORY"] = self.creds
        return env

    def check(self, sections, creds=True, start=False):
        """lockbrokerd -t (or, with start, a plain start) on a file of
        sections alone: its status and stderr."""
        conf = os.path.join(self.tmpdir, "cred.conf")
        with open(conf, "w") as f:
            f.write(render_conf(sections))
        args = ["-c", conf] if start else ["-t", "-c", conf]
        p = subprocess.run([LOCKBROKERD] + args, capture_output=True,
                           text=True, timeout=10, env=self.env(creds))
        return p.returncode, p.stderr

    def test_secrets_from_credentials_directory(self):
        """AUTH takes the credential's secret and no other, the admin one
        allows REVOKE, and Redis's password came from one too (the grant
        needs Redis)."""
        self.assertEqual(self.check(CONF), (0, ""))
        b = self.start_broker(CONF, env=self.env(), secret=USER)
        wrong = self.client(b)
        self.assertEqual(wrong.cmd("PING"), "PONG")
        wrong.send("AUTH lockbroker.secret")
        self.assertTrue(wrong.closed())

        c = self.client(b)
        self.assertEqual(c.cmd("AUTH " + USER), "OK")
        self.assertRegex(c.cmd("ACQUIRE cred"), r"^OK \d+ \d+ [0-9a-f]{32}$")
        adm = self.client(b)
        self.assertEqual(adm.cmd("AUTH " + ADMIN), "OK")
        self.assertEqual(adm.cmd("REVOKE cred"), "OK 1")
        self.assertRegex(c.line(), r"^EVENT LOST cred \d+ revoked$")

    def test_credential_name_needs_credentials_directory(self):
        """Without CREDENTIALS_DIRECTORY a name is refused with the file,
        line and key, by -t and by a start alike."""
        for start in (False, True):
            code, err = self.check(CONF, creds=False, start=start)
            self.assertEqual(code, 78, err)
            self.assertIn("cred.conf:1: auth.secret_file: "
                          "\"lockbroker.secret\" is a credential name, but "
                          "CREDENTIALS_DIRECTORY is not set (run under "
                          "systemd with LoadCredential=, or give an "
                          "absolute path)", err)
        code, err = self.check(
            {"redis": {"password_file": "lockbroker.redis-password"}},
            creds=False)
        self.assertEqual(code, 78, err)
        self.assertIn("cred.conf:1: redis.password_file: ", err)

    def test_relative_path_is_no_credential_name(self):
        """A relative path with a "/" is neither: refused even with a
        credentials directory, so it never depends on the working
        directory."""
        code, err = self.check({"auth": {"secret_file": "./secret"}})
        self.assertEqual(code, 78, err)
        self.assertIn("cred.conf:1: auth.secret_file: must be an absolute "
                      "path or a credential name (no \"/\")", err)

    def test_missing_credential_fails_the_check(self):
        """A name the unit did not load: -t reads the file as a start
        would, and says which file is missing."""
        code, err = self.check({"auth": {"secret_file": "absent"}})
        self.assertEqual(code, 78, err)
        self.assertIn("auth.secret_file %s: No such file or directory"
                      % os.path.join(self.creds, "absent"), err)

    def test_absolute_path_ignores_credentials_directory(self):
        path = os.path.join(self.tmpdir, "plain.secret")
        with open(path, "w") as f:
            f.write("plain\n")
        for creds in (True, False):
            self.assertEqual(
                self.check({"auth": {"secret_file": path}}, creds=creds),
                (0, ""))


if __name__ == "__main__":
    main()

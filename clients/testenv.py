#!/usr/bin/env python3
"""The world the client libraries' tests run against: a private
redis-server and a real lockbrokerd on free loopback ports (and a Unix
socket) in a temporary directory, driven by commands on stdin. Each of
the three test runners (pytest, node --test, go test) starts it, reads its
first line, and sends it the commands of clients/scenarios.json's steps.
Python 3 standard library; it reuses tests/e2e/lbtest.py.

    clients/testenv.py [--lockbrokerd PATH]

The first line out is a JSON object:
    {"addr": "127.0.0.1:PORT", "unix": "/tmp/.../broker.sock",
     "secret": "...", "admin_secret": "...", "redis_port": PORT}
The broker wants AUTH with "secret" (or "admin_secret", which may also
REVOKE). Then each line in is one command, and each is answered with one
JSON line: {"ok": true, ...} or {"ok": false, "error": "..."}.

    flushall            Redis forgets everything (FLUSHALL)
    redis-stop          Redis killed (SIGKILL); the broker answers
                        ERR UNAVAILABLE and tells holders EVENT LOST
    redis-start         Redis started again on its port
    broker-pause        the broker stopped with SIGSTOP (it answers nothing)
    broker-resume       SIGCONT
    broker-restart      SIGTERM, then started again on the same port and
                        socket (its session locks are gone)
    revoke NAME         REVOKE NAME through an admin connection: {"holders": n}
    holders NAME        who holds NAME now (WHO): {"holders": n}
    hostile MODE        a fake broker on a free port that answers every
                        request wrongly: {"addr": "127.0.0.1:PORT"}. MODE:
                        garbage (a line that is no reply), long (a line of
                        1 MiB without an end), eof (half a reply, then
                        the connection closed), silent (reads, never answers)
    quit                stop everything and exit (also at the end of input)

The environment variable LOCKBROKERD names the daemon when --lockbrokerd
is not given (default: build/src/lockbrokerd of this checkout)."""

import argparse
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import lbtest  # noqa: E402

SECRET = "clients-test-secret"
ADMIN = "clients-test-admin"


class Hostile:
    """A server that answers each request line in one wrong way."""

    def __init__(self, mode):
        self.mode = mode
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.one, args=(conn,),
                             daemon=True).start()

    def one(self, conn):
        with conn:
            f = conn.makefile("rb")
            try:
                while f.readline():
                    if self.mode == "garbage":
                        conn.sendall(b"HELLO? \x01 what\n")
                    elif self.mode == "long":
                        conn.sendall(b"OK " + b"9" * (1 << 20))
                    elif self.mode == "eof":
                        conn.sendall(b"OK 12")
                        conn.shutdown(socket.SHUT_RDWR)
                        return
                    # silent: read on, answer nothing
            except OSError:
                return


class Env:
    def __init__(self, binary):
        lbtest.LOCKBROKERD = binary
        self.tmp = tempfile.mkdtemp(prefix="lbclients-")
        self.unix = os.path.join(self.tmp, "broker.sock")
        self.redis = lbtest.Redis(self.tmp)
        self.broker = lbtest.Broker(
            self.tmp, self.redis.port,
            {"listen": {"unix": self.unix},
             "auth": {"secret": SECRET, "admin_secret": ADMIN},
             "log": {"level": "info"}},
            secret=SECRET)
        self.hostiles = []

    def hello(self):
        return {"addr": "127.0.0.1:%d" % self.broker.port,
                "unix": self.unix, "secret": SECRET, "admin_secret": ADMIN,
                "redis_port": self.redis.port}

    def admin(self, line):
        c = lbtest.Client(self.broker.port)
        try:
            assert c.cmd("AUTH " + ADMIN) == "OK"
            return c.until_end(line) if line.startswith("WHO") else \
                c.cmd(line)
        finally:
            c.close()

    def run(self, words):
        cmd, arg = words[0], words[1:]
        if cmd == "flushall":
            self.redis("FLUSHALL")
        elif cmd == "redis-stop":
            self.redis.kill()
        elif cmd == "redis-start":
            self.redis.start()
        elif cmd == "broker-pause":
            self.broker.proc.send_signal(signal.SIGSTOP)
        elif cmd == "broker-resume":
            self.broker.proc.send_signal(signal.SIGCONT)
        elif cmd == "broker-restart":
            self.broker.stop()
            self.broker.start()
        elif cmd == "revoke":
            r = self.admin("REVOKE " + arg[0])
            if not r.startswith("OK "):
                return {"ok": False, "error": r}
            return {"ok": True, "holders": int(r.split()[1])}
        elif cmd == "holders":
            lines = self.admin("WHO " + arg[0])
            return {"ok": True, "holders": sum(
                1 for l in lines if l.startswith("HOLDER "))}
        elif cmd == "hostile":
            h = Hostile(arg[0])
            self.hostiles.append(h)
            return {"ok": True, "addr": "127.0.0.1:%d" % h.port}
        else:
            return {"ok": False, "error": "unknown command %r" % cmd}
        return {"ok": True}

    def close(self):
        for h in self.hostiles:
            h.sock.close()
        try:
            self.broker.proc.send_signal(signal.SIGCONT)
            self.broker.stop()
        finally:
            self.redis.kill()
            shutil.rmtree(self.tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lockbrokerd", default=os.environ.get(
        "LOCKBROKERD", os.path.join(ROOT, "build", "src", "lockbrokerd")))
    a = ap.parse_args()
    env = Env(os.path.abspath(a.lockbrokerd))
    try:
        print(json.dumps(env.hello()), flush=True)
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == "quit":
                break
            try:
                out = env.run(words)
            except Exception as e:  # a failed step is the test's to judge
                out = {"ok": False, "error": "%s: %s" % (
                    type(e).__name__, e)}
            print(json.dumps(out), flush=True)
    finally:
        env.close()


if __name__ == "__main__":
    main()

"""The shared test world (clients/testenv.py): one private redis-server and
lockbrokerd for the whole session, driven by its stdin commands."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(PKG))
SCENARIOS = os.path.join(ROOT, "clients", "scenarios.json")
sys.path.insert(0, PKG)  # the checkout's lockbroker, installed or not


class Env:
    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "clients", "testenv.py")],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True)
        hello = self.proc.stdout.readline()
        if not hello:
            raise RuntimeError("clients/testenv.py did not start")
        hello = json.loads(hello)
        self.addr, self.unix = hello["addr"], hello["unix"]
        self.secret, self.admin = hello["secret"], hello["admin_secret"]

    def __call__(self, *words):
        """One command; its JSON answer (asserted ok)."""
        self.proc.stdin.write(" ".join(words) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "testenv.py ended"
        out = json.loads(line)
        assert out["ok"], out
        return out

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait(30)


@pytest.fixture(scope="session")
def env():
    e = Env()
    yield e
    e.close()

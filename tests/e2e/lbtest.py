"""End-to-end harness: a real redis-server and the real lockbrokerd on free
loopback ports, spoken to over real sockets. Standard library only."""

import atexit
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import unittest

LOCKBROKERD = os.environ.get("LOCKBROKERD", "build/src/lockbrokerd")
REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")
# Wrap the daemon, e.g. LB_WRAPPER="valgrind --error-exitcode=99 -q".
WRAPPER = os.environ.get("LB_WRAPPER", "").split()
SLOW = 10 if WRAPPER else 1
# Latency bounds (a handoff within 20 ms) are the product's promise on a plain
# build; valgrind runs the daemon several times slower, so they get some room,
# still far below the retry interval they are there to tell apart.
LATE = 3 if WRAPPER else 1
# redis.clock_step_ms's default: every lease is that much longer in Redis
# than the broker trusts it (a step of Redis's wall clock ends it early).
STEP = 1000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_conn_ports(broker, redis_port):
    """The local TCP ports of the broker process's connections to Redis
    (its command and subscriber connections), from /proc."""
    inodes = set()
    fddir = "/proc/%d/fd" % broker.proc.pid
    for fd in os.listdir(fddir):
        try:
            link = os.readlink(os.path.join(fddir, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return [port_of(cols[1])
            for cols in tcp_rows("/proc/%d/net" % broker.proc.pid)
            if cols[9] in inodes and cols[3] == "01" and
            port_of(cols[2]) == redis_port]


def tcp_rows(where="/proc/net"):
    """The rows of the tcp and tcp6 tables in where, split in columns."""
    for table in ("tcp", "tcp6"):
        try:
            with open(os.path.join(where, table)) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            yield row.split()


def port_of(addr):
    """The port of a /proc/net/tcp address (hex) or of Redis's CLIENT
    LIST addr= (decimal)."""
    host, port = addr.rsplit(":", 1)
    return int(port, 16) if ":" not in host and "." not in host else \
        int(port)


def command_idle_s(redis, broker):
    """How long, in whole seconds, Redis says the broker's command
    connection has sent nothing: a quiet broker shows by it."""
    ports = redis_conn_ports(broker, redis.port)
    for f in redis.client_list():
        if port_of(f["addr"]) in ports and "P" not in f["flags"]:
            return int(f["idle"])
    return None


def wait_quiet(redis, broker, seconds=1, timeout=10):
    """Until the broker's command connection has been idle for seconds
    (the broker holds nothing, nobody waits: it has gone quiet)."""
    wait_until(lambda: (command_idle_s(redis, broker) or 0) >= seconds,
               timeout, "%s quiet for %d s" % (broker.name, seconds))


def tcp_sockets(port, peer_port):
    """(state, unread bytes) of each loopback socket on port connected to
    peer_port (/proc/net/tcp): shows what reached a stopped or stalled
    process, which cannot say so itself."""
    return [(int(cols[3], 16), int(cols[4].split(":")[1], 16))
            for cols in tcp_rows()
            if port_of(cols[1]) == port and port_of(cols[2]) == peer_port]


def tcp_unread(port, peer_port):
    """Bytes the socket on port has received from peer_port and its
    process has not read yet."""
    return sum(n for _, n in tcp_sockets(port, peer_port))


def tcp_peer_closed(port, peer_port):
    """True once the socket on port has had peer_port's end of input
    (CLOSE_WAIT), unread by its process."""
    return any(state == 8 for state, _ in tcp_sockets(port, peer_port))


def stopped(pid):
    """True once the process is stopped (SIGSTOP taken)."""
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def wait_until(pred, timeout=10.0, what=None, step=0.02):
    """pred's first true value, polled at once and then every few ms
    (growing to step): as quick as the event, light on a loaded machine.
    Fails after timeout seconds (more under a wrapper), naming what."""
    end = time.monotonic() + timeout * SLOW
    pause = 0.002
    while True:
        try:
            v = pred()
            if v:
                return v
        except OSError:
            pass
        if time.monotonic() >= end:
            raise AssertionError("timed out after %.1f s waiting for %s" %
                                 (timeout * SLOW, what or repr(pred)))
        # The poll's own pause: the predicate is the event waited on.
        time.sleep(pause)
        pause = min(pause * 2, step)


def holds_for(pred, seconds, what, step=0.05):
    """pred stays true for seconds, checked all along: an interval in
    which something must not happen, which no event can show; fails the
    moment it does. The interval is exact (not scaled)."""
    end, broken = time.monotonic() + seconds, []

    def over():
        if not pred():
            broken.append(time.monotonic() - (end - seconds))
        return broken or time.monotonic() >= end
    wait_until(over, seconds + 10, what, step)
    if broken:
        raise AssertionError("after %.2f s: no longer %s" % (broken[0], what))


def wait_for(pred, timeout=10.0, step=0.01, what=None):
    """wait_until under its older name."""
    return wait_until(pred, timeout, what, step)


class Resp:
    """A minimal RESP client, so tests can look at Redis behind the broker."""

    def __init__(self, port=None, path=None):
        if path:
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.connect(path)
        else:
            self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.settimeout(5)
        self.f = self.sock.makefile("rb")

    def __call__(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self._read()

    def _read(self):
        line = self.f.readline()
        if not line:
            raise ConnectionError("redis closed")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data.decode(errors="replace")
        if kind == b"*":
            return [self._read() for _ in range(int(rest))]
        raise ValueError(line)

    def close(self):
        self.f.close()
        self.sock.close()


class Listener:
    """A pattern subscriber (PSUBSCRIBE pattern) on a Redis: take() gives
    every (channel, message) published since its last call."""

    def __init__(self, port, pattern="lockbroker:*"):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(b"PSUBSCRIBE %s\r\n" % pattern.encode())
        self.pending = b""
        self.take()

    def take(self, quiet_s=0.3):
        """What came, once nothing more came for quiet_s (the
        PSUBSCRIBE's answer aside)."""
        while select.select([self.sock], [], [], quiet_s)[0]:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("redis closed the subscriber")
            self.pending += data
        # Each a RESP array of bulk strings (pmessage, pattern, channel,
        # message), or of two and an integer (the PSUBSCRIBE's answer).
        out, parts, i = [], self.pending.split(b"\r\n"), 0
        while i < len(parts) and parts[i].startswith(b"*"):
            n, i, item = int(parts[i][1:]), i + 1, []
            for _ in range(n):
                if parts[i].startswith(b"$"):
                    item.append(parts[i + 1].decode())
                    i += 2
                else:
                    item.append(parts[i].decode())
                    i += 1
            if item[0] == "pmessage":
                out.append((item[2], item[3]))
        if parts[i:] != [b""]:
            raise ValueError("a partial reply: %r" % parts[i:])
        self.pending = b""
        return out

    def close(self):
        self.sock.close()


class Redis:
    """A redis-server of the test's own. seed: at each start, mark its
    (empty) data as an incarnation of lockbroker's that is past its grace
    period (docs/protocol.md §8, When Redis forgets), as a Redis that has
    served brokers for a while is: a test's first grant then need not wait
    redis.trust_ms. Only the first start is seeded (a restart makes a new
    incarnation, as it does in production); tests of the grace period pass
    seed=False. A replica is never seeded: it has its master's."""

    def __init__(self, tmpdir, port=None, extra=(), password=None,
                 seed=True, clock=False):
        """clock: run it under tests/shim/clockshift.c, so that
        set_clock() moves its wall clock (its TIME and its key expiry);
        a path instead of True shares that offset file with other
        servers (it is made if missing)."""
        self.tmpdir = tmpdir
        self.clock_file = None
        if clock:
            self.clock_file = clock if isinstance(clock, str) else \
                os.path.join(tmpdir, "redis-clock")
            if not os.path.exists(self.clock_file):
                with open(self.clock_file, "wb") as f:
                    f.write(struct.pack("q", 0))
        self.port = port or free_port()
        self.own_port = port is None
        self.extra = list(extra)
        self.password = password
        self.seed = seed and "--replicaof" not in self.extra
        self.proc = None
        self.start()

    def start(self):
        # A free port can be taken by another test's server between
        # free_port() and our bind: then ours exits, and we try another.
        for _ in range(5):
            args = [REDIS_SERVER, "--port", str(self.port), "--bind",
                    "127.0.0.1", "--save", "", "--appendonly", "no",
                    "--dir", self.tmpdir, "--logfile",
                    os.path.join(self.tmpdir, "redis.log")] + self.extra
            env = None
            if self.clock_file:
                env = dict(os.environ, LD_PRELOAD=clockshift_lib(),
                           LB_CLOCKSHIFT_FILE=self.clock_file)
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                         env=env)
            wait_for(lambda: self.proc.poll() is not None or self.ours())
            if self.proc.poll() is None or not self.own_port:
                break
            self.port = free_port()
        wait_for(self.ours)
        if self.seed:
            self.seed_incarnation()
            self.seed = False  # a restart is a restart: it has none

    def seed_incarnation(self, db=0, prefix="lockbroker:"):
        """The marker incarnation.lua makes, for this Redis process (in
        database db), with its grace period over, and a Sentinel's first
        config-epoch (0). Tests that restart Redis to set it up
        differently (not to test a restart) seed it again."""
        r = self.connect()
        try:
            info = r("INFO", "server")
            runid = info.split("run_id:")[1].split("\r")[0]
            info = r("INFO", "replication")
            replid = info.split("master_replid:")[1].split("\r")[0]
            if db:
                assert r("SELECT", db) == "OK"
            r("HSET", prefix + "incarnation", "id", "seed%d" % self.proc.pid,
              "runid", runid, "replid", replid, "epoch", "0", "grace", "0")
        finally:
            r.close()

    def set_clock(self, offset_ms):
        """Put its wall clock offset_ms ahead of the real one (behind if
        negative): a step, seen at its next clock read."""
        fd = os.open(self.clock_file, os.O_WRONLY)
        try:
            os.pwrite(fd, struct.pack("q", int(offset_ms)), 0)
        finally:
            os.close(fd)

    def ours(self):
        """True once the server on our port answers and is our process."""
        try:
            info = self("INFO", "server")
        except (OSError, ValueError, AssertionError):
            return False
        return (isinstance(info, str) and
                "process_id:%d\r" % self.proc.pid in info)

    def connect(self):
        r = Resp(self.port)
        if self.password:
            assert r("AUTH", self.password) == "OK"
        return r

    def ping(self):
        r = self.connect()
        try:
            return r("PING") == "PONG"
        finally:
            r.close()

    def __call__(self, *args):
        r = self.connect()
        try:
            return r(*args)
        finally:
            r.close()

    def client_list(self):
        """CLIENT LIST, a dict of its fields for each connection."""
        return [dict(kv.split("=", 1) for kv in l.split() if "=" in kv)
                for l in self("CLIENT", "LIST").splitlines()]

    def calls(self, *commands):
        """How many times it has run these commands (INFO commandstats)."""
        info = self("INFO", "commandstats")
        n = 0
        for c in commands:
            m = re.search(r"cmdstat_%s:calls=(\d+)" % c, info)
            n += int(m.group(1)) if m else 0
        return n

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


_clockshift = None


def clockshift_lib():
    """tests/shim/clockshift.c built once per run (with the system's cc,
    never with the sanitizers of the build under test: it is preloaded
    into redis-server)."""
    global _clockshift
    if _clockshift is None:
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "..", "shim", "clockshift.c")
        tmp = tempfile.mkdtemp(prefix="lbshim-")
        atexit.register(shutil.rmtree, tmp, True)
        out = os.path.join(tmp, "clockshift.so")
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", out, src,
                        "-ldl"], check=True)
        _clockshift = out
    return _clockshift


def conf_value(v):
    """One value as libconfig text: a list of dicts is a list of groups
    (auth.identities), a list of strings an array."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list) and v and isinstance(v[0], dict):
        return "( %s )" % ", ".join("{ %s }" % " ".join(
            "%s = %s;" % (k, conf_value(x)) for k, x in g.items())
            for g in v)
    if isinstance(v, list):
        return "[ %s ]" % ", ".join('"%s"' % x for x in v)
    if isinstance(v, str):
        return '"%s"' % v
    return str(v)


def render_conf(sections):
    """{'locks': {'lease_ms': 300}} -> libconfig text."""
    out = []
    for group, keys in sections.items():
        body = ["%s = %s;" % (k, conf_value(v)) for k, v in keys.items()]
        out.append("%s = { %s };" % (group, " ".join(body)))
    return "\n".join(out) + "\n"


class Broker:
    def __init__(self, tmpdir, redis_port, conf=None, name="broker",
                 wait_redis=True, env=None, secret=None):
        """env: the daemon's environment (default: ours); secret: what
        info() sends with AUTH, when conf names only a secret's file."""
        self.tmpdir = tmpdir
        self.port = free_port()
        self.name = name
        self.env = env
        self.secret = secret or (conf or {}).get("auth", {}).get("secret")
        sections = {
            "listen": {"address": "127.0.0.1", "port": self.port},
            "redis": {"host": "127.0.0.1", "port": redis_port},
            "log": {"level": "debug"},
        }
        self.base = sections
        self.conf = os.path.join(tmpdir, name + ".conf")
        self.write_conf(conf)
        self.log = os.path.join(tmpdir, name + ".log")
        self.proc = None
        # The free port may be taken by another test's server before the
        # broker binds it: it then exits at once, and gets another port.
        for _ in range(4):
            if self.start(wait_redis, may_fail=True):
                return
            self.port = self.base["listen"]["port"] = free_port()
            self.write_conf(conf)
        self.start(wait_redis)

    def write_conf(self, conf=None, raw=None):
        """Write the config file: the base sections plus conf, or raw."""
        sections = {g: dict(k) for g, k in self.base.items()}
        for group, keys in (conf or {}).items():
            sections.setdefault(group, {}).update(keys)
        with open(self.conf, "w") as f:
            f.write(raw if raw is not None else render_conf(sections))

    def reload(self, conf=None, raw=None):
        """Rewrite the file, SIGHUP, and wait until the log says it is
        done: its last line, once all is applied (or nothing is)."""
        done = ("change(s) applied", "keeping the running configuration")

        def count():
            text = self.logtext()
            return sum(text.count(d) for d in done)
        before = count()
        self.write_conf(conf, raw)
        self.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: count() > before, what="%s's reload" % self.name)

    def start(self, wait_redis=True, may_fail=False):
        """Start it; with may_fail, False if it exited at once."""
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen(WRAPPER + [LOCKBROKERD, "-c", self.conf],
                                     stdout=self.logf, stderr=self.logf,
                                     env=self.env)
        try:
            wait_for(lambda: self.proc.poll() is not None or self._ours(),
                     timeout=10 * SLOW)
            if self.proc.poll() is not None and may_fail:
                self.logf.close()
                return False
            wait_for(lambda: self.proc.poll() is None and self._ours(),
                     timeout=10 * SLOW)
            if wait_redis:
                wait_for(lambda: self.info().get("redis_up") == "1",
                         timeout=10 * SLOW)
        except BaseException:
            # Never leave a daemon behind when the test cannot use it.
            self.proc.kill()
            self.proc.wait()
            self.logf.close()
            raise
        return True

    def _ours(self):
        """True once the broker on our port answers and is our process."""
        try:
            return self.info().get("pid") == str(self.proc.pid)
        except (OSError, ValueError, AssertionError):
            return False

    def client(self):
        return Client(self.port)

    def info(self):
        c = self.client()
        try:
            if self.secret:
                assert c.cmd("AUTH " + self.secret) == "OK"
            return c.info()
        finally:
            c.close()

    def stop(self, sig=signal.SIGTERM, timeout=10):
        """Stop it and return its exit status."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout * SLOW)
        self.proc = None
        self.logf.close()
        return code

    def logtext(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def log_mark(self):
        """Where its log ends now: wait_log(text, mark) looks after it."""
        return len(self.logtext())

    def wait_log(self, text, mark=0, timeout=10):
        """Until text is in its log (after mark)."""
        wait_until(lambda: text in self.logtext()[mark:], timeout,
                   "%r in %s's log" % (text, self.name))

    def wait_info(self, field, value, timeout=10):
        """Until its INFO field is value (a number compares as text)."""
        wait_until(lambda: self.info().get(field) == str(value), timeout,
                   "%s's INFO %s to be %s" % (self.name, field, value))


class Client:
    def __init__(self, port=None, path=None, timeout=5):
        if path:
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.connect(path)
        else:
            self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.settimeout(timeout * SLOW)
        self.buf = b""

    def send(self, data):
        if isinstance(data, str):
            data = data.encode()
        if not data.endswith(b"\n"):
            data += b"\n"
        self.sock.sendall(data)

    def line(self):
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode(errors="replace")

    def cmd(self, line):
        self.send(line)
        return self.line()

    def until_end(self, line):
        self.send(line)
        out = []
        while True:
            l = self.line()
            if l == "END":
                return out
            out.append(l)

    def info(self):
        return dict(l.split(" ", 2)[1:] for l in self.until_end("INFO"))

    def closed(self):
        """True once the broker has closed this connection."""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except (ConnectionResetError, BrokenPipeError):
            return True

    def close(self):
        self.sock.close()


class BrokerTest(unittest.TestCase):
    """One Redis and one broker per test; the broker must stop cleanly.
    redis_clock: the Redis runs under tests/shim/clockshift.c (its
    set_clock steps its wall clock)."""

    conf = None
    redis_clock = False

    def setUp(self):
        self.tmpdir = tempfile.mkdtemp(prefix="lbtest-")
        self.addCleanup(shutil.rmtree, self.tmpdir, ignore_errors=True)
        self.redis = Redis(self.tmpdir, clock=self.redis_clock)
        self.addCleanup(self.redis.kill)
        self.clients = []
        self.brokers = []
        self.broker = self.start_broker(self.conf)

    def wait_grants(self, broker=None, timeout=10):
        """Until the broker grants (a Redis restarted under it, then
        seeded: it learns the seeded incarnation first)."""
        c = self.client(broker)

        def granted():
            return c.cmd("ACQUIRE lbtest-ready WAIT 0").startswith("OK ")
        wait_for(granted, timeout, 0.02)
        assert c.cmd("RELEASE lbtest-ready") == "OK"

    def start_broker(self, conf=None, name="broker", **kw):
        """Another broker on this test's Redis; stopped and checked after.
        kw: Broker's env and secret."""
        b = Broker(self.tmpdir, self.redis.port, conf, name=name, **kw)
        self.brokers.append(b)
        self.addCleanup(self._kill, b)
        return b

    @staticmethod
    def _kill(b):
        if b.proc is not None and b.proc.poll() is None:
            b.proc.kill()
            b.proc.wait()

    def tearDown(self):
        for c in self.clients:
            c.close()
        for b in self.brokers:
            code = b.stop()
            if code != 0:
                print(b.logtext()[-4000:])
            self.assertEqual(code, 0, "%s did not exit cleanly" % b.name)

    def wait_queued(self, name, n=1, timeout=10):
        """Until n tickets wait in name's queue in Redis: a waiter's
        first try puts its ticket there (on any broker)."""
        key = "lockbroker:{%s}:queue" % name
        wait_until(lambda: self.redis("ZCARD", key) == n, timeout,
                   "%d ticket(s) in %s" % (n, key))

    def hang_up(self, c, broker=None):
        """Close c, and wait until the broker has read the end of its
        input: an idle client's session ends in that same turn of the
        broker's loop, before anything asked after."""
        b = broker or self.broker
        mark, port = b.log_mark(), c.sock.getsockname()[1]
        c.close()
        b.wait_log("127.0.0.1:%d]: end of input" % port, mark)

    def client(self, broker=None):
        c = (broker or self.broker).client()
        self.clients.append(c)
        return c


def main():
    unittest.main(verbosity=2)

#!/usr/bin/env python3
"""A small lockbroker client, standard library only.

    from lockclient import LockClient, LockError

    with LockClient(**parse_addr()) as lb:      # $LOCKBROKER_ADDR, or LockClient(port=7878),
                                                # or LockClient(path="/run/lockbroker.sock")
        grant = lb.acquire("reports", wait=5000)
        if grant is None:
            ...                                 # TIMEOUT: someone else holds it
        fence, ttl_ms, token = grant
        ...                                     # work; send `fence` with every write
        lb.release("reports")

One connection, one request at a time (the broker answers in request order;
a waiting ACQUIRE holds up the connection, so use one LockClient per thread
that waits). A reader thread reads every line; replies go to the request
that is waiting, and `EVENT LOST <name> <fence> <reason>` lines, which the
broker sends whenever a lock of this connection is lost, go to the `lost`
queue and to the `on_lost` callback (called on the reader thread).

Locks without a TTL are session locks: the broker renews them while this
connection stays open and releases them when it closes.

Run as a program it is a demo with the options and exit codes of every
lockbroker client (docs/clients.md):

    lockclient.py [-s HOST:PORT | -u PATH] [-a SECRET_FILE] [-w WAIT | -n]
                  [-E N] [-q] [--ttl TTL] [NAME]

acquires NAME (default "demo"), prints its fence, and releases it: exit 0;
64 usage; 69 broker or Redis unavailable; 70 other ERR; 75 lock busy (or
-E's N); 77 AUTH refused or needed.
"""

import argparse
import collections
import os
import queue
import re
import socket
import sys
import threading

__all__ = ["LockClient", "LockError", "Lost", "parse_addr", "parse_duration"]

PROG = "lockclient.py"

Lost = collections.namedtuple("Lost", "name fence reason")

# Names and tokens go on the wire as single words; refuse anything that
# could split the line or add another one. The broker checks the rest.
_WORD = re.compile(rb"[^\x00-\x20\x7f]+\Z")
_CLOSED = object()


class LockError(Exception):
    """An `ERR <CODE> <text>` reply. `code` is what to match on (ARGS, NAME,
    HELD, NOTHELD, LIMIT, NOAUTH, AUTH, UNAVAILABLE, SHUTDOWN, INTERNAL,
    PROTO, UNKNOWN); `text` is for humans."""

    def __init__(self, code, text=""):
        super().__init__("%s %s" % (code, text) if text else code)
        self.code = code
        self.text = text


def _word(value, what):
    if isinstance(value, str):
        value = value.encode()
    if not _WORD.match(value):
        raise ValueError("%s must be one word of printable bytes" % what)
    return value.decode("utf-8", "surrogateescape")


def _ms(value, what):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("%s must be a non-negative int (milliseconds)" % what)
    return str(value)


class LockClient:
    def __init__(self, host="127.0.0.1", port=7878, path=None, secret=None,
                 timeout=30.0, on_lost=None):
        """Connect over TCP (host, port) or to the Unix socket `path`.

        `timeout` bounds every request except the waiting part of an
        ACQUIRE (whose own `wait` is added to it; no `wait` = no bound). A
        request that runs out of time closes the connection, since its
        reply would otherwise be taken for the next request's."""
        if path is not None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self.sock.connect(path)
            except OSError:
                self.sock.close()
                raise
        else:
            self.sock = socket.create_connection((host, port), timeout)
            self.sock.settimeout(None)
        self.timeout = timeout
        self.on_lost = on_lost
        self.lost = queue.Queue()  # Lost tuples
        self._replies = queue.Queue()  # reply lines; _CLOSED at the end
        self._lock = threading.Lock()  # one request at a time
        self._closed = False
        self._reader = threading.Thread(target=self._read_loop,
                                        name="lockclient-reader", daemon=True)
        self._reader.start()
        if secret is not None:
            try:
                self._simple("AUTH " + _word(secret, "secret"), "OK")
            except BaseException:
                self.close()
                raise

    # -- plumbing ----------------------------------------------------------

    def _read_loop(self):
        buf = b""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    raw, buf = buf.split(b"\n", 1)
                    line = raw.rstrip(b"\r").decode("utf-8", "surrogateescape")
                    if line.startswith("EVENT LOST "):
                        self._event(line)
                    else:
                        self._replies.put(line)
        except OSError:
            pass
        finally:
            self._closed = True
            self._replies.put(_CLOSED)

    def _event(self, line):
        parts = line.split()
        if len(parts) != 5:
            return
        ev = Lost(parts[2], int(parts[3]), parts[4])
        self.lost.put(ev)
        if self.on_lost is not None:
            try:
                self.on_lost(ev)
            except Exception:  # a callback bug must not kill the reader
                pass

    def _next(self, deadline):
        try:
            line = self._replies.get(timeout=deadline)
        except queue.Empty:
            self.close()
            raise TimeoutError("no reply from the broker in time; "
                               "connection closed") from None
        if line is _CLOSED:
            self._replies.put(_CLOSED)  # later requests see it too
            raise ConnectionError("the broker closed the connection")
        return line

    def request(self, line, multi=False, timeout=-1):
        """Send one request line; return its reply line, or with `multi` the
        lines before END. An ERR reply raises LockError. `timeout` -1 =
        self.timeout, None = no bound."""
        if "\n" in line or "\r" in line:
            raise ValueError("one line only")
        deadline = self.timeout if timeout == -1 else timeout
        with self._lock:
            if self._closed:
                raise ConnectionError("the connection is closed")
            self.sock.sendall(line.encode("utf-8", "surrogateescape") + b"\n")
            first = self._next(deadline)
            if first.startswith("ERR "):
                code, _, text = first[4:].partition(" ")
                raise LockError(code, text)
            if not multi:
                return first
            out = []
            while first != "END":
                out.append(first)
                first = self._next(deadline)
            return out

    def _simple(self, line, want):
        reply = self.request(line)
        if reply != want:
            raise LockError("PROTO", "unexpected reply %r" % reply)

    # -- the protocol ------------------------------------------------------

    def ping(self):
        self._simple("PING", "PONG")

    def acquire(self, name, ttl=None, wait=None, keep=False, token=None):
        """ACQUIRE. Returns (fence, ttl_ms, token), or None on TIMEOUT.

        ttl: a fixed lease in ms (None = a session lock, renewed while
        connected). wait: how long the broker may wait for it in ms (0 =
        try once; None = the broker's locks.default_wait_ms, by default
        until granted). keep: the lock outlives this connection (needs
        ttl). token: your own token (1-64 of A-Z a-z 0-9 _ . -)."""
        line = "ACQUIRE " + _word(name, "name")
        if ttl is not None:
            line += " TTL " + _ms(ttl, "ttl")
        if wait is not None:
            line += " WAIT " + _ms(wait, "wait")
        if keep:
            line += " KEEP"
        if token is not None:
            line += " TOKEN " + _word(token, "token")
        if wait is None:
            limit = None
        else:
            limit = None if self.timeout is None else self.timeout + wait / 1000
        reply = self.request(line, timeout=limit)
        if reply == "TIMEOUT":
            return None
        parts = reply.split()
        if len(parts) != 4 or parts[0] != "OK":
            raise LockError("PROTO", "unexpected reply %r" % reply)
        return int(parts[1]), int(parts[2]), parts[3]

    def release(self, name, token=None):
        """RELEASE this connection's lock on name, or the lock `token`
        holds. Raises LockError('NOTHELD') when it is not held."""
        line = "RELEASE " + _word(name, "name")
        if token is not None:
            line += " TOKEN " + _word(token, "token")
        self._simple(line, "OK")

    def extend(self, name, ttl, token=None):
        """EXTEND a fixed or kept lock's lease to ttl ms from now; returns
        the new ttl."""
        line = "EXTEND %s %s" % (_word(name, "name"), _ms(ttl, "ttl"))
        if token is not None:
            line += " TOKEN " + _word(token, "token")
        reply = self.request(line)
        parts = reply.split()
        if len(parts) != 2 or parts[0] != "OK":
            raise LockError("PROTO", "unexpected reply %r" % reply)
        return int(parts[1])

    def status(self, name):
        """STATUS: None when free, else (ttl_ms left in Redis, fence)."""
        reply = self.request("STATUS " + _word(name, "name"))
        if reply == "OK FREE":
            return None
        parts = reply.split()
        if len(parts) != 4 or parts[:2] != ["OK", "HELD"]:
            raise LockError("PROTO", "unexpected reply %r" % reply)
        return int(parts[2]), int(parts[3])

    def validate(self, name, fence):
        """VALIDATE: True if fence is the current holder's fence."""
        reply = self.request("VALIDATE %s %s" % (_word(name, "name"),
                                                 _ms(fence, "fence")))
        if reply not in ("OK VALID", "OK STALE"):
            raise LockError("PROTO", "unexpected reply %r" % reply)
        return reply == "OK VALID"

    def locks(self):
        """LOCKS: [(name, fence, ttl_ms, kind)] held by this connection."""
        out = []
        for line in self.request("LOCKS", multi=True):
            _, name, fence, ttl, kind = line.split()
            out.append((name, int(fence), int(ttl), kind))
        return out

    def info(self):
        """INFO as a dict of strings."""
        return dict(l.split(" ", 2)[1:] for l in self.request("INFO", multi=True))

    def quit(self):
        """QUIT: the broker releases this connection's session and fixed
        locks at once (no lock delay), then closes."""
        try:
            self._simple("QUIT", "OK")
        except (ConnectionError, OSError):
            pass
        self.close()

    def close(self):
        """Close without QUIT (the broker treats that as a vanished client:
        its locks go after locks.lock_delay_ms)."""
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.quit()


# The exit codes of every lockbroker client (docs/clients.md).
EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_ERROR = 64, 69, 70
EXIT_OSERR, EXIT_BUSY, EXIT_AUTH = 71, 75, 77
DEFAULT_ADDR = "127.0.0.1:7878"
_DURATION = re.compile(r"(\d*\.?\d*)(ms|s|m|h)?\Z")
_UNITS = {"ms": 1, "s": 1000, "m": 60000, "h": 3600000}


def parse_duration(value, bare_ms):
    """'1.5s', '1500ms', '2m', '1h', or a bare number in units of bare_ms
    ms, as whole milliseconds rounded up; ValueError if malformed."""
    m = _DURATION.match(value)
    if not m or m.group(1) in ("", "."):
        raise ValueError("a duration is a number and ms, s, m or h")
    whole, _, frac = m.group(1).partition(".")
    if len(frac) > 9:
        raise ValueError("too many decimals")
    unit = _UNITS[m.group(2)] if m.group(2) else bare_ms
    den = 10 ** len(frac)
    return int(whole or 0) * unit + -(-int(frac or 0) * unit // den)


def parse_addr(addr=None):
    """LockClient keyword arguments for a broker address: 'HOST:PORT',
    '[V6]:PORT', 'HOST' or a Unix socket '/PATH'; None reads
    $LOCKBROKER_ADDR, then the default 127.0.0.1:7878."""
    if addr is None:
        addr = os.environ.get("LOCKBROKER_ADDR") or DEFAULT_ADDR
    if addr.startswith("/"):
        return {"path": addr}
    m = re.match(r"(?:\[([^\]]+)\]|([^:\[\]]+))(?::(\d+))?\Z", addr)
    port = int(m.group(3)) if m and m.group(3) else 7878
    if not m or not 0 < port < 65536:
        raise ValueError("bad broker address %r (HOST:PORT or /PATH)" % addr)
    return {"host": m.group(1) or m.group(2), "port": port}


def _secs(ms):
    return "%s s" % ("%d.%03d" % divmod(ms, 1000)).rstrip("0").rstrip(".")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # exit 64, as every client does
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, "%s: %s\n" % (self.prog, message))


def _args(argv):
    p = _Parser(description="Acquire a lock, print its fence, release it. "
                "Options and exit codes: docs/clients.md.")
    p.add_argument("name", nargs="?", default="demo")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-s", metavar="HOST:PORT",
                       help="the broker (else $LOCKBROKER_ADDR)")
    where.add_argument("-u", metavar="PATH", help="the broker's Unix socket")
    p.add_argument("-a", metavar="SECRET_FILE",
                   help="AUTH secret: its first line (else "
                   "$LOCKBROKER_SECRET)")
    wait = p.add_mutually_exclusive_group()
    wait.add_argument("-w", "--wait", metavar="WAIT",
                      help="give up after WAIT: 1.5 (seconds), 1500ms, 2m; "
                      "0 = try once")
    wait.add_argument("-n", "--try", dest="try_once", action="store_true",
                      help="try once")
    p.add_argument("-E", "--conflict-exit-code", type=int, default=EXIT_BUSY,
                   metavar="N", help="exit N when the lock is busy (75)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no 'lock busy' line")
    p.add_argument("--ttl", help="fixed lease: 5000 (ms), 5s, 2m")
    a = p.parse_args(argv)
    old = [v for v in ("LOCKBROKER_HOST", "LOCKBROKER_PORT",
                       "LOCKBROKER_UNIX") if os.environ.get(v)]
    if old and not (a.s or a.u or os.environ.get("LOCKBROKER_ADDR")):
        p.error("%s: gone; set LOCKBROKER_ADDR=HOST:PORT (or a socket path)"
                % ", ".join(old))
    if a.s and a.s.startswith("/"):
        p.error("-s wants HOST:PORT; -u is for a socket path")
    if not 0 <= a.conflict_exit_code <= 255:
        p.error("-E wants an exit code, 0-255")
    try:
        a.addr = parse_addr(a.u or a.s)
        a.wait_ms = 0 if a.try_once else (
            None if a.wait is None else parse_duration(a.wait, 1000))
        a.ttl_ms = None if a.ttl is None else parse_duration(a.ttl, 1)
    except ValueError as e:
        p.error(str(e))
    if a.ttl_ms == 0:
        p.error("--ttl must be above 0")
    return a


def _secret(a):
    if a.a is None:
        return os.environ.get("LOCKBROKER_SECRET") or None
    with open(a.a) as f:
        return f.readline().rstrip("\n")


def _busy(lb, a):
    """A TIMEOUT: the lock is busy, or the broker could not reach Redis
    while we waited (it says TIMEOUT then too); STATUS tells which."""
    try:
        lb.status(a.name)
    except LockError as e:
        if e.code in ("UNAVAILABLE", "SHUTDOWN"):
            print("%s: %s: lock not obtained: the broker cannot reach Redis"
                  % (PROG, a.name), file=sys.stderr)
        raise
    if not a.quiet:
        how = ("tried once" if a.wait_ms == 0 else
               "waited " + _secs(a.wait_ms) if a.wait_ms else "")
        print("%s: %s: lock busy%s" % (PROG, a.name,
                                       " (%s)" % how if how else ""),
              file=sys.stderr)
    return a.conflict_exit_code


def _demo(lb, a):
    grant = lb.acquire(a.name, ttl=a.ttl_ms, wait=a.wait_ms)
    if grant is None:
        return _busy(lb, a)
    fence, ttl, token = grant
    print("acquired %s fence %d ttl %d ms" % (a.name, fence, ttl))
    print("valid:", lb.validate(a.name, fence))
    lb.release(a.name)
    print("released %s" % a.name)
    return 0


def main(argv=None):
    a = _args(argv)
    try:
        secret = _secret(a)
    except OSError as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return EXIT_OSERR
    try:
        with LockClient(secret=secret, on_lost=lambda ev: print(
                "lost:", *ev, flush=True), **a.addr) as lb:
            return _demo(lb, a)
    except LockError as e:
        print("%s: broker: ERR %s" % (PROG, e), file=sys.stderr)
        if e.code in ("UNAVAILABLE", "SHUTDOWN"):
            return EXIT_UNAVAILABLE
        return EXIT_AUTH if e.code in ("AUTH", "NOAUTH") else EXIT_ERROR
    except (OSError, ValueError) as e:  # ConnectionError, TimeoutError too
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return EXIT_UNAVAILABLE if isinstance(e, OSError) else EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""A small lockbroker client, standard library only.

    from lockclient import LockClient, LockError

    with LockClient(port=7878) as lb:           # or LockClient(path="/run/lockbroker.sock")
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
"""

import collections
import queue
import re
import socket
import threading

__all__ = ["LockClient", "LockError", "Lost"]

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


def main(argv=None):
    import argparse

    p = argparse.ArgumentParser(description="Acquire a lock, print its "
                                "fence, release it.")
    p.add_argument("name", nargs="?", default="demo")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=7878)
    p.add_argument("--unix", help="Unix socket path instead of TCP")
    p.add_argument("--secret", help="AUTH secret")
    p.add_argument("--ttl", type=int, help="fixed lease in ms")
    p.add_argument("--wait", type=int, default=5000, help="ms (default 5000)")
    a = p.parse_args(argv)

    try:
        lb = LockClient(a.host, a.port, path=a.unix, secret=a.secret,
                        on_lost=lambda ev: print("lost:", *ev, flush=True))
    except OSError as e:
        print("cannot connect: %s" % e)
        return 69
    with lb:
        try:
            grant = lb.acquire(a.name, ttl=a.ttl, wait=a.wait)
        except LockError as e:
            print("ERR", e.code, e.text)
            return 69
        if grant is None:
            print("TIMEOUT: %s is held by someone else" % a.name)
            return 75
        fence, ttl, token = grant
        print("acquired %s fence %d ttl %d ms" % (a.name, fence, ttl))
        print("valid:", lb.validate(a.name, fence))
        lb.release(a.name)
        print("released %s" % a.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

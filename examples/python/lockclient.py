#!/usr/bin/env python3
"""A lockbroker demo on the Python library `lockbroker` (clients/python):

    lockclient.py [-s HOST:PORT | -u PATH] [-a SECRET_FILE] [-w WAIT | -n]
                  [-E N] [-q] [--ttl TTL] [NAME]

acquires NAME (default "demo"), prints its fence and releases it, with the
options and exit codes of every lockbroker client (docs/clients.md).

Imported, it keeps the API this file used to implement itself (LockClient,
LockError, Lost, parse_addr, parse_duration), now a thin layer over
lockbroker.Client, for the scripts and tests written against it.
"""

import argparse
import collections
import os
import queue
import re
import sys
import threading

# The library of this checkout if there is one, else an installed one.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "clients", "python"))
import lockbroker  # noqa: E402

__all__ = ["LockClient", "LockError", "Lost", "parse_addr", "parse_duration"]

PROG = "lockclient.py"
LockError = lockbroker.LockbrokerError  # .code (ARGS, NOTHELD, ...), .text
Lost = collections.namedtuple("Lost", "name fence reason")


def seconds(ms):
    # The library takes seconds and rounds s * 1000 up: ms / 1000 * 1000 can
    # come out a hair above ms (2007 -> 2008), half a millisecond under not.
    return None if ms is None else max(ms - 0.5, 0) / 1000


class LockClient:
    """The old API: times in ms, acquire() -> (fence, ttl_ms, token) or None
    when busy, release() by name, LockError for an ERR, and a `lost` queue
    (and on_lost callback) of Lost tuples. Underneath is the library's pool
    of connections, so locks() lists all of them."""

    def __init__(self, host="127.0.0.1", port=7878, path=None, secret=None,
                 timeout=30.0, on_lost=None):
        addr = path or ("[%s]:%d" if ":" in host else "%s:%d") % (host, port)
        self._c = lockbroker.Client(addr, secret, timeout)
        self.lost, self.on_lost, self._held = queue.Queue(), on_lost, {}
        try:
            self._c.ping()  # connect (and AUTH) now, as the old client did
        except BaseException:
            self._c.close()
            raise

    def acquire(self, name, ttl=None, wait=None, keep=False, token=None):
        old = self._held.get(name)
        if old is not None and not old.lost.is_set():
            # The pool would send it on another connection, to wait for us.
            raise lockbroker.Held("%s is held by this client" % name, "HELD")
        try:
            lease = self._c.acquire(name, wait=seconds(wait), ttl=seconds(ttl),
                                    keep=keep, token=token)
        except lockbroker.Busy:
            return None
        self._held[name] = lease
        threading.Thread(target=self._watch, args=(lease,),
                         daemon=True).start()
        return lease.fence, lease.ttl, lease.token

    def _watch(self, lease):
        # The library only sets lease.lost; the old API queued the loss and
        # called on_lost. Watch until the lease is released by name.
        while not lease.lost.wait(0.2):
            if self._held.get(lease.name) is not lease:
                return
        if lease.lost_reason != "closed":  # our own close() is not news
            ev = Lost(lease.name, lease.fence, lease.lost_reason)
            if self.on_lost is not None:
                self.on_lost(ev)
            self.lost.put(ev)

    def _lease(self, name):
        if name not in self._held:
            raise lockbroker.NotHeld("%s is not held here" % name, "NOTHELD")
        return self._held[name]

    def release(self, name, token=None):
        if token is not None:
            return self._c.release(name, token)
        self._lease(name)
        self._held.pop(name).release()

    def extend(self, name, ttl, token=None):
        s = self._c.extend(name, seconds(ttl), token) if token else \
            self._lease(name).extend(seconds(ttl))
        return round(s * 1000)

    def status(self, name):  # None when free, else (ttl_ms, fence)
        s = self._c.status(name)
        return None if s is None else (round(s["ttl"] * 1000), s["fence"])

    def locks(self):
        return [(l["name"], l["fence"], round(l["ttl"] * 1000),
                 l["kind"].upper()) for l in self._c.locks()]

    def __getattr__(self, attr):  # validate, info, ping, close: the same
        return getattr(self._c, attr)

    def quit(self):  # close() QUITs too: the library has no other way
        self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._c.close()


# The exit codes of every lockbroker client (docs/clients.md).
EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_ERROR = 64, 69, 70
EXIT_OSERR, EXIT_BUSY, EXIT_AUTH = 71, 75, 77
# The ERR codes the broker sends (docs/protocol.md); the library's other
# codes (CONNECT, CLOSED, TIMEOUT, ...) are failures on this side.
BROKER_CODES = {"ARGS", "NAME", "HELD", "NOTHELD", "LIMIT", "NOAUTH", "AUTH",
                "UNAVAILABLE", "SHUTDOWN", "INTERNAL", "PROTO", "UNKNOWN"}
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
    return int(whole or 0) * unit + -(-int(frac or 0) * unit //
                                      10 ** len(frac))


def parse_addr(addr=None):
    """LockClient's keyword arguments for 'HOST:PORT', '[V6]:PORT', 'HOST'
    or '/PATH' (None: $LOCKBROKER_ADDR, else 127.0.0.1:7878)."""
    kind, where = lockbroker.parse_addr(addr)
    return {"path": where} if kind == "unix" else dict(host=where[0],
                                                       port=where[1])


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
        a.addr = a.u or a.s  # None: the library reads $LOCKBROKER_ADDR
        lockbroker.parse_addr(a.addr)  # a bad one is a usage error, now
        a.wait_ms = 0 if a.try_once else (
            None if a.wait is None else parse_duration(a.wait, 1000))
        a.ttl_ms = None if a.ttl is None else parse_duration(a.ttl, 1)
    except ValueError as e:
        p.error(str(e))
    if a.ttl_ms == 0:
        p.error("--ttl must be above 0")
    return a


def _acquire(client, a):
    """The lease, or None when the lock is busy."""
    # The broker says TIMEOUT also when a wait ran out while it could not
    # reach Redis; STATUS tells which (ERR UNAVAILABLE). The library asks it
    # after a wait it was given, so ask here after -n, -w 0 or no -w.
    asked = bool(a.wait_ms)
    try:
        try:
            return client.acquire(a.name, wait=seconds(a.wait_ms),
                                  ttl=seconds(a.ttl_ms))
        except lockbroker.Busy:
            if not asked:
                asked = True
                client.status(a.name)
            return None
    except lockbroker.Unavailable as e:
        if asked and e.code in ("UNAVAILABLE", "SHUTDOWN"):
            print("%s: %s: lock not obtained: the broker cannot reach Redis"
                  % (PROG, a.name), file=sys.stderr)
        raise


def _demo(client, a):
    lease = _acquire(client, a)
    if lease is None:
        if not a.quiet:
            how = ("tried once" if a.wait_ms == 0 else
                   "waited " + _secs(a.wait_ms) if a.wait_ms else "")
            print("%s: %s: lock busy%s" % (PROG, a.name,
                                           " (%s)" % how if how else ""),
                  file=sys.stderr)
        return a.conflict_exit_code
    print("acquired %s fence %d ttl %d ms" % (a.name, lease.fence, lease.ttl))
    print("valid:", lease.validate())
    if lease.lost.is_set():  # and release() raises NotHeld
        print("lost:", lease.name, lease.fence, lease.lost_reason)
    lease.release()
    print("released %s" % a.name)
    return 0


def main(argv=None):
    a = _args(argv)
    secret = None  # None: the library reads $LOCKBROKER_SECRET
    try:
        if a.a is not None:
            with open(a.a) as f:
                secret = f.readline().rstrip("\n")
    except OSError as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return EXIT_OSERR
    try:
        with lockbroker.Client(a.addr, secret, timeout=30.0) as client:
            return _demo(client, a)
    except LockError as e:  # before ValueError: ArgsError is one too
        said = "broker: ERR %s %s" % (e.code, e.text) \
            if e.code in BROKER_CODES else e.text
        print("%s: %s" % (PROG, said.rstrip()), file=sys.stderr)
        # A connection that ends mid-reply is a ProtocolError to the
        # library, but for the exit code a closed connection (as lockctl).
        if isinstance(e, (lockbroker.Unavailable, lockbroker.Timeout)) or \
                e.code == "EOF":
            return EXIT_UNAVAILABLE
        return EXIT_AUTH if isinstance(e, lockbroker.AuthError) else EXIT_ERROR
    except (OSError, ValueError) as e:  # ValueError: nothing was sent
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return EXIT_UNAVAILABLE if isinstance(e, OSError) else EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())

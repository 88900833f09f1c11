"""The asyncio client. The sync Client (sync.py) runs this one on a thread.

The broker answers one request at a time per connection, a waiting ACQUIRE
holds up the lines behind it, a connection holds at most 64 locks, and its
session locks end with it (docs/protocol.md §1, §4). So an AsyncClient keeps
a pool of connections and gives each request one of them:

- nothing is ever queued behind an ACQUIRE or FILL that may wait (the
  connection is marked `waiting` from the moment one is assigned to it), so a
  CANCEL sent for it is always the next line behind it, and any number of
  waits run at once, each on its own connection;
- a lease's RELEASE, EXTEND and VALIDATE go on its own connection unless that
  one is waiting; then they go on another with the lease's TOKEN, which the
  protocol allows from any connection;
- a connection is never closed to end a wait (that would end its session
  locks): a cancelled wait sends CANCEL, and a grant that still comes is
  released.

Every ACQUIRE carries a TOKEN (the caller's, or one made here), so an
ACQUIRE whose connection broke before its answer is sent again once, on a
new connection, with the same token: the broker grants the same grant again
(same fence) rather than a second one.
"""

import asyncio
import math
import os
import re
import secrets
import ssl
import time
from collections import deque

from .errors import (Busy, Cancelled, LockbrokerError, Lost, NotHeld, ProtocolError,
                     Timeout, Unavailable, ArgsError, from_reply)

DEFAULT_ADDR = "127.0.0.1:7878"
MAX_LINE = 64 * 1024        # longest reply line we accept
MAX_LINES = 20000           # longest multi-line reply (WHO lists <= 10000)
MAX_LOCKS = 64              # the broker's limits.max_locks_per_client default
CLOCK_DRIFT = 0.01          # the broker's locks.clock_drift default
_WORD = re.compile(r"[^\x00-\x20\x7f]+\Z")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_GRANT = re.compile(r"OK (\d+) (\d+) (\S+)\Z")


def parse_addr(addr=None):
    """('unix', path) or ('tcp', (host, port)) for 'HOST:PORT', '[V6]:PORT',
    'HOST' or '/socket/path'; None reads $LOCKBROKER_ADDR (docs/clients.md)."""
    addr = addr or os.environ.get("LOCKBROKER_ADDR") or DEFAULT_ADDR
    if addr.startswith("/"):
        return ("unix", addr)
    m = re.match(r"(?:\[([^\]]+)\]|([^:\[\]]+))(?::(\d+))?\Z", addr)
    port = int(m.group(3)) if m and m.group(3) else 7878
    if not m or not 0 < port < 65536:
        raise ValueError("bad broker address %r (HOST:PORT or /PATH)" % addr)
    return ("tcp", (m.group(1) or m.group(2), port))


def tls_context(ca=None, cert=None, key=None):
    """An ssl.SSLContext that trusts the CA file and, if given, presents
    the client certificate; None without a CA ($LOCKBROKER_CA,
    $LOCKBROKER_CERT and $LOCKBROKER_KEY when not given)."""
    ca = ca or os.environ.get("LOCKBROKER_CA") or None
    cert = cert or os.environ.get("LOCKBROKER_CERT") or None
    key = key or os.environ.get("LOCKBROKER_KEY") or None
    if (cert is None) != (key is None):
        raise ValueError("a client certificate needs its key, and a key "
                         "its certificate")
    if ca is None:
        if cert is not None:
            raise ValueError("a client certificate needs TLS: give ca")
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_verify_locations(ca)
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


def _word(value, what):
    """One wire word: nothing that could split the line or start another."""
    if not isinstance(value, str) or not _WORD.match(value):
        raise ValueError("%s must be a non-empty string of printable, "
                         "non-blank characters" % what)
    return value


def _ms(seconds, what):
    """Seconds (int or float) as whole milliseconds, rounded up."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not seconds >= 0 or math.isinf(seconds):
        raise ValueError("%s must be a finite number of seconds >= 0" % what)
    return math.ceil(seconds * 1000)


def _quiet(fut):
    """Mark a future's exception retrieved: nobody may be left to read it."""
    if not fut.cancelled():
        fut.exception()


class _Signal:
    """The lost signal of an async lease: `await lease.lost`,
    `await lease.lost.wait()`, `lease.lost.is_set()`."""

    def __init__(self):
        self._fut = asyncio.get_running_loop().create_future()

    def is_set(self):
        return self._fut.done()

    def _set(self):
        if not self._fut.done():
            self._fut.set_result(True)

    async def wait(self):
        return await asyncio.shield(self._fut)

    def __await__(self):
        return self.wait().__await__()


class Lease:
    """A granted lock. fence, token, name, ttl (ms, as granted), kind
    ('session', 'fixed', 'keep'), mode ('exclusive', 'shared', 'limit=N',
    'fill'), lost (a _Signal) and lost_reason."""

    def __init__(self, client, conn, name, fence, ttl, token, kind, mode):
        self._client, self._conn = client, conn
        self.name, self.fence, self.ttl, self.token = name, fence, ttl, token
        self.kind, self.mode = kind, mode
        self._since = time.monotonic()      # the OK's arrival
        self.lost = _Signal()
        self.lost_reason = None
        self._watchers = []                 # the sync wrapper's callbacks
        self._releasing = False
        self._released = False
        self._heard = None                  # an EVENT LOST while releasing

    def __repr__(self):
        return "<Lease %s fence=%d %s%s>" % (
            self.name, self.fence, self.kind,
            " lost:" + self.lost_reason if self.lost_reason else "")

    @property
    def validity(self):
        """Seconds the broker still counts this lease valid: its
        ttl x (1 - clock_drift) - 2 ms from the OK (or the last EXTEND).
        A session lease is renewed by the broker while the connection is
        open, so it stays valid (math.inf) until `lost` fires. 0 when lost."""
        if self.lost_reason is not None:
            return 0.0
        if self.kind == "session":
            return math.inf
        left = (self.ttl * (1 - CLOCK_DRIFT) - 2) / 1000 - (
            time.monotonic() - self._since)
        return max(0.0, left)

    def _lose(self, reason):
        """The lease is gone: EVENT LOST, or its connection broke."""
        if self.lost_reason is not None:
            return
        self.lost_reason = reason
        self.lost._set()
        for cb in self._watchers:
            cb(reason)

    async def release(self):
        """RELEASE. NotHeld if it was released or lost already, or if Redis
        no longer holds it under this token (the lease is then lost)."""
        if self.lost_reason is not None or self._released:
            raise NotHeld("the lease was %s" % (
                "released" if self._released else "lost: " + self.lost_reason),
                "NOTHELD")
        # From here an EVENT LOST may be our own RELEASE's echo (sent through
        # another connection): it is kept, and counts only if Redis says
        # NOTHELD.
        self._releasing = True
        try:
            await self._client._short(
                "RELEASE %s TOKEN %s" % (self.name, self.token), self._conn)
        except NotHeld:
            self._forget()
            self._lose(self._heard or "stolen")
            raise
        except BaseException:
            self._releasing = False
            if self._heard:
                self._lose(self._heard)
            raise
        self._released = True
        self._forget()

    def _forget(self):
        if self._conn.leases.get(self.name) is self:
            del self._conn.leases[self.name]

    async def extend(self, ttl):
        """EXTEND a fixed or kept lease to ttl seconds from now; returns the
        new ttl in seconds. The broker renews session leases itself."""
        if self.kind == "session":
            raise ArgsError("a session lease is renewed by the broker; "
                            "EXTEND is for leases with a ttl", "ARGS")
        ms = _ms(ttl, "ttl")
        sent = time.monotonic()  # a shorter lease counts from its sending
        reply = await self._client._short(
            "EXTEND %s %d TOKEN %s" % (self.name, ms, self.token), self._conn)
        parts = reply.split(" ")
        if len(parts) != 2 or parts[0] != "OK" or not parts[1].isdigit():
            raise ProtocolError("unexpected reply to EXTEND: %r" % reply[:80],
                                "REPLY")
        self.ttl, self._since = int(parts[1]), sent
        return self.ttl / 1000

    async def validate(self):
        """True while Redis holds this grant (VALIDATE with fence and token)."""
        return await self._client.validate(self.name, self.fence, self.token)


class _Reply:
    __slots__ = ("fut", "multi", "lines", "hook")

    def __init__(self, fut, multi, hook):
        self.fut, self.multi, self.lines, self.hook = fut, multi, [], hook


class _Conn:
    """One connection: a reader task that routes reply lines to requests in
    order and EVENT LOST lines to leases; the pool's bookkeeping."""

    def __init__(self, client):
        self.client = client
        self.replies = deque()   # _Reply per request sent, in order
        self.leases = {}         # name -> Lease granted on this connection
        self.names = set()       # names with an ACQUIRE assigned here
        self.turn = asyncio.Lock()  # one request on the wire at a time
        self.users = 0           # requests assigned here and not done
        self.waiting = False     # an ACQUIRE/FILL that may wait is assigned
        self.error = None        # why it closed
        self.writer = None

    async def open(self, timeout):
        kind, where = self.client.addr
        try:
            if kind == "unix":
                op = asyncio.open_unix_connection(where, limit=MAX_LINE)
            else:
                op = asyncio.open_connection(*where, limit=MAX_LINE,
                                             ssl=self.client.ssl)
            self.reader, self.writer = await asyncio.wait_for(op, timeout)
        except asyncio.TimeoutError:
            raise Timeout("no connection to %s within %g s" % (
                where, timeout), "TIMEOUT") from None
        except ssl.SSLError as e:
            raise Unavailable("TLS with %s failed: %s" % (where, e),
                              "TLS") from None
        except OSError as e:
            raise Unavailable("cannot connect to %s: %s" % (where, e),
                              "CONNECT") from None
        self.task = asyncio.ensure_future(self._read_loop())
        if self.client.secret is not None:
            try:
                reply = await self.call("AUTH " + self.client.secret, timeout)
                if reply != "OK":
                    raise self.broken(ProtocolError(
                        "unexpected reply to AUTH: %r" % reply[:80], "REPLY"))
            except BaseException:
                self.close()
                raise

    async def _read_loop(self):
        err = Unavailable("the connection was closed", "CLOSED")
        try:
            while True:
                try:
                    raw = await self.reader.readuntil(b"\n")
                except asyncio.IncompleteReadError as e:
                    if e.partial:
                        err = ProtocolError("the connection ended in the "
                                            "middle of a reply", "EOF")
                    elif self.replies:
                        err = Unavailable("the broker closed the connection",
                                          "CLOSED")
                    break
                except asyncio.LimitOverrunError:
                    err = ProtocolError("a reply line longer than %d bytes"
                                        % MAX_LINE, "LONG")
                    break
                line = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
                self._dispatch(line.decode("utf-8", "surrogateescape"))
        except OSError as e:
            err = Unavailable("connection error: %s" % e, "CLOSED")
        except ProtocolError as e:
            err = e
        except asyncio.CancelledError:
            pass
        self.broken(err)

    def _dispatch(self, line):
        if _CONTROL.search(line):
            raise ProtocolError("a control byte in a reply", "REPLY")
        if line.startswith("EVENT "):
            return self._event(line)
        if not self.replies:
            raise ProtocolError("a reply nobody asked for: %r" % line[:80],
                                "REPLY")
        r = self.replies[0]
        if r.multi and not line.startswith("ERR "):
            if line != "END":
                if len(r.lines) >= MAX_LINES:
                    raise ProtocolError("a reply of too many lines", "LONG")
                r.lines.append(line)
                return
            line = r.lines
        self.replies.popleft()
        # The hook runs here, before the next line is read, so a lease is
        # known before an EVENT LOST right behind its OK.
        result = r.hook(line) if r.hook else line
        if not r.fut.done():
            r.fut.set_result(result)

    def _event(self, line):
        w = line.split(" ")
        if len(w) < 2 or w[1] != "LOST":
            return  # an event this client does not know is none of its business
        if len(w) != 5 or not w[3].isdigit():
            raise ProtocolError("a malformed event: %r" % line[:80], "REPLY")
        lease = self.leases.get(w[2])
        if lease is not None and lease.fence == int(w[3]):
            del self.leases[w[2]]
            if lease._releasing:
                lease._heard = w[4]
            else:
                lease._lose(w[4])

    def broken(self, err):
        """Close it for err: every request in flight fails with it, and
        every lease on it is lost ('disconnected'). Returns err."""
        if self.error is not None:
            return err
        self.error = err
        self.client._forget(self)
        if self.writer is not None:
            self.writer.transport.abort()
        while self.replies:
            fut = self.replies.popleft().fut
            if not fut.done():
                fut.set_exception(_copy(err))
        for lease in list(self.leases.values()):
            lease._lose("closed" if self.client._closed else "disconnected")
        self.leases.clear()
        return err

    def close(self):
        self.broken(Unavailable("the client closed the connection", "QUIT"))
        if getattr(self, "task", None) is not None:
            self.task.cancel()

    def send(self, line, multi=False, hook=None):
        """Write one request; the future of its reply (the hook's result)."""
        if self.error is not None:
            raise _copy(self.error)
        fut = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_quiet)
        self.replies.append(_Reply(fut, multi, hook))
        self.writer.write(line.encode("utf-8", "surrogateescape") + b"\n")
        return fut

    async def wait(self, fut, timeout, what):
        """fut's reply; after timeout (None: no bound) the connection is
        closed, since a reply that came later would be read as the next one."""
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            if fut.done():
                raise
            raise self.broken(Timeout("no reply to %s within %g s; "
                                      "connection closed" % (what, timeout),
                                      "TIMEOUT")) from None

    async def call(self, line, timeout, multi=False):
        """One request in its turn. The turn is given back when its reply
        has come, even when the caller is cancelled first."""
        await self.turn.acquire()
        try:
            fut = self.send(line, multi)
        except BaseException:
            self.turn.release()
            raise
        fut.add_done_callback(lambda _: self.turn.release())
        reply = await self.wait(fut, timeout, line.split(" ", 1)[0])
        if isinstance(reply, str) and reply.startswith("ERR "):
            raise from_reply(reply)
        return reply


def _copy(err):
    return type(err)(err.text, err.code)


class _Pulse:
    """Wakes every task waiting for a connection to come free."""

    def __init__(self):
        self._fut = None

    async def wait(self):
        if self._fut is None:
            self._fut = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._fut)

    def fire(self):
        if self._fut is not None and not self._fut.done():
            self._fut.set_result(None)
        self._fut = None


class AsyncClient:
    """A client of one broker. addr: 'HOST:PORT' or '/socket/path' (None:
    $LOCKBROKER_ADDR, else 127.0.0.1:7878); secret: sent with AUTH (None:
    $LOCKBROKER_SECRET, if set); timeout: seconds each request may take on
    top of its own wait (None: no bound); max_connections: the pool's size.
    TLS: ca, a file of the CA certificates that sign the broker's (None:
    $LOCKBROKER_CA; unset: no TLS), which must name the host; cert and key,
    a client certificate (None: $LOCKBROKER_CERT, $LOCKBROKER_KEY); or
    ssl_context, an ssl.SSLContext of your own."""

    def __init__(self, addr=None, secret=None, timeout=10.0,
                 max_connections=256, ca=None, cert=None, key=None,
                 ssl_context=None):
        self.addr = parse_addr(addr)
        if secret is None:
            secret = os.environ.get("LOCKBROKER_SECRET") or None
        self.secret = None if secret is None else _word(secret, "secret")
        self.ssl = ssl_context or tls_context(ca, cert, key)
        if self.ssl is not None and self.addr[0] != "tcp":
            raise ValueError("TLS is over TCP, not a Unix socket")
        self.timeout = timeout
        self.max_connections = max_connections
        self._conns = []
        self._opening = 0
        self._pulse = _Pulse()
        self._tasks = set()
        self._closed = False

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    # -- the pool ----------------------------------------------------------

    def _choose(self, name):
        """An idle connection that can take the request; else None (open
        one) while the pool may grow; else the least busy one, or False
        when none can take it (wait for one to come free)."""
        best = None
        for c in self._conns:
            if c.waiting or (name is not None and (
                    name in c.leases or name in c.names
                    or len(c.leases) + len(c.names) >= MAX_LOCKS)):
                continue
            if c.users == 0:
                return c
            if best is None or c.users < best.users:
                best = c
        if len(self._conns) + self._opening < self.max_connections:
            return None
        return best or False

    async def _take(self, name=None, long=False, prefer=None):
        """A connection for one request, marked as used by it: name for an
        ACQUIRE of it, long if it may wait, prefer the lease's own."""
        if self._closed:
            raise Unavailable("the client is closed", "QUIT")
        c = prefer if prefer is not None and prefer.error is None \
            and not prefer.waiting else None
        while c is None:
            c = self._choose(name)
            if c is None:
                self._opening += 1
                try:
                    c = _Conn(self)
                    await c.open(self.timeout)
                finally:
                    self._opening -= 1
                if self._closed:
                    c.close()
                    raise Unavailable("the client is closed", "QUIT")
                self._conns.append(c)
            elif c is False:
                c = None
                await self._pulse.wait()
        c.users += 1
        c.waiting = c.waiting or long
        if name is not None:
            c.names.add(name)
        return c

    def _give(self, c, name=None, long=False):
        c.users -= 1
        if long:
            c.waiting = False
        if name is not None:
            c.names.discard(name)
        self._pulse.fire()

    def _forget(self, c):
        if c in self._conns:
            self._conns.remove(c)
        self._pulse.fire()

    def _spawn(self, coro):
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_quiet)

    async def _short(self, line, prefer=None, multi=False):
        """A request that never waits for a lock."""
        c = await self._take(prefer=prefer)
        try:
            return await c.call(line, self.timeout, multi)
        finally:
            self._give(c)

    # -- acquiring ---------------------------------------------------------

    def lock(self, name, wait=5.0, ttl=None, shared=False, limit=None,
             keep=False, token=None):
        """`async with client.lock(...) as lease:` or `lease = await
        client.lock(...)`. wait: seconds (0 tries once; None waits as the
        broker's locks.default_wait_ms says, by default until granted, and
        then no client timeout applies);
        ttl: seconds of a fixed lease (None: a session lock, renewed while
        connected); keep: the lock outlives its connection (needs ttl);
        token: your own (else one is made); shared / limit=n: the mode.
        Busy when not granted in time."""
        mode = "shared" if shared else "limit=%d" % limit if limit else \
            "exclusive"
        return LockRequest(self, "ACQUIRE", name, wait, ttl, keep, token,
                           mode)

    def fill(self, name, wait=5.0, ttl=None, token=None):
        """Single-flight: the lease when this caller should do the work,
        None when another caller did it meanwhile (DONE)."""
        return LockRequest(self, "FILL", name, wait, ttl, False, token, "fill")

    async def _acquire(self, verb, name, wait, ttl, keep, token, mode):
        _word(name, "name")
        token = _word(token, "token") if token is not None else \
            secrets.token_hex(16)
        if keep and ttl is None:
            raise ValueError("keep needs a ttl")
        opts = ""
        if ttl is not None:
            opts += " TTL %d" % _ms(ttl, "ttl")
        if keep:
            opts += " KEEP"
        opts += " TOKEN " + token
        if mode == "shared":
            opts += " SHARED"
        elif mode.startswith("limit="):
            opts += " LIMIT " + mode[6:]
        kind = "session" if ttl is None else "keep" if keep else "fixed"
        end = None if wait is None else time.monotonic() + wait
        for attempt in (1, 2):
            left = None if end is None else max(0, end - time.monotonic())
            line = "%s %s%s%s" % (verb, name, "" if left is None else
                                  " WAIT %d" % _ms(left, "wait"), opts)
            try:
                reply = await self._try(verb, name, line, left, kind, mode,
                                        token)
            except Unavailable as e:
                # Lost with its connection before the answer: the same
                # token asks for the same grant, never a second one.
                if e.code == "CLOSED" and attempt == 1:
                    continue
                raise
            break
        if isinstance(reply, Lease):
            return reply
        if reply == "DONE":
            return None
        if reply == "CANCELLED":  # not ours: only a cancelled task sends one
            raise Cancelled("%s: the wait was cancelled" % name, "CANCELLED")
        if reply.startswith("ERR "):
            err = from_reply(reply)
            if isinstance(err, Unavailable) and err.code == "UNAVAILABLE":
                # A grant Redis made unseen would hold our own token; give
                # it back rather than leave it to its lease.
                self._spawn(self._short("RELEASE %s TOKEN %s" % (name, token)))
            raise err
        if wait:
            # The broker says TIMEOUT also for a wait that ran out while it
            # could not reach Redis (docs/clients.md): STATUS tells which.
            await self.status(name)
        raise Busy("%s: not granted %s" % (name, "within %g s" % wait if wait
                                           else "at once"), "TIMEOUT")

    async def _try(self, verb, name, line, wait, kind, mode, token):
        long = wait is None or wait > 0
        c = await self._take(name, long)
        timeout = None if wait is None or self.timeout is None else \
            self.timeout + wait
        owner = [c, name, long]  # given back by whoever finishes with c

        def hook(reply):
            m = _GRANT.match(reply)
            if m:
                lease = Lease(self, c, name, int(m.group(1)),
                              int(m.group(2)), m.group(3), kind, mode)
                c.leases[name] = lease
                return lease
            if reply in ("TIMEOUT", "CANCELLED", "DONE") or \
                    reply.startswith("ERR "):
                return reply
            raise ProtocolError("unexpected reply to %s: %r" % (
                verb, reply[:80]), "REPLY")
        try:
            await c.turn.acquire()
        except BaseException:
            self._give(*owner)
            raise
        try:
            fut = c.send(line, hook=hook)
        except BaseException:
            c.turn.release()
            self._give(*owner)
            raise
        try:
            return await c.wait(fut, timeout, verb)
        except asyncio.CancelledError:
            # Cancelled: CANCEL right behind it ends the wait; the turn and
            # the connection are given back once both replies have come.
            tail = fut
            if long and not fut.done() and c.error is None:
                tail = c.send("CANCEL")
            self._spawn(self._after_cancel(fut, tail, owner))
            owner = None
            raise
        finally:
            if owner is not None:
                c.turn.release()
                self._give(*owner)

    async def _after_cancel(self, fut, tail, owner):
        c = owner[0]
        try:
            await asyncio.wait([tail])
        finally:
            c.turn.release()
            self._give(*owner)
        if not fut.cancelled() and fut.exception() is None and \
                isinstance(fut.result(), Lease):
            # Granted before the broker read CANCEL: not wanted now.
            try:
                await fut.result().release()
            except LockbrokerError:
                pass  # its connection's end or its lease's ends it

    # -- requests on names and tokens --------------------------------------

    async def release(self, name, token):
        """RELEASE a grant by its token, from any connection (a kept lock
        of another process, say). NotHeld if the token does not hold it."""
        await self._short("RELEASE %s TOKEN %s" % (
            _word(name, "name"), _word(token, "token")))

    async def extend(self, name, ttl, token):
        """EXTEND the grant token holds to ttl seconds; the new ttl (s)."""
        reply = await self._short("EXTEND %s %d TOKEN %s" % (
            _word(name, "name"), _ms(ttl, "ttl"), _word(token, "token")))
        return _int_after("OK", reply, "EXTEND") / 1000

    async def validate(self, name, fence, token=None):
        """True if fence (and token) is a current holder's grant of name."""
        line = "VALIDATE %s %d" % (_word(name, "name"), fence)
        if token is not None:
            line += " TOKEN " + _word(token, "token")
        reply = await self._short(line)
        if reply not in ("OK VALID", "OK STALE"):
            raise ProtocolError("unexpected reply to VALIDATE: %r"
                                % reply[:80], "REPLY")
        return reply == "OK VALID"

    async def status(self, name):
        """None when free, else {'ttl': s, 'fence': n, 'mode', 'holders'}."""
        reply = await self._short("STATUS " + _word(name, "name"))
        if reply == "OK FREE":
            return None
        w = reply.split(" ")
        if len(w) in (4, 6) and w[:2] == ["OK", "HELD"] and \
                w[2].isdigit() and w[3].isdigit():
            return {"ttl": int(w[2]) / 1000, "fence": int(w[3]),
                    "mode": w[4].lower() if len(w) == 6 else "exclusive",
                    "holders": int(w[5]) if len(w) == 6 else 1}
        raise ProtocolError("unexpected reply to STATUS: %r" % reply[:80],
                            "REPLY")

    async def who(self, name):
        """WHO: one dict per holder (fence, ttl, mode, broker, client,
        since)."""
        out = []
        for line in await self._short("WHO " + _word(name, "name"),
                                      multi=True):
            w = line.split(" ")
            if len(w) != 7 or w[0] != "HOLDER":
                raise ProtocolError("unexpected WHO line: %r" % line[:80],
                                    "REPLY")
            out.append({"fence": int(w[1]) if w[1].isdigit() else None,
                        "ttl": int(w[2]) / 1000, "mode": w[3].lower(),
                        "broker": w[4], "client": w[5], "since": w[6]})
        return out

    async def revoke(self, name):
        """REVOKE (needs the admin secret): how many held it."""
        return _int_after("OK", await self._short(
            "REVOKE " + _word(name, "name")), "REVOKE")

    async def locks(self):
        """LOCKS of every connection that is not waiting: one dict per lock
        (name, fence, ttl in s as the broker counts it, kind, mode)."""
        out = []
        for c in list(self._conns):
            if c.waiting or c.error is not None:
                continue
            c.users += 1  # c itself, never another in its place
            try:
                lines = await c.call("LOCKS", self.timeout, multi=True)
            finally:
                self._give(c)
            for line in lines:
                w = line.split(" ")
                if len(w) not in (5, 6) or w[0] != "LOCK":
                    raise ProtocolError("unexpected LOCKS line: %r"
                                        % line[:80], "REPLY")
                out.append({"name": w[1], "fence": int(w[2]),
                            "ttl": int(w[3]) / 1000, "kind": w[4].lower(),
                            "mode": w[5].lower() if len(w) == 6
                            else "exclusive"})
        return out

    async def info(self):
        """INFO as a dict of strings."""
        lines = await self._short("INFO", multi=True)
        return dict(l.split(" ", 2)[1:] for l in lines if l.count(" ") >= 2)

    async def ping(self):
        if await self._short("PING") != "PONG":
            raise ProtocolError("PING not answered PONG", "REPLY")

    async def run_locked(self, name, fn, *args, **lockopts):
        """`await fn(lease, *args)` under the lock; if the lock is lost
        first, the task is cancelled and Lost(reason) raised."""
        async with self.lock(name, **lockopts) as lease:
            work = asyncio.ensure_future(fn(lease, *args))
            lost = asyncio.ensure_future(lease.lost.wait())
            try:
                await asyncio.wait([work, lost],
                                   return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                work.cancel()
                raise
            finally:
                lost.cancel()
            if not work.done():
                work.cancel()
                await asyncio.wait([work])
                raise Lost(lease.lost_reason)
            return work.result()

    async def close(self):
        """QUIT every idle connection (its locks are released at once) and
        close them all; their leases are lost ('closed')."""
        self._closed = True
        quits = []
        for c in list(self._conns):
            if c.users == 0 and c.error is None:
                quits.append(c.send("QUIT"))
        if quits:
            await asyncio.wait(quits, timeout=self.timeout)
        readers = [c.task for c in self._conns]
        for c in list(self._conns):
            c.close()
        for task in list(self._tasks):
            task.cancel()
        # Let the tasks end here, before a sync client stops its loop.
        pending = readers + list(self._tasks)
        if pending:
            await asyncio.wait(pending, timeout=1)


def _int_after(word, reply, verb):
    w = reply.split(" ")
    if len(w) != 2 or w[0] != word or not w[1].isdigit():
        raise ProtocolError("unexpected reply to %s: %r" % (verb, reply[:80]),
                            "REPLY")
    return int(w[1])


class LockRequest:
    """What lock() and fill() return: await it for the lease, or use it as
    `async with`, which releases the lease at the end and raises Lost if it
    was lost inside (unless another exception is on its way)."""

    def __init__(self, client, *args):
        self._client, self._args = client, args
        self.lease = None

    def __await__(self):
        return self._client._acquire(*self._args).__await__()

    async def __aenter__(self):
        self.lease = await self._client._acquire(*self._args)
        return self.lease

    async def __aexit__(self, et, e, tb):
        await _end(self.lease, et)


async def _end(lease, et):
    """Leaving a `with` block: release; say if the lease was lost."""
    if lease is None or lease._released:
        return
    if lease.lost_reason is None:
        try:
            await lease.release()
            return
        except NotHeld:
            pass
        except LockbrokerError:
            if et is None:
                raise
            return
    if et is None:
        raise Lost(lease.lost_reason)

"""Worker processes: each runs one thread per broker connection, taking
locks, writing to the fenced resource while holding them, and journalling
every step with time.monotonic() (system-wide, so comparable across the
processes) for the checkers.

Besides its own connection a thread has two more, made when first needed:
one to the same broker and one to the other. Through them a holder now and
then acts on its own grant the way another client with its token would
(docs/protocol.md §3, What a holder can rely on): it acquires it again with
the token (the same TTL, or a shorter one), releases it by token through
the other broker, or shortens it with EXTEND. The holding connection keeps
reading meanwhile, so the moment it is told EVENT LOST is known; what each
connection believed it held (from its OK to its RELEASE, its EVENT LOST or
its broken connection) is journalled with every grant, with the LOCKS
listings it read while it held."""

import json
import os
import random
import select
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "e2e"))
import lbtest  # noqa: E402

from fenced import ResourceClient  # noqa: E402

HOT = "hot"
COLD = ["cold%d" % i for i in range(1, 9)]
# Two names held in the sharing modes (docs/protocol.md §3): SEM only with
# LIMIT SEM_LIMIT, RW by readers (SHARED) and writers (plain ACQUIRE).
SEM, SEM_LIMIT = "sem", 2
RW, RW_READERS = "rw", 0.8             # the share of RW's acquires SHARED
NAMES = [HOT] + COLD + [SEM, RW]
# The share of operations on SEM and on RW; the rest goes half to HOT and
# half to the cold names, as before these two came. SEM's share is enough
# for a LIMIT that admits everyone to show 3+ holders within seconds.
SEM_SHARE, RW_SHARE = 0.06, 0.06
TTLS = (None, 500, 2000)               # None: a session lock
# A few cold acquires take a long lease and hold it briefly: a RELEASE of
# one that Redis does not answer (a stall longer than the command timeout)
# leaves a release owed to Redis for a lease that is still running when
# the broker sends it again, and the holder then acquires the name again
# with the same token (below): an owed release that compared only the
# token would delete that newer grant.
LONG_SHARE, LONG_TTL = 0.05, 8000
LONG_HOLD_S = (0.2, 1.5)
# A RELEASE ... TOKEN answered ERR UNAVAILABLE (the broker owes it to
# Redis) is followed by an ACQUIRE of the name with the same token, held
# this long (past the broker's retry of what it owes).
REUSE_WAIT_MS, REUSE_HOLD_S = 3000, (2.5, 4.5)
# 0 is a try-once. The hot name's waiters exercise queues and hand-over;
# the cold names are mostly tried once, so few waiters queue there and a
# try-once reaches Redis (one behind a local waiter is answered TIMEOUT by
# the broker alone), which is what the late-grant checker can judge.
HOT_WAITS = (0, 300, 1000, 3000)
COLD_WAITS = (0, 0, 0, 300, 1000)
# SEM and RW queue like the hot name (a waiter wakes at a release or a
# lost hold) and are tried once a quarter of the time.
MODE_WAITS = (0, 300, 1000, 3000)
SOCK_TIMEOUT = 15                      # longer than any wait plus a fault

# Acting on one's own grant as another client with the token would: the
# share of holds that do one such operation, what it is (weights), and
# through which connection ("main": the holding one; "same": another to the
# same broker; "other": one to the other broker).
OP_SHARE = 0.15
OPS = ((("regrant", "same"), 0.20), (("regrant", "other"), 0.20),
       (("release", "other"), 0.25), (("release", "same"), 0.05),
       (("extend", "main"), 0.05), (("extend", "same"), 0.10),
       (("extend", "other"), 0.15))
SHORT_MS = (50, 300)                   # a shortened lease
SHORT_SHARE = 0.5                      # of regrants (of EXTENDs: 0.8)
OTHER_REGRANT_WAITS = (0, 500)         # through the other broker it queues
# After its hold ends, the thread waits this long for the EVENT LOST of
# the holds its token has on its other connections, then releases those.
LINGER_S = (0.2, 0.5)
# LOCKS listings: after an operation, then every SNAP_EVERY_S while the
# hold lasts; of the other holds, SNAP_SHARE read one at a random moment.
SNAP_EVERY_S, SNAP_SHARE = 0.1, 0.2


class Conn:
    """A broker connection whose lines are read as they come, from any of
    the thread's connections: EVENT LOST lines are set aside with the
    moment they were read (one may arrive before any reply, docs/protocol.md
    §7), other lines wait for the request they answer."""

    def __init__(self, port, client, broker, w):
        self.c = lbtest.Client(port, timeout=SOCK_TIMEOUT)
        self.client, self.broker, self.w = client, broker, w
        self.events = []               # [t, name, fence, reason]
        self.lines = []                # replies not yet taken
        self.holds = {}                # (name, fence) -> open grant record

    def fileno(self):
        """For select."""
        return self.c.sock.fileno()

    def send(self, line):
        """Send one request."""
        self.c.send(line)

    def buffered(self):
        """Whether a complete line is waiting in our buffer."""
        return b"\n" in self.c.buf

    def read(self):
        """Read what the socket has (it is readable) and split it into
        lines; raises ConnectionError when the broker closed it."""
        chunk = self.c.sock.recv(65536)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        self.c.buf += chunk
        self.split()

    def split(self):
        """Move the complete lines of the buffer to events and lines."""
        while b"\n" in self.c.buf:
            line, self.c.buf = self.c.buf.split(b"\n", 1)
            line = line.decode(errors="replace")
            w = line.split()
            if len(w) == 5 and w[0] == "EVENT" and w[1] == "LOST":
                self.events.append([time.monotonic(), w[2], int(w[3]), w[4]])
            else:
                self.lines.append(line)

    def take_events(self, name, fence):
        """Remove and return the events about one hold."""
        mine = [e for e in self.events if e[1] == name and e[2] == fence]
        self.events = [e for e in self.events if e not in mine]
        return mine

    def close(self):
        """Close the socket."""
        self.c.close()


class Journal:
    """One JSON line per record, shared by a process's threads, flushed at
    once so a stopped or killed worker loses nothing it finished."""

    def __init__(self, path):
        self.f = open(path, "a")
        self.lock = threading.Lock()

    def put(self, rec):
        """Append one record."""
        line = json.dumps(rec, separators=(",", ":"))
        with self.lock:
            self.f.write(line + "\n")
            self.f.flush()


class AuxBroken(Exception):
    """One of the thread's extra connections broke (its holds end)."""


class MainBroken(ConnectionError):
    """The thread's own connection broke (or its reply did not come)."""


class Session:
    """One connection's loop: acquire, write, hold, write, release."""

    def __init__(self, w, i, cfg, shared, journal):
        self.w, self.client = w, "w%dc%d" % (w, i)
        self.ports = cfg["ports"]
        self.broker = (w * cfg["conns"] + i) % len(self.ports)
        self.lease_ms = cfg["lease_ms"]
        self.stop, self.held, self.held_lock = shared
        self.journal = journal
        self.rng = random.Random("%d/%s" % (cfg["seed"], self.client))
        self.res = ResourceClient(cfg["resource_port"])
        self.conn = None
        self.aux = {"same": None, "other": None}
        self.reuse = None       # a grant whose RELEASE Redis did not answer
        self.long_share = cfg.get("long_share", LONG_SHARE)
        self.long_hold_s = tuple(cfg.get("long_hold_s", LONG_HOLD_S))

    def run(self):
        """Loop until told to stop; a broken connection is made again."""
        while not self.stop.value:
            try:
                if self.conn is None:
                    self.conn = Conn(self.ports[self.broker], self.client,
                                     self.broker, self.w)
                self.round()
            except (OSError, ConnectionError) as e:
                self._broken(e)
        self._quit()

    def round(self):
        """One ACQUIRE and, if granted, one hold."""
        reuse, self.reuse = self.reuse, None
        if reuse is not None:
            rec = dict(reuse)
            req = self._acquire_line(rec, rec["ttl_asked"], rec["token"])
        else:
            ttl = self.rng.choice(TTLS)
            rec = {"client": self.client, "w": self.w, "broker": self.broker,
                   "kind": "ttl" if ttl else "session"}
            rec.update(self._pick())
            if rec["name"] in COLD and self.rng.random() < self.long_share:
                ttl, rec["kind"], rec["long"] = LONG_TTL, "ttl", True
            rec["ttl_asked"] = ttl
            req = self._acquire_line(rec, ttl, None)
        rec["t_sent"] = time.monotonic()
        try:
            reply = self.cmd(self.conn, req)
        except (OSError, ConnectionError):
            self._put(dict(rec, type="acq", reply="disconnect",
                           t_reply=time.monotonic()))
            raise
        rec["t_reply"] = time.monotonic()
        if reply.startswith("OK "):
            self.hold(rec, reply.split())
            time.sleep(self.rng.uniform(0, 0.05))
        else:
            self._put(dict(rec, type="acq", reply=reply))
            time.sleep(self.rng.uniform(0.01, 0.1))
        self._flush_orphans()

    def _acquire_line(self, rec, ttl, token):
        """The ACQUIRE request for rec (its name, mode and wait)."""
        return "ACQUIRE %s%s%s%s WAIT %d" % (
            rec["name"], " TTL %d" % ttl if ttl else "",
            {"exclusive": "", "shared": " SHARED",
             "limit": " LIMIT %d" % rec.get("limit", 0)}[rec["mode"]],
            " TOKEN %s" % token if token else "", rec["wait"])

    def _pick(self):
        """The name, mode and wait of the next ACQUIRE. A mode is
        "exclusive" (plain ACQUIRE), "shared" (SHARED) or "limit" (LIMIT
        n, n in "limit"); it is journalled with the hold."""
        r = self.rng.random()
        if r < SEM_SHARE:
            return {"name": SEM, "mode": "limit", "limit": SEM_LIMIT,
                    "wait": self.rng.choice(MODE_WAITS)}
        if r < SEM_SHARE + RW_SHARE:
            shared = self.rng.random() < RW_READERS
            return {"name": RW, "mode": "shared" if shared else "exclusive",
                    "wait": self.rng.choice(MODE_WAITS)}
        hot = self.rng.random() < 0.5
        return {"name": HOT if hot else self.rng.choice(COLD),
                "mode": "exclusive",
                "wait": self.rng.choice(HOT_WAITS if hot else COLD_WAITS)}

    # Reading: every connection of the thread is read whenever it waits.

    def _conns(self):
        """The thread's open connections, its own first."""
        return [c for c in [self.conn] + list(self.aux.values())
                if c is not None]

    def pump(self, timeout, main=True):
        """Wait up to timeout for input on any connection (the holding one
        too unless main is False), read it, and deal with the extra
        connections' events. Whether the holding connection has unread
        events or lines."""
        conns = [c for c in self._conns() if main or c is not self.conn]
        if not any(c.buffered() for c in conns):
            try:
                ready = select.select(conns, [], [], max(0.0, timeout))[0]
            except (OSError, ValueError):
                ready = conns
            for c in ready:
                self._read(c)
        for c in conns:
            c.split()
        self._aux_events()
        return main and self.conn is not None and bool(
            self.conn.events or self.conn.lines)

    def _read(self, c):
        """Read one connection; an extra one that broke is dropped (its
        holds end there), the holding one's error goes up (MainBroken)."""
        try:
            c.read()
        except (OSError, ConnectionError) as e:
            if c is self.conn:
                raise MainBroken(repr(e)[:100]) from e
            self._aux_broken(c, e)

    def cmd(self, conn, line, multi=False, main=True):
        """Send a request on conn; its reply (every line up to END if
        multi), reading every connection meanwhile (the holding one too
        unless main is False). An extra connection that breaks or does not
        answer raises AuxBroken; the holding one, MainBroken."""
        try:
            conn.send(line)
        except OSError as e:
            if conn is self.conn:
                raise MainBroken(repr(e)[:100]) from e
            self._aux_broken(conn, e)
            raise AuxBroken("send failed") from e
        deadline = time.monotonic() + SOCK_TIMEOUT
        out = []
        try:
            while True:
                while conn.lines:
                    l = conn.lines.pop(0)
                    if not multi:
                        return l
                    if l == "END":
                        return out
                    out.append(l)
                if conn not in self._conns():
                    raise AuxBroken("connection lost")
                left = deadline - time.monotonic()
                if left <= 0:
                    if conn is self.conn:
                        raise MainBroken("no reply to %r" % line)
                    self._aux_broken(conn, "no reply to %r" % line)
                    raise AuxBroken("no reply")
                self.pump(min(left, 0.5), main=main or conn is self.conn)
        except MainBroken:
            # The holding connection broke while an extra one waited for
            # its reply: that reply would be read as the answer to the
            # extra connection's next request, so it goes too.
            if conn is not self.conn and conn in self._conns():
                self._aux_broken(conn, "reply unread: %r" % line)
            raise

    # The hold.

    def hold(self, g, ok):
        """Use the lock: write, hold 0-1.5 x its lease watching for EVENT
        LOST (now and then acting on the grant through another connection,
        or reading LOCKS), write again and release (only an exclusive hold
        writes); the record goes out whatever happens, since the checkers
        need every grant."""
        g.update(type="grant", t_granted=g.pop("t_reply"), fence=int(ok[1]),
                 ttl=int(ok[2]), token=ok[3], writes=[])
        g.pop("ttl_asked", None)
        self._count(g, +1)
        plan = None
        try:
            self._write(g)
            if g.get("reused_token"):
                g["hold_s"] = self.rng.uniform(*REUSE_HOLD_S)
            elif g.get("long"):
                g["hold_s"] = self.rng.uniform(*self.long_hold_s)
            else:
                g["hold_s"] = self.rng.uniform(0, 1.5) * g["ttl"] / 1000.0
            plan = self._plan(g)
            if self._wait(g, g["t_granted"] + g["hold_s"], plan) != "lost":
                self._write(g)
                self._release(g)
        except (OSError, ConnectionError):
            g["t_disconnect"] = time.monotonic()
            raise
        finally:
            self._count(g, -1)
            self._attach_events(g)
            self._put(g)
            self._settle(g)

    def _plan(self, g):
        """What this hold does besides waiting: None, or a dict with the
        operation on its grant (op, via, at) and the LOCKS readings (at)."""
        plan = {"snaps": [], "op": None}
        if self.rng.random() < OP_SHARE:
            r, acc = self.rng.random() * sum(w for _, w in OPS), 0.0
            for (op, via), wt in OPS:
                acc += wt
                if r < acc:
                    break
            if op == "extend" and via == "main" and g["kind"] == "session":
                via = "same"      # its own session lock: ERR ARGS
            plan["op"] = {"op": op, "via": via, "at": g["t_granted"] +
                          self.rng.uniform(0.05, 0.6) * g["hold_s"]}
        elif self.rng.random() < SNAP_SHARE:
            plan["snaps"].append(g["t_granted"] +
                                 self.rng.uniform(0, 1) * g["hold_s"])
        return plan

    def _wait(self, g, end, plan):
        """Wait until end unless the lock is lost, doing what plan says
        on the way; "deadline", "stop" or "lost". Woken past the deadline
        (paused, starved), the holder goes on like one that does not look:
        writes and releases first, and reads the events after. That is the
        stale holder fences exist for."""
        while True:
            if any(e[1] == g["name"] and e[2] == g["fence"]
                   for e in self.conn.events):
                return "lost"
            if self.conn.lines:
                g["unexpected"] = True
                self.conn.lines = []
            now = time.monotonic()
            if now >= end:
                return "deadline"
            if self.stop.value:
                return "stop"
            op = plan["op"]
            if op is not None and "done" not in op and now >= op["at"]:
                op["done"] = True
                self._operate(g, op)
                if g.get("t_notheld") is not None:
                    return "lost"
                plan["snaps"].append(time.monotonic())
                continue
            if plan["snaps"] and now >= plan["snaps"][0]:
                plan["snaps"].pop(0)
                self._snapshot(self.conn, g)
                if op is not None and "done" in op:
                    plan["snaps"].append(time.monotonic() + SNAP_EVERY_S)
                continue
            nxt = min([end] + plan["snaps"] +
                      ([op["at"]] if op and "done" not in op else []))
            conns = self._conns()
            ready = [c for c in conns if c.buffered()]
            if not ready:
                try:
                    ready = select.select(conns, [], [], min(
                        max(0.0, nxt - now), 0.25))[0]
                except (OSError, ValueError):
                    ready = conns
            late = time.monotonic() - end
            if late >= 0:
                if self.conn in ready and late > 0.1:
                    g["woke_late_s"] = round(late, 3)
                return "deadline"
            if ready:
                self.pump(0)

    def _write(self, g):
        """One fenced write; the answer is kept with the hold. Only an
        exclusive holder writes: the resource's rule (refuse a fence below
        the highest accepted) would refuse a SHARED or LIMIT holder whose
        fellow holder, granted later, wrote first, and that is no fault."""
        if g["mode"] != "exclusive":
            return
        t = time.monotonic()
        ok = self.res.write(g["name"], g["fence"], self.client, g["token"])
        g["writes"].append([t, ok])

    def _release(self, g):
        """RELEASE with the token, so that even a stale holder's release
        reaches Redis (without it the broker answers NOTHELD itself). If
        the broker owes it to Redis (ERR UNAVAILABLE), the next round
        acquires the name again with the same token."""
        g["t_release_sent"] = time.monotonic()
        g["release_reply"] = self.cmd(
            self.conn, "RELEASE %s TOKEN %s" % (g["name"], g["token"]))
        g["t_release_reply"] = time.monotonic()
        if g["release_reply"].startswith("ERR UNAVAILABLE"):
            self.reuse = {k: g[k] for k in ("client", "w", "broker", "kind",
                                            "name", "mode", "limit", "long",
                                            "token") if k in g}
            self.reuse.update(reused_token=True, wait=REUSE_WAIT_MS,
                              ttl_asked=None if g["kind"] == "session"
                              else g["ttl"])

    # Acting on the grant through another connection, as another client
    # holding the token would.

    def _aux(self, via):
        """The connection for via (made if need be)."""
        if via == "main":
            return self.conn
        if self.aux[via] is None:
            b = self.broker if via == "same" else \
                (self.broker + 1) % len(self.ports)
            self.aux[via] = Conn(self.ports[b], "%s%s" % (
                self.client, via[0]), b, self.w)
        return self.aux[via]

    def _operate(self, g, op):
        """Do one operation on g's grant; journal it (type "op") and, for
        an ACQUIRE again that is granted, the new hold (type "grant",
        regrant_of) that its connection now believes it has."""
        rec = {"type": "op", "op": op["op"], "via": op["via"],
               "name": g["name"], "token": g["token"],
               "holder": g["client"], "holder_fence": g["fence"],
               "holder_broker": g["broker"], "w": self.w}
        try:
            c = self._aux(op["via"])
        except (OSError, ConnectionError) as e:
            rec.update(client=None, reply="connect: %r" % (e,))
            self._put(rec)
            return
        rec.update(client=c.client, broker=c.broker)
        if op["op"] == "regrant":
            short = self.rng.random() < SHORT_SHARE
            ttl = self.rng.randint(*SHORT_MS) if short else \
                (g["ttl"] if g["kind"] == "ttl" else 2000)
            wait = 0 if op["via"] != "other" else \
                self.rng.choice(OTHER_REGRANT_WAITS)
            req = self._acquire_line(g, ttl, g["token"]).rsplit(
                " WAIT ", 1)[0] + " WAIT %d" % wait
            rec.update(ttl=ttl, wait=wait, short=short)
        elif op["op"] == "release":
            req = "RELEASE %s TOKEN %s" % (g["name"], g["token"])
        else:
            short = self.rng.random() < 0.8
            ttl = self.rng.randint(*SHORT_MS) if short else 2000
            req = "EXTEND %s %d TOKEN %s" % (g["name"], ttl, g["token"])
            rec.update(ttl=ttl, short=short)
        rec["t_sent"] = time.monotonic()
        try:
            rec["reply"] = self.cmd(c, req)
        except AuxBroken:
            rec["reply"] = "disconnect"
        except (OSError, ConnectionError):
            rec.update(reply="disconnect" if c is self.conn else
                       "unknown (own connection broke)",
                       t_reply=time.monotonic())
            self._put(rec)
            raise
        rec["t_reply"] = time.monotonic()
        self._put(rec)
        if c is self.conn and op["op"] == "extend" and \
                rec["reply"].startswith("ERR NOTHELD"):
            # Its own connection told it: the broker forgot the hold
            # (docs/protocol.md, EXTEND), and so does the holder.
            g["t_notheld"] = rec["t_reply"]
        if op["op"] == "regrant" and rec["reply"].startswith("OK "):
            w = rec["reply"].split()
            b = {k: g[k] for k in ("name", "mode", "limit") if k in g}
            b.update(type="grant", client=c.client, w=self.w,
                     broker=c.broker, kind="ttl", wait=rec["wait"],
                     t_sent=rec["t_sent"], t_granted=rec["t_reply"],
                     fence=int(w[1]), ttl=int(w[2]), token=w[3], writes=[],
                     regrant_of=g["client"])
            c.holds[(b["name"], b["fence"])] = b
            self._aux_events()
            if (b["name"], b["fence"]) in c.holds:
                self._snapshot(c, b)

    def _snapshot(self, c, g):
        """Read LOCKS on c and keep the listing with g's record:
        [t_sent, t_reply, [[name, fence, ttl_ms, kind(, mode)], ...]]."""
        t = time.monotonic()
        try:
            lines = self.cmd(c, "LOCKS", multi=True)
        except AuxBroken:
            return
        locks = []
        for l in lines:
            w = l.split()
            if len(w) >= 5 and w[0] == "LOCK":
                locks.append([w[1], int(w[2]), int(w[3])] + w[4:])
        g.setdefault("locks", []).append([t, time.monotonic(), locks])

    def _aux_events(self):
        """End the extra connections' holds their events are about."""
        for c in list(self.aux.values()):
            if c is None:
                continue
            for e in list(c.events):
                b = c.holds.pop((e[1], e[2]), None)
                if b is not None:
                    c.events.remove(e)
                    b.update(t_lost=e[0], lost_reason=e[3])
                    self._put(b)

    def _aux_broken(self, c, e):
        """An extra connection broke: its holds end, it is made again
        when next needed."""
        now = time.monotonic()
        for b in c.holds.values():
            b["t_disconnect"] = now
            self._put(b)
        c.holds = {}
        self._flush_events(c)
        self._put({"type": "disconnect", "client": c.client,
                   "broker": c.broker, "t": now, "error": repr(e)[:120]})
        c.close()
        for k, v in self.aux.items():
            if v is c:
                self.aux[k] = None

    def _settle(self, g):
        """After a hold: wait a little for the EVENT LOST of what its
        token still holds on the other connections (a RELEASE through one
        broker must reach the holders on the other), then release those."""
        left = [c for c in self.aux.values() if c is not None and
                any(b["token"] == g["token"] for b in c.holds.values())]
        if not left:
            return
        end = time.monotonic() + self.rng.uniform(*LINGER_S)
        while not self.stop.value and time.monotonic() < end and any(
                b["token"] == g["token"] for c in left
                for b in c.holds.values()):
            self.pump(min(0.05, end - time.monotonic()), main=False)
        for c in left:
            for key, b in list(c.holds.items()):
                if b["token"] != g["token"] or c not in self._conns():
                    continue
                b["t_release_sent"] = time.monotonic()
                try:
                    b["release_reply"] = self.cmd(
                        c, "RELEASE %s TOKEN %s" % (b["name"], b["token"]),
                        main=False)
                except AuxBroken:
                    continue
                b["t_release_reply"] = time.monotonic()
                if c.holds.pop(key, None) is not None:
                    self._put(b)

    # Bookkeeping.

    def _attach_events(self, g):
        """Move this hold's EVENT LOST (if any) into its record."""
        if self.conn is None:
            return
        evs = self.conn.take_events(g["name"], g["fence"])
        if evs:
            g["t_lost"] = min(e[0] for e in evs)
            g["lost_reason"] = evs[0][3]

    def _flush_orphans(self):
        """Journal events that matched no hold (there should be none)."""
        for c in self._conns():
            self._flush_events(c)

    def _flush_events(self, c):
        """Journal c's events that matched no hold."""
        for e in c.events:
            self._put({"type": "event", "client": c.client,
                       "t": e[0], "name": e[1], "fence": e[2],
                       "reason": e[3]})
        c.events = []

    def _count(self, g, delta):
        """Tell the nemesis this process holds (TTL or session) locks."""
        slot = 2 * self.w + (0 if g["kind"] == "ttl" else 1)
        with self.held_lock:
            self.held[slot] += delta

    def _broken(self, e):
        """Note a broken connection and back off before making a new one."""
        if self.conn is not None:
            self._put({"type": "disconnect", "client": self.client,
                       "broker": self.broker, "t": time.monotonic(),
                       "error": repr(e)[:120]})
            self.conn.close()
            self.conn = None
        self.reuse = None
        time.sleep(self.rng.uniform(0.05, 0.2))

    def _quit(self):
        """Leave politely: QUIT releases anything still held at once (the
        extra connections' holds end with it)."""
        for c in self._conns():
            now = time.monotonic()
            for b in c.holds.values():
                b["t_release_sent"] = now
                b["release_reply"] = "QUIT"
                self._put(b)
            c.holds = {}
            try:
                c.send("QUIT")
            except (OSError, ConnectionError):
                pass
            c.close()
        self.res.close()

    def _put(self, rec):
        """Journal one record."""
        self.journal.put(rec)


def worker_main(w, cfg, stop, held):
    """Entry point of worker process w: cfg["conns"] connection threads."""
    journal = Journal(cfg["journal"])
    shared = (stop, held, threading.Lock())
    sessions = [Session(w, i, cfg, shared, journal)
                for i in range(cfg["conns"])]
    threads = [threading.Thread(target=s.run, name=s.client)
               for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    journal.put({"type": "exit", "w": w, "t": time.monotonic()})


def read_journal(path):
    """Every complete record in a journal file (a torn last line is
    skipped: the process may still be writing)."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.endswith("\n"):
                    out.append(json.loads(line))
    except FileNotFoundError:
        pass
    return out

"""Worker processes: each runs one thread per broker connection, taking
locks, writing to the fenced resource while holding them, and journalling
every step with time.monotonic() (system-wide, so comparable across the
processes) for the checkers."""

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


class Conn:
    """A broker connection that sets EVENT LOST lines aside as they come,
    since one may arrive before any reply (docs/protocol.md §7)."""

    def __init__(self, port):
        self.c = lbtest.Client(port, timeout=SOCK_TIMEOUT)
        self.events = []               # [t, name, fence, reason]

    def cmd(self, line):
        """Send a request; its reply, after any events before it."""
        self.c.send(line)
        while True:
            reply = self.c.line()
            if not self._event(reply):
                return reply

    def poll(self, timeout):
        """Whether a line is (or becomes within timeout) ready to read."""
        if b"\n" in self.c.buf:
            return True
        return bool(select.select([self.c.sock], [], [], timeout)[0])

    def next_event(self):
        """Read one unsolicited line; the event it is, or None."""
        line = self.c.line()
        return self.events[-1] if self._event(line) else None

    def take_events(self, name, fence):
        """Remove and return the events about one hold."""
        mine = [e for e in self.events if e[1] == name and e[2] == fence]
        self.events = [e for e in self.events if e not in mine]
        return mine

    def close(self):
        """Close the socket."""
        self.c.close()

    def _event(self, line):
        """Record line if it is an EVENT LOST; whether it was."""
        w = line.split()
        if len(w) == 5 and w[0] == "EVENT" and w[1] == "LOST":
            self.events.append([time.monotonic(), w[2], int(w[3]), w[4]])
            return True
        return False


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

    def run(self):
        """Loop until told to stop; a broken connection is made again."""
        while not self.stop.value:
            try:
                if self.conn is None:
                    self.conn = Conn(self.ports[self.broker])
                self.round()
            except (OSError, ConnectionError) as e:
                self._broken(e)
        self._quit()

    def round(self):
        """One ACQUIRE and, if granted, one hold."""
        ttl = self.rng.choice(TTLS)
        rec = {"client": self.client, "w": self.w, "broker": self.broker,
               "kind": "ttl" if ttl else "session"}
        rec.update(self._pick())
        req = "ACQUIRE %s%s%s WAIT %d" % (
            rec["name"], " TTL %d" % ttl if ttl else "",
            {"exclusive": "", "shared": " SHARED",
             "limit": " LIMIT %d" % rec.get("limit", 0)}[rec["mode"]],
            rec["wait"])
        rec["t_sent"] = time.monotonic()
        try:
            reply = self.conn.cmd(req)
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

    def hold(self, g, ok):
        """Use the lock: write, hold 0-1.5 x its lease watching for EVENT
        LOST, write again and release (only an exclusive hold writes); the
        record goes out whatever happens, since the checkers need every
        grant."""
        g.update(type="grant", t_granted=g.pop("t_reply"), fence=int(ok[1]),
                 ttl=int(ok[2]), token=ok[3], writes=[])
        self._count(g, +1)
        try:
            self._write(g)
            g["hold_s"] = self.rng.uniform(0, 1.5) * g["ttl"] / 1000.0
            if self._wait(g, g["t_granted"] + g["hold_s"]) != "lost":
                self._write(g)
                self._release(g)
        except (OSError, ConnectionError):
            g["t_disconnect"] = time.monotonic()
            raise
        finally:
            self._count(g, -1)
            self._attach_events(g)
            self._put(g)

    def _wait(self, g, end):
        """Sleep until end unless the lock is lost; "deadline", "stop" or
        "lost". Woken past the deadline (paused, starved), the holder goes
        on like one that does not look: writes and releases first, and
        reads the events after. That is the stale holder fences exist for."""
        while True:
            now = time.monotonic()
            if now >= end:
                return "deadline"
            if self.stop.value:
                return "stop"
            ready = self.conn.poll(min(end - now, 0.25))
            late = time.monotonic() - end
            if late >= 0:
                if ready and late > 0.1:
                    g["woke_late_s"] = round(late, 3)
                return "deadline"
            if ready:
                ev = self.conn.next_event()
                if ev and ev[1] == g["name"] and ev[2] == g["fence"]:
                    return "lost"
                if ev is None:
                    g["unexpected"] = True

    def _write(self, g):
        """One fenced write; the answer is kept with the hold. Only an
        exclusive holder writes: the resource's rule (refuse a fence below
        the highest accepted) would refuse a SHARED or LIMIT holder whose
        fellow holder, granted later, wrote first, and that is no fault."""
        if g["mode"] != "exclusive":
            return
        t = time.monotonic()
        ok = self.res.write(g["name"], g["fence"], self.client)
        g["writes"].append([t, ok])

    def _release(self, g):
        """RELEASE with the token, so that even a stale holder's release
        reaches Redis (without it the broker answers NOTHELD itself)."""
        g["t_release_sent"] = time.monotonic()
        g["release_reply"] = self.conn.cmd(
            "RELEASE %s TOKEN %s" % (g["name"], g["token"]))
        g["t_release_reply"] = time.monotonic()

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
        if self.conn is not None and self.conn.events:
            for e in self.conn.events:
                self._put({"type": "event", "client": self.client,
                           "t": e[0], "name": e[1], "fence": e[2],
                           "reason": e[3]})
            self.conn.events = []

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
        time.sleep(self.rng.uniform(0.05, 0.2))

    def _quit(self):
        """Leave politely: QUIT releases anything still held at once."""
        if self.conn is not None:
            try:
                self.conn.cmd("QUIT")
            except (OSError, ConnectionError):
                pass
            self.conn.close()
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

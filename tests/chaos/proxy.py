"""A loopback TCP relay between one broker and Redis, so the nemesis can
break that broker's Redis link alone: pass, cut, delay or lossy, and reset
(drop every connection at once, once, and go on accepting)."""

import collections
import random
import select
import socket
import struct
import threading
import time

# A reset, not a FIN: what a crashed peer or a dropped route looks like.
_LINGER_RST = struct.pack("ii", 1, 0)


class _Link:
    """One broker-to-Redis connection: two sockets and, per direction, the
    chunks still held back by a delay and the bytes not yet written."""

    def __init__(self, down, up):
        self.down, self.up = down, up
        self.queue = {down: collections.deque(), up: collections.deque()}
        self.out = {down: bytearray(), up: bytearray()}
        self.last_due = {down: 0.0, up: 0.0}

    def peer(self, s):
        """The socket that bytes read from s go out on."""
        return self.up if s is self.down else self.down

    def close(self, reset=False):
        """Close both sides; with reset, send RST instead of FIN."""
        for s in (self.down, self.up):
            try:
                if reset:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                 _LINGER_RST)
                s.close()
            except OSError:
                pass


class Proxy:
    """Relays one broker's Redis connections; mode is changed from another
    thread with set_mode() and applied by the relay's own loop."""

    def __init__(self, upstream_port, seed=0, name="proxy"):
        self.upstream_port = upstream_port
        self.name = name
        self.rng = random.Random(seed)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.mode, self.delay_s, self.loss = "pass", 0.0, 0.0
        self.links = {}          # socket -> _Link
        self.resets = 0
        # reset(): asked by another thread, done by the relay's own loop.
        self._reset_asked = 0
        self._reset_done = threading.Condition()
        self._reset_count = (0, 0)   # (resets done, links each dropped)
        self._wake_r, self._wake_w = socket.socketpair()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=name,
                                        daemon=True)
        self._thread.start()

    def set_mode(self, mode, delay_ms=0, loss=0.05):
        """Switch to pass, cut, delay (delay_ms per chunk each way) or
        lossy (each chunk resets its connection with probability loss)."""
        assert mode in ("pass", "cut", "delay", "lossy"), mode
        self.delay_s = delay_ms / 1000.0 if mode == "delay" else 0.0
        self.loss = loss if mode == "lossy" else 0.0
        self.mode = mode
        self._wake_w.send(b"x")

    def reset(self, timeout=2.0):
        """Drop every connection now, with RST, both ways at once (for a
        broker: its command and its subscriber connection), without
        refusing the reconnects that follow; the number dropped, or None
        if the relay did not get to it in time."""
        with self._reset_done:
            self._reset_asked += 1
            want = self._reset_asked
            self._wake_w.send(b"x")
            ok = self._reset_done.wait_for(
                lambda: self._reset_count[0] >= want, timeout)
            return self._reset_count[1] if ok else None

    def upstream_addrs(self):
        """The addresses ("127.0.0.1:port") Redis sees for the connections
        relayed now: what CLIENT KILL ADDR takes."""
        for _ in range(10):
            try:
                links = set(self.links.values())
                break
            except RuntimeError:     # the relay thread changed the dict
                time.sleep(0.001)
        else:
            return []
        out = []
        for link in links:
            try:
                out.append("%s:%d" % link.up.getsockname()[:2])
            except OSError:
                pass
        return out

    def stop(self):
        """End the relay thread and close every socket it owns."""
        self._stop = True
        self._wake_w.send(b"x")
        self._thread.join(5)
        for link in set(self.links.values()):
            link.close()
        for s in (self.listener, self._wake_r, self._wake_w):
            s.close()

    # The relay loop and its helpers; only the relay thread runs these.

    def _run(self):
        """Select over everything, move bytes, apply the current mode."""
        while not self._stop:
            if self.mode == "cut" and self.links:
                self._drop_all()
            if self._reset_count[0] < self._reset_asked:
                self._do_reset()
            rl = [self.listener, self._wake_r] + list(self.links)
            wl = [s for s, l in self.links.items() if l.out[s]]
            try:
                r, w, _ = select.select(rl, wl, [], self._timeout())
            except (OSError, ValueError):
                self._prune()
                continue
            for s in r:
                self._readable(s)
            self._release_due()
            for s in w:
                if s in self.links:
                    self._flush(s)

    def _timeout(self):
        """Sleep until the next held-back chunk is due (at most 0.2 s)."""
        due = [q[0][0] for l in set(self.links.values())
               for q in l.queue.values() if q]
        if not due:
            return 0.2
        return max(0.0, min(min(due) - time.monotonic(), 0.2))

    def _readable(self, s):
        """Dispatch a readable socket: new connection, wake-up, or data."""
        if s is self.listener:
            self._accept()
        elif s is self._wake_r:
            self._wake_r.recv(4096)
        elif s in self.links:
            self._relay(s)

    def _accept(self):
        """Take a new broker connection and open its Redis side (a cut
        refuses it: the broker sees the connection close at once)."""
        try:
            down, _ = self.listener.accept()
        except OSError:
            return
        if self.mode == "cut":
            down.close()
            return
        try:
            up = socket.create_connection(("127.0.0.1", self.upstream_port),
                                          timeout=1)
        except OSError:
            down.close()         # Redis is down: so is the proxy for now
            return
        for x in (down, up):
            x.setblocking(False)
            x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = _Link(down, up)
        self.links[down] = self.links[up] = link

    def _relay(self, s):
        """Read a chunk and queue it for the other side, late if delayed;
        a lossy link may be reset instead."""
        link = self.links[s]
        try:
            data = s.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(link)
            return
        if self.loss and self.rng.random() < self.loss:
            self.resets += 1
            self._drop(link, reset=True)
            return
        data = self._filter(link, s, data)
        if not data:
            return
        dst = link.peer(s)
        # Never let a later chunk overtake an earlier one.
        due = max(time.monotonic() + self.delay_s, link.last_due[dst])
        link.last_due[dst] = due
        link.queue[dst].append((due, data))

    def _filter(self, link, s, data):
        """What of the chunk read from s goes on (subclasses change it)."""
        return data

    def _release_due(self):
        """Move every chunk whose delay is over to its output buffer."""
        now = time.monotonic()
        for link in set(self.links.values()):
            for dst, q in link.queue.items():
                while q and q[0][0] <= now:
                    link.out[dst] += q.popleft()[1]
                if link.out[dst] and dst in self.links:
                    self._flush(dst)

    def _flush(self, s):
        """Write what we can of s's output without blocking."""
        link = self.links[s]
        try:
            n = s.send(link.out[s])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(link)
            return
        del link.out[s][:n]

    def _drop(self, link, reset=False):
        """Forget a link and close both its sockets."""
        for s in (link.down, link.up):
            self.links.pop(s, None)
        link.close(reset)

    def _drop_all(self):
        """A cut: every connection goes at once."""
        for link in set(self.links.values()):
            self._drop(link, reset=True)

    def _do_reset(self):
        """A reset asked by reset(): drop all, say how many went."""
        n = len(set(self.links.values()))
        self._drop_all()
        with self._reset_done:
            self._reset_count = (self._reset_asked, n)
            self._reset_done.notify_all()

    def _prune(self):
        """Forget links whose sockets were closed under us."""
        for s, link in list(self.links.items()):
            if s.fileno() < 0:
                self._drop(link)


class ProxyGroup:
    """One broker's proxies to every Redis node of the Sentinel topology,
    acting as one: a link fault of the broker is a fault of its path to
    whichever node is master."""

    def __init__(self, proxies):
        self.members = proxies
        self.port = proxies[0].port

    def set_mode(self, mode, **kw):
        """Proxy.set_mode on every member."""
        for p in self.members:
            p.set_mode(mode, **kw)

    def reset(self, timeout=2.0):
        """Proxy.reset on every member; the connections dropped."""
        got = [p.reset(timeout) for p in self.members]
        return None if None in got else sum(got)

    def upstream_addrs(self):
        """Every member's upstream addresses."""
        return [a for p in self.members for a in p.upstream_addrs()]

    def stop(self):
        """Stop every member."""
        for p in self.members:
            p.stop()


class ReplicationLink(Proxy):
    """The path a replica takes to its master (and Sentinel to a node, as
    the node announces this port). Frozen, it drops what the master sends
    on replication connections (those that sent SYNC or PSYNC), as a link
    that loses the stream does: the replica misses writes it never learns
    of, while Sentinel's own connections still pass."""

    def __init__(self, upstream_port, seed=0, name="replication-link"):
        self.frozen = False
        self.dropped = 0
        super().__init__(upstream_port, seed, name)

    def _filter(self, link, s, data):
        """Mark a replication connection; drop its master's bytes while
        frozen."""
        if s is link.down and (b"PSYNC" in data.upper() or
                               b"\r\nSYNC\r\n" in data.upper()):
            link.replication = True
        if self.frozen and s is link.up and getattr(link, "replication",
                                                    False):
            self.dropped += len(data)
            return b""
        return data


class SentinelRelay(Proxy):
    """One broker's path to one Sentinel, which tells it where the master
    is: every port the Sentinel names (in its replies and its
    +switch-master messages) that is in ports is replaced by the port it
    maps to, the broker's own proxy to that node. Bulk strings are
    rewritten whole, their lengths with them."""

    def __init__(self, upstream_port, ports, seed=0, name="sentinel-relay"):
        self.ports = {str(k).encode(): str(v).encode()
                      for k, v in ports.items()}
        super().__init__(upstream_port, seed, name)

    def _filter(self, link, s, data):
        """Rewrite what the Sentinel sends, whole RESP lines at a time."""
        if s is not link.up:
            return data
        buf = getattr(link, "pending", b"") + data
        out, link.pending = self._rewrite(buf)
        return out

    def _rewrite(self, buf):
        """(rewritten complete lines and bulk strings, the rest)."""
        out, i = [], 0
        while True:
            j = buf.find(b"\r\n", i)
            if j < 0:
                break
            line = buf[i:j]
            if line[:1] == b"$" and line[1:].isdigit():
                end = j + 2 + int(line[1:])
                if len(buf) < end + 2:
                    break
                body = b" ".join(self.ports.get(w, w)
                                 for w in buf[j + 2:end].split(b" "))
                out.append(b"$%d\r\n%s\r\n" % (len(body), body))
                i = end + 2
            else:
                out.append(line + b"\r\n")
                i = j + 2
        return b"".join(out), buf[i:]

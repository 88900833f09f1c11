"""The fenced resource: a store the workers write to with their fence. It
keeps the highest fence it accepted per name and refuses a lower one, as
docs/protocol.md §5 asks a resource to do; it logs every write."""

import selectors
import socket
import threading
import time


class FencedResource:
    """A TCP line server: `W <name> <fence> <client> [<token>]` answers
    `OK` or `STALE <highest>`. Equal fences are accepted on purpose (one
    holder writes twice with its fence, and a token acquired again gets its
    fence again); the log keeps the token, so the stale_writes checker
    counts an equal fence written under another token (two grants given one
    fence) as a violation."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.highest = {}
        self.writes = []    # dicts: name, fence, client, token, t, accepted
        self.lock = threading.Lock()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.listener, selectors.EVENT_READ)
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="resource",
                                        daemon=True)
        self._thread.start()

    def write(self, name, fence, client, token=None):
        """Apply one fenced write; the comparison is the whole point."""
        now = time.monotonic()
        with self.lock:
            top = self.highest.get(name, 0)
            ok = fence >= top
            if ok:
                self.highest[name] = fence
            self.writes.append({"name": name, "fence": fence,
                                "client": client, "token": token, "t": now,
                                "accepted": ok})
        return "OK" if ok else "STALE %d" % top

    def snapshot(self):
        """A copy of the write log, safe to read while writes go on."""
        with self.lock:
            return list(self.writes)

    def stop(self):
        """End the server thread and close its sockets."""
        self._stop = True
        self._thread.join(5)
        for key in list(self._sel.get_map().values()):
            key.fileobj.close()
        self._sel.close()

    def _run(self):
        """Serve until stopped."""
        while not self._stop:
            for key, _ in self._sel.select(0.2):
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    self._serve(key.fileobj, key.data)

    def _accept(self):
        """Register a new client with an empty input buffer."""
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        conn.setblocking(True)
        conn.settimeout(5)
        self._sel.register(conn, selectors.EVENT_READ, bytearray())

    def _serve(self, conn, buf):
        """Answer every complete line the client sent."""
        try:
            data = conn.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._sel.unregister(conn)
            conn.close()
            return
        buf += data
        out = []
        while b"\n" in buf:
            line, _, rest = bytes(buf).partition(b"\n")
            buf[:] = rest
            out.append(self._answer(line.decode(errors="replace")))
        try:
            conn.sendall(("".join(x + "\n" for x in out)).encode())
        except OSError:
            self._sel.unregister(conn)
            conn.close()

    def _answer(self, line):
        """Parse one request line."""
        words = line.split()
        if len(words) not in (4, 5) or words[0] != "W" or \
                not words[2].isdigit():
            return "ERR usage: W <name> <fence> <client> [<token>]"
        return self.write(words[1], int(words[2]), words[3],
                          words[4] if len(words) == 5 else None)


class ResourceClient:
    """A worker's connection to the resource."""

    def __init__(self, port):
        self.port = port
        self.sock = None

    def write(self, name, fence, client, token):
        """Send one fenced write; True if accepted, False if refused."""
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port),
                                                 timeout=10)
            self.f = self.sock.makefile("rb")
        self.sock.sendall(b"W %s %d %s %s\n" % (
            name.encode(), fence, client.encode(), token.encode()))
        reply = self.f.readline().decode().strip()
        if not reply:
            self.close()
            raise ConnectionError("resource closed")
        return reply == "OK"

    def close(self):
        """Drop the connection (a new one is made on the next write)."""
        if self.sock is not None:
            self.f.close()
            self.sock.close()
            self.sock = None

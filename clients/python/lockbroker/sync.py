"""The blocking client: the asyncio client run on a thread of its own, so
both share one implementation of the pool, the waits and their CANCEL.
Any thread may use a Client; each call blocks only its caller."""

import asyncio
import concurrent.futures
import threading

from . import aio
from .errors import Cancelled, Lost


class Lease:
    """A granted lock: name, fence, token, ttl (ms), kind, mode, validity
    (seconds left, see aio.Lease), lost (a threading.Event set on EVENT LOST
    or a broken connection) and lost_reason."""

    def __init__(self, client, core):
        self._client, self._core = client, core
        self.name, self.fence, self.token = core.name, core.fence, core.token
        self.kind, self.mode = core.kind, core.mode
        self.lost = threading.Event()
        core._watchers.append(lambda reason: self.lost.set())
        if core.lost_reason is not None:  # lost before we watched
            self.lost.set()

    def __repr__(self):
        return repr(self._core)

    ttl = property(lambda self: self._core.ttl)
    validity = property(lambda self: self._core.validity)
    lost_reason = property(lambda self: self._core.lost_reason)

    def release(self):
        self._client._run(self._core.release())

    def extend(self, ttl):
        return self._client._run(self._core.extend(ttl))

    def validate(self):
        return self._client._run(self._core.validate())


class LockRequest:
    """What Client.lock() and fill() return: `with` it, or call acquire().
    cancel() (from any thread) ends a wait in progress: acquire() raises
    Cancelled, and the broker is sent CANCEL, so the connection and its
    other locks stay. An exception in the waiting thread (KeyboardInterrupt)
    cancels the wait the same way."""

    def __init__(self, client, method, args):
        self._client, self._method, self._args = client, method, args
        self._fut = None
        self._cancelled = False
        self._mutex = threading.Lock()
        self.lease = None

    def acquire(self):
        with self._mutex:
            if self._cancelled:
                raise Cancelled("the wait was cancelled", "CANCELLED")
            self._fut = asyncio.run_coroutine_threadsafe(
                self._method(*self._args), self._client._loop)
        core = self._client._wait(self._fut)
        self.lease = None if core is None else Lease(self._client, core)
        return self.lease

    def cancel(self):
        with self._mutex:
            self._cancelled = True
            if self._fut is not None:
                self._fut.cancel()

    def __enter__(self):
        return self.acquire()

    def __exit__(self, et, e, tb):
        if self.lease is not None:
            self._client._run(aio._end(self.lease._core, et))


class Client:
    """The blocking client; arguments as aio.AsyncClient's. close() (or
    `with Client() as c:`) QUITs its connections and stops its thread."""

    def __init__(self, addr=None, secret=None, timeout=10.0,
                 max_connections=256, ca=None, cert=None, key=None,
                 ssl_context=None):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name="lockbroker", daemon=True)
        self._thread.start()

        async def make():
            return aio.AsyncClient(addr, secret, timeout, max_connections,
                                   ca, cert, key, ssl_context)
        try:
            self._aio = self._run(make())
        except BaseException:
            self._stop()
            raise

    def _wait(self, fut):
        try:
            return fut.result()
        except concurrent.futures.CancelledError:
            raise Cancelled("the wait was cancelled", "CANCELLED") from None
        except BaseException:
            fut.cancel()  # KeyboardInterrupt here: cancel it in the loop too
            raise

    def _run(self, coro):
        return self._wait(asyncio.run_coroutine_threadsafe(coro, self._loop))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def lock(self, name, wait=5.0, ttl=None, shared=False, limit=None,
             keep=False, token=None):
        """`with client.lock(...) as lease:`; arguments as AsyncClient.lock.
        Busy when not granted in time."""
        mode = "shared" if shared else "limit=%d" % limit if limit else \
            "exclusive"
        return LockRequest(self, self._aio._acquire, (
            "ACQUIRE", name, wait, ttl, keep, token, mode))

    def fill(self, name, wait=5.0, ttl=None, token=None):
        """Single-flight: the lease (do the work), or None (DONE: done)."""
        return LockRequest(self, self._aio._acquire, (
            "FILL", name, wait, ttl, False, token, "fill"))

    def acquire(self, name, **opts):
        """lock(name, **opts).acquire(): a lease to release() yourself."""
        return self.lock(name, **opts).acquire()

    def run_locked(self, name, fn, *args, **lockopts):
        """fn(lease, *args) under the lock. A thread cannot be stopped from
        outside, so fn should check lease.lost (or lease.validity) before
        each step that needs the lock; if the lease was lost meanwhile,
        Lost(reason) is raised after fn returns."""
        with self.lock(name, **lockopts) as lease:
            return fn(lease, *args)

    def release(self, name, token):
        self._run(self._aio.release(name, token))

    def extend(self, name, ttl, token):
        return self._run(self._aio.extend(name, ttl, token))

    def validate(self, name, fence, token=None):
        return self._run(self._aio.validate(name, fence, token))

    def status(self, name):
        return self._run(self._aio.status(name))

    def who(self, name):
        return self._run(self._aio.who(name))

    def revoke(self, name):
        return self._run(self._aio.revoke(name))

    def locks(self):
        return self._run(self._aio.locks())

    def info(self):
        return self._run(self._aio.info())

    def ping(self):
        self._run(self._aio.ping())

    def close(self):
        if self._loop.is_closed():
            return
        try:
            self._run(self._aio.close())
        finally:
            self._stop()

    def _stop(self):
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


__all__ = ["Client", "Lease", "LockRequest", "Lost"]

"""The library's own promises beyond the shared scenarios: the sync API's
cancel, run_locked, the with-block's Lost, addresses, the pool's limits."""

import asyncio
import threading
import time

import pytest

import lockbroker
from test_scenarios import aclient, bg, command, sclient, uname, until


def test_parse_addr(monkeypatch):
    p = lockbroker.parse_addr
    assert p("db1:7000") == ("tcp", ("db1", 7000))
    assert p("[::1]:7001") == ("tcp", ("::1", 7001))
    assert p("db1") == ("tcp", ("db1", 7878))
    assert p("/run/lockbroker.sock") == ("unix", "/run/lockbroker.sock")
    monkeypatch.setenv("LOCKBROKER_ADDR", "envhost:1")
    assert p() == ("tcp", ("envhost", 1))
    monkeypatch.delenv("LOCKBROKER_ADDR")
    assert p() == ("tcp", ("127.0.0.1", 7878))
    for bad in ("host:0", "host:x", "a:b:c"):
        with pytest.raises(ValueError):
            p(bad)


def test_bad_words_never_reach_the_wire():
    c = lockbroker.AsyncClient("127.0.0.1:1")
    for name in ("two words", "line\nbreak", ""):
        with pytest.raises(ValueError):
            asyncio.run(c.lock(name).__aenter__())


def test_unix_socket_and_environment(env, monkeypatch):
    monkeypatch.setenv("LOCKBROKER_ADDR", env.unix)
    monkeypatch.setenv("LOCKBROKER_SECRET", env.secret)
    with lockbroker.Client() as c:
        with c.lock(uname("u"), wait=1) as lease:
            assert lease.kind == "session" and lease.validity == float("inf")
            assert lease.validate()


def test_sync_cancel_keeps_the_other_locks(env):
    n, m = uname("n"), uname("m")
    with sclient(env) as a, sclient(env) as b:
        a.acquire(n)
        lm = b.acquire(m)
        req = b.lock(n, wait=30)
        out = {}

        def wait():
            try:
                req.acquire()
            except BaseException as e:
                out["error"], out["at"] = e, time.monotonic()
        t = threading.Thread(target=wait)
        t.start()
        end = time.monotonic() + 5
        while int(a.info()["waiters"]) < 1:
            assert time.monotonic() < end
            time.sleep(0.01)
        cancelled = time.monotonic()
        req.cancel()
        t.join(5)
        assert isinstance(out["error"], lockbroker.Cancelled)
        assert out["at"] - cancelled < 0.5
        assert not lm.lost.is_set() and lm.validate()
        lm.release()
        assert b.status(m) is None


def test_sync_run_locked_raises_lost(env):
    n = uname("n")
    with sclient(env) as c:
        def work(lease):
            env("revoke", n)
            assert lease.lost.wait(5)
            return "done"
        with pytest.raises(lockbroker.Lost) as e:
            c.run_locked(n, work, wait=1)
        assert e.value.reason == "revoked"
        assert c.run_locked(uname("n"), lambda lease, x: x + 1, 41) == 42


@pytest.mark.asyncio
async def test_run_locked_cancels_the_work_when_lost(env):
    n = uname("n")
    async with aclient(env) as c:
        stopped = asyncio.Event()

        async def work(lease):
            try:
                await asyncio.sleep(30)
            finally:
                stopped.set()
        run = asyncio.ensure_future(c.run_locked(n, work, wait=1))
        await until(lambda: c._conns and c._conns[0].leases, 5)
        await command(env, "revoke", n)
        with pytest.raises(lockbroker.Lost) as e:
            await asyncio.wait_for(run, 5)
        assert e.value.reason == "revoked" and stopped.is_set()
        assert await c.run_locked(n, _double, 21) == 42


async def _double(lease, x):
    assert lease.fence > 0
    return 2 * x


@pytest.mark.asyncio
async def test_with_block_says_lost(env):
    n = uname("n")
    async with aclient(env) as c:
        with pytest.raises(lockbroker.Lost):
            async with c.lock(n) as lease:
                await command(env, "revoke", n)
                await asyncio.wait_for(lease.lost.wait(), 5)


@pytest.mark.asyncio
async def test_more_locks_than_one_connection_holds(env):
    names = [uname("p%d" % i) for i in range(200)]
    async with aclient(env, max_connections=4) as c:
        leases = await asyncio.gather(*(c.lock(n, wait=5) for n in names))
        assert len(c._conns) == 4
        assert all(len(x.leases) <= 64 for x in c._conns)
        held = await c.locks()
        assert sorted(l["name"] for l in held) == sorted(names)
        await asyncio.gather(*(l.release() for l in leases))


@pytest.mark.asyncio
async def test_fixed_lease_validity_and_expiry(env):
    async with aclient(env) as c:
        lease = await c.lock(uname("t"), ttl=0.3)
        assert 0.2 < lease.validity <= 0.3
        await asyncio.wait_for(lease.lost.wait(), 3)
        assert lease.lost_reason == "expired" and lease.validity == 0


@pytest.mark.asyncio
async def test_release_while_its_connection_waits(env):
    n, m = uname("n"), uname("m")
    async with aclient(env) as a, aclient(env) as b:
        await a.lock(n)
        lm = await b.lock(m)
        wait = bg(b.lock(n, wait=30))
        await until(lambda: lm._conn.waiting, 1)
        # RELEASE goes on another connection, by token; the echo on the
        # holding connection is not a loss.
        await asyncio.wait_for(lm.release(), 2)
        assert lm.lost_reason is None and await b.status(m) is None
        wait.cancel()
        with pytest.raises(asyncio.CancelledError):
            await wait

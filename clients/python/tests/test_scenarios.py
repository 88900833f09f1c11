"""clients/scenarios.json, each id implemented once (test_every_scenario_*
fails otherwise), against the real broker and Redis of clients/testenv.py.
Names carry a random suffix, so tests never see each other's locks; a test
that disturbs Redis or the broker waits until grants work again."""

import asyncio
import json
import secrets
import threading
import time

import pytest

import lockbroker
from conftest import SCENARIOS

IMPLEMENTED = {}


def scenario(sid):
    def mark(fn):
        assert sid not in IMPLEMENTED, "two tests of " + sid
        IMPLEMENTED[sid] = fn
        return fn
    return mark


def test_every_scenario_has_exactly_one_test():
    with open(SCENARIOS) as f:
        ids = [s["id"] for s in json.load(f)["scenarios"]]
    assert len(ids) == len(set(ids)), "an id twice in scenarios.json"
    assert sorted(set(ids) - set(IMPLEMENTED)) == [], "scenarios without a test"
    assert sorted(set(IMPLEMENTED) - set(ids)) == [], "tests of unknown ids"


def uname(base):
    return "%s-%s" % (base, secrets.token_hex(4))


def aclient(env, **kw):
    kw.setdefault("secret", env.secret)
    return lockbroker.AsyncClient(env.addr, **kw)


def sclient(env, **kw):
    kw.setdefault("secret", env.secret)
    return lockbroker.Client(env.addr, **kw)


async def until(pred, timeout, step=0.02):
    """pred()'s first true value within timeout seconds (pred may be async
    and may raise Unavailable meanwhile)."""
    end = time.monotonic() + timeout
    while True:
        try:
            v = pred()
            if asyncio.iscoroutine(v):
                v = await v
            if v:
                return v
        except lockbroker.Unavailable:
            pass
        assert time.monotonic() < end, "timed out waiting for %r" % pred
        await asyncio.sleep(step)


def bg(request):
    """A lock() or fill() request run as a task of its own."""
    async def run():
        return await request
    return asyncio.ensure_future(run())


async def command(env, *words):
    """An env command without blocking the loop (events keep coming)."""
    return await asyncio.get_running_loop().run_in_executor(
        None, lambda: env(*words))


async def grants_again(env, timeout=20):
    """Until the broker grants (after Redis lost its data or came back)."""
    async with aclient(env) as c:
        async def probe():
            lease = await c.lock(uname("ready"), wait=0)
            await lease.release()
            return True
        await until(probe, timeout, 0.1)


async def waiters(c, n, timeout=5):
    """Until the broker has at least n waiters queued."""
    await until(lambda: _more(c, n), timeout)


async def _more(c, n):
    return int((await c.info())["waiters"]) >= n


@scenario("busy_then_granted")
def test_busy_then_granted(env):
    n = uname("n")
    with sclient(env) as a, sclient(env) as b:
        la = a.acquire(n)
        got = {}

        def wait_for_it():
            lease = b.acquire(n, wait=5)
            got["at"], got["lease"] = time.monotonic(), lease
        t = threading.Thread(target=wait_for_it)
        t.start()
        end = time.monotonic() + 5
        while int(a.info()["waiters"]) < 1:
            assert time.monotonic() < end
            time.sleep(0.01)
        assert "lease" not in got
        released = time.monotonic()
        la.release()
        t.join(10)
        assert got["at"] >= released
        assert got["lease"].fence > la.fence
        got["lease"].release()


@scenario("try_once")
@pytest.mark.asyncio
async def test_try_once(env):
    n = uname("n")
    async with aclient(env) as a, aclient(env) as b:
        la = await a.lock(n)
        t = time.monotonic()
        with pytest.raises(lockbroker.Busy):
            await b.lock(n, wait=0)
        assert time.monotonic() - t < 1
        assert not la.lost.is_set() and await la.validate()


@scenario("wait_times_out")
@pytest.mark.asyncio
async def test_wait_times_out(env):
    n = uname("n")
    async with aclient(env) as a, aclient(env) as b:
        await a.lock(n)
        t = time.monotonic()
        with pytest.raises(lockbroker.Busy):
            await b.lock(n, wait=0.3)
        assert 0.25 <= time.monotonic() - t < 2


@scenario("cancel_wait_keeps_other_locks")
@pytest.mark.asyncio
async def test_cancel_wait_keeps_other_locks(env):
    n, m, o = uname("n"), uname("m"), uname("o")
    async with aclient(env) as a, aclient(env) as b:
        la = await a.lock(n)
        lm = await b.lock(m)
        wait = bg(b.lock(n, wait=30))
        await asyncio.sleep(0.2)
        # The wait went on the connection that holds m: CANCEL, not a
        # close, is what keeps m.
        assert len(b._conns) == 1 and lm._conn.waiting
        t = time.monotonic()
        wait.cancel()
        with pytest.raises(asyncio.CancelledError):
            await wait
        assert time.monotonic() - t < 0.5
        assert not lm.lost.is_set()
        # LOCKS asks each connection not waiting: the CANCELLED and the
        # CANCEL's OK are a round trip away.
        await until(lambda: not lm._conn.waiting, 1)
        assert m in [l["name"] for l in await b.locks()]
        lo = await b.lock(o, wait=5)
        await la.release()
        for _ in range(5):
            assert (await command(env, "holders", n))["holders"] == 0
            await asyncio.sleep(0.05)
        assert not lm.lost.is_set() and await lm.validate()
        await lo.release()
        await lm.release()


@scenario("revoke_reaches_lost")
@pytest.mark.asyncio
async def test_revoke_reaches_lost(env):
    n = uname("n")
    async with aclient(env) as a:
        lease = await a.lock(n)
        assert (await command(env, "revoke", n))["holders"] == 1
        answered = time.monotonic()
        await asyncio.wait_for(lease.lost.wait(), 2)
        assert time.monotonic() - answered <= 0.1
        assert lease.lost_reason == "revoked"
        with pytest.raises(lockbroker.NotHeld):
            await lease.release()
        with pytest.raises(lockbroker.NotHeld):
            await a.release(n, lease.token)


@scenario("flushall_keeps_or_tells")
@pytest.mark.asyncio
async def test_flushall_keeps_or_tells(env):
    n, m = uname("n"), uname("m")
    try:
        async with aclient(env) as a, aclient(env) as b:
            lease = await a.lock(n)
            await command(env, "flushall")
            try:
                lm = await b.lock(m, wait=0)
                await lm.release()
            except lockbroker.Unavailable as e:
                assert "grace" in e.text or "checked" in e.text, e
            end = time.monotonic() + 2
            while time.monotonic() < end:
                assert not lease.lost.is_set(), lease.lost_reason
                await asyncio.sleep(0.05)
            await until(lease.validate, 10, 0.1)
    finally:
        await grants_again(env)


@scenario("redis_stopped")
@pytest.mark.asyncio
async def test_redis_stopped(env):
    n, m = uname("n"), uname("m")
    down = False
    try:
        async with aclient(env) as a:
            lease = await a.lock(n)
            await command(env, "redis-stop")
            down, stopped = True, time.monotonic()
            with pytest.raises(lockbroker.Unavailable):
                await a.lock(m, wait=0)
            await asyncio.wait_for(lease.lost.wait(), 8)
            assert time.monotonic() - stopped <= 8
            assert lease.lost_reason == "unavailable"
            await command(env, "redis-start")
            down = False

            async def again():
                return await a.lock(m, wait=0)
            await (await until(again, 15, 0.1)).release()
    finally:
        if down:
            await command(env, "redis-start")
        await grants_again(env)


@scenario("broker_paused_client_timeout")
@pytest.mark.asyncio
async def test_broker_paused_client_timeout(env):
    n = uname("n")
    async with aclient(env, timeout=1.0) as a:
        await a.ping()  # a connection made before the pause
        await command(env, "broker-pause")
        try:
            t = time.monotonic()
            with pytest.raises((lockbroker.Timeout, lockbroker.Unavailable)):
                await a.lock(n, wait=0)
            assert time.monotonic() - t < 3
        finally:
            await command(env, "broker-resume")
        resumed = time.monotonic()
        # Another name: the timed-out request is still in the broker's
        # socket and may be granted n on resume, until its closed
        # connection releases it (a Busy meanwhile would be right).
        m = uname("m")

        async def again():
            return await a.lock(m, wait=0)
        await (await until(again, 5)).release()
        assert time.monotonic() - resumed < 5


@scenario("broker_restarted")
@pytest.mark.asyncio
async def test_broker_restarted(env):
    n, m = uname("n"), uname("m")
    try:
        async with aclient(env) as a:
            lease = await a.lock(n)
            first = lease._conn
            await command(env, "broker-restart")
            await asyncio.wait_for(lease.lost.wait(), 2)
            assert lease.lost_reason == "disconnected"

            async def again():
                return await a.lock(m, wait=0)
            lm = await until(again, 15, 0.05)
            assert lm._conn is not first
            await lm.release()
    finally:
        await grants_again(env)


@scenario("same_token_retry")
@pytest.mark.asyncio
async def test_same_token_retry(env):
    n, tok = uname("n"), uname("T")
    try:
        async with aclient(env) as a:
            first = await a.lock(n, ttl=30, keep=True, token=tok)
            await command(env, "broker-restart")

            async def again():
                return await a.lock(n, ttl=30, keep=True, token=tok, wait=0)
            second = await until(again, 15, 0.05)
            assert second.fence == first.fence and second.token == tok
            await a.release(n, tok)
            assert await a.status(n) is None
    finally:
        await grants_again(env)


@scenario("shared_and_limit")
@pytest.mark.asyncio
async def test_shared_and_limit(env):
    s, l = uname("s"), uname("l")
    cs = [aclient(env) for _ in range(6)]
    try:
        A, B, C, D, E, F = cs
        ra = await A.lock(s, shared=True)
        rb = await B.lock(s, shared=True)
        assert ra.mode == rb.mode == "shared" and ra.fence != rb.fence
        with pytest.raises(lockbroker.Busy):
            await C.lock(s, wait=0)
        await D.lock(l, limit=2)
        await E.lock(l, limit=2)
        with pytest.raises(lockbroker.Busy):
            await F.lock(l, limit=2, wait=0)
        assert (await A.status(l))["holders"] == 2
    finally:
        for c in cs:
            await c.close()


@scenario("fill")
@pytest.mark.asyncio
async def test_fill(env):
    f = uname("f")
    async with aclient(env) as a, aclient(env) as b:
        leader = await a.fill(f)
        assert leader is not None
        follower = bg(b.fill(f, wait=5))
        await waiters(a, 1)
        await leader.release()
        assert await asyncio.wait_for(follower, 5) is None


@scenario("validate_who_extend")
@pytest.mark.asyncio
async def test_validate_who_extend(env):
    n = uname("n")
    async with aclient(env) as a:
        lease = await a.lock(n, ttl=5)
        assert 4 < lease.validity <= 5
        assert await a.validate(n, lease.fence)
        assert await lease.validate()
        holders = await a.who(n)
        assert [h["fence"] for h in holders] == [lease.fence]
        assert await lease.extend(20) == 20.0
        assert 19 < lease.validity <= 20
        assert not await a.validate(n, lease.fence + 1)
        await lease.release()


@scenario("auth_refused")
@pytest.mark.asyncio
async def test_auth_refused(env):
    async with aclient(env, secret="wrong-secret") as a:
        with pytest.raises(lockbroker.AuthError):
            await a.lock(uname("n"))
    async with lockbroker.AsyncClient(env.addr, secret=None) as a:
        a.secret = None  # no $LOCKBROKER_SECRET either: NOAUTH
        with pytest.raises(lockbroker.AuthError):
            await a.lock(uname("n"))


@scenario("hostile_server")
@pytest.mark.asyncio
async def test_hostile_server(env):
    for mode, want in (("garbage", lockbroker.ProtocolError),
                       ("long", lockbroker.ProtocolError),
                       ("eof", lockbroker.ProtocolError),
                       ("silent", lockbroker.Timeout)):
        addr = (await command(env, "hostile", mode))["addr"]
        async with lockbroker.AsyncClient(addr, timeout=1.0) as c:
            c.secret = None  # the fake wants no AUTH: the ACQUIRE is first
            t = time.monotonic()
            with pytest.raises(want):
                await c.lock(uname("n"), wait=0)
            assert time.monotonic() - t < 3, mode
            if mode == "long":  # bounded: the reader stopped at 64 KiB
                assert not c._conns


@scenario("many_at_once")
@pytest.mark.asyncio
async def test_many_at_once(env):
    held = [uname("h%d" % i) for i in range(1000)]
    busy = [uname("w%d" % i) for i in range(100)]
    async with aclient(env) as other, aclient(env) as me:
        theirs = await asyncio.gather(*(other.lock(n) for n in busy))
        mine = await asyncio.gather(*(me.lock(n, wait=30) for n in held))
        assert [l.name for l in mine] == held
        tasks = [bg(me.lock(n, wait=60))
                 for n in busy]
        await waiters(other, 100, 15)
        for t in tasks[:50]:
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
        assert not any(t.done() for t in tasks[50:])
        assert not any(l.lost.is_set() for l in mine)
        await until(lambda: _fewer(other, 51), 5)
        await asyncio.gather(*(l.release() for l in mine))
        assert not any(t.done() for t in tasks[50:])
        await asyncio.gather(*(l.release() for l in theirs))
        granted = await asyncio.wait_for(asyncio.gather(*tasks[50:]), 30)
        assert [l.name for l in granted] == busy[50:]
        for n in busy[:50]:
            assert await me.status(n) is None
        await asyncio.gather(*(l.release() for l in granted))


async def _fewer(c, n):
    return int((await c.info())["waiters"]) < n

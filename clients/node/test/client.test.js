'use strict';
// What the library promises beyond scenarios.json: addresses and secrets
// as docs/clients.md says, argument checks, the pool's routing, withLock,
// close, and the retry of an ACQUIRE whose connection broke.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert');
const crypto = require('node:crypto');
const lb = require('..');
const { envAddr } = require('../lib/client');
const { TestEnv, waitFor } = require('../harness');

const uniq = (what) => `${what}-${crypto.randomBytes(4).toString('hex')}`;

describe('without a broker', () => {
  it('parses the addresses of docs/clients.md', () => {
    assert.deepStrictEqual(lb.parseAddr('db1:7000'), { host: 'db1', port: 7000 });
    assert.deepStrictEqual(lb.parseAddr('db1'), { host: 'db1', port: 7878 });
    assert.deepStrictEqual(lb.parseAddr('[::1]:7001'), { host: '::1', port: 7001 });
    assert.deepStrictEqual(lb.parseAddr('/run/lockbroker.sock'), { path: '/run/lockbroker.sock' });
    for (const bad of ['', 'h:0', 'h:99999', 'h:x', '[::1', 'a:b:c']) assert.throws(() => lb.parseAddr(bad), TypeError, bad);
  });

  it('reads LOCKBROKER_ADDR, and refuses the old variables', () => {
    assert.strictEqual(envAddr({}), '127.0.0.1:7878');
    assert.strictEqual(envAddr({ LOCKBROKER_ADDR: '/s', LOCKBROKER_HOST: 'h' }), '/s');
    assert.throws(() => envAddr({ LOCKBROKER_PORT: '1' }), /LOCKBROKER_ADDR/);
  });

  it('refuses bad arguments before sending anything', async () => {
    const c = new lb.Client({ addr: '127.0.0.1:1' });
    for (const [name, opts] of [['a b', {}], ['', {}], ['x'.repeat(201), {}], ['n', { token: 'bad/token' }],
      ['n', { keep: true }], ['n', { shared: true, limit: 2 }], ['n', { wait: -1 }], ['n', { ttl: 1.5 }]])
      await assert.rejects(c.acquire(name, opts), TypeError, JSON.stringify([name, opts]));
    await assert.rejects(c.fill('n', { shared: true }), TypeError);
    assert.throws(() => new lb.Client({ addr: '127.0.0.1:1', secret: 'two words' }), TypeError);
    assert.strictEqual(c.conns.length, 0);
    await c.close();
  });

  it('an already aborted signal rejects at once', async () => {
    const c = new lb.Client({ addr: '127.0.0.1:1' });
    const err = await c.acquire('n', { signal: AbortSignal.abort() }).catch((e) => e);
    assert.ok(err instanceof lb.CancelledError && err.name === 'AbortError' && err.code === 'ABORT_ERR');
    await c.close();
  });

  it('a broker that cannot be reached is unavailable', async () => {
    const c = new lb.Client({ addr: '127.0.0.1:1' });
    const err = await c.acquire('n', { wait: 0 }).catch((e) => e);
    assert.ok(err instanceof lb.UnavailableError && err.disconnected, err);
    await c.close();
  });
});

describe('against a broker', () => {
  let env;
  const opened = [];
  const client = (opts = {}) => {
    const c = new lb.Client({ addr: env.hello.addr, secret: env.hello.secret, ...opts });
    opened.push(c);
    return c;
  };

  before(async () => { env = await TestEnv.start(); });
  after(async () => {
    await Promise.all(opened.map((c) => c.close()));
    await env.stop();
  });

  it('speaks over the Unix socket, with the address and secret from the environment', async () => {
    const saved = { ...process.env };
    Object.assign(process.env, { LOCKBROKER_ADDR: env.hello.unix, LOCKBROKER_SECRET: env.hello.secret });
    try {
      const c = new lb.Client();
      opened.push(c);
      assert.deepStrictEqual(c.target, { path: env.hello.unix });
      await c.withLock(uniq('u'), async (lease) => assert.ok(lease.fence > 0));
    } finally {
      process.env = saved;
    }
  });

  it('releases a lease whose connection waits, with its token, and the wait goes on', async () => {
    const A = client();
    const B = client({ maxConnections: 2 });
    const [m, k, n, n2] = [uniq('m'), uniq('k'), uniq('n'), uniq('n2')];
    const a = await A.acquire(n);
    const a2 = await A.acquire(n2);
    const [lm, lk] = [await B.acquire(m), await B.acquire(k)]; // both on B's first connection
    const w = B.acquire(n, { wait: 10000 }); // waits on a second one
    await waitFor(() => B.conns.length === 2 && B.conns[1].blocked, 5000, 'the wait');
    await a.release();
    const ln = await w;
    // At the cap, the next wait goes on the first connection, behind m and k.
    const w2 = B.acquire(n2, { wait: 10000 });
    await waitFor(() => B.conns[0].blocked, 5000, 'the wait on the first connection');
    assert.strictEqual(await lm.release(), true); // RELEASE m TOKEN t, on the second
    assert.strictEqual(await A.status(m), null);
    assert.ok(lk.held && ln.held);
    await a2.release();
    const ln2 = await w2;
    assert.strictEqual(B.conns.length, 2);
    assert.ok((await Promise.all([lk, ln, ln2].map((l) => l.release()))).every(Boolean));
  });

  it('retries a wait whose connection broke, with the same token', async () => {
    const X = client();
    const B = client();
    const n = uniq('n');
    const x = await X.acquire(n);
    const token = uniq('t');
    const wait = B.acquire(n, { wait: 20000, token });
    const first = await waitFor(() => B.conns.find((c) => c.blocked), 5000, 'the wait');
    await env.cmd('broker-restart'); // ends x (a session lock) and B's connection
    const b = await wait;
    assert.strictEqual(b.token, token);
    assert.notStrictEqual(b._conn, first, 'granted on a new connection');
    assert.strictEqual(x.lostReason, 'disconnected');
    assert.strictEqual(await b.release(), true);
  });

  it('withLock releases after, passes errors through, and reports a loss', async () => {
    const C = client();
    const n = uniq('n');
    assert.strictEqual(await C.withLock(n, { ttl: 5000 }, async (l) => l.kind), 'fixed');
    await assert.rejects(C.withLock(n, async () => { throw new Error('boom'); }), /boom/);
    assert.strictEqual(await C.status(n), null);
    const err = await C.withLock(n, async (l) => {
      await env.cmd(`revoke ${n}`);
      await waitFor(() => l.signal.aborted, 2000, 'the loss');
      return 'done';
    }).catch((e) => e);
    assert.ok(err instanceof lb.LostError && err.reason === 'revoked', err);
  });

  it('counts validity from the grant, and a shorter extend at once', async () => {
    const C = client();
    const l = await C.acquire(uniq('n'), { ttl: 3000 });
    assert.ok(l.validity > 2500 && l.validity <= 2968, `validity ${l.validity}`);
    assert.strictEqual(await l.extend(500), 500);
    assert.ok(l.validity <= 495);
    await waitFor(() => l.signal.aborted, 3000, 'expiry');
    assert.strictEqual(l.lostReason, 'expired');
    await assert.rejects(l.extend(1000), lb.LostError);
    assert.strictEqual(await l.release(), false);
  });

  it('close() gives up its locks at once (QUIT)', async () => {
    const C = client();
    const D = client();
    const n = uniq('n');
    const l = await C.acquire(n);
    await C.close();
    assert.strictEqual(l.lostReason, 'closed');
    assert.strictEqual(await D.status(n), null);
    await assert.rejects(C.acquire(n), lb.UnavailableError);
  });

  it('gives the broker\'s other errors with their code, and NotHeldError', async () => {
    const C = client();
    const n = uniq('n');
    await assert.rejects(C.release(n, { token: 'nobody' }), lb.NotHeldError);
    await assert.rejects(C.revoke(n), (err) => err instanceof lb.AuthError && err.code === 'NOAUTH');
    const l = await C.acquire(n);
    await assert.rejects(l.extend(1000), (err) => err instanceof lb.LockError && err.code === 'ARGS');
    const A = client({ secret: env.hello.admin_secret });
    assert.strictEqual(await A.revoke(n), 1);
  });
});

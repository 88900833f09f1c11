'use strict';
// clients/scenarios.json against a real lockbrokerd and redis-server
// (clients/testenv.py). Each scenario id has exactly one implementation
// below; the first test fails if the file and this list disagree.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { performance } = require('node:perf_hooks');
const lb = require('..');
const { TestEnv, waitFor, ROOT } = require('../harness');

const FILE = JSON.parse(fs.readFileSync(path.join(ROOT, 'clients', 'scenarios.json'), 'utf8'));

let env;
let opened = [];

function client(opts = {}) {
  const c = new lb.Client({ addr: env.hello.addr, secret: env.hello.secret, ...opts });
  opened.push(c);
  return c;
}

function uniq(what) {
  return `${what}-${crypto.randomBytes(4).toString('hex')}`;
}

// The error a promise rejects with (it must reject).
async function failure(promise) {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new assert.AssertionError({ message: 'expected a rejection' });
}

// Resolves performance.now() at the lease's loss.
function lostAt(lease) {
  if (lease.signal.aborted) return Promise.resolve(performance.now());
  return new Promise((resolve) => lease.signal.addEventListener('abort', () => resolve(performance.now())));
}

function within(promise, ms, what) {
  let timer;
  const late = new Promise((resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} not within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

// The broker grants again (after a flush or a Redis restart: the grace
// period), seen by a try-once that succeeds.
async function ready(timeout = 30000) {
  const c = client();
  await waitFor(async () => {
    try {
      await (await c.acquire(uniq('ready'), { wait: 0 })).release();
      return true;
    } catch (err) {
      if (err instanceof lb.UnavailableError || err instanceof lb.TimeoutError) return false;
      throw err;
    }
  }, timeout, 'the broker to grant');
  await c.close();
}

// c has a wait in flight and the broker counts at least n waiters.
async function waiting(c, n = 1) {
  await waitFor(async () => c.conns.filter((k) => k.blocked).length >= n &&
    Number((await c.info()).waiters) >= n, 10000, `${n} waiters`);
}

const scenarios = {
  async busy_then_granted() {
    const A = client();
    const B = client();
    const n = uniq('n');
    const a = await A.acquire(n);
    let granted = false;
    const pb = B.acquire(n, { wait: 5000 }).then((l) => { granted = true; return l; });
    await waiting(B);
    assert.strictEqual(granted, false);
    await a.release();
    const b = await pb;
    assert.ok(b.fence > a.fence, 'B fence above A fence');
    assert.strictEqual(await b.release(), true);
  },

  async try_once() {
    const A = client();
    const B = client();
    const n = uniq('n');
    const a = await A.acquire(n);
    const t = performance.now();
    const err = await failure(B.acquire(n, { wait: 0 }));
    assert.ok(err instanceof lb.BusyError, err);
    assert.ok(performance.now() - t < 1000);
    assert.ok(a.held);
    assert.strictEqual(await A.validate(n, a.fence), true);
  },

  async wait_times_out() {
    const A = client();
    const B = client();
    const n = uniq('n');
    await A.acquire(n);
    const t = performance.now();
    const err = await failure(B.acquire(n, { wait: 300 }));
    const took = performance.now() - t;
    assert.ok(err instanceof lb.BusyError, err);
    assert.ok(took >= 250 && took < 2000, `took ${took} ms`);
  },

  async cancel_wait_keeps_other_locks() {
    const A = client();
    const B = client();
    const [n, m] = [uniq('n'), uniq('m')];
    const a = await A.acquire(n);
    const held = await B.acquire(m);
    const ac = new AbortController();
    const wait = failure(B.acquire(n, { wait: 30000, signal: ac.signal }));
    await waiting(B);
    await new Promise((r) => setTimeout(r, 200)); // the scenario's 200 ms
    const t = performance.now();
    ac.abort();
    const err = await wait;
    assert.ok(performance.now() - t < 500, 'the wait ended within 500 ms');
    assert.ok(err instanceof lb.CancelledError, err);
    assert.strictEqual(err.name, 'AbortError');
    assert.ok(held.held, 'm is still held');
    const locks = await B.locks();
    assert.ok(locks.some((l) => l.name === m && l.fence === held.fence), 'LOCKS lists m');
    const other = await B.acquire(uniq('o'), { wait: 1000 });
    assert.strictEqual(await other.release(), true);
    assert.strictEqual(await a.release(), true);
    // A hand-over would happen in the release itself; look twice to be sure.
    assert.strictEqual((await env.cmd(`holders ${n}`)).holders, 0);
    await new Promise((r) => setTimeout(r, 300));
    assert.strictEqual((await env.cmd(`holders ${n}`)).holders, 0);
    assert.ok(held.held);
  },

  async revoke_reaches_lost() {
    const A = client();
    const n = uniq('n');
    const a = await A.acquire(n);
    const lost = lostAt(a);
    assert.strictEqual((await env.cmd(`revoke ${n}`)).holders, 1);
    const answered = performance.now();
    const at = await within(lost, 2000, 'the loss');
    assert.ok(at - answered <= 100, `lost ${at - answered} ms after the revoke's answer`);
    assert.ok(a.signal.reason instanceof lb.LostError);
    assert.strictEqual(a.signal.reason.reason, 'revoked');
    assert.strictEqual(a.lostReason, 'revoked');
    assert.strictEqual(await a.release(), false, 'release of a lost lease is a no-op');
  },

  async flushall_keeps_or_tells() {
    const A = client();
    const B = client();
    const [n, m] = [uniq('n'), uniq('m')];
    const a = await A.acquire(n);
    await env.cmd('flushall');
    try {
      await (await B.acquire(m, { wait: 0 })).release();
    } catch (err) {
      assert.ok(err instanceof lb.UnavailableError, err);
    }
    // Not lost: that can only be seen by giving it the scenario's 2 s.
    await new Promise((r) => setTimeout(r, 2000));
    assert.ok(a.held, `lost: ${a.lostReason}`);
    await ready();
    assert.ok(a.held, `lost: ${a.lostReason}`);
    assert.strictEqual(await A.validate(n, a.fence, { token: a.token }), true);
  },

  async redis_stopped() {
    const A = client();
    const [n, m] = [uniq('n'), uniq('m')];
    const a = await A.acquire(n);
    const lost = lostAt(a);
    try {
      await env.cmd('redis-stop');
      const err = await failure(A.acquire(m, { wait: 0 }));
      assert.ok(err instanceof lb.UnavailableError, err);
      await within(lost, 8000, 'the loss');
      assert.strictEqual(a.lostReason, 'unavailable');
    } finally {
      await env.cmd('redis-start');
    }
    const t = performance.now();
    const again = await A.acquire(m, { wait: 15000 });
    assert.ok(performance.now() - t < 15000);
    await again.release();
  },

  async broker_paused_client_timeout() {
    const n = uniq('n');
    const C = client({ timeout: 1000 });
    let took;
    let err;
    try {
      await env.cmd('broker-pause');
      const t = performance.now();
      err = await within(failure(C.acquire(n)), 10000, 'the outcome');
      took = performance.now() - t;
    } finally {
      await env.cmd('broker-resume');
    }
    assert.ok(took < 3000, `took ${took} ms`);
    assert.ok(err instanceof lb.TimeoutError || err instanceof lb.UnavailableError, err);
    const s = performance.now();
    const l = await waitFor(() => C.acquire(uniq('n'), { wait: 1000 }).catch(() => null), 5000, 'a grant');
    assert.ok(performance.now() - s < 5000);
    await l.release();
  },

  async broker_restarted() {
    const A = client();
    const [n, m] = [uniq('n'), uniq('m')];
    const a = await A.acquire(n);
    const oldConns = new Set(A.conns);
    const lost = lostAt(a);
    await env.cmd('broker-restart');
    await within(lost, 2000, 'the loss');
    assert.strictEqual(a.lostReason, 'disconnected');
    const b = await A.acquire(m, { wait: 10000 });
    assert.ok(!oldConns.has(b._conn), 'on a new connection');
    await b.release();
  },

  async same_token_retry() {
    const A = client();
    const n = uniq('n');
    const T = uniq('token');
    const opts = { ttl: 30000, keep: true, token: T };
    const a = await A.acquire(n, opts);
    await env.cmd('broker-restart');
    const b = await A.acquire(n, { ...opts, wait: 10000 });
    assert.strictEqual(b.fence, a.fence, 'the same grant');
    assert.strictEqual(b.token, T);
    assert.strictEqual(await b.release(), true);
    assert.strictEqual(await A.status(n), null);
  },

  async shared_and_limit() {
    const [A, B, C, D, E, F] = [1, 2, 3, 4, 5, 6].map(() => client());
    const [s, l] = [uniq('s'), uniq('l')];
    const a = await A.acquire(s, { shared: true });
    const b = await B.acquire(s, { shared: true });
    assert.strictEqual(a.mode, 'shared');
    assert.ok(b.held);
    assert.ok((await failure(C.acquire(s, { wait: 0 }))) instanceof lb.BusyError);
    const d = await D.acquire(l, { limit: 2 });
    const e = await E.acquire(l, { limit: 2 });
    assert.ok(d.held && e.held);
    assert.ok((await failure(F.acquire(l, { limit: 2, wait: 0 }))) instanceof lb.BusyError);
    const st = await A.status(l);
    assert.deepStrictEqual([st.mode, st.limit, st.holders], ['limit', 2, 2]);
  },

  async fill() {
    const A = client();
    const B = client();
    const f = uniq('f');
    const leader = await A.fill(f);
    assert.ok(leader instanceof lb.Lease);
    assert.strictEqual(leader.mode, 'fill');
    const follower = B.fill(f, { wait: 5000 });
    await waiting(B);
    await leader.release();
    assert.strictEqual(await follower, null, 'DONE, not a grant');
  },

  async validate_who_extend() {
    const A = client();
    const n = uniq('n');
    const a = await A.acquire(n, { ttl: 5000 });
    assert.strictEqual(await A.validate(n, a.fence), true);
    const who = await A.who(n);
    assert.strictEqual(who.length, 1);
    assert.strictEqual(who[0].fence, a.fence);
    assert.strictEqual(who[0].mode, 'exclusive');
    assert.strictEqual(await a.extend(20000), 20000);
    assert.ok(a.validity > 15000, `validity ${a.validity}`);
    assert.strictEqual(await A.validate(n, a.fence + 1), false);
  },

  async auth_refused() {
    const C = client({ secret: 'not-the-secret' });
    const err = await failure(C.acquire(uniq('n')));
    assert.ok(err instanceof lb.AuthError, err);
    assert.strictEqual(err.code, 'AUTH');
  },

  async hostile_server() {
    for (const mode of ['garbage', 'long', 'eof', 'silent']) {
      const { addr } = await env.cmd(`hostile ${mode}`);
      const C = client({ addr, timeout: 1000 });
      const rss = process.memoryUsage().rss;
      const t = performance.now();
      const err = await within(failure(C.acquire(uniq('n'))), 3000, mode);
      assert.ok(performance.now() - t < 3000, mode);
      const want = mode === 'silent' ? lb.TimeoutError : lb.ProtocolError;
      assert.ok(err instanceof want, `${mode}: ${err}`);
      assert.ok(process.memoryUsage().rss - rss < 64 * 1024 * 1024, `${mode}: memory`);
      await C.close();
    }
  },

  async many_at_once() {
    const B = client(); // the program under test: one client, one process
    const X = client(); // the other client, holding what B waits for
    const names = Array.from({ length: 1000 }, (_, i) => uniq(`h${i}`));
    const busy = Array.from({ length: 100 }, (_, i) => uniq(`w${i}`));
    const xs = await Promise.all(busy.map((n) => X.acquire(n)));
    const held = await Promise.all(names.map((n) => B.acquire(n)));
    assert.strictEqual(held.length, 1000);
    const waits = busy.map((n) => {
      const ac = new AbortController();
      const w = { ac, settled: false };
      w.promise = B.acquire(n, { wait: 120000, signal: ac.signal });
      w.promise.then(() => { w.settled = true; }, () => { w.settled = true; });
      return w;
    });
    await waiting(B, 100);
    for (const w of waits.slice(0, 50)) {
      w.ac.abort();
      const err = await within(failure(w.promise), 2000, 'the cancel');
      assert.ok(err instanceof lb.CancelledError, err);
    }
    assert.ok(waits.slice(50).every((w) => !w.settled), 'the other 50 still wait');
    assert.ok(held.every((l) => l.held), 'the 1000 stay held');
    assert.strictEqual((await B.locks()).length, 1000);
    await Promise.all(xs.map((l) => l.release()));
    const got = await within(Promise.all(waits.slice(50).map((w) => w.promise)), 30000, 'the grants');
    assert.ok(got.every((l) => l.held));
    for (const n of busy.slice(0, 50)) assert.strictEqual(await B.status(n), null, `${n} is free`);
    const released = await Promise.all([...held, ...got].map((l) => l.release()));
    assert.ok(released.every((r) => r === true));
  },
};

describe('scenarios.json', () => {
  before(async () => { env = await TestEnv.start(); });
  after(async () => { if (env) await env.stop(); });

  it('implements every scenario id of clients/scenarios.json, and no other', () => {
    const ids = FILE.scenarios.map((s) => s.id);
    assert.strictEqual(new Set(ids).size, ids.length, 'ids repeat in scenarios.json');
    assert.deepStrictEqual(ids.filter((id) => !(id in scenarios)), [], 'ids with no test');
    assert.deepStrictEqual(Object.keys(scenarios).filter((id) => !ids.includes(id)), [], 'tests of no id');
  });

  for (const { id } of FILE.scenarios) {
    it(id, { timeout: 120000 }, async () => {
      const impl = scenarios[id];
      assert.ok(impl, `no test for scenario ${id}`);
      try {
        await impl();
      } finally {
        await Promise.all(opened.splice(0).map((c) => c.close()));
      }
    });
  }
});

'use strict';
// The Client: a pool of connections to one broker, and the Lease a grant
// becomes. The broker runs one request at a time per connection, and a
// waiting ACQUIRE holds up everything behind it, so:
//  - quick requests (a try-once, RELEASE, STATUS...) are pipelined, up to
//    MAX_DEPTH at a time, on connections with no wait in flight;
//  - an ACQUIRE that may wait first tries once on such a connection (most
//    grants are uncontended), and only if that finds the name busy sends
//    the waiting request, alone, on a connection of its own;
//  - a connection holds at most maxLocksPerConnection locks (the broker's
//    limits.max_locks_per_client), and never two of one name.
// A lease lives on the connection that acquired it: its session lock ends
// with that connection, and its EVENT LOST comes there.

const crypto = require('node:crypto');
const fs = require('node:fs');
const { performance } = require('node:perf_hooks');
const timers = require('node:timers/promises');
const { Conn, expect, show } = require('./conn');
const E = require('./errors');

const DEFAULT_ADDR = '127.0.0.1:7878';
const DEFAULT_PORT = 7878;
// The broker takes 32 lines queued behind the one it runs; past that it
// closes the connection. Stay well under it.
const MAX_DEPTH = 24;
// locks.clock_drift's default: a lease is counted as the broker counts it
// (docs/protocol.md §3, Validity), from before the request was sent.
const DRIFT = 0.01;
// A connection with no lock and nothing in flight this long is closed
// (one is kept), so a burst of waits does not leave its connections open.
const IDLE_MS = 10000;
// Retries of an ACQUIRE whose connection broke before its reply (a broker
// restarting, say), with its own TOKEN so that a grant made unseen is
// granted again, not twice; after 0.1, 0.2, 0.4, 0.8 s, and no later than
// the request's wait and timeout allow.
const BREAK_RETRIES = 4;

// docs/clients.md: 'HOST:PORT', '[V6]:PORT', 'HOST', or a socket '/PATH'.
function parseAddr(addr) {
  if (typeof addr !== 'string') throw new TypeError('addr must be a string');
  if (addr.startsWith('/')) return { path: addr };
  const m = /^(?:\[([^\]]+)\]|([^:[\]/]+))(?::(\d{1,5}))?$/.exec(addr);
  const port = m && m[3] ? Number(m[3]) : DEFAULT_PORT;
  if (!m || port < 1 || port > 65535) throw new TypeError(`bad broker address '${addr}' (HOST:PORT or /PATH)`);
  return { host: m[1] || m[2], port };
}

// LOCKBROKER_ADDR, or the default. The old variables are refused rather
// than ignored: ignored, they would send the client to the default broker.
function envAddr(env = process.env) {
  if (env.LOCKBROKER_ADDR) return env.LOCKBROKER_ADDR;
  const old = ['LOCKBROKER_HOST', 'LOCKBROKER_PORT', 'LOCKBROKER_UNIX'].filter((v) => env[v]);
  if (old.length > 0) throw new TypeError(`${old.join(', ')}: not read; set LOCKBROKER_ADDR=HOST:PORT (or a socket path)`);
  return DEFAULT_ADDR;
}

// Names, tokens and numbers go on the wire as one word each; these refuse
// what the broker would refuse, before anything is sent.
function checkName(name) {
  if (typeof name !== 'string' || !/^[^\x00-\x20\x7f]+$/.test(name) || Buffer.byteLength(name) > 200)
    throw new TypeError('a lock name is 1-200 bytes, no blanks or control characters');
  return name;
}

function checkToken(token) {
  if (typeof token !== 'string' || !/^[A-Za-z0-9_.-]{1,64}$/.test(token))
    throw new TypeError('a token is 1-64 of A-Z a-z 0-9 _ . -');
  return token;
}

function checkInt(value, what) {
  if (!Number.isSafeInteger(value) || value < 0) throw new TypeError(`${what} must be a non-negative integer`);
  return value;
}

// 128 random bits, as the broker's own tokens; drawn 256 at a time.
let randomPool = Buffer.alloc(0);
function newToken() {
  if (randomPool.length < 16) randomPool = crypto.randomBytes(16 * 256);
  const token = randomPool.toString('hex', 0, 16);
  randomPool = randomPool.subarray(16);
  return token;
}

function cancelled(signal) {
  return new E.CancelledError('the wait was cancelled', { cause: signal.reason });
}

// The reply to ACQUIRE or FILL: a grant, or one of the words.
function grantParser(verb, token) {
  return (line) => {
    if (line === 'TIMEOUT' || line === 'CANCELLED' || (verb === 'FILL' && line === 'DONE')) return line;
    const m = /^OK (\d{1,16}) (\d{1,19}) (\S+)$/.exec(line);
    if (!m || m[3] !== token || !Number.isSafeInteger(Number(m[1])))
      throw new E.ProtocolError(`unexpected reply to ${verb}: ${show(line)}`);
    return { fence: Number(m[1]), ttl: Number(m[2]) };
  };
}

function matcher(re, what, build) {
  return (line) => {
    const m = re.exec(line);
    if (!m) throw new E.ProtocolError(`unexpected reply to ${what}: ${show(line)}`);
    return build(m);
  };
}

const parseExtend = matcher(/^OK (\d{1,19})$/, 'EXTEND', (m) => Number(m[1]));
const parseValidate = matcher(/^OK (VALID|STALE)$/, 'VALIDATE', (m) => m[1] === 'VALID');
const parseRevoke = matcher(/^OK (\d{1,9})$/, 'REVOKE', (m) => Number(m[1]));
const parseStatus = matcher(/^OK (?:FREE|HELD (\d{1,19}) (\d{1,16})(?: (SHARED|LIMIT=(\d{1,5})) (\d{1,9}))?)$/, 'STATUS',
  (m) => (m[1] === undefined ? null : {
    ttl: Number(m[1]), fence: Number(m[2]),
    mode: m[3] === undefined ? 'exclusive' : m[3] === 'SHARED' ? 'shared' : 'limit',
    limit: m[4] === undefined ? undefined : Number(m[4]),
    holders: m[5] === undefined ? 1 : Number(m[5]),
  }));
const dash = (w, f) => (w === '-' ? null : f(w));
const parseHolder = matcher(/^HOLDER (\S+) (\d{1,19}) (\S+) (\S+) (\S+) (\S+)$/, 'WHO', (m) => ({
  fence: dash(m[1], Number), ttl: Number(m[2]), mode: dash(m[3], (w) => w.toLowerCase()),
  broker: dash(m[4], String), client: dash(m[5], String), since: dash(m[6], String),
}));
const parseStat = matcher(/^STAT (\S+) (\S+)$/, 'INFO', (m) => [m[1], m[2]]);
const parseLock = matcher(/^LOCK (\S+) (\d{1,16}) (\d{1,19}) (SESSION|FIXED|KEEP)(?: (\S+))?$/, 'LOCKS', (m) => ({
  name: m[1], fence: Number(m[2]), ttl: Number(m[3]), kind: m[4].toLowerCase(),
  mode: m[5] === undefined ? 'exclusive' : m[5].toLowerCase(),
}));

class Lease {
  constructor(client, conn, grant) {
    this.name = grant.name;
    this.fence = grant.fence; // exact: fences stay below 2^53 (docs/protocol.md §5)
    this.token = grant.token;
    this.ttl = grant.ttl; // the lease set in Redis, ms
    this.kind = grant.kind; // 'session' | 'fixed' | 'keep'
    this.mode = grant.mode; // 'exclusive' | 'shared' | 'limit' | 'fill'
    this._client = client;
    this._conn = conn;
    this._ctl = new AbortController();
    this._state = 'held'; // -> 'released' | 'lost', never back
    this._until = Infinity;
    this._timer = null;
    this._extends = 0;
    if (this.kind !== 'session') this._trust(grant.sentAt, grant.ttl);
  }

  // Aborted when the lock is lost; signal.reason is a LostError.
  get signal() { return this._ctl.signal; }

  get held() { return this._state === 'held'; }

  get lostReason() { return this._state === 'lost' ? this.signal.reason.reason : null; }

  // Milliseconds the lock may still be counted on. A session lock is
  // renewed by the broker while its connection is open: Infinity until lost.
  get validity() {
    if (this._state !== 'held') return 0;
    return Math.max(0, this._until - performance.now());
  }

  // Resolves true when it released the lock, false when the lock was no
  // longer held (lost before, or the broker said NOTHELD).
  async release() {
    if (this._state === 'lost' && this.kind === 'keep' && this.lostReason === 'disconnected') {
      // A kept lock outlives its connection: it may well still be held.
      return this._client.release(this.name, { token: this.token })
        .then(() => true, (err) => { if (err instanceof E.NotHeldError) return false; throw err; });
    }
    if (this._state !== 'held') return false;
    this._state = 'released'; // its EVENT LOST from now on is ignored
    clearTimeout(this._timer);
    const conn = this._conn;
    try {
      await this._send(`RELEASE ${this.name}`, expect('OK'));
      return true;
    } catch (err) {
      if (err instanceof E.NotHeldError) return false;
      throw err;
    } finally {
      if (conn.leases.get(this.name) === this) conn.leases.delete(this.name);
    }
  }

  // Sets the lease to ms from now (fixed and kept locks); resolves the ttl.
  async extend(ms, { timeout } = {}) {
    checkInt(ms, 'ms');
    if (this._state === 'lost') throw this.signal.reason;
    if (this._state !== 'held') throw new E.NotHeldError(`${this.name}: released`);
    const seq = ++this._extends;
    const sentAt = performance.now();
    // A shorter lease is in force from the moment it is sent.
    if (this.kind !== 'session' && sentAt + ms * (1 - DRIFT) - 2 < this._until) this._trust(sentAt, ms);
    try {
      const ttl = await this._send(`EXTEND ${this.name} ${ms}`, parseExtend, timeout);
      // Only the answer to the last EXTEND sets the end (Redis ran them in order).
      if (seq === this._extends && this._state === 'held' && this.kind !== 'session') {
        this.ttl = ttl;
        this._trust(sentAt, ttl);
      }
      return ttl;
    } catch (err) {
      if (err instanceof E.NotHeldError) {
        if (this._conn.leases.get(this.name) === this) this._conn.leases.delete(this.name);
        this._lost('stolen');
      }
      throw err;
    }
  }

  // On its own connection, unless a wait holds that up: then with the
  // token, from another (the broker takes it from any connection).
  _send(line, parse, timeout = this._client.timeout) {
    const conn = this._conn;
    if (!conn.closed && !conn.blocked) return conn.request(line, { parse, timeout });
    return this._client._quick(`${line} TOKEN ${this.token}`, parse, timeout);
  }

  _trust(sentAt, ttl) {
    this._until = sentAt + ttl * (1 - DRIFT) - 2;
    clearTimeout(this._timer);
    // The broker says EVENT LOST expired at the same moment; this also
    // covers a broker that can say nothing (paused, cut off).
    this._timer = setTimeout(() => this._lost('expired'), Math.max(0, this._until - performance.now()));
    this._timer.unref();
  }

  _lost(reason) {
    if (this._state !== 'held') return;
    this._state = 'lost';
    clearTimeout(this._timer);
    this._ctl.abort(new E.LostError(this.name, this.fence, reason));
  }
}

// The options of tls.connect from ca, cert and key (files; the
// environment's when not given), or undefined without a CA.
function tlsOptions(opts, target) {
  const pick = (v, env) => (v !== undefined ? v : process.env[env] || undefined);
  const ca = pick(opts.ca, 'LOCKBROKER_CA');
  const cert = pick(opts.cert, 'LOCKBROKER_CERT');
  const key = pick(opts.key, 'LOCKBROKER_KEY');
  if ((cert === undefined) !== (key === undefined))
    throw new TypeError('a client certificate needs its key, and a key its certificate');
  if (ca === undefined) {
    if (cert !== undefined) throw new TypeError('a client certificate needs TLS: give ca');
    return undefined;
  }
  if (target.path) throw new TypeError('TLS is over TCP, not a Unix socket');
  const out = { ca: fs.readFileSync(ca), minVersion: 'TLSv1.2' };
  if (cert !== undefined) {
    out.cert = fs.readFileSync(cert);
    out.key = fs.readFileSync(key);
  }
  return out;
}

class Client {
  // opts: addr ('HOST:PORT' or '/socket', default $LOCKBROKER_ADDR or
  // 127.0.0.1:7878), secret (default $LOCKBROKER_SECRET), timeout (ms a
  // reply may take beyond the request's own wait, default 5000),
  // maxConnections (1000), maxLocksPerConnection (64); TLS: ca (a file of
  // the CAs that sign the broker's certificate, which must name the host;
  // default $LOCKBROKER_CA, unset: no TLS), cert and key (a client
  // certificate; default $LOCKBROKER_CERT, $LOCKBROKER_KEY).
  constructor(opts = {}) {
    this.target = parseAddr(opts.addr === undefined ? envAddr() : opts.addr);
    this._tls = tlsOptions(opts, this.target);
    const secret = opts.secret !== undefined ? opts.secret : process.env.LOCKBROKER_SECRET || undefined;
    if (secret !== undefined && (typeof secret !== 'string' || !/^[^\x00-\x20\x7f]+$/.test(secret)))
      throw new TypeError('secret must be one word of printable characters');
    this.timeout = opts.timeout === undefined ? 5000 : checkInt(opts.timeout, 'timeout');
    this.maxConnections = opts.maxConnections || 1000;
    this.maxLocks = opts.maxLocksPerConnection || 64;
    this.conns = [];
    this.closed = false;
    this._secret = secret;
    this._sweeper = null;
    this._hooks = {
      lost: (conn, name, fence, reason) => {
        const lease = conn.leases.get(name);
        // It may come before the reply to the ACQUIRE in flight (§7).
        if (lease === undefined && conn.reserved.has(name)) conn.early.set(name, { fence, reason });
        if (lease === undefined || lease.fence !== fence) return; // an older grant's news
        conn.leases.delete(name);
        lease._lost(reason);
      },
      closed: (conn) => {
        const i = this.conns.indexOf(conn);
        if (i >= 0) this.conns.splice(i, 1);
        for (const lease of conn.leases.values()) lease._lost(this.closed ? 'closed' : 'disconnected');
        conn.leases.clear();
      },
    };
  }

  // Resolves a Lease, or rejects: BusyError when not granted within wait,
  // CancelledError when opts.signal aborted the wait.
  acquire(name, opts = {}) { return this._take('ACQUIRE', name, opts); }

  // Single-flight: resolves a Lease when this caller is the leader (do the
  // work, then release), or null when a leader did the work (DONE).
  fill(name, opts = {}) { return this._take('FILL', name, opts); }

  // Runs fn(lease) under the lock and releases it after. Rejects with the
  // LostError when the lock was lost before fn finished, even if fn did.
  async withLock(name, opts, fn) {
    if (typeof opts === 'function') [opts, fn] = [{}, opts];
    const lease = await this.acquire(name, opts);
    try {
      const out = await fn(lease);
      if (lease.signal.aborted) throw lease.signal.reason;
      return out;
    } finally {
      await lease.release().catch(() => {}); // a connection that broke took it already
    }
  }

  // By token, from any connection (a kept lock acquired elsewhere).
  async release(name, { token, timeout } = {}) {
    await this._quick(`RELEASE ${checkName(name)} TOKEN ${checkToken(token)}`, expect('OK'), timeout);
  }

  async extend(name, ms, { token, timeout } = {}) {
    return this._quick(`EXTEND ${checkName(name)} ${checkInt(ms, 'ms')} TOKEN ${checkToken(token)}`, parseExtend, timeout);
  }

  // True when fence (and token, if given) is the current holder's.
  validate(name, fence, { token, timeout } = {}) {
    const tok = token === undefined ? '' : ` TOKEN ${checkToken(token)}`;
    return this._quick(`VALIDATE ${checkName(name)} ${checkInt(fence, 'fence')}${tok}`, parseValidate, timeout, { retry: true });
  }

  who(name, { timeout } = {}) {
    return this._quick(`WHO ${checkName(name)}`, parseHolder, timeout, { retry: true, multi: true });
  }

  // null when free, else { ttl, fence, mode, limit, holders }.
  status(name, { timeout } = {}) {
    return this._quick(`STATUS ${checkName(name)}`, parseStatus, timeout, { retry: true });
  }

  // Needs the admin secret; resolves how many held it.
  revoke(name, { timeout } = {}) {
    return this._quick(`REVOKE ${checkName(name)}`, parseRevoke, timeout);
  }

  async ping({ timeout } = {}) {
    await this._quick('PING', expect('PONG'), timeout, { retry: true });
  }

  // The broker's counters (docs/protocol.md, INFO), as strings by name.
  async info({ timeout } = {}) {
    return Object.fromEntries(await this._quick('INFO', parseStat, timeout, { retry: true, multi: true }));
  }

  // What the broker lists for this client's connections (those with no
  // wait in flight: a LOCKS behind a wait would wait with it).
  async locks({ timeout = this.timeout } = {}) {
    const open = this.conns.filter((c) => !c.blocked && c.leases.size > 0);
    const lists = await Promise.all(open.map((c) => c.request('LOCKS', { parse: parseLock, multi: true, timeout })));
    return lists.flat();
  }

  // QUIT on every connection: the broker releases session and fixed locks
  // at once. Waits in flight are dropped with their connection.
  async close() {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this._sweeper);
    await Promise.all(this.conns.slice().map((c) => {
      if (!c.blocked) return c.quit(Math.min(this.timeout, 2000));
      c.fail(new E.UnavailableError('client closed', 'CLOSED'));
      return undefined;
    }));
  }

  async _take(verb, name, opts) {
    checkName(name);
    const o = this._takeOptions(verb, opts);
    const { signal } = opts;
    if (signal && signal.aborted) throw cancelled(signal);
    const t0 = performance.now();
    const end = o.wait === undefined || o.wait === Infinity ? Infinity : t0 + o.wait;
    let waiting = false; // false: the try-once; true: the wait itself
    for (let breaks = 0; ;) {
      if (signal && signal.aborted) throw cancelled(signal);
      let reply;
      try {
        reply = await this._attempt(verb, name, o, waiting, end, signal);
      } catch (err) {
        if (signal && signal.aborted) {
          this._doubt(name, o, err);
          throw cancelled(signal);
        }
        const pause = 100 * 2 ** breaks;
        if (err instanceof E.UnavailableError && (err.disconnected || err.code === 'SHUTDOWN') &&
            breaks < BREAK_RETRIES && performance.now() + pause < end + o.timeout && !this.closed) {
          breaks += 1;
          await this._pause(pause, signal);
          continue;
        }
        // Redis trouble ends a try-once, not a wait: the broker keeps trying.
        if (err.code === 'UNAVAILABLE' && !err.disconnected && !waiting && o.wait !== 0) {
          waiting = true;
          continue;
        }
        this._doubt(name, o, err);
        throw err;
      }
      if (reply instanceof Lease) return reply;
      if (reply === 'DONE') return null;
      // TIMEOUT
      if (!waiting && o.wait !== 0 && performance.now() < end) {
        waiting = true;
        continue;
      }
      if (waiting) await this._whyTimeout(name, o);
      const how = o.wait === 0 ? 'tried once' : `waited ${o.wait} ms`;
      throw new E.BusyError(`${name}: lock busy (${how})`);
    }
  }

  _takeOptions(verb, opts) {
    const { wait, ttl, keep, token, shared, limit, timeout = this.timeout } = opts;
    if (verb === 'FILL' && (keep || shared || limit !== undefined))
      throw new TypeError('fill takes no keep, shared or limit');
    if (keep && ttl === undefined) throw new TypeError('keep needs ttl');
    if (shared && limit !== undefined) throw new TypeError('shared and limit exclude each other');
    if (wait !== undefined && wait !== Infinity) checkInt(wait, 'wait');
    checkInt(timeout, 'timeout');
    const o = {
      wait, timeout,
      // Always a token of our own, so a retry is granted again, never twice.
      token: token === undefined ? newToken() : checkToken(token),
      ownToken: token === undefined,
      kind: ttl === undefined ? 'session' : keep ? 'keep' : 'fixed',
      mode: verb === 'FILL' ? 'fill' : shared ? 'shared' : limit !== undefined ? 'limit' : 'exclusive',
      args: '',
    };
    if (ttl !== undefined) o.args += ` TTL ${checkInt(ttl, 'ttl')}`;
    if (keep) o.args += ' KEEP';
    if (shared) o.args += ' SHARED';
    if (limit !== undefined) o.args += ` LIMIT ${checkInt(limit, 'limit')}`;
    o.args += ` TOKEN ${o.token}`;
    return o;
  }

  // One ACQUIRE or FILL on one connection: a Lease, or the reply's word.
  async _attempt(verb, name, o, waiting, end, signal) {
    const conn = this._pick(waiting ? 'wait' : 'take', name);
    let waitArg = ' WAIT 0';
    let timeout = o.timeout;
    if (waiting && o.wait === undefined) [waitArg, timeout] = ['', Infinity];
    else if (waiting && o.wait === Infinity) [waitArg, timeout] = [' WAIT -1', Infinity];
    else if (waiting) {
      const left = Math.max(1, Math.ceil(end - performance.now()));
      [waitArg, timeout] = [` WAIT ${left}`, left + o.timeout];
    }
    conn.reserved.add(name);
    const sentAt = performance.now();
    const req = conn.send(`${verb} ${name}${o.args}${waitArg}`, { parse: grantParser(verb, o.token), timeout, blocking: waiting });
    // An abort ends a wait with CANCEL (the connection and its locks stay);
    // either way the reply is still awaited, so that we know whether the
    // lock was granted, but no longer than the client timeout.
    const onAbort = () => {
      conn.rearm(req, o.timeout);
      if (waiting) conn.request('CANCEL', { parse: expect('OK'), timeout: o.timeout }).catch(() => {});
    };
    if (signal) signal.addEventListener('abort', onAbort, { once: true });
    let reply;
    try {
      reply = await req.promise;
    } finally {
      conn.reserved.delete(name);
      if (signal) signal.removeEventListener('abort', onAbort);
    }
    const early = conn.early.get(name);
    conn.early.delete(name);
    if (typeof reply === 'string') {
      if (signal && signal.aborted) throw cancelled(signal);
      if (reply === 'CANCELLED') throw new E.ProtocolError(`${verb}: CANCELLED, but no CANCEL was sent`);
      return reply;
    }
    const lease = new Lease(this, conn, { name, ...reply, token: o.token, kind: o.kind, mode: o.mode, sentAt });
    conn.leases.set(name, lease);
    if (conn.closed) lease._lost('disconnected'); // closed between the reply and now
    else if (early && early.fence === lease.fence) this._hooks.lost(conn, name, early.fence, early.reason);
    if (signal && signal.aborted) {
      // Granted before the broker read the CANCEL: not wanted any more.
      await lease.release().catch(() => {});
      throw cancelled(signal);
    }
    return lease;
  }

  // A TIMEOUT also ends a wait while the broker cannot reach Redis; STATUS
  // tells the two apart (docs/clients.md).
  async _whyTimeout(name, o) {
    try {
      await this._quick(`STATUS ${name}`, parseStatus, o.timeout);
    } catch (err) {
      if (err instanceof E.UnavailableError)
        throw new E.UnavailableError(`${name}: lock not obtained: the broker cannot reach Redis (${err.message})`, err.code);
    }
  }

  // A failed ACQUIRE that may have been granted unseen, with a token of
  // ours nobody will use again: give it back. The broker does that itself
  // for a connection that went away, except for a kept lock. (Not after a
  // TimeoutError: a broker that does not answer would not answer this
  // either, and its connection would be closed too.)
  _doubt(name, o, err) {
    if (!o.ownToken || this.closed) return;
    const unseen = err.code === 'UNAVAILABLE' && !err.disconnected;
    if (unseen || (err.disconnected && o.kind === 'keep'))
      this._quick(`RELEASE ${name} TOKEN ${o.token}`, expect('OK')).catch(() => {});
  }

  async _pause(ms, signal) {
    try {
      await timers.setTimeout(ms, undefined, { signal });
    } catch (err) {
      throw cancelled(signal);
    }
  }

  // A request that does not wait, on any connection with room; reads are
  // sent once more if their connection broke.
  async _quick(line, parse, timeout = this.timeout, { retry = false, multi = false } = {}) {
    try {
      return await this._pick('quick').request(line, { parse, timeout, multi });
    } catch (err) {
      if (!(retry && err.disconnected && !this.closed)) throw err;
      return this._pick('quick').request(line, { parse, timeout, multi });
    }
  }

  // The connection for a request. kind: 'quick' (no lock), 'take' (a
  // try-once: a lock slot), 'wait' (a waiting request: a connection with
  // nothing in flight, and no locks if we can, so that their RELEASEs are
  // not held up behind the wait).
  _pick(kind, name) {
    if (this.closed) throw new E.UnavailableError('client closed', 'CLOSED');
    const room = (c) => kind === 'quick' ||
      (!c.leases.has(name) && !c.reserved.has(name) && c.leases.size + c.reserved.size < this.maxLocks);
    const fits = (c) => !c.closed && !c.closing && !c.blocked && (kind === 'wait' ? c.depth === 0 : c.depth < MAX_DEPTH) && room(c);
    let spare;
    for (const c of this.conns) {
      if (!fits(c)) continue;
      if (kind !== 'wait' || c.leases.size === 0) return c;
      spare = spare || c;
    }
    if (this.conns.length < this.maxConnections) return this._open();
    if (spare) return spare;
    throw new E.LockError(`all ${this.maxConnections} connections are busy (maxConnections)`, 'LIMIT');
  }

  _open() {
    const target = this._tls ? { ...this.target, tls: this._tls } : this.target;
    const conn = new Conn(target, { secret: this._secret, timeout: this.timeout }, this._hooks);
    this.conns.push(conn);
    if (this._sweeper === null) {
      this._sweeper = setInterval(() => this._sweep(), IDLE_MS / 2);
      this._sweeper.unref();
    }
    return conn;
  }

  _sweep() {
    const old = Date.now() - IDLE_MS;
    for (const c of this.conns.slice(1)) {
      if (c.depth === 0 && c.leases.size === 0 && c.reserved.size === 0 && c.idleSince < old) c.quit(this.timeout);
    }
  }
}

function createClient(opts) { return new Client(opts); }

module.exports = { Client, createClient, Lease, parseAddr, envAddr };

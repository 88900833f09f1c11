#!/usr/bin/env node
// A command-line demo of the lockbroker Node.js library (clients/node), with
// the options and exit codes of every lockbroker client (docs/clients.md):
//
//   node lockclient.js [-s HOST:PORT | -u PATH] [-a SECRET_FILE] [-w WAIT | -n]
//                      [-E N] [-q] [--ttl TTL] [NAME]
//
// acquires NAME (default "demo"), prints its fence, and releases it: exit 0;
// 64 usage; 69 broker or Redis unavailable; 70 other ERR; 71 secret file;
// 75 lock busy (or -E's N); 77 AUTH refused or needed.
'use strict';

const fs = require('fs');
const path = require('path');
const { parseArgs } = require('util');
const { EventEmitter } = require('events');

// The library from this checkout, so that the demo runs without an install;
// elsewhere, the installed package.
let lockbroker;
try {
  lockbroker = require(path.join(__dirname, '..', '..', 'clients', 'node'));
} catch (err) {
  if (err.code !== 'MODULE_NOT_FOUND') throw err;
  lockbroker = require('lockbroker');
}
const { Client, LockError, BusyError, AuthError, UnavailableError, TimeoutError } = lockbroker;

// The library tries once before it waits and, when a wait ends in TIMEOUT,
// asks STATUS whether Redis was away: then it rejects with UnavailableError
// (exit 69), not BusyError (docs/clients.md, Exit status).
async function demo(a, client) {
  let lease;
  try {
    lease = await client.acquire(a.name, { ttl: a.ttl, wait: a.wait });
  } catch (err) {
    if (!(err instanceof BusyError)) throw err;
    // Our own words: the library's say "waited 400 ms", clients.md "0.4 s".
    const how = a.wait === 0 ? ' (tried once)' : a.wait ? ` (waited ${a.wait / 1000} s)` : '';
    if (!a.quiet) console.error(`lockclient.js: ${a.name}: lock busy${how}`);
    return a.busyExit;
  }
  lease.signal.addEventListener('abort', () =>
    console.log(`lost ${a.name} fence ${lease.fence}: ${lease.lostReason}`));
  console.log(`acquired ${a.name} fence ${lease.fence} ttl ${lease.ttl} ms`);
  console.log(`valid: ${await client.validate(a.name, lease.fence)}`);
  // false: lost (the line above said why) or no longer held; exit 70.
  if (!(await lease.release())) throw lease.signal.reason || new LockError(`${a.name}: not held`, 'NOTHELD');
  console.log(`released ${a.name}`);
  return 0;
}

const USAGE = 'usage: lockclient.js [-s HOST:PORT | -u PATH] [-a SECRET_FILE] ' +
  '[-w WAIT | -n] [-E N] [-q] [--ttl TTL] [NAME]';
const usageError = (msg) => Object.assign(new TypeError(msg), { usage: true });

// '1.5s', '1500ms', '2m', '1h', or a bare number in units of bareMs; whole
// milliseconds, rounded up, in integer arithmetic (0.1 s is 100 ms, not 101).
function parseDuration(value, bareMs) {
  const m = /^(\d*)(?:\.(\d{0,9}))?(ms|s|m|h)?$/.exec(value);
  if (!m || (m[1] === '' && !m[2])) throw usageError(`bad duration '${value}': a number and ms, s, m or h`);
  const unit = m[3] ? { ms: 1, s: 1000, m: 60000, h: 3600000 }[m[3]] : bareMs;
  const frac = m[2] || '';
  return Number(m[1] || 0) * unit + Math.ceil((Number(frac || 0) * unit) / 10 ** frac.length);
}

function parseCommandLine(args) {
  const options = {
    s: { type: 'string', short: 's' }, u: { type: 'string', short: 'u' }, a: { type: 'string', short: 'a' },
    wait: { type: 'string', short: 'w', multiple: true }, try: { type: 'boolean', short: 'n' },
    'conflict-exit-code': { type: 'string', short: 'E' }, quiet: { type: 'boolean', short: 'q' },
    ttl: { type: 'string' },
  };
  let v, names;
  try {
    ({ values: v, positionals: names } = parseArgs({ args, options, allowPositionals: true }));
  } catch (err) {
    throw usageError(err.message.split(/\.\s/)[0]); // its first sentence
  }
  const E = v['conflict-exit-code'];
  if (names.length > 1) throw usageError(`unexpected argument '${names[1]}'`);
  if ((v.wait || []).length + (v.try ? 1 : 0) > 1) throw usageError('-w and -n exclude each other');
  if (v.s !== undefined && v.u !== undefined) throw usageError('-s and -u exclude each other');
  if (v.s !== undefined && v.s.startsWith('/')) throw usageError('-s wants HOST:PORT; -u is for a socket path');
  if (E !== undefined && !(/^\d{1,3}$/.test(E) && Number(E) <= 255)) throw usageError('-E wants an exit code, 0-255');
  const a = {
    name: names[0] ?? 'demo', addr: v.u !== undefined ? v.u : v.s, secretFile: v.a, quiet: !!v.quiet,
    busyExit: E === undefined ? 75 : Number(E),
    wait: v.try ? 0 : v.wait ? parseDuration(v.wait[0], 1000) : undefined, // bare: seconds, as flock -w
    ttl: v.ttl === undefined ? undefined : parseDuration(v.ttl, 1), // bare: ms, as the protocol
  };
  if (a.ttl === 0) throw usageError('--ttl must be above 0');
  return a;
}

async function main(args) {
  const a = parseCommandLine(args);
  let secret; // none: the library reads $LOCKBROKER_SECRET
  try {
    if (a.secretFile !== undefined) secret = fs.readFileSync(a.secretFile, 'utf8').split('\n')[0];
  } catch (err) {
    console.error(`lockclient.js: ${err.message}`);
    return 71;
  }
  let client;
  try {
    // Sends nothing yet; throws TypeError on a bad address or secret, and
    // when the old LOCKBROKER_HOST/PORT/UNIX are set instead of _ADDR.
    client = new Client({ addr: a.addr, secret });
  } catch (err) {
    throw usageError(err.message);
  }
  try {
    return await demo(a, client);
  } finally {
    await client.close(); // QUIT: the broker releases at once whatever is left
  }
}

// The exit code for what went wrong (docs/clients.md).
function failure(err) {
  if (err.usage) {
    console.error(`lockclient.js: ${err.message}\n${USAGE}`);
    return 64;
  }
  // The library words the broker's `ERR CODE text` as "CODE text".
  const fromBroker = err instanceof LockError && `${err.message} `.startsWith(`${err.code} `);
  console.error(`lockclient.js: ${fromBroker ? 'broker: ERR ' : ''}${err.message}`);
  if (err instanceof AuthError) return 77;
  if (err instanceof UnavailableError || err instanceof TimeoutError) return 69;
  return err instanceof TypeError ? 64 : 70;
}

// The module API this file had when it spoke the protocol itself, which
// tests/e2e/test_examples.py and docs/sidecar.md use: one LockClient per
// connection, acquire resolving null when busy, 'lost' events, release by
// name. Kept as a thin layer over Client; new code should use Client.
class LockClient extends EventEmitter {
  leases = new Map(); // name -> Lease

  static async connect({ host = '127.0.0.1', port = 7878, path: sock, secret } = {}) {
    const lb = new LockClient();
    lb.client = new Client({ addr: sock || `[${host}]:${port}`, secret }); // [] take IPv6 too
    await lb.client.ping().catch((err) => lb.client.close().then(() => { throw err; }));
    return lb; // connected and authenticated, as before
  }

  get live() { // after quit(), reject as the old LockClient did
    if (this.client.closed) throw Object.assign(new Error('connection closed'), { code: 'ECONNCLOSED' });
    return this.client;
  }

  // { fence, ttl, token }, or null when busy. opts: ttl, wait, keep, token.
  async acquire(name, opts = {}) {
    let lease;
    try { lease = await this.live.acquire(name, opts); } catch (err) {
      if (err instanceof BusyError) return null;
      throw err;
    }
    this.leases.set(name, lease);
    lease.signal.addEventListener('abort', () => {
      if (lease.lostReason !== 'closed') this.emit('lost', { name, fence: lease.fence, reason: lease.lostReason });
    });
    return { fence: lease.fence, ttl: lease.ttl, token: lease.token };
  }

  async release(name) {
    const lease = this.leases.get(name);
    this.leases.delete(name);
    if (!lease || !(await lease.release())) throw new LockError(`NOTHELD ${name}`, 'NOTHELD');
  }

  async locks() { // kinds in the broker's capitals, as before
    return (await this.live.locks()).map((l) => ({ ...l, kind: l.kind.toUpperCase() }));
  }

  async ping() { return this.live.ping(); }
  async status(name) { return this.live.status(name); }
  async validate(name, fence) { return this.live.validate(name, fence); }
  async quit() { return this.client.close(); }
}

// LockClient.connect's options for an address; none: $LOCKBROKER_ADDR.
const parseAddr = (addr = process.env.LOCKBROKER_ADDR || '127.0.0.1:7878') => lockbroker.parseAddr(addr);

module.exports = { LockClient, LockError, parseAddr, parseDuration };

if (require.main === module) {
  main(process.argv.slice(2)).then((code) => { process.exitCode = code; },
    (err) => { process.exitCode = failure(err); });
}

#!/usr/bin/env node
// A small lockbroker client on Node's `net` module only.
//
//   const { LockClient, parseAddr } = require('./lockclient');
//   const lb = await LockClient.connect(parseAddr());  // $LOCKBROKER_ADDR; or { port: 7878 },
//                                                      // or { path: '/run/lockbroker.sock' }
//   lb.on('lost', ({ name, fence, reason }) => { ... });  // EVENT LOST
//   const grant = await lb.acquire('reports', { wait: 5000 });
//   if (grant === null) { /* TIMEOUT */ }
//   else { /* grant.fence, grant.ttl, grant.token */ await lb.release('reports'); }
//   await lb.quit();
//
// Requests may be sent without waiting (pipelining): the broker answers them
// in order, one at a time per connection, so a waiting ACQUIRE holds up the
// ones behind it. Use another LockClient to do two things at once.
// `EVENT LOST <name> <fence> <reason>` lines can come between any replies;
// they are emitted as 'lost' events. An `ERR <CODE> <text>` reply rejects
// with a LockError whose `code` is the CODE. 'close' is emitted when the
// connection ends; every request still pending is rejected then.
//
// Run as a program it is a demo with the options and exit codes of every
// lockbroker client (docs/clients.md):
//
//   node lockclient.js [-s HOST:PORT | -u PATH] [-a SECRET_FILE] [-w WAIT | -n]
//                      [-E N] [-q] [--ttl TTL] [NAME]
//
// acquires NAME (default "demo"), prints its fence, and releases it: exit 0;
// 64 usage; 69 broker or Redis unavailable; 70 other ERR; 75 lock busy (or
// -E's N); 77 AUTH refused or needed.
'use strict';

const net = require('net');
const { EventEmitter } = require('events');

class LockError extends Error {
  constructor(code, text) {
    super(text ? `${code} ${text}` : code);
    this.name = 'LockError';
    this.code = code;
    this.text = text || '';
  }
}

// Names and tokens go on the wire as one word: nothing that could split
// the line or start another. The broker checks the rest.
function word(value, what) {
  const s = String(value);
  if (s.length === 0 || /[\x00-\x20\x7f]/.test(s))
    throw new TypeError(`${what} must be one word of printable characters`);
  return s;
}

function ms(value, what) {
  if (!Number.isSafeInteger(value) || value < 0)
    throw new TypeError(`${what} must be a non-negative integer (milliseconds)`);
  return String(value);
}

class LockClient extends EventEmitter {
  // Resolves once connected (and authenticated, with `secret`).
  static connect({ host = '127.0.0.1', port = 7878, path, secret } = {}) {
    return new Promise((resolve, reject) => {
      if (secret !== undefined) secret = word(secret, 'secret');
      const sock = path ? net.connect(path) : net.connect(port, host);
      const fail = (err) => reject(err);
      sock.once('error', fail);
      sock.once('connect', () => {
        sock.removeListener('error', fail);
        const lb = new LockClient(sock);
        if (secret === undefined) return resolve(lb);
        lb._expect(`AUTH ${secret}`, 'OK')
          .then(() => resolve(lb), (err) => { lb.close(); reject(err); });
      });
    });
  }

  constructor(sock) {
    super();
    this.sock = sock;
    this.pending = []; // { multi, lines, resolve, reject }, in request order
    this.buf = '';
    this.closed = false;
    this.closeReason = null; // an unsolicited ERR line before the close
    sock.setEncoding('utf8');
    sock.setNoDelay(true);
    sock.on('data', (chunk) => this._data(chunk));
    sock.on('error', (err) => { this.closeReason = this.closeReason || err.message; });
    sock.on('close', () => this._closed());
  }

  _data(chunk) {
    this.buf += chunk;
    let nl;
    while ((nl = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, nl).replace(/\r$/, '');
      this.buf = this.buf.slice(nl + 1);
      this._line(line);
    }
  }

  _line(line) {
    if (line.startsWith('EVENT LOST ')) {
      const [, , name, fence, reason] = line.split(' ');
      this.emit('lost', { name, fence: Number(fence), reason });
      return;
    }
    const p = this.pending[0];
    if (!p) {
      // Only a closing error comes unasked (idle timeout, auth timeout).
      this.closeReason = line;
      return;
    }
    if (p.multi && line !== 'END' && !(p.lines.length === 0 && line.startsWith('ERR '))) {
      p.lines.push(line);
      return;
    }
    this.pending.shift();
    if (line.startsWith('ERR ')) {
      const rest = line.slice(4);
      const sp = rest.indexOf(' ');
      p.reject(sp < 0 ? new LockError(rest) : new LockError(rest.slice(0, sp), rest.slice(sp + 1)));
    } else {
      p.resolve(p.multi ? p.lines : line);
    }
  }

  _closed() {
    this.closed = true;
    const err = new Error(`connection closed${this.closeReason ? ': ' + this.closeReason : ''}`);
    err.code = 'ECONNCLOSED';
    for (const p of this.pending.splice(0)) p.reject(err);
    this.emit('close');
  }

  // Send one request line; resolves with its reply line (or, with multi,
  // the lines before END); rejects with LockError on ERR.
  request(line, multi = false) {
    return new Promise((resolve, reject) => {
      if (/[\r\n]/.test(line)) return reject(new TypeError('one line only'));
      if (this.closed || this.sock.destroyed) {
        const err = new Error('connection closed');
        err.code = 'ECONNCLOSED';
        return reject(err);
      }
      this.pending.push({ multi, lines: [], resolve, reject });
      this.sock.write(line + '\n');
    });
  }

  async _expect(line, want) {
    const reply = await this.request(line);
    if (reply !== want) throw new LockError('PROTO', `unexpected reply ${JSON.stringify(reply)}`);
  }

  ping() { return this._expect('PING', 'PONG'); }

  // Resolves { fence, ttl, token }, or null on TIMEOUT.
  // ttl: fixed lease in ms (none = session lock, renewed while connected);
  // wait: ms the broker may wait (0 = try once; none = its default_wait_ms);
  // keep: outlives the connection (needs ttl); token: your own token.
  async acquire(name, { ttl, wait, keep = false, token } = {}) {
    let line = `ACQUIRE ${word(name, 'name')}`;
    if (ttl !== undefined) line += ` TTL ${ms(ttl, 'ttl')}`;
    if (wait !== undefined) line += ` WAIT ${ms(wait, 'wait')}`;
    if (keep) line += ' KEEP';
    if (token !== undefined) line += ` TOKEN ${word(token, 'token')}`;
    const reply = await this.request(line);
    if (reply === 'TIMEOUT') return null;
    const m = /^OK (\d+) (\d+) (\S+)$/.exec(reply);
    if (!m) throw new LockError('PROTO', `unexpected reply ${JSON.stringify(reply)}`);
    return { fence: Number(m[1]), ttl: Number(m[2]), token: m[3] };
  }

  release(name, { token } = {}) {
    let line = `RELEASE ${word(name, 'name')}`;
    if (token !== undefined) line += ` TOKEN ${word(token, 'token')}`;
    return this._expect(line, 'OK');
  }

  // Resolves the new ttl in ms.
  async extend(name, ttl, { token } = {}) {
    let line = `EXTEND ${word(name, 'name')} ${ms(ttl, 'ttl')}`;
    if (token !== undefined) line += ` TOKEN ${word(token, 'token')}`;
    const m = /^OK (\d+)$/.exec(await this.request(line));
    if (!m) throw new LockError('PROTO', 'unexpected reply to EXTEND');
    return Number(m[1]);
  }

  // Resolves null when free, else { ttl, fence } (ttl: PTTL left in Redis).
  async status(name) {
    const reply = await this.request(`STATUS ${word(name, 'name')}`);
    if (reply === 'OK FREE') return null;
    const m = /^OK HELD (\d+) (\d+)$/.exec(reply);
    if (!m) throw new LockError('PROTO', `unexpected reply ${JSON.stringify(reply)}`);
    return { ttl: Number(m[1]), fence: Number(m[2]) };
  }

  // Resolves true if fence is the current holder's fence. (Fences are
  // Numbers here: exact up to 2^53, far beyond any real count of grants.)
  async validate(name, fence) {
    const reply = await this.request(`VALIDATE ${word(name, 'name')} ${ms(fence, 'fence')}`);
    if (reply !== 'OK VALID' && reply !== 'OK STALE')
      throw new LockError('PROTO', `unexpected reply ${JSON.stringify(reply)}`);
    return reply === 'OK VALID';
  }

  // Resolves [{ name, fence, ttl, kind }] held by this connection.
  async locks() {
    const lines = await this.request('LOCKS', true);
    return lines.map((l) => {
      const [, name, fence, ttl, kind] = l.split(' ');
      return { name, fence: Number(fence), ttl: Number(ttl), kind };
    });
  }

  // QUIT releases this connection's session and fixed locks at once.
  async quit() {
    if (this.closed) return;
    const closed = new Promise((resolve) => this.sock.once('close', resolve));
    try { await this._expect('QUIT', 'OK'); } catch (err) { /* closing anyway */ }
    this.sock.end();
    await closed;
  }

  // Close without QUIT: the broker takes the client as vanished (its locks
  // go after locks.lock_delay_ms).
  close() { this.sock.destroy(); }
}

// The exit codes of every lockbroker client (docs/clients.md).
const EXIT = { USAGE: 64, UNAVAILABLE: 69, ERROR: 70, OSERR: 71, BUSY: 75, AUTH: 77 };
const UNITS = { ms: 1, s: 1000, m: 60000, h: 3600000 };

// '1.5s', '1500ms', '2m', '1h', or a bare number in units of bareMs ms,
// as whole milliseconds rounded up; throws a TypeError if malformed.
function parseDuration(value, bareMs) {
  const m = /^(\d*)(?:\.(\d*))?(ms|s|m|h)?$/.exec(String(value));
  if (!m || (m[1] === '' && !m[2]) || (m[2] || '').length > 9)
    throw new TypeError(`bad duration '${value}': a number and ms, s, m or h`);
  const unit = m[3] ? UNITS[m[3]] : bareMs;
  const frac = m[2] || '';
  const den = 10 ** frac.length;
  return Number(m[1] || 0) * unit + Math.ceil((Number(frac || 0) * unit) / den);
}

// LockClient.connect options for 'HOST:PORT', '[V6]:PORT', 'HOST' or a
// Unix socket '/PATH'; undefined reads $LOCKBROKER_ADDR, then 127.0.0.1:7878.
function parseAddr(addr) {
  if (addr === undefined) addr = process.env.LOCKBROKER_ADDR || '127.0.0.1:7878';
  if (addr.startsWith('/')) return { path: addr };
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+))(?::(\d+))?$/.exec(addr);
  const port = m && m[3] ? Number(m[3]) : 7878;
  if (!m || port < 1 || port > 65535)
    throw new TypeError(`bad broker address '${addr}' (HOST:PORT or /PATH)`);
  return { host: m[1] || m[2], port };
}

module.exports = { LockClient, LockError, parseAddr, parseDuration, EXIT };

// The demo's command line, as lockctl's: -s -u -a -w -n -E -q --ttl.
const USAGE = 'usage: lockclient.js [-s HOST:PORT | -u PATH] [-a SECRET_FILE] ' +
  '[-w WAIT | -n] [-E N] [-q] [--ttl TTL] [NAME]';

function usageError(msg) {
  const err = new TypeError(msg);
  err.usage = true;
  return err;
}

function parseArgs(argv) {
  const a = { name: 'demo', busyExit: EXIT.BUSY, quiet: false };
  const takes = { '-s': 's', '-u': 'u', '-a': 'a', '-w': 'wait', '--wait': 'wait',
    '-E': 'E', '--conflict-exit-code': 'E', '--ttl': 'ttl' };
  const seen = [];
  for (let i = 0; i < argv.length; i++) {
    let arg = argv[i];
    let val;
    const eq = arg.indexOf('=');
    if (arg.startsWith('--') && eq > 0) [arg, val] = [arg.slice(0, eq), arg.slice(eq + 1)];
    else if (/^-[suawE]./.test(arg)) [arg, val] = [arg.slice(0, 2), arg.slice(2)];
    if (takes[arg]) {
      if (val === undefined && ++i >= argv.length) throw usageError(`${arg} wants a value`);
      a[takes[arg]] = val === undefined ? argv[i] : val;
      seen.push(takes[arg]);
    } else if ((arg === '-n' || arg === '--try') && val === undefined) {
      a.wait = '0';
      seen.push('wait');
    } else if ((arg === '-q' || arg === '--quiet') && val === undefined) {
      a.quiet = true;
    } else if (arg.startsWith('-') && arg !== '-') {
      throw usageError(`unknown option '${argv[i]}'`);
    } else if (!a.nameGiven) {
      a.name = arg;
      a.nameGiven = true;
    } else {
      throw usageError(`unexpected argument '${argv[i]}'`);
    }
  }
  if (seen.filter((k) => k === 'wait').length > 1) throw usageError('-w and -n exclude each other');
  if (a.s !== undefined && a.u !== undefined) throw usageError('-s and -u exclude each other');
  if (a.s !== undefined && a.s.startsWith('/')) throw usageError('-s wants HOST:PORT; -u is for a socket path');
  const env = process.env;
  const old = ['LOCKBROKER_HOST', 'LOCKBROKER_PORT', 'LOCKBROKER_UNIX'].filter((v) => env[v]);
  if (old.length > 0 && !env.LOCKBROKER_ADDR && a.s === undefined && a.u === undefined)
    throw usageError(`${old.join(', ')}: gone; set LOCKBROKER_ADDR=HOST:PORT (or a socket path)`);
  if (a.E !== undefined) {
    if (!/^\d{1,3}$/.test(a.E) || Number(a.E) > 255) throw usageError('-E wants an exit code, 0-255');
    a.busyExit = Number(a.E);
  }
  try {
    a.addr = parseAddr(a.u !== undefined ? a.u : a.s);
    a.waitMs = a.wait === undefined ? undefined : parseDuration(a.wait, 1000);
    a.ttlMs = a.ttl === undefined ? undefined : parseDuration(a.ttl, 1);
  } catch (err) {
    throw usageError(err.message);
  }
  if (a.ttlMs === 0) throw usageError('--ttl must be above 0');
  return a;
}

function secs(ms) {
  return `${(ms / 1000).toFixed(3).replace(/\.?0+$/, '')} s`;
}

// A TIMEOUT: busy, or the broker could not reach Redis while we waited (it
// says TIMEOUT then too); STATUS tells which.
async function busy(lb, a) {
  try {
    await lb.status(a.name);
  } catch (err) {
    if (err.code === 'UNAVAILABLE' || err.code === 'SHUTDOWN')
      console.error(`lockclient.js: ${a.name}: lock not obtained: the broker cannot reach Redis`);
    throw err;
  }
  if (!a.quiet) {
    const how = a.waitMs === 0 ? ' (tried once)' : a.waitMs ? ` (waited ${secs(a.waitMs)})` : '';
    console.error(`lockclient.js: ${a.name}: lock busy${how}`);
  }
  return a.busyExit;
}

async function demo(a) {
  let secret = process.env.LOCKBROKER_SECRET || undefined;
  if (a.a !== undefined) {
    try {
      secret = require('fs').readFileSync(a.a, 'utf8').split('\n')[0];
    } catch (err) {
      console.error(`lockclient.js: ${err.message}`);
      return EXIT.OSERR;
    }
  }
  const lb = await LockClient.connect({ ...a.addr, secret });
  lb.on('lost', (ev) => console.log(`lost ${ev.name} fence ${ev.fence}: ${ev.reason}`));
  try {
    const grant = await lb.acquire(a.name, { ttl: a.ttlMs, wait: a.waitMs });
    if (grant === null) return await busy(lb, a);
    console.log(`acquired ${a.name} fence ${grant.fence} ttl ${grant.ttl} ms`);
    console.log(`valid: ${await lb.validate(a.name, grant.fence)}`);
    await lb.release(a.name);
    console.log(`released ${a.name}`);
    return 0;
  } finally {
    await lb.quit();
  }
}

// The exit code for what went wrong (docs/clients.md).
function failure(err) {
  if (err.usage) {
    console.error(`lockclient.js: ${err.message}\n${USAGE}`);
    return EXIT.USAGE;
  }
  if (err instanceof LockError) {
    console.error(`lockclient.js: broker: ERR ${err.message}`);
    if (err.code === 'UNAVAILABLE' || err.code === 'SHUTDOWN') return EXIT.UNAVAILABLE;
    return err.code === 'AUTH' || err.code === 'NOAUTH' ? EXIT.AUTH : EXIT.ERROR;
  }
  console.error(`lockclient.js: ${err.message}`);
  return err instanceof TypeError ? EXIT.USAGE : EXIT.UNAVAILABLE;
}

// Demo: node lockclient.js [options] [NAME]; docs/clients.md.
if (require.main === module) {
  (async () => demo(parseArgs(process.argv.slice(2))))()
    .then((code) => { process.exitCode = code; }, (err) => { process.exitCode = failure(err); });
}

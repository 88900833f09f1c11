#!/usr/bin/env node
// A small lockbroker client on Node's `net` module only.
//
//   const { LockClient } = require('./lockclient');
//   const lb = await LockClient.connect({ port: 7878 });  // or { path: '/run/lockbroker.sock' }
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

module.exports = { LockClient, LockError };

// Demo: node lockclient.js [NAME]; LOCKBROKER_HOST, LOCKBROKER_PORT or
// LOCKBROKER_UNIX, LOCKBROKER_SECRET from the environment.
if (require.main === module) {
  (async () => {
    const name = process.argv[2] || 'demo';
    const env = process.env;
    const lb = await LockClient.connect({
      host: env.LOCKBROKER_HOST || '127.0.0.1',
      port: Number(env.LOCKBROKER_PORT || 7878),
      path: env.LOCKBROKER_UNIX || undefined,
      secret: env.LOCKBROKER_SECRET,
    });
    lb.on('lost', (ev) => console.log(`lost ${ev.name} fence ${ev.fence}: ${ev.reason}`));
    try {
      const grant = await lb.acquire(name, { wait: 5000 });
      if (grant === null) {
        console.log(`TIMEOUT: ${name} is held by someone else`);
        process.exitCode = 75;
        return;
      }
      console.log(`acquired ${name} fence ${grant.fence} ttl ${grant.ttl} ms`);
      console.log(`valid: ${await lb.validate(name, grant.fence)}`);
      await lb.release(name);
      console.log(`released ${name}`);
    } finally {
      await lb.quit();
    }
  })().catch((err) => {
    console.error(`lockclient: ${err.message}`);
    process.exitCode = 69;
  });
}

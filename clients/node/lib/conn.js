'use strict';
// One connection to the broker: framing, replies matched to requests in
// order, EVENT LOST lines, and the client's own timeouts. It knows nothing
// of pools or leases; the Client tells it what to send and hears back
// through two hooks (lost, closed).

const net = require('node:net');
const tls = require('node:tls');
const { UnavailableError, ProtocolError, TimeoutError, brokerError } = require('./errors');

// A reply line longer than this is not the protocol (the longest real one,
// a WHO holder, is well under 1 KiB): past it the connection is dropped
// rather than buffered without end.
const MAX_LINE = 64 * 1024;
const ERR_RE = /^ERR ([A-Z]+)(?: (.*))?$/;
const LOST_RE = /^EVENT LOST (\S+) (\d{1,16}) ([a-z]+)$/;

class Conn {
  // hooks: { lost(conn, name, fence, reason), closed(conn, err) }.
  // target: { host, port, tls } or { path }, where tls (if set) holds the
  // options of tls.connect (ca, cert, key); auth: { secret, timeout }.
  constructor(target, auth, hooks) {
    this.hooks = hooks;
    this.pending = []; // requests sent, oldest first: the next reply is pending[0]'s
    this.leases = new Map(); // name -> Lease held through this connection
    this.reserved = new Set(); // names with an ACQUIRE or FILL in flight here
    this.early = new Map(); // name -> { fence, reason }: an EVENT LOST before its grant's reply
    this.blocked = false; // a waiting ACQUIRE/FILL is in flight: only CANCEL may follow it
    this.closed = false;
    this.closing = false; // QUIT sent: nothing more goes behind it
    this.corked = false;
    this.idleSince = Date.now();
    this.chunks = []; // the line being received, not yet ended
    this.chunkBytes = 0;
    this.said = ''; // an ERR the broker sent unasked before closing (idle, auth timeout)
    const sock = target.path ? net.connect(target.path)
      : target.tls ? tls.connect({ ...target.tls, port: target.port, host: target.host,
        servername: net.isIP(target.host) ? undefined : target.host })
        : net.connect(target.port, target.host);
    this.sock = sock;
    sock.setNoDelay(true);
    sock.on('data', (chunk) => this._data(chunk));
    sock.on('error', (err) => this.fail(new UnavailableError(`broker connection: ${err.message}`, 'UNAVAILABLE', true)));
    sock.on('close', () => this._eof());
    // AUTH goes first; requests written behind it run after it. A refusal
    // fails the connection, and with it every request behind.
    if (auth.secret !== undefined) {
      this.request(`AUTH ${auth.secret}`, { parse: expect('OK'), timeout: auth.timeout })
        .catch((err) => this.fail(err));
    }
  }

  // Lines that may still be written behind what is in flight.
  get depth() { return this.pending.length; }

  // Send one request. opts: parse(line) -> value (throws ProtocolError on
  // a reply it does not know), multi (lines up to END, each checked by
  // parse), timeout (ms; Infinity for none), blocking (a waiting request).
  request(line, opts) { return this.send(line, opts).promise; }

  // As request(), but returns the request itself ({ promise }), for rearm().
  send(line, opts) {
    const req = { line, ...opts, lines: [], timer: null };
    req.promise = new Promise((resolve, reject) => { req.resolve = resolve; req.reject = reject; });
    if (this.closed) {
      req.reject(this.error);
      return req;
    }
    this.pending.push(req);
    if (opts.blocking) this.blocked = true;
    this.rearm(req, opts.timeout);
    // The requests of one tick leave in one write (one system call).
    if (!this.corked) {
      this.corked = true;
      this.sock.cork();
      process.nextTick(() => { this.corked = false; this.sock.uncork(); });
    }
    this.sock.write(`${line}\n`);
    return req;
  }

  // (Re)start req's timer: no reply within ms fails the connection, since
  // a late reply could no longer be told from the next request's.
  rearm(req, ms) {
    clearTimeout(req.timer);
    if (req.done || !Number.isFinite(ms)) return;
    req.timer = setTimeout(() => {
      const verb = req.line.split(' ', 1)[0];
      this.fail(new TimeoutError(`${verb}: no reply from the broker within ${ms} ms`));
    }, ms);
  }

  // Close for good: every request in flight is rejected with err, and the
  // Client is told (its leases here are lost).
  fail(err) {
    if (this.closed) return;
    this.closed = true;
    this.error = err;
    this.sock.destroy();
    for (const req of this.pending.splice(0)) {
      req.done = true;
      clearTimeout(req.timer);
      req.reject(err);
    }
    this.chunks = [];
    this.hooks.closed(this, err);
  }

  // QUIT: the broker releases this connection's session and fixed locks at
  // once, rather than as for a client that vanished.
  async quit(ms) {
    if (this.closed) return;
    this.closing = true;
    const done = this.request('QUIT', { parse: expect('OK'), timeout: ms }).catch(() => {});
    await done;
    this.fail(new UnavailableError('client closed', 'CLOSED'));
  }

  _data(chunk) {
    let start = 0;
    let nl;
    while (!this.closed && (nl = chunk.indexOf(10, start)) >= 0) {
      let bytes = chunk.subarray(start, nl);
      if (this.chunkBytes + bytes.length > MAX_LINE) return this._tooLong();
      if (this.chunks.length > 0) {
        bytes = Buffer.concat([...this.chunks, bytes]);
        this.chunks = [];
        this.chunkBytes = 0;
      }
      start = nl + 1;
      let line = bytes.toString('utf8');
      if (line.endsWith('\r')) line = line.slice(0, -1);
      this._line(line);
    }
    if (this.closed || start >= chunk.length) return;
    const rest = chunk.subarray(start);
    if (this.chunkBytes + rest.length > MAX_LINE) return this._tooLong();
    this.chunks.push(rest);
    this.chunkBytes += rest.length;
  }

  _tooLong() {
    this.fail(new ProtocolError(`broker sent a line longer than ${MAX_LINE} bytes`));
  }

  _line(line) {
    const ev = LOST_RE.exec(line);
    if (ev) return this.hooks.lost(this, ev[1], Number(ev[2]), ev[3]);
    const req = this.pending[0];
    if (req === undefined) {
      // Only a closing ERR comes unasked (idle timeout, AUTH timeout).
      if (ERR_RE.test(line)) this.said = line;
      else this.fail(new ProtocolError(`unexpected line from the broker: ${show(line)}`));
      return;
    }
    const err = ERR_RE.exec(line);
    if (req.multi && line !== 'END' && !(err && req.lines.length === 0)) {
      // Every listing line is checked now, so garbage fails at once.
      try { req.lines.push(req.parse(line)); } catch (e) { this.fail(e); }
      if (req.lines.length > 20000) this.fail(new ProtocolError('listing without END'));
      return;
    }
    this.pending.shift();
    req.done = true;
    clearTimeout(req.timer);
    if (req.blocking) this.blocked = false;
    if (this.pending.length === 0) this.idleSince = Date.now();
    if (err) return req.reject(brokerError(err[1], err[2] || ''));
    if (req.multi) return req.resolve(req.lines);
    let value;
    try {
      value = req.parse(line);
    } catch (e) {
      req.reject(e);
      return this.fail(e); // the stream can no longer be trusted
    }
    req.resolve(value);
  }

  _eof() {
    if (this.closed) return;
    if (this.chunkBytes > 0) return this.fail(new ProtocolError('the broker closed the connection in the middle of a reply'));
    const why = this.said ? `: ${this.said}` : '';
    this.fail(new UnavailableError(`the broker closed the connection${why}`, 'UNAVAILABLE', true));
  }
}

// A parse function for a reply that must be exactly `want`.
function expect(want) {
  return (line) => {
    if (line !== want) throw new ProtocolError(`expected ${want}, got ${show(line)}`);
    return line;
  };
}

function show(line) {
  return JSON.stringify(line.length > 80 ? `${line.slice(0, 80)}...` : line);
}

module.exports = { Conn, expect, show, MAX_LINE };

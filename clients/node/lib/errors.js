'use strict';
// Every error the library throws is a LockError; the subclasses are what a
// caller tests with `instanceof`. `code` is the broker's ERR code when the
// broker sent one (ARGS, NAME, HELD, LIMIT, ...), else the library's word.

class LockError extends Error {
  constructor(message, code, options) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

// Not granted within the wait (the broker said TIMEOUT), or held at once
// for a try (wait 0).
class BusyError extends LockError {
  constructor(message) { super(message, 'BUSY'); }
}

// The broker cannot be reached, closed the connection, cannot reach Redis
// (ERR UNAVAILABLE), or is stopping (ERR SHUTDOWN). `disconnected` is true
// when the connection broke before the reply: the request may have run.
class UnavailableError extends LockError {
  constructor(message, code = 'UNAVAILABLE', disconnected = false) {
    super(message, code);
    this.disconnected = disconnected;
  }
}

// A lease is gone. `reason` is the broker's word (expired, stolen, revoked,
// unavailable, maxhold) or the library's: disconnected, closed.
class LostError extends LockError {
  constructor(name, fence, reason) {
    super(`${name}: lock lost (${reason})`, 'LOST');
    this.lock = name;
    this.fence = fence;
    this.reason = reason;
  }
}

// RELEASE or EXTEND: this token does not hold the lock (ERR NOTHELD).
class NotHeldError extends LockError {
  constructor(message) { super(message, 'NOTHELD'); }
}

// The secret was refused (ERR AUTH) or is needed (ERR NOAUTH).
class AuthError extends LockError {}

// A reply that is not the protocol: garbage, a line over the bound, the
// connection ending in the middle of a line, or the broker's ERR PROTO.
class ProtocolError extends LockError {
  constructor(message) { super(message, 'PROTO'); }
}

// The caller's AbortSignal ended the wait. Named and coded as the DOM's
// AbortError, so code that checks `err.name === 'AbortError'` works too.
class CancelledError extends LockError {
  constructor(message = 'the operation was aborted', options) {
    super(message, 'ABORT_ERR', options);
    this.name = 'AbortError';
  }
}

// No reply within the client's own timeout. The connection it was sent on
// is closed, since its replies can no longer be matched to requests.
class TimeoutError extends LockError {
  constructor(message) { super(message, 'TIMEOUT'); }
}

// `ERR <CODE> <text>` as the error a caller can test.
function brokerError(code, text) {
  const message = `${code} ${text}`.trim();
  switch (code) {
    case 'UNAVAILABLE': case 'SHUTDOWN': return new UnavailableError(message, code);
    case 'NOTHELD': return new NotHeldError(message);
    case 'AUTH': case 'NOAUTH': return new AuthError(message, code);
    case 'PROTO': return new ProtocolError(message);
    default: return new LockError(message, code);
  }
}

module.exports = {
  LockError, BusyError, UnavailableError, LostError, NotHeldError, AuthError,
  ProtocolError, CancelledError, AbortError: CancelledError, TimeoutError, brokerError,
};

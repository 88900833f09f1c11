'use strict';
// lockbroker: a client for lockbrokerd (docs/protocol.md), on Node's
// standard library only. See README.md.
const { Client, createClient, Lease, parseAddr } = require('./lib/client');
const {
  LockError, BusyError, UnavailableError, LostError, NotHeldError, AuthError,
  ProtocolError, CancelledError, AbortError, TimeoutError,
} = require('./lib/errors');

// Listed by name, so that ESM's `import { Client } from 'lockbroker'` sees them.
module.exports = {
  Client, createClient, Lease, parseAddr,
  LockError, BusyError, UnavailableError, LostError, NotHeldError, AuthError,
  ProtocolError, CancelledError, AbortError, TimeoutError,
};

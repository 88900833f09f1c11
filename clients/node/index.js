'use strict';
// lockbroker: a client for lockbrokerd (docs/protocol.md), on Node's
// standard library only. See README.md.
const { Client, createClient, Lease, parseAddr } = require('./lib/client');
const errors = require('./lib/errors');

module.exports = {
  Client, createClient, Lease, parseAddr,
  LockError: errors.LockError,
  BusyError: errors.BusyError,
  UnavailableError: errors.UnavailableError,
  LostError: errors.LostError,
  NotHeldError: errors.NotHeldError,
  AuthError: errors.AuthError,
  ProtocolError: errors.ProtocolError,
  CancelledError: errors.CancelledError,
  AbortError: errors.AbortError,
  TimeoutError: errors.TimeoutError,
};

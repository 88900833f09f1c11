// Type definitions for lockbroker (hand-written; see README.md).

export interface ClientOptions {
  /** 'HOST:PORT', '[V6]:PORT', 'HOST' (port 7878) or a Unix socket '/PATH'.
   *  Default: $LOCKBROKER_ADDR, else '127.0.0.1:7878'. */
  addr?: string;
  /** Sent with AUTH on every connection. Default: $LOCKBROKER_SECRET. */
  secret?: string;
  /** Milliseconds a reply may take beyond the request's own wait. Default 5000. */
  timeout?: number;
  /** Connections this client may open at most. Default 1000. */
  maxConnections?: number;
  /** The broker's limits.max_locks_per_client. Default 64. */
  maxLocksPerConnection?: number;
  /** TLS: a PEM file of the CAs that sign the broker's certificate, which
   *  must name the host. Default: $LOCKBROKER_CA; neither: no TLS. */
  ca?: string;
  /** With ca, a client certificate and its key (PEM files). Default:
   *  $LOCKBROKER_CERT, $LOCKBROKER_KEY. */
  cert?: string;
  key?: string;
}

export interface RequestOptions {
  /** Overrides the client's timeout for this request. */
  timeout?: number;
}

export interface FillOptions extends RequestOptions {
  /** Milliseconds to wait: 0 tries once; Infinity waits until granted;
   *  undefined waits as the broker's locks.default_wait_ms says. */
  wait?: number;
  /** A fixed lease in ms instead of a session lock (renewed while connected). */
  ttl?: number;
  /** Your own token (1-64 of A-Z a-z 0-9 _ . -); one is made if not given. */
  token?: string;
  /** Aborting it cancels the wait (CANCEL); the promise rejects with CancelledError. */
  signal?: AbortSignal;
}

export interface AcquireOptions extends FillOptions {
  /** The lock outlives its connection (needs ttl). */
  keep?: boolean;
  /** Any number of shared holders, no exclusive one. */
  shared?: boolean;
  /** At most this many holders with the same limit (1-10000). */
  limit?: number;
}

export type LeaseKind = 'session' | 'fixed' | 'keep';
export type LeaseMode = 'exclusive' | 'shared' | 'limit' | 'fill';
export type LostReason =
  | 'expired' | 'stolen' | 'revoked' | 'unavailable' | 'maxhold'
  | 'disconnected' | 'closed' | (string & {});

export class Lease {
  private constructor();
  readonly name: string;
  /** Strictly above every earlier grant's fence for this name. */
  readonly fence: number;
  readonly token: string;
  /** The lease set in Redis, ms (updated by extend). */
  readonly ttl: number;
  readonly kind: LeaseKind;
  readonly mode: LeaseMode;
  /** Aborted when the lock is lost; its reason is a LostError. */
  readonly signal: AbortSignal;
  /** Neither released nor lost. */
  readonly held: boolean;
  /** Why it was lost, or null. */
  readonly lostReason: LostReason | null;
  /** Milliseconds it may still be counted on: Infinity for a held session lock, 0 once gone. */
  readonly validity: number;
  /** true when released, false when it was no longer held. */
  release(): Promise<boolean>;
  /** Sets a fixed or kept lease to ms from now; resolves the new ttl. */
  extend(ms: number, opts?: RequestOptions): Promise<number>;
}

export interface Status {
  ttl: number;
  fence: number;
  mode: 'exclusive' | 'shared' | 'limit';
  limit: number | undefined;
  holders: number;
}

export interface Holder {
  fence: number | null;
  ttl: number;
  mode: 'exclusive' | 'fill' | 'shared' | `limit=${number}` | null;
  broker: string | null;
  client: string | null;
  since: string | null;
}

export interface HeldLock {
  name: string;
  fence: number;
  ttl: number;
  kind: LeaseKind;
  mode: string;
}

export class Client {
  constructor(opts?: ClientOptions);
  readonly timeout: number;
  readonly closed: boolean;
  acquire(name: string, opts?: AcquireOptions): Promise<Lease>;
  /** A Lease when this caller leads (do the work, then release), null when a leader did it. */
  fill(name: string, opts?: FillOptions): Promise<Lease | null>;
  withLock<T>(name: string, fn: (lease: Lease) => T | Promise<T>): Promise<T>;
  withLock<T>(name: string, opts: AcquireOptions, fn: (lease: Lease) => T | Promise<T>): Promise<T>;
  /** By token, from any connection. Rejects with NotHeldError if the token does not hold it. */
  release(name: string, opts: RequestOptions & { token: string }): Promise<void>;
  extend(name: string, ms: number, opts: RequestOptions & { token: string }): Promise<number>;
  validate(name: string, fence: number, opts?: RequestOptions & { token?: string }): Promise<boolean>;
  who(name: string, opts?: RequestOptions): Promise<Holder[]>;
  status(name: string, opts?: RequestOptions): Promise<Status | null>;
  /** Needs the admin secret; resolves how many held it. */
  revoke(name: string, opts?: RequestOptions): Promise<number>;
  ping(opts?: RequestOptions): Promise<void>;
  info(opts?: RequestOptions): Promise<Record<string, string>>;
  locks(opts?: RequestOptions): Promise<HeldLock[]>;
  close(): Promise<void>;
}

export function createClient(opts?: ClientOptions): Client;
export function parseAddr(addr: string): { host: string; port: number } | { path: string };

export class LockError extends Error {
  /** The broker's ERR code (ARGS, NAME, HELD, LIMIT, ...) or the library's word. */
  readonly code: string;
}
export class BusyError extends LockError {}
export class UnavailableError extends LockError {
  /** The connection broke before the reply: the request may have run. */
  readonly disconnected: boolean;
}
export class LostError extends LockError {
  readonly lock: string;
  readonly fence: number;
  readonly reason: LostReason;
}
export class NotHeldError extends LockError {}
export class AuthError extends LockError {}
export class ProtocolError extends LockError {}
/** name 'AbortError', code 'ABORT_ERR'. */
export class CancelledError extends LockError {}
export { CancelledError as AbortError };
export class TimeoutError extends LockError {}

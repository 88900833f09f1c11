// Compiled, never run: `tsc --noEmit -p test` checks index.d.ts against
// the way the README uses the library.
import {
  Client, createClient, Lease, LockError, BusyError, UnavailableError, LostError,
  NotHeldError, AuthError, ProtocolError, CancelledError, AbortError, TimeoutError, parseAddr,
} from '..';

async function use(): Promise<number> {
  const c: Client = new Client({ addr: '127.0.0.1:7878', secret: 's', timeout: 1000 });
  const d = createClient();
  const ac = new AbortController();
  const lease: Lease = await c.acquire('n', { wait: 500, ttl: 3000, keep: true, token: 't', signal: ac.signal });
  const f: number = lease.fence;
  const v: number = lease.validity;
  lease.signal.addEventListener('abort', () => {
    const why = lease.signal.reason as LostError;
    const r: string = why.reason;
    return r;
  });
  const ttl: number = await lease.extend(2000);
  const released: boolean = await lease.release();
  const leader: Lease | null = await c.fill('f', { wait: 100 });
  const n: number = await c.withLock('n', { shared: true }, async (l) => l.fence);
  const m: string = await c.withLock('n', (l) => l.token);
  const ok: boolean = await c.validate('n', f, { token: 't' });
  const holders = await c.who('n');
  const h: number | null = holders[0].fence;
  const st = await c.status('n');
  const k: number = st === null ? 0 : st.holders + (st.limit ?? 0);
  const revoked: number = await c.revoke('n');
  await c.release('n', { token: 't' });
  await c.extend('n', 100, { token: 't' });
  const stats: Record<string, string> = await c.info();
  const locks = await c.locks();
  const a = parseAddr('/run/lb.sock');
  try {
    await c.acquire('x', { limit: 2 });
  } catch (err) {
    if (err instanceof BusyError || err instanceof UnavailableError || err instanceof NotHeldError ||
        err instanceof AuthError || err instanceof ProtocolError || err instanceof CancelledError ||
        err instanceof AbortError || err instanceof TimeoutError) {
      const code: string = (err as LockError).code;
      return code.length;
    }
    if (err instanceof UnavailableError && err.disconnected) return 1;
  }
  await c.close();
  await d.close();
  return f + v + ttl + n + m.length + k + revoked + Number(ok) + Number(released) + (h ?? 0) +
    (leader ? 1 : 0) + locks.length + Object.keys(stats).length + ('path' in a ? 1 : 0);
}
use();

#!/usr/bin/env node
'use strict';
// Uncontended acquire/release cycles per second, and this process's CPU
// seconds per cycle, with N workers (each its own name) sharing one Client.
//
//   node bench.js [--workers N] [--seconds S]
//
// Against $LOCKBROKER_ADDR (and $LOCKBROKER_SECRET) when set; otherwise it
// starts clients/testenv.py (a private redis-server and lockbrokerd) for the
// run. Prints one JSON line.

const { performance } = require('node:perf_hooks');
const { Client } = require('.');
const { TestEnv } = require('./harness');

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
}

async function main() {
  const workers = arg('workers', 8);
  const seconds = arg('seconds', 5);
  const env = process.env.LOCKBROKER_ADDR ? null : await TestEnv.start();
  const c = new Client(env ? { addr: env.hello.addr, secret: env.hello.secret } : {});
  try {
    // One cycle per worker first, so connections are open before the clock starts.
    const names = Array.from({ length: workers }, (_, i) => `bench-${process.pid}-${i}`);
    await Promise.all(names.map(async (n) => (await c.acquire(n)).release()));
    let cycles = 0;
    const end = performance.now() + seconds * 1000;
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await Promise.all(names.map(async (n) => {
      while (performance.now() < end) {
        const lease = await c.acquire(n, { wait: 0 });
        await lease.release();
        cycles += 1;
      }
    }));
    const elapsed = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const cpuS = (cpu.user + cpu.system) / 1e6;
    console.log(JSON.stringify({
      client: 'node', node: process.version, workers, seconds: Number(elapsed.toFixed(3)), cycles,
      cycles_per_s: Math.round(cycles / elapsed),
      cpu_s_per_cycle: Number((cpuS / cycles).toExponential(3)),
      connections: c.conns.length,
    }));
  } finally {
    await c.close();
    if (env) await env.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});

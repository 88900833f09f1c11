'use strict';
// The shared test world for the tests and the benchmark: clients/testenv.py
// (a private redis-server and lockbrokerd) run as a child process, spoken
// to over its stdin and stdout, one JSON line each way per command.

const { spawn } = require('node:child_process');
const path = require('node:path');
const readline = require('node:readline');

const ROOT = path.resolve(__dirname, '..', '..');

class TestEnv {
  // Resolves once testenv.py printed its first line (the addresses).
  static async start({ timeout = 60000 } = {}) {
    const env = new TestEnv();
    env.hello = await env._next(timeout);
    return env;
  }

  constructor() {
    this.proc = spawn('python3', [path.join(ROOT, 'clients', 'testenv.py')], {
      cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'],
    });
    this.lines = [];
    this.waiting = [];
    this.chain = Promise.resolve();
    this.exited = new Promise((resolve) => this.proc.on('exit', (code) => {
      for (const w of this.waiting.splice(0)) w.reject(new Error(`testenv.py exited (${code})`));
      resolve(code);
    }));
    readline.createInterface({ input: this.proc.stdout }).on('line', (line) => {
      const w = this.waiting.shift();
      if (w) w.resolve(line);
      else this.lines.push(line);
    });
  }

  _next(timeout) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('testenv.py did not answer')), timeout);
      const done = (f) => (v) => { clearTimeout(timer); f(v); };
      if (this.lines.length > 0) return done(resolve)(this.lines.shift());
      this.waiting.push({ resolve: done(resolve), reject: done(reject) });
    }).then((line) => JSON.parse(line));
  }

  // One command (see testenv.py); resolves its JSON answer, rejects when
  // it is {"ok": false}. Commands go one at a time, in call order.
  cmd(line, { timeout = 60000 } = {}) {
    const run = this.chain.then(async () => {
      this.proc.stdin.write(`${line}\n`);
      const out = await this._next(timeout);
      if (!out.ok) throw new Error(`testenv ${line}: ${out.error}`);
      return out;
    });
    this.chain = run.catch(() => {});
    return run;
  }

  async stop() {
    if (this.proc.exitCode === null) this.proc.stdin.end('quit\n');
    const killer = setTimeout(() => this.proc.kill('SIGKILL'), 20000);
    await this.exited;
    clearTimeout(killer);
  }
}

// Resolves pred()'s first truthy value, polled until the deadline.
async function waitFor(pred, timeout = 10000, what = 'condition') {
  const end = Date.now() + timeout;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

module.exports = { TestEnv, waitFor, ROOT };

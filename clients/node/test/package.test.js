'use strict';
// `npm pack` makes a tarball that installs into an empty project, offline,
// and works there from CommonJS, ESM and TypeScript. Skipped where npm (or
// tsc, for its part) is not installed.

const { it } = require('node:test');
const assert = require('node:assert');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const HERE = path.resolve(__dirname, '..');
const has = (cmd) => {
  try {
    execFileSync(cmd, ['--version'], { stdio: 'ignore' });
    return true;
  } catch (err) {
    return false;
  }
};

it('packs, installs offline into an empty project, and loads there', { skip: !has('npm') && 'no npm' }, () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lockbroker-pack-'));
  try {
    const run = (cmd, args, cwd) => execFileSync(cmd, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    const tgz = run('npm', ['pack', '--silent', '--pack-destination', tmp], HERE).trim().split('\n').pop();
    const proj = path.join(tmp, 'proj');
    fs.mkdirSync(proj);
    fs.writeFileSync(path.join(proj, 'package.json'), '{"name": "proj", "version": "1.0.0", "private": true}\n');
    run('npm', ['install', '--offline', '--no-audit', '--no-fund', path.join(tmp, tgz)], proj);
    const files = fs.readdirSync(path.join(proj, 'node_modules', 'lockbroker')).sort();
    assert.deepStrictEqual(files, ['README.md', 'index.d.ts', 'index.js', 'lib', 'package.json']);
    const cjs = run('node', ['-e', `const lb = require('lockbroker');
      const c = new lb.Client({ addr: '/nowhere.sock' });
      console.log(typeof c.acquire, new lb.CancelledError().name, Object.keys(lb).length)`], proj);
    assert.strictEqual(cjs.trim(), 'function AbortError 14');
    fs.writeFileSync(path.join(proj, 'm.mjs'), "import { Client, BusyError } from 'lockbroker';\nconsole.log(typeof Client, typeof BusyError);\n");
    assert.strictEqual(run('node', ['m.mjs'], proj).trim(), 'function function');
    if (has('tsc')) {
      fs.writeFileSync(path.join(proj, 't.ts'), "import { Client, Lease } from 'lockbroker';\n" +
        "new Client({ timeout: 1000 }).acquire('x', { wait: 5 }).then((l: Lease) => l.release());\n");
      run('tsc', ['--noEmit', '--strict', '--lib', 'es2020,dom', 't.ts'], proj);
    }
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

#!/usr/bin/env node
'use strict';
// Runs a job under the lock "nightly-report" and prints its fence.
//   LOCKBROKER_ADDR=127.0.0.1:7878 LOCKBROKER_SECRET=... node example.js
const { Client, BusyError } = require('lockbroker');

async function main() {
  const client = new Client(); // $LOCKBROKER_ADDR, $LOCKBROKER_SECRET
  try {
    await client.withLock('nightly-report', { wait: 5000 }, async (lease) => {
      console.log(`holding nightly-report, fence ${lease.fence}`);
      // Pass lease.fence with every write, so that the resource refuses a
      // writer whose lease ran out; lease.signal says when the lock is lost.
      await new Promise((resolve) => setTimeout(resolve, 500));
      if (lease.signal.aborted) throw lease.signal.reason;
    });
    return 0;
  } catch (err) {
    if (!(err instanceof BusyError)) throw err;
    console.error('nightly-report: lock busy (waited 5 s)');
    return 75;
  } finally {
    await client.close();
  }
}

main().then((code) => { process.exitCode = code; }, (err) => {
  console.error(`example: ${err.message}`);
  process.exitCode = 69;
});

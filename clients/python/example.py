#!/usr/bin/env python3
"""Run a job under a lock and print its fence.

    LOCKBROKER_ADDR=127.0.0.1:7878 LOCKBROKER_SECRET=... python3 example.py

Exit 75 if another process holds the lock past the wait, 69 if the broker
or its Redis cannot be reached (the codes of docs/clients.md)."""

import sys

import lockbroker


def job(lease):
    # Send the fence with every write: the resource then refuses a holder
    # that lost the lock without knowing (docs/protocol.md §5).
    print("holding %s with fence %d" % (lease.name, lease.fence))
    if lease.lost.is_set():
        raise lockbroker.Lost(lease.lost_reason)


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "example"
    try:
        with lockbroker.Client() as client:
            client.run_locked(name, job, wait=5.0)
    except lockbroker.Busy:
        print("%s: lock busy" % name, file=sys.stderr)
        return 75
    except (lockbroker.Unavailable, lockbroker.Timeout) as e:
        print("%s: %s" % (name, e), file=sys.stderr)
        return 69
    return 0


if __name__ == "__main__":
    sys.exit(main())

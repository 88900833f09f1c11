#!/usr/bin/env python3
"""Many brokers on one Redis (docs/operations.md, A fleet of brokers): what
each broker costs Redis when it holds nothing or little, and that an event
reaches only the brokers it concerns."""

import time

from lbtest import BrokerTest, main

TRUST_MS = 600


def changes(redis):
    """Redis's writes since its last save (INFO persistence)."""
    info = redis("INFO", "persistence")
    return int(info.split("rdb_changes_since_last_save:")[1].split("\r")[0])


def calls(redis, command):
    """How many times Redis ran command (INFO commandstats)."""
    info = redis("INFO", "commandstats")
    key = "cmdstat_%s:calls=" % command
    return int(info.split(key)[1].split(",")[0]) if key in info else 0


class Beat(BrokerTest):
    conf = {"redis": {"trust_ms": TRUST_MS}}

    def test_beats_write_nothing(self):
        """The trust beat (every trust_ms / 4) and the confirmations of a
        broker's holds read; they write nothing, which a thousand brokers
        would each add to the AOF and to the replicas' stream."""
        c = self.client()
        self.assertRegex(c.cmd("ACQUIRE held TTL 60000"), r"^OK ")
        time.sleep(TRUST_MS / 1000.0)
        before, scripts = changes(self.redis), calls(self.redis, "evalsha")
        time.sleep(3 * TRUST_MS / 1000.0)
        self.assertEqual(changes(self.redis), before)
        # It did beat meanwhile: every 150 ms.
        self.assertGreaterEqual(calls(self.redis, "evalsha") - scripts, 6)
        self.assertEqual(c.cmd("RELEASE held"), "OK")


if __name__ == "__main__":
    main()

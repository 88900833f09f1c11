"""A Redis above its maxmemory (docs/internals.md, Scripts: each script's
flags): grants are refused before anything is written, while releases,
renewals, the beat and REVOKE go on, so holders keep their locks."""

from lbtest import BrokerTest, holds_for, main


class FullRedis(BrokerTest):
    # A beat every 500 ms and a renewal every second: two seconds without
    # either lose the hold (EVENT LOST).
    conf = {"redis": {"trust_ms": 2000, "clock_step_ms": 100},
            "locks": {"lease_ms": 3000}}

    def lock_keys(self):
        return sorted(self.redis("KEYS", "lockbroker:*"))

    def fill(self):
        """maxmemory below what Redis uses (noeviction): every write that
        may take memory is refused, until the cleanup lifts it."""
        used = int(self.redis("INFO", "memory").split(
            "used_memory:")[1].split("\r")[0])
        self.assertEqual(self.redis("CONFIG", "SET", "maxmemory",
                                    used // 2), "OK")
        self.addCleanup(self.redis, "CONFIG", "SET", "maxmemory", "0")

    def test_grants_refused_holds_kept(self):
        holder, other = self.client(), self.client()
        self.assertRegex(holder.cmd("ACQUIRE held"), r"^OK ")
        self.assertRegex(holder.cmd("ACQUIRE gone TTL 60000"), r"^OK ")
        self.assertEqual(other.cmd("PING"), "PONG")
        self.fill()
        before = self.lock_keys()
        oom = "ERR UNAVAILABLE Redis answered OOM"
        self.assertEqual(other.cmd("ACQUIRE free WAIT 0"), oom)
        self.assertEqual(other.cmd("ACQUIRE free SHARED WAIT 0"), oom)
        # A waiter's tries, which would leave its ticket and marks, are
        # refused too: it keeps trying until its WAIT ends (protocol §6).
        self.assertEqual(other.cmd("ACQUIRE held WAIT 500"), "TIMEOUT")
        self.assertEqual(self.lock_keys(), before)
        # Renewals and beats go on: the session lock outlives its lease
        # several times over, its holder told nothing.
        key = "lockbroker:{held}"
        holds_for(lambda: self.redis("EXISTS", key) == 1, 6.5,
                  "the session lock renewed in a full Redis")
        # (an EVENT LOST would be the next line, not STATUS's answer)
        self.assertRegex(holder.cmd("STATUS held"), r"^OK HELD ")
        self.assertEqual(holder.cmd("RELEASE gone"), "OK")
        self.assertIsNone(self.redis("GET", "lockbroker:{gone}"))
        self.assertEqual(holder.cmd("RELEASE held"), "OK")
        self.assertIsNone(self.redis("GET", key))
        self.assertEqual(self.lock_keys(), sorted(
            k for k in before if k not in (key, "lockbroker:{gone}")))
        self.assertEqual(self.redis("CONFIG", "SET", "maxmemory", "0"), "OK")
        self.assertRegex(other.cmd("ACQUIRE free WAIT 0"), r"^OK ")


if __name__ == "__main__":
    main()

"""Fences strictly increase per name: over many grants by several
connections, across brokers sharing a Redis, and across a broker restart."""

import threading

from lbtest import BrokerTest, main


class Fencing(BrokerTest):

    def grant_loop(self, client, name, count, fences, errors):
        while len(fences) < count:
            reply = client.cmd("ACQUIRE %s WAIT 0" % name)
            if reply == "TIMEOUT":
                continue
            parts = reply.split()
            if parts[0] != "OK":
                errors.append(reply)
                return
            fences.append(int(parts[1]))
            # The fence we hold is the current one until we release.
            if client.cmd("VALIDATE %s %s" % (name, parts[1])) != "OK VALID":
                errors.append("not valid while held")
            if client.cmd("RELEASE " + name) != "OK":
                errors.append("release failed")

    def test_1000_grants_by_several_connections(self):
        second = self.start_broker(name="second")
        clients = [self.client() for _ in range(3)] + \
                  [self.client(second) for _ in range(3)]
        fences, errors = [], []
        threads = [threading.Thread(target=self.grant_loop,
                                    args=(c, "hot", 1000, fences, errors))
                   for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])
        self.assertGreaterEqual(len(fences), 1000)
        # list.append is atomic, and each grant happened-before the next one
        # (its holder released first), so grant order is list order.
        self.assertEqual(fences, sorted(fences))
        self.assertEqual(len(set(fences)), len(fences))
        last = int(self.redis("GET", "lockbroker:{hot}:fence"))
        self.assertEqual(last, fences[-1])

    def test_fences_increase_across_restart(self):
        a = self.client()
        first = int(a.cmd("ACQUIRE r").split()[1])
        a.close()
        self.clients.remove(a)
        self.assertEqual(self.broker.stop(), 0)
        self.broker.start()
        b = self.client()
        second = int(b.cmd("ACQUIRE r").split()[1])
        self.assertGreater(second, first)
        # A lock released by a broker that was killed (no RELEASE) frees
        # itself with its lease, and the next grant still gets a new fence.
        self.assertEqual(b.cmd("RELEASE r"), "OK")
        c = self.client()
        third = int(c.cmd("ACQUIRE r TTL 200").split()[1])
        self.assertGreater(third, second)


if __name__ == "__main__":
    main()

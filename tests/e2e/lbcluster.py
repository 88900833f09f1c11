"""A real Redis Cluster on loopback, for the end-to-end tests and the chaos
driver: masters with their replicas on free ports whose bus ports (port +
10000) are free too, formed, resharded, failed over, killed and paused by
the same commands an operator would use, every step waited on as an event
(each node's own account of the cluster), never by a fixed sleep.
Standard library only, and no unittest: a chaos driver uses it as it is.

    with Cluster(tmpdir) as c:        # 3 masters, 1 replica each
        port = c.master_of(slot_of("lockbroker:{x}"))
        c.move_slot(slot, other_port)
        c.failover(port, "FORCE")
"""

import atexit
import binascii
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile

from lbtest import REDIS_SERVER, Redis, free_port, holds_for, wait_until

SLOTS = 16384
BUS_OFFSET = 10000  # a node's cluster bus port is its port + 10000
SETTLE_S = 30  # the longest any change of the cluster may take to settle


def crc16(data):
    """CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis's
    crc16.c; binascii's crc_hqx is that CRC."""
    return binascii.crc_hqx(data, 0)


def slot_of(key):
    """Redis's keyHashSlot: CRC16 of the key, or of its hash tag (what is
    between the first "{" and the first "}" after it, when that is not
    empty), mod 16384."""
    k = key if isinstance(key, bytes) else key.encode()
    start = k.find(b"{")
    if start >= 0:
        end = k.find(b"}", start + 1)
        if end > start + 1:
            k = k[start + 1:end]
    return crc16(k) & (SLOTS - 1)


def lock_key(name, prefix="lockbroker:"):
    """A name's lock key (src/lockdb_script.c, lockdb_key): every key of
    the name has this hash tag, so the name lives in this key's slot."""
    return "%s{%s}" % (prefix, name)


def slot_of_name(name, prefix="lockbroker:"):
    return slot_of(lock_key(name, prefix))


_tags = None


def slot_tag(slot):
    """The tag src/slot.c gives slot (tags of one to four of [0-9a-z] in
    order, the first that lands in a slot without one): the slot's own
    keys, as its incarnation marker "<prefix>{<tag>}incarnation"."""
    global _tags
    if _tags is None:
        abc, tags, left = "0123456789abcdefghijklmnopqrstuvwxyz", {}, SLOTS
        for n in range(1, 5):
            for t in itertools.product(abc, repeat=n):
                tag = "".join(t)
                s = crc16(tag.encode()) & (SLOTS - 1)
                if s not in tags:
                    tags[s] = tag
                    left -= 1
                    if not left:
                        break
            if not left:
                break
        _tags = tags
    return _tags[slot]


def cluster_port():
    """A free loopback port whose bus port is free too."""
    while True:
        port = free_port()
        if port + BUS_OFFSET > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + BUS_OFFSET))
            except OSError:
                continue
        return port


def ok(reply, what):
    """reply must be OK (Resp gives errors as RuntimeError values)."""
    if reply != "OK":
        raise AssertionError("%s: %r" % (what, reply))
    return reply


class View:
    """One node's account of the cluster (CLUSTER NODES): every node it
    knows by port, with its id, flags, master and slots."""

    def __init__(self, text):
        self.nodes = {}   # port -> dict(id, flags, master id, ranges)
        self.by_id = {}   # id -> port
        self.me = None
        self.open = []    # this node's [slot->-id] / [slot-<-id] entries
        for line in text.splitlines():
            f = line.split()
            addr = f[1].split("@")[0].split(",")[0]
            port = int(addr.rsplit(":", 1)[1]) if ":" in addr else 0
            ranges = []
            for s in f[8:]:
                if s.startswith("["):
                    self.open.append(s)
                    continue
                lo, _, hi = s.partition("-")
                ranges.append((int(lo), int(hi or lo)))
            flags = set(f[2].split(","))
            self.nodes[port] = dict(id=f[0], flags=flags,
                                    master=None if f[3] == "-" else f[3],
                                    ranges=ranges, link=f[7])
            self.by_id[f[0]] = port
            if "myself" in flags:
                self.me = port

    def slot_map(self):
        """((lo, hi, owner port), ...) in slot order."""
        return tuple(sorted((lo, hi, p) for p, n in self.nodes.items()
                            for lo, hi in n["ranges"]))

    def owner(self, slot):
        for lo, hi, p in self.slot_map():
            if lo <= slot <= hi:
                return p
        return None

    def opens(self, slot):
        """Whether this node has slot open: MIGRATING or IMPORTING."""
        return any(o[1:].split("-")[0] == str(slot) for o in self.open)

    def master_port(self, port):
        """The port of the master that port replicates (None: a master)."""
        m = self.nodes[port]["master"]
        return self.by_id.get(m) if m else None

    def failing(self, port):
        return bool(self.nodes[port]["flags"] & {"fail", "fail?",
                                                 "handshake", "noaddr"})


class ClusterNode(Redis):
    """One redis-server of a cluster: lbtest's Redis (its connect, call,
    client_list, kill) started in cluster mode in a directory of its own,
    on a port whose bus port is free. Never seeded itself: the cluster
    seeds each slot's marker (Cluster.seed_incarnation)."""

    def __init__(self, tmpdir, extra, password):
        self.placed = False  # its port is in nodes.conf: keep it
        super().__init__(tmpdir, port=cluster_port(), extra=extra,
                         password=password, seed=False)

    def start(self):
        # Another test's server may take the port (or its bus port) before
        # ours binds it: ours exits, and a node not yet in a cluster tries
        # another; a restarted one must keep the port the others know.
        for _ in range(5):
            args = [REDIS_SERVER, "--port", str(self.port), "--bind",
                    "127.0.0.1", "--save", "", "--appendonly", "no",
                    "--dir", self.tmpdir, "--logfile",
                    os.path.join(self.tmpdir, "redis.log"),
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf"] + self.extra
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL)
            wait_until(lambda: self.proc.poll() is not None or self.ours(),
                       10, "redis-server on port %d" % self.port)
            if self.proc.poll() is None or self.placed:
                break
            self.port = cluster_port()
        wait_until(self.ours, 10, "redis-server on port %d" % self.port)
        self.placed = True

    def running(self):
        return self.proc is not None and self.proc.poll() is None


class Migration:
    """A slot being moved from src to dst (ports), and the keys moved."""

    def __init__(self, slot, src, dst):
        self.slot, self.src, self.dst, self.moved = slot, src, dst, []
        self.finished = False


class Cluster:
    """masters masters with replicas replicas each, formed and settled.
    node_timeout_ms is cluster-node-timeout: a killed or stopped master's
    replica is promoted about that long after (plus the election, about
    a second). extra: more redis-server arguments for every node.
    password: requirepass and masterauth of every node (MIGRATE sends it).
    seed: mark every slot's lock data as an incarnation past its grace
    period (lbtest's Redis.seed_incarnation, per slot), so that a test's
    first grant on a slot need not wait for it."""

    def __init__(self, tmpdir, masters=3, replicas=1, node_timeout_ms=1500,
                 extra=(), password=None, seed=True, prefix="lockbroker:"):
        self.dir = tempfile.mkdtemp(prefix="cluster-", dir=tmpdir)
        self.password = password
        self.nodes = {}     # port -> ClusterNode, masters first
        self.ids = {}       # port -> node id
        self.paused = set()
        args = ["--cluster-node-timeout", str(node_timeout_ms),
                # A replica's full sync starts at once, not 5 s later.
                "--repl-diskless-sync-delay", "0"]
        if password:
            args += ["--requirepass", password, "--masterauth", password]
        args += list(extra)
        atexit.register(self.stop)
        try:
            for i in range(masters * (1 + replicas)):
                d = os.path.join(self.dir, "node%d" % i)
                os.mkdir(d)
                n = ClusterNode(d, args, password)
                self.nodes[n.port] = n
            self._form(masters)
            if seed:
                self.seed_incarnation(prefix)
        except BaseException:
            self.stop()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        """Kill every node (paused ones too) and remove their files."""
        for n in self.nodes.values():
            n.kill()
        self.paused.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- forming ---------------------------------------------------------

    def _form(self, masters):
        """Slots, epochs and MEET by hand rather than redis-cli --cluster
        create: which port is which shard's master is ours to say (redis-cli
        shuffles replicas to avoid hosts it sees as one), each master gets a
        distinct config epoch before it meets anyone (no collisions to
        resolve), and every step is waited on as an event, where redis-cli
        polls once a second."""
        ports = list(self.nodes)
        for i, p in enumerate(ports):
            self.ids[p] = self.node(p)("CLUSTER", "MYID")
            ok(self.node(p)("CLUSTER", "SET-CONFIG-EPOCH", i + 1),
               "SET-CONFIG-EPOCH on %d" % p)
        for i, p in enumerate(ports[:masters]):
            lo, hi = i * SLOTS // masters, (i + 1) * SLOTS // masters - 1
            ok(self.node(p)("CLUSTER", "ADDSLOTSRANGE", lo, hi),
               "ADDSLOTSRANGE on %d" % p)
        # Each meets every other: a handshake takes one turn of the
        # nodes' cron (100 ms), where learning of others by gossip takes
        # about a second.
        for i, p in enumerate(ports):
            for q in ports[i + 1:]:
                ok(self.node(p)("CLUSTER", "MEET", "127.0.0.1", q,
                                q + BUS_OFFSET), "MEET %d from %d" % (q, p))

        def all_met():
            return all(set(v.nodes) == set(ports) and
                       not any(v.failing(q) for q in ports)
                       for v in map(self.view, ports))
        wait_until(all_met, SETTLE_S, "every node to know every other")
        for j, p in enumerate(ports[masters:]):
            m = ports[j % masters]
            ok(self.node(p)("CLUSTER", "REPLICATE", self.ids[m]),
               "REPLICATE %d on %d" % (m, p))
        self.wait_settled()

    def seed_incarnation(self, prefix="lockbroker:"):
        """Each slot's marker (<prefix>{<tag>}incarnation, as
        lockdb_script.c names it) on its master, naming that master's
        run_id and replication id, its grace period over; replicated
        before it returns."""
        for m in self.masters():
            info = self.node(m)("INFO", "server")
            runid = info.split("run_id:")[1].split("\r")[0]
            info = self.node(m)("INFO", "replication")
            replid = info.split("master_replid:")[1].split("\r")[0]
            pid = self.nodes[m].proc.pid
            cmds = [("HSET", "%s{%s}incarnation" % (prefix, slot_tag(s)),
                     "id", "seed%d" % pid, "runid", runid, "replid", replid,
                     "grace", "0") for s in self.slots_of(m)]
            r = self.nodes[m].connect()
            try:
                for reply in pipeline(r, cmds):
                    if isinstance(reply, Exception):
                        raise AssertionError("seeding on %d: %s" % (m, reply))
                live = [p for p in self.replicas_of(m) if self.live(p)]
                if live:
                    r("WAIT", len(live), 10000)
            finally:
                r.close()

    # -- looking -----------------------------------------------------------

    def node(self, port):
        """The node on port: node(port)(*args) sends one command (a
        connection of its own each time, as lbtest's Redis); .connect()
        gives a Resp to keep (for ASKING and what follows it)."""
        return self.nodes[port]

    def live(self, port):
        return self.nodes[port].running() and port not in self.paused

    def live_ports(self):
        return [p for p in self.nodes if self.live(p)]

    def view(self, port):
        return View(self.node(port)("CLUSTER", "NODES"))

    def _any_view(self):
        """The view of the first live node that answers within a second
        (a node stopped behind the harness's back still counts as live,
        and answers nobody)."""
        for p in self.live_ports():
            try:
                r = self.nodes[p].connect()
            except OSError:
                continue
            try:
                r.sock.settimeout(1)
                return View(r("CLUSTER", "NODES"))
            except OSError:
                continue
            finally:
                r.close()
        raise AssertionError("no live node answers CLUSTER NODES")

    def masters(self):
        """The ports of the masters that serve slots, in port order."""
        return sorted(set(p for _, _, p in self._any_view().slot_map()))

    def master_of(self, slot):
        return self._any_view().owner(slot)

    def at(self, key):
        """The node that serves key's slot."""
        return self.node(self.master_of(slot_of(key)))

    def replicas_of(self, master):
        v = self._any_view()
        return sorted(p for p in v.nodes if v.master_port(p) == master)

    def replica_of(self, master):
        """A live replica of master (the first by port)."""
        live = [p for p in self.replicas_of(master) if self.live(p)]
        if not live:
            raise AssertionError("master %d has no live replica" % master)
        return live[0]

    def slots_of(self, master):
        return [s for lo, hi, p in self._any_view().slot_map() if p == master
                for s in range(lo, hi + 1)]

    def seeds(self):
        """"host:port" of every live master: a broker's redis.cluster."""
        return ["127.0.0.1:%d" % p for p in self.masters()]

    def cluster_node_timeout(self):
        """cluster-node-timeout in ms, as the nodes have it."""
        r = self.node(self.live_ports()[0])("CONFIG", "GET",
                                             "cluster-node-timeout")
        return int(r[1])

    def names_in_each_shard(self, n=1, prefix="lockbroker:", base="name"):
        """{master port: n lock names (base0, base1, ...) whose slot it
        serves}: names to hold on every shard."""
        out = {m: [] for m in self.masters()}
        view = self._any_view()
        for i in itertools.count():
            if all(len(v) >= n for v in out.values()):
                return out
            name = "%s%d" % (base, i)
            names = out[view.owner(slot_of_name(name, prefix))]
            if len(names) < n:
                names.append(name)

    @staticmethod
    def names_in_slot(slot, n=1, prefix="lockbroker:", base="name"):
        """n lock names (base0, base1, ... in order, those that fit) in
        slot."""
        return list(itertools.islice(
            (base + str(i) for i in itertools.count()
             if slot_of_name(base + str(i), prefix) == slot), n))

    # -- waiting -----------------------------------------------------------

    def wait_replicated(self, master=None, timeout=10):
        """Until every live replica of master (of every master if None)
        has all the master had written when asked: its replication offset
        as the master reports it (INFO replication) at least the master's.
        A WAIT on a connection of its own waits only for that connection's
        writes (none): this is the wait for other clients' writes (a
        broker's) before a failover."""
        for m in [master] if master else self.masters():
            info = self.node(m)("INFO", "replication")
            want = int(info.split("master_repl_offset:")[1].split("\r")[0])
            live = [p for p in self.replicas_of(m) if self.live(p)]

            def caught_up():
                info = self.node(m)("INFO", "replication")
                got = {}
                for line in info.splitlines():
                    if line.startswith("slave") and "offset=" in line:
                        f = dict(kv.split("=", 1) for kv in
                                 line.split(":", 1)[1].split(","))
                        got[int(f["port"])] = int(f["offset"])
                return all(got.get(p, -1) >= want for p in live)
            wait_until(caught_up, timeout,
                       "replicas %s of %d at offset %d" % (live, m, want))

    def _settled(self, want):
        """None once every live node says cluster_state:ok, all agree on
        the slot map and on who replicates whom, none of them sees a live
        node failing, every slot's master is live, every live replica's
        link to its master is up, and want(view) holds; else why not."""
        live = self.live_ports()
        views = {}
        for p in live:
            if "cluster_state:ok" not in self.node(p)("CLUSTER", "INFO"):
                return "cluster_state of %d is not ok" % p
            views[p] = self.view(p)
        first = views[live[0]]
        for p, v in views.items():
            if not set(live) <= set(v.nodes):
                return "%d does not know every live node" % p
            bad = [q for q in live if v.failing(q)]
            if bad:
                return "%d sees %s failing" % (p, bad)
            if v.slot_map() != first.slot_map():
                return "%d and %d disagree on the slot map" % (p, live[0])
            if any(v.master_port(q) != first.master_port(q) for q in live):
                return "%d and %d disagree on the replicas" % (p, live[0])
        owners = set(o for _, _, o in first.slot_map())
        if sum(hi - lo + 1 for lo, hi, _ in first.slot_map()) != SLOTS:
            return "not every slot is served"
        if not owners <= set(live):
            return "slots served by %s, not live" % (owners - set(live))
        for p in live:
            m = first.master_port(p)
            if m is not None and m in live:
                info = self.node(p)("INFO", "replication")
                if "master_link_status:up" not in info or \
                        "master_port:%d\r" % m not in info:
                    return "replica %d not linked to %d" % (p, m)
        if want is not None and not want(first):
            return "not yet as wanted"
        return None

    def wait_settled(self, want=None, timeout=SETTLE_S, what="settled"):
        """Until the cluster is settled (_settled) and want(view) holds;
        the view agreed on. Fails saying what was last amiss."""
        why = ["not asked yet"]

        def settled():
            try:
                why[0] = self._settled(want)
            except (OSError, ValueError) as e:
                why[0] = "a node did not answer: %s" % e
            return why[0] is None
        try:
            wait_until(settled, timeout, "the cluster " + what)
        except AssertionError as e:
            raise AssertionError("%s: %s" % (e, why[0])) from None
        return self._any_view()

    # -- resharding ----------------------------------------------------------

    def begin_migration(self, slot, to_port):
        """IMPORTING on the target, then MIGRATING on the source (so no
        moment has a source that sends clients to a target that refuses
        them). A Migration for migrate_key(s) and finish_migration."""
        src = self.master_of(slot)
        if src == to_port:
            raise AssertionError("slot %d is already on %d" % (slot, src))
        ok(self.node(to_port)("CLUSTER", "SETSLOT", slot, "IMPORTING",
                              self.ids[src]), "IMPORTING on %d" % to_port)
        ok(self.node(src)("CLUSTER", "SETSLOT", slot, "MIGRATING",
                          self.ids[to_port]), "MIGRATING on %d" % src)
        return Migration(slot, src, to_port)

    def migrate_key(self, mig, key):
        """MIGRATE one key from the source to the target."""
        args = ["MIGRATE", "127.0.0.1", mig.dst, key, 0, 10000]
        if self.password:
            args += ["AUTH", self.password]
        r = self.node(mig.src)(*args)
        if r not in ("OK", "NOKEY"):
            raise AssertionError("MIGRATE %s to %d: %r" % (key, mig.dst, r))
        mig.moved.append(key)

    def migrate_keys(self, mig, pause_between_keys=None, on_step=None,
                     limit=None):
        """Move the slot's keys one at a time (at most limit of them), as
        CLUSTER GETKEYSINSLOT names them; on_step(key) after each, then
        pause_between_keys seconds. The number moved."""
        moved = 0
        while limit is None or moved < limit:
            keys = self.node(mig.src)("CLUSTER", "GETKEYSINSLOT", mig.slot,
                                      100)
            if not keys:
                break
            for key in keys[:None if limit is None else limit - moved]:
                self.migrate_key(mig, key)
                moved += 1
                if on_step:
                    on_step(key)
                if pause_between_keys:
                    self.hold_open(mig, pause_between_keys)
        return moved

    def hold_open(self, mig, seconds):
        """Keep the slot half-moved for seconds (a resharding tool's pace,
        in which clients act on it), failing the moment either end no
        longer has it open (a failover of one end loses its MIGRATING or
        IMPORTING state, and the migration with it)."""
        def still_open():
            return all(self.view(p).opens(mig.slot)
                       for p in (mig.src, mig.dst))
        holds_for(still_open, seconds,
                  "slot %d open on %d and %d" % (mig.slot, mig.src, mig.dst))

    def finish_migration(self, mig):
        """Move what keys are left, then SETSLOT NODE on the target, the
        source and every other master; returns once every node agrees the
        slot is the target's and neither end has it open."""
        self.migrate_keys(mig)
        order = [mig.dst, mig.src] + [m for m in self.masters()
                                      if m not in (mig.dst, mig.src)]
        for p in order:
            ok(self.node(p)("CLUSTER", "SETSLOT", mig.slot, "NODE",
                            self.ids[mig.dst]), "SETSLOT NODE on %d" % p)

        def moved(view):
            return view.owner(mig.slot) == mig.dst and not any(
                self.view(p).opens(mig.slot) for p in (mig.src, mig.dst))
        self.wait_settled(moved, what="slot %d on %d" % (mig.slot, mig.dst))
        mig.finished = True

    def move_slot(self, slot, to_port, pause_between_keys=None,
                  on_step=None):
        """The whole resharding of one slot (begin, every key, finish)."""
        mig = self.begin_migration(slot, to_port)
        self.migrate_keys(mig, pause_between_keys, on_step)
        self.finish_migration(mig)
        return mig

    # -- faults --------------------------------------------------------------

    def failover(self, master_port, mode="default"):
        """CLUSTER FAILOVER [FORCE|TAKEOVER] on a replica of master_port;
        returns its port once it is master of the shard, the old master
        its replica, and every node agrees."""
        if mode not in ("default", "FORCE", "TAKEOVER"):
            raise ValueError(mode)
        rep = self.replica_of(master_port)
        ok(self.node(rep)("CLUSTER", "FAILOVER",
                          *([] if mode == "default" else [mode])),
           "CLUSTER FAILOVER %s on %d" % (mode, rep))

        def swapped(view):
            return view.master_port(rep) is None and \
                rep in {p for _, _, p in view.slot_map()} and \
                (not self.live(master_port) or
                 view.master_port(master_port) == rep)
        self.wait_settled(swapped, what="%d promoted (%s)" % (rep, mode))
        return rep

    def kill_master(self, port):
        """SIGKILL the master on port; returns its replica's port once that
        is promoted (cluster-node-timeout, then the election) and every
        live node agrees."""
        rep = self.replica_of(port)
        self.nodes[port].kill()
        self.wait_promoted(port, rep)
        return rep

    def wait_promoted(self, old, rep):
        """Until rep serves what old served and every live node agrees."""
        def promoted(view):
            return view.master_port(rep) is None and \
                rep in {p for _, _, p in view.slot_map()} and \
                old not in {p for _, _, p in view.slot_map()}
        self.wait_settled(promoted, what="%d promoted in %d's place" %
                          (rep, old))

    def cut_replica(self, master, during=None):
        """Stop master's replica and drop its link (a stopped process
        still takes in what is sent to it, so the stop alone would lose
        nothing), then during(): the replica, returned, misses what is
        written meanwhile."""
        rep = self.replica_of(master)
        self.pause(rep)
        self.node(master)("CLIENT", "KILL", "TYPE", "replica")
        wait_until(lambda: "connected_slaves:0\r" in
                   self.node(master)("INFO", "replication"), 10,
                   "%d to have dropped its replica" % master)
        if during:
            during()
        return rep

    def promote_stale(self, master, during=None):
        """A replica that missed writes promoted: its link to master is
        cut while it is stopped (a stopped process still takes in what is
        sent to it, so the stop alone would lose nothing), during() writes
        what it will miss, then master is killed and the replica resumed;
        returns its port once it serves master's slots. Its data may be
        at most cluster-node-timeout x cluster-replica-validity-factor
        old (15 s here by default) for it to stand."""
        rep = self.cut_replica(master, during)
        self.nodes[master].kill()
        self.resume(rep, settle=False)
        self.wait_promoted(master, rep)
        return rep

    def takeover_stale(self, master, during=None):
        """A replica that missed writes made master at once, with no
        election and no cluster-node-timeout to wait: cut off as by
        promote_stale (stopped, its link dropped, during() writing what it
        will miss), then the master stopped, the replica resumed and told
        CLUSTER FAILOVER TAKEOVER, and the master resumed once the replica
        says it serves the shard: the master learns the newer epoch and
        becomes its replica, its writes since the cut discarded. Returns
        the replica's port once every node agrees."""
        rep = self.cut_replica(master, during)
        self.pause(master)
        try:
            self.resume(rep, settle=False)
            ok(self.node(rep)("CLUSTER", "FAILOVER", "TAKEOVER"),
               "CLUSTER FAILOVER TAKEOVER on %d" % rep)
            wait_until(lambda: self.view(rep).master_port(rep) is None and
                       master not in {p for _, _, p in
                                      self.view(rep).slot_map()}, 10,
                       "%d to serve %d's slots" % (rep, master))
        finally:
            self.resume(master, settle=False)

        def swapped(view):
            return view.master_port(rep) is None and \
                view.master_port(master) == rep
        self.wait_settled(swapped, what="%d taken over from %d" %
                          (rep, master))
        return rep

    def kill(self, port):
        """SIGKILL any node; nothing waited for."""
        self.nodes[port].kill()

    def restart(self, port):
        """Start a killed node again on its port, with its nodes.conf and
        without its data (no persistence, as lbtest's Redis); returns once
        it has rejoined (an old master as its successor's replica, synced)
        and every node agrees."""
        self.nodes[port].start()
        self.wait_settled(what="with %d back" % port)

    def pause(self, port):
        """SIGSTOP the node: a node that answers nobody, its sockets open
        (past cluster-node-timeout, a master's replica is promoted:
        wait_promoted)."""
        os.kill(self.nodes[port].proc.pid, signal.SIGSTOP)
        self.paused.add(port)

    def resume(self, port, settle=True):
        """SIGCONT; with settle, returns once every node agrees again (a
        master that was replaced meanwhile then replicates its successor)."""
        os.kill(self.nodes[port].proc.pid, signal.SIGCONT)
        self.paused.discard(port)
        if settle:
            self.wait_settled(what="with %d resumed" % port)

    def logs(self, tail=None):
        """Each node's log (its last tail characters, if given)."""
        out = []
        for p, n in self.nodes.items():
            try:
                with open(os.path.join(n.tmpdir, "redis.log"),
                          errors="replace") as f:
                    text = f.read()
                    out.append("--- node %d\n%s" % (p, text[-tail:] if tail
                                                       else text))
            except OSError:
                pass
        return "\n".join(out)


def pipeline(r, cmds):
    """Send every command on the Resp connection r at once, then read each
    reply (seeding 16384 markers one round trip at a time takes seconds)."""
    out = bytearray()
    for args in cmds:
        out += b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
    r.sock.sendall(out)
    return [r._read() for _ in cmds]

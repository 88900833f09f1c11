/*
 * lockdb_seed: on a cluster, the slots that have no incarnation marker,
 * or one last confirmed on another Redis process than the node's that
 * serves them now (a failover, a restart), get their new incarnation
 * when the broker reaches their node, all at once, rather than each at
 * its first request (docs/operations.md, Redis Cluster). Such a slot's
 * grace period must pass before anything in it is granted: on a fresh
 * cluster that is every slot, after a failover every slot of the shard,
 * and a grace period at each slot's first use would stall a new name's
 * grant for the length of one, again and again, for as long as names of
 * unused slots keep coming. Made together, they end together.
 *
 * Per node, one markers.lua at a time reads LOCKDB_SEED_MAX slots'
 * markers; incarnation.lua is asked for each one missing or stale; the
 * next call goes when the last answered, so a fresh cluster's 16384 new
 * markers do not queue ahead of the requests clients make meanwhile. A
 * slot is read once for each node and run_id that serves it (again if
 * it could not be read: not served where it was sent, or no answer). The
 * first broker to read a failed-over shard makes its incarnations; the
 * others find them made.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "lockdb.h"
#include "lockdb_int.h"
#include "log.h"
#include "redisc.h"
#include "slot.h"
#include "xmalloc.h"

static struct {
	/* Each slot's node + 1 when read there (or being read), else 0. */
	unsigned char read[SLOT_COUNT];
	char runid[REDISC_NODES_MAX][48]; /* each node's, when last read */
	bool busy[REDISC_NODES_MAX];	  /* a markers.lua is out */
	unsigned slots[REDISC_NODES_MAX]; /* read in this pass */
	unsigned made[REDISC_NODES_MAX];  /* of those, missing */
	unsigned stale[REDISC_NODES_MAX]; /* of those, another process's */
} seed;

/* One markers.lua out: its node and slots. */
struct lockdb_seeding {
	int node;
	int n;
	int slot[LOCKDB_SEED_MAX];
};

static void lockdb_seed_next(int node, int from);

void
lockdb_seed_reset(void)
{
	memset(&seed, 0, sizeof seed);
}

static bool
lockdb_seed_isread(int slot, int node)
{
	return seed.read[slot] == node + 1;
}

static void
lockdb_seed_mark(int slot, int node, bool read)
{
	seed.read[slot] = read ? (unsigned char)(node + 1) : 0;
}

/* The pass on node is over: what it found, said once. */
static void
lockdb_seed_done(int node)
{
	char addr[64];

	seed.busy[node] = false;
	redisc_node_name(node, addr, sizeof addr);
	if (seed.stale[node] > 0)
		log_info(
		    "redis: %u slots of %s were last served by another Redis process (a failover or a restart): a new incarnation in each, no grant in them for %s ms",
		    seed.stale[node], addr, lockdb.node[node].grace);
	if (seed.made[node] == 0)
		return;
	if (seed.made[node] == seed.slots[node])
		log_info(
		    "redis: %u slots of %s have no lock data yet: a first incarnation in each, no grant in them for %s ms",
		    seed.made[node], addr, lockdb.node[node].grace);
	else
		log_warnx(
		    "redis: %u of the %u slots of %s have no lock data: a new incarnation in each, no grant in them for %s ms (docs/operations.md, When Redis forgets)",
		    seed.made[node], seed.slots[node], addr,
		    lockdb.node[node].grace);
}

/* markers.lua answered: each missing marker's slot is asked (which makes
 * it); one not read here is left for the next pass. */
static void
lockdb_seed_cb(const redisReply *r, void *arg)
{
	struct lockdb_seeding *sd = arg;
	int node = sd->node, last = sd->slot[sd->n - 1];
	bool ok = r != NULL && r->type == REDIS_REPLY_ARRAY &&
	    r->elements == (size_t)sd->n;

	if (r != NULL && !ok)
		log_warnx("redis: markers.lua: %s",
		    r->type == REDIS_REPLY_ERROR ? r->str : "malformed reply");
	for (int i = 0; i < sd->n; i++) {
		const redisReply *e = ok ? r->element[i] : NULL;

		if (e == NULL || e->type != REDIS_REPLY_INTEGER ||
		    e->integer < 0) {
			lockdb_seed_mark(sd->slot[i], node, false);
			continue;
		}
		seed.slots[node]++;
		if (e->integer == 0 || e->integer == 2) {
			if (e->integer == 0)
				seed.made[node]++;
			else
				seed.stale[node]++;
			lockdb_scope(sd->slot[i])->seeding = true;
			lockdb_incarnation_of(sd->slot[i]);
		}
	}
	free(sd);
	if (!ok) {
		seed.busy[node] = false; /* the next node-known goes on */
		return;
	}
	lockdb_seed_next(node, last + 1);
}

/* The next call of node's pass: up to LOCKDB_SEED_MAX slots from slot
 * from on that node, not read there yet; the pass ends with none left. */
static void
lockdb_seed_next(int node, int from)
{
	struct lockdb_seeding *sd = xcalloc(1, sizeof *sd);

	sd->node = node;
	for (int s = from; s < SLOT_COUNT && sd->n < LOCKDB_SEED_MAX; s++) {
		if (lockdb_seed_isread(s, node) || redisc_node_of(s) != node)
			continue;
		lockdb_seed_mark(s, node, true);
		sd->slot[sd->n++] = s;
	}
	if (sd->n == 0 || !redisc_node_up(node)) {
		for (int i = 0; i < sd->n; i++)
			lockdb_seed_mark(sd->slot[i], node, false);
		free(sd);
		lockdb_seed_done(node);
		return;
	}
	lockdb_script_markers(
	    lockdb.node[node].runid, sd->slot, sd->n, lockdb_seed_cb, sd);
}

void
lockdb_seed(int node)
{
	if (!redisc_cluster() || node < 0 || node >= REDISC_NODES_MAX ||
	    seed.busy[node])
		return;
	seed.busy[node] = true;
	seed.slots[node] = seed.made[node] = seed.stale[node] = 0;
	/* Another process on that address (a restart): read again. */
	if (strcmp(seed.runid[node], lockdb.node[node].runid) != 0) {
		for (int s = 0; s < SLOT_COUNT; s++)
			if (lockdb_seed_isread(s, node))
				lockdb_seed_mark(s, node, false);
		snprintf(seed.runid[node], sizeof seed.runid[node], "%s",
		    lockdb.node[node].runid);
	}
	lockdb_seed_next(node, 0);
}

/*
 * lockdb_inc: the incarnation of each scope's lock data (docs/protocol.md
 * §8, When Redis forgets). The whole of one Redis is scope 0, with one
 * marker; on a cluster each slot is a scope, with its marker in the slot
 * itself (lockdb_script.c makes its key), so that a failover of one shard
 * or a slot moved to another node (the marker then names another run_id)
 * is a new incarnation of that slot's names only. Each scope's answer is
 * passed to the engine (lockdb_on_incarnation), which keeps its trust per
 * scope (lock_scope.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lockdb.h"
#include "lockdb_int.h"
#include "log.h"
#include "proto.h"
#include "redisc.h"
#include "slot.h"
#include "stats.h"
#include "util.h"
#include "xmalloc.h"

/* An incarnation.lua out: its scope, and when it was sent. */
struct lockdb_asked {
	int scope;
	uint64_t sent_ms;
};

void
lockdb_scopes_reset(void)
{
	if (lockdb.scope != NULL)
		for (int s = 0; s < LOCKDB_SCOPES; s++)
			free(lockdb.scope[s]);
	free(lockdb.scope);
	lockdb.scope = xcalloc(LOCKDB_SCOPES, sizeof *lockdb.scope);
	lockdb_seed_reset();
}

struct lockdb_scope *
lockdb_scope(int scope)
{
	struct lockdb_scope **sc = &lockdb.scope[scope & (LOCKDB_SCOPES - 1)];

	if (*sc == NULL)
		*sc = xcalloc(1, sizeof **sc);
	return *sc;
}

const char *
lockdb_inc_of(int scope)
{
	return lockdb_scope(scope)->inc;
}

/* "?" (no grant passes the gate) while the node is not known. */
const char *
lockdb_runid_of(int scope)
{
	int node = redisc_node_of(scope);

	return node >= 0 ? lockdb.node[node].runid : "?";
}

const char *
lockdb_grace_of(int scope)
{
	int node = redisc_node_of(scope);

	return lockdb.node[node >= 0 ? node : 0].grace;
}

/*
 * Redis's evicted_keys, as each beat reads it (-1: not read). Keys evicted
 * since the last beat are lock data lost in the same Redis process:
 * incarnation.lua made a new incarnation for it, or another broker's beat
 * did first.
 */
static void
lockdb_evicted(long long n)
{
	if (n >= 0 && lockdb.evicted >= 0 && n > lockdb.evicted &&
	    !redisc_cluster())
		log_warnx(
		    "redis: evicted %lld keys (evicted_keys %lld): lock data may be lost; a new incarnation, in whose grace period holds are put back (docs/operations.md, When Redis forgets)",
		    n - lockdb.evicted, n);
	lockdb.evicted = n;
	STAT_SET(redis_evicted_keys, n >= 0 ? n : 0);
}

/* "" on one Redis, " of slot <n>" on a cluster: for the log lines. */
static const char *
lockdb_scope_name(int scope, char *buf, size_t size)
{
	buf[0] = '\0';
	if (redisc_cluster())
		snprintf(buf, size, " of slot %d", scope);
	return buf;
}

/* The node that serves scope, or node 0's figures when none is known. */
static int
lockdb_ask_node(int scope)
{
	int node = redisc_node_of(scope);

	return node >= 0 ? node : 0;
}

/*
 * A new or another incarnation of the scope, said once. On a cluster a
 * master's failover or loss comes to each of its slots in use: the first
 * is logged, then at most one a LOCKDB_BUSY_LOG_MS for each master, with
 * how many came since (INFO's redis_node<i> incarnations counts them).
 */
static void
lockdb_inc_learned(
    int scope, const char *id, bool made, bool first, uint64_t grace_ms)
{
	static struct util_every node[REDISC_NODES_MAX];
	int n = lockdb_ask_node(scope);
	unsigned unsaid = 0;
	uint64_t ago_ms = 0;
	char what[32], more[96] = "";

	if (!made && grace_ms == 0) {
		if (!redisc_cluster())
			log_info("redis: lock data incarnation %s", id);
		return;
	}
	/* Knowing none before, this broker has no holds to put back: a
	 * first start on an unused Redis is no news. */
	if (made && first) {
		lockdb_scope_name(scope, what, sizeof what);
		log_info(
		    "redis: first lock data%s (incarnation %s): no grant for %" PRIu64
		    " ms (grace period)",
		    what, id, grace_ms);
		return;
	}
	if (redisc_cluster() &&
	    !util_every(
		&node[n], mono_ms(), LOCKDB_BUSY_LOG_MS, &unsaid, &ago_ms))
		return;
	if (unsaid > 0)
		snprintf(more, sizeof more,
		    " (and %u more slots of its master since %" PRIu64
		    " s ago)",
		    unsaid, ago_ms / 1000);
	lockdb_scope_name(scope, what, sizeof what);
	log_warnx(
	    "redis: %s lock data%s (incarnation %s): no grant for %" PRIu64
	    " ms, while brokers put their holds back%s (docs/operations.md, When Redis forgets)",
	    made ? "new" : "another", what, id, grace_ms, more);
}

/* Whether incarnation.lua's reply is {id, grace ms left, made now, need,
 * Redis's time, evicted_keys}. */
static bool
lockdb_inc_reply_ok(const redisReply *r)
{
	redisReply **e = r->element;

	return r->type == REDIS_REPLY_ARRAY && r->elements == 6 &&
	    e[0]->type == REDIS_REPLY_STRING && e[0]->len > 0 &&
	    e[0]->len < sizeof lockdb.scope[0]->inc &&
	    e[1]->type == REDIS_REPLY_INTEGER &&
	    e[2]->type == REDIS_REPLY_INTEGER &&
	    e[3]->type == REDIS_REPLY_INTEGER &&
	    e[4]->type == REDIS_REPLY_INTEGER && e[4]->integer > 0 &&
	    e[5]->type == REDIS_REPLY_INTEGER;
}

/* The node's figures: a new incarnation (one made now, or another than
 * the one known), and its grace period. */
static void
lockdb_node_learned(int node, const struct lockdb_inc *inc, bool made)
{
	struct lockdb_node *n = &lockdb.node[node];
	uint64_t until = mono_ms() + inc->grace_ms;

	if (inc->changed && (made || !inc->first))
		n->incarnations++;
	if (inc->grace_ms > 0 && until > n->grace_until_ms)
		n->grace_until_ms = until;
}

void
lockdb_node_stats(int node, uint64_t *incarnations, uint64_t *grace_left_ms)
{
	const struct lockdb_node *n = &lockdb.node[node];
	uint64_t now = mono_ms();

	*incarnations = n->incarnations;
	*grace_left_ms = n->grace_until_ms > now ? n->grace_until_ms - now : 0;
}

static void
lockdb_incarnation_cb(const redisReply *r, void *arg)
{
	struct lockdb_asked *ask = arg;
	struct lockdb_inc inc = { .sent_ms = ask->sent_ms,
		.scope = ask->scope };
	struct lockdb_scope *sc = lockdb_scope(ask->scope);
	uint64_t need = strtoull(lockdb_grace_of(ask->scope), NULL, 10);
	redisReply **e = r != NULL ? r->element : NULL;

	bool seeding = sc->seeding;

	free(ask);
	sc->asking = false;
	sc->seeding = false;
	if (r == NULL)
		return; /* not answered: nothing confirmed */
	if (!lockdb_inc_reply_ok(r)) {
		log_warnx("redis: incarnation.lua: %s",
		    r->type == REDIS_REPLY_ERROR ? r->str : "malformed reply");
		return;
	}
	if (inc.scope == 0 && !lockdb.checked && redisc_up()) {
		lockdb.checked = true;
		STAT_SET(redis_up, 1);
	}
	if ((uint64_t)e[3]->integer > need && !lockdb.told_need) {
		lockdb.told_need = true;
		log_warnx(
		    "redis: another broker's grace period is %lld ms, this one's %" PRIu64
		    " ms: give every broker the same redis.trust_ms, redis.clock_step_ms and locks.clock_drift (docs/operations.md, When Redis forgets)",
		    e[3]->integer, need);
	}
	inc.first = sc->inc[0] == '\0';
	inc.changed = strcmp(sc->inc, e[0]->str) != 0;
	inc.grace_ms = e[1]->integer > 0 ? (uint64_t)e[1]->integer : 0;
	inc.redis_ms = (uint64_t)e[4]->integer;
	if (inc.sent_ms > sc->asked_ms)
		sc->asked_ms = inc.sent_ms;
	lockdb_evicted(e[5]->integer);
	lockdb_node_learned(
	    lockdb_ask_node(inc.scope), &inc, e[2]->integer == 1);
	if (inc.changed) {
		lockdb.incs++;
		sc->gen++;
		memcpy(sc->inc, e[0]->str, e[0]->len + 1);
		if (!seeding) /* lockdb_seed says it */
			lockdb_inc_learned(inc.scope, sc->inc,
			    e[2]->integer == 1, inc.first, inc.grace_ms);
	}
	if (lockdb.inc_fn != NULL)
		lockdb.inc_fn(&inc);
}

/* The slot of the name's keys "<prefix>{<name>}...": the prefix has no
 * braces, so it is the slot of "{<name>}" (whose tag ends at a "}" in
 * the name, if it has one). */
int
lockdb_scope_of(const char *name)
{
	char key[PROTO_NAME_MAX + 3];
	size_t n = strlen(name);

	if (!redisc_cluster())
		return 0;
	if (n > PROTO_NAME_MAX)
		n = PROTO_NAME_MAX;
	key[0] = '{';
	memcpy(key + 1, name, n);
	key[n + 1] = '}';
	return slot_of_key(key, n + 2);
}

bool
lockdb_scoped(void)
{
	return redisc_cluster();
}

/* The node's facts are read again with the beat: every fourth beat on
 * one Redis, every trust_ms on a cluster's node. */
static void
lockdb_memory_due(int node)
{
	if (lockdb.quiet)
		return;
	if (!redisc_cluster()) {
		if (++lockdb.beats % 4 == 0)
			lockdb_memory(node);
		return;
	}
	if (mono_ms() >= lockdb.node[node].memory_ms + lockdb.trust_ms)
		lockdb_memory(node);
}

void
lockdb_incarnation_of(int scope)
{
	struct lockdb_scope *sc = lockdb_scope(scope);
	int node = redisc_node_of(scope);
	struct lockdb_asked *ask;

	if (sc->asking || !redisc_node_up(node) ||
	    strcmp(lockdb.node[node].runid, "?") == 0)
		return; /* INFO's answer asks, once it came */
	lockdb_memory_due(node);
	sc->asking = true;
	ask = xmalloc(sizeof *ask);
	ask->scope = scope;
	ask->sent_ms = mono_ms();
	lockdb_script_incarnation(scope, lockdb_incarnation_cb, ask);
}

void
lockdb_incarnation(void)
{
	lockdb_incarnation_of(0);
}

/*
 * A request on a scope: on a cluster, one whose incarnation is not known
 * here asks first, on the same node, so that the answer comes first and
 * the request names it. One known needs no asking: the request's own
 * gate vouches for it (lockdb_vouched), and the beat asks the scopes
 * with holds or waiters here. The node's maxmemory-policy is read as
 * the beat reads it. On one Redis, the beat's quiet does all that
 * (lockdb_send).
 */
void
lockdb_inc_before(int scope)
{
	int node;

	if (!redisc_cluster())
		return;
	if (lockdb_scope(scope)->inc[0] == '\0') {
		lockdb_incarnation_of(scope);
		return;
	}
	node = redisc_node_of(scope);
	if (node >= 0 && redisc_node_up(node) &&
	    strcmp(lockdb.node[node].runid, "?") != 0)
		lockdb_memory_due(node);
}

/*
 * An ACQUIRE (or FILL, or shared one) of this broker's on a cluster that
 * passed the gate (lib/gate.lua): the scope's marker named the
 * incarnation known here, on the Redis process known, when the script
 * ran, as an answer of incarnation.lua sent when the request was would
 * say; so it vouches for the scope from then (lock_trust.c). Not if the
 * scope's incarnation changed since it was sent. Evictions are left to
 * the beat's incarnation.lua, which reads evicted_keys: a scope with
 * holds here is asked every beat.
 */
void
lockdb_vouched(int scope, unsigned gen, uint64_t sent_ms)
{
	struct lockdb_scope *sc;
	struct lockdb_inc inc = { .sent_ms = sent_ms, .scope = scope };

	if (!redisc_cluster())
		return;
	sc = lockdb_scope(scope);
	if (sc->gen != gen || sc->inc[0] == '\0')
		return;
	if (sent_ms > sc->asked_ms)
		sc->asked_ms = sent_ms;
	if (lockdb.inc_fn != NULL)
		lockdb.inc_fn(&inc);
}

/* A node's INFO answered: the scopes it serves that were heard within
 * trust_ms (those with holds or waiters here: the beat asks them) are
 * asked at once (on one Redis, scope 0); the others are asked at their
 * next request, so a reconnect or a failover costs the node no more
 * than this broker's busy slots. Its slots without a marker are made
 * (lockdb_seed). */
void
lockdb_inc_node_known(int node)
{
	uint64_t now = mono_ms();

	if (!redisc_cluster()) {
		lockdb_incarnation_of(0);
		return;
	}
	for (int s = 0; s < LOCKDB_SCOPES; s++)
		if (lockdb.scope[s] != NULL && redisc_node_of(s) == node &&
		    lockdb.scope[s]->asked_ms + lockdb.trust_ms > now)
			lockdb_incarnation_of(s);
	lockdb_seed(node);
}

/*
 * lockdb: the Redis side of a lock (lockdb.h). This file keeps the
 * connection's side: what Redis says of itself at every connect, and the
 * incarnation of the lock data it serves; lockdb_script.c sends the
 * scripts, lockdb_reply.c parses their replies, lockdb_news.c the
 * channels' news. Every compare-and-act runs as one Lua script, so
 * nothing ever deletes or extends a lock it does not own.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chaos.h"
#include "lockdb.h"
#include "lockdb_int.h"
#include "log.h"
#include "proto.h"
#include "redisc.h"
#include "slot.h"
#include "stats.h"
#include "util.h"
#include "xmalloc.h"

struct lockdb_state lockdb;

/*
 * What Redis says of itself (INFO memory persistence), asked first thing at
 * every connect, so its answer comes before any other on this connection.
 * An evicting Redis loses lock keys and fence counters under memory
 * pressure: no grant is made from it (docs/operations.md, Redis settings).
 */
/* maxmemory-policy from INFO memory's text; logs a change to evicting. */
static void
lockdb_policy(const char *info)
{
	char was[sizeof lockdb.refusal];
	const char *p;

	snprintf(was, sizeof was, "%s", lockdb.refusal);
	lockdb.policy[0] = '\0';
	if ((p = strstr(info, "maxmemory_policy:")) != NULL)
		sscanf(p + strlen("maxmemory_policy:"), "%31[a-z-]",
		    lockdb.policy);
	lockdb.refusal[0] = '\0';
	if (lockdb.policy[0] == '\0' ||
	    strcmp(lockdb.policy, "noeviction") == 0)
		return;
	if (lockdb.allow_eviction) {
		if (!lockdb.told_eviction)
			log_warnx(
			    "redis: maxmemory-policy is %s: Redis may evict locks and fence counters; granting anyway (redis.allow_eviction)",
			    lockdb.policy);
		lockdb.told_eviction = true;
		return;
	}
	snprintf(lockdb.refusal, sizeof lockdb.refusal,
	    "Redis maxmemory-policy is %s; locks need noeviction",
	    lockdb.policy);
	if (strcmp(was, lockdb.refusal) != 0)
		log_warnx(
		    "redis: %s: no lock is granted until it is (or redis.allow_eviction)",
		    lockdb.refusal);
}

/* A policy set while connected: INFO memory with every fourth beat. */
static void
lockdb_memory_cb(const redisReply *r, void *arg)
{
	if (r != NULL && r->type == REDIS_REPLY_STRING)
		lockdb_policy(r->str);
}

static void
lockdb_info_cb(const redisReply *r, void *arg)
{
	const char *p;

	if (r == NULL || r->type != REDIS_REPLY_STRING) {
		log_warnx(
		    "redis: INFO %s: cannot check maxmemory-policy (give the broker's Redis user +info)",
		    r != NULL && r->type == REDIS_REPLY_ERROR ? r->str
							      : "not answered");
		lockdb.runid[0] =
		    '\0'; /* a failover is then seen by the marker */
		lockdb_incarnation();
		return;
	}
	if (strstr(r->str, "cluster_enabled:1") != NULL)
		redisc_cluster_found((int)(intptr_t)arg);
	lockdb.told_eviction = false; /* said again at every connect */
	lockdb.refusal[0] = '\0';
	lockdb_policy(r->str);
	if (strstr(r->str, "aof_enabled:0") != NULL)
		log_info(
		    "redis: no append-only file: a restart loses the grants and fences made since its last snapshot (docs/operations.md, Redis settings)");
	lockdb.runid[0] = '\0';
	if ((p = strstr(r->str, "run_id:")) != NULL)
		sscanf(p + strlen("run_id:"), "%47[0-9a-f]", lockdb.runid);
	if ((p = strstr(r->str, "connected_slaves:")) != NULL &&
	    atoi(p + strlen("connected_slaves:")) > 0 && !lockdb.min_replicas)
		log_warnx(
		    "redis: a master with replicas and min-replicas-to-write 0 (or unreadable): cut off from its replicas, it goes on granting after a failover (docs/operations.md, When Redis forgets)");
	lockdb_incarnation();
}

/*
 * min-replicas-to-write and -max-lag, asked at every connect before INFO
 * (so known when incarnation.lua runs). A master cut off from its
 * replicas then refuses writes after max-lag seconds, the brokers'
 * incarnation beat (a script flagged as one that may write) with them,
 * and their holds end
 * trust_ms later: a new incarnation's grace period covers both. Without
 * it such a master goes on granting after a failover (split brain).
 */
static void
lockdb_replicas_cb(const redisReply *r, void *arg)
{
	long long to_write = -1, lag = 0;

	if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
		log_info(
		    "redis: CONFIG GET min-replicas-*: %s: cannot check the split-brain settings (docs/operations.md, When Redis forgets)",
		    r != NULL && r->type == REDIS_REPLY_ERROR ? r->str
							      : "not answered");
		lockdb.lag_ms = 0;
	} else {
		for (size_t i = 0; i + 1 < r->elements; i += 2) {
			const redisReply *k = r->element[i],
					 *v = r->element[i + 1];

			if (k->type != REDIS_REPLY_STRING ||
			    v->type != REDIS_REPLY_STRING)
				continue;
			if (strcmp(k->str, "min-replicas-to-write") == 0)
				to_write = strtoll(v->str, NULL, 10);
			else if (strcmp(k->str, "min-replicas-max-lag") == 0)
				lag = strtoll(v->str, NULL, 10);
		}
		/* Redis counts a replica's lag in whole seconds since its
		 * last ACK (sent every second), and its good replicas once
		 * a second: cut off, it takes writes max-lag + 2 s. */
		lockdb.lag_ms =
		    to_write > 0 && lag > 0 ? ((uint64_t)lag + 2) * 1000 : 0;
		lockdb.min_replicas = to_write > 0;
	}
	snprintf(lockdb.grace, sizeof lockdb.grace, "%" PRIu64,
	    lockdb.grace_ms + lockdb.lag_ms);
}

static void
lockdb_connected(int node, void *arg)
{
	const char *argv[6] = { "INFO", "server", "memory", "persistence",
		"replication", "cluster" };
	size_t lens[6] = { 4, 6, 6, 11, 11, 7 };
	const char *cfg[4] = { "CONFIG", "GET", "min-replicas-to-write",
		"min-replicas-max-lag" };
	size_t clens[4] = { 6, 3, 21, 20 };

	/* Unknown until INFO answers: no grant passes the gate meanwhile. */
	snprintf(lockdb.runid, sizeof lockdb.runid, "?");
	lockdb.asking = false; /* an answer on the old connection is gone */
	lockdb.checked = false;
	lockdb.min_replicas = false;
	redisc_command_on(node, 4, cfg, clens, lockdb_replicas_cb, NULL);
	redisc_command_on(
	    node, 6, argv, lens, lockdb_info_cb, (void *)(intptr_t)node);
	if (lockdb.up_fn != NULL)
		lockdb.up_fn(lockdb.up_arg);
}

void
lockdb_on_connect(void (*fn)(void *), void *arg)
{
	lockdb.up_fn = fn;
	lockdb.up_arg = arg;
}

const char *
lockdb_refusal(void)
{
	return lockdb.refusal[0] != '\0' ? lockdb.refusal : NULL;
}

void
lockdb_allow_eviction(bool allow)
{
	lockdb.allow_eviction = allow;
}

bool
lockdb_up(void)
{
	return redisc_up() && lockdb.checked;
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
	if (n >= 0 && lockdb.evicted >= 0 && n > lockdb.evicted)
		log_warnx(
		    "redis: evicted %lld keys (evicted_keys %lld): lock data may be lost; a new incarnation, in whose grace period holds are put back (docs/operations.md, When Redis forgets)",
		    n - lockdb.evicted, n);
	lockdb.evicted = n;
	STAT_SET(redis_evicted_keys, n >= 0 ? n : 0);
}

/* incarnation.lua's {id, grace ms left, made now, need, Redis's time,
 * evicted_keys}. */
static void
lockdb_incarnation_cb(const redisReply *r, void *arg)
{
	uint64_t *sent = arg;
	struct lockdb_inc inc = { .sent_ms = *sent };
	redisReply **e = r != NULL ? r->element : NULL;

	free(sent);
	lockdb.asking = false;
	if (r == NULL)
		return; /* not answered: nothing confirmed */
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 6 ||
	    e[0]->type != REDIS_REPLY_STRING || e[0]->len == 0 ||
	    e[0]->len >= sizeof lockdb.inc ||
	    e[1]->type != REDIS_REPLY_INTEGER ||
	    e[2]->type != REDIS_REPLY_INTEGER ||
	    e[3]->type != REDIS_REPLY_INTEGER ||
	    e[4]->type != REDIS_REPLY_INTEGER || e[4]->integer <= 0 ||
	    e[5]->type != REDIS_REPLY_INTEGER) {
		log_warnx("redis: incarnation.lua: %s",
		    r->type == REDIS_REPLY_ERROR ? r->str : "malformed reply");
		return;
	}
	if (!lockdb.checked && redisc_up()) {
		lockdb.checked = true;
		STAT_SET(redis_up, 1);
	}
	if ((uint64_t)e[3]->integer > lockdb.grace_ms + lockdb.lag_ms &&
	    !lockdb.told_need) {
		lockdb.told_need = true;
		log_warnx(
		    "redis: another broker's grace period is %lld ms, this one's %" PRIu64
		    " ms: give every broker the same redis.trust_ms, redis.clock_step_ms and locks.clock_drift (docs/operations.md, When Redis forgets)",
		    e[3]->integer, lockdb.grace_ms + lockdb.lag_ms);
	}
	inc.scope = 0;
	inc.first = lockdb.inc[0] == '\0';
	inc.changed = strcmp(lockdb.inc, e[0]->str) != 0;
	inc.grace_ms = e[1]->integer > 0 ? (uint64_t)e[1]->integer : 0;
	inc.redis_ms = (uint64_t)e[4]->integer;
	lockdb_evicted(e[5]->integer);
	if (inc.changed) {
		lockdb.incs++;
		memcpy(lockdb.inc, e[0]->str, e[0]->len + 1);
		if (e[2]->integer == 1 || inc.grace_ms > 0)
			log_warnx(
			    "redis: %s lock data (incarnation %s): no grant for %" PRIu64
			    " ms, while brokers put their holds back (docs/operations.md, When Redis forgets)",
			    e[2]->integer == 1 ? "new" : "another", lockdb.inc,
			    inc.grace_ms);
		else
			log_info("redis: lock data incarnation %s", lockdb.inc);
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

void
lockdb_incarnation_of(int scope)
{
	if (scope == 0)
		lockdb_incarnation();
}

void
lockdb_incarnation(void)
{
	uint64_t *sent;

	if (lockdb.asking || !redisc_up() || strcmp(lockdb.runid, "?") == 0)
		return; /* INFO's answer asks, once it came */
	if (++lockdb.beats % 4 == 0 && !lockdb.quiet) {
		const char *info[2] = { "INFO", "memory" };
		size_t ilens[2] = { 4, 6 };

		redisc_command(2, info, ilens, lockdb_memory_cb, NULL);
	}
	lockdb.asking = true;
	sent = xmalloc(sizeof *sent);
	*sent = mono_ms();
	lockdb_script_incarnation(lockdb_incarnation_cb, sent);
}

void
lockdb_quiet(bool quiet)
{
	lockdb.quiet = quiet;
}

void
lockdb_on_incarnation(lockdb_inc_fn *fn)
{
	lockdb.inc_fn = fn;
}

void
lockdb_init(const char *prefix, const char *broker, uint64_t handoff_ms,
    uint64_t live_ms, uint64_t grace_ms, uint64_t step_ms)
{
	lockdb.step_ms = step_ms;
	lockdb.evicted = -1;
	snprintf(lockdb.skew, sizeof lockdb.skew, "%" PRIu64, step_ms);
	lockdb.grace_ms = grace_ms > 0 ? grace_ms : 1;
	snprintf(
	    lockdb.grace, sizeof lockdb.grace, "%" PRIu64, lockdb.grace_ms);
	lockdb.prefix = prefix;
	lockdb.broker = broker;
	snprintf(lockdb.channel, sizeof lockdb.channel, "%sreleased", prefix);
	snprintf(lockdb.to, sizeof lockdb.to, "%sto:", prefix);
	snprintf(lockdb.mine, sizeof lockdb.mine, "%s%s", lockdb.to, broker);
	snprintf(lockdb.handoff, sizeof lockdb.handoff, "%" PRIu64,
	    (handoff_ms > 0 ? handoff_ms : 1) + step_ms);
	snprintf(lockdb.live, sizeof lockdb.live, "%" PRIu64,
	    live_ms > 0 ? live_ms : 1);
	redisc_on_connect(lockdb_connected, NULL);
	lockdb_scripts_init();
}

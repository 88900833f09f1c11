/*
 * lockdb: the Redis side of a lock (lockdb.h). This file keeps the
 * connection's side: what each node (the one Redis, or each master of a
 * cluster) says of itself at every connect; lockdb_inc.c the incarnation
 * of each scope's lock data; lockdb_script.c sends the
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

static void lockdb_lag(struct lockdb_node *n, bool cluster);

/*
 * What Redis says of itself (INFO memory persistence), asked first thing at
 * every connect, so its answer comes before any other on this connection.
 * An evicting Redis loses lock keys and fence counters under memory
 * pressure: no grant is made from it (docs/operations.md, Redis settings).
 * On a cluster each master is asked; one that may evict refuses grants
 * everywhere (it may serve any name).
 */
/* maxmemory-policy from INFO memory's text; logs a change to evicting. */
static void
lockdb_policy_read(int node, const char *info)
{
	struct lockdb_node *n = &lockdb.node[node];
	char was[sizeof n->refusal], policy[sizeof n->policy];
	const char *p;

	snprintf(was, sizeof was, "%s", n->refusal);
	n->policy[0] = '\0';
	if ((p = strstr(info, "maxmemory_policy:")) != NULL)
		sscanf(p + strlen("maxmemory_policy:"), "%31[a-z-]", n->policy);
	n->refusal[0] = '\0';
	if (n->policy[0] == '\0' || strcmp(n->policy, "noeviction") == 0)
		return;
	if (lockdb.allow_eviction) {
		if (!n->told_eviction)
			log_warnx(
			    "redis: maxmemory-policy is %s: Redis may evict locks and fence counters; granting anyway (redis.allow_eviction)",
			    n->policy);
		n->told_eviction = true;
		return;
	}
	snprintf(policy, sizeof policy, "%s", n->policy);
	snprintf(n->refusal, sizeof n->refusal,
	    "Redis maxmemory-policy is %s; locks need noeviction", policy);
	if (strcmp(was, n->refusal) != 0)
		log_warnx(
		    "redis: %s: no lock is granted until it is (or redis.allow_eviction)",
		    n->refusal);
}

/* The node's policy, and the broker's refusing gauge (any node's). */
static void
lockdb_policy(int node, const char *info)
{
	lockdb_policy_read(node, info);
	STAT_SET(redis_refusing, lockdb_refusal() != NULL ? 1 : 0);
}

/* A policy set while connected: INFO memory with the beat. */
static void
lockdb_memory_cb(const redisReply *r, void *arg)
{
	if (r != NULL && r->type == REDIS_REPLY_STRING)
		lockdb_policy((int)(intptr_t)arg, r->str);
}

void
lockdb_memory(int node)
{
	const char *info[2] = { "INFO", "memory" };
	size_t ilens[2] = { 4, 6 };

	lockdb.node[node].memory_ms = mono_ms();
	redisc_command_on(
	    node, 2, info, ilens, lockdb_memory_cb, (void *)(intptr_t)node);
}

static void
lockdb_info_cb(const redisReply *r, void *arg)
{
	int node = (int)(intptr_t)arg;
	struct lockdb_node *n = &lockdb.node[node];
	const char *p;

	if (r == NULL || r->type != REDIS_REPLY_STRING) {
		log_warnx(
		    "redis: INFO %s: cannot check maxmemory-policy (give the broker's Redis user +info)",
		    r != NULL && r->type == REDIS_REPLY_ERROR ? r->str
							      : "not answered");
		n->runid[0] = '\0'; /* a failover is then seen by the marker */
		lockdb_inc_node_known(node);
		return;
	}
	if (strstr(r->str, "cluster_enabled:1") != NULL) {
		redisc_cluster_found(node);
		lockdb_lag(n, true);
	}
	n->told_eviction = false; /* said again at every connect */
	n->refusal[0] = '\0';
	lockdb_policy(node, r->str);
	if (strstr(r->str, "aof_enabled:0") != NULL)
		log_info(
		    "redis: no append-only file: a restart loses the grants and fences made since its last snapshot (docs/operations.md, Redis settings)");
	n->runid[0] = '\0';
	if ((p = strstr(r->str, "run_id:")) != NULL)
		sscanf(p + strlen("run_id:"), "%47[0-9a-f]", n->runid);
	if ((p = strstr(r->str, "connected_slaves:")) != NULL &&
	    atoi(p + strlen("connected_slaves:")) > 0 && !n->min_replicas)
		log_warnx(
		    "redis: a master with replicas and min-replicas-to-write 0 (or unreadable): cut off from its replicas, it goes on granting after a failover (docs/operations.md, When Redis forgets)");
	/* A cluster's: up once every master said who it is (one Redis's
	 * once its incarnation is known, lockdb_inc.c). */
	if (redisc_cluster() && lockdb_up())
		STAT_SET(redis_up, 1);
	lockdb_inc_node_known(node);
}

/*
 * min-replicas-to-write and -max-lag, asked at every connect before INFO
 * (so known when incarnation.lua runs). A master cut off from its
 * replicas then refuses writes after max-lag seconds, the brokers'
 * incarnation beat (a script flagged as one that may write) with them,
 * and their holds end trust_ms later: a new incarnation's grace period
 * covers both. Without it such a master goes on granting after a
 * failover (split brain).
 */
/*
 * How long the node, cut off, may go on taking writes: min-replicas-max-lag
 * + 2 s with min-replicas-to-write; a cluster's master also stops once it
 * has not heard the majority for cluster-node-timeout (+ 1 s for the
 * cluster's cron; the default 15 s if it may not be read), whichever
 * comes first. The grace period a new incarnation asks for covers it.
 */
static void
lockdb_lag(struct lockdb_node *n, bool cluster)
{
	uint64_t lag = n->min_lag_ms;

	if (cluster) {
		uint64_t t = (n->node_timeout_ms > 0 ? n->node_timeout_ms
						     : LOCKDB_NODE_TIMEOUT_MS) +
		    1000;

		if (lag == 0 || t < lag)
			lag = t;
		/* Silent longer than that, it may have been replaced. */
		redisc_node_quiet((int)(n - lockdb.node),
		    n->node_timeout_ms > 0 ? n->node_timeout_ms
					   : LOCKDB_NODE_TIMEOUT_MS);
	}
	n->lag_ms = lag;
	snprintf(
	    n->grace, sizeof n->grace, "%" PRIu64, lockdb.grace_ms + n->lag_ms);
}

static void
lockdb_replicas_cb(const redisReply *r, void *arg)
{
	struct lockdb_node *n = &lockdb.node[(int)(intptr_t)arg];
	long long to_write = -1, lag = 0;

	if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
		log_info(
		    "redis: CONFIG GET min-replicas-*: %s: cannot check the split-brain settings (docs/operations.md, When Redis forgets)",
		    r != NULL && r->type == REDIS_REPLY_ERROR ? r->str
							      : "not answered");
		n->min_lag_ms = n->node_timeout_ms = 0;
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
			else if (strcmp(k->str, "cluster-node-timeout") == 0)
				n->node_timeout_ms = strtoull(v->str, NULL, 10);
		}
		/* Redis counts a replica's lag in whole seconds since its
		 * last ACK (sent every second), and its good replicas once
		 * a second: cut off, it takes writes max-lag + 2 s. */
		n->min_lag_ms =
		    to_write > 0 && lag > 0 ? ((uint64_t)lag + 2) * 1000 : 0;
		n->min_replicas = to_write > 0;
	}
	lockdb_lag(n, redisc_cluster());
}

static void
lockdb_connected(int node, void *arg)
{
	const char *argv[6] = { "INFO", "server", "memory", "persistence",
		"replication", "cluster" };
	size_t lens[6] = { 4, 6, 6, 11, 11, 7 };
	const char *cfg[5] = { "CONFIG", "GET", "min-replicas-to-write",
		"min-replicas-max-lag", "cluster-node-timeout" };
	size_t clens[5] = { 6, 3, 21, 20, 20 };
	struct lockdb_node *n = &lockdb.node[node];

	/* Unknown until INFO answers: no grant passes the gate meanwhile. */
	snprintf(n->runid, sizeof n->runid, "?");
	if (node == 0)
		lockdb.checked = false;
	n->min_replicas = false;
	n->memory_ms = mono_ms();
	redisc_command_on(
	    node, 5, cfg, clens, lockdb_replicas_cb, (void *)(intptr_t)node);
	redisc_command_on(
	    node, 6, argv, lens, lockdb_info_cb, (void *)(intptr_t)node);
	if (lockdb.up_fn != NULL)
		lockdb.up_fn(lockdb.up_arg);
}

/*
 * A request that MOVED sends to another master: its script's run_id
 * argument (the gate's, lib/process.lua) named the master it was first
 * sent to. It names the master it goes to now ("?" while that one is not
 * known), so that a marker there that still names the first master (the
 * slot moved with its keys, and no broker has made its new incarnation
 * yet) is not taken as confirmed on it: that master may even have been
 * failed over and back since, its data older. (ASK keeps it: there the
 * importing master has the slot's keys as the first one confirmed them.)
 */
static void
lockdb_moved(char **argv, size_t *lens, int argc, int from, int to)
{
	const char *was = lockdb.node[from].runid, *now = lockdb.node[to].runid;
	size_t wlen = strlen(was), nlen = strlen(now);

	if (wlen < 2 || nlen > wlen) /* "" or "?": no run_id was passed */
		return;
	for (int i = 2; i < argc; i++)
		if (lens[i] == wlen && memcmp(argv[i], was, wlen) == 0) {
			memcpy(argv[i], now, nlen);
			lens[i] = nlen;
		}
}

void
lockdb_on_connect(void (*fn)(void *), void *arg)
{
	lockdb.up_fn = fn;
	lockdb.up_arg = arg;
}

/* The first node in use that refuses grants for its policy. */
const char *
lockdb_refusal(void)
{
	for (int i = 0; i < redisc_nodes(); i++)
		if (redisc_node_used(i) && lockdb.node[i].refusal[0] != '\0')
			return lockdb.node[i].refusal;
	return NULL;
}

void
lockdb_allow_eviction(bool allow)
{
	lockdb.allow_eviction = allow;
}

/* One Redis: connected and its incarnation answered. A cluster: its map
 * known, every master connected and its INFO answered. */
bool
lockdb_up(void)
{
	if (!redisc_up())
		return false;
	if (!redisc_cluster())
		return lockdb.checked;
	for (int i = 0; i < redisc_nodes(); i++)
		if (redisc_node_used(i) &&
		    strcmp(lockdb.node[i].runid, "?") == 0)
			return false;
	return true;
}

bool
lockdb_up_for(const char *name)
{
	int node;

	if (!redisc_cluster())
		return lockdb_up();
	node = redisc_node_of(lockdb_scope_of(name));
	return redisc_node_up(node) &&
	    strcmp(lockdb.node[node].runid, "?") != 0;
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
lockdb_set_trust(uint64_t trust_ms)
{
	lockdb.trust_ms = trust_ms;
}

void
lockdb_init(const char *prefix, const char *broker, uint64_t handoff_ms,
    uint64_t live_ms, uint64_t grace_ms, uint64_t step_ms)
{
	lockdb.step_ms = step_ms;
	lockdb.evicted = -1;
	snprintf(lockdb.skew, sizeof lockdb.skew, "%" PRIu64, step_ms);
	lockdb.grace_ms = grace_ms > 0 ? grace_ms : 1;
	for (int i = 0; i < REDISC_NODES_MAX; i++)
		snprintf(lockdb.node[i].grace, sizeof lockdb.node[i].grace,
		    "%" PRIu64, lockdb.grace_ms);
	lockdb.prefix = prefix;
	lockdb.broker = broker;
	snprintf(lockdb.channel, sizeof lockdb.channel, "%sreleased", prefix);
	snprintf(lockdb.to, sizeof lockdb.to, "%sto:", prefix);
	snprintf(lockdb.mine, sizeof lockdb.mine, "%s%s", lockdb.to, broker);
	snprintf(lockdb.handoff, sizeof lockdb.handoff, "%" PRIu64,
	    (handoff_ms > 0 ? handoff_ms : 1) + step_ms);
	snprintf(lockdb.live, sizeof lockdb.live, "%" PRIu64,
	    live_ms > 0 ? live_ms : 1);
	lockdb_scopes_reset();
	redisc_on_connect(lockdb_connected, NULL);
	redisc_on_moved(lockdb_moved);
	lockdb_scripts_init();
}

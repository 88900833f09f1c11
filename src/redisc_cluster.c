/*
 * redisc_cluster: where a request goes. The one Redis (found directly or
 * through Sentinel) is node 0 and serves every request. A Redis Cluster,
 * named by redis.cluster's seed nodes or found when redis.host's node
 * answers CLUSTER SHARDS with a map, has a command connection per master
 * and a map of the 16384 slots to them, read from CLUSTER SHARDS (CLUSTER
 * SLOTS where SHARDS is unknown) at the first connect and again after a
 * MOVED, a CLUSTERDOWN or a node's connect. A request goes to its first
 * key's slot's node (every key of a name shares its slot); MOVED points
 * that slot elsewhere, asks for the map again and sends the request
 * there; ASK sends it there once, after ASKING; TRYAGAIN (the keys of a
 * slot being migrated, some here and some there) sends it again
 * REDISC_TRYAGAIN_MS later, until its deadline. Calls redisc.c's
 * requests and redisc_conn.c's connections.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "config.h"
#include "log.h"
#include "redisc.h"
#include "redisc_int.h"
#include "slot.h"
#include "util.h"
#include "xmalloc.h"

#define REDISC_MAP_MIN_MS 100 /* the map is asked for at most this often */
/* A map with slots nobody serves (a master failed, its replica not yet
 * promoted) is asked for again this often, until every slot is served. */
#define REDISC_MAP_PARTIAL_MS 250

static void redisc_map_ask(int node);
static void redisc_map_ev_cb(evutil_socket_t fd, short what, void *arg);
static void redisc_map_later(void);

/* "host:port" or "[v6]:port" (the config checked it) into its parts. */
void
redisc_split_hostport(const char *hp, char *host, size_t len, int *port)
{
	const char *colon = strrchr(hp, ':');
	size_t n = (size_t)(colon - hp);

	if (hp[0] == '[') {
		hp++;
		n -= 2;
	}
	snprintf(host, len, "%.*s", (int)n, hp);
	*port = atoi(colon + 1);
}

int
redisc_target_node(struct redisc_conn *conn, char *host, size_t len, int *port)
{
	const struct redisc_node *node = &rc.node[conn->node];

	snprintf(host, len, "%s", node->host);
	*port = node->port;
	return 0;
}

/* The cluster's nodes take turns: each has every published message. */
int
redisc_target_sub(struct redisc_conn *conn, char *host, size_t len, int *port)
{
	int n = rc.nnodes;

	if (!rc.cluster)
		return redisc_target_master(conn, host, len, port);
	for (int i = 0; i < n; i++) {
		int at = (int)((conn->attempts + (unsigned)i) % (unsigned)n);

		if (rc.node[at].in_map || !rc.mapped)
			return redisc_target_node(
			    &rc.node[at].conn, host, len, port);
	}
	return -1;
}

/* The node at host:port, added (and connected) if new; -1 if the table
 * is full. */
static int
redisc_node_at(const char *host, int port)
{
	struct redisc_node *node;

	for (int i = 0; i < rc.nnodes; i++)
		if (rc.node[i].port == port &&
		    strcmp(rc.node[i].host, host) == 0)
			return i;
	if (rc.nnodes == REDISC_NODES_MAX) {
		log_warnx("redis cluster: more than %d masters; %s:%d not used",
		    REDISC_NODES_MAX, host, port);
		return -1;
	}
	node = &rc.node[rc.nnodes];
	snprintf(node->host, sizeof node->host, "%s", host);
	node->port = port;
	redisc_conn_init(
	    &node->conn, "command", redisc_cmd_setup, redisc_target_node);
	node->conn.node = rc.nnodes++;
	redisc_doubt_init(node);
	if (rc.base_ready)
		redisc_conn_open(&node->conn);
	return node->conn.node;
}

static void
redisc_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct redisc_req *req = rc.retry, *next;

	rc.retry = NULL;
	for (; req != NULL; req = next) {
		next = req->retry_next;
		redisc_resend(req);
	}
}

void
redisc_cluster_init(void)
{
	const struct config_redis *cf = rc.cf;

	rc.map_ev = evtimer_new(rc.base, redisc_map_ev_cb, NULL);
	rc.retry_ev = evtimer_new(rc.base, redisc_retry_cb, NULL);
	if (rc.map_ev == NULL || rc.retry_ev == NULL)
		fatalx("redisc: evtimer_new failed");
	rc.slot = xcalloc(SLOT_COUNT, sizeof *rc.slot);
	memset(rc.slot, 0xff, SLOT_COUNT * sizeof *rc.slot); /* -1: none */
	if (cf->ncluster == 0) {
		redisc_conn_init(&rc.node[0].conn, "command", redisc_cmd_setup,
		    redisc_target_master);
		rc.node[0].conn.node = 0;
		redisc_doubt_init(&rc.node[0]);
		rc.nnodes = 1;
		return;
	}
	rc.cluster = true;
	for (int i = 0; i < cf->ncluster; i++) {
		char host[256];
		int port;

		redisc_split_hostport(cf->cluster[i], host, sizeof host, &port);
		redisc_node_at(host, port);
	}
}

void
redisc_cluster_stop(void)
{
	struct redisc_req *req = rc.retry, *next;

	for (int i = 0; i < rc.nnodes; i++)
		redisc_conn_close(&rc.node[i].conn);
	redisc_doubt_stop();
	rc.retry = NULL;
	for (; req != NULL; req = next) {
		next = req->retry_next;
		if (!req->answered)
			req->cb(NULL, req->arg);
		req->answered = true;
		redisc_req_free(req);
	}
	event_free(rc.retry_ev);
	event_free(rc.map_ev);
	free(rc.slot);
	rc.slot = NULL;
}

int
redisc_route(const struct redisc_req *req)
{
	if (!rc.cluster)
		return 0;
	if (req->slot < 0 || req->asking)
		return req->node;
	return rc.slot[req->slot];
}

/* One reply element as a string (bulk or status), or "". */
static const char *
redisc_str(const redisReply *r)
{
	if (r == NULL ||
	    (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS))
		return "";
	return r->str;
}

/* A map's slots [lo, hi] to the node at host:port. */
static void
redisc_map_range(
    int16_t *map, long long lo, long long hi, const char *host, long long port)
{
	int node;

	/* An empty address is the node's that was asked (a node that does
	 * not know its own: a cluster of one, without cluster-announce-ip). */
	if (host[0] == '\0')
		host = rc.node[rc.map_node].host;
	if (lo < 0 || hi >= SLOT_COUNT || lo > hi || port <= 0 ||
	    port > 65535 || host[0] == '\0')
		return;
	if ((node = redisc_node_at(host, (int)port)) < 0)
		return;
	rc.node[node].in_map = true;
	for (long long s = lo; s <= hi; s++)
		map[s] = (int16_t)node;
}

/*
 * One shard of CLUSTER SHARDS: "slots" [lo, hi, ...], "nodes" [{"id",
 * "port", "ip", "endpoint", "role", ..., "health"}...]: its master, if
 * online, serves the slots.
 */
static void
redisc_map_shard(int16_t *map, const redisReply *shard)
{
	const redisReply *slots = NULL, *nodes = NULL;

	for (size_t i = 0; i + 1 < shard->elements; i += 2) {
		const char *k = redisc_str(shard->element[i]);

		if (strcmp(k, "slots") == 0)
			slots = shard->element[i + 1];
		else if (strcmp(k, "nodes") == 0)
			nodes = shard->element[i + 1];
	}
	if (slots == NULL || nodes == NULL ||
	    slots->type != REDIS_REPLY_ARRAY ||
	    nodes->type != REDIS_REPLY_ARRAY)
		return;
	for (size_t n = 0; n < nodes->elements; n++) {
		const redisReply *node = nodes->element[n];
		const char *host = "", *ip = "", *role = "", *health = "";
		long long port = 0;

		if (node->type != REDIS_REPLY_ARRAY)
			continue;
		for (size_t i = 0; i + 1 < node->elements; i += 2) {
			const char *k = redisc_str(node->element[i]);
			const redisReply *v = node->element[i + 1];

			if (strcmp(k, "port") == 0 &&
			    v->type == REDIS_REPLY_INTEGER)
				port = v->integer;
			else if (strcmp(k, "endpoint") == 0)
				host = redisc_str(v);
			else if (strcmp(k, "ip") == 0)
				ip = redisc_str(v);
			else if (strcmp(k, "role") == 0)
				role = redisc_str(v);
			else if (strcmp(k, "health") == 0)
				health = redisc_str(v);
		}
		if (strcmp(role, "master") != 0 ||
		    strcmp(health, "online") != 0)
			continue;
		if (host[0] == '\0' || strcmp(host, "?") == 0)
			host = ip;
		for (size_t i = 0; i + 1 < slots->elements; i += 2)
			redisc_map_range(map, slots->element[i]->integer,
			    slots->element[i + 1]->integer, host, port);
	}
}

/* One range of CLUSTER SLOTS: lo, hi, {ip, port, id...} of its master,
 * then its replicas'. */
static void
redisc_map_slots(int16_t *map, const redisReply *range)
{
	const redisReply *m;

	if (range->elements < 3 ||
	    range->element[0]->type != REDIS_REPLY_INTEGER ||
	    range->element[1]->type != REDIS_REPLY_INTEGER)
		return;
	m = range->element[2];
	if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
	    m->element[1]->type != REDIS_REPLY_INTEGER)
		return;
	redisc_map_range(map, range->element[0]->integer,
	    range->element[1]->integer, redisc_str(m->element[0]),
	    m->element[1]->integer);
}

/* A node the map no longer names (a master turned replica, a seed that
 * is one): its connection closed once nothing is in flight or held
 * there, rather than kept (and reconnected) for nothing. The map names
 * it again if it serves slots again. */
void
redisc_node_park(int node)
{
	struct redisc_conn *conn = &rc.node[node].conn;
	struct redisc_req *req;
	char name[300];

	if (!rc.cluster || !rc.mapped || rc.node[node].in_map || conn->parked ||
	    redisc_doubted(node))
		return;
	TAILQ_FOREACH (req, &rc.inflight, entry)
		if (req->node == node)
			return;
	if (conn->ac != NULL)
		log_info("redis cluster: %s serves no slots: connection closed",
		    redisc_node_name(node, name, sizeof name));
	redisc_park(conn);
}

/* A new map: its nodes connected, those no longer in it left alone (a
 * request still routed there is answered MOVED). */
static void
redisc_map_use(const redisReply *r, bool shards)
{
	int16_t *map = xcalloc(SLOT_COUNT, sizeof *map);
	int served = 0;

	memset(map, 0xff, SLOT_COUNT * sizeof *map);
	for (int i = 0; i < rc.nnodes; i++)
		rc.node[i].in_map = false;
	for (size_t i = 0; i < r->elements; i++) {
		if (r->element[i]->type != REDIS_REPLY_ARRAY)
			continue;
		if (shards)
			redisc_map_shard(map, r->element[i]);
		else
			redisc_map_slots(map, r->element[i]);
	}
	for (int s = 0; s < SLOT_COUNT; s++)
		served += map[s] >= 0;
	memcpy(rc.slot, map, SLOT_COUNT * sizeof *map);
	free(map);
	if (!rc.mapped || served != rc.served)
		log_info("redis cluster: %d slots of %d served, by %d masters",
		    served, SLOT_COUNT, redisc_masters());
	rc.mapped = true;
	rc.served = served;
	if (served < SLOT_COUNT && !evtimer_pending(rc.map_ev, NULL)) {
		struct timeval tv = util_timeval(REDISC_MAP_PARTIAL_MS);

		evtimer_add(rc.map_ev, &tv);
	}
	for (int i = 0; i < rc.nnodes; i++) {
		struct redisc_conn *conn = &rc.node[i].conn;

		if (rc.node[i].in_map && conn->ac == NULL &&
		    !evtimer_pending(conn->reconnect_ev, NULL))
			redisc_conn_open(conn);
		else
			redisc_node_park(i);
	}
}

/* The map's answer: CLUSTER SHARDS's (arg's low bit 1) or CLUSTER
 * SLOTS's (0); the rest of arg is which map it is (one forgotten is
 * ignored). */
static void
redisc_map_cb(const redisReply *r, void *arg)
{
	bool shards = ((uintptr_t)arg & 1) != 0;

	if ((unsigned)((uintptr_t)arg >> 1) != rc.map_seq)
		return;
	rc.mapping = false;
	if (r == NULL) {
		rc.node[rc.map_node].map_failed_ms = mono_ms();
		redisc_map_later();
		return;
	}
	if (r->type == REDIS_REPLY_ERROR && shards &&
	    strncmp(r->str, "ERR unknown subcommand", 22) == 0) {
		rc.shards_unknown = true; /* an older Redis */
		redisc_map_ev_cb(-1, 0, NULL);
		return;
	}
	if (r->type != REDIS_REPLY_ARRAY) {
		redisc_map_later();
		log_warnx(
		    "redis cluster: CLUSTER %s: %s (the broker's Redis user needs +cluster|shards and +cluster|slots)",
		    shards ? "SHARDS" : "SLOTS",
		    r->type == REDIS_REPLY_ERROR ? r->str : "not a map");
		return;
	}
	redisc_map_use(r, shards);
	redisc_doubt_mapped(rc.map_node, rc.mapped_ms);
}

/* Ask node for the map, at most every REDISC_MAP_MIN_MS (later if it
 * was asked for just now), one at a time. */
static void
redisc_map_ask(int node)
{
	const char *argv[2] = { "CLUSTER",
		rc.shards_unknown ? "SLOTS" : "SHARDS" };
	size_t lens[2] = { 7, rc.shards_unknown ? 5u : 6u };
	uint64_t now = mono_ms();
	struct redisc_req *req;

	if (rc.mapping || evtimer_pending(rc.map_ev, NULL))
		return;
	/* Another that is up and answers, or later. */
	if (!redisc_node_up(node) ||
	    now < rc.node[node].map_failed_ms + REDISC_MAP_AVOID_MS) {
		if ((node = redisc_map_pick(-1)) < 0) {
			struct timeval tv = util_timeval(REDISC_MAP_MIN_MS);

			evtimer_add(rc.map_ev, &tv);
			return;
		}
	}
	if (rc.mapped_ms != 0 && now < rc.mapped_ms + REDISC_MAP_MIN_MS) {
		struct timeval tv =
		    util_timeval(rc.mapped_ms + REDISC_MAP_MIN_MS - now);

		evtimer_add(rc.map_ev, &tv);
		return;
	}
	rc.mapping = true;
	rc.mapped_ms = now;
	rc.map_node = node;
	rc.map_seq++;
	req = redisc_req_new(2, argv, lens, redisc_map_cb,
	    (void *)(((uintptr_t)rc.map_seq << 1) | !rc.shards_unknown));
	req->node = node;
	redisc_submit(req);
}

/* The map, asked of the node that answers best (of another than one in
 * doubt while one is). */
static void
redisc_map_ev_cb(evutil_socket_t fd, short what, void *arg)
{
	int node;

	for (int i = 0; i < rc.nnodes; i++)
		if (redisc_doubted(i)) {
			redisc_map_ask_other(i);
			return;
		}
	if ((node = redisc_map_pick(-1)) >= 0)
		redisc_map_ask(node);
}

/* The map asked for again soon: the last ask failed. */
static void
redisc_map_later(void)
{
	struct timeval tv = util_timeval(REDISC_MAP_PARTIAL_MS);

	if (!evtimer_pending(rc.map_ev, NULL))
		evtimer_add(rc.map_ev, &tv);
}

void
redisc_map_forget(int node)
{
	if (rc.mapping && rc.map_node == node) {
		rc.mapping = false;
		rc.map_seq++;
	}
}

/* Not held back by REDISC_MAP_MIN_MS: replies wait for it, and a node
 * is in doubt at most once a silence. */
void
redisc_map_ask_other(int node)
{
	int other = redisc_doubt_asker(node);

	if (other < 0) {
		redisc_map_later();
		return;
	}
	if (!rc.mapping) {
		evtimer_del(rc.map_ev);
		rc.mapped_ms = 0;
	}
	redisc_map_ask(other);
}

void
redisc_cluster_found(int node)
{
	if (rc.cluster)
		return;
	log_info(
	    "redis: %s:%d is a cluster's node: the cluster's masters serve the names of their slots",
	    rc.cf->host, rc.cf->port);
	snprintf(rc.node[0].host, sizeof rc.node[0].host, "%s", rc.cf->host);
	rc.node[0].port = rc.cf->port;
	rc.node[0].conn.target = redisc_target_node;
	rc.cluster = true;
	redisc_map_ask(node);
}

bool
redisc_cluster(void)
{
	return rc.cluster;
}

/* A node's command connection is ready: the map may have changed (a
 * failover, a node back). */
void
redisc_cluster_connected(struct redisc_node *node)
{
	if (rc.cluster)
		redisc_map_ask(node->conn.node);
}

void
redisc_cluster_lost(int node)
{
	redisc_map_ask(node);
}

int
redisc_masters(void)
{
	int n = 0;

	for (int i = 0; i < rc.nnodes; i++)
		n += rc.node[i].in_map;
	return n;
}

/* "MOVED <slot> <host>:<port>" or "ASK ...": REDISC_MOVED or REDISC_ASK,
 * else 0. */
int
redisc_redirect_parse(
    const char *err, int *slot, char *host, size_t len, int *port)
{
	int kind = strncmp(err, "MOVED ", 6) == 0 ? REDISC_MOVED
	    : strncmp(err, "ASK ", 4) == 0	  ? REDISC_ASK
						  : 0;
	const char *p = strchr(err, ' '), *hp, *colon;
	char *end;
	long v;

	if (kind == 0 || p == NULL)
		return 0;
	v = strtol(p + 1, &end, 10);
	if (end == p + 1 || *end != ' ' || v < 0 || v >= SLOT_COUNT)
		return 0;
	hp = end + 1;
	if ((colon = strrchr(hp, ':')) == NULL || colon == hp ||
	    (size_t)(colon - hp) >= len)
		return 0;
	*slot = (int)v;
	snprintf(host, len, "%.*s", (int)(colon - hp), hp);
	v = strtol(colon + 1, &end, 10);
	if (end == colon + 1 || *end != '\0' || v <= 0 || v > 65535)
		return 0;
	*port = (int)v;
	return kind;
}

bool
redisc_cluster_word(const redisReply *r)
{
	static const char *const words[] = { "MOVED ", "ASK ", "TRYAGAIN",
		"CLUSTERDOWN" };

	if (r == NULL || r->type != REDIS_REPLY_ERROR)
		return false;
	for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
		if (strncmp(r->str, words[i], strlen(words[i])) == 0)
			return true;
	return false;
}

/* TRYAGAIN: sent again a moment later (its deadline still holds). */
static void
redisc_retry_later(struct redisc_req *req)
{
	struct timeval tv = util_timeval(REDISC_TRYAGAIN_MS);

	req->retry_next = rc.retry;
	rc.retry = req;
	if (!evtimer_pending(rc.retry_ev, NULL))
		evtimer_add(rc.retry_ev, &tv);
}

bool
redisc_cluster_redirect(struct redisc_req *req, const redisReply *r)
{
	char host[256];
	int slot, port, node, kind;

	if (strncmp(r->str, "TRYAGAIN", 8) == 0 && req->slot >= 0) {
		rc.node[req->node].redirects++;
		redisc_retry_later(req);
		return true;
	}
	if (strncmp(r->str, "CLUSTERDOWN", 11) == 0) {
		rc.node[req->node].redirects++;
		redisc_map_ask(req->node);
		return false;
	}
	kind = redisc_redirect_parse(r->str, &slot, host, sizeof host, &port);
	if (kind != 0) {
		rc.node[req->node].redirects++;
		log_debug("redis cluster: %s", r->str);
	}
	if (kind == 0 || req->slot < 0 || req->redirects >= REDISC_REDIRECTS ||
	    (node = redisc_node_at(host, port)) < 0)
		return false;
	req->redirects++;
	req->asking = kind == REDISC_ASK;
	if (kind == REDISC_MOVED) {
		rc.slot[slot] = (int16_t)node;
		redisc_map_ask(node);
		if (rc.moved_fn != NULL)
			rc.moved_fn(
			    req->argv, req->lens, req->argc, req->node, node);
	}
	req->node = node;
	redisc_resend(req);
	return true;
}

void
redisc_on_moved(redisc_moved_fn *fn)
{
	rc.moved_fn = fn;
}

int
redisc_node_of(int slot)
{
	if (!rc.cluster)
		return 0;
	return slot >= 0 && slot < SLOT_COUNT ? rc.slot[slot] : -1;
}

int
redisc_nodes(void)
{
	return rc.nnodes;
}

bool
redisc_node_stats(int node, struct redisc_node_stats *st)
{
	const struct redisc_node *n = &rc.node[node];

	if (node < 0 || node >= rc.nnodes || !redisc_node_used(node))
		return false;
	redisc_node_name(node, st->addr, sizeof st->addr);
	st->up = n->conn.up;
	st->requests = n->requests;
	st->timeouts = n->timeouts;
	st->redirects = n->redirects;
	return true;
}

bool
redisc_node_up(int node)
{
	return node >= 0 && node < rc.nnodes && rc.node[node].conn.up;
}

bool
redisc_node_used(int node)
{
	return !rc.cluster || rc.node[node].in_map;
}

const char *
redisc_node_name(int node, char *buf, size_t len)
{
	if (!rc.cluster)
		snprintf(buf, len, "%s",
		    rc.cf->unix_path[0] != '\0' ? rc.cf->unix_path : "redis");
	else
		snprintf(
		    buf, len, "%s:%d", rc.node[node].host, rc.node[node].port);
	return buf;
}

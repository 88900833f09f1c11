/*
 * lockdb: keys, scripts and reply parsing. Every compare-and-act runs as one
 * Lua script, so nothing ever deletes or extends a lock it does not own.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chaos.h"
#include "lockdb.h"
#include "log.h"
#include "lua_scripts.h"
#include "proto.h"
#include "redisc.h"
#include "stats.h"
#include "util.h"
#include "xmalloc.h"

/*
 * The scripts live in src/lua/<script>.lua, each with its KEYS, ARGV and
 * replies in its opening comment, and are embedded at build time
 * (lua_scripts.h, made by src/lua/embed.py). A script is passed the lock
 * key "<prefix>{<name>}" and the keys of no name "<prefix><word>" its
 * KEYS line declares; it names the name's other keys as the lock key and
 * their suffix itself.
 */
#define LOCKDB_KEYS_MAX 4 /* passed keys of one script */

struct lockdb_script {
	struct redisc_script rs;
	int nkeys;
	const char *keys[LOCKDB_KEYS_MAX];
	int nargs; /* its ARGV, each named: LUA_<X>_ARG_<NAME> is its index */
};

#define LOCKDB_SCRIPT(x, X)                                                    \
	static struct lockdb_script lockdb_lua_##x = {                         \
		{ LUA_##X##_FILE, LUA_##X##_BODY, "" }, LUA_##X##_NKEYS,       \
		LUA_##X##_KEYS, LUA_##X##_NARGS                                \
	}

LOCKDB_SCRIPT(acquire, ACQUIRE);
LOCKDB_SCRIPT(share, SHARE);
LOCKDB_SCRIPT(release, RELEASE);
LOCKDB_SCRIPT(blind_release, BLIND_RELEASE); /* CHAOS_BLIND_RELEASE */
LOCKDB_SCRIPT(cancel, CANCEL);
LOCKDB_SCRIPT(extend, EXTEND);
LOCKDB_SCRIPT(status, STATUS);
LOCKDB_SCRIPT(who, WHO);
LOCKDB_SCRIPT(check, CHECK);
LOCKDB_SCRIPT(revoke, REVOKE);
LOCKDB_SCRIPT(incarnation, INCARNATION);
LOCKDB_SCRIPT(batch, BATCH); /* acquire's and release's calls, batched */

/* blind_release.lua is sent release.lua's arguments: the first it names. */
_Static_assert(LUA_BLIND_RELEASE_ARG_TOKEN == LUA_RELEASE_ARG_TOKEN &&
	LUA_BLIND_RELEASE_ARG_CHANNEL == LUA_RELEASE_ARG_CHANNEL &&
	LUA_BLIND_RELEASE_ARG_LOCK_NAME == LUA_RELEASE_ARG_LOCK_NAME &&
	LUA_BLIND_RELEASE_NARGS <= LUA_RELEASE_NARGS,
    "blind_release.lua takes release.lua's arguments");

enum lockdb_op {
	LDB_ACQUIRE,
	LDB_RELEASE,
	LDB_CANCEL,
	LDB_EXTEND,
	LDB_STATUS,
	LDB_WHO,
	LDB_REVOKE,
	LDB_CHECK,
	LDB_WAIT
};

struct lockdb_req {
	enum lockdb_op op;
	const struct lockdb_script *script; /* NULL for WAIT */
	lockdb_cb *cb;
	void *arg;
	unsigned incs; /* ldb.incs when it was sent */
	char name[];   /* for logs */
};

static struct {
	const char *prefix;
	const char *broker;   /* "<host>:<pid>:<random>", as entries name it */
	char channel[128];    /* the release channel, every broker's */
	char to[128];	      /* "<prefix>to:": + a broker, that broker's */
	char mine[256];	      /* this broker's: hand-overs to its tickets */
	char handoff[24];     /* ms a hand-over waits for its broker */
	char live[24];	      /* ms a broker with waiters goes without asking */
	uint64_t step_ms;     /* every lease's margin in Redis (lockdb_init) */
	char skew[24];	      /* step_ms, as incarnation.lua takes it */
	int64_t evicted;      /* Redis's evicted_keys at the last beat, or -1 */
	lockdb_news_fn *news; /* what the channels say goes here */
	void (*up_fn)(void *); /* the engine's, at every connect */
	void *up_arg;
	bool allow_eviction;
	char policy[32];  /* Redis's maxmemory-policy, "" until known */
	char refusal[96]; /* lockdb_refusal's text, "" for none */
	/* The incarnation of the lock data (incarnation.lua). */
	char inc[32];	   /* the id this broker knows, "" until it knows one */
	char runid[48];	   /* the command connection's Redis: "?" until INFO
			    answers, "" if it may not be read */
	uint64_t grace_ms; /* a new incarnation refuses grants this long */
	uint64_t lag_ms;   /* how long a master cut off from its replicas
			      takes writes (min-replicas-max-lag + 2 s) */
	char grace[24];	   /* grace_ms + lag_ms, as incarnation.lua takes it */
	bool asking;	   /* an incarnation.lua is out */
	bool quiet;	   /* lockdb_quiet: nothing held, nobody waits */
	unsigned incs;	   /* incarnations learned (changes of inc) */
	bool checked;	   /* answered on this connection */
	bool min_replicas; /* min-replicas-to-write > 0, as far as known */
	bool told_need;	   /* warned of a longer grace period elsewhere */
	bool told_eviction; /* warned of evicting, allowed, since connect */
	unsigned beats;	    /* incarnation questions asked */
	lockdb_inc_fn *inc_fn;
	char why[96]; /* a gate's refusal, for lockdb_reply.why */
} ldb;

/*
 * News of a name, on this broker's own channel or, when which brokers it
 * concerns is unknown, on the release channel every broker hears
 * (lib/tell.lua): "<name>" (its waiters may try), "<name> revoked
 * <fence>", or "<name> released|shortened <fence> <broker>" (names hold
 * no space). A release or shortening this broker made is only a release
 * for its waiters: it dealt with its own holds when it made it.
 */
static bool
lockdb_parse_news(char **w, int n, struct lockdb_news *news)
{
	news->name = w[0];
	news->kind = LDB_NEWS_RELEASED;
	if (n == 1)
		return true;
	if (n == 2 || n > 4 ||
	    proto_parse_u64(w[2], UINT64_MAX, &news->fence) != 0)
		return false;
	if (n == 3 && strcmp(w[1], "revoked") == 0)
		news->kind = LDB_NEWS_REVOKED;
	else if (n == 4 &&
	    (strcmp(w[1], "released") == 0 || strcmp(w[1], "shortened") == 0))
		news->kind = strcmp(w[3], ldb.broker) != 0 ? LDB_NEWS_GONE
							   : LDB_NEWS_RELEASED;
	else
		return false;
	return true;
}

/* On this broker's channel only: "<name> <n> <fence> <token> <ttl>", a
 * release handed name to ticket n for ttl ms (an older broker's says no
 * ttl). */
static bool
lockdb_parse_handed(char **w, int n, struct lockdb_news *news)
{
	if ((n != 4 && n != 5) ||
	    proto_parse_u64(w[1], UINT64_MAX, &news->ticket) != 0 ||
	    proto_parse_u64(w[2], UINT64_MAX, &news->fence) != 0 ||
	    !proto_valid_token(w[3]) ||
	    (n == 5 &&
		(proto_parse_u64(w[4], UINT64_MAX, &news->ttl_ms) != 0 ||
		    news->ttl_ms == 0)))
		return false;
	/* The lease in Redis has the margin lockdb_init says; the broker
	 * trusts the rest. */
	if (news->ttl_ms != 0)
		news->ttl_ms = news->ttl_ms > ldb.step_ms + 1
		    ? news->ttl_ms - ldb.step_ms
		    : 1;
	news->kind = LDB_NEWS_HANDED;
	news->name = w[0];
	news->token = w[3];
	return true;
}

static void
lockdb_message_cb(const char *channel, const char *msg, size_t len, void *arg)
{
	struct lockdb_news news = { LDB_NEWS_MISSED, NULL, 0, 0, NULL, 0 };
	char buf[PROTO_NAME_MAX + 160], *w[6];
	int n;

	if (msg != NULL) {
		if (len >= sizeof buf)
			return;
		memcpy(buf, msg, len);
		buf[len] = '\0';
		n = proto_split(buf, len, w, 6);
		if (n < 1 || !proto_valid_name(w[0]))
			return;
		/* A hand-over's second word is a ticket's number. */
		if (n >= 4 && strcmp(channel, ldb.mine) == 0 &&
			    isdigit((unsigned char)w[1][0])
			? !lockdb_parse_handed(w, n, &news)
			: !lockdb_parse_news(w, n, &news))
			return;
	}
	ldb.news(&news);
}

void
lockdb_subscribe(lockdb_news_fn *fn)
{
	ldb.news = fn;
	redisc_subscribe(ldb.channel, ldb.mine, lockdb_message_cb, NULL);
}

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
	char was[sizeof ldb.refusal];
	const char *p;

	snprintf(was, sizeof was, "%s", ldb.refusal);
	ldb.policy[0] = '\0';
	if ((p = strstr(info, "maxmemory_policy:")) != NULL)
		sscanf(
		    p + strlen("maxmemory_policy:"), "%31[a-z-]", ldb.policy);
	ldb.refusal[0] = '\0';
	if (ldb.policy[0] == '\0' || strcmp(ldb.policy, "noeviction") == 0)
		return;
	if (ldb.allow_eviction) {
		if (!ldb.told_eviction)
			log_warnx(
			    "redis: maxmemory-policy is %s: Redis may evict locks and fence counters; granting anyway (redis.allow_eviction)",
			    ldb.policy);
		ldb.told_eviction = true;
		return;
	}
	snprintf(ldb.refusal, sizeof ldb.refusal,
	    "Redis maxmemory-policy is %s; locks need noeviction", ldb.policy);
	if (strcmp(was, ldb.refusal) != 0)
		log_warnx(
		    "redis: %s: no lock is granted until it is (or redis.allow_eviction)",
		    ldb.refusal);
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
		ldb.runid[0] = '\0'; /* a failover is then seen by the marker */
		lockdb_incarnation();
		return;
	}
	ldb.told_eviction = false; /* said again at every connect */
	ldb.refusal[0] = '\0';
	lockdb_policy(r->str);
	if (strstr(r->str, "aof_enabled:0") != NULL)
		log_info(
		    "redis: no append-only file: a restart loses the grants and fences made since its last snapshot (docs/operations.md, Redis settings)");
	ldb.runid[0] = '\0';
	if ((p = strstr(r->str, "run_id:")) != NULL)
		sscanf(p + strlen("run_id:"), "%47[0-9a-f]", ldb.runid);
	if ((p = strstr(r->str, "connected_slaves:")) != NULL &&
	    atoi(p + strlen("connected_slaves:")) > 0 && !ldb.min_replicas)
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
		ldb.lag_ms = 0;
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
		ldb.lag_ms =
		    to_write > 0 && lag > 0 ? ((uint64_t)lag + 2) * 1000 : 0;
		ldb.min_replicas = to_write > 0;
	}
	snprintf(
	    ldb.grace, sizeof ldb.grace, "%" PRIu64, ldb.grace_ms + ldb.lag_ms);
}

static void
lockdb_connected(void *arg)
{
	const char *argv[5] = { "INFO", "server", "memory", "persistence",
		"replication" };
	size_t lens[5] = { 4, 6, 6, 11, 11 };
	const char *cfg[4] = { "CONFIG", "GET", "min-replicas-to-write",
		"min-replicas-max-lag" };
	size_t clens[4] = { 6, 3, 21, 20 };

	/* Unknown until INFO answers: no grant passes the gate meanwhile. */
	snprintf(ldb.runid, sizeof ldb.runid, "?");
	ldb.asking = false; /* an answer on the old connection is gone */
	ldb.checked = false;
	ldb.min_replicas = false;
	redisc_command(4, cfg, clens, lockdb_replicas_cb, NULL);
	redisc_command(5, argv, lens, lockdb_info_cb, NULL);
	if (ldb.up_fn != NULL)
		ldb.up_fn(ldb.up_arg);
}

void
lockdb_on_connect(void (*fn)(void *), void *arg)
{
	ldb.up_fn = fn;
	ldb.up_arg = arg;
}

const char *
lockdb_refusal(void)
{
	return ldb.refusal[0] != '\0' ? ldb.refusal : NULL;
}

void
lockdb_allow_eviction(bool allow)
{
	ldb.allow_eviction = allow;
}

bool
lockdb_up(void)
{
	return redisc_up() && ldb.checked;
}

/* Replies that mean "Redis cannot serve now", as opposed to a bug: the
 * code word, or NULL. */
static const char *
lockdb_busy_error(const char *err)
{
	static const char *const busy[] = { "LOADING", "BUSY", "READONLY",
		"MASTERDOWN", "OOM", "NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN",
		"NOAUTH", "WRONGPASS" };
	size_t n;

	for (size_t i = 0; i < sizeof busy / sizeof busy[0]; i++) {
		n = strlen(busy[i]);
		if (strncmp(err, busy[i], n) == 0 &&
		    (err[n] == ' ' || err[n] == '\0'))
			return busy[i];
	}
	return NULL;
}

/* A lease left in Redis as the broker shows and trusts it: without the
 * margin lockdb_init says every lease has there (0 when only that is
 * left; negative, no lease: 0). */
static uint64_t
lockdb_left(long long pttl)
{
	return pttl > 0 && (uint64_t)pttl > ldb.step_ms
	    ? (uint64_t)pttl - ldb.step_ms
	    : 0;
}

/* The scripts' array replies hold integers; v gets up to six. */
static bool
lockdb_ints(const redisReply *r, size_t min, long long *v)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements < min)
		return false;
	for (size_t i = 0; i < r->elements && i < 6; i++) {
		if (r->element[i]->type != REDIS_REPLY_INTEGER)
			return false;
		v[i] = r->element[i]->integer;
	}
	return true;
}

/* WHO's {pttl, info, ...} pairs; the infos point into r. */
static bool
lockdb_parse_who(const redisReply *r, struct lockdb_reply *out)
{
	struct lockdb_holder *h;

	if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0)
		return false;
	out->nholders = r->elements / 2;
	if (out->nholders == 0)
		return true;
	out->holders = h = xcalloc(out->nholders, sizeof *h);
	for (size_t i = 0; i < out->nholders; i++) {
		const redisReply *t = r->element[2 * i];
		const redisReply *info = r->element[2 * i + 1];

		if (t->type != REDIS_REPLY_INTEGER ||
		    info->type != REDIS_REPLY_STRING)
			return false;
		h[i].pttl = lockdb_left(t->integer);
		h[i].info = info->str;
	}
	return true;
}

/*
 * A closed incarnation gate (lib/gate.lua): the marker names another
 * incarnation than ours (-1: ask which), or its grace period has ms left
 * (-2). Nothing was granted: as Redis unable to serve.
 */
static bool
lockdb_gate_closed(long long code, long long ms, struct lockdb_reply *out)
{
	out->status = LDB_UNAVAILABLE;
	out->pttl = ms > 0 ? (uint64_t)ms : 0;
	if (code == -1) {
		snprintf(ldb.why, sizeof ldb.why,
		    "Redis holds lock data this broker has not checked yet");
		out->again = true; /* if learned since: lockdb_reply_cb */
		lockdb_incarnation();
	} else
		snprintf(ldb.why, sizeof ldb.why,
		    "Redis forgot its locks; no grant for %lld ms (grace period)",
		    ms);
	out->why = ldb.why;
	return true;
}

/* An ACQUIRE's {1, fence}, {0, pttl, fence, marked}, {2, done} or
 * {3, n}. */
static bool
lockdb_parse_acquire(const long long *v, struct lockdb_reply *out)
{
	switch (v[0]) {
	case -1:
	case -2:
		return lockdb_gate_closed(v[0], v[1], out);
	case 1:
		out->status = LDB_OK;
		out->fence = (uint64_t)v[1];
		return v[1] > 0;
	case 0:
		out->status = LDB_NO;
		/* No expiry (-1): none to wait for. */
		out->pttl = v[1] == -1 ? UINT64_MAX
		    : v[1] > 0	       ? (uint64_t)v[1]
				       : 0;
		out->fence = v[2] > 0 ? (uint64_t)v[2] : 0;
		out->marked = v[3] == 1;
		out->head = v[4] > 0 ? (uint64_t)v[4] : 0;
		return v[1] >= -2;
	case 2:
		out->status = LDB_DONE;
		out->fence = (uint64_t)v[1];
		return v[1] > 0;
	case 3:
		out->status = LDB_CONFLICT;
		out->mode = v[1] > 0 ? LDB_LIMIT
		    : v[1] == 0	     ? LDB_SHARED
				     : LDB_EXCLUSIVE;
		out->limit =
		    v[1] > 0 && v[1] <= UINT32_MAX ? (unsigned)v[1] : 0;
		return true;
	}
	return false;
}

/* A release's {0}, {1}, {1, fence, 0} (handed to another broker's
 * ticket) or {1, fence, n, token} (to ours). */
static bool
lockdb_parse_release(const redisReply *r, struct lockdb_reply *out)
{
	redisReply **e = r->element;

	if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
	    e[0]->type != REDIS_REPLY_INTEGER)
		return false;
	out->status = e[0]->integer == 1 ? LDB_OK : LDB_NO;
	if (r->elements == 1)
		return true;
	if (r->elements < 3 || e[1]->type != REDIS_REPLY_INTEGER ||
	    e[1]->integer <= 0 || e[2]->type != REDIS_REPLY_INTEGER ||
	    e[2]->integer < 0)
		return false;
	out->fence = (uint64_t)e[1]->integer;
	out->ticket = (uint64_t)e[2]->integer;
	if (out->ticket == 0)
		return r->elements == 3;
	if (r->elements != 4 || e[3]->type != REDIS_REPLY_STRING ||
	    !proto_valid_token(e[3]->str))
		return false;
	out->token = e[3]->str;
	return true;
}

/* Turn one script reply into a lockdb_reply; false if malformed. */
static bool
lockdb_parse(enum lockdb_op op, const redisReply *r, struct lockdb_reply *out)
{
	long long v[6] = { 0, 0, 0, 0, 0, 0 };

	switch (op) {
	case LDB_ACQUIRE:
		return lockdb_ints(r, 2, v) && lockdb_parse_acquire(v, out);
	case LDB_RELEASE:
		return lockdb_parse_release(r, out);
	case LDB_CANCEL:
	case LDB_EXTEND:
		if (r->type != REDIS_REPLY_INTEGER)
			return false;
		if (r->integer == -1)
			return lockdb_gate_closed(-1, 0, out);
		out->status = r->integer == 1 ? LDB_OK : LDB_NO;
		return true;
	case LDB_WAIT:
		if (r->type != REDIS_REPLY_INTEGER)
			return false;
		out->status = LDB_OK;
		out->fence = r->integer > 0 ? (uint64_t)r->integer : 0;
		return true;
	case LDB_STATUS:
		if (!lockdb_ints(r, 1, v) || (v[0] == 1 && r->elements < 6))
			return false;
		out->status = v[0] == 1 ? LDB_OK : LDB_NO;
		out->pttl = lockdb_left(v[1]);
		out->fence = v[2] > 0 ? (uint64_t)v[2] : 0;
		out->count = v[3] > 0 ? (uint64_t)v[3] : 0;
		out->mode = v[4] < 0 ? LDB_EXCLUSIVE
		    : v[4] == 0	     ? LDB_SHARED
				     : LDB_LIMIT;
		out->limit =
		    v[4] > 0 && v[4] <= UINT32_MAX ? (unsigned)v[4] : 0;
		out->valid = v[5] == 1;
		return true;
	case LDB_WHO:
		out->status = LDB_OK;
		return lockdb_parse_who(r, out);
	case LDB_CHECK:
		if (!lockdb_ints(r, 1, v) || (v[0] <= 0 && r->elements < 2))
			return false;
		if (v[0] == -1)
			return lockdb_gate_closed(-1, 0, out);
		out->status = v[0] == 1 ? LDB_OK : LDB_NO;
		out->fence = v[0] == 0 && v[1] > 0 ? (uint64_t)v[1] : 0;
		/* Held: what the broker may trust of the lease left, which
		 * has its margin for a step of Redis's clock in it. */
		out->pttl = v[0] != 1 || r->elements < 2 || v[1] < 0
		    ? UINT64_MAX
		    : lockdb_left(v[1]);
		return true;
	case LDB_REVOKE:
		if (r->type != REDIS_REPLY_INTEGER || r->integer < 0)
			return false;
		out->status = LDB_OK;
		out->count = (uint64_t)r->integer;
		return true;
	}
	return false;
}

/* Redis names a script's line "user_script:N": say which file it is. */
static void
lockdb_log_error(const struct lockdb_req *req, const char *err)
{
	const char *at = strstr(err, "user_script:");

	if (req->script == NULL || at == NULL)
		log_warnx("redis: lock %s: %s", req->name, err);
	else
		log_warnx("redis: lock %s: %.*ssrc/lua/%s:%s", req->name,
		    (int)(at - err), err, req->script->rs.name,
		    at + strlen("user_script:"));
}

static void
lockdb_reply_cb(const redisReply *r, void *arg)
{
	struct lockdb_req *req = arg;
	struct lockdb_reply out = { .status = LDB_UNAVAILABLE };

	/* Not sent, or the connection went: say so, not "in time". */
	if (r == NULL && !redisc_up())
		out.why = "no connection to Redis (reconnecting)";
	if (r != NULL && r->type == REDIS_REPLY_ERROR) {
		lockdb_log_error(req, r->str);
		out.busy = lockdb_busy_error(r->str);
		out.status = out.busy != NULL ? LDB_UNAVAILABLE : LDB_INTERNAL;
	} else if (r != NULL && !lockdb_parse(req->op, r, &out)) {
		log_warnx("redis: lock %s: malformed script reply", req->name);
		out.status = LDB_INTERNAL;
	}
	out.again = out.again && req->incs != ldb.incs;
	req->cb(&out, req->arg);
	free((void *)out.holders);
	free(req);
}

static struct lockdb_req *
lockdb_req_new(enum lockdb_op op, const struct lockdb_script *script,
    const char *name, lockdb_cb *cb, void *arg)
{
	size_t namelen = strlen(name);
	struct lockdb_req *req = xmalloc(sizeof *req + namelen + 1);

	req->op = op;
	req->script = script;
	req->cb = cb;
	req->arg = arg;
	req->incs = ldb.incs;
	memcpy(req->name, name, namelen + 1);
	return req;
}

/*
 * The script's passed keys (docs/protocol.md §8: the lock key, "", and
 * the keys of no name, "/<word>", as embed.py's passed()) and its
 * arguments, args[LUA_<X>_ARG_<NAME>]: each must be filled.
 */
static void
lockdb_send(enum lockdb_op op, struct lockdb_script *script, const char *name,
    const char *const *args, lockdb_cb *cb, void *arg)
{
	int nkeys = script->nkeys, nargs = script->nargs;
	struct lockdb_req *req = lockdb_req_new(op, script, name, cb, arg);
	int n = 0;
	/* redis.prefix is at most 64 bytes, a name 200. */
	char lock[PROTO_NAME_MAX + 160], key[LOCKDB_KEYS_MAX][160];
	const char *argv[30]; /* redisc's most, less the key count */
	size_t lens[30], lock_len;
	char *p = lock;

	if (nkeys > LOCKDB_KEYS_MAX || nkeys + nargs > 30)
		fatalx("lockdb: %d keys and %d arguments are too many", nkeys,
		    nargs);
	if (ldb.quiet) {
		/* Quiet since the last beat: a beat first, whose answer
		 * comes before this one's. */
		ldb.quiet = false;
		ldb.beats = 3; /* with INFO memory: the policy may be new */
		lockdb_incarnation();
	}

	util_cat(&p, lock + sizeof lock, ldb.prefix);
	util_cat(&p, lock + sizeof lock, "{");
	util_cat(&p, lock + sizeof lock, name);
	util_cat(&p, lock + sizeof lock, "}");
	lock_len = (size_t)(p - lock);
	for (int i = 0; i < nkeys; i++) {
		if (script->keys[i][0] == '\0') {
			lens[n] = lock_len;
			argv[n++] = lock;
			continue;
		}
		p = key[i]; /* "<prefix><word>": not a name's */
		util_cat(&p, key[i] + sizeof key[i], ldb.prefix);
		util_cat(&p, key[i] + sizeof key[i], script->keys[i] + 1);
		lens[n] = (size_t)(p - key[i]);
		argv[n++] = key[i];
	}
	for (int i = 0; i < nargs; i++) {
		if (args[i] == NULL) /* a name the call did not fill */
			fatalx("lockdb: %s's argument %d is not filled",
			    script->rs.name, i + 1);
		lens[n] = strlen(args[i]);
		argv[n++] = args[i];
	}
	redisc_eval(&script->rs, nkeys, n, argv, lens, lockdb_reply_cb, req);
}

/* A ticket's "<broker>#<n>" in buf ("" for none). */
static void
lockdb_ticket(char *buf, size_t size, uint64_t n)
{
	char *p = buf;

	buf[0] = '\0';
	if (n == 0)
		return;
	util_cat(&p, buf + size, ldb.broker);
	util_cat(&p, buf + size, "#");
	util_cat_u64(&p, buf + size, n);
}

/* An exclusive ACQUIRE or a FILL: acquire.lua. No printf on the request
 * path: util_u64str. */
static void
lockdb_acquire_exclusive(
    const char *name, const struct lockdb_ask *a, lockdb_cb *cb, void *arg)
{
	char ttl[UTIL_U64_LEN], mark[UTIL_U64_LEN], watch[UTIL_U64_LEN];
	char least[UTIL_U64_LEN], ticket[sizeof ldb.mine];
	const char *args[LUA_ACQUIRE_NARGS] = {
		[LUA_ACQUIRE_ARG_TOKEN] = a->token,
		[LUA_ACQUIRE_ARG_TTL_MS] = ttl,
		[LUA_ACQUIRE_ARG_MARK_MS] = mark,
		[LUA_ACQUIRE_ARG_WHO_ENTRY] = a->info,
		[LUA_ACQUIRE_ARG_IS_FILL] = a->mode == LDB_FILL ? "1" : "0",
		[LUA_ACQUIRE_ARG_WATCH_FENCE] = watch,
		[LUA_ACQUIRE_ARG_CLEAR_WRITER] = a->clear_writer ? "1" : "0",
		[LUA_ACQUIRE_ARG_CHANNEL] = ldb.channel,
		[LUA_ACQUIRE_ARG_LOCK_NAME] = name,
		[LUA_ACQUIRE_ARG_TICKET] = ticket,
		[LUA_ACQUIRE_ARG_LEAST_N] = least,
		[LUA_ACQUIRE_ARG_LIVE_MS] = ldb.live,
		[LUA_ACQUIRE_ARG_INCARNATION] = ldb.inc,
		[LUA_ACQUIRE_ARG_RUN_ID] = ldb.runid,
	};

	util_u64str(ttl, a->ttl_ms + ldb.step_ms);
	util_u64str(mark, a->mark_ms);
	util_u64str(watch, a->watch);
	util_u64str(least, a->least);
	lockdb_ticket(ticket, sizeof ticket, a->ticket);
	lockdb_send(LDB_ACQUIRE, &lockdb_lua_acquire, name, args, cb, arg);
}

/* ACQUIRE ... SHARED or LIMIT n: share.lua. */
static void
lockdb_acquire_shared(
    const char *name, const struct lockdb_ask *a, lockdb_cb *cb, void *arg)
{
	char ttl[UTIL_U64_LEN], mark[UTIL_U64_LEN], n[UTIL_U64_LEN];
	char mode[UTIL_U64_LEN + 6], least[UTIL_U64_LEN];
	char ticket[sizeof ldb.mine], *p = mode;
	const char *args[LUA_SHARE_NARGS] = {
		[LUA_SHARE_ARG_TOKEN] = a->token,
		[LUA_SHARE_ARG_TTL_MS] = ttl,
		[LUA_SHARE_ARG_MARK_MS] = mark,
		[LUA_SHARE_ARG_WHO_ENTRY] = a->info,
		[LUA_SHARE_ARG_SHARE_MODE] = mode,
		[LUA_SHARE_ARG_LIMIT_N] = n,
		[LUA_SHARE_ARG_CHANNEL] = ldb.channel,
		[LUA_SHARE_ARG_LOCK_NAME] = name,
		[LUA_SHARE_ARG_INCARNATION] = ldb.inc,
		[LUA_SHARE_ARG_RUN_ID] = ldb.runid,
		[LUA_SHARE_ARG_TICKET] = ticket,
		[LUA_SHARE_ARG_LEAST_N] = least,
		[LUA_SHARE_ARG_LIVE_MS] = ldb.live,
	};

	util_u64str(ttl, a->ttl_ms + ldb.step_ms);
	util_u64str(mark, a->mark_ms);
	util_u64str(least, a->least);
	lockdb_ticket(ticket, sizeof ticket, a->ticket);
	if (a->mode == LDB_SHARED) {
		util_cat(&p, mode + sizeof mode, "SHARED");
	} else {
		util_cat(&p, mode + sizeof mode, "LIMIT=");
		util_cat_u64(&p, mode + sizeof mode, a->limit);
	}
	util_u64str(n,
	    a->mode == LDB_LIMIT && chaos_fault != CHAOS_NO_LIMIT ? a->limit
								  : 0);
	lockdb_send(LDB_ACQUIRE, &lockdb_lua_share, name, args, cb, arg);
}

void
lockdb_acquire(
    const char *name, const struct lockdb_ask *a, lockdb_cb *cb, void *arg)
{
	if (a->mode == LDB_EXCLUSIVE || a->mode == LDB_FILL)
		lockdb_acquire_exclusive(name, a, cb, arg);
	else
		lockdb_acquire_shared(name, a, cb, arg);
}

void
lockdb_release(const char *name, const char *token, uint64_t fence,
    enum lockdb_done done, uint64_t done_ms, lockdb_cb *cb, void *arg)
{
	static const char *const marks[] = { "0", "1", "2" };
	char ms[UTIL_U64_LEN], f[UTIL_U64_LEN];
	const char *args[LUA_RELEASE_NARGS] = {
		[LUA_RELEASE_ARG_TOKEN] = token,
		[LUA_RELEASE_ARG_CHANNEL] = ldb.channel,
		[LUA_RELEASE_ARG_LOCK_NAME] = name,
		[LUA_RELEASE_ARG_DONE_MODE] = marks[done],
		[LUA_RELEASE_ARG_DONE_KEEP_MS] = ms,
		[LUA_RELEASE_ARG_GRANT_FENCE] = f,
		[LUA_RELEASE_ARG_BROKER] = ldb.broker,
		[LUA_RELEASE_ARG_HANDOFF_MS] = ldb.handoff,
		[LUA_RELEASE_ARG_TO_PREFIX] = ldb.to,
		[LUA_RELEASE_ARG_LIVE_MS] = ldb.live,
		[LUA_RELEASE_ARG_INCARNATION] = ldb.inc,
		[LUA_RELEASE_ARG_RUN_ID] = ldb.runid,
	};

	util_u64str(ms, done_ms > 0 ? done_ms : 1);
	util_u64str(f, fence);
	lockdb_send(LDB_RELEASE,
	    chaos_fault == CHAOS_BLIND_RELEASE ? &lockdb_lua_blind_release
					       : &lockdb_lua_release,
	    name, args, cb, arg);
}

static void
lockdb_cancel_cb(const struct lockdb_reply *r, void *arg)
{
	/* Not queued (handed over: that grant is released by whoever hears
	 * of it), or Redis away: its broker's later tries make it dead. */
}

void
lockdb_cancel(const char *name, uint64_t ticket)
{
	char tk[sizeof ldb.mine];
	const char *args[LUA_CANCEL_NARGS] = { [LUA_CANCEL_ARG_TICKET] = tk };

	snprintf(tk, sizeof tk, "%s#%" PRIu64, ldb.broker, ticket);
	lockdb_send(
	    LDB_CANCEL, &lockdb_lua_cancel, name, args, lockdb_cancel_cb, NULL);
}

/* extend.lua with the lease in Redis as given (ms). */
static void
lockdb_pexpire(const char *name, const char *token, uint64_t fence, uint64_t ms,
    lockdb_cb *cb, void *arg)
{
	char ttl[UTIL_U64_LEN], f[UTIL_U64_LEN];
	const char *args[LUA_EXTEND_NARGS] = {
		[LUA_EXTEND_ARG_TOKEN] = token,
		[LUA_EXTEND_ARG_TTL_MS] = ttl,
		[LUA_EXTEND_ARG_GRANT_FENCE] = f,
		[LUA_EXTEND_ARG_BROKER] = ldb.broker,
		[LUA_EXTEND_ARG_CHANNEL] = ldb.channel,
		[LUA_EXTEND_ARG_LOCK_NAME] = name,
		[LUA_EXTEND_ARG_INCARNATION] = ldb.inc,
		[LUA_EXTEND_ARG_RUN_ID] = ldb.runid,
	};

	util_u64str(ttl, ms);
	util_u64str(f, fence);
	lockdb_send(LDB_EXTEND, &lockdb_lua_extend, name, args, cb, arg);
}

void
lockdb_extend(const char *name, const char *token, uint64_t fence,
    uint64_t ttl_ms, lockdb_cb *cb, void *arg)
{
	lockdb_pexpire(name, token, fence, ttl_ms + ldb.step_ms, cb, arg);
}

void
lockdb_keep(const char *name, const char *token, uint64_t fence,
    uint64_t keep_ms, lockdb_cb *cb, void *arg)
{
	lockdb_pexpire(name, token, fence, keep_ms, cb, arg);
}

void
lockdb_status(const char *name, uint64_t fence, const char *token,
    lockdb_cb *cb, void *arg)
{
	char f[24];
	const char *args[LUA_STATUS_NARGS] = {
		[LUA_STATUS_ARG_GRANT_FENCE] = f,
		[LUA_STATUS_ARG_TOKEN] = token != NULL ? token : "",
		[LUA_STATUS_ARG_INCARNATION] = ldb.inc,
	};

	snprintf(f, sizeof f, "%" PRIu64, fence);
	lockdb_send(LDB_STATUS, &lockdb_lua_status, name, args, cb, arg);
}

void
lockdb_who(const char *name, lockdb_cb *cb, void *arg)
{
	lockdb_send(LDB_WHO, &lockdb_lua_who, name, NULL, cb, arg);
}

void
lockdb_check(const char *name, const char *token, uint64_t fence,
    uint64_t restore_ms, const char *info, lockdb_cb *cb, void *arg)
{
	char f[24], ttl[24], value[PROTO_TOKEN_MAX + 200];
	const char *args[LUA_CHECK_NARGS] = {
		[LUA_CHECK_ARG_TOKEN] = token,
		[LUA_CHECK_ARG_GRANT_FENCE] = f,
		[LUA_CHECK_ARG_RESTORE_MS] = ttl,
		[LUA_CHECK_ARG_LOCK_VALUE] = value,
		[LUA_CHECK_ARG_INCARNATION] = ldb.inc,
		[LUA_CHECK_ARG_RUN_ID] = ldb.runid,
	};

	snprintf(f, sizeof f, "%" PRIu64, fence);
	snprintf(ttl, sizeof ttl, "%" PRIu64,
	    info != NULL && restore_ms > 0 ? restore_ms + ldb.step_ms : 0);
	snprintf(value, sizeof value, "%s %s", token, info != NULL ? info : "");
	lockdb_send(LDB_CHECK, &lockdb_lua_check, name, args, cb, arg);
}

void
lockdb_revoke(const char *name, uint64_t keep_ms, lockdb_cb *cb, void *arg)
{
	char keep[24];
	const char *args[LUA_REVOKE_NARGS] = {
		[LUA_REVOKE_ARG_CHANNEL] = ldb.channel,
		[LUA_REVOKE_ARG_LOCK_NAME] = name,
		[LUA_REVOKE_ARG_REVOKED_KEEP_MS] = keep,
	};

	snprintf(keep, sizeof keep, "%" PRIu64, keep_ms > 0 ? keep_ms : 1);
	lockdb_send(LDB_REVOKE, &lockdb_lua_revoke, name, args, cb, arg);
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
	if (n >= 0 && ldb.evicted >= 0 && n > ldb.evicted)
		log_warnx(
		    "redis: evicted %lld keys (evicted_keys %lld): lock data may be lost; a new incarnation, in whose grace period holds are put back (docs/operations.md, When Redis forgets)",
		    n - ldb.evicted, n);
	ldb.evicted = n;
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
	ldb.asking = false;
	if (r == NULL)
		return; /* not answered: nothing confirmed */
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 6 ||
	    e[0]->type != REDIS_REPLY_STRING || e[0]->len == 0 ||
	    e[0]->len >= sizeof ldb.inc || e[1]->type != REDIS_REPLY_INTEGER ||
	    e[2]->type != REDIS_REPLY_INTEGER ||
	    e[3]->type != REDIS_REPLY_INTEGER ||
	    e[4]->type != REDIS_REPLY_INTEGER || e[4]->integer <= 0 ||
	    e[5]->type != REDIS_REPLY_INTEGER) {
		log_warnx("redis: incarnation.lua: %s",
		    r->type == REDIS_REPLY_ERROR ? r->str : "malformed reply");
		return;
	}
	if (!ldb.checked && redisc_up()) {
		ldb.checked = true;
		STAT_SET(redis_up, 1);
	}
	if ((uint64_t)e[3]->integer > ldb.grace_ms + ldb.lag_ms &&
	    !ldb.told_need) {
		ldb.told_need = true;
		log_warnx(
		    "redis: another broker's grace period is %lld ms, this one's %" PRIu64
		    " ms: give every broker the same redis.trust_ms, redis.clock_step_ms and locks.clock_drift (docs/operations.md, When Redis forgets)",
		    e[3]->integer, ldb.grace_ms + ldb.lag_ms);
	}
	inc.first = ldb.inc[0] == '\0';
	inc.changed = strcmp(ldb.inc, e[0]->str) != 0;
	inc.grace_ms = e[1]->integer > 0 ? (uint64_t)e[1]->integer : 0;
	inc.redis_ms = (uint64_t)e[4]->integer;
	lockdb_evicted(e[5]->integer);
	if (inc.changed) {
		ldb.incs++;
		memcpy(ldb.inc, e[0]->str, e[0]->len + 1);
		if (e[2]->integer == 1 || inc.grace_ms > 0)
			log_warnx(
			    "redis: %s lock data (incarnation %s): no grant for %" PRIu64
			    " ms, while brokers put their holds back (docs/operations.md, When Redis forgets)",
			    e[2]->integer == 1 ? "new" : "another", ldb.inc,
			    inc.grace_ms);
		else
			log_info("redis: lock data incarnation %s", ldb.inc);
	}
	if (ldb.inc_fn != NULL)
		ldb.inc_fn(&inc);
}

void
lockdb_incarnation(void)
{
	char key[160];
	/* The key, then the arguments by name. */
	const char *argv[1 + LUA_INCARNATION_NARGS] = { key };
	const char **args = argv + 1;
	size_t lens[1 + LUA_INCARNATION_NARGS];
	uint64_t *sent;

	if (ldb.asking || !redisc_up() || strcmp(ldb.runid, "?") == 0)
		return; /* INFO's answer asks, once it came */
	if (++ldb.beats % 4 == 0 && !ldb.quiet) {
		const char *info[2] = { "INFO", "memory" };
		size_t ilens[2] = { 4, 6 };

		redisc_command(2, info, ilens, lockdb_memory_cb, NULL);
	}
	ldb.asking = true;
	snprintf(key, sizeof key, "%s%s", ldb.prefix,
	    lockdb_lua_incarnation.keys[0] + 1);
	args[LUA_INCARNATION_ARG_RUN_ID] = ldb.runid;
	args[LUA_INCARNATION_ARG_GRACE_MS] = ldb.grace;
	args[LUA_INCARNATION_ARG_READ_EVICTIONS] = ldb.allow_eviction ||
		ldb.quiet || chaos_fault == CHAOS_NO_EVICTION_CHECK
	    ? "0"
	    : "1";
	args[LUA_INCARNATION_ARG_SKEW_MS] = ldb.skew;
	args[LUA_INCARNATION_ARG_KNOWN_ID] = ldb.inc;
	for (int i = 0; i < 1 + LUA_INCARNATION_NARGS; i++)
		lens[i] = strlen(argv[i]);
	sent = xmalloc(sizeof *sent);
	*sent = mono_ms();
	redisc_eval(&lockdb_lua_incarnation.rs, 1, 1 + LUA_INCARNATION_NARGS,
	    argv, lens, lockdb_incarnation_cb, sent);
}

void
lockdb_quiet(bool quiet)
{
	ldb.quiet = quiet;
}

void
lockdb_on_incarnation(lockdb_inc_fn *fn)
{
	ldb.inc_fn = fn;
}

void
lockdb_wait(const char *name, int replicas, uint64_t timeout_ms, lockdb_cb *cb,
    void *arg)
{
	char n[16], t[24];
	const char *argv[3] = { "WAIT", n, t };
	size_t lens[3];

	snprintf(n, sizeof n, "%d", replicas);
	snprintf(t, sizeof t, "%" PRIu64, timeout_ms);
	for (int i = 0; i < 3; i++)
		lens[i] = strlen(argv[i]);
	redisc_command(3, argv, lens, lockdb_reply_cb,
	    lockdb_req_new(LDB_WAIT, NULL, name, cb, arg));
}

/*
 * CHAOS_NO_CLOCK_FENCE: the scripts that take a fence (lib/fence.lua's
 * next_fence) get a copy of their text that never raises the counter to
 * Redis's clock (nor to the incarnation's id, which is that clock too), so
 * a counter Redis forgot starts again at 1.
 */
static void
lockdb_chaos_no_clock(struct lockdb_script *s)
{
	/* Each test becomes "false", padded to its length: the lines keep
	 * their numbers and columns. */
	static const char *const raise[] = { "if f < now then",
		"if t[3] and f < t[3] then" };
	char *body = xstrdup(s->rs.body);

	for (size_t i = 0; i < sizeof raise / sizeof raise[0]; i++) {
		char *at = strstr(body, raise[i]);
		size_t n = strlen(raise[i]);

		if (at == NULL)
			fatalx("chaos: %s has no '%s'", s->rs.name, raise[i]);
		memset(at + 3, ' ', n - 3 - 5); /* between "if " and " then" */
		memcpy(at + 3, "false", 5);
	}
	s->rs.body = body;
}

void
lockdb_init(const char *prefix, const char *broker, uint64_t handoff_ms,
    uint64_t live_ms, uint64_t grace_ms, uint64_t step_ms)
{
	ldb.step_ms = step_ms;
	ldb.evicted = -1;
	snprintf(ldb.skew, sizeof ldb.skew, "%" PRIu64, step_ms);
	ldb.grace_ms = grace_ms > 0 ? grace_ms : 1;
	snprintf(ldb.grace, sizeof ldb.grace, "%" PRIu64, ldb.grace_ms);
	ldb.prefix = prefix;
	ldb.broker = broker;
	snprintf(ldb.channel, sizeof ldb.channel, "%sreleased", prefix);
	snprintf(ldb.to, sizeof ldb.to, "%sto:", prefix);
	snprintf(ldb.mine, sizeof ldb.mine, "%s%s", ldb.to, broker);
	snprintf(ldb.handoff, sizeof ldb.handoff, "%" PRIu64,
	    (handoff_ms > 0 ? handoff_ms : 1) + step_ms);
	snprintf(
	    ldb.live, sizeof ldb.live, "%" PRIu64, live_ms > 0 ? live_ms : 1);
	redisc_on_connect(lockdb_connected, NULL);
	if (chaos_fault == CHAOS_NO_CLOCK_FENCE) {
		lockdb_chaos_no_clock(&lockdb_lua_acquire);
		lockdb_chaos_no_clock(&lockdb_lua_share);
		lockdb_chaos_no_clock(&lockdb_lua_release);
	}
	/* A chaos fault breaks the scripts a call names; batch runs them
	 * unbroken, so no batch then. */
	if (chaos_fault == CHAOS_NONE) {
		lockdb_lua_acquire.rs.batch = &lockdb_lua_batch.rs;
		lockdb_lua_acquire.rs.batch_op = 1;
		lockdb_lua_release.rs.batch = &lockdb_lua_batch.rs;
		lockdb_lua_release.rs.batch_op = 2;
		lockdb_lua_check.rs.batch = &lockdb_lua_batch.rs;
		lockdb_lua_check.rs.batch_op = 3;
		redisc_script_add(&lockdb_lua_batch.rs);
	}
	redisc_script_add(&lockdb_lua_acquire.rs);
	redisc_script_add(&lockdb_lua_share.rs);
	redisc_script_add(&lockdb_lua_release.rs);
	redisc_script_add(&lockdb_lua_cancel.rs);
	if (chaos_fault == CHAOS_BLIND_RELEASE)
		redisc_script_add(&lockdb_lua_blind_release.rs);
	redisc_script_add(&lockdb_lua_extend.rs);
	redisc_script_add(&lockdb_lua_status.rs);
	redisc_script_add(&lockdb_lua_who.rs);
	redisc_script_add(&lockdb_lua_revoke.rs);
	redisc_script_add(&lockdb_lua_check.rs);
	redisc_script_add(&lockdb_lua_incarnation.rs);
}

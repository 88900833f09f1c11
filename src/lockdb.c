/*
 * lockdb: keys, scripts and reply parsing. Every compare-and-act runs as one
 * Lua script, so nothing ever deletes or extends a lock it does not own.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chaos.h"
#include "lockdb.h"
#include "log.h"
#include "redisc.h"
#include "xmalloc.h"

/*
 * Grant: SET NX PX and the fence INCR in one script, so a grant and its fence
 * can never be split, and two grants can never share a fence. The holder's
 * fence is the counter's value: nothing increments it while the key exists.
 * The same token asking again gets its own fence back (a retried request
 * grants once) and its lease set to the new ttl. A refused waiter marks the
 * name as waited for (for mark ms), so that its release is announced.
 * KEYS: lock, fence, waiters. ARGV: token, ttl, mark (0: a try-once).
 * Returns {1, fence} or {0, pttl}.
 */
static struct redisc_script lockdb_acquire_lua = { "acquire",
	"if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
	"  return {1, redis.call('INCR', KEYS[2])}\n"
	"end\n"
	"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
	"  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}\n"
	"end\n"
	"if ARGV[3] ~= '0' then\n"
	"  redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])\n"
	"end\n"
	"return {0, redis.call('PTTL', KEYS[1])}\n",
	"" };

/* Compare-and-delete, then tell other brokers' waiters, if there are any.
 * KEYS: lock, waiters. ARGV: token, channel, name. Returns 1 if released,
 * 0 if not ours. */
static struct redisc_script lockdb_release_lua = { "release",
	"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
	"  redis.call('DEL', KEYS[1])\n"
	"  if redis.call('EXISTS', KEYS[2]) == 1 then\n"
	"    redis.call('PUBLISH', ARGV[2], ARGV[3])\n"
	"  end\n"
	"  return 1\n"
	"end\n"
	"return 0\n",
	"" };

/* CHAOS_BLIND_RELEASE (test builds): delete without comparing. */
static struct redisc_script lockdb_blind_release_lua = { "blind-release",
	"redis.call('DEL', KEYS[1])\n"
	"redis.call('PUBLISH', ARGV[2], ARGV[3])\n"
	"return 1\n",
	"" };

/*
 * Release straight to the next waiter: compare, then set the new holder
 * and its fence, so the lock is never free in between and the handover is
 * one round trip. Nothing is published: the lock is not free.
 * KEYS: lock, fence. ARGV: token, next token, ttl. Returns {1, fence} or {0}.
 */
static struct redisc_script lockdb_handover_lua = { "handover",
	"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
	"  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])\n"
	"  return {1, redis.call('INCR', KEYS[2])}\n"
	"end\n"
	"return {0}\n",
	"" };

/* Compare-and-PEXPIRE. KEYS: lock. ARGV: token, ttl. Returns 1 or 0. */
static struct redisc_script lockdb_extend_lua = { "extend",
	"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
	"  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"end\n"
	"return 0\n",
	"" };

/* KEYS: lock, fence. Returns {0} when free, else {1, pttl, fence}. */
static struct redisc_script lockdb_status_lua = { "status",
	"local t = redis.call('PTTL', KEYS[1])\n"
	"if t == -2 then return {0} end\n"
	"return {1, t, tonumber(redis.call('GET', KEYS[2]) or '0')}\n",
	"" };

enum lockdb_op {
	LDB_ACQUIRE,
	LDB_RELEASE,
	LDB_HANDOVER,
	LDB_EXTEND,
	LDB_STATUS,
	LDB_WAIT
};

struct lockdb_req {
	enum lockdb_op op;
	lockdb_cb *cb;
	void *arg;
	char name[]; /* for logs */
};

static struct {
	const char *prefix;
	char channel[128];
} ldb;

const char *
lockdb_channel(void)
{
	return ldb.channel;
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

/* The scripts' array replies hold integers; v gets up to three. */
static bool
lockdb_ints(const redisReply *r, size_t min, long long *v)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements < min)
		return false;
	for (size_t i = 0; i < r->elements && i < 3; i++) {
		if (r->element[i]->type != REDIS_REPLY_INTEGER)
			return false;
		v[i] = r->element[i]->integer;
	}
	return true;
}

/* Turn one script reply into a lockdb_reply; false if malformed. */
static bool
lockdb_parse(enum lockdb_op op, const redisReply *r, struct lockdb_reply *out)
{
	long long v[3] = { 0, 0, 0 };

	switch (op) {
	case LDB_ACQUIRE:
		if (!lockdb_ints(r, 2, v) || v[1] < -2)
			return false;
		out->status = v[0] == 1 ? LDB_OK : LDB_NO;
		if (v[0] == 1)
			out->fence = (uint64_t)v[1];
		else if (v[1] == -1)
			out->pttl =
			    UINT64_MAX; /* no expiry: none to wait for */
		else
			out->pttl = v[1] > 0 ? (uint64_t)v[1] : 0;
		return true;
	case LDB_HANDOVER:
		if (!lockdb_ints(r, 1, v) || (v[0] == 1 && r->elements < 2))
			return false;
		out->status = v[0] == 1 ? LDB_OK : LDB_NO;
		out->fence = v[0] == 1 ? (uint64_t)v[1] : 0;
		return true;
	case LDB_RELEASE:
	case LDB_EXTEND:
		if (r->type != REDIS_REPLY_INTEGER)
			return false;
		out->status = r->integer == 1 ? LDB_OK : LDB_NO;
		return true;
	case LDB_WAIT:
		if (r->type != REDIS_REPLY_INTEGER)
			return false;
		out->status = LDB_OK;
		out->fence = r->integer > 0 ? (uint64_t)r->integer : 0;
		return true;
	case LDB_STATUS:
		if (!lockdb_ints(r, 1, v) || (v[0] == 1 && r->elements < 3))
			return false;
		out->status = v[0] == 1 ? LDB_OK : LDB_NO;
		out->pttl = v[1] > 0 ? (uint64_t)v[1] : 0;
		out->fence = v[2] > 0 ? (uint64_t)v[2] : 0;
		return true;
	}
	return false;
}

static void
lockdb_reply_cb(const redisReply *r, void *arg)
{
	struct lockdb_req *req = arg;
	struct lockdb_reply out = { LDB_UNAVAILABLE, 0, 0, NULL };

	if (r != NULL && r->type == REDIS_REPLY_ERROR) {
		log_warnx("redis: lock %s: %s", req->name, r->str);
		out.busy = lockdb_busy_error(r->str);
		out.status = out.busy != NULL ? LDB_UNAVAILABLE : LDB_INTERNAL;
	} else if (r != NULL && !lockdb_parse(req->op, r, &out)) {
		log_warnx("redis: lock %s: malformed script reply", req->name);
		out.status = LDB_INTERNAL;
	}
	req->cb(&out, req->arg);
	free(req);
}

/*
 * Keys as DESIGN.md §5: <prefix>{<name>}, <prefix>{<name>}:fence, and the
 * marker <prefix>{<name>}:waiters. kind is 'l', 'f' or 'w'.
 */
static size_t
lockdb_key(char *buf, size_t len, const char *name, char kind)
{
	const char *suffix = kind == 'f' ? ":fence"
	    : kind == 'w'		 ? ":waiters"
					 : "";

	return (size_t)snprintf(buf, len, "%s{%s}%s", ldb.prefix, name, suffix);
}

static struct lockdb_req *
lockdb_req_new(enum lockdb_op op, const char *name, lockdb_cb *cb, void *arg)
{
	size_t namelen = strlen(name);
	struct lockdb_req *req = xmalloc(sizeof *req + namelen + 1);

	req->op = op;
	req->cb = cb;
	req->arg = arg;
	memcpy(req->name, name, namelen + 1);
	return req;
}

/* keys: one letter per KEYS entry of the script, as lockdb_key takes. */
static void
lockdb_send(enum lockdb_op op, struct redisc_script *script, const char *name,
    const char *keys, int nargs, const char *const *args, lockdb_cb *cb,
    void *arg)
{
	struct lockdb_req *req = lockdb_req_new(op, name, cb, arg);
	int nkeys = (int)strlen(keys), n = 0;
	char key[3][512];
	const char *argv[8];
	size_t lens[8];

	for (int i = 0; i < nkeys; i++) {
		lens[n] = lockdb_key(key[i], sizeof key[i], name, keys[i]);
		argv[n++] = key[i];
	}
	for (int i = 0; i < nargs; i++) {
		lens[n] = strlen(args[i]);
		argv[n++] = args[i];
	}
	redisc_eval(script, nkeys, n, argv, lens, lockdb_reply_cb, req);
}

void
lockdb_acquire(const char *name, const char *token, uint64_t ttl_ms,
    uint64_t mark_ms, lockdb_cb *cb, void *arg)
{
	char ttl[24], mark[24];
	const char *args[3] = { token, ttl, mark };

	snprintf(ttl, sizeof ttl, "%" PRIu64, ttl_ms);
	snprintf(mark, sizeof mark, "%" PRIu64, mark_ms);
	lockdb_send(
	    LDB_ACQUIRE, &lockdb_acquire_lua, name, "lfw", 3, args, cb, arg);
}

void
lockdb_release(const char *name, const char *token, lockdb_cb *cb, void *arg)
{
	const char *args[3] = { token, ldb.channel, name };

	lockdb_send(LDB_RELEASE,
	    chaos_fault == CHAOS_BLIND_RELEASE ? &lockdb_blind_release_lua
					       : &lockdb_release_lua,
	    name, "lw", 3, args, cb, arg);
}

void
lockdb_handover(const char *name, const char *token, const char *next,
    uint64_t ttl_ms, lockdb_cb *cb, void *arg)
{
	char ttl[24];
	const char *args[3] = { token, next, ttl };

	snprintf(ttl, sizeof ttl, "%" PRIu64, ttl_ms);
	lockdb_send(
	    LDB_HANDOVER, &lockdb_handover_lua, name, "lf", 3, args, cb, arg);
}

void
lockdb_extend(const char *name, const char *token, uint64_t ttl_ms,
    lockdb_cb *cb, void *arg)
{
	char ttl[24];
	const char *args[2] = { token, ttl };

	snprintf(ttl, sizeof ttl, "%" PRIu64, ttl_ms);
	lockdb_send(
	    LDB_EXTEND, &lockdb_extend_lua, name, "l", 2, args, cb, arg);
}

void
lockdb_status(const char *name, lockdb_cb *cb, void *arg)
{
	lockdb_send(
	    LDB_STATUS, &lockdb_status_lua, name, "lf", 0, NULL, cb, arg);
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
	    lockdb_req_new(LDB_WAIT, name, cb, arg));
}

void
lockdb_init(const char *prefix)
{
	ldb.prefix = prefix;
	snprintf(ldb.channel, sizeof ldb.channel, "%sreleased", prefix);
	redisc_script_add(&lockdb_acquire_lua);
	redisc_script_add(&lockdb_release_lua);
	redisc_script_add(&lockdb_handover_lua);
	if (chaos_fault == CHAOS_BLIND_RELEASE)
		redisc_script_add(&lockdb_blind_release_lua);
	redisc_script_add(&lockdb_extend_lua);
	redisc_script_add(&lockdb_status_lua);
}

/*
 * lock: the lock engine. Every decision that must be atomic (grant and fence,
 * compare-and-delete, compare-and-extend) is a Lua script run in Redis; this
 * file keeps what the broker's own clients hold so it can list, release and
 * extend it, and clean up when a client goes away.
 */
#include <sys/queue.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "lock.h"
#include "log.h"
#include "redisc.h"
#include "stats.h"
#include "xmalloc.h"

/*
 * Grant: SET NX PX and the fence INCR in one script, so a grant and its fence
 * can never be split, and two grants can never share a fence. The holder's
 * fence is the counter's value: nothing increments it while the key exists.
 * The same token asking again gets its own fence back (a retried request
 * grants once) and its lease set to the new ttl.
 * KEYS: lock, fence. ARGV: token, ttl. Returns {1, fence} or {0, pttl}.
 */
static struct redisc_script lock_script_acquire = { "acquire",
	"local cur = redis.call('GET', KEYS[1])\n"
	"if cur == ARGV[1] then\n"
	"  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}\n"
	"end\n"
	"if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
	"  return {1, redis.call('INCR', KEYS[2])}\n"
	"end\n"
	"return {0, redis.call('PTTL', KEYS[1])}\n",
	"" };

/* Compare-and-delete, then tell other brokers' waiters. KEYS: lock.
 * ARGV: token, channel, name. Returns 1 if released, 0 if not ours. */
static struct redisc_script lock_script_release = { "release",
	"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
	"  redis.call('DEL', KEYS[1])\n"
	"  redis.call('PUBLISH', ARGV[2], ARGV[3])\n"
	"  return 1\n"
	"end\n"
	"return 0\n",
	"" };

/* Compare-and-PEXPIRE. KEYS: lock. ARGV: token, ttl. Returns 1 or 0. */
static struct redisc_script lock_script_extend = { "extend",
	"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
	"  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"end\n"
	"return 0\n",
	"" };

/* KEYS: lock, fence. Returns {0} when free, else {1, pttl, fence}. */
static struct redisc_script lock_script_status = { "status",
	"local t = redis.call('PTTL', KEYS[1])\n"
	"if t == -2 then return {0} end\n"
	"return {1, t, tonumber(redis.call('GET', KEYS[2]) or '0')}\n",
	"" };

enum lock_op { OP_ACQUIRE, OP_RELEASE, OP_EXTEND, OP_STATUS, OP_VALIDATE };

/* One request in Redis. It never points at a hold: holds are found again by
 * name and token when the reply comes, since they may be gone by then. */
struct lock_req {
	enum lock_op op;
	struct lock_owner *owner; /* NULL once the owner went away */
	char *name;
	char token[PROTO_TOKEN_MAX + 1];
	bool own_token; /* we made the token, nobody else has it */
	enum lock_kind kind;
	uint64_t ttl_ms;
	uint64_t fence;
	uint64_t start_ms; /* monotonic, read before sending */
};

/* The holds of all owners by lock name, to act on a TOKEN from anywhere. */
struct lock_name {
	LIST_ENTRY(lock_name) entry;
	LIST_HEAD(, lock_hold) holds;
	char name[];
};
LIST_HEAD(lock_bucket, lock_name);

static struct {
	const struct config *cf;
	struct lock_bucket *buckets;
	size_t nbuckets;
	size_t nnames;
	char channel[128];
} lk;

/* FNV-1a: names are short and untrusted; this is only a table index. */
static size_t
lock_hash(const char *s)
{
	uint64_t h = 14695981039346656037ULL;

	for (; *s != '\0'; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return (size_t)h;
}

static void
lock_names_grow(void)
{
	size_t n = lk.nbuckets * 2;
	struct lock_bucket *b = xcalloc(n, sizeof *b);
	struct lock_name *ln;

	for (size_t i = 0; i < lk.nbuckets; i++) {
		while ((ln = LIST_FIRST(&lk.buckets[i])) != NULL) {
			LIST_REMOVE(ln, entry);
			LIST_INSERT_HEAD(
			    &b[lock_hash(ln->name) % n], ln, entry);
		}
	}
	free(lk.buckets);
	lk.buckets = b;
	lk.nbuckets = n;
}

static struct lock_name *
lock_name_find(const char *name, bool create)
{
	struct lock_bucket *b = &lk.buckets[lock_hash(name) % lk.nbuckets];
	struct lock_name *ln;
	size_t len;

	LIST_FOREACH(ln, b, entry)
	if (strcmp(ln->name, name) == 0)
		return ln;
	if (!create)
		return NULL;
	len = strlen(name);
	ln = xcalloc(1, sizeof *ln + len + 1);
	memcpy(ln->name, name, len + 1);
	LIST_INIT(&ln->holds);
	LIST_INSERT_HEAD(b, ln, entry);
	if (++lk.nnames > lk.nbuckets)
		lock_names_grow();
	return ln;
}

/* Entries live only while some local hold needs them. */
static void
lock_name_unref(struct lock_name *ln)
{
	if (!LIST_EMPTY(&ln->holds))
		return;
	LIST_REMOVE(ln, entry);
	lk.nnames--;
	free(ln);
}

static void
lock_hold_free(struct lock_hold *h)
{
	TAILQ_REMOVE(&h->owner->holds, h, owner_entry);
	h->owner->nholds--;
	LIST_REMOVE(h, name_entry);
	lock_name_unref(h->ln);
	STAT_DEC(locks_held);
	free(h);
}

static struct lock_hold *
lock_owner_find(struct lock_owner *o, const char *name)
{
	struct lock_hold *h;

	TAILQ_FOREACH(h, &o->holds, owner_entry)
	if (strcmp(h->ln->name, name) == 0)
		return h;
	return NULL;
}

/* Keys exactly as DESIGN.md §5: <prefix>{<name>} and <prefix>{<name>}:fence. */
static size_t
lock_key(char *buf, size_t len, const char *name, bool fence)
{
	int n = snprintf(buf, len, "%s{%s}%s", lk.cf->redis.prefix, name,
	    fence ? ":fence" : "");

	return (size_t)n;
}

static void lock_reply_cb(const redisReply *reply, void *arg);

static struct lock_req *
lock_req_new(enum lock_op op, struct lock_owner *o, const char *name)
{
	struct lock_req *req = xcalloc(1, sizeof *req);

	req->op = op;
	req->owner = o;
	req->name = xstrdup(name);
	if (o != NULL)
		o->pending = req;
	return req;
}

static void
lock_req_free(struct lock_req *req)
{
	free(req->name);
	free(req);
}

/* Send req's script: keys (lock[, fence]) then the string arguments. */
static void
lock_send(struct lock_req *req, struct redisc_script *script, int nkeys,
    int nargs, const char *const *args)
{
	char key[512], fkey[512];
	const char *argv[8];
	size_t lens[8];
	int n = 0;

	lens[n] = lock_key(key, sizeof key, req->name, false);
	argv[n++] = key;
	if (nkeys == 2) {
		lens[n] = lock_key(fkey, sizeof fkey, req->name, true);
		argv[n++] = fkey;
	}
	for (int i = 0; i < nargs; i++) {
		lens[n] = strlen(args[i]);
		argv[n++] = args[i];
	}
	req->start_ms = mono_ms();
	redisc_eval(script, nkeys, n, argv, lens, lock_reply_cb, req);
}

static void
lock_send_release(struct lock_req *req)
{
	const char *args[] = { req->token, lk.channel, req->name };

	lock_send(req, &lock_script_release, 1, 3, args);
}

/* Release in Redis for nobody in particular: a client went away. */
static void
lock_release_orphan(const char *name, const char *token)
{
	struct lock_req *req = lock_req_new(OP_RELEASE, NULL, name);

	snprintf(req->token, sizeof req->token, "%s", token);
	lock_send_release(req);
}

/* res may point into req (the token), so req is freed last. */
static void
lock_finish(struct lock_req *req, const struct lock_result *res)
{
	struct lock_owner *o = req->owner;

	if (o != NULL) {
		o->pending = NULL;
		o->ops->done(o, res);
	}
	lock_req_free(req);
}

static void
lock_set_err(struct lock_result *res, enum proto_err err, const char *text)
{
	memset(res, 0, sizeof *res);
	res->status = LOCK_ERR;
	res->err = err;
	res->errtext = text;
}

/* Replies that mean "Redis cannot serve now", as opposed to a bug. */
static bool
lock_redis_busy(const char *err)
{
	static const char *const busy[] = { "LOADING", "BUSY", "READONLY",
		"MASTERDOWN", "OOM", "NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN",
		"NOAUTH", "WRONGPASS" };

	for (size_t i = 0; i < sizeof busy / sizeof busy[0]; i++)
		if (strncmp(err, busy[i], strlen(busy[i])) == 0)
			return true;
	return false;
}

/* NULL and error replies become ERR UNAVAILABLE or ERR INTERNAL. */
static bool
lock_reply_failed(
    const struct lock_req *req, const redisReply *r, struct lock_result *res)
{
	if (r == NULL) {
		lock_set_err(
		    res, PERR_UNAVAILABLE, "Redis did not answer in time");
		return true;
	}
	if (r->type != REDIS_REPLY_ERROR)
		return false;
	log_warnx("redis: lock %s: %s", req->name, r->str);
	if (lock_redis_busy(r->str))
		lock_set_err(res, PERR_UNAVAILABLE, "Redis cannot serve now");
	else
		lock_set_err(res, PERR_INTERNAL, "unexpected reply from Redis");
	return true;
}

/* The scripts' array replies hold integers; anything else is a bug. */
static bool
lock_reply_ints(const redisReply *r, size_t min, long long *v)
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

static void
lock_bad_reply(struct lock_req *req, struct lock_result *res)
{
	log_warnx("redis: lock %s: malformed script reply", req->name);
	lock_set_err(res, PERR_INTERNAL, "unexpected reply from Redis");
}

static struct lock_hold *
lock_hold_new(struct lock_owner *o, struct lock_req *req, uint64_t fence)
{
	struct lock_hold *h = lock_owner_find(o, req->name);

	if (h == NULL) {
		h = xcalloc(1, sizeof *h);
		h->owner = o;
		h->ln = lock_name_find(req->name, true);
		TAILQ_INSERT_TAIL(&o->holds, h, owner_entry);
		LIST_INSERT_HEAD(&h->ln->holds, h, name_entry);
		o->nholds++;
		STAT_INC(locks_held);
	}
	h->kind = req->kind;
	h->fence = fence;
	h->ttl_ms = req->ttl_ms;
	h->valid_until_ms = util_validity_end(
	    req->start_ms, req->ttl_ms, lk.cf->locks.clock_drift);
	snprintf(h->token, sizeof h->token, "%s", req->token);
	return h;
}

static void
lock_acquire_reply(struct lock_req *req, const redisReply *r)
{
	struct lock_result res = { 0 };
	long long v[3];

	if (lock_reply_failed(req, r, &res)) {
		/* It may have been granted unseen: undo it if the token is ours
		 * alone (a client's own token may hold the lock already). */
		if (r == NULL && req->own_token)
			lock_release_orphan(req->name, req->token);
		lock_finish(req, &res);
		return;
	}
	if (!lock_reply_ints(r, 2, v) || v[1] < 0) {
		lock_bad_reply(req, &res);
		lock_finish(req, &res);
		return;
	}
	if (v[0] == 0) {
		STAT_INC(timeouts_total);
		res.status = LOCK_TIMEOUT;
		lock_finish(req, &res);
		return;
	}
	STAT_INC(grants_total);
	if (req->owner == NULL) {
		/* Its client left while we asked; a kept lock outlives it. */
		if (req->kind != LOCK_KEEP)
			lock_release_orphan(req->name, req->token);
		lock_finish(req, &res);
		return;
	}
	lock_hold_new(req->owner, req, (uint64_t)v[1]);
	res.status = LOCK_OK;
	res.fence = (uint64_t)v[1];
	res.ttl_ms = req->ttl_ms;
	res.token = req->token;
	lock_finish(req, &res);
}

/* Forget every local hold of name under token, whichever owner has it. */
static void
lock_drop_token(const char *name, const char *token)
{
	struct lock_name *ln = lock_name_find(name, false);
	struct lock_hold *h, *next;

	if (ln == NULL)
		return;
	/* The last hold frees ln, so stop on it rather than read ln again. */
	for (h = LIST_FIRST(&ln->holds); h != NULL; h = next) {
		next = LIST_NEXT(h, name_entry);
		if (strcmp(h->token, token) == 0)
			lock_hold_free(h);
	}
}

static void
lock_release_reply(struct lock_req *req, const redisReply *r)
{
	struct lock_result res = { 0 };

	if (lock_reply_failed(req, r, &res)) {
		lock_finish(req, &res);
		return;
	}
	if (r->type != REDIS_REPLY_INTEGER) {
		lock_bad_reply(req, &res);
		lock_finish(req, &res);
		return;
	}
	/* Released or not, the token no longer holds the lock. */
	lock_drop_token(req->name, req->token);
	if (r->integer == 1) {
		STAT_INC(releases_total);
		res.status = LOCK_OK;
	} else {
		STAT_INC(notheld_total);
		lock_set_err(
		    &res, PERR_NOTHELD, "the lock is not held by this token");
	}
	lock_finish(req, &res);
}

static void
lock_extend_reply(struct lock_req *req, const redisReply *r)
{
	struct lock_result res = { 0 };
	struct lock_name *ln;
	struct lock_hold *h;

	if (lock_reply_failed(req, r, &res)) {
		lock_finish(req, &res);
		return;
	}
	if (r->type != REDIS_REPLY_INTEGER) {
		lock_bad_reply(req, &res);
		lock_finish(req, &res);
		return;
	}
	if (r->integer != 1) {
		lock_drop_token(req->name, req->token);
		STAT_INC(notheld_total);
		lock_set_err(
		    &res, PERR_NOTHELD, "the lock is not held by this token");
		lock_finish(req, &res);
		return;
	}
	STAT_INC(extends_total);
	if ((ln = lock_name_find(req->name, false)) != NULL) {
		LIST_FOREACH(h, &ln->holds, name_entry)
		{
			if (strcmp(h->token, req->token) != 0)
				continue;
			h->ttl_ms = req->ttl_ms;
			h->valid_until_ms = util_validity_end(req->start_ms,
			    req->ttl_ms, lk.cf->locks.clock_drift);
		}
	}
	res.status = LOCK_OK;
	res.ttl_ms = req->ttl_ms;
	lock_finish(req, &res);
}

/* STATUS and VALIDATE share one script. */
static void
lock_status_reply(struct lock_req *req, const redisReply *r)
{
	struct lock_result res = { 0 };
	long long v[3];

	if (lock_reply_failed(req, r, &res)) {
		lock_finish(req, &res);
		return;
	}
	if (!lock_reply_ints(r, 1, v) || (v[0] == 1 && r->elements < 3)) {
		lock_bad_reply(req, &res);
		lock_finish(req, &res);
		return;
	}
	res.status = v[0] == 1 ? LOCK_HELD : LOCK_FREE;
	if (v[0] == 1) {
		res.ttl_ms = v[1] > 0 ? (uint64_t)v[1] : 0;
		res.fence = v[2] > 0 ? (uint64_t)v[2] : 0;
	}
	if (req->op == OP_VALIDATE) {
		res.valid = res.status == LOCK_HELD && res.fence == req->fence;
		res.fence = req->fence;
		res.status = LOCK_OK;
	}
	lock_finish(req, &res);
}

static void
lock_reply_cb(const redisReply *reply, void *arg)
{
	struct lock_req *req = arg;

	switch (req->op) {
	case OP_ACQUIRE:
		lock_acquire_reply(req, reply);
		break;
	case OP_RELEASE:
		lock_release_reply(req, reply);
		break;
	case OP_EXTEND:
		lock_extend_reply(req, reply);
		break;
	case OP_STATUS:
	case OP_VALIDATE:
		lock_status_reply(req, reply);
		break;
	}
}

static bool
lock_check_name(const char *name, struct lock_result *res)
{
	if (proto_valid_name(name))
		return true;
	lock_set_err(
	    res, PERR_NAME, "a name is 1-200 bytes of 0x21-0x7E or 0x80-0xFF");
	return false;
}

static bool
lock_check_token(const char *token, struct lock_result *res)
{
	if (token == NULL || proto_valid_token(token))
		return true;
	lock_set_err(res, PERR_ARGS, "a token is 1-64 of A-Z a-z 0-9 _ . -");
	return false;
}

static bool
lock_check_ttl(uint64_t ttl_ms, struct lock_result *res)
{
	static char text[96];

	if (ttl_ms >= (uint64_t)lk.cf->locks.min_ttl_ms &&
	    ttl_ms <= (uint64_t)lk.cf->locks.max_ttl_ms)
		return true;
	snprintf(text, sizeof text,
	    "ttl must be between %" PRId64 " and %" PRId64 " ms",
	    lk.cf->locks.min_ttl_ms, lk.cf->locks.max_ttl_ms);
	lock_set_err(res, PERR_ARGS, text);
	return false;
}

int
lock_acquire(struct lock_owner *o, const char *name,
    const struct lock_acquire_args *a, struct lock_result *res)
{
	struct lock_hold *h;
	struct lock_req *req;
	char ttl[24];
	const char *args[2];

	if (!lock_check_name(name, res) || !lock_check_token(a->token, res))
		return -1;
	if (a->ttl_ms != 0 && !lock_check_ttl(a->ttl_ms, res))
		return -1;
	if (a->keep && a->ttl_ms == 0) {
		lock_set_err(res, PERR_ARGS, "KEEP needs TTL");
		return -1;
	}
	/* Only the holding token may ask again (and gets its fence back). */
	h = lock_owner_find(o, name);
	if (h != NULL &&
	    (a->token == NULL || strcmp(a->token, h->token) != 0)) {
		lock_set_err(
		    res, PERR_HELD, "this connection holds it already");
		return -1;
	}
	if (h == NULL &&
	    o->nholds >= (unsigned)lk.cf->limits.max_locks_per_client) {
		lock_set_err(
		    res, PERR_LIMIT, "too many locks on this connection");
		return -1;
	}
	req = lock_req_new(OP_ACQUIRE, o, name);
	if (a->token != NULL)
		snprintf(req->token, sizeof req->token, "%s", a->token);
	else {
		util_random_token(req->token);
		req->own_token = true;
	}
	req->kind = a->ttl_ms == 0 ? LOCK_SESSION
	    : a->keep		   ? LOCK_KEEP
				   : LOCK_FIXED;
	req->ttl_ms =
	    a->ttl_ms != 0 ? a->ttl_ms : (uint64_t)lk.cf->locks.lease_ms;
	snprintf(ttl, sizeof ttl, "%" PRIu64, req->ttl_ms);
	args[0] = req->token;
	args[1] = ttl;
	lock_send(req, &lock_script_acquire, 2, 2, args);
	return 0;
}

/* Without TOKEN the connection must hold it; with TOKEN anyone may act. */
static const char *
lock_token_for(struct lock_owner *o, const char *name, const char *token,
    struct lock_result *res)
{
	struct lock_hold *h;

	if (!lock_check_name(name, res) || !lock_check_token(token, res))
		return NULL;
	if (token != NULL)
		return token;
	if ((h = lock_owner_find(o, name)) == NULL) {
		STAT_INC(notheld_total);
		lock_set_err(
		    res, PERR_NOTHELD, "this connection does not hold it");
		return NULL;
	}
	return h->token;
}

int
lock_release(struct lock_owner *o, const char *name, const char *token,
    struct lock_result *res)
{
	struct lock_req *req;

	if ((token = lock_token_for(o, name, token, res)) == NULL)
		return -1;
	req = lock_req_new(OP_RELEASE, o, name);
	snprintf(req->token, sizeof req->token, "%s", token);
	lock_send_release(req);
	return 0;
}

int
lock_extend(struct lock_owner *o, const char *name, uint64_t ttl_ms,
    const char *token, struct lock_result *res)
{
	struct lock_req *req;
	char ttl[24];
	const char *args[2];

	if ((token = lock_token_for(o, name, token, res)) == NULL)
		return -1;
	if (!lock_check_ttl(ttl_ms, res))
		return -1;
	req = lock_req_new(OP_EXTEND, o, name);
	snprintf(req->token, sizeof req->token, "%s", token);
	req->ttl_ms = ttl_ms;
	snprintf(ttl, sizeof ttl, "%" PRIu64, ttl_ms);
	args[0] = req->token;
	args[1] = ttl;
	lock_send(req, &lock_script_extend, 1, 2, args);
	return 0;
}

int
lock_status(struct lock_owner *o, const char *name, struct lock_result *res)
{
	if (!lock_check_name(name, res))
		return -1;
	lock_send(
	    lock_req_new(OP_STATUS, o, name), &lock_script_status, 2, 0, NULL);
	return 0;
}

int
lock_validate(struct lock_owner *o, const char *name, uint64_t fence,
    struct lock_result *res)
{
	struct lock_req *req;

	if (!lock_check_name(name, res))
		return -1;
	req = lock_req_new(OP_VALIDATE, o, name);
	req->fence = fence;
	lock_send(req, &lock_script_status, 2, 0, NULL);
	return 0;
}

void
lock_owner_init(
    struct lock_owner *o, uint64_t id, const struct lock_owner_ops *ops)
{
	memset(o, 0, sizeof *o);
	o->id = id;
	o->ops = ops;
	TAILQ_INIT(&o->holds);
}

void
lock_owner_gone(struct lock_owner *o)
{
	struct lock_hold *h;

	if (o->pending != NULL)
		o->pending->owner = NULL;
	o->pending = NULL;
	while ((h = TAILQ_FIRST(&o->holds)) != NULL) {
		/* Session and fixed locks end with their connection. */
		if (h->kind != LOCK_KEEP)
			lock_release_orphan(h->ln->name, h->token);
		lock_hold_free(h);
	}
}

const char *
lock_kind_name(enum lock_kind kind)
{
	static const char *const names[] = { "SESSION", "FIXED", "KEEP" };

	return names[kind];
}

const char *
lock_hold_name(const struct lock_hold *h)
{
	return h->ln->name;
}

uint64_t
lock_hold_ttl_left(const struct lock_hold *h, uint64_t now_ms)
{
	return h->valid_until_ms > now_ms ? h->valid_until_ms - now_ms : 0;
}

void
lock_init(struct event_base *base, const struct config *cf)
{
	lk.cf = cf;
	lk.nbuckets = 64;
	lk.buckets = xcalloc(lk.nbuckets, sizeof *lk.buckets);
	snprintf(lk.channel, sizeof lk.channel, "%sreleased", cf->redis.prefix);
	redisc_script_add(&lock_script_acquire);
	redisc_script_add(&lock_script_release);
	redisc_script_add(&lock_script_extend);
	redisc_script_add(&lock_script_status);
}

void
lock_shutdown(void)
{
	free(lk.buckets);
	lk.buckets = NULL;
}

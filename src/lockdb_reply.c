/*
 * lockdb_reply: each script's reply turned into a struct lockdb_reply (a
 * malformed one is LDB_INTERNAL), and Redis's errors into what a client
 * is told.
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
#include "util.h"
#include "xmalloc.h"

/* Replies that mean "Redis cannot serve now", as opposed to a bug. */
static const char *const lockdb_busy[] = { "LOADING", "BUSY", "READONLY",
	"MASTERDOWN", "OOM", "NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN", "NOAUTH",
	"WRONGPASS" };
#define LOCKDB_NBUSY (sizeof lockdb_busy / sizeof lockdb_busy[0])

/* A busy reply's index in lockdb_busy, or -1. */
static int
lockdb_busy_index(const char *err)
{
	size_t n;

	for (size_t i = 0; i < LOCKDB_NBUSY; i++) {
		n = strlen(lockdb_busy[i]);
		if (strncmp(err, lockdb_busy[i], n) == 0 &&
		    (err[n] == ' ' || err[n] == '\0'))
			return (int)i;
	}
	return -1;
}

/* A busy reply's code word, or NULL. */
static const char *
lockdb_busy_error(const char *err)
{
	int i = lockdb_busy_index(err);

	return i >= 0 ? lockdb_busy[i] : NULL;
}

/* A lease left in Redis as the broker shows and trusts it: without the
 * margin lockdb_init says every lease has there (0 when only that is
 * left; negative, no lease: 0). */
static uint64_t
lockdb_left(long long pttl)
{
	return pttl > 0 && (uint64_t)pttl > lockdb.step_ms
	    ? (uint64_t)pttl - lockdb.step_ms
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
	out->closed = true;
	out->pttl = ms > 0 ? (uint64_t)ms : 0;
	if (code == -1) {
		snprintf(lockdb.why, sizeof lockdb.why,
		    "Redis holds lock data this broker has not checked yet");
		out->again = true; /* if learned since: lockdb_reply_cb, which
				      asks which it is */
	} else
		snprintf(lockdb.why, sizeof lockdb.why,
		    "Redis forgot its locks; no grant for %lld ms (grace period)",
		    ms);
	out->why = lockdb.why;
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

/*
 * A busy reply is Redis's state, not one request's, and comes to every
 * request while it lasts: each code word is logged once, then at most
 * once every LOCKDB_BUSY_LOG_MS, with how many came meanwhile (every
 * client is told it in its ERR UNAVAILABLE). False if it is not one.
 */
static bool
lockdb_log_busy(const struct lockdb_req *req, const char *err)
{
	static struct util_every busy[LOCKDB_NBUSY];
	int i = lockdb_busy_index(err);
	unsigned unsaid;
	uint64_t ago_ms;

	if (i < 0)
		return false;
	if (!util_every(
		&busy[i], mono_ms(), LOCKDB_BUSY_LOG_MS, &unsaid, &ago_ms))
		return true;
	if (unsaid > 0)
		log_warnx("redis: lock %s: %s (and %u more since %" PRIu64
			  " s ago)",
		    req->name, err, unsaid, ago_ms / 1000);
	else
		log_warnx("redis: lock %s: %s", req->name, err);
	return true;
}

/* Redis names a script's line "user_script:N": say which file it is. */
static void
lockdb_log_error(const struct lockdb_req *req, const char *err)
{
	const char *at = strstr(err, "user_script:");

	if (lockdb_log_busy(req, err))
		return;
	if (req->script == NULL || at == NULL)
		log_warnx("redis: lock %s: %s", req->name, err);
	else
		log_warnx("redis: lock %s: %.*ssrc/lua/%s:%s", req->name,
		    (int)(at - err), err, req->script->rs.name,
		    at + strlen("user_script:"));
}

void
lockdb_reply_cb(const redisReply *r, void *arg)
{
	struct lockdb_req *req = arg;
	struct lockdb_reply out = { .status = LDB_UNAVAILABLE };

	/* Not sent, or the connection went: say so, not "in time". */
	if (r == NULL && redisc_deposed())
		out.why = "the Redis master answered after a silence, and the "
			  "cluster no longer names it for this name";
	else if (r == NULL && !redisc_up())
		out.why = "no connection to Redis (reconnecting)";
	out.not_run = r == NULL && redisc_unsent();
	if (r != NULL && r->type == REDIS_REPLY_ERROR) {
		lockdb_log_error(req, r->str);
		out.busy = lockdb_busy_error(r->str);
		out.status = out.busy != NULL ? LDB_UNAVAILABLE : LDB_INTERNAL;
		/* Every script has its flags (#!lua): Redis refuses such a
		 * call whole, before it runs. */
		out.not_run = out.busy != NULL;
	} else if (r != NULL && !lockdb_parse(req->op, r, &out)) {
		log_warnx("redis: lock %s: malformed script reply", req->name);
		out.status = LDB_INTERNAL;
	}
	out.not_run = out.not_run || out.closed;
	if (out.again) /* the gate: not the incarnation known here */
		lockdb_incarnation_of(req->scope);
	else if (req->op == LDB_ACQUIRE &&
	    (out.status == LDB_OK || out.status == LDB_NO ||
		out.status == LDB_DONE || out.status == LDB_CONFLICT))
		lockdb_vouched(req->scope, req->gen, req->sent_ms);
	out.again = out.again && req->incs != lockdb.incs;
	req->cb(&out, req->arg);
	free((void *)out.holders);
	free(req);
}

struct lockdb_req *
lockdb_req_new(enum lockdb_op op, const struct lockdb_script *script,
    const char *name, lockdb_cb *cb, void *arg)
{
	size_t namelen = strlen(name);
	struct lockdb_req *req = xmalloc(sizeof *req + namelen + 1);

	req->op = op;
	req->script = script;
	req->cb = cb;
	req->arg = arg;
	req->incs = lockdb.incs;
	req->scope = lockdb_scope_of(name);
	req->gen = lockdb_scope(req->scope)->gen;
	req->sent_ms = mono_ms();
	memcpy(req->name, name, namelen + 1);
	return req;
}

/*
 * lockreq: the lock engine's common records: the name table, requests,
 * and answering a request's owner exactly once.
 */
#include <sys/queue.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "lockreq.h"
#include "lockrel.h"
#include "log.h"
#include "stats.h"
#include "util.h"
#include "xmalloc.h"

struct lock_engine lk;

/* FNV-1a: names are short and untrusted; this is only a table index. */
static size_t
lockreq_hash(const char *s)
{
	uint64_t h = 14695981039346656037ULL;

	for (; *s != '\0'; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return (size_t)h;
}

static void
lockreq_names_grow(void)
{
	size_t n = lk.nbuckets * 2;
	struct lock_bucket *b = xcalloc(n, sizeof *b);
	struct lock_name *ln;

	for (size_t i = 0; i < lk.nbuckets; i++) {
		while ((ln = LIST_FIRST(&lk.buckets[i])) != NULL) {
			LIST_REMOVE(ln, entry);
			LIST_INSERT_HEAD(
			    &b[lockreq_hash(ln->name) % n], ln, entry);
		}
	}
	free(lk.buckets);
	lk.buckets = b;
	lk.nbuckets = n;
}

struct lock_name *
lockreq_name_find(const char *name)
{
	struct lock_name *ln;

	LIST_FOREACH(ln, &lk.buckets[lockreq_hash(name) % lk.nbuckets], entry)
	if (strcmp(ln->name, name) == 0)
		return ln;
	return NULL;
}

/* Find or make the entry for name, and take a reference on it. */
struct lock_name *
lockreq_name_ref(const char *name)
{
	struct lock_name *ln = lockreq_name_find(name);
	size_t len;

	if (ln == NULL) {
		len = strlen(name);
		ln = xcalloc(1, sizeof *ln + len + 1);
		memcpy(ln->name, name, len + 1);
		LIST_INIT(&ln->holds);
		TAILQ_INIT(&ln->waiters);
		LIST_INSERT_HEAD(
		    &lk.buckets[lockreq_hash(name) % lk.nbuckets], ln, entry);
		if (++lk.nnames > lk.nbuckets)
			lockreq_names_grow();
	}
	ln->refs++;
	return ln;
}

void
lockreq_name_unref(struct lock_name *ln)
{
	if (--ln->refs > 0)
		return;
	LIST_REMOVE(ln, entry);
	lk.nnames--;
	if (ln->retry_ev != NULL)
		event_free(ln->retry_ev);
	free(ln);
}

struct lock_req *
lockreq_new(
    enum lock_op op, struct lock_owner *o, const char *name, const char *token)
{
	struct lock_req *req = xcalloc(1, sizeof *req);

	req->op = op;
	req->owner = o;
	req->ln = lockreq_name_ref(name);
	if (token != NULL)
		snprintf(req->token, sizeof req->token, "%s", token);
	if (o != NULL)
		o->pending = req;
	req->start_ms = mono_ms();
	req->created_us = mono_us();
	return req;
}

void
lockreq_free(struct lock_req *req)
{
	/* An attempt Redis may have granted unseen is undone when it can be:
	 * the token is this request's alone unless the client chose it. */
	if (req->op == OP_ACQUIRE && req->unsure && !req->granted &&
	    req->own_token)
		lockrel_remember(
		    req->ln->name, req->token, req->start_ms + req->ttl_ms);
	if (req->deadline_ev != NULL)
		event_free(req->deadline_ev);
	lockreq_name_unref(req->ln);
	free(req);
}

/* Answer the owner (once); the request itself may live on in Redis. */
void
lockreq_answer(struct lock_req *req, const struct lock_result *res)
{
	struct lock_owner *o = req->owner;

	if (o == NULL)
		return;
	req->owner = NULL;
	o->pending = NULL;
	if (req->op == OP_ACQUIRE)
		stats_observe(HIST_wait_seconds, mono_us() - req->created_us);
	o->ops->done(o, res);
}

void
lockreq_answer_status(struct lock_req *req, enum lock_status st)
{
	struct lock_result res = { .status = st };

	lockreq_answer(req, &res);
}

void
lockreq_set_err(struct lock_result *res, enum proto_err err, const char *text)
{
	memset(res, 0, sizeof *res);
	res->status = LOCK_ERR;
	res->err = err;
	res->errtext = text;
}

void
lockreq_answer_err(struct lock_req *req, enum proto_err err, const char *text)
{
	struct lock_result res;

	lockreq_set_err(&res, err, text);
	lockreq_answer(req, &res);
}

/* UNAVAILABLE and INTERNAL replies, the same for every request. */
void
lockreq_answer_db_error(struct lock_req *req, const struct lockdb_reply *r)
{
	char text[64];

	if (r->status == LDB_UNAVAILABLE && r->busy != NULL) {
		snprintf(text, sizeof text, "Redis answered %s", r->busy);
		lockreq_answer_err(req, PERR_UNAVAILABLE, text);
	} else if (r->status == LDB_UNAVAILABLE)
		lockreq_answer_err(
		    req, PERR_UNAVAILABLE, "Redis did not answer in time");
	else
		lockreq_answer_err(
		    req, PERR_INTERNAL, "unexpected reply from Redis");
}

void
lockreq_timer(struct event *ev, uint64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000),
		(suseconds_t)(ms % 1000) * 1000 };

	evtimer_add(ev, &tv);
}

void
lockreq_init(struct event_base *base, const struct config *cf)
{
	memset(&lk, 0, sizeof lk);
	lk.base = base;
	lk.cf = cf;
	lk.nbuckets = 64;
	lk.buckets = xcalloc(lk.nbuckets, sizeof *lk.buckets);
}

void
lockreq_shutdown(void)
{
	free(lk.buckets);
	lk.buckets = NULL;
}

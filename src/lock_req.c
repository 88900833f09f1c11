/*
 * lock_req: the lock engine's request records, what the scripts are asked
 * for each, and answering a request's owner exactly once.
 */
#include <sys/queue.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "lock_name.h"
#include "lock_req.h"
#include "lock_release.h"
#include "log.h"
#include "stats.h"
#include "util.h"
#include "xmalloc.h"

static size_t nreqs;	 /* requests alive */
static char broker[128]; /* "<hostname>:<pid>:<random>", for WHO */

struct lock_req *
lockreq_new(
    enum lock_op op, struct lock_owner *o, const char *name, const char *token)
{
	struct lock_req *req = xcalloc(1, sizeof *req);

	lockname_reqs(++nreqs);
	req->op = op;
	req->owner = o;
	req->ln = lockname_ref(name);
	if (token != NULL) {
		char *p = req->token;

		util_cat(&p, req->token + sizeof req->token, token);
	}
	if (o != NULL)
		o->pending = req;
	req->created_us = mono_us();
	req->start_ms = req->created_us / 1000;
	return req;
}

void
lockreq_free(struct lock_req *req)
{
	/* An attempt Redis may have granted unseen is undone when it can be:
	 * the token is this request's alone unless the client chose it. */
	if (req->op == OP_ACQUIRE && req->unsure && !req->granted &&
	    req->own_token)
		lockrel_remember(req->ln->name, req->token, 0,
		    req->start_ms + req->ttl_ms, LDB_DONE_NO);
	if (req->deadline_ev != NULL)
		event_free(req->deadline_ev);
	lockreq_unask(req);
	lockname_unref(req->ln);
	lockname_reqs(--nreqs);
	free(req);
}

void
lockreq_send(struct lock_req *req)
{
	req->in_flight = true;
}

void
lockreq_landed(struct lock_req *req)
{
	req->in_flight = false;
	req->heard = true;
}

void
lockreq_asking(struct lock_req *req)
{
	req->asking = true;
	LIST_INSERT_HEAD(&req->ln->asking, req, asking_entry);
}

bool
lockreq_token_acquiring(const struct lock_name *ln, const char *token,
    const struct lock_req *except)
{
	const struct lock_req *r;

	LIST_FOREACH (r, &ln->asking, asking_entry)
		if (r != except && r->op == OP_ACQUIRE &&
		    strcmp(r->token, token) == 0)
			return true;
	return false;
}

void
lockreq_unask(struct lock_req *req)
{
	if (req->asking)
		LIST_REMOVE(req, asking_entry);
	req->asking = false;
}

void
lockreq_token_asks(const struct lock_req *req)
{
	struct lock_req *r;

	if (req->own_token)
		return; /* nobody released a token made just now */
	lockrel_forget(req->ln->name, req->token);
	LIST_FOREACH (r, &req->ln->asking, asking_entry)
		if (r->op == OP_RELEASE && strcmp(r->token, req->token) == 0)
			r->forget = true;
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

	/* Every TIMEOUT of a request is answered here, and counted. */
	if (st == LOCK_TIMEOUT && req->cancelled) {
		res.status = LOCK_CANCELLED;
		STAT_INC(cancels_total);
	} else if (st == LOCK_TIMEOUT)
		STAT_INC(timeouts_total);
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

	if (r->status == LDB_UNAVAILABLE && r->why != NULL)
		lockreq_answer_err(req, PERR_UNAVAILABLE, r->why);
	else if (r->status == LDB_UNAVAILABLE && r->busy != NULL) {
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
	struct timeval tv = util_timeval(ms);

	evtimer_add(ev, &tv);
}

const char *
lock_mode_name(enum lock_mode mode, unsigned limit)
{
	static char buf[24];

	switch (mode) {
	case LOCK_EXCLUSIVE:
		return "EXCLUSIVE";
	case LOCK_FILL:
		return "FILL";
	case LOCK_SHARED:
		return "SHARED";
	case LOCK_LIMIT:
		break;
	}
	snprintf(buf, sizeof buf, "LIMIT=%u", limit);
	return buf;
}

/* A WHO entry: "<mode> <broker> <id>@<peer> <unix ms>". */
static void
lockreq_info(const struct lock_owner *o, enum lock_mode mode, unsigned limit,
    uint64_t since_ms, char *info, size_t len)
{
	char *p = info, *end = info + len;

	util_cat(&p, end, lock_mode_name(mode, limit));
	util_cat(&p, end, " ");
	util_cat(&p, end, broker);
	util_cat(&p, end, " ");
	util_cat_u64(&p, end, o != NULL ? o->id : 0);
	util_cat(&p, end, "@");
	util_cat(&p, end, o != NULL && o->peer != NULL ? o->peer : "-");
	util_cat(&p, end, " ");
	util_cat_u64(&p, end, since_ms);
}

void
lockreq_hold_info(const struct lock_hold *h, char *info, size_t len)
{
	lockreq_info(h->owner, h->mode, h->limit, h->since_ms, info, len);
}

/*
 * What the scripts need for req's try; info (for WHO) says how it holds,
 * which broker and client, and since when on the wall clock: "<mode>
 * <broker> <id>@<peer> <unix ms>".
 */
void
lockreq_ask(const struct lock_req *req, uint64_t mark_ms, struct lockdb_ask *a,
    char *info, size_t len)
{
	lockreq_info(req->owner, req->mode, req->limit, wall_ms(), info, len);
	a->token = req->token;
	a->ttl_ms = req->ttl_ms;
	a->mark_ms = mark_ms;
	a->mode = (enum lockdb_mode)req->mode;
	a->limit = req->limit;
	a->watch = req->watch;
	a->clear_writer = req->marked_writer;
	a->info = info;
	a->ticket = req->ticket;
	a->least = req->ticket;
}

void
lockreq_init(struct event_base *base)
{
	char host[64], nonce[UTIL_TOKEN_HEXLEN + 1];

	nreqs = 0;
	lockname_init(base);
	if (gethostname(host, sizeof host) != 0)
		snprintf(host, sizeof host, "localhost");
	host[sizeof host - 1] = '\0';
	/* WHO's words are split on spaces: keep a hostname to one word. */
	for (char *p = host; *p != '\0'; p++)
		if (*p <= ' ' || *p > '~')
			*p = '_';
	/* Two brokers may share a hostname and pid (containers): the start's
	 * own random part keeps each one's grants its own (docs/protocol.md
	 * §3, What a holder can rely on). */
	util_random_token(nonce);
	snprintf(
	    broker, sizeof broker, "%s:%ld:%.8s", host, (long)getpid(), nonce);
}

void
lockreq_shutdown(void)
{
	lockname_shutdown();
}

const char *
lockreq_broker(void)
{
	return broker;
}

/*
 * lock_req: the lock engine's request records, what the scripts are asked
 * for each, answering a request's owner exactly once, and the names and
 * tokens a request may carry.
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
#include "lockdb.h"
#include "lock_req.h"
#include "lock_release.h"
#include "lock_timer.h"
#include "log.h"
#include "proto.h"
#include "stats.h"
#include "util.h"
#include "xmalloc.h"

static struct event_base *base;
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

/*
 * The legal moves of a request's two states (lock_req.h): any other is a
 * bug, and the broker stops rather than lose track of a try in Redis or
 * a waiter in a queue.
 */
static const char *const lockreq_redis_names[] = { "IDLE", "SENT", "TRYING",
	"SENT_REPLICAS", "TRYING_REPLICAS" };
static const char *const lockreq_place_names[] = { "NEW", "QUEUED", "GRANTED",
	"LEFT" };

static void
lockreq_move_redis(struct lock_req *req, enum lockreq_redis to)
{
	static const bool legal[5][5] = {
		[LOCKREQ_IDLE] = { [LOCKREQ_SENT] = true,
		    [LOCKREQ_TRYING] = true },
		[LOCKREQ_SENT] = { [LOCKREQ_IDLE] = true,
		    [LOCKREQ_SENT_REPLICAS] = true },
		[LOCKREQ_TRYING] = { [LOCKREQ_IDLE] = true,
		    [LOCKREQ_TRYING_REPLICAS] = true },
		[LOCKREQ_SENT_REPLICAS] = { [LOCKREQ_IDLE] = true },
		[LOCKREQ_TRYING_REPLICAS] = { [LOCKREQ_IDLE] = true },
	};

	if (!legal[req->redis][to])
		fatalx("lock %s: a request cannot go from %s to %s",
		    req->ln->name, lockreq_redis_names[req->redis],
		    lockreq_redis_names[to]);
	req->redis = to;
}

static void
lockreq_move_place(struct lock_req *req, enum lockreq_place to)
{
	static const bool legal[4][4] = {
		[LOCKREQ_NEW] = { [LOCKREQ_QUEUED] = true,
		    [LOCKREQ_GRANTED] = true },
		[LOCKREQ_QUEUED] = { [LOCKREQ_GRANTED] = true,
		    [LOCKREQ_LEFT] = true },
		[LOCKREQ_LEFT] = { [LOCKREQ_GRANTED] = true },
	};

	if (!legal[req->place][to])
		fatalx("lock %s: a request cannot go from %s to %s",
		    req->ln->name, lockreq_place_names[req->place],
		    lockreq_place_names[to]);
	req->place = to;
}

/* Freed in its last answer's callback, or once nothing of it is in
 * Redis; never while queued. */
void
lockreq_free(struct lock_req *req)
{
	if (req->place == LOCKREQ_QUEUED)
		fatalx("lock %s: a queued request freed", req->ln->name);
	if (req->deadline_ev != NULL)
		event_free(req->deadline_ev);
	lockreq_unask(req);
	lockname_unref(req->ln);
	lockname_reqs(--nreqs);
	free(req);
}

void
lockreq_free_undo(struct lock_req *req)
{
	/* An attempt Redis may have granted unseen is undone when it can be:
	 * the token is this request's alone unless the client chose it. */
	if (req->op == OP_ACQUIRE && req->unsure &&
	    req->place != LOCKREQ_GRANTED && req->own_token)
		lockrel_remember(req->ln->name, req->token, 0,
		    req->start_ms + req->ttl_ms, LDB_DONE_NO);
	lockreq_free(req);
}

void
lockreq_terms(struct lock_req *req, enum lock_kind kind, enum lock_mode mode,
    unsigned limit, uint64_t ttl_ms, int64_t wait_ms)
{
	req->kind = kind;
	req->mode = mode;
	req->limit = limit;
	req->ttl_ms = ttl_ms;
	req->wait_ms = wait_ms;
}

void
lockreq_own_token(struct lock_req *req)
{
	util_random_token(req->token);
	req->own_token = true;
}

void
lockreq_set_ttl(struct lock_req *req, uint64_t ttl_ms)
{
	req->ttl_ms = ttl_ms;
}

void
lockreq_set_fence(struct lock_req *req, uint64_t fence)
{
	req->fence = fence;
}

void
lockreq_releases(struct lock_req *req, uint64_t fence, uint64_t lease_end_ms,
    enum lockdb_done done)
{
	req->fence = fence;
	req->lease_end_ms = lease_end_ms;
	req->done = done;
}

void
lockreq_for_hold(struct lock_req *req, struct lock_hold *h, bool confirming)
{
	req->hold = h;
	req->confirming = confirming;
}

void
lockreq_hold_gone(struct lock_req *req)
{
	req->hold = NULL;
}

void
lockreq_lease_seq(struct lock_req *req, uint64_t seq)
{
	req->lease_seq = seq;
}

/* Its owner left: the request may live on in Redis, answering nobody. */
void
lockreq_orphan(struct lock_req *req)
{
	if (req->owner != NULL)
		req->owner->pending = NULL;
	req->owner = NULL;
}

void
lockreq_send(struct lock_req *req)
{
	lockreq_move_redis(req, LOCKREQ_SENT);
}

/* A new ask answers for everything missed before it (OP_CHECK). */
void
lockreq_send_at(struct lock_req *req, uint64_t start_ms, uint64_t sub_epoch)
{
	lockreq_move_redis(req, LOCKREQ_SENT);
	req->again = false;
	req->start_ms = start_ms;
	req->sub_epoch = sub_epoch;
}

void
lockreq_attempt(struct lock_req *req, uint64_t start_ms, uint64_t sub_epoch)
{
	lockreq_move_redis(req, LOCKREQ_TRYING);
	req->tries++;
	req->start_ms = start_ms;
	req->sub_epoch = sub_epoch;
}

void
lockreq_replicate(struct lock_req *req, uint64_t fence)
{
	lockreq_move_redis(req,
	    req->redis == LOCKREQ_TRYING ? LOCKREQ_TRYING_REPLICAS
					 : LOCKREQ_SENT_REPLICAS);
	req->fence = fence;
}

void
lockreq_landed(struct lock_req *req)
{
	lockreq_move_redis(req, LOCKREQ_IDLE);
	req->heard = true;
}

void
lockreq_unsure(struct lock_req *req)
{
	req->unsure = true;
}

void
lockreq_ask_again(struct lock_req *req)
{
	req->again = lockreq_in_flight(req);
}

void
lockreq_queue(struct lock_req *req, uint64_t ticket)
{
	lockreq_move_place(req, LOCKREQ_QUEUED);
	req->ticket = ticket;
	TAILQ_INSERT_TAIL(&req->ln->waiters, req, queue_entry);
}

uint64_t
lockreq_leave(struct lock_req *req, bool granted)
{
	uint64_t handed = req->handed;

	if (req->place != LOCKREQ_QUEUED && !granted)
		return 0;
	if (req->place == LOCKREQ_QUEUED) {
		TAILQ_REMOVE(&req->ln->waiters, req, queue_entry);
		req->handed = 0;
	} else
		handed = 0;
	lockreq_move_place(req, granted ? LOCKREQ_GRANTED : LOCKREQ_LEFT);
	return handed;
}

void
lockreq_take_place(struct lock_req *req, struct lockdb_ask *a, uint64_t first)
{
	req->retake = false;
	if (req->wait_ms == 0)
		a->ticket = 0; /* turned try-once (input ended): no place */
	else if (req->ticket != 0) {
		req->took = true;
		if (req->ticket_ms == 0)
			req->ticket_ms = req->start_ms;
		a->least =
		    first != 0 && first < req->ticket ? first : req->ticket;
	}
}

void
lockreq_place_used(struct lock_req *req)
{
	req->took = false;
}

void
lockreq_retake(struct lock_req *req)
{
	req->retake = true;
}

void
lockreq_handed(struct lock_req *req, uint64_t fence)
{
	req->handed = fence;
}

uint64_t
lockreq_send_confirm(
    struct lock_req *req, uint64_t start_ms, uint64_t sub_epoch)
{
	req->fence = req->handed;
	req->handed = 0;
	lockreq_send_at(req, start_ms, sub_epoch);
	return req->fence;
}

void
lockreq_marked_writer(struct lock_req *req)
{
	req->marked_writer = true;
}

void
lockreq_watch(struct lock_req *req, uint64_t fence)
{
	req->watch = fence;
}

void
lockreq_tried(struct lock_req *req, uint64_t now_us)
{
	req->tried_us = now_us;
}

/* A try-once never watches a FILL leader: it is never told DONE. */
void
lockreq_try_once(struct lock_req *req)
{
	req->wait_ms = 0;
	req->watch = 0;
	lockreq_deadline_stop(req);
}

void
lockreq_cancel(struct lock_req *req)
{
	req->cancelled = true;
}

void
lockreq_deadline(struct lock_req *req,
    void (*fn)(evutil_socket_t, short, void *), uint64_t ms)
{
	if (req->deadline_ev == NULL)
		req->deadline_ev = locktimer_new(base, 0, fn, req);
	locktimer_add(req->deadline_ev, ms);
}

void
lockreq_deadline_stop(struct lock_req *req)
{
	if (req->deadline_ev != NULL)
		evtimer_del(req->deadline_ev);
}

uint64_t
lockreq_backoff(struct lock_req *req, uint64_t min_ms, uint64_t max_ms)
{
	req->retry_ms = req->retry_ms == 0 ? min_ms : req->retry_ms * 2;
	if (req->retry_ms > max_ms)
		req->retry_ms = max_ms;
	return req->retry_ms;
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

void
lockreq_owner_ident(struct lock_owner *o, const char *ident)
{
	o->ident = ident;
}

/*
 * A WHO entry: "<mode> <broker> [<ident>/]<id>@<peer> <unix ms>". The
 * identity goes in front of the client's word, not in a word of its own,
 * so a reader of the five words of before reads it still; an identity
 * has no "/", so the first one ends it.
 */
void
lockreq_info(const struct lock_owner *o, enum lock_mode mode, unsigned limit,
    uint64_t since_ms, char *info, size_t len)
{
	char *p = info, *end = info + len;

	util_cat(&p, end, lock_mode_name(mode, limit));
	util_cat(&p, end, " ");
	util_cat(&p, end, broker);
	util_cat(&p, end, " ");
	if (o != NULL && o->ident != NULL) {
		util_cat(&p, end, o->ident);
		util_cat(&p, end, "/");
	}
	util_cat_u64(&p, end, o != NULL ? o->id : 0);
	util_cat(&p, end, "@");
	util_cat(&p, end, o != NULL && o->peer != NULL ? o->peer : "-");
	util_cat(&p, end, " ");
	util_cat_u64(&p, end, since_ms);
}

/*
 * What the scripts need for req's try; info (for WHO) says how it holds,
 * which broker and client, and since when on the wall clock: "<mode>
 * <broker> [<ident>/]<id>@<peer> <unix ms>".
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
lockreq_init(struct event_base *event_base)
{
	char host[64], nonce[UTIL_TOKEN_HEXLEN + 1];

	nreqs = 0;
	base = event_base;
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

/*
 * A name's keys are "<prefix>{<name>}...", whose hash tag is the name up
 * to its first "}": one beginning with "}" has an empty tag, so on a
 * Redis Cluster each of its keys (and its marker) would hash on its own,
 * to slots Redis refuses together (CROSSSLOT).
 */
bool
lockreq_check_name(const char *name, struct lock_result *res)
{
	if (!proto_valid_name(name)) {
		lockreq_set_err(res, PERR_NAME,
		    "a name is 1-200 bytes of 0x21-0x7E or 0x80-0xFF");
		return false;
	}
	if (name[0] == '}' && lockdb_scoped()) {
		lockreq_set_err(res, PERR_NAME,
		    "on a Redis Cluster a name may not begin with \"}\"");
		return false;
	}
	return true;
}

bool
lockreq_check_token(const char *token, struct lock_result *res)
{
	if (token == NULL || proto_valid_token(token))
		return true;
	lockreq_set_err(res, PERR_ARGS, "a token is 1-64 of A-Z a-z 0-9 _ . -");
	return false;
}

/*
 * lock_try: the trier's tries. Only the trier of a name's queue here asks
 * Redis again and again (taking the first FILL waiter along); its answer
 * grants it, refuses it (it tries again after a back-off, or when the
 * holder's lease ends), or tells which waiter of ours Redis queues first.
 * It also starts an ACQUIRE's wait. Built on lock_name, lock_req,
 * lock_hold, lock_queue, lock_fill, lock_grant and lock_handover; lock
 * calls it, and it wires the trier's try and answer into lock_queue and
 * lock_grant (locktry_init).
 */
#include <sys/queue.h>

#include <stdint.h>

#include "config.h"
#include "lockdb.h"
#include "lock_fill.h"
#include "lock_grant.h"
#include "lock_handover.h"
#include "lock_hold.h"
#include "lock_queue.h"
#include "lock_req.h"
#include "lock_try.h"
#include "util.h"

static struct {
	const struct config *cf;
} t;

static void locktry_answer_cb(const struct lockdb_reply *r, void *arg);

/* The head's try (its own, or a hand-over made for it) goes to Redis. */
static void
locktry_begin(struct lock_req *req)
{
	lockq_try_begins(req->ln);
	lockreq_attempt(req, mono_ms(), lockq_sub_epoch());
	/* Another connection here may hold it under the same token. */
	lockhold_assume(req);
	lockreq_token_asks(req);
}

/* The head's try was answered: ln is pinned until the caller unrefs it. */
static void
locktry_end(struct lock_req *req)
{
	lockname_pin(req->ln);
	lockq_try_ends(req->ln);
	lockreq_landed(req);
}

static void
locktry_answer_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_name *ln = req->ln;
	uint64_t next = UINT64_MAX;

	if (r->status == LDB_OK && t.cf->redis.wait_replicas > 0 &&
	    !lockreq_replicating(req)) {
		lockgrant_replicate(req, r->fence);
		return;
	}
	locktry_end(req);
	if (r->status == LDB_UNAVAILABLE && !r->not_run)
		lockreq_unsure(req);
	/* A grant took it out of the queue in Redis. */
	if (r->status == LDB_OK)
		lockreq_place_used(req);
	if (r->status == LDB_OK && lockgrant_late(req, r->fence)) {
		next = 0; /* given back: the head tries again at once */
		if (req->owner == NULL || req->wait_ms == 0) {
			lockq_dequeue(req);
			lockgrant_answer_late(req);
		}
	} else if (r->status == LDB_OK) {
		lockgrant_granted(req, r->fence);
		/* Ours now: the rest wait for it, unless they may share, or
		 * are FILL waiters, whose try marks the name for DONE. */
		next = req->mode != LOCK_EXCLUSIVE ? 0 : req->ttl_ms;
	} else if (req->owner == NULL) {
		lockq_dequeue(req); /* freed below */
	} else if (r->status == LDB_DONE) {
		lockfill_done(req, r->fence);
		next = 0;
		if (lockreq_queued(req) && req->wait_ms == 0) {
			/* Became a try-once on its way: never told DONE. */
			lockq_dequeue(req);
			lockreq_answer_status(req, LOCK_TIMEOUT);
		}
	} else if (r->status == LDB_CONFLICT) {
		lockgrant_conflict(req, r);
		next = 0;
	} else if (r->status == LDB_NO) {
		next = r->pttl;
		/* Its ticket queued behind a holder, whose release hands the
		 * name on with a message to this broker: it asks again only to
		 * keep the ticket live, or when that lease ends, not in a
		 * quick back-off (a try per waiter and broker, each time). */
		if (req->ticket != 0 && req->took && r->pttl != UINT64_MAX)
			lockq_backoff_longest(ln);
		if (r->marked)
			lockreq_marked_writer(req);
		if (req->mode == LOCK_FILL && r->fence > 0)
			lockfill_watch(ln, r->fence, req->tried_us);
		if (r->head != 0 && lockreq_queued(req))
			lockhand_ask_head(ln, req, r->head);
		if (req->handed != 0)
			lockhand_confirm(req);
		else if (req->wait_ms == 0) {
			lockq_dequeue(req);
			lockreq_answer_status(req, LOCK_TIMEOUT);
		}
	} else if (r->status == LDB_UNAVAILABLE && r->again &&
	    (req->wait_ms != 0 || req->tries < 2)) {
		/* Sent while the broker knew an incarnation it has learned
		 * since is gone (a loss while it was quiet): once more. */
		next = 0;
	} else if (req->wait_ms == 0 || r->status == LDB_INTERNAL) {
		lockq_dequeue(req);
		lockreq_answer_db_error(req, r);
	} else if (r->pttl > 0) {
		next = r->pttl; /* a grace period: over in pttl ms */
	}
	/* Redis trouble leaves a waiter queued: it waits to its deadline. */
	if (!lockreq_queued(req) && !lockreq_in_flight(req))
		lockreq_free_undo(req);
	lockq_try_after(ln, next);
	lockname_unref(ln);
}

/*
 * A FILL waiter takes no ticket, so while waiters with tickets queue here
 * it is never the trier: the first of the FILL waiters asks along with
 * each try of a trier with a ticket (its try marks the name for DONE,
 * says which leader it waits on, and takes the name if it is free for
 * it), so it is told DONE when its leader finishes, not after those
 * before it.
 */
static void
locktry_fill_along(struct lock_name *ln)
{
	struct lock_req *r;

	/* A try-once that has not asked (its input ended before it could)
	 * makes its one try here. */
	TAILQ_FOREACH (r, &ln->waiters, queue_entry)
		if (r->mode == LOCK_FILL &&
		    (r->wait_ms != 0 || r->tried_us == 0))
			break;
	if (r != NULL && !lockreq_in_flight(r)) {
		lockreq_tried(r, mono_us());
		lockhand_take(r);
	}
}

/* Only the trier of a queue asks Redis again and again. */
void
locktry_attempt(struct lock_name *ln)
{
	struct lock_req *req = lockq_trier(ln);
	struct lockdb_ask a;
	char info[LOCKREQ_INFO];

	if (req == NULL) {
		lockhand_retake_rest(ln); /* nobody left to retake */
		return;
	}
	if (ln->attempting || lockreq_in_flight(req))
		return;
	locktry_begin(req);
	lockreq_tried(req, mono_us());
	lockhand_ask(req, &a, info, sizeof info);
	lockdb_acquire(ln->name, &a, locktry_answer_cb, req);
	if (ln->retaking)
		lockhand_retake_rest(ln);
	if (req->ticket != 0)
		locktry_fill_along(ln);
}

void
locktry_now(struct lock_req *req)
{
	struct lock_name *ln = req->ln;

	lockq_retry_stop(ln);
	locktry_attempt(ln); /* the trier, taking a FILL along */
	if (!lockreq_in_flight(req) && req->tried_us == 0 &&
	    lockq_trier(ln) != req) {
		lockreq_tried(req, mono_us());
		lockhand_take(req);
	}
}

/* An ACQUIRE waits: queued, the trier asks for its place at once, any
 * other waiter with a ticket takes its place, and a new FILL waiter
 * learns its leader from the next try. */
void
locktry_wait(struct lock_req *req)
{
	struct lock_name *ln = req->ln;

	if (req->mode == LOCK_FILL && req->wait_ms != 0)
		lockreq_watch(req, lockfill_leader(ln));
	lockq_enqueue(req);
	if (lockq_trier(ln) == req && !ln->attempting) {
		lockq_try_first(ln);
	} else if (req->ticket != 0) {
		lockhand_take(req);
	} else if (req->mode == LOCK_FILL && req->wait_ms != 0 &&
	    req->watch == 0) {
		/* The head's next try tells it which leader it waits on. */
		lockq_kick(ln);
	}
}

void
locktry_init(struct event_base *base, const struct config *cf)
{
	t.cf = cf;
	lockq_init(base, cf, locktry_attempt);
	lockgrant_init(cf, locktry_answer_cb, lockhand_answer_cb);
	lockhand_init(cf);
}

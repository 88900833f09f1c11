/*
 * lock_queue: the local FIFO of each name's waiting ACQUIREs, the waiter
 * whose tries keep it going (the trier), when the trier tries next (at
 * once on news of a release, when the holder's lease runs out, or after
 * a jittered back-off), each waiter's WAIT deadline, and leaving the
 * queue. It owns the queue fields of struct lock_name (retry_ev,
 * backoff_ms, attempting, kicked). Built on lock_name, lock_req,
 * lock_hold and lock_release; the try itself is lock_try's, called
 * through the function given to lockq_init.
 */
#include <sys/queue.h>

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "chaos.h"
#include "config.h"
#include "lockdb.h"
#include "lock_hold.h"
#include "lock_queue.h"
#include "lock_release.h"
#include "lock_req.h"
#include "lock_timer.h"
#include "log.h"
#include "stats.h"
#include "util.h"

/* The queues' own state; other parts ask through lockq_waiters() and
 * friends. */
static struct {
	struct event_base *base;
	const struct config *cf;
	lockq_attempt_fn *attempt; /* the trier's try (lock_try) */
	unsigned nwaiters;
	uint64_t tickets;   /* tickets given out: the last one's n */
	uint64_t sub_epoch; /* the subscriptions made (messages missed) */
	bool stopping;	    /* SIGTERM: no more waiting */
} q;

static void lockq_retry_cb(evutil_socket_t fd, short what, void *arg);

/* The head's next try in ms; the timer is made the first time it is. */
static void
lockq_retry_at(struct lock_name *ln, uint64_t ms)
{
	if (ln->retry_ev == NULL)
		ln->retry_ev = locktimer_new(q.base, 0, lockq_retry_cb, ln);
	locktimer_add(ln->retry_ev, ms);
}

void
lockq_retry_stop(struct lock_name *ln)
{
	if (ln->retry_ev != NULL)
		evtimer_del(ln->retry_ev);
}

/* Whether a hold, or a request other than req, goes by token on ln. */
bool
lockq_token_used(
    struct lock_name *ln, const char *token, const struct lock_req *req)
{
	struct lock_hold *h;
	struct lock_req *r;

	LIST_FOREACH (h, &ln->holds, name_entry)
		if (strcmp(h->token, token) == 0)
			return true;
	TAILQ_FOREACH (r, &ln->waiters, queue_entry)
		if (r != req && strcmp(r->token, token) == 0)
			return true;
	return lockreq_token_acquiring(ln, token, req);
}

/* req leaves its queue, granted or not (or is granted out of it). */
void
lockq_leave(struct lock_req *req, bool granted)
{
	bool queued = lockreq_queued(req);
	uint64_t handed = lockreq_leave(req, granted);

	if (!queued)
		return;
	q.nwaiters--;
	STAT_SET(waiters, q.nwaiters);
	lockreq_deadline_stop(req);
	/* Left without a grant: its place goes (a grant took it already),
	 * and a hand-over it was to confirm is given back. */
	if (req->took && !granted)
		lockdb_cancel(req->ln->name, req->ticket);
	if (handed != 0 && !granted &&
	    !lockq_token_used(req->ln, req->token, req))
		lockrel_release(req->ln->name, req->token, handed, false, 0);
}

/* req leaves its queue without a grant (if it is in it). */
void
lockq_dequeue(struct lock_req *req)
{
	lockq_leave(req, false);
}

/* The waiter whose tries keep the name's queue here going: the first with
 * a ticket (the first live ticket anywhere is always one of these), else
 * the first. */
struct lock_req *
lockq_trier(struct lock_name *ln)
{
	struct lock_req *r;

	TAILQ_FOREACH (r, &ln->waiters, queue_entry)
		if (r->ticket != 0)
			return r;
	return TAILQ_FIRST(&ln->waiters);
}

/* Nobody wants this acquire's answer any more; free it unless in Redis. */
void
lockq_abandon(struct lock_req *req)
{
	lockreq_orphan(req);
	lockq_dequeue(req);
	if (!lockreq_in_flight(req))
		lockreq_free_undo(req);
}

/*
 * The head's next try: when the holder's lease runs out (pttl), or after a
 * jittered back-off that doubles from retry_min_ms to retry_max_ms,
 * whichever is first. A release announced meanwhile cuts it short.
 */
void
lockq_schedule(struct lock_name *ln, uint64_t pttl)
{
	uint64_t max = (uint64_t)q.cf->locks.retry_max_ms;
	uint64_t delay;

	if (TAILQ_EMPTY(&ln->waiters))
		return;
	delay = util_random_range(ln->backoff_ms / 2 + 1, ln->backoff_ms);
	ln->backoff_ms = ln->backoff_ms * 2 > max ? max : ln->backoff_ms * 2;
	if (pttl < delay)
		delay = pttl + 1;
	lockq_retry_at(ln, delay);
}

/* The trier tries again some time, unless a try or its timer is on; at
 * once when the waiters are to take their places again after it. */
void
lockq_keep_trying(struct lock_name *ln)
{
	if (ln->retaking && !ln->attempting) {
		lockq_retry_stop(ln);
		q.attempt(ln);
	} else if (!ln->attempting &&
	    (ln->retry_ev == NULL || !evtimer_pending(ln->retry_ev, NULL)))
		lockq_schedule(ln, UINT64_MAX);
}

static void
lockq_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lock_name *ln = arg;

	if (!ln->attempting)
		q.attempt(ln);
}

/* A release of name was seen: the head tries at once. */
void
lockq_kick(struct lock_name *ln)
{
	if (TAILQ_EMPTY(&ln->waiters))
		return;
	ln->backoff_ms = (uint64_t)q.cf->locks.retry_min_ms;
	if (ln->attempting) {
		ln->kicked = true;
		return;
	}
	lockq_retry_stop(ln);
	q.attempt(ln);
}

/* WAIT ran out: TIMEOUT now; an attempt still in Redis is undone later. */
static void
lockq_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lock_req *req = arg;

	lockq_dequeue(req);
	lockreq_answer_status(req, LOCK_TIMEOUT);
	if (!lockreq_in_flight(req))
		lockreq_free_undo(req);
}

/* CANCEL: a queued waiter's wait ends now, as if its WAIT ran out. */
void
lockq_cancel(struct lock_req *req)
{
	lockq_deadline_cb(-1, 0, req);
}

void
lockq_enqueue(struct lock_req *req)
{
	uint64_t ticket = 0;

	/* A waiter's place is one queue for every broker (a FILL waiter
	 * waits on its leader instead). */
	if (req->mode != LOCK_FILL && req->wait_ms != 0 &&
	    chaos_fault != CHAOS_NO_TICKETS) {
		ticket = ++q.tickets;
		STAT_INC(tickets_total);
	}
	lockreq_queue(req, ticket);
	q.nwaiters++;
	STAT_SET(waiters, q.nwaiters);
	if (req->wait_ms > 0)
		lockreq_deadline(
		    req, lockq_deadline_cb, (uint64_t)req->wait_ms);
}

/* The trier tries now, its back-off started again. */
void
lockq_try_first(struct lock_name *ln)
{
	ln->backoff_ms = (uint64_t)q.cf->locks.retry_min_ms;
	lockq_retry_stop(ln);
	q.attempt(ln);
}

/* The trier tries now, unless its try is in Redis: then once that try
 * is answered. */
void
lockq_try(struct lock_name *ln)
{
	if (ln->attempting) {
		ln->kicked = true;
		return;
	}
	lockq_retry_stop(ln);
	q.attempt(ln);
}

/* The trier's try goes to Redis, and was answered. */
void
lockq_try_begins(struct lock_name *ln)
{
	ln->attempting = true;
	ln->kicked = false;
}

void
lockq_try_ends(struct lock_name *ln)
{
	ln->attempting = false;
}

/* A ticket queued behind a holder waits the longest back-off: the
 * release hands the name on with a message. */
void
lockq_backoff_longest(struct lock_name *ln)
{
	ln->backoff_ms = (uint64_t)q.cf->locks.retry_max_ms;
}

/* The trier's try was answered: it tries again after next ms (a release
 * seen meanwhile: at once). */
void
lockq_try_after(struct lock_name *ln, uint64_t next)
{
	if (ln->kicked)
		lockq_kick(ln);
	else
		lockq_schedule(ln, next);
}

/* Each waiter of ln is told ERR SHUTDOWN. */
static void
lockq_stop_name(struct lock_name *ln, void *arg)
{
	struct lock_req *req;

	while ((req = TAILQ_FIRST(&ln->waiters)) != NULL) {
		lockreq_answer_err(
		    req, PERR_SHUTDOWN, "the broker is stopping");
		lockq_abandon(req);
	}
}

/* A graceful stop: every waiter here is told ERR SHUTDOWN, and nobody
 * waits from now on. */
void
lockq_stop(void)
{
	q.stopping = true;
	lockname_foreach(lockq_stop_name, NULL);
}

bool
lockq_stopping(void)
{
	return q.stopping;
}

unsigned
lockq_waiters(void)
{
	return q.nwaiters;
}

uint64_t
lockq_sub_epoch(void)
{
	return q.sub_epoch;
}

void
lockq_sub_epoch_next(void)
{
	q.sub_epoch++;
}

void
lockq_init(
    struct event_base *base, const struct config *cf, lockq_attempt_fn *attempt)
{
	memset(&q, 0, sizeof q);
	q.base = base;
	q.cf = cf;
	q.attempt = attempt;
}

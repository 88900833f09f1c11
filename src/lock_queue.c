/*
 * lock_queue: waiting. Each name has a FIFO queue of this broker's waiting
 * ACQUIREs, and only its head talks to Redis: at once when a release is
 * seen (pub/sub, a local release or loss), when the holder's lease runs
 * out, or after a jittered back-off. A RELEASE with a local head hands the
 * lock over in one script. Built on lock_name, lock_req, lock_hold and
 * lock_release.
 */
#include <sys/queue.h>

#include <inttypes.h>
#include <stdio.h>
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
#include "log.h"
#include "stats.h"
#include "util.h"
#include "xmalloc.h"

/* The queues' own state; other parts ask through lockq_waiters() and
 * friends. */
static struct {
	struct event_base *base;
	const struct config *cf;
	unsigned nwaiters;
	uint64_t tickets;   /* tickets given out: the last one's n */
	uint64_t sub_epoch; /* the subscriptions made (messages missed) */
	bool stopping;	    /* SIGTERM: no more waiting */
} q;

static void lockq_retry_cb(evutil_socket_t fd, short what, void *arg);
static void lockq_side_cb(const struct lockdb_reply *r, void *arg);
static bool lockq_token_used(
    struct lock_name *ln, const char *token, const struct lock_req *req);
static void lockq_take(struct lock_req *req);
static void lockq_retake_rest(struct lock_name *ln);
static void lockq_ask_head(
    struct lock_name *ln, const struct lock_req *trier, uint64_t head);
static void lockq_confirm(struct lock_req *req);
static void lockq_confirm_cb(const struct lockdb_reply *r, void *arg);

/* The head's next try in ms; the timer is made the first time it is. */
static void
lockq_retry_at(struct lock_name *ln, uint64_t ms)
{
	if (ln->retry_ev == NULL &&
	    (ln->retry_ev = evtimer_new(q.base, lockq_retry_cb, ln)) == NULL)
		fatalx("lock: evtimer_new failed");
	lockreq_timer(ln->retry_ev, ms);
}

void
lockq_retry_stop(struct lock_name *ln)
{
	if (ln->retry_ev != NULL)
		evtimer_del(ln->retry_ev);
}

/* req leaves its queue, granted or not (or is granted out of it). */
static void
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
static void
lockq_dequeue(struct lock_req *req)
{
	lockq_leave(req, false);
}

/* The waiter whose tries keep the name's queue here going: the first with
 * a ticket (the first live ticket anywhere is always one of these), else
 * the first. */
static struct lock_req *
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
static void
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
static void
lockq_keep_trying(struct lock_name *ln)
{
	if (ln->retaking && !ln->attempting) {
		lockq_retry_stop(ln);
		lockq_attempt(ln);
	} else if (!ln->attempting &&
	    (ln->retry_ev == NULL || !evtimer_pending(ln->retry_ev, NULL)))
		lockq_schedule(ln, UINT64_MAX);
}

static void
lockq_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lock_name *ln = arg;

	if (!ln->attempting)
		lockq_attempt(ln);
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
	lockq_attempt(ln);
}

/* Whether another broker released or shortened the grant with fence. */
static bool
lockq_heard(const struct lock_name *ln, uint64_t fence)
{
	for (unsigned i = 0; i < ln->nheard && i < 4; i++)
		if (ln->heard[i] == fence)
			return true;
	return false;
}

void
lockq_granted(struct lock_req *req, uint64_t fence)
{
	struct lock_result res = { .status = LOCK_OK };
	struct lock_owner *o = req->owner;

	if (lockdb_refusal() != NULL && req->owner != NULL) {
		/* Granted by a Redis found to evict since it was asked (a
		 * hand-over, a try in flight): given back, and the waiter
		 * told, as a new ACQUIRE would be. */
		lockq_dequeue(req);
		if (!lockq_token_used(req->ln, req->token, req))
			lockrel_release(
			    req->ln->name, req->token, fence, false, 0);
		lockreq_answer_err(req, PERR_UNAVAILABLE, lockdb_refusal());
		return;
	}
	STAT_INC(grants_total);
	lockq_leave(req, true);
	if (o == NULL) {
		/* Asked for, then left or timed out: give it straight back,
		 * unless it is a kept lock under the client's own token (it
		 * can ask again with that token and learn the fence). */
		if ((req->kind != LOCK_KEEP || req->own_token) &&
		    !lockhold_token_busy(req->ln, req->token, NULL, NULL))
			lockrel_release(req->ln->name, req->token, fence, false,
			    util_validity_end(req->start_ms, req->ttl_ms,
				q.cf->locks.clock_drift));
		return;
	}
	if (chaos_fault == CHAOS_NO_FENCE)
		fence = 1;
	lockhold_set(o, req, fence);
	res.fence = fence;
	res.ttl_ms = req->ttl_ms;
	res.token = req->token;
	lockreq_answer(req, &res);
	/* News of this grant came before its answer (the subscriber is
	 * another connection): a REVOKE, or another broker's release or
	 * shortening of it, ran after the grant in Redis: lost already. */
	if (fence <= req->ln->revoked)
		lockhold_revoked(req->ln, req->ln->revoked);
	else if (lockq_heard(req->ln, fence))
		lockhold_released(req->ln, fence);
	/* The subscription was made again while it was in Redis: news of
	 * it may have been missed, so Redis is asked. */
	else if (req->sub_epoch != q.sub_epoch)
		lockhold_recheck(req->ln);
}

/* Whether a hold, or a request other than req, goes by token on ln. */
static bool
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

/*
 * A grant whose answer came after its validity (docs/protocol.md §3,
 * counted from before the try was sent) had ended is worth nothing: an OK now
 * would hand the client a lock anyone may take at any moment. It goes back
 * to Redis and the try counts as refused.
 */
bool
lockq_grant_late(struct lock_req *req, uint64_t fence)
{
	uint64_t end = util_validity_end(
	    req->start_ms, req->ttl_ms, q.cf->locks.clock_drift);
	uint64_t now = mono_ms();

	if (end > now || chaos_fault == CHAOS_NO_VALIDITY)
		return false;
	STAT_INC(late_grants_total);
	log_warnx("lock %s: granted %" PRIu64
		  " ms after asking, past its %" PRIu64 " ms lease; given back",
	    req->ln->name, now - req->start_ms, req->ttl_ms);
	if (!lockq_token_used(req->ln, req->token, req))
		lockrel_release(req->ln->name, req->token, fence, false, end);
	return true;
}

/* The head's try (its own, or a hand-over made for it) goes to Redis. */
static void
lockq_attempt_begin(struct lock_req *req)
{
	req->ln->attempting = true;
	req->ln->kicked = false;
	lockreq_attempt(req, mono_ms(), q.sub_epoch);
	/* Another connection here may hold it under the same token. */
	lockhold_assume(req);
	lockreq_token_asks(req);
}

/* The head's try was answered: ln is pinned until the caller unrefs it. */
static void
lockq_attempt_end(struct lock_req *req)
{
	lockname_pin(req->ln);
	req->ln->attempting = false;
	lockreq_landed(req);
}

/*
 * redis.wait_replicas: a grant counts only once that many replicas have
 * it, so a failover cannot hand out its fence again. Otherwise it is
 * released and the client told ERR UNAVAILABLE.
 */
static void
lockq_replicas_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_name *ln = req->ln;
	struct lockdb_reply granted = { LDB_OK, req->fence, 0 };
	int want = q.cf->redis.wait_replicas;

	if (r->status == LDB_OK && r->fence >= (uint64_t)want) {
		(lockreq_trying(req) ? lockq_attempt_cb : lockq_side_cb)(
		    &granted, req);
		return;
	}
	log_warnx("lock %s: granted, but %" PRIu64
		  " of %d replicas have it; released",
	    ln->name, r->status == LDB_OK ? r->fence : 0, want);
	if (lockreq_trying(req))
		lockq_attempt_end(req);
	else {
		lockname_pin(ln);
		lockreq_landed(req);
	}
	/* Not if a hold or request here has the same grant (a same-token
	 * re-grant gets its fence back). */
	if (!lockq_token_used(ln, req->token, req))
		lockrel_release(ln->name, req->token, req->fence, false,
		    util_validity_end(
			req->start_ms, req->ttl_ms, q.cf->locks.clock_drift));
	lockq_dequeue(req);
	lockreq_answer_err(req, PERR_UNAVAILABLE,
	    "the grant did not reach redis.wait_replicas replicas in time");
	lockreq_free_undo(req);
	lockq_schedule(ln, 0);
	lockname_unref(ln);
}

static void
lockq_replicate(struct lock_req *req, uint64_t fence)
{
	lockreq_replicate(req, fence);
	lockdb_wait(req->ln->name, q.cf->redis.wait_replicas,
	    (uint64_t)q.cf->redis.command_timeout_ms / 2, lockq_replicas_cb,
	    req);
}

/*
 * A FILL try sent at tried_us was refused by the leader with this fence:
 * the FILL waiters here that had asked by then wait on that leader (or a
 * later one). One that asked later is not told DONE for it: its own try,
 * or the next one, says which leader it waits on.
 */
static void
lockq_watch(struct lock_name *ln, uint64_t fence, uint64_t tried_us)
{
	struct lock_req *r;

	TAILQ_FOREACH (r, &ln->waiters, queue_entry)
		if (r->mode == LOCK_FILL && r->wait_ms != 0 &&
		    r->created_us <= tried_us && r->watch < fence)
			lockreq_watch(r, fence);
}

/* A new FILL waiter waits on the leader here, unless it is releasing. */
static uint64_t
lockq_watch_of(struct lock_name *ln)
{
	struct lock_hold *h;
	uint64_t w = 0;

	LIST_FOREACH (h, &ln->holds, name_entry)
		if (h->mode == LOCK_FILL && !h->releasing && h->fence > w)
			w = h->fence;
	return w;
}

/* A try-once's grant came back after its lease ended: given back. */
static void
lockq_answer_late(struct lock_req *req)
{
	lockreq_answer_err(req, PERR_UNAVAILABLE,
	    "the grant came after its lease ended; Redis is slow");
}

/* A FILL leader finished (done is its fence): every FILL waiter here that
 * waited on it, or on an earlier one, is told DONE. head is freed by its
 * caller. */
static void
lockq_done(struct lock_req *head, uint64_t done)
{
	struct lock_req *r, *next;

	for (r = TAILQ_FIRST(&head->ln->waiters); r != NULL; r = next) {
		next = TAILQ_NEXT(r, queue_entry);
		if (r->mode != LOCK_FILL || r->wait_ms == 0 || r->watch == 0 ||
		    r->watch > done)
			continue;
		STAT_INC(fills_done_total);
		lockq_dequeue(r);
		lockreq_answer_status(r, LOCK_DONE);
		if (r != head && !lockreq_in_flight(r))
			lockreq_free_undo(r);
	}
}

/* Held in another mode than req asks for: by others in another shared
 * mode, or by req's own token in the other family. */
void
lockq_conflict(struct lock_req *req, const struct lockdb_reply *r)
{
	static char text[64];
	const char *who = req->mode == LOCK_SHARED || req->mode == LOCK_LIMIT
	    ? "the lock is held"
	    : "this token holds it";

	if (r->mode == LDB_EXCLUSIVE)
		snprintf(text, sizeof text, "this token holds it exclusively");
	else if (r->mode == LDB_SHARED)
		snprintf(text, sizeof text, "%s SHARED", who);
	else
		snprintf(text, sizeof text, "%s with LIMIT %u", who, r->limit);
	lockq_dequeue(req);
	lockreq_answer_err(req, PERR_ARGS, text);
}

void
lockq_attempt_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_name *ln = req->ln;
	uint64_t next = UINT64_MAX;

	if (r->status == LDB_OK && q.cf->redis.wait_replicas > 0 &&
	    !lockreq_replicating(req)) {
		lockq_replicate(req, r->fence);
		return;
	}
	lockq_attempt_end(req);
	if (r->status == LDB_UNAVAILABLE)
		lockreq_unsure(req);
	if (r->status == LDB_OK)
		lockreq_place_used(
		    req); /* the grant took it out of the queue */
	if (r->status == LDB_OK && lockq_grant_late(req, r->fence)) {
		next = 0; /* given back: the head tries again at once */
		if (req->owner == NULL || req->wait_ms == 0) {
			lockq_dequeue(req);
			lockq_answer_late(req);
		}
	} else if (r->status == LDB_OK) {
		lockq_granted(req, r->fence);
		/* Ours now: the rest wait for it, unless they may share, or
		 * are FILL waiters, whose try marks the name for DONE. */
		next = req->mode != LOCK_EXCLUSIVE ? 0 : req->ttl_ms;
	} else if (req->owner == NULL) {
		lockq_dequeue(req); /* freed below */
	} else if (r->status == LDB_DONE) {
		lockq_done(req, r->fence);
		next = 0;
		if (lockreq_queued(req) && req->wait_ms == 0) {
			/* Became a try-once on its way: never told DONE. */
			lockq_dequeue(req);
			lockreq_answer_status(req, LOCK_TIMEOUT);
		}
	} else if (r->status == LDB_CONFLICT) {
		lockq_conflict(req, r);
		next = 0;
	} else if (r->status == LDB_NO) {
		next = r->pttl;
		/* Its ticket queued behind a holder, whose release hands the
		 * name on with a message to this broker: it asks again only to
		 * keep the ticket live, or when that lease ends, not in a
		 * quick back-off (a try per waiter and broker, each time). */
		if (req->ticket != 0 && req->took && r->pttl != UINT64_MAX)
			ln->backoff_ms = (uint64_t)q.cf->locks.retry_max_ms;
		if (r->marked)
			lockreq_marked_writer(req);
		if (req->mode == LOCK_FILL && r->fence > 0)
			lockq_watch(ln, r->fence, req->tried_us);
		if (r->head != 0 && lockreq_queued(req))
			lockq_ask_head(ln, req, r->head);
		if (req->handed != 0)
			lockq_confirm(req);
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
	if (ln->kicked)
		lockq_kick(ln);
	else
		lockq_schedule(ln, next);
	lockname_unref(ln);
}

/*
 * How long a refused waiter marks its name as waited for, so that a
 * release anywhere is announced: past its next try (the head tries at
 * least every retry_max_ms), with room for a slow reply. A try-once
 * waits for no announcement.
 */
static uint64_t
lockq_mark_ms(const struct lock_req *req)
{
	if (req->wait_ms == 0)
		return 0;
	return config_mark_ms(q.cf);
}

/* The scripts' view of req's try, with its ticket: the try takes its
 * place, and names the least ticket this broker still queues on the name
 * (earlier ones left). */
static void
lockq_ask(struct lock_req *req, struct lockdb_ask *a, char *info, size_t len)
{
	struct lock_req *first = lockq_trier(req->ln);

	lockreq_ask(req, lockq_mark_ms(req), a, info, len);
	lockreq_take_place(req, a, first->ticket);
}

/*
 * Redis says the queue's first ticket is another of ours (head): the trier
 * is queued behind it (its grant came too late and was given back, or the
 * others took their places first after a reconnect), and only a try with
 * that ticket can take the name, so its waiter asks now.
 */
static void
lockq_ask_head(
    struct lock_name *ln, const struct lock_req *trier, uint64_t head)
{
	struct lock_req *r;

	TAILQ_FOREACH (r, &ln->waiters, queue_entry)
		if (r != trier && r->ticket == head && !lockreq_in_flight(r)) {
			lockq_take(r);
			return;
		}
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
lockq_fill_along(struct lock_name *ln)
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
		lockq_take(r);
	}
}

/* Only the trier of a queue asks Redis again and again. */
void
lockq_attempt(struct lock_name *ln)
{
	struct lock_req *req = lockq_trier(ln);
	struct lockdb_ask a;
	char info[LOCKREQ_INFO];

	if (req == NULL)
		ln->retaking = false;
	if (req == NULL || ln->attempting || lockreq_in_flight(req))
		return;
	lockq_attempt_begin(req);
	lockreq_tried(req, mono_us());
	lockq_ask(req, &a, info, sizeof info);
	lockdb_acquire(ln->name, &a, lockq_attempt_cb, req);
	if (ln->retaking)
		lockq_retake_rest(ln);
	if (req->ticket != 0)
		lockq_fill_along(ln);
}

void
lockq_try_now(struct lock_req *req)
{
	struct lock_name *ln = req->ln;

	lockq_retry_stop(ln);
	lockq_attempt(ln); /* the trier, taking a FILL along */
	if (!lockreq_in_flight(req) && req->tried_us == 0 &&
	    lockq_trier(ln) != req) {
		lockreq_tried(req, mono_us());
		lockq_take(req);
	}
}

/* A waiter behind the trier takes its ticket's place (its one try; it may
 * be granted, if the name is free and nobody queues before it). */
static void
lockq_take(struct lock_req *req)
{
	struct lockdb_ask a;
	char info[LOCKREQ_INFO];

	lockreq_send_at(req, mono_ms(), q.sub_epoch);
	lockhold_assume(req);
	lockreq_token_asks(req);
	lockq_ask(req, &a, info, sizeof info);
	lockdb_acquire(req->ln->name, &a, lockq_side_cb, req);
	if (req->ln->retaking && req == lockq_trier(req->ln))
		lockq_retake_rest(req->ln);
}

/*
 * Another broker's release handed req the name (fence), with a lease of
 * at most that broker's handoff; req counts it only once it confirmed it
 * itself (EXTEND with the fence, to its own ttl): its validity is counted
 * from sending that, as for any try.
 */
static void
lockq_confirm(struct lock_req *req)
{
	uint64_t fence = lockreq_send_confirm(req, mono_ms(), q.sub_epoch);

	lockhold_assume(req);
	lockdb_extend(req->ln->name, req->token, fence, req->ttl_ms,
	    lockq_confirm_cb, req);
}

static void
lockq_confirm_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lockdb_reply out = *r;

	/* Confirmed is granted, with the fence it was handed; not confirmed
	 * (its lease ran out, or someone revoked it) is refused: the waiter
	 * queues again. */
	out.fence = req->fence;
	lockq_side_cb(&out, req);
}

/*
 * The answer to a try of a waiter that is not the trier (a take, a
 * confirmation, or its WAIT for replicas): granted, or still waiting.
 */
static void
lockq_side_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_name *ln = req->ln;

	if (r->status == LDB_OK && q.cf->redis.wait_replicas > 0 &&
	    !lockreq_replicating(req)) {
		lockq_replicate(req, r->fence);
		return;
	}
	lockname_pin(ln);
	lockreq_landed(req);
	if (r->status == LDB_UNAVAILABLE)
		lockreq_unsure(req);
	if (r->status == LDB_OK)
		lockreq_place_used(
		    req); /* the grant took it out of the queue */
	if (r->status == LDB_OK && !lockq_grant_late(req, r->fence))
		lockq_granted(req, r->fence);
	else if (req->owner == NULL)
		lockq_dequeue(req); /* freed below */
	else if (r->status == LDB_CONFLICT)
		lockq_conflict(req, r);
	else if (r->status == LDB_INTERNAL) {
		lockq_dequeue(req);
		lockreq_answer_db_error(req, r);
	} else if (lockreq_queued(req) && req->wait_ms == 0 &&
	    req->handed == 0) {
		/* A try-once (its input ended before it asked, or while its
		 * first try was in Redis): its one answer ends it, a FILL is
		 * never told DONE, and nothing takes its place again (with no
		 * ticket to wait with, it would ask for ever). One handed the
		 * name confirms it first, below. */
		if (r->status == LDB_DONE)
			lockq_done(req, r->fence);
		lockq_dequeue(req);
		if (r->status == LDB_OK)
			lockq_answer_late(req);
		else if (r->status == LDB_NO || r->status == LDB_DONE) {
			lockreq_answer_status(req, LOCK_TIMEOUT);
		} else
			lockreq_answer_db_error(req, r);
	} else if (r->status == LDB_DONE) /* a FILL waiter's */
		lockq_done(req, r->fence);
	else if (req->mode == LOCK_FILL && lockreq_queued(req)) {
		/* Refused (or Redis away): it asks again with the trier. */
		if (r->status == LDB_NO && r->marked)
			lockreq_marked_writer(req);
		if (r->status == LDB_NO && r->fence > 0)
			lockq_watch(ln, r->fence, req->tried_us);
	} else if (req->handed != 0)
		lockq_confirm(req);
	else if (lockreq_queued(req) && (!req->took || req->retake))
		lockq_take(req); /* not granted after all, or its place may
				    be gone: queue again */
	if (!lockreq_queued(req) && !lockreq_in_flight(req))
		lockreq_free_undo(req);
	lockq_keep_trying(ln);
	lockname_unref(ln);
}

/*
 * Another broker's hand-over (for ttl_ms, 0: not said) may be answered
 * before it is confirmed: Redis made it after req's first try with its
 * ticket, so it lasts at least ttl_ms from sending that try. With more
 * than half of that ahead (and no replicas to wait for), req is granted
 * now, trusted until then (the end returned; 0: confirm first), and
 * confirms meanwhile (lockhold_handed).
 */
static uint64_t
lockq_handed_early(const struct lock_req *req, uint64_t ttl_ms)
{
	uint64_t end;

	if (ttl_ms == 0 || req->ticket_ms == 0 || req->owner == NULL ||
	    q.cf->redis.wait_replicas > 0)
		return 0;
	end =
	    util_validity_end(req->ticket_ms, ttl_ms, q.cf->locks.clock_drift);
	return end > mono_ms() + ttl_ms / 2 ? end : 0;
}

/*
 * A release handed name to our ticket n (fence, under token): by this
 * broker (sent_ms: when that release was sent, which its lease counts
 * from) or by another (0: confirmed first, or meanwhile when its lease
 * allows). A waiter that left has the grant released, which hands it on.
 */
void
lockq_handed(const char *name, uint64_t ticket, uint64_t fence,
    const char *token, uint64_t sent_ms, uint64_t ttl_ms)
{
	struct lock_name *ln = lockname_find(name);
	struct lock_req *req = NULL;
	struct lock_owner *o;
	struct lock_hold *h;
	uint64_t until = 0;

	if (ln != NULL)
		TAILQ_FOREACH (req, &ln->waiters, queue_entry)
			if (req->ticket == ticket)
				break;
	if (req == NULL || strcmp(req->token, token) != 0) {
		/* Its waiter left: released, unless its token is still in
		 * use here (a try of its own found the grant its token's and
		 * holds it, the message coming after the answer; or the
		 * client asks again with that TOKEN, and that ACQUIRE, in
		 * Redis before this release, is answered with this grant).
		 * Then its lease, or its holder, ends it. */
		if (ln == NULL || !lockq_token_used(ln, token, NULL))
			lockrel_release(name, token, fence, false, 0);
		return;
	}
	STAT_INC(handovers_in_total);
	lockreq_place_used(req); /* out of the queue in Redis */
	if (lockreq_in_flight(req)) {
		/* A try of its own is in Redis: sent after our release (this
		 * connection keeps order), it finds the grant its own; one
		 * sent to confirm a hand-over is the same grant. Another
		 * broker's hand-over is confirmed once it answers. */
		if (sent_ms == 0)
			lockreq_handed(req, fence);
		return;
	}
	if (sent_ms == 0 && (until = lockq_handed_early(req, ttl_ms)) == 0) {
		lockreq_handed(req, fence);
		lockq_confirm(req);
		return;
	}
	lockname_pin(ln);
	lockreq_send_at(
	    req, sent_ms != 0 ? sent_ms : req->ticket_ms, req->sub_epoch);
	o = req->owner;
	lockq_side_cb(
	    &(struct lockdb_reply){ .status = LDB_OK, .fence = fence }, req);
	if (until != 0 && (h = lockhold_find(o, name)) != NULL &&
	    h->fence == fence)
		lockhold_handed(h, until);
	lockname_unref(ln);
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
	struct lock_name *ln = req->ln;

	uint64_t ticket = 0;

	if (req->mode == LOCK_FILL && req->wait_ms != 0)
		lockreq_watch(req, lockq_watch_of(ln));
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
	if (lockq_trier(ln) == req && !ln->attempting) {
		ln->backoff_ms = (uint64_t)q.cf->locks.retry_min_ms;
		lockq_retry_stop(ln);
		lockq_attempt(ln); /* a waiter asks for its place at once */
	} else if (req->ticket != 0) {
		lockq_take(req);
	} else if (req->mode == LOCK_FILL && req->wait_ms != 0 &&
	    req->watch == 0) {
		/* The head's next try tells it which leader it waits on. */
		lockq_kick(ln);
	}
}

/* The waiters behind the trier whose places may be gone take them again,
 * now that the trier's try is on its way before theirs. */
static void
lockq_retake_rest(struct lock_name *ln)
{
	struct lock_req *r, *trier = lockq_trier(ln);

	ln->retaking = false;
	TAILQ_FOREACH (r, &ln->waiters, queue_entry)
		if (r != trier && r->ticket != 0 && r->retake &&
		    !lockreq_in_flight(r))
			lockq_take(r);
}

/*
 * Each waiter of ln takes its place in the queue again (it may be gone, or
 * a hand-over's message missed: a try finds the grant). The trier first,
 * so the places taken again keep their order: with a try of its own in
 * Redis (it may have run before the loss), the trier asks again once that
 * is answered, and the rest after it; one of them with a try in Redis
 * takes its place again once that try is answered.
 */
static void
lockq_retake(struct lock_name *ln, void *arg)
{
	struct lock_req *r, *trier = lockq_trier(ln);

	if (trier == NULL)
		return;
	TAILQ_FOREACH (r, &ln->waiters, queue_entry)
		if (r != trier && r->ticket != 0)
			lockreq_retake(r);
	ln->retaking = true;
	if (!ln->attempting && !lockreq_in_flight(trier)) {
		lockq_retry_stop(ln);
		lockq_attempt(ln);
	} else if (ln->attempting)
		ln->kicked = true; /* its try's answer tries again at once */
	else
		lockreq_retake(trier); /* a take of its own is in Redis */
	if (trier->ticket == 0)
		lockq_retake_rest(ln); /* no place to keep before theirs */
}

/* After a (re)subscription, for each name: its waiters and holds may have
 * missed news. */
static void
lockq_missed(struct lock_name *ln, void *arg)
{
	lockq_retake(ln, arg);
	lockhold_recheck(ln);
}

/* Redis forgot its lock data (a new incarnation: FLUSHALL, a restart
 * without it, a failover to a replica that missed it): the queues went
 * with it, so every waiter here takes its place again. */
void
lockq_forgot(void)
{
	lockname_foreach(lockq_retake, NULL);
}

/* (Re)subscribed: releases and revokes may have been missed meanwhile. */
static void
lockq_resubscribed(void)
{
	q.sub_epoch++;
	lockname_foreach(lockq_missed, NULL);
}

/*
 * News on the release channel (lockdb parses it): a name was released, so
 * its waiters here may go; an admin revoked it (holds here with that fence
 * or an older one are lost); another broker released or shortened a grant
 * whose holds may be here too (they are lost); or the subscription was
 * made again, and news may have been missed.
 */
static void
lockq_news_cb(const struct lockdb_news *news)
{
	struct lock_name *ln;

	if (news->kind == LDB_NEWS_MISSED) {
		lockq_resubscribed();
		return;
	}
	if (news->kind == LDB_NEWS_HANDED) {
		lockq_handed(news->name, news->ticket, news->fence, news->token,
		    0, news->ttl_ms);
		return;
	}
	if ((ln = lockname_find(news->name)) == NULL)
		return;
	lockname_pin(ln);
	if (news->kind == LDB_NEWS_REVOKED) {
		if (news->fence > ln->revoked)
			ln->revoked = news->fence;
		lockhold_revoked(ln, news->fence);
	} else if (news->kind == LDB_NEWS_GONE &&
	    chaos_fault != CHAOS_NO_FOREIGN_NOTICE) {
		/* Its grant's answer may still be on its way here. */
		ln->heard[ln->nheard++ % 4] = news->fence;
		lockhold_released(ln, news->fence);
	}
	lockq_kick(ln);
	lockname_unref(ln);
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
lockq_init(struct event_base *base, const struct config *cf)
{
	memset(&q, 0, sizeof q);
	q.base = base;
	q.cf = cf;
	lockdb_subscribe(lockq_news_cb);
}

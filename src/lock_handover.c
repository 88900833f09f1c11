/*
 * lock_handover: the tries of waiters other than the trier, and the
 * hand-over across brokers. A waiter behind the trier takes its
 * ticket's place in Redis (a take); a release hands the name to the
 * queue's first live ticket, which its waiter confirms when another
 * broker made it; their answers (side answers) come to
 * lockhand_answer_cb; and after news was missed or Redis forgot its
 * queues, every waiter retakes its place. It owns struct lock_name's
 * retaking. Built on lock_name, lock_req, lock_hold, lock_release,
 * lock_queue, lock_fill and lock_grant.
 */
#include <sys/queue.h>

#include <string.h>

#include "config.h"
#include "lockdb.h"
#include "lock_fill.h"
#include "lock_grant.h"
#include "lock_handover.h"
#include "lock_hold.h"
#include "lock_queue.h"
#include "lock_release.h"
#include "lock_req.h"
#include "lock_scope.h"
#include "stats.h"
#include "util.h"

static struct {
	const struct config *cf;
} hand;

static void lockhand_confirm_cb(const struct lockdb_reply *r, void *arg);
static void lockhand_not_taken(struct lock_req *req, bool learned);

/*
 * How long a refused waiter marks its name as waited for, so that a
 * release anywhere is announced: past its next try (the head tries at
 * least every retry_max_ms), with room for a slow reply. A try-once
 * waits for no announcement.
 */
static uint64_t
lockhand_mark_ms(const struct lock_req *req)
{
	if (req->wait_ms == 0)
		return 0;
	return config_mark_ms(hand.cf);
}

/* The scripts' view of req's try, with its ticket: the try takes its
 * place, and names the least ticket this broker still queues on the name
 * (earlier ones left). */
void
lockhand_ask(struct lock_req *req, struct lockdb_ask *a, char *info, size_t len)
{
	struct lock_req *first = lockq_trier(req->ln);

	lockreq_ask(req, lockhand_mark_ms(req), a, info, len);
	lockreq_take_place(req, a, first->ticket);
}

/*
 * Redis says the queue's first ticket is another of ours (head): the trier
 * is queued behind it (its grant came too late and was given back, or the
 * others took their places first after a reconnect), and only a try with
 * that ticket can take the name, so its waiter asks now.
 */
void
lockhand_ask_head(
    struct lock_name *ln, const struct lock_req *trier, uint64_t head)
{
	struct lock_req *r;

	TAILQ_FOREACH (r, &ln->waiters, queue_entry)
		if (r != trier && r->ticket == head && !lockreq_in_flight(r)) {
			lockhand_take(r);
			return;
		}
}

/* A waiter behind the trier takes its ticket's place (its one try; it may
 * be granted, if the name is free and nobody queues before it). */
void
lockhand_take(struct lock_req *req)
{
	struct lockdb_ask a;
	char info[LOCKREQ_INFO];

	lockreq_send_at(req, mono_ms(), lockq_sub_epoch());
	lockhold_assume(req);
	lockreq_token_asks(req);
	lockhand_ask(req, &a, info, sizeof info);
	lockdb_acquire(req->ln->name, &a, lockhand_answer_cb, req);
	if (req->ln->retaking && req == lockq_trier(req->ln))
		lockhand_retake_rest(req->ln);
}

/* The waiters behind the trier whose places may be gone take them again,
 * now that the trier's try is on its way before theirs. */
void
lockhand_retake_rest(struct lock_name *ln)
{
	struct lock_req *r, *trier = lockq_trier(ln);

	ln->retaking = false;
	TAILQ_FOREACH (r, &ln->waiters, queue_entry)
		if (r != trier && r->ticket != 0 && r->retake &&
		    !lockreq_in_flight(r))
			lockhand_take(r);
}

/*
 * Another broker's release handed req the name (fence), with a lease of
 * at most that broker's handoff; req counts it only once it confirmed it
 * itself (EXTEND with the fence, to its own ttl): its validity is counted
 * from sending that, as for any try.
 */
void
lockhand_confirm(struct lock_req *req)
{
	uint64_t fence =
	    lockreq_send_confirm(req, mono_ms(), lockq_sub_epoch());

	lockhold_assume(req);
	lockdb_extend(req->ln->name, req->token, fence, req->ttl_ms,
	    lockhand_confirm_cb, req);
}

static void
lockhand_confirm_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lockdb_reply out = *r;

	/* Confirmed is granted, with the fence it was handed; not confirmed
	 * (its lease ran out, or someone revoked it) is refused: the waiter
	 * queues again. */
	out.fence = req->fence;
	lockhand_answer_cb(&out, req);
}

/*
 * The answer to a try of a waiter that is not the trier (a take, a
 * confirmation, or its WAIT for replicas): granted, or still waiting.
 */
void
lockhand_answer_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_name *ln = req->ln;

	if (r->status == LDB_OK && hand.cf->redis.wait_replicas > 0 &&
	    !lockreq_replicating(req)) {
		lockgrant_replicate(req, r->fence);
		return;
	}
	lockname_pin(ln);
	lockreq_landed(req);
	if (r->status == LDB_UNAVAILABLE && !r->not_run)
		lockreq_unsure(req);
	/* A grant took it out of the queue in Redis. */
	if (r->status == LDB_OK)
		lockreq_place_used(req);
	if (r->status == LDB_OK && !lockgrant_late(req, r->fence))
		lockgrant_granted(req, r->fence);
	else if (req->owner == NULL)
		lockq_dequeue(req); /* freed below */
	else if (r->status == LDB_CONFLICT)
		lockgrant_conflict(req, r);
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
			lockfill_done(req, r->fence);
		lockq_dequeue(req);
		if (r->status == LDB_OK)
			lockgrant_answer_late(req);
		else if (r->status == LDB_NO || r->status == LDB_DONE) {
			lockreq_answer_status(req, LOCK_TIMEOUT);
		} else
			lockreq_answer_db_error(req, r);
	} else if (r->status == LDB_DONE) /* a FILL waiter's */
		lockfill_done(req, r->fence);
	else if (req->mode == LOCK_FILL && lockreq_queued(req)) {
		/* Refused (or Redis away): it asks again with the trier. */
		if (r->status == LDB_NO && r->marked)
			lockreq_marked_writer(req);
		if (r->status == LDB_NO && r->fence > 0)
			lockfill_watch(ln, r->fence, req->tried_us);
	} else if (req->handed != 0)
		lockhand_confirm(req);
	else if (r->closed && lockreq_queued(req))
		lockhand_not_taken(req, r->again);
	else if (lockreq_queued(req) && (!req->took || req->retake))
		lockhand_take(req); /* not granted after all, or its place may
				    be gone: queue again */
	if (!lockreq_queued(req) && !lockreq_in_flight(req))
		lockreq_free_undo(req);
	lockq_keep_trying(ln);
	lockname_unref(ln);
}

/*
 * The gate refused req's take (lib/gate.lua: the marker names another
 * incarnation than the one known here, as at a slot's first use): the
 * script stopped there, so req has no place in the queue, and a
 * hand-over would pass it by until its wait ends. It takes its place
 * again: at once if the incarnation was learned since it was sent (its
 * take now names it), else right after a try of the trier's, which goes
 * at once (lockq_keep_trying), behind the incarnation asked meanwhile
 * (lockdb_reply_cb), so that the places keep their order.
 */
static void
lockhand_not_taken(struct lock_req *req, bool learned)
{
	lockreq_retake(req);
	if (learned)
		lockhand_take(req);
	else
		req->ln->retaking = true;
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
lockhand_early(const struct lock_req *req, uint64_t ttl_ms)
{
	uint64_t end;

	if (ttl_ms == 0 || req->ticket_ms == 0 || req->owner == NULL ||
	    hand.cf->redis.wait_replicas > 0)
		return 0;
	end = util_validity_end(
	    req->ticket_ms, ttl_ms, hand.cf->locks.clock_drift);
	return end > mono_ms() + ttl_ms / 2 ? end : 0;
}

/*
 * A release handed name to our ticket n (fence, under token): by this
 * broker (sent_ms: when that release was sent, which its lease counts
 * from) or by another (0: confirmed first, or meanwhile when its lease
 * allows). A waiter that left has the grant released, which hands it on.
 */
void
lockhand_handed(const char *name, uint64_t ticket, uint64_t fence,
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
	if (sent_ms == 0 && (until = lockhand_early(req, ttl_ms)) == 0) {
		lockreq_handed(req, fence);
		lockhand_confirm(req);
		return;
	}
	lockname_pin(ln);
	lockreq_send_at(
	    req, sent_ms != 0 ? sent_ms : req->ticket_ms, req->sub_epoch);
	o = req->owner;
	lockhand_answer_cb(
	    &(struct lockdb_reply){ .status = LDB_OK, .fence = fence }, req);
	if (until != 0 && (h = lockhold_find(o, name)) != NULL &&
	    h->fence == fence)
		lockhold_handed(h, until);
	lockname_unref(ln);
}

/*
 * Each waiter of ln takes its place in the queue again (it may be gone, or
 * a hand-over's message missed: a try finds the grant). The trier first,
 * so the places taken again keep their order: with a try of its own in
 * Redis (it may have run before the loss), the trier asks again once that
 * is answered, and the rest after it; one of them with a try in Redis
 * takes its place again once that try is answered.
 */
void
lockhand_retake(struct lock_name *ln, void *arg)
{
	struct lock_req *r, *trier = lockq_trier(ln);

	if (trier == NULL)
		return;
	TAILQ_FOREACH (r, &ln->waiters, queue_entry)
		if (r != trier && r->ticket != 0)
			lockreq_retake(r);
	ln->retaking = true;
	/* Its try's answer tries again at once if it is in Redis. */
	if (!ln->attempting && lockreq_in_flight(trier))
		lockreq_retake(trier); /* a take of its own is in Redis */
	else
		lockq_try(ln);
	if (trier->ticket == 0)
		lockhand_retake_rest(ln); /* no place to keep before theirs */
}

/* ln's waiters take their places again if ln is in the scope asked. */
static void
lockhand_retake_in(struct lock_name *ln, void *arg)
{
	const int *scope = arg;

	if (lockscope_of(ln) == *scope)
		lockhand_retake(ln, NULL);
}

/* Redis forgot the lock data of a scope (a new incarnation: FLUSHALL, a
 * restart without it, a failover to a replica that missed it, a slot
 * moved): the queues went with it, so every waiter here on a name in it
 * takes its place again. */
void
lockhand_forgot(int scope)
{
	lockname_foreach(lockhand_retake_in, &scope);
}

void
lockhand_init(const struct config *cf)
{
	hand.cf = cf;
}

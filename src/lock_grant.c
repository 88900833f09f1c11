/*
 * lock_grant: what a try's grant comes to: the owner's hold and answer
 * (or, if it left, the grant given back), a grant that came too late, a
 * conflict of modes, and the wait for redis.wait_replicas before a
 * grant counts. Built on lock_name, lock_req, lock_hold, lock_release and
 * lock_queue; the answer once replicated goes back to the trier's or a
 * side answer's handler (lock_try, lock_handover) given to lockgrant_init.
 */
#include <sys/queue.h>

#include <inttypes.h>
#include <stdio.h>

#include "chaos.h"
#include "config.h"
#include "lockdb.h"
#include "lock_grant.h"
#include "lock_check.h"
#include "lock_hold.h"
#include "lock_queue.h"
#include "lock_release.h"
#include "lock_req.h"
#include "log.h"
#include "stats.h"
#include "util.h"

static struct {
	const struct config *cf;
	lockdb_cb *trier_cb; /* the trier's answer (lock_try) */
	lockdb_cb *side_cb;  /* any other try's answer (lock_handover) */
} g;

/* Whether another broker released or shortened the grant with fence. */
static bool
lockgrant_heard(const struct lock_name *ln, uint64_t fence)
{
	for (unsigned i = 0; i < ln->nheard && i < 4; i++)
		if (ln->heard[i] == fence)
			return true;
	return false;
}

void
lockgrant_granted(struct lock_req *req, uint64_t fence)
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
				g.cf->locks.clock_drift));
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
	else if (lockgrant_heard(req->ln, fence))
		lockhold_released(req->ln, fence);
	/* The subscription was made again while it was in Redis: news of
	 * it may have been missed, so Redis is asked. */
	else if (req->sub_epoch != lockq_sub_epoch())
		lockcheck_recheck(req->ln);
}

/*
 * A grant whose answer came after its validity (docs/protocol.md §3,
 * counted from before the try was sent) had ended is worth nothing: an OK now
 * would hand the client a lock anyone may take at any moment. So is one
 * answered redis.trust_ms after it was asked: what vouched for its
 * incarnation is that old (a master frozen with the request in its
 * socket may have been replaced meanwhile). It goes back to Redis and the
 * try counts as refused.
 */
bool
lockgrant_late(struct lock_req *req, uint64_t fence)
{
	uint64_t end = util_validity_end(
	    req->start_ms, req->ttl_ms, g.cf->locks.clock_drift);
	uint64_t now = mono_ms(), trust = (uint64_t)g.cf->redis.trust_ms;

	if ((end > now && req->start_ms + trust > now) ||
	    chaos_fault == CHAOS_NO_VALIDITY)
		return false;
	STAT_INC(late_grants_total);
	log_warnx("lock %s: granted %" PRIu64
		  " ms after asking, past its %" PRIu64
		  " ms lease or redis.trust_ms; given back",
	    req->ln->name, now - req->start_ms, req->ttl_ms);
	if (!lockq_token_used(req->ln, req->token, req))
		lockrel_release(req->ln->name, req->token, fence, false, end);
	return true;
}

/* A try-once's grant came back after its lease ended: given back. */
void
lockgrant_answer_late(struct lock_req *req)
{
	lockreq_answer_err(req, PERR_UNAVAILABLE,
	    "the grant came after its lease ended; Redis is slow");
}

/* Held in another mode than req asks for: by others in another shared
 * mode, or by req's own token in the other family. */
void
lockgrant_conflict(struct lock_req *req, const struct lockdb_reply *r)
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

/*
 * redis.wait_replicas: a grant counts only once that many replicas have
 * it, so a failover cannot hand out its fence again. Otherwise it is
 * released and the client told ERR UNAVAILABLE.
 */
static void
lockgrant_replicas_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_name *ln = req->ln;
	struct lockdb_reply granted = { LDB_OK, req->fence, 0 };
	int want = g.cf->redis.wait_replicas;

	if (r->status == LDB_OK && r->fence >= (uint64_t)want) {
		(lockreq_trying(req) ? g.trier_cb : g.side_cb)(&granted, req);
		return;
	}
	log_warnx("lock %s: granted, but %" PRIu64
		  " of %d replicas have it; released",
	    ln->name, r->status == LDB_OK ? r->fence : 0, want);
	lockname_pin(ln);
	if (lockreq_trying(req))
		lockq_try_ends(ln);
	lockreq_landed(req);
	/* Not if a hold or request here has the same grant (a same-token
	 * re-grant gets its fence back). */
	if (!lockq_token_used(ln, req->token, req))
		lockrel_release(ln->name, req->token, req->fence, false,
		    util_validity_end(
			req->start_ms, req->ttl_ms, g.cf->locks.clock_drift));
	lockq_dequeue(req);
	lockreq_answer_err(req, PERR_UNAVAILABLE,
	    "the grant did not reach redis.wait_replicas replicas in time");
	lockreq_free_undo(req);
	lockq_schedule(ln, 0);
	lockname_unref(ln);
}

void
lockgrant_replicate(struct lock_req *req, uint64_t fence)
{
	lockreq_replicate(req, fence);
	lockdb_wait(req->ln->name, g.cf->redis.wait_replicas,
	    (uint64_t)g.cf->redis.command_timeout_ms / 2, lockgrant_replicas_cb,
	    req);
}

void
lockgrant_init(const struct config *cf, lockdb_cb *trier_cb, lockdb_cb *side_cb)
{
	g.cf = cf;
	g.trier_cb = trier_cb;
	g.side_cb = side_cb;
}

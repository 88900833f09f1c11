/*
 * lock_hold: what this broker's clients hold: a hold per granted lock, its
 * validity on the monotonic clock (docs/protocol.md §3), session leases
 * renewed every lease/3, max_hold_ms, and EVENT LOST the moment a hold can
 * no longer be trusted. A lost hold lets the name's queue try, through the
 * callback given to lockhold_init.
 *
 * Trust in Redis itself (docs/protocol.md §8, When Redis forgets): every
 * redis.trust_ms / 4 the broker asks which incarnation of the lock data
 * Redis serves. An answer naming the one known vouches for every hold
 * until trust_ms after it was asked; with none for trust_ms every hold is
 * lost (a failover or a FLUSHALL may have come meanwhile, and the grace
 * period after it ends trust_ms after it is noticed). An answer naming a
 * new incarnation makes every hold stale: each is asked for again and put
 * back if Redis forgot it (check.lua, in the grace period); those not
 * back when the old incarnation's last answer stops vouching are lost.
 *
 * The incarnation vouches for what Redis still has, not that it has each
 * hold: a key deleted or evicted is gone in the same incarnation. So each
 * hold is also confirmed in Redis at least once every trust_ms (a
 * renewal counts; the others are checked with the beat, a loop turn's
 * checks in one batch), lost if Redis no longer has it, and trusted no
 * longer than what Redis says is left of its lease. That also catches
 * Redis's wall clock stepped forward, which ends keys early: each beat's
 * answer carries Redis's time, and when it ran ahead of ours by more than
 * the drift allows and half of redis.clock_step_ms (the margin every
 * lease has in Redis), every hold is confirmed again at once.
 */
#include <sys/queue.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "chaos.h"
#include "config.h"
#include "lockdb.h"
#include "lock_hold.h"
#include "lock_release.h"
#include "lock_req.h"
#include "log.h"
#include "stats.h"
#include "util.h"
#include "xmalloc.h"

static struct {
	struct event_base *base;
	const struct config *cf;
	lockhold_kick_fn *kick;
	lockhold_forgot_fn *forgot;
	uint64_t lease_seq;	/* requests that may set a lease, numbered */
	struct event *beat_ev;	/* every trust_ms / 4: ask the incarnation */
	struct event *trust_ev; /* trust_ms after the last vouching answer */
	struct event *stale_ev; /* stale holds not back by then are lost */
	uint64_t vouched_ms;	/* when the last vouching answer was asked */
	uint64_t changed_ms;	/* when a new incarnation was last learned */
	/* Redis's clock against ours: the most its offset (Redis's time less
	 * our monotonic time) was at the last beat's answer, when that beat
	 * was sent, and how far it ran ahead since the last re-check. */
	bool clock_known;
	int64_t clock_hi;
	uint64_t clock_sent_ms;
	uint64_t clock_ahead_ms;
} hold;

static const char *const lockhold_lost_reasons[] = { "expired", "stolen",
	"unavailable", "maxhold", "revoked" };

/* EVENT LOST counters are indexed by reason: keep both lists in step. */
_Static_assert(
    STAT_lost_revoked_total - STAT_lost_expired_total == LOST_REVOKED,
    "lost_*_total in stats.h must follow enum lock_lost");

void
lockhold_owner_init(struct lock_owner *o)
{
	TAILQ_INIT(&o->holds);
}

/* Its RELEASE is in Redis: no new FILL waiter waits on it. */
void
lockhold_releasing(struct lock_hold *h)
{
	h->releasing = true;
}

/* Re-arm the expiry timer for the hold's trusted end. */
void
lockhold_arm(struct lock_hold *h)
{
	uint64_t now = mono_ms();

	lockreq_timer(h->expire_ev,
	    h->valid_until_ms > now ? h->valid_until_ms - now : 0);
}

void
lockhold_free(struct lock_hold *h)
{
	stats_observe(HIST_hold_seconds, mono_us() - h->granted_us);
	TAILQ_REMOVE(&h->owner->holds, h, owner_entry);
	h->owner->nholds--;
	LIST_REMOVE(h, name_entry);
	if (h->renewing != NULL)
		lockreq_hold_gone(h->renewing);
	if (h->checking != NULL && lockreq_in_flight(h->checking))
		lockreq_hold_gone(h->checking);
	else if (h->checking != NULL)
		lockreq_free(h->checking); /* waiting to ask again */
	event_free(h->expire_ev);
	if (h->renew_ev != NULL)
		event_free(h->renew_ev);
	if (h->maxhold_ev != NULL)
		event_free(h->maxhold_ev);
	lockname_unref(h->ln);
	STAT_DEC(locks_held);
	free(h);
}

/* Through the name table: a name has few holds here, a connection may
 * have many. */
struct lock_hold *
lockhold_find(struct lock_owner *o, const char *name)
{
	struct lock_name *ln = lockname_find(name);
	struct lock_hold *h;

	if (ln == NULL)
		return NULL;
	LIST_FOREACH (h, &ln->holds, name_entry)
		if (h->owner == o)
			return h;
	return NULL;
}

/* Whether req could set h's lease: an ACQUIRE in the other family (or
 * another shared mode) is refused by Redis and changes nothing. */
static bool
lockhold_same_family(const struct lock_hold *h, const struct lock_req *req)
{
	bool excl = h->mode == LOCK_EXCLUSIVE || h->mode == LOCK_FILL;

	if (req->op != OP_ACQUIRE)
		return true; /* EXTEND and renewals act in either place */
	if (req->mode == LOCK_EXCLUSIVE || req->mode == LOCK_FILL)
		return excl;
	return h->mode == req->mode && h->limit == req->limit;
}

/*
 * req, which may set its token's lease on its name to req->ttl_ms, is
 * being sent: it may be in force from that moment, and if no answer comes
 * it may be in force anyway, so the token's holds here trust the shorter
 * of their own end and that lease's until Redis says. Requests are
 * numbered: Redis runs them in that order, so only the answer to the last
 * one sent says what the lease is (see lockhold_lease).
 */
void
lockhold_assume(struct lock_req *req)
{
	uint64_t end = util_validity_end(
	    req->start_ms, req->ttl_ms, hold.cf->locks.clock_drift);
	struct lock_hold *h;

	lockreq_lease_seq(req, ++hold.lease_seq);
	LIST_FOREACH (h, &req->ln->holds, name_entry) {
		if (strcmp(h->token, req->token) != 0 ||
		    !lockhold_same_family(h, req))
			continue;
		h->lease_seq = req->lease_seq;
		if (end < h->valid_until_ms) {
			h->valid_until_ms = end;
			lockhold_arm(h);
		}
	}
}

/*
 * Redis set the lease as req asked, for the grant with fence (0: whichever
 * its token has): its holds here trust the new end, longer or shorter,
 * when req is the last request sent that could set their lease; when a
 * later one is still out (or got no answer), only a shorter end.
 */
void
lockhold_lease(const struct lock_req *req, uint64_t fence)
{
	uint64_t end = util_validity_end(
	    req->start_ms, req->ttl_ms, hold.cf->locks.clock_drift);
	struct lock_hold *h;

	LIST_FOREACH (h, &req->ln->holds, name_entry) {
		if ((fence != 0 && h->fence != fence) ||
		    strcmp(h->token, req->token) != 0)
			continue;
		if (req->lease_seq < h->lease_seq && end >= h->valid_until_ms)
			continue;
		h->valid_until_ms = end;
		h->ttl_ms = req->ttl_ms;
		lockhold_arm(h);
	}
}

/*
 * Whether a release on behalf of `except`'s owner would also take the lock
 * from someone else here: another hold under the same token (a retried
 * ACQUIRE on a new connection), or a same-token request still in flight.
 */
bool
lockhold_token_busy(struct lock_name *ln, const char *token,
    const struct lock_hold *except, const struct lock_owner *o)
{
	struct lock_hold *h;
	struct lock_req *req;

	LIST_FOREACH (h, &ln->holds, name_entry)
		if (h != except && strcmp(h->token, token) == 0)
			return true;
	TAILQ_FOREACH (req, &ln->waiters, queue_entry)
		if (req->owner != o && strcmp(req->token, token) == 0)
			return true;
	if (lockreq_token_acquiring(ln, token, NULL))
		return true; /* a same-token re-grant in Redis */
	if (o != NULL && o->pending != NULL && o->pending->ln == ln &&
	    strcmp(o->pending->token, token) == 0)
		return true; /* its own ACQUIRE/EXTEND decides */
	return false;
}

/*
 * The hold is no longer ours to trust: tell its owner, forget it, and let
 * the local queue try. A lease we gave up on is released in Redis too (it is
 * still ours there until it runs out); a stolen one is not ours to touch.
 */
static void
lockhold_lost(struct lock_hold *h, enum lock_lost why)
{
	struct lock_owner *o = h->owner;
	struct lock_name *ln = h->ln;
	uint64_t fence = h->fence;

	stats[STAT_lost_expired_total + why]++;
	/* A lease running out, or every hold at once in an outage (logged as
	 * such), is routine; the others name the holder for the operator. */
	if (why == LOST_EXPIRED || why == LOST_UNAVAILABLE)
		log_debug("client %" PRIu64 ": lost %s (fence %" PRIu64 "): %s",
		    o->id, ln->name, fence, lockhold_lost_reasons[why]);
	else
		log_info("client %" PRIu64 " [%s]: lost %s (fence %" PRIu64
			 "): %s",
		    o->id, o->peer != NULL ? o->peer : "-", ln->name, fence,
		    lockhold_lost_reasons[why]);
	lockname_pin(ln);
	if (why != LOST_STOLEN && why != LOST_REVOKED &&
	    !lockhold_token_busy(ln, h->token, h, o))
		lockrel_release(ln->name, h->token, h->fence,
		    why == LOST_MAXHOLD, h->valid_until_ms);
	lockhold_free(h);
	o->ops->lost(o, ln->name, fence, lockhold_lost_reasons[why]);
	hold.kick(ln);
	lockname_unref(ln);
}

static void
lockhold_expire_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lock_hold *h = arg;

	/* A session lease ends only when renewals stopped getting through. */
	lockhold_lost(
	    h, h->kind == LOCK_SESSION ? LOST_UNAVAILABLE : LOST_EXPIRED);
}

/*
 * o's holds whose validity has passed are lost now, as their expiry timers
 * would have: after a pause of the broker those run a loop turn late, and
 * a command read meanwhile must not count such a hold. A loss may change
 * the list (it lets the queue try), so each one starts the walk again.
 */
void
lockhold_settle(struct lock_owner *o)
{
	uint64_t now = mono_ms();
	struct lock_hold *h;

again:
	TAILQ_FOREACH (h, &o->holds, owner_entry)
		if (h->valid_until_ms <= now) {
			lockhold_expire_cb(-1, 0, h);
			goto again;
		}
}

static void
lockhold_maxhold_cb(evutil_socket_t fd, short what, void *arg)
{
	lockhold_lost(arg, LOST_MAXHOLD);
}

static void lockhold_check_hold(struct lock_hold *h);
static void lockhold_renew_cb(const struct lockdb_reply *r, void *arg);

/* A request sent at sent_ms found h held in Redis. */
static void
lockhold_confirmed(struct lock_hold *h, uint64_t sent_ms)
{
	if (sent_ms > h->confirmed_ms)
		h->confirmed_ms = sent_ms;
}

/*
 * A check sent at sent_ms found h held with left_ms of its lease to trust
 * (UINT64_MAX: no end): h trusts no more than that. Redis's clock may have
 * been stepped forward since the lease was set, ending it earlier than
 * the broker counted.
 */
static void
lockhold_left(struct lock_hold *h, uint64_t sent_ms, uint64_t left_ms)
{
	uint64_t end;

	lockhold_confirmed(h, sent_ms);
	if (left_ms == UINT64_MAX)
		return;
	end = util_validity_end(sent_ms, left_ms, hold.cf->locks.clock_drift);
	if (end < h->valid_until_ms) {
		h->valid_until_ms = end;
		lockhold_arm(h);
	}
}
static void lockhold_renewed(
    struct lock_req *req, const struct lockdb_reply *r);

/* An EXTEND of h's grant (its token and fence) to ttl_ms, as a renewal. */
static void
lockhold_extend(struct lock_hold *h, uint64_t ttl_ms, bool confirming)
{
	struct lock_req *req;

	req = lockreq_new(OP_RENEW, NULL, h->ln->name, h->token);
	lockreq_for_hold(req, h, confirming);
	lockreq_send(req);
	lockreq_set_ttl(req, ttl_ms);
	h->renewing = req;
	/* A reload may have shortened lease_ms. */
	lockhold_assume(req);
	lockdb_extend(h->ln->name, h->token, h->fence, req->ttl_ms,
	    lockhold_renew_cb, req);
}

/* Every lease/3: push the session lease out again, compare-and-PEXPIRE. */
static void
lockhold_renew_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lock_hold *h = arg;
	struct lock_owner *o = h->owner;

	/* Every third of the lease in force now (a reload may change it). */
	lockreq_timer(h->renew_ev, (uint64_t)hold.cf->locks.lease_ms / 3);
	if (h->renewing != NULL)
		return; /* the last one is still out; its answer decides */
	if (o->pending != NULL && o->pending->ln == h->ln &&
	    (o->pending->op == OP_ACQUIRE || o->pending->op == OP_EXTEND))
		return; /* its own ACQUIRE or EXTEND sets the lease now */
	lockhold_extend(h, (uint64_t)hold.cf->locks.lease_ms, false);
}

/*
 * h was granted on another broker's hand-over and answered before it was
 * confirmed (docs/protocol.md §4, Waiting): it trusts no further than
 * that hand-over's lease (until_ms) and confirms it now, an EXTEND to its
 * own ttl; the answer lengthens it, a refusal loses it (stolen).
 */
void
lockhold_handed(struct lock_hold *h, uint64_t until_ms)
{
	if (until_ms < h->valid_until_ms) {
		h->valid_until_ms = until_ms;
		lockhold_arm(h);
	}
	if (h->renewing != NULL) /* of an earlier grant: not ours */
		lockreq_hold_gone(h->renewing);
	lockhold_extend(h, h->ttl_ms, true);
}

static void
lockhold_renew_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_hold *h = req->hold;

	/* redis.wait_replicas: a renewal counts only once that many replicas
	 * have it, as a grant does; a replica promoted meanwhile would
	 * otherwise let the lease end early while the holder trusts it. */
	if (h != NULL && r->status == LDB_OK && !lockreq_replicating(req) &&
	    hold.cf->redis.wait_replicas > 0 && h->kind == LOCK_SESSION) {
		lockreq_replicate(req, req->fence);
		lockdb_wait(h->ln->name, hold.cf->redis.wait_replicas,
		    (uint64_t)hold.cf->redis.command_timeout_ms / 2,
		    lockhold_renew_cb, req);
		return;
	}
	if (lockreq_replicating(req) && r->status == LDB_OK &&
	    r->fence < (uint64_t)hold.cf->redis.wait_replicas) {
		/* Not replicated: as if not answered. */
		struct lockdb_reply short_of = { .status = LDB_UNAVAILABLE };

		lockhold_renewed(req, &short_of);
	} else
		lockhold_renewed(req, r);
}

/* A renewal's outcome, for its hold if that is still here. */
static void
lockhold_renewed(struct lock_req *req, const struct lockdb_reply *r)
{
	struct lock_hold *h = req->hold;

	if (h != NULL) {
		h->renewing = NULL;
		if (h->kind != LOCK_SESSION && !req->confirming) {
			/* Re-granted as a fixed lease meanwhile: not ours. */
		} else if (r->status == LDB_OK) {
			if (!req->confirming)
				STAT_INC(renewals_total);
			lockhold_confirmed(h, req->start_ms);
			lockhold_lease(req, h->fence);
		} else if (r->status == LDB_NO && !h->stale) {
			/* Not held as it was: check says whether its key
			 * was only deleted by hand (and puts it back) or
			 * the grant is gone (stolen, revoked). */
			lockhold_check_hold(h);
		} else {
			/* Try again at the next tick; expiry decides (a stale
			 * hold's check decides whether it is put back). */
			STAT_INC(renewal_failures_total);
		}
	}
	lockreq_free(req);
}

static struct event *
lockhold_event(struct lock_hold *h, event_callback_fn fn, bool persist)
{
	struct event *ev =
	    event_new(hold.base, -1, persist ? EV_PERSIST : 0, fn, h);

	if (ev == NULL)
		fatalx("lock: event_new failed");
	return ev;
}

/* h was granted (or granted again): other holds here under its token
 * with an older fence are of a grant Redis no longer has. */
static void
lockhold_same_grant(struct lock_hold *h)
{
	struct lock_hold *o, *next;

	for (o = LIST_FIRST(&h->ln->holds); o != NULL; o = next) {
		next = LIST_NEXT(o, name_entry);
		if (o != h && strcmp(o->token, h->token) == 0 &&
		    o->fence < h->fence)
			lockhold_lost(o, LOST_STOLEN);
	}
}

/* A grant (or a same-token re-grant) becomes the owner's hold. */
struct lock_hold *
lockhold_set(struct lock_owner *o, struct lock_req *req, uint64_t fence)
{
	struct lock_hold *h = lockhold_find(o, req->ln->name);
	uint64_t max_hold = (uint64_t)hold.cf->locks.max_hold_ms;

	if (h == NULL) {
		h = xcalloc(1, sizeof *h);
		h->owner = o;
		h->ln = req->ln;
		lockname_pin(h->ln);
		h->granted_ms = req->start_ms;
		h->confirmed_ms = req->start_ms;
		h->granted_us = mono_us();
		h->since_ms = wall_ms();
		h->expire_ev = lockhold_event(h, lockhold_expire_cb, false);
		TAILQ_INSERT_TAIL(&o->holds, h, owner_entry);
		LIST_INSERT_HEAD(&h->ln->holds, h, name_entry);
		o->nholds++;
		STAT_INC(locks_held);
		if (max_hold > 0) {
			h->maxhold_ev =
			    lockhold_event(h, lockhold_maxhold_cb, false);
			lockreq_timer(h->maxhold_ev, max_hold);
		}
	}
	h->kind = req->kind;
	h->mode = req->mode;
	h->limit = req->limit;
	if (h->fence != fence)
		h->lease_seq = req->lease_seq; /* a new grant: req's lease */
	h->fence = fence;
	_Static_assert(sizeof h->token == sizeof req->token, "token sizes");
	memcpy(h->token, req->token, sizeof h->token);
	lockhold_lease(req, fence);
	lockhold_same_grant(h);
	if (h->kind == LOCK_SESSION && h->renew_ev == NULL) {
		h->renew_ev = lockhold_event(h, lockhold_renew_timer_cb, false);
		lockreq_timer(
		    h->renew_ev, (uint64_t)hold.cf->locks.lease_ms / 3);
	} else if (h->kind != LOCK_SESSION && h->renew_ev != NULL) {
		event_free(h->renew_ev);
		h->renew_ev = NULL;
	}
	/* Granted by the incarnation before the one learned since. */
	if (req->start_ms < hold.changed_ms && !h->stale) {
		h->stale = true;
		lockhold_check_hold(h);
		if (!evtimer_pending(hold.stale_ev, NULL))
			lockreq_timer(hold.stale_ev, 0);
	}
	return h;
}

/* Forget every local hold of name under token, whichever owner has it. */
void
lockhold_drop_token(struct lock_name *ln, const char *token,
    const struct lock_owner *o, enum lock_lost why)
{
	struct lock_hold *h, *next;

	/* ln stays: the request that calls this holds a reference. */
	for (h = LIST_FIRST(&ln->holds); h != NULL; h = next) {
		next = LIST_NEXT(h, name_entry);
		if (strcmp(h->token, token) != 0)
			continue;
		if (h->owner == o)
			lockhold_free(h); /* it hears it in its own answer */
		else
			lockhold_lost(h, why);
	}
}

static void lockhold_check_send(struct lock_req *req);

static void
lockhold_check_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	lockhold_check_send(arg);
}

/*
 * A check not answered is asked again until Redis says: a REVOKE missed
 * while the subscriber was away (or a Redis that lost the lock) must not
 * go untold because Redis was away too when the broker first asked. The
 * command connection usually comes back with the subscriber, within
 * milliseconds: ask again after retry_min_ms, doubling up to
 * command_timeout_ms.
 */
static void
lockhold_check_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_hold *h = req->hold;

	lockreq_landed(req);
	if (h != NULL &&
	    (r->status == LDB_UNAVAILABLE || r->status == LDB_INTERNAL)) {
		lockreq_deadline(req, lockhold_check_retry_cb,
		    lockreq_backoff(req, (uint64_t)hold.cf->locks.retry_min_ms,
			(uint64_t)hold.cf->redis.command_timeout_ms));
		return;
	}
	if (h != NULL && r->status == LDB_OK && req->again) {
		lockhold_check_send(req); /* missed more since it asked */
		return;
	}
	if (h != NULL) {
		h->checking = NULL;
		if (r->status == LDB_OK)
			lockhold_left(h, req->start_ms, r->pttl);
		if (r->status == LDB_OK && req->start_ms >= hold.changed_ms)
			h->stale = false; /* held (or put back) in this one */
		else if (r->status == LDB_OK && h->stale)
			lockhold_check_hold(h); /* asked of the one before */
		else if (r->status == LDB_NO)
			lockhold_lost(h,
			    h->fence <= r->fence ? LOST_REVOKED
				: h->stale	 ? LOST_UNAVAILABLE
						 : LOST_STOLEN);
	}
	lockreq_free(req);
}

/* An exclusive hold says how it was granted, so that Redis can put it
 * back: a stale one for what is left of its validity, any one whose lock
 * key alone went for the lease its fence counter remembers. */
static void
lockhold_check_send(struct lock_req *req)
{
	struct lock_hold *h = req->hold;
	uint64_t now = mono_ms();
	char info[LOCKREQ_INFO];
	bool excl = h->mode == LOCK_EXCLUSIVE || h->mode == LOCK_FILL;
	bool restore = excl && h->stale && h->valid_until_ms > now;

	lockreq_send_at(req, now, req->sub_epoch);
	STAT_INC(confirms_total);
	if (excl)
		lockreq_hold_info(h, info, sizeof info);
	lockdb_check(h->ln->name, h->token, h->fence,
	    restore ? h->valid_until_ms - now : 0, excl ? info : NULL,
	    lockhold_check_cb, req);
}

/*
 * Messages on the release channel were missed (the subscriber was away),
 * among them perhaps a REVOKE of a hold here, or a release of it through
 * another broker, that nothing else would tell of before its lease ends
 * (a fixed or kept lock is never renewed).
 */
static void
lockhold_check_hold(struct lock_hold *h)
{
	struct lock_req *req;

	if ((req = h->checking) != NULL) {
		lockreq_ask_again(req); /* if in Redis; else it asks anew */
		return;
	}
	req = lockreq_new(OP_CHECK, NULL, h->ln->name, h->token);
	lockreq_for_hold(req, h, false);
	h->checking = req;
	lockhold_check_send(req);
}

void
lockhold_recheck(struct lock_name *ln)
{
	struct lock_hold *h;

	LIST_FOREACH (h, &ln->holds, name_entry)
		lockhold_check_hold(h);
}

/* Another broker released the grant with this fence, or shortened its
 * lease: holds of it here are lost. */
void
lockhold_released(struct lock_name *ln, uint64_t fence)
{
	struct lock_hold *h, *next;

	for (h = LIST_FIRST(&ln->holds); h != NULL; h = next) {
		next = LIST_NEXT(h, name_entry);
		if (h->fence == fence)
			lockhold_lost(h, LOST_REVOKED);
	}
}

/* A RELEASE of token's grant is being sent by o: from that moment the
 * grant may be gone, so the token's holds of other connections here are
 * lost now (o's own goes with the answer). */
void
lockhold_release_sent(
    struct lock_name *ln, const char *token, const struct lock_owner *o)
{
	struct lock_hold *h, *next;

	for (h = LIST_FIRST(&ln->holds); h != NULL; h = next) {
		next = LIST_NEXT(h, name_entry);
		if (h->owner != o && strcmp(h->token, token) == 0)
			lockhold_lost(h, LOST_REVOKED);
	}
}

/* An admin revoked ln: every hold here with fence or an older one is
 * lost (a newer one was granted after). */
void
lockhold_revoked(struct lock_name *ln, uint64_t fence)
{
	struct lock_hold *h, *next;

	for (h = LIST_FIRST(&ln->holds); h != NULL; h = next) {
		next = LIST_NEXT(h, name_entry);
		if (h->fence <= fence)
			lockhold_lost(h, LOST_REVOKED);
	}
}

/* Lose ln's holds (all, or the stale ones): nothing vouches for them. */
static void
lockhold_lose_name(struct lock_name *ln, void *arg)
{
	const bool *only_stale = arg;
	struct lock_hold *h, *next;

	for (h = LIST_FIRST(&ln->holds); h != NULL; h = next) {
		next = LIST_NEXT(h, name_entry);
		if (!*only_stale || h->stale)
			lockhold_lost(h, LOST_UNAVAILABLE);
	}
}

static void
lockhold_trust_cb(evutil_socket_t fd, short what, void *arg)
{
	bool only_stale = false;

	if (stats[STAT_locks_held] > 0)
		log_warnx(
		    "redis: no word of its incarnation for %d ms: every hold here is lost (redis.trust_ms)",
		    hold.cf->redis.trust_ms);
	lockname_foreach(lockhold_lose_name, &only_stale);
}

static void
lockhold_stale_cb(evutil_socket_t fd, short what, void *arg)
{
	bool only_stale = true;

	lockname_foreach(lockhold_lose_name, &only_stale);
}

/* ln's holds not confirmed for half of trust_ms and not being checked
 * are checked now: with a beat every quarter of it, each is then
 * confirmed within trust_ms. A session hold is given three quarters: its
 * renewal, every lease/3 (3.3 s by default, trust_ms 5 s), confirms it
 * first. With arg, every hold, one being checked asked again once
 * answered (an answer from before now says too little). */
static void
lockhold_confirm_name(struct lock_name *ln, void *arg)
{
	uint64_t now = mono_ms(), trust = (uint64_t)hold.cf->redis.trust_ms;
	const bool *all = arg;
	struct lock_hold *h;

	LIST_FOREACH (h, &ln->holds, name_entry) {
		uint64_t due =
		    h->kind == LOCK_SESSION ? trust * 3 / 4 : trust / 2;

		if (*all ||
		    (h->checking == NULL && h->confirmed_ms + due <= now))
			lockhold_check_hold(h);
	}
}

/*
 * The beat. A broker that holds nothing and has nobody waiting has nothing
 * to vouch for, and asks nothing: a fleet of idle sidecars costs Redis
 * only their connections (TCP keepalive finds a dead one), and its next
 * request is sent after a beat (lockdb_quiet). Not while it refuses grants
 * for Redis's maxmemory-policy, nor before Redis first answered which
 * incarnation it serves: it must see either change, and no request of its
 * own will show it.
 */
static void
lockhold_beat_cb(evutil_socket_t fd, short what, void *arg)
{
	bool all = false;
	/* One that refuses grants for Redis's policy keeps reading it; one
	 * that has not heard the incarnation since it connected (its first
	 * ask refused, say NOREPLICAS) keeps asking. */
	bool quiet = stats[STAT_locks_held] == 0 && stats[STAT_waiters] == 0 &&
	    lockdb_refusal() == NULL && lockdb_up();

	lockdb_quiet(quiet);
	if (quiet)
		return;
	lockdb_incarnation();
	if (stats[STAT_locks_held] > 0 && lockdb_up() &&
	    chaos_fault != CHAOS_NO_CONFIRM)
		lockname_foreach(lockhold_confirm_name, &all);
}

/*
 * Redis's time, read at a beat sent at inc->sent_ms and answered now,
 * against our monotonic clock: Redis's offset from ours was between lo
 * and hi then. From the last answer's most to this one's least it may
 * grow by the drift alone; what it grew beyond is a forward step of
 * Redis's wall clock (never less than the step was). Steps add up: past
 * half of redis.clock_step_ms, the margin each lease has in Redis, every
 * hold is confirmed again, and trusts no more than Redis says is left.
 */
static void
lockhold_clock(const struct lockdb_inc *inc, uint64_t now)
{
	int64_t lo = (int64_t)inc->redis_ms - (int64_t)now;
	int64_t hi = (int64_t)inc->redis_ms - (int64_t)inc->sent_ms;
	bool all = true;

	if (inc->redis_ms == 0)
		return; /* not said */
	if (hold.clock_known) {
		double allow = hold.cf->locks.clock_drift *
		    (double)(now - hold.clock_sent_ms);
		int64_t ahead = lo - hold.clock_hi - (int64_t)allow - 1;

		if (ahead > 0)
			hold.clock_ahead_ms += (uint64_t)ahead;
	}
	hold.clock_known = true;
	hold.clock_hi = hi;
	hold.clock_sent_ms = inc->sent_ms;
	if (hold.clock_ahead_ms * 2 <= (uint64_t)hold.cf->redis.clock_step_ms)
		return;
	if (stats[STAT_locks_held] > 0)
		log_warnx(
		    "redis: its clock ran %" PRIu64
		    " ms ahead of this broker's: every hold here is confirmed again (redis.clock_step_ms)",
		    hold.clock_ahead_ms);
	hold.clock_ahead_ms = 0;
	STAT_INC(redis_clock_steps_total);
	if (chaos_fault != CHAOS_NO_CONFIRM)
		lockname_foreach(lockhold_confirm_name, &all);
}

/* A new incarnation: every hold here asks to be put back. */
static void
lockhold_stale_name(struct lock_name *ln, void *arg)
{
	struct lock_hold *h;

	LIST_FOREACH (h, &ln->holds, name_entry) {
		h->stale = true;
		lockhold_check_hold(h);
	}
}

static void
lockhold_incarnation_cb(const struct lockdb_inc *inc)
{
	uint64_t trust = (uint64_t)hold.cf->redis.trust_ms, now = mono_ms();

	if (inc->changed && !inc->first && chaos_fault != CHAOS_NO_GRACE) {
		hold.changed_ms = now;
		lockreq_timer(hold.stale_ev,
		    hold.vouched_ms + trust > now
			? hold.vouched_ms + trust - now
			: 0);
		lockname_foreach(lockhold_stale_name, NULL);
	}
	if (inc->changed && !inc->first)
		hold.forgot();
	lockhold_clock(inc, now);
	if (inc->sent_ms > hold.vouched_ms)
		hold.vouched_ms = inc->sent_ms;
	lockreq_timer(hold.trust_ev,
	    hold.vouched_ms + trust > now ? hold.vouched_ms + trust - now : 0);
}

void
lockhold_init(struct event_base *base, const struct config *cf,
    lockhold_kick_fn *kick, lockhold_forgot_fn *forgot)
{
	struct timeval beat;

	hold.base = base;
	hold.cf = cf;
	hold.kick = kick;
	hold.forgot = forgot;
	hold.vouched_ms = hold.changed_ms = 0;
	hold.trust_ev = evtimer_new(base, lockhold_trust_cb, NULL);
	hold.stale_ev = evtimer_new(base, lockhold_stale_cb, NULL);
	hold.beat_ev = event_new(base, -1, EV_PERSIST, lockhold_beat_cb, NULL);
	if (hold.trust_ev == NULL || hold.stale_ev == NULL ||
	    hold.beat_ev == NULL)
		fatalx("lock: evtimer_new failed");
	beat = util_timeval((uint64_t)cf->redis.trust_ms / 4);
	evtimer_add(hold.beat_ev, &beat);
	lockdb_on_incarnation(lockhold_incarnation_cb);
}

void
lockhold_shutdown(void)
{
	if (hold.beat_ev == NULL)
		return;
	event_free(hold.beat_ev);
	event_free(hold.trust_ev);
	event_free(hold.stale_ev);
	hold.beat_ev = hold.trust_ev = hold.stale_ev = NULL;
}

static void
lockhold_oldest_of(struct lock_name *ln, void *arg)
{
	uint64_t *oldest = arg;
	struct lock_hold *h;

	LIST_FOREACH (h, &ln->holds, name_entry)
		if (h->granted_ms < *oldest)
			*oldest = h->granted_ms;
}

/* How long the longest-held lock here has been held (ms; 0: none), for
 * an alert on a lock held too long: one walk of the name table. */
uint64_t
lock_oldest_hold_ms(void)
{
	uint64_t oldest = UINT64_MAX, now = mono_ms();

	lockname_foreach(lockhold_oldest_of, &oldest);
	return oldest == UINT64_MAX || oldest > now ? 0 : now - oldest;
}

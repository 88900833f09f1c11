/*
 * lock_hold: what this broker's clients hold: a hold per granted lock, its
 * validity on the monotonic clock (docs/protocol.md §3), session leases
 * renewed every lease/3, max_hold_ms, and EVENT LOST the moment a hold can
 * no longer be trusted. A lost hold lets the name's queue try, and a hold
 * is checked in Redis (lock_check), through the functions given to
 * lockhold_init. It owns every field of struct lock_hold but checking
 * and stale (lock_check's), and struct lock_owner's holds and nholds.
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
#include "lock_timer.h"
#include "log.h"
#include "stats.h"
#include "util.h"
#include "xmalloc.h"

static struct {
	struct event_base *base;
	const struct config *cf;
	lockhold_kick_fn *kick;
	lockhold_check_fn *check;     /* lock_check's check of a hold */
	lockhold_granted_fn *granted; /* lock_check's look at a new grant */
	uint64_t lease_seq; /* requests that may set a lease, numbered */
} hold;

static void lockhold_renew_cb(const struct lockdb_reply *r, void *arg);

static const char *const lockhold_lost_reasons[] = { "expired", "stolen",
	"unavailable", "maxhold", "revoked" };

/* EVENT LOST counters are indexed by reason: keep both lists in step. */
_Static_assert(
    STAT_lost_revoked_total - STAT_lost_expired_total == LOST_REVOKED,
    "lost_*_total in stats.h must follow enum lock_lost");

/* The WHO entry h was granted with. */
void
lockhold_info(const struct lock_hold *h, char *info, size_t len)
{
	lockreq_info(h->owner, h->mode, h->limit, h->since_ms, info, len);
}

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

	locktimer_add(h->expire_ev,
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
void
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
void
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
	locktimer_add(h->renew_ev, (uint64_t)hold.cf->locks.lease_ms / 3);
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
			hold.check(h);
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
			locktimer_add(h->maxhold_ev, max_hold);
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
		locktimer_add(
		    h->renew_ev, (uint64_t)hold.cf->locks.lease_ms / 3);
	} else if (h->kind != LOCK_SESSION && h->renew_ev != NULL) {
		event_free(h->renew_ev);
		h->renew_ev = NULL;
	}
	hold.granted(h, req->start_ms);
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

void
lockhold_init(struct event_base *base, const struct config *cf,
    lockhold_kick_fn *kick, lockhold_check_fn *check,
    lockhold_granted_fn *granted)
{
	hold.base = base;
	hold.cf = cf;
	hold.kick = kick;
	hold.check = check;
	hold.granted = granted;
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
lockhold_oldest_ms(void)
{
	uint64_t oldest = UINT64_MAX, now = mono_ms();

	lockname_foreach(lockhold_oldest_of, &oldest);
	return oldest == UINT64_MAX || oldest > now ? 0 : now - oldest;
}

/*
 * lock: the lock engine. Decisions that must be atomic are lockdb's scripts;
 * this file keeps what this broker's clients hold and wait for: a FIFO of
 * waiters per name whose head alone retries, session leases renewed from
 * our own timers, and EVENT LOST the moment a lease can no longer be trusted.
 */
#include <sys/queue.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "chaos.h"
#include "config.h"
#include "lock.h"
#include "lockdb.h"
#include "log.h"
#include "redisc.h"
#include "stats.h"
#include "xmalloc.h"

enum lock_op {
	OP_ACQUIRE,
	OP_RELEASE,
	OP_EXTEND,
	OP_STATUS,
	OP_VALIDATE,
	OP_RENEW,  /* a session lease, for its hold */
	OP_ORPHAN, /* a release (or lock-delay) nobody waits for */
};

/*
 * One request. An ACQUIRE is also a waiter: it sits in its name's queue
 * until granted, refused (WAIT 0), or its deadline. A request never frees
 * while lockdb holds it (in_flight); its owner may leave meanwhile.
 */
struct lock_req {
	TAILQ_ENTRY(lock_req) queue_entry;
	enum lock_op op;
	struct lock_owner *owner; /* NULL once nobody waits for the answer */
	struct lock_name *ln;	  /* referenced */
	struct lock_hold *hold;	  /* OP_RENEW; NULL once the hold is gone */
	struct lock_req *next;	  /* OP_RELEASE: the waiter handed it */
	char token[PROTO_TOKEN_MAX + 1];
	bool own_token; /* the broker made it: nobody else knows it */
	unsigned tries; /* attempts sent, for an ACQUIRE */
	bool unsure;	/* an attempt got no answer: it may have been granted */
	bool granted;
	bool replicating; /* granted in Redis; WAITing for the replicas */
	bool queued;
	bool in_flight;
	enum lock_kind kind;
	uint64_t ttl_ms;
	uint64_t fence; /* OP_VALIDATE */
	int64_t wait_ms;
	uint64_t start_ms;     /* monotonic, read before sending */
	uint64_t created_us;   /* for the wait-time histogram */
	uint64_t lease_end_ms; /* a release: when the lease runs out, or 0 */
	struct event *deadline_ev;
};

/* A release Redis could not be told about: done when Redis is back. */
struct lock_unreleased {
	TAILQ_ENTRY(lock_unreleased) entry;
	char token[PROTO_TOKEN_MAX + 1];
	uint64_t lease_end_ms; /* 0: unknown, ask Redis */
	char name[];
};

/* Per name: the local holds and the local queue, alive while referenced. */
struct lock_name {
	LIST_ENTRY(lock_name) entry;
	LIST_HEAD(, lock_hold) holds;
	TAILQ_HEAD(, lock_req) waiters;
	unsigned refs;
	struct event *retry_ev; /* the head's next attempt */
	uint64_t backoff_ms;
	bool attempting; /* the head's attempt is in Redis */
	bool kicked;	 /* a release was seen while it was */
	char name[];
};
LIST_HEAD(lock_bucket, lock_name);

static struct {
	struct event_base *base;
	const struct config *cf;
	struct lock_bucket *buckets;
	size_t nbuckets;
	size_t nnames;
	unsigned nwaiters;
	bool stopping; /* SIGTERM: no more waiting */
	TAILQ_HEAD(, lock_unreleased) unreleased;
	unsigned nunreleased;
	struct event *unreleased_ev; /* try them again while any are left */
} lk;

static void lock_attempt(struct lock_name *ln);
static void lock_kick(struct lock_name *ln);

/* --- the name table ---------------------------------------------------- */

/* FNV-1a: names are short and untrusted; this is only a table index. */
static size_t
lock_hash(const char *s)
{
	uint64_t h = 14695981039346656037ULL;

	for (; *s != '\0'; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return (size_t)h;
}

static void
lock_names_grow(void)
{
	size_t n = lk.nbuckets * 2;
	struct lock_bucket *b = xcalloc(n, sizeof *b);
	struct lock_name *ln;

	for (size_t i = 0; i < lk.nbuckets; i++) {
		while ((ln = LIST_FIRST(&lk.buckets[i])) != NULL) {
			LIST_REMOVE(ln, entry);
			LIST_INSERT_HEAD(
			    &b[lock_hash(ln->name) % n], ln, entry);
		}
	}
	free(lk.buckets);
	lk.buckets = b;
	lk.nbuckets = n;
}

static struct lock_name *
lock_name_find(const char *name)
{
	struct lock_name *ln;

	LIST_FOREACH(ln, &lk.buckets[lock_hash(name) % lk.nbuckets], entry)
	if (strcmp(ln->name, name) == 0)
		return ln;
	return NULL;
}

static void lock_retry_cb(evutil_socket_t, short, void *);

/* Find or make the entry for name, and take a reference on it. */
static struct lock_name *
lock_name_ref(const char *name)
{
	struct lock_name *ln = lock_name_find(name);
	size_t len;

	if (ln == NULL) {
		len = strlen(name);
		ln = xcalloc(1, sizeof *ln + len + 1);
		memcpy(ln->name, name, len + 1);
		LIST_INIT(&ln->holds);
		TAILQ_INIT(&ln->waiters);
		ln->retry_ev = evtimer_new(lk.base, lock_retry_cb, ln);
		if (ln->retry_ev == NULL)
			fatalx("lock: evtimer_new failed");
		LIST_INSERT_HEAD(
		    &lk.buckets[lock_hash(name) % lk.nbuckets], ln, entry);
		if (++lk.nnames > lk.nbuckets)
			lock_names_grow();
	}
	ln->refs++;
	return ln;
}

static void
lock_name_unref(struct lock_name *ln)
{
	if (--ln->refs > 0)
		return;
	LIST_REMOVE(ln, entry);
	lk.nnames--;
	event_free(ln->retry_ev);
	free(ln);
}

/* --- requests ------------------------------------------------------------ */

static struct lock_req *
lock_req_new(
    enum lock_op op, struct lock_owner *o, const char *name, const char *token)
{
	struct lock_req *req = xcalloc(1, sizeof *req);

	req->op = op;
	req->owner = o;
	req->ln = lock_name_ref(name);
	if (token != NULL)
		snprintf(req->token, sizeof req->token, "%s", token);
	if (o != NULL)
		o->pending = req;
	req->start_ms = mono_ms();
	req->created_us = mono_us();
	return req;
}

static void lock_remember_release(const struct lock_req *req);

static void
lock_req_free(struct lock_req *req)
{
	/* An attempt Redis may have granted unseen is undone when it can be:
	 * the token is this request's alone unless the client chose it. */
	if (req->op == OP_ACQUIRE && req->unsure && !req->granted &&
	    req->own_token && !lk.stopping) {
		req->lease_end_ms = req->start_ms + req->ttl_ms;
		lock_remember_release(req);
	}
	if (req->deadline_ev != NULL)
		event_free(req->deadline_ev);
	lock_name_unref(req->ln);
	free(req);
}

/* Answer the owner (once); the request itself may live on in Redis. */
static void
lock_answer(struct lock_req *req, const struct lock_result *res)
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

static void
lock_answer_status(struct lock_req *req, enum lock_status st)
{
	struct lock_result res = { .status = st };

	lock_answer(req, &res);
}

static void
lock_set_err(struct lock_result *res, enum proto_err err, const char *text)
{
	memset(res, 0, sizeof *res);
	res->status = LOCK_ERR;
	res->err = err;
	res->errtext = text;
}

static void
lock_answer_err(struct lock_req *req, enum proto_err err, const char *text)
{
	struct lock_result res;

	lock_set_err(&res, err, text);
	lock_answer(req, &res);
}

/* UNAVAILABLE and INTERNAL replies, the same for every request. */
static void
lock_answer_db_error(struct lock_req *req, const struct lockdb_reply *r)
{
	char text[64];

	if (r->status == LDB_UNAVAILABLE && r->busy != NULL) {
		snprintf(text, sizeof text, "Redis answered %s", r->busy);
		lock_answer_err(req, PERR_UNAVAILABLE, text);
	} else if (r->status == LDB_UNAVAILABLE)
		lock_answer_err(
		    req, PERR_UNAVAILABLE, "Redis did not answer in time");
	else
		lock_answer_err(
		    req, PERR_INTERNAL, "unexpected reply from Redis");
}

/* --- holds --------------------------------------------------------------- */

static void
lock_timer(struct event *ev, uint64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000),
		(suseconds_t)(ms % 1000) * 1000 };

	evtimer_add(ev, &tv);
}

/* Re-arm the expiry timer for the hold's trusted end. */
static void
lock_hold_arm(struct lock_hold *h)
{
	uint64_t now = mono_ms();

	lock_timer(h->expire_ev,
	    h->valid_until_ms > now ? h->valid_until_ms - now : 0);
}

static void
lock_hold_free(struct lock_hold *h)
{
	stats_observe(HIST_hold_seconds, mono_us() - h->granted_us);
	TAILQ_REMOVE(&h->owner->holds, h, owner_entry);
	h->owner->nholds--;
	LIST_REMOVE(h, name_entry);
	if (h->renewing != NULL)
		h->renewing->hold = NULL;
	event_free(h->expire_ev);
	if (h->renew_ev != NULL)
		event_free(h->renew_ev);
	if (h->maxhold_ev != NULL)
		event_free(h->maxhold_ev);
	lock_name_unref(h->ln);
	STAT_DEC(locks_held);
	free(h);
}

static struct lock_hold *
lock_owner_find(struct lock_owner *o, const char *name)
{
	struct lock_hold *h;

	TAILQ_FOREACH(h, &o->holds, owner_entry)
	if (strcmp(h->ln->name, name) == 0)
		return h;
	return NULL;
}

/* Release for nobody in particular; a vanished holder's lock is kept for
 * lock_delay_ms instead (Chubby's lock-delay), by shortening its lease. */
static void lock_orphan_cb(const struct lockdb_reply *r, void *arg);
static void lock_remember_release(const struct lock_req *req);
static void lock_timer(struct event *ev, uint64_t ms);

static void
lock_release_orphan(
    const char *name, const char *token, bool vanished, uint64_t lease_end_ms)
{
	struct lock_req *req = lock_req_new(OP_ORPHAN, NULL, name, token);
	uint64_t delay = (uint64_t)lk.cf->locks.lock_delay_ms;

	req->in_flight = true;
	req->lease_end_ms = lease_end_ms;
	if (vanished && delay > 0)
		lockdb_extend(name, token, delay, lock_orphan_cb, req);
	else
		lockdb_release(name, token, lock_orphan_cb, req);
}

/*
 * Keep a release Redis did not confirm, to do when it is back. Bounded:
 * past max_waiters entries the oldest is dropped (its lease ends anyway).
 */
static void
lock_remember_release(const struct lock_req *req)
{
	size_t len = strlen(req->ln->name);
	struct lock_unreleased *u = xcalloc(1, sizeof *u + len + 1);

	memcpy(u->name, req->ln->name, len + 1);
	snprintf(u->token, sizeof u->token, "%s", req->token);
	u->lease_end_ms = req->lease_end_ms;
	TAILQ_INSERT_TAIL(&lk.unreleased, u, entry);
	/* Redis may answer again without a reconnect (it was only slow). */
	if (!evtimer_pending(lk.unreleased_ev, NULL))
		lock_timer(lk.unreleased_ev,
		    (uint64_t)lk.cf->redis.command_timeout_ms);
	if (++lk.nunreleased > (unsigned)lk.cf->limits.max_waiters) {
		u = TAILQ_FIRST(&lk.unreleased);
		TAILQ_REMOVE(&lk.unreleased, u, entry);
		lk.nunreleased--;
		log_warnx("lock %s: too many releases waiting for Redis; this "
			  "one is left to its lease",
		    u->name);
		free(u);
	}
	log_info("lock %s: Redis unavailable; will release it when Redis is "
		 "back",
	    req->ln->name);
}

static void
lock_orphan_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;

	if (r->status == LDB_OK) {
		STAT_INC(releases_total);
		lock_kick(req->ln);
	} else if (r->status == LDB_UNAVAILABLE && req->op == OP_ORPHAN &&
	    !lk.stopping)
		lock_remember_release(req);
	lock_req_free(req);
}

/* A remembered release, done late: say whether it was still needed. */
static void
lock_late_release_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;

	if (r->status == LDB_OK) {
		STAT_INC(releases_total);
		log_info(
		    "lock %s: released after Redis came back", req->ln->name);
		lock_kick(req->ln);
	} else if (r->status == LDB_NO)
		log_info("lock %s: its lease ran out before Redis came back",
		    req->ln->name);
	else
		lock_remember_release(req);
	lock_req_free(req);
}

static void lock_redis_up(void *arg);

static void
lock_unreleased_cb(evutil_socket_t fd, short what, void *arg)
{
	lock_redis_up(NULL);
}

/* Redis is back (or was only slow): do the releases we owe. */
static void
lock_redis_up(void *arg)
{
	struct lock_unreleased *u;
	struct lock_req *req;
	uint64_t now = mono_ms();

	if (!redisc_up()) {
		if (!TAILQ_EMPTY(&lk.unreleased))
			lock_timer(lk.unreleased_ev,
			    (uint64_t)lk.cf->redis.command_timeout_ms);
		return;
	}

	while ((u = TAILQ_FIRST(&lk.unreleased)) != NULL) {
		TAILQ_REMOVE(&lk.unreleased, u, entry);
		lk.nunreleased--;
		if (u->lease_end_ms != 0 && now >= u->lease_end_ms) {
			log_info("lock %s: its lease ran out before Redis came "
				 "back",
			    u->name);
		} else {
			req = lock_req_new(OP_ORPHAN, NULL, u->name, u->token);
			req->in_flight = true;
			req->lease_end_ms = u->lease_end_ms;
			lockdb_release(
			    u->name, u->token, lock_late_release_cb, req);
		}
		free(u);
	}
}

static const char *const lock_lost_reasons[] = { "expired", "stolen",
	"unavailable", "maxhold", "revoked" };
enum lock_lost {
	LOST_EXPIRED,
	LOST_STOLEN,
	LOST_UNAVAILABLE,
	LOST_MAXHOLD,
	LOST_REVOKED,
};

/* EVENT LOST counters are indexed by reason: keep both lists in step. */
_Static_assert(
    STAT_lost_revoked_total - STAT_lost_expired_total == LOST_REVOKED,
    "lost_*_total in stats.h must follow enum lock_lost");

/*
 * Whether a release on behalf of `except`'s owner would also take the lock
 * from someone else here: another hold under the same token (a retried
 * ACQUIRE on a new connection), or a same-token request still in flight.
 */
static bool
lock_token_busy(struct lock_name *ln, const char *token,
    const struct lock_hold *except, const struct lock_owner *o)
{
	struct lock_hold *h;
	struct lock_req *req;

	LIST_FOREACH(h, &ln->holds, name_entry)
	if (h != except && strcmp(h->token, token) == 0)
		return true;
	TAILQ_FOREACH(req, &ln->waiters, queue_entry)
	if (req->owner != o && strcmp(req->token, token) == 0)
		return true;
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
lock_lost(struct lock_hold *h, enum lock_lost why)
{
	struct lock_owner *o = h->owner;
	struct lock_name *ln = h->ln;
	uint64_t fence = h->fence;

	stats[STAT_lost_expired_total + why]++;
	log_debug("client %" PRIu64 ": lost %s (fence %" PRIu64 "): %s", o->id,
	    ln->name, fence, lock_lost_reasons[why]);
	ln->refs++;
	if (why != LOST_STOLEN && why != LOST_REVOKED &&
	    !lock_token_busy(ln, h->token, h, o))
		lock_release_orphan(
		    ln->name, h->token, why == LOST_MAXHOLD, h->valid_until_ms);
	lock_hold_free(h);
	o->ops->lost(o, ln->name, fence, lock_lost_reasons[why]);
	lock_kick(ln);
	lock_name_unref(ln);
}

static void
lock_expire_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lock_hold *h = arg;

	/* A session lease ends only when renewals stopped getting through. */
	lock_lost(h, h->kind == LOCK_SESSION ? LOST_UNAVAILABLE : LOST_EXPIRED);
}

static void
lock_maxhold_cb(evutil_socket_t fd, short what, void *arg)
{
	lock_lost(arg, LOST_MAXHOLD);
}

static void lock_renew_cb(const struct lockdb_reply *r, void *arg);

/* Every lease/3: push the session lease out again, compare-and-PEXPIRE. */
static void
lock_renew_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lock_hold *h = arg;
	struct lock_owner *o = h->owner;
	struct lock_req *req;

	/* Every third of the lease in force now (a reload may change it). */
	lock_timer(h->renew_ev, (uint64_t)lk.cf->locks.lease_ms / 3);
	if (h->renewing != NULL)
		return; /* the last one is still out; its answer decides */
	if (o->pending != NULL && o->pending->ln == h->ln &&
	    (o->pending->op == OP_ACQUIRE || o->pending->op == OP_EXTEND))
		return; /* its own ACQUIRE or EXTEND sets the lease now */
	req = lock_req_new(OP_RENEW, NULL, h->ln->name, h->token);
	req->hold = h;
	req->in_flight = true;
	h->renewing = req;
	lockdb_extend(h->ln->name, h->token, (uint64_t)lk.cf->locks.lease_ms,
	    lock_renew_cb, req);
}

static void
lock_renew_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_hold *h = req->hold;

	if (h != NULL) {
		h->renewing = NULL;
		if (h->kind != LOCK_SESSION) {
			/* Re-granted as a fixed lease meanwhile: not ours. */
		} else if (r->status == LDB_OK) {
			STAT_INC(renewals_total);
			h->valid_until_ms = util_validity_end(req->start_ms,
			    (uint64_t)lk.cf->locks.lease_ms,
			    lk.cf->locks.clock_drift);
			lock_hold_arm(h);
		} else if (r->status == LDB_NO) {
			lock_lost(h, LOST_STOLEN);
		} else {
			/* Try again at the next tick; expiry decides. */
			STAT_INC(renewal_failures_total);
		}
	}
	lock_req_free(req);
}

static struct event *
lock_hold_event(struct lock_hold *h, event_callback_fn fn, bool persist)
{
	struct event *ev =
	    event_new(lk.base, -1, persist ? EV_PERSIST : 0, fn, h);

	if (ev == NULL)
		fatalx("lock: event_new failed");
	return ev;
}

/* A grant (or a same-token re-grant) becomes the owner's hold. */
static struct lock_hold *
lock_hold_set(struct lock_owner *o, struct lock_req *req, uint64_t fence)
{
	struct lock_hold *h = lock_owner_find(o, req->ln->name);
	uint64_t max_hold = (uint64_t)lk.cf->locks.max_hold_ms;

	if (h == NULL) {
		h = xcalloc(1, sizeof *h);
		h->owner = o;
		h->ln = req->ln;
		h->ln->refs++;
		h->granted_ms = req->start_ms;
		h->granted_us = mono_us();
		h->expire_ev = lock_hold_event(h, lock_expire_cb, false);
		TAILQ_INSERT_TAIL(&o->holds, h, owner_entry);
		LIST_INSERT_HEAD(&h->ln->holds, h, name_entry);
		o->nholds++;
		STAT_INC(locks_held);
		if (max_hold > 0) {
			h->maxhold_ev =
			    lock_hold_event(h, lock_maxhold_cb, false);
			lock_timer(h->maxhold_ev, max_hold);
		}
	}
	h->kind = req->kind;
	h->fence = fence;
	h->ttl_ms = req->ttl_ms;
	h->valid_until_ms = util_validity_end(
	    req->start_ms, req->ttl_ms, lk.cf->locks.clock_drift);
	snprintf(h->token, sizeof h->token, "%s", req->token);
	lock_hold_arm(h);
	if (h->kind == LOCK_SESSION && h->renew_ev == NULL) {
		h->renew_ev = lock_hold_event(h, lock_renew_timer_cb, false);
		lock_timer(h->renew_ev, (uint64_t)lk.cf->locks.lease_ms / 3);
	} else if (h->kind != LOCK_SESSION && h->renew_ev != NULL) {
		event_free(h->renew_ev);
		h->renew_ev = NULL;
	}
	return h;
}

/* Forget every local hold of name under token, whichever owner has it. */
static void
lock_drop_token(struct lock_name *ln, const char *token,
    const struct lock_owner *o, enum lock_lost why)
{
	struct lock_hold *h, *next;

	/* ln stays: the request that calls this holds a reference. */
	for (h = LIST_FIRST(&ln->holds); h != NULL; h = next) {
		next = LIST_NEXT(h, name_entry);
		if (strcmp(h->token, token) != 0)
			continue;
		if (h->owner == o)
			lock_hold_free(h); /* it hears it in its own answer */
		else
			lock_lost(h, why);
	}
}

/* --- waiting --------------------------------------------------------- */

static void
lock_dequeue(struct lock_req *req)
{
	if (!req->queued)
		return;
	TAILQ_REMOVE(&req->ln->waiters, req, queue_entry);
	req->queued = false;
	lk.nwaiters--;
	STAT_SET(waiters, lk.nwaiters);
	if (req->deadline_ev != NULL)
		evtimer_del(req->deadline_ev);
}

/* Nobody wants this acquire's answer any more; free it unless in Redis. */
static void
lock_abandon(struct lock_req *req)
{
	if (req->owner != NULL)
		req->owner->pending = NULL;
	req->owner = NULL;
	lock_dequeue(req);
	if (!req->in_flight)
		lock_req_free(req);
}

/*
 * The head's next try: when the holder's lease runs out (pttl), or after a
 * jittered back-off that doubles from retry_min_ms to retry_max_ms,
 * whichever is first. A release announced meanwhile cuts it short.
 */
static void
lock_schedule(struct lock_name *ln, uint64_t pttl)
{
	uint64_t max = (uint64_t)lk.cf->locks.retry_max_ms;
	uint64_t delay;

	if (TAILQ_EMPTY(&ln->waiters))
		return;
	delay = util_random_range(ln->backoff_ms / 2 + 1, ln->backoff_ms);
	ln->backoff_ms = ln->backoff_ms * 2 > max ? max : ln->backoff_ms * 2;
	if (pttl < delay)
		delay = pttl + 1;
	lock_timer(ln->retry_ev, delay);
}

static void
lock_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lock_name *ln = arg;

	if (!ln->attempting)
		lock_attempt(ln);
}

/* A release of name was seen: the head tries at once. */
static void
lock_kick(struct lock_name *ln)
{
	if (TAILQ_EMPTY(&ln->waiters))
		return;
	ln->backoff_ms = (uint64_t)lk.cf->locks.retry_min_ms;
	if (ln->attempting) {
		ln->kicked = true;
		return;
	}
	evtimer_del(ln->retry_ev);
	lock_attempt(ln);
}

static void
lock_granted(struct lock_req *req, uint64_t fence)
{
	struct lock_result res = { .status = LOCK_OK };
	struct lock_owner *o = req->owner;

	STAT_INC(grants_total);
	req->granted = true;
	lock_dequeue(req);
	if (o == NULL) {
		/* Asked for, then left or timed out: give it straight back,
		 * unless it is a kept lock under the client's own token (it
		 * can ask again with that token and learn the fence). */
		if ((req->kind != LOCK_KEEP || req->own_token) &&
		    !lock_token_busy(req->ln, req->token, NULL, NULL))
			lock_release_orphan(req->ln->name, req->token, false,
			    util_validity_end(req->start_ms, req->ttl_ms,
				lk.cf->locks.clock_drift));
		return;
	}
	if (chaos_fault == CHAOS_NO_FENCE)
		fence = 1;
	lock_hold_set(o, req, fence);
	res.fence = fence;
	res.ttl_ms = req->ttl_ms;
	res.token = req->token;
	lock_answer(req, &res);
}

static void lock_attempt_cb(const struct lockdb_reply *r, void *arg);

/* Whether a hold, or a request other than req, goes by token on ln. */
static bool
lock_token_used(
    struct lock_name *ln, const char *token, const struct lock_req *req)
{
	struct lock_hold *h;
	struct lock_req *r;

	LIST_FOREACH(h, &ln->holds, name_entry)
	if (strcmp(h->token, token) == 0)
		return true;
	TAILQ_FOREACH(r, &ln->waiters, queue_entry)
	if (r != req && strcmp(r->token, token) == 0)
		return true;
	return false;
}

/*
 * A grant whose answer came after its validity (DESIGN.md §4, counted from
 * before the try was sent) had already ended is worth nothing: an OK now
 * would hand the client a lock anyone may take at any moment. It goes back
 * to Redis and the try counts as refused.
 */
static bool
lock_grant_late(struct lock_req *req)
{
	uint64_t end = util_validity_end(
	    req->start_ms, req->ttl_ms, lk.cf->locks.clock_drift);
	uint64_t now = mono_ms();

	if (end > now || chaos_fault == CHAOS_NO_VALIDITY)
		return false;
	STAT_INC(late_grants_total);
	log_warnx("lock %s: granted %" PRIu64 " ms after asking, past its "
		  "%" PRIu64 " ms lease; given back",
	    req->ln->name, now - req->start_ms, req->ttl_ms);
	if (!lock_token_used(req->ln, req->token, req))
		lock_release_orphan(req->ln->name, req->token, false, end);
	return true;
}

/*
 * redis.wait_replicas: a grant counts only once that many replicas have
 * it, so a failover cannot hand out its fence again. Otherwise it is
 * released and the client told ERR UNAVAILABLE.
 */
static void
lock_replicas_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_name *ln = req->ln;
	struct lockdb_reply granted = { LDB_OK, req->fence, 0 };
	int want = lk.cf->redis.wait_replicas;

	if (r->status == LDB_OK && r->fence >= (uint64_t)want) {
		lock_attempt_cb(&granted, req);
		return;
	}
	log_warnx("lock %s: granted, but %" PRIu64 " of %d replicas have it; "
		  "released",
	    ln->name, r->status == LDB_OK ? r->fence : 0, want);
	ln->refs++;
	ln->attempting = false;
	req->in_flight = false;
	lock_release_orphan(ln->name, req->token, false,
	    util_validity_end(
		req->start_ms, req->ttl_ms, lk.cf->locks.clock_drift));
	lock_dequeue(req);
	lock_answer_err(req, PERR_UNAVAILABLE,
	    "the grant did not reach redis.wait_replicas replicas in time");
	lock_req_free(req);
	lock_schedule(ln, 0);
	lock_name_unref(ln);
}

static void
lock_replicate(struct lock_req *req, uint64_t fence)
{
	req->replicating = true;
	req->fence = fence;
	lockdb_wait(req->ln->name, lk.cf->redis.wait_replicas,
	    (uint64_t)lk.cf->redis.command_timeout_ms / 2, lock_replicas_cb,
	    req);
}

static void
lock_attempt_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_name *ln = req->ln;
	uint64_t next = UINT64_MAX;

	if (r->status == LDB_OK && lk.cf->redis.wait_replicas > 0 &&
	    !req->replicating) {
		lock_replicate(req, r->fence);
		return;
	}
	ln->refs++;
	ln->attempting = false;
	req->in_flight = false;
	if (r->status == LDB_UNAVAILABLE)
		req->unsure = true;
	if (r->status == LDB_OK && lock_grant_late(req)) {
		next = 0; /* given back: the head tries again at once */
		if (req->owner == NULL || req->wait_ms == 0) {
			lock_dequeue(req);
			lock_answer_err(req, PERR_UNAVAILABLE,
			    "the grant came after its lease ended; Redis is "
			    "slow");
		}
	} else if (r->status == LDB_OK) {
		lock_granted(req, r->fence);
		next = req->ttl_ms; /* ours now: the rest wait for it */
	} else if (req->owner == NULL) {
		lock_dequeue(req); /* freed below */
	} else if (r->status == LDB_NO) {
		next = r->pttl;
		if (req->wait_ms == 0) {
			STAT_INC(timeouts_total);
			lock_dequeue(req);
			lock_answer_status(req, LOCK_TIMEOUT);
		}
	} else if (req->wait_ms == 0 || r->status == LDB_INTERNAL) {
		lock_dequeue(req);
		lock_answer_db_error(req, r);
	}
	/* Redis trouble leaves a waiter queued: it waits to its deadline. */
	if (!req->queued && !req->in_flight)
		lock_req_free(req);
	if (ln->kicked)
		lock_kick(ln);
	else
		lock_schedule(ln, next);
	lock_name_unref(ln);
}

/*
 * How long a refused waiter marks its name as waited for, so that a
 * release anywhere is announced: past its next try (the head tries at
 * least every retry_max_ms), with room for a slow reply. A try-once
 * waits for no announcement.
 */
static uint64_t
lock_mark_ms(const struct lock_req *req)
{
	if (req->wait_ms == 0)
		return 0;
	return 2 * (uint64_t)lk.cf->locks.retry_max_ms +
	    (uint64_t)lk.cf->redis.command_timeout_ms;
}

/* Only the head of a queue talks to Redis. */
static void
lock_attempt(struct lock_name *ln)
{
	struct lock_req *req = TAILQ_FIRST(&ln->waiters);

	if (req == NULL || ln->attempting)
		return;
	ln->attempting = true;
	ln->kicked = false;
	req->in_flight = true;
	req->tries++;
	req->start_ms = mono_ms();
	lockdb_acquire(ln->name, req->token, req->ttl_ms, lock_mark_ms(req),
	    lock_attempt_cb, req);
}

/* WAIT ran out: TIMEOUT now; an attempt still in Redis is undone later. */
static void
lock_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lock_req *req = arg;

	STAT_INC(timeouts_total);
	lock_dequeue(req);
	lock_answer_status(req, LOCK_TIMEOUT);
	if (!req->in_flight)
		lock_req_free(req);
}

/* How long a hold here under another token stays valid; 0 if none. */
static uint64_t
lock_local_hold_left(struct lock_name *ln, const char *token)
{
	struct lock_hold *h;
	uint64_t now = mono_ms(), left = 0;

	LIST_FOREACH(h, &ln->holds, name_entry)
	{
		if (strcmp(h->token, token) != 0 && h->valid_until_ms > now &&
		    h->valid_until_ms - now > left)
			left = h->valid_until_ms - now;
	}
	return left;
}

/*
 * A new head asks Redis at once, unless a client of ours holds the name:
 * then Redis would only refuse, and the hold's release hands the lock over
 * (one round trip) or its loss kicks the queue. A try still comes after
 * retry_max_ms, in case the hold was released through another broker.
 */
static void
lock_first_try(struct lock_name *ln, struct lock_req *req)
{
	uint64_t left = 0, max = (uint64_t)lk.cf->locks.retry_max_ms;

	if (req->wait_ms != 0)
		left = lock_local_hold_left(ln, req->token);
	if (left == 0)
		lock_attempt(ln);
	else
		lock_timer(ln->retry_ev, left < max ? left + 1 : max);
}

static void
lock_enqueue(struct lock_req *req)
{
	struct lock_name *ln = req->ln;

	TAILQ_INSERT_TAIL(&ln->waiters, req, queue_entry);
	req->queued = true;
	lk.nwaiters++;
	STAT_SET(waiters, lk.nwaiters);
	if (req->wait_ms > 0) {
		req->deadline_ev = evtimer_new(lk.base, lock_deadline_cb, req);
		if (req->deadline_ev == NULL)
			fatalx("lock: evtimer_new failed");
		lock_timer(req->deadline_ev, (uint64_t)req->wait_ms);
	}
	if (TAILQ_FIRST(&ln->waiters) == req && !ln->attempting) {
		ln->backoff_ms = (uint64_t)lk.cf->locks.retry_min_ms;
		evtimer_del(ln->retry_ev);
		lock_first_try(ln, req);
	}
}

/* Another broker released a name: its waiters here may go. */
static void
lock_message_cb(const char *msg, size_t len, void *arg)
{
	char name[PROTO_NAME_MAX + 1];
	struct lock_name *ln;

	if (msg == NULL) {
		/* (Re)subscribed: releases may have been missed meanwhile. */
		for (size_t i = 0; i < lk.nbuckets; i++)
			LIST_FOREACH(ln, &lk.buckets[i], entry)
		if (!TAILQ_EMPTY(&ln->waiters))
			lock_timer(ln->retry_ev, 0);
		return;
	}
	if (len == 0 || len > PROTO_NAME_MAX)
		return;
	memcpy(name, msg, len);
	name[len] = '\0';
	if ((ln = lock_name_find(name)) != NULL)
		lock_kick(ln);
}

/* --- requests from clients ------------------------------------------- */

static bool
lock_check_name(const char *name, struct lock_result *res)
{
	if (proto_valid_name(name))
		return true;
	lock_set_err(
	    res, PERR_NAME, "a name is 1-200 bytes of 0x21-0x7E or 0x80-0xFF");
	return false;
}

static bool
lock_check_token(const char *token, struct lock_result *res)
{
	if (token == NULL || proto_valid_token(token))
		return true;
	lock_set_err(res, PERR_ARGS, "a token is 1-64 of A-Z a-z 0-9 _ . -");
	return false;
}

static bool
lock_check_ttl(uint64_t ttl_ms, struct lock_result *res)
{
	static char text[96];

	if (ttl_ms >= (uint64_t)lk.cf->locks.min_ttl_ms &&
	    ttl_ms <= (uint64_t)lk.cf->locks.max_ttl_ms)
		return true;
	snprintf(text, sizeof text,
	    "ttl must be between %" PRId64 " and %" PRId64 " ms",
	    lk.cf->locks.min_ttl_ms, lk.cf->locks.max_ttl_ms);
	lock_set_err(res, PERR_ARGS, text);
	return false;
}

static bool lock_token_held(struct lock_name *ln, const char *token);

/* Everything ACQUIRE can refuse before it goes to Redis. */
static bool
lock_acquire_ok(struct lock_owner *o, const char *name,
    const struct lock_acquire_args *a, struct lock_result *res)
{
	struct lock_hold *h;
	struct lock_name *ln;

	if (lk.stopping) {
		lock_set_err(res, PERR_SHUTDOWN, "the broker is stopping");
		return false;
	}
	if (!lock_check_name(name, res) || !lock_check_token(a->token, res))
		return false;
	if (a->ttl_ms != 0 && !lock_check_ttl(a->ttl_ms, res))
		return false;
	if (a->keep && a->ttl_ms == 0) {
		lock_set_err(res, PERR_ARGS, "KEEP needs TTL");
		return false;
	}
	/* Only the holding token may ask again (and gets its fence back). */
	h = lock_owner_find(o, name);
	if (h != NULL &&
	    (a->token == NULL || strcmp(a->token, h->token) != 0)) {
		lock_set_err(
		    res, PERR_HELD, "this connection holds it already");
		return false;
	}
	if (h == NULL &&
	    o->nholds >= (unsigned)lk.cf->limits.max_locks_per_client) {
		lock_set_err(
		    res, PERR_LIMIT, "too many locks on this connection");
		return false;
	}
	if (a->wait_ms != 0 &&
	    lk.nwaiters >= (unsigned)lk.cf->limits.max_waiters) {
		lock_set_err(res, PERR_LIMIT, "too many waiters");
		return false;
	}
	/* A try-once never jumps a queue: someone holds it, others wait. */
	ln = lock_name_find(name);
	if (a->wait_ms == 0 && ln != NULL && !TAILQ_EMPTY(&ln->waiters) &&
	    !lock_token_held(ln, a->token)) {
		STAT_INC(timeouts_total);
		memset(res, 0, sizeof *res);
		res->status = LOCK_TIMEOUT;
		return false;
	}
	return true;
}

/* A token that holds the lock here asks again: straight to Redis. */
static void
lock_regrant_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;

	req->in_flight = false;
	if (r->status == LDB_OK)
		lock_granted(req, r->fence);
	else if (r->status == LDB_NO) {
		/* Someone else holds it now: our holds under it are stale. */
		lock_drop_token(req->ln, req->token, NULL, LOST_STOLEN);
		STAT_INC(timeouts_total);
		lock_answer_status(req, LOCK_TIMEOUT);
	} else {
		if (r->status == LDB_UNAVAILABLE)
			req->unsure = true;
		lock_answer_db_error(req, r);
	}
	lock_req_free(req);
}

static bool
lock_token_held(struct lock_name *ln, const char *token)
{
	struct lock_hold *h;

	if (ln != NULL && token != NULL)
		LIST_FOREACH(h, &ln->holds, name_entry)
	if (strcmp(h->token, token) == 0)
		return true;
	return false;
}

int
lock_acquire(struct lock_owner *o, const char *name,
    const struct lock_acquire_args *a, struct lock_result *res)
{
	struct lock_req *req;

	if (!lock_acquire_ok(o, name, a, res))
		return -1;
	req = lock_req_new(OP_ACQUIRE, o, name, a->token);
	if (a->token == NULL) {
		util_random_token(req->token);
		req->own_token = true;
	}
	req->kind = a->ttl_ms == 0 ? LOCK_SESSION
	    : a->keep		   ? LOCK_KEEP
				   : LOCK_FIXED;
	req->ttl_ms =
	    a->ttl_ms != 0 ? a->ttl_ms : (uint64_t)lk.cf->locks.lease_ms;
	req->wait_ms = a->wait_ms;
	/* Its token holds it already (a retried request): no queue, the
	 * script answers with the same fence at once. */
	if (lock_token_held(req->ln, a->token)) {
		req->in_flight = true;
		lockdb_acquire(
		    name, req->token, req->ttl_ms, 0, lock_regrant_cb, req);
		return 0;
	}
	lock_enqueue(req);
	return 0;
}

/* When a local hold under token stops being trusted; 0 if none is known. */
static uint64_t
lock_lease_end(struct lock_name *ln, const char *token)
{
	struct lock_hold *h;

	LIST_FOREACH(h, &ln->holds, name_entry)
	if (strcmp(h->token, token) == 0)
		return h->valid_until_ms;
	return 0;
}

/* Without TOKEN the connection must hold it; with TOKEN anyone may act. */
static const char *
lock_token_for(struct lock_owner *o, const char *name, const char *token,
    struct lock_result *res)
{
	struct lock_hold *h;

	if (!lock_check_name(name, res) || !lock_check_token(token, res))
		return NULL;
	if (token != NULL)
		return token;
	if ((h = lock_owner_find(o, name)) == NULL) {
		STAT_INC(notheld_total);
		lock_set_err(
		    res, PERR_NOTHELD, "this connection does not hold it");
		return NULL;
	}
	return h->token;
}

static void
lock_notheld(struct lock_req *req)
{
	STAT_INC(notheld_total);
	lock_answer_err(
	    req, PERR_NOTHELD, "the lock is not held by this token");
}

/* handed: the lock went to the local head, so nobody else need try. */
static void
lock_release_done(
    struct lock_req *req, const struct lockdb_reply *r, bool handed)
{
	/* Not ours either way; or ours until Redis hears of it (below). */
	lock_drop_token(req->ln, req->token, req->owner,
	    r->status == LDB_NO ? LOST_STOLEN : LOST_REVOKED);
	if (r->status == LDB_OK) {
		STAT_INC(releases_total);
		lock_answer_status(req, LOCK_OK);
		if (!handed)
			lock_kick(req->ln); /* the head tries at once */
	} else if (r->status == LDB_NO)
		lock_notheld(req);
	else {
		if (r->status == LDB_UNAVAILABLE && !lk.stopping)
			lock_remember_release(req);
		lock_answer_db_error(req, r);
	}
	lock_req_free(req);
}

static void
lock_release_cb(const struct lockdb_reply *r, void *arg)
{
	lock_release_done(arg, r, false);
}

/*
 * A release with a local head waiter that has no try of its own in Redis
 * grants to it in the same script (lockdb_handover): one round trip, and
 * the lock is never free for anyone to slip in between. The head's side
 * of the answer is an attempt's answer.
 */
static struct lock_req *
lock_handover_claim(struct lock_name *ln)
{
	struct lock_req *next = TAILQ_FIRST(&ln->waiters);

	if (next == NULL || ln->attempting || lk.stopping ||
	    chaos_fault == CHAOS_BLIND_RELEASE)
		return NULL;
	evtimer_del(ln->retry_ev);
	ln->attempting = true;
	ln->kicked = false;
	next->in_flight = true;
	next->tries++;
	next->start_ms = mono_ms();
	return next;
}

static void
lock_handover_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg, *next = req->next;
	struct lock_name *ln = next->ln;
	/* Unanswered, it may have been granted: the head's own retry (same
	 * token) finds out. */
	struct lockdb_reply head = { r->status, r->fence, 0, r->busy };

	/* The old hold goes first: the new one may carry the same token. */
	req->next = NULL;
	lock_release_done(req, r, r->status == LDB_OK);
	if (r->status == LDB_OK || r->status == LDB_UNAVAILABLE) {
		lock_attempt_cb(&head, next);
		return;
	}
	/* Not the releaser's to give (or a bad reply): the head never tried,
	 * so the claim is undone and it tries on its own, now. */
	ln->refs++;
	next->tries--;
	next->in_flight = false;
	ln->attempting = false;
	if (!next->queued)
		lock_req_free(next); /* it left meanwhile */
	lock_kick(ln);
	lock_name_unref(ln);
}

int
lock_release(struct lock_owner *o, const char *name, const char *token,
    struct lock_result *res)
{
	struct lock_req *req;

	if ((token = lock_token_for(o, name, token, res)) == NULL)
		return -1;
	req = lock_req_new(OP_RELEASE, o, name, token);
	req->in_flight = true;
	req->lease_end_ms = lock_lease_end(req->ln, req->token);
	if ((req->next = lock_handover_claim(req->ln)) != NULL)
		lockdb_handover(name, req->token, req->next->token,
		    req->next->ttl_ms, lock_handover_cb, req);
	else
		lockdb_release(name, req->token, lock_release_cb, req);
	return 0;
}

static void
lock_extend_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_result res = { .status = LOCK_OK, .ttl_ms = req->ttl_ms };
	struct lock_hold *h;

	if (r->status == LDB_OK) {
		STAT_INC(extends_total);
		LIST_FOREACH(h, &req->ln->holds, name_entry)
		{
			if (strcmp(h->token, req->token) != 0)
				continue;
			h->ttl_ms = req->ttl_ms;
			h->valid_until_ms = util_validity_end(req->start_ms,
			    req->ttl_ms, lk.cf->locks.clock_drift);
			lock_hold_arm(h);
		}
		lock_answer(req, &res);
	} else if (r->status == LDB_NO) {
		lock_drop_token(req->ln, req->token, req->owner, LOST_STOLEN);
		lock_notheld(req);
	} else
		lock_answer_db_error(req, r);
	lock_req_free(req);
}

int
lock_extend(struct lock_owner *o, const char *name, uint64_t ttl_ms,
    const char *token, struct lock_result *res)
{
	struct lock_req *req;

	struct lock_hold *h;

	if ((token = lock_token_for(o, name, token, res)) == NULL)
		return -1;
	if (!lock_check_ttl(ttl_ms, res))
		return -1;
	/* The broker renews a session lease itself; the next renewal would
	 * undo an EXTEND, so say so instead of pretending. */
	if ((h = lock_owner_find(o, name)) != NULL && h->kind == LOCK_SESSION &&
	    strcmp(h->token, token) == 0) {
		lock_set_err(res, PERR_ARGS,
		    "a session lock is renewed by the broker; EXTEND is for "
		    "TTL "
		    "locks");
		return -1;
	}
	req = lock_req_new(OP_EXTEND, o, name, token);
	req->ttl_ms = ttl_ms;
	req->in_flight = true;
	lockdb_extend(name, req->token, ttl_ms, lock_extend_cb, req);
	return 0;
}

/* STATUS and VALIDATE share one script. */
static void
lock_status_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_result res = { 0 };

	if (r->status == LDB_UNAVAILABLE || r->status == LDB_INTERNAL) {
		lock_answer_db_error(req, r);
		lock_req_free(req);
		return;
	}
	res.status = r->status == LDB_OK ? LOCK_HELD : LOCK_FREE;
	res.ttl_ms = r->pttl;
	res.fence = r->fence;
	if (req->op == OP_VALIDATE) {
		res.valid = res.status == LOCK_HELD && r->fence == req->fence;
		res.fence = req->fence;
		res.status = LOCK_OK;
	}
	lock_answer(req, &res);
	lock_req_free(req);
}

int
lock_status(struct lock_owner *o, const char *name, struct lock_result *res)
{
	struct lock_req *req;

	if (!lock_check_name(name, res))
		return -1;
	req = lock_req_new(OP_STATUS, o, name, NULL);
	req->in_flight = true;
	lockdb_status(name, lock_status_cb, req);
	return 0;
}

int
lock_validate(struct lock_owner *o, const char *name, uint64_t fence,
    struct lock_result *res)
{
	struct lock_req *req;

	if (!lock_check_name(name, res))
		return -1;
	req = lock_req_new(OP_VALIDATE, o, name, NULL);
	req->fence = fence;
	req->in_flight = true;
	lockdb_status(name, lock_status_cb, req);
	return 0;
}

/* --- owners -------------------------------------------------------------- */

void
lock_owner_init(
    struct lock_owner *o, uint64_t id, const struct lock_owner_ops *ops)
{
	memset(o, 0, sizeof *o);
	o->id = id;
	o->ops = ops;
	TAILQ_INIT(&o->holds);
}

void
lock_owner_gone(struct lock_owner *o, bool vanished)
{
	struct lock_req *req = o->pending;
	struct lock_hold *h;

	if (req != NULL && req->op == OP_ACQUIRE)
		lock_abandon(req);
	else if (req != NULL)
		req->owner = NULL;
	o->pending = NULL;
	while ((h = TAILQ_FIRST(&o->holds)) != NULL) {
		/* Session and fixed locks end with their connection. */
		if (h->kind != LOCK_KEEP &&
		    !lock_token_busy(h->ln, h->token, h, NULL))
			lock_release_orphan(
			    h->ln->name, h->token, vanished, h->valid_until_ms);
		lock_hold_free(h);
	}
}

const char *
lock_kind_name(enum lock_kind kind)
{
	static const char *const names[] = { "SESSION", "FIXED", "KEEP" };

	return names[kind];
}

const char *
lock_hold_name(const struct lock_hold *h)
{
	return h->ln->name;
}

uint64_t
lock_hold_ttl_left(const struct lock_hold *h, uint64_t now_ms)
{
	return h->valid_until_ms > now_ms ? h->valid_until_ms - now_ms : 0;
}

static void
lock_owner_try_once(struct lock_req *req)
{
	req->wait_ms = 0;
	if (req->deadline_ev != NULL)
		evtimer_del(req->deadline_ev);
}

bool
lock_owner_eof(struct lock_owner *o)
{
	struct lock_req *req = o->pending;

	if (req == NULL || !req->queued)
		return true;
	/* A head held back by a hold here (lock_first_try) has not asked
	 * yet: it makes its one try now, as a try-once. */
	if (req->tries == 0 && !req->in_flight && !req->ln->attempting &&
	    TAILQ_FIRST(&req->ln->waiters) == req) {
		lock_owner_try_once(req);
		evtimer_del(req->ln->retry_ev);
		lock_attempt(req->ln);
		return true;
	}
	/* Only the first try, still in Redis, has not started to wait. */
	if (req->tries != 1 || !req->in_flight)
		return false;
	lock_owner_try_once(req);
	return true;
}

void
lock_init(struct event_base *base, const struct config *cf)
{
	memset(&lk, 0, sizeof lk);
	lk.base = base;
	lk.cf = cf;
	lk.nbuckets = 64;
	lk.buckets = xcalloc(lk.nbuckets, sizeof *lk.buckets);
	TAILQ_INIT(&lk.unreleased);
	lk.unreleased_ev = evtimer_new(base, lock_unreleased_cb, NULL);
	if (lk.unreleased_ev == NULL)
		fatalx("lock: evtimer_new failed");
	lockdb_init(cf->redis.prefix);
	redisc_subscribe(lockdb_channel(), lock_message_cb, NULL);
	redisc_on_connect(lock_redis_up, NULL);
}

/* A graceful stop: every waiter here is told ERR SHUTDOWN. */
void
lock_stop(void)
{
	struct lock_name *ln, *next;
	struct lock_req *req;

	lk.stopping = true;
	for (size_t i = 0; i < lk.nbuckets; i++) {
		for (ln = LIST_FIRST(&lk.buckets[i]); ln != NULL; ln = next) {
			ln->refs++;
			while ((req = TAILQ_FIRST(&ln->waiters)) != NULL) {
				lock_answer_err(req, PERR_SHUTDOWN,
				    "the broker is stopping");
				lock_abandon(req);
			}
			next = LIST_NEXT(ln, entry);
			lock_name_unref(ln);
		}
	}
}

void
lock_shutdown(void)
{
	struct lock_unreleased *u;

	while ((u = TAILQ_FIRST(&lk.unreleased)) != NULL) {
		TAILQ_REMOVE(&lk.unreleased, u, entry);
		log_warnx("lock %s: never released (Redis unavailable); its "
			  "lease will end it",
		    u->name);
		free(u);
	}
	if (lk.unreleased_ev != NULL)
		event_free(lk.unreleased_ev);
	free(lk.buckets);
	lk.buckets = NULL;
}

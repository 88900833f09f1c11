/*
 * lock: the lock engine's entry points. Decisions that must be atomic are
 * lockdb's scripts; the engine's parts keep what this broker's clients hold
 * (lock_hold) and wait for (lock_queue), on the name table (lock_name) and
 * request records (lock_req), with releases nobody waits for in
 * lock_release. This file checks and
 * starts each request and finishes the ones that do not wait.
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
#include "lock_hold.h"
#include "lock_check.h"
#include "lock_grant.h"
#include "lock_handover.h"
#include "lock_news.h"
#include "lock_queue.h"
#include "lock_trust.h"
#include "lock_try.h"
#include "lock_release.h"
#include "lock_req.h"
#include "lock_scope.h"
#include "log.h"
#include "stats.h"
#include "xmalloc.h"

static const struct config *cf;

static struct lock_hold *lock_hold_of(struct lock_name *ln, const char *token);

/*
 * A release (a client's, or lock_release's) went through, sent at sent_ms:
 * handed to one of our tickets, that waiter has it; to another broker's,
 * that broker's waiter does; else waiters here may try.
 */
static void
lock_released(const char *name, const struct lockdb_reply *r, uint64_t sent_ms)
{
	struct lock_name *ln;

	if (r->fence != 0) {
		STAT_INC(handovers_total);
		if (r->ticket != 0)
			lockhand_handed(
			    name, r->ticket, r->fence, r->token, sent_ms, 0);
	} else if ((ln = lockname_find(name)) != NULL)
		lockq_kick(ln);
}

static bool
lock_check_ttl(uint64_t ttl_ms, struct lock_result *res)
{
	static char text[96];

	if (ttl_ms >= (uint64_t)cf->locks.min_ttl_ms &&
	    ttl_ms <= (uint64_t)cf->locks.max_ttl_ms)
		return true;
	snprintf(text, sizeof text,
	    "ttl must be between %" PRId64 " and %" PRId64 " ms",
	    cf->locks.min_ttl_ms, cf->locks.max_ttl_ms);
	lockreq_set_err(res, PERR_ARGS, text);
	return false;
}

/* Everything ACQUIRE can refuse before it goes to Redis. */
static bool
lock_acquire_ok(struct lock_owner *o, const char *name,
    const struct lock_acquire_args *a, struct lock_result *res)
{
	struct lock_hold *h;
	struct lock_name *ln;

	if (lockq_stopping()) {
		lockreq_set_err(res, PERR_SHUTDOWN, "the broker is stopping");
		return false;
	}
	/* An evicting Redis loses locks and fences: nothing is granted. */
	if (lockdb_refusal() != NULL) {
		lockreq_set_err(res, PERR_UNAVAILABLE, lockdb_refusal());
		return false;
	}
	if (!lockreq_check_name(name, res) ||
	    !lockreq_check_token(a->token, res))
		return false;
	if (a->ttl_ms != 0 && !lock_check_ttl(a->ttl_ms, res))
		return false;
	if (a->keep && a->ttl_ms == 0) {
		lockreq_set_err(res, PERR_ARGS, "KEEP needs TTL");
		return false;
	}
	/* Only the holding token may ask again (and gets its fence back). */
	h = lockhold_find(o, name);
	if (h != NULL &&
	    (a->token == NULL || strcmp(a->token, h->token) != 0)) {
		lockreq_set_err(
		    res, PERR_HELD, "this connection holds it already");
		return false;
	}
	if (h == NULL &&
	    o->nholds >= (unsigned)cf->limits.max_locks_per_client) {
		lockreq_set_err(
		    res, PERR_LIMIT, "too many locks on this connection");
		return false;
	}
	if (a->wait_ms != 0 &&
	    lockq_waiters() >= (unsigned)cf->limits.max_waiters) {
		lockreq_set_err(res, PERR_LIMIT, "too many waiters");
		return false;
	}
	/* A try-once never jumps a queue: someone holds it, others wait. */
	ln = lockname_find(name);
	if (a->wait_ms == 0 && ln != NULL && !TAILQ_EMPTY(&ln->waiters) &&
	    lock_hold_of(ln, a->token) == NULL) {
		STAT_INC(timeouts_total);
		memset(res, 0, sizeof *res);
		res->status = LOCK_TIMEOUT;
		return false;
	}
	return true;
}

static void lock_regrant_cb(const struct lockdb_reply *r, void *arg);

/* redis.wait_replicas: a re-grant counts only once replicated, as any
 * grant (the engine's hold keeps what it trusted before). */
static void
lock_regrant_replicas_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lockdb_reply granted = { LDB_OK, req->fence, 0 };

	if (r->status == LDB_OK &&
	    r->fence >= (uint64_t)cf->redis.wait_replicas) {
		lock_regrant_cb(&granted, req);
		return;
	}
	lockreq_landed(req);
	lockreq_answer_err(req, PERR_UNAVAILABLE,
	    "the grant did not reach redis.wait_replicas replicas in time");
	lockreq_free_undo(req);
}

/* A token that holds the lock here asks again: straight to Redis. Its
 * answer is checked as any grant's: replicated, and not late. */
static void
lock_regrant_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;

	/* Answered: it no longer keeps its token busy (a grant nobody
	 * wants any more is released below). */
	lockreq_unask(req);
	if (r->status == LDB_OK && cf->redis.wait_replicas > 0 &&
	    !lockreq_replicating(req)) {
		lockreq_replicate(req, r->fence);
		lockdb_wait(req->ln->name, cf->redis.wait_replicas,
		    (uint64_t)cf->redis.command_timeout_ms / 2,
		    lock_regrant_replicas_cb, req);
		return;
	}
	lockreq_landed(req);
	if (r->status == LDB_OK && lockgrant_late(req, r->fence)) {
		/* The token's holds here assumed this lease when it was
		 * sent: they end now, and the last of them releases it. */
		lockreq_answer_err(req, PERR_UNAVAILABLE,
		    "the grant came after its lease ended; Redis is slow");
	} else if (r->status == LDB_OK)
		lockgrant_granted(req, r->fence);
	else if (r->status == LDB_CONFLICT)
		lockgrant_conflict(req, r);
	else if (r->status == LDB_NO || r->status == LDB_DONE) {
		/* Someone else holds it now: our holds under it are stale. */
		lockhold_drop_token(req->ln, req->token, NULL, LOST_STOLEN);
		lockreq_answer_status(req, LOCK_TIMEOUT);
	} else {
		if (r->status == LDB_UNAVAILABLE && !r->not_run)
			lockreq_unsure(req);
		lockreq_answer_db_error(req, r);
	}
	lockreq_free_undo(req);
}

/* The local hold of ln under token, or NULL (either may be NULL). */
static struct lock_hold *
lock_hold_of(struct lock_name *ln, const char *token)
{
	struct lock_hold *h;

	if (ln != NULL && token != NULL)
		LIST_FOREACH (h, &ln->holds, name_entry)
			if (strcmp(h->token, token) == 0)
				return h;
	return NULL;
}

int
lock_acquire(struct lock_owner *o, const char *name,
    const struct lock_acquire_args *a, struct lock_result *res)
{
	struct lock_req *req;

	if (!lock_acquire_ok(o, name, a, res))
		return -1;
	req = lockreq_new(OP_ACQUIRE, o, name, a->token);
	if (a->token == NULL)
		lockreq_own_token(req);
	lockreq_terms(req,
	    a->ttl_ms == 0 ? LOCK_SESSION
		: a->keep  ? LOCK_KEEP
			   : LOCK_FIXED,
	    a->mode, a->limit,
	    a->ttl_ms != 0 ? a->ttl_ms : (uint64_t)cf->locks.lease_ms,
	    a->wait_ms);
	/* Its token holds it already (a retried request): no queue, the
	 * script answers with the same fence at once. */
	if (lock_hold_of(req->ln, a->token) != NULL) {
		struct lockdb_ask ask;
		char info[LOCKREQ_INFO];

		lockreq_send_at(req, req->start_ms, lockq_sub_epoch());
		lockreq_asking(req);
		lockreq_token_asks(req);
		lockhold_assume(req);
		lockreq_ask(req, 0, &ask, info, sizeof info);
		lockdb_acquire(name, &ask, lock_regrant_cb, req);
		return 0;
	}
	locktry_wait(req);
	return 0;
}

/* Without TOKEN the connection must hold it; with TOKEN anyone may act. */
static const char *
lock_token_for(struct lock_owner *o, const char *name, const char *token,
    struct lock_result *res)
{
	struct lock_hold *h;

	if (!lockreq_check_name(name, res) || !lockreq_check_token(token, res))
		return NULL;
	if (token != NULL)
		return token;
	if ((h = lockhold_find(o, name)) == NULL) {
		STAT_INC(notheld_total);
		lockreq_set_err(res, PERR_NOTHELD,
		    "this connection does not hold it "
		    "(give TOKEN <t> for a grant made elsewhere)");
		return NULL;
	}
	return h->token;
}

static void
lock_notheld(struct lock_req *req)
{
	STAT_INC(notheld_total);
	lockreq_answer_err(
	    req, PERR_NOTHELD, "the lock is not held by this token");
}

/*
 * A RELEASE's answer. Released with a hand-over to one of our tickets: that
 * waiter has it, counted from when the release was sent; to another
 * broker's: that broker tells its waiter. Released with none: the head
 * here tries at once.
 */
static void
lock_release_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;

	/* Not ours either way; or ours until Redis hears of it (below). The
	 * old hold goes first: the new one may carry the same token. */
	lockhold_drop_token(req->ln, req->token, req->owner,
	    r->status == LDB_NO ? LOST_STOLEN : LOST_REVOKED);
	if (r->status == LDB_OK) {
		STAT_INC(releases_total);
		/* The waiter handed the name first: its grant is written out
		 * first in this loop turn (the releaser's OK can wait). */
		lock_released(req->ln->name, r, req->start_ms);
		lockreq_answer_status(req, LOCK_OK);
	} else if (r->status == LDB_NO)
		lock_notheld(req);
	else {
		/* Redone later only for a grant this broker knows the fence
		 * of, so it can never delete a newer grant to the token. */
		if (r->status == LDB_UNAVAILABLE && req->fence != 0 &&
		    !req->forget)
			lockrel_remember(req->ln->name, req->token, req->fence,
			    req->lease_end_ms, req->done);
		lockreq_answer_db_error(req, r);
	}
	lockreq_free(req);
}

int
lock_release(struct lock_owner *o, const char *name, const char *token,
    struct lock_result *res)
{
	struct lock_req *req;
	struct lock_hold *h;

	if ((token = lock_token_for(o, name, token, res)) == NULL)
		return -1;
	req = lockreq_new(OP_RELEASE, o, name, token);
	lockreq_send(req);
	lockreq_asking(req);
	h = lock_hold_of(req->ln, req->token);
	lockreq_releases(req, h != NULL ? h->fence : 0,
	    h != NULL ? h->valid_until_ms : 0,
	    h != NULL && h->mode == LOCK_FILL ? LDB_DONE_ALWAYS
					      : LDB_DONE_IF_WAITED);
	if (h != NULL)
		lockhold_releasing(h); /* no new FILL waiter waits on it */
	lockdb_release(name, req->token, req->fence, req->done,
	    config_mark_ms(cf), lock_release_cb, req);
	/* Other connections holding the grant: gone from now on. */
	lockhold_release_sent(req->ln, req->token, o);
	return 0;
}

static void
lock_extend_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_result res = { .status = LOCK_OK, .ttl_ms = req->ttl_ms };

	/* redis.wait_replicas: the new lease counts only once replicated
	 * (a shorter one was assumed when it was sent). */
	if (r->status == LDB_OK && cf->redis.wait_replicas > 0 &&
	    !lockreq_replicating(req)) {
		lockreq_replicate(req, req->fence);
		lockdb_wait(req->ln->name, cf->redis.wait_replicas,
		    (uint64_t)cf->redis.command_timeout_ms / 2, lock_extend_cb,
		    req);
		return;
	}
	if (lockreq_replicating(req) && r->status == LDB_OK &&
	    r->fence < (uint64_t)cf->redis.wait_replicas) {
		lockreq_answer_err(req, PERR_UNAVAILABLE,
		    "the extension did not reach redis.wait_replicas replicas in time");
		lockreq_free(req);
		return;
	}
	if (r->status == LDB_OK) {
		STAT_INC(extends_total);
		lockhold_lease(req, 0);
		lockreq_answer(req, &res);
	} else if (r->status == LDB_NO) {
		lockhold_drop_token(
		    req->ln, req->token, req->owner, LOST_STOLEN);
		lock_notheld(req);
	} else
		lockreq_answer_db_error(req, r);
	lockreq_free(req);
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
	if ((h = lockhold_find(o, name)) != NULL && h->kind == LOCK_SESSION &&
	    strcmp(h->token, token) == 0) {
		lockreq_set_err(res, PERR_ARGS,
		    "a session lock is renewed by the broker; EXTEND is for "
		    "TTL locks");
		return -1;
	}
	req = lockreq_new(OP_EXTEND, o, name, token);
	lockreq_set_ttl(req, ttl_ms);
	lockreq_send(req);
	lockhold_assume(req);
	/* The grant held here, by its fence: Redis can then move the lease
	 * even if its lock key was deleted by hand (docs/protocol.md §8). */
	h = lock_hold_of(req->ln, req->token);
	lockdb_extend(name, req->token, h != NULL ? h->fence : 0, ttl_ms,
	    lock_extend_cb, req);
	return 0;
}

/* STATUS and VALIDATE share one script. */
static void
lock_status_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_result res = { 0 };

	if (r->status == LDB_UNAVAILABLE || r->status == LDB_INTERNAL) {
		lockreq_answer_db_error(req, r);
		lockreq_free(req);
		return;
	}
	res.status = r->status == LDB_OK ? LOCK_HELD : LOCK_FREE;
	res.ttl_ms = r->pttl;
	res.fence = r->fence;
	res.mode = (enum lock_mode)r->mode;
	res.limit = r->limit;
	res.count = r->count;
	if (req->op == OP_VALIDATE) {
		res.valid = res.status == LOCK_HELD && r->valid;
		res.fence = req->fence;
		res.status = LOCK_OK;
	}
	lockreq_answer(req, &res);
	lockreq_free(req);
}

int
lock_status(struct lock_owner *o, const char *name, struct lock_result *res)
{
	struct lock_req *req;

	if (!lockreq_check_name(name, res))
		return -1;
	req = lockreq_new(OP_STATUS, o, name, NULL);
	lockreq_send(req);
	lockdb_status(name, 0, NULL, lock_status_cb, req);
	return 0;
}

int
lock_validate(struct lock_owner *o, const char *name, uint64_t fence,
    const char *token, struct lock_result *res)
{
	struct lock_req *req;

	if (!lockreq_check_name(name, res) || !lockreq_check_token(token, res))
		return -1;
	req = lockreq_new(OP_VALIDATE, o, name, token);
	lockreq_set_fence(req, fence);
	lockreq_send(req);
	lockdb_status(name, fence, token, lock_status_cb, req);
	return 0;
}

static void
lock_who_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_result res = { .status = LOCK_OK };

	if (r->status != LDB_OK)
		lockreq_answer_db_error(req, r);
	else {
		res.nholders = r->nholders;
		res.holders = r->holders;
		lockreq_answer(req, &res);
	}
	lockreq_free(req);
}

int
lock_who(struct lock_owner *o, const char *name, struct lock_result *res)
{
	struct lock_req *req;

	if (!lockreq_check_name(name, res))
		return -1;
	req = lockreq_new(OP_WHO, o, name, NULL);
	lockreq_send(req);
	lockdb_who(name, lock_who_cb, req);
	return 0;
}

/* The holders' brokers (this one too) hear of it on the release channel
 * and send EVENT LOST ... revoked. */
static void
lock_revoke_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_result res = { .status = LOCK_OK };

	if (r->status != LDB_OK)
		lockreq_answer_db_error(req, r);
	else {
		stats[STAT_revokes_total] += (int64_t)r->count;
		if (r->count > 0)
			log_info("lock %s: revoked from %" PRIu64 " holder%s",
			    req->ln->name, r->count, r->count == 1 ? "" : "s");
		res.count = r->count;
		lockreq_answer(req, &res);
	}
	lockreq_free(req);
}

int
lock_revoke(struct lock_owner *o, const char *name, struct lock_result *res)
{
	struct lock_req *req;

	if (!lockreq_check_name(name, res))
		return -1;
	req = lockreq_new(OP_REVOKE, o, name, NULL);
	lockreq_send(req);
	lockdb_revoke(
	    name, (uint64_t)cf->locks.max_ttl_ms, lock_revoke_cb, req);
	return 0;
}

void
lock_owner_init(struct lock_owner *o, uint64_t id,
    const struct lock_owner_ops *ops, const char *peer)
{
	memset(o, 0, sizeof *o);
	o->id = id;
	o->ops = ops;
	o->peer = peer;
	lockhold_owner_init(o);
}

void
lock_owner_gone(struct lock_owner *o, bool vanished)
{
	struct lock_req *req = o->pending;
	struct lock_hold *h;

	if (req != NULL && req->op == OP_ACQUIRE)
		lockq_abandon(req);
	else if (req != NULL)
		lockreq_orphan(req);
	while ((h = TAILQ_FIRST(&o->holds)) != NULL) {
		/* Session and fixed locks end with their connection. */
		if (h->kind != LOCK_KEEP &&
		    !lockhold_token_busy(h->ln, h->token, h, NULL))
			lockrel_release(h->ln->name, h->token, h->fence,
			    vanished, h->valid_until_ms);
		lockhold_free(h);
	}
}

uint64_t
lock_oldest_hold_ms(void)
{
	return lockhold_oldest_ms();
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

void
lock_owner_settle(struct lock_owner *o)
{
	lockhold_settle(o);
}

const struct lock_hold *
lock_owner_hold(const struct lock_owner *o, const struct lock_hold *prev)
{
	return prev == NULL ? TAILQ_FIRST(&o->holds)
			    : TAILQ_NEXT(prev, owner_entry);
}

const char *
lock_hold_mode_word(const struct lock_hold *h)
{
	static char buf[32];

	if (h->mode == LOCK_EXCLUSIVE)
		return "";
	snprintf(buf, sizeof buf, " %s", lock_mode_name(h->mode, h->limit));
	return buf;
}

uint64_t
lock_hold_ttl_left(const struct lock_hold *h, uint64_t now_ms)
{
	return h->valid_until_ms > now_ms ? h->valid_until_ms - now_ms : 0;
}

bool
lock_owner_eof(struct lock_owner *o)
{
	struct lock_req *req = o->pending;

	if (req == NULL || !lockreq_queued(req))
		return true;
	/* A head that has not asked yet (a try of another was in Redis when
	 * it came; or a FILL, which asks along with the trier, not counted
	 * in tries) makes its one try now, as a try-once. */
	if (req->tries == 0 && req->tried_us == 0 && !req->heard &&
	    !lockreq_in_flight(req) && !req->ln->attempting &&
	    TAILQ_FIRST(&req->ln->waiters) == req) {
		lockreq_try_once(req);
		locktry_now(req);
		return true;
	}
	/* A try-once waits for nobody: it is answered once its try is made
	 * (queued behind a try of another still in Redis, say one whose
	 * wait was cancelled). */
	if (req->wait_ms == 0)
		return true;
	/* Only the first try, still in Redis, has not started to wait: not
	 * a take or a confirmation sent after an answer (tries counts only
	 * the head's attempts). */
	if (!lockreq_in_flight(req) || req->heard)
		return false;
	lockreq_try_once(req);
	return true;
}

bool
lock_owner_cancel(struct lock_owner *o)
{
	struct lock_req *req = o->pending;

	if (req == NULL || req->op != OP_ACQUIRE || req->wait_ms == 0 ||
	    !lockreq_queued(req))
		return false;
	lockreq_cancel(req);
	lockq_cancel(req);
	return true;
}

void
lock_init(struct event_base *base, const struct config *config)
{
	cf = config;
	lockreq_init(base);
	lockrel_init(base, cf, lock_released);
	lockhold_init(base, cf, lockq_kick, lockcheck_hold, lockcheck_granted);
	lockscope_init();
	lockcheck_init(base, cf);
	locktrust_init(base, cf, lockhand_forgot);
	lockdb_init(cf->redis.prefix, lockreq_broker(),
	    (uint64_t)cf->redis.command_timeout_ms, config_mark_ms(cf),
	    chaos_fault == CHAOS_NO_GRACE ? 1 : config_grace_ms(cf),
	    (uint64_t)cf->redis.clock_step_ms);
	lockdb_allow_eviction(cf->redis.allow_eviction);
	lockdb_set_trust((uint64_t)cf->redis.trust_ms);
	locktry_init(base, cf);
	locknews_init();
}

/* A graceful stop: every waiter here is told ERR SHUTDOWN. */
void
lock_stop(void)
{
	lockrel_stop();
	lockq_stop();
}

void
lock_shutdown(void)
{
	lockrel_shutdown();
	locktrust_shutdown();
	lockcheck_shutdown();
	lockscope_shutdown();
	lockreq_shutdown();
}

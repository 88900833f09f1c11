/*
 * lock_check: each hold checked in Redis. A check (check.lua) finds a
 * hold still held, with what is left of its lease (it trusts no more);
 * or put back (a stale hold, granted in an incarnation Redis no longer
 * has, in the new one's grace period, for what is left of its
 * validity); or gone (lost: revoked, stolen, or unavailable). A check
 * not answered is asked again until Redis says. It owns struct
 * lock_hold's checking and stale. Built on lock_name, lock_req and
 * lock_hold; lock_trust says when every hold is checked, lock_grant and
 * lock_news when a name's are, and lock_hold calls it through the
 * functions given to lockhold_init.
 */
#include <sys/queue.h>

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>

#include "config.h"
#include "lockdb.h"
#include "lock_check.h"
#include "lock_hold.h"
#include "lock_req.h"
#include "lock_scope.h"
#include "lock_timer.h"
#include "log.h"
#include "stats.h"
#include "util.h"

static struct {
	struct event_base *base;
	const struct config *cf;
	/* Stale holds not back by their scope's stale_until_ms are lost: due
	 * at the earliest of those (0: not armed). */
	struct event *stale_ev;
	uint64_t stale_due_ms;
} chk;

static void lockcheck_send(struct lock_req *req);

static void
lockcheck_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	lockcheck_send(arg);
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
lockcheck_cb(const struct lockdb_reply *r, void *arg)
{
	struct lock_req *req = arg;
	struct lock_hold *h = req->hold;

	lockreq_landed(req);
	if (h != NULL &&
	    (r->status == LDB_UNAVAILABLE || r->status == LDB_INTERNAL)) {
		lockreq_deadline(req, lockcheck_retry_cb,
		    lockreq_backoff(req, (uint64_t)chk.cf->locks.retry_min_ms,
			(uint64_t)chk.cf->redis.command_timeout_ms));
		return;
	}
	if (h != NULL && r->status == LDB_OK && req->again) {
		lockcheck_send(req); /* missed more since it asked */
		return;
	}
	if (h != NULL) {
		h->checking = NULL;
		if (r->status == LDB_OK)
			lockhold_left(h, req->start_ms, r->pttl);
		if (r->status == LDB_OK &&
		    req->start_ms >=
			lockscope_get(lockscope_of(h->ln))->changed_ms)
			h->stale = false; /* held (or put back) in this one */
		else if (r->status == LDB_OK && h->stale)
			lockcheck_hold(h); /* asked of the one before */
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
lockcheck_send(struct lock_req *req)
{
	struct lock_hold *h = req->hold;
	uint64_t now = mono_ms();
	char info[LOCKREQ_INFO];
	bool excl = h->mode == LOCK_EXCLUSIVE || h->mode == LOCK_FILL;
	bool restore = excl && h->stale && h->valid_until_ms > now;

	lockreq_send_at(req, now, req->sub_epoch);
	STAT_INC(confirms_total);
	if (excl)
		lockhold_info(h, info, sizeof info);
	lockdb_check(h->ln->name, h->token, h->fence,
	    restore ? h->valid_until_ms - now : 0, excl ? info : NULL,
	    lockcheck_cb, req);
}

/*
 * Messages on the release channel were missed (the subscriber was away),
 * among them perhaps a REVOKE of a hold here, or a release of it through
 * another broker, that nothing else would tell of before its lease ends
 * (a fixed or kept lock is never renewed).
 */
void
lockcheck_hold(struct lock_hold *h)
{
	struct lock_req *req;

	if ((req = h->checking) != NULL) {
		lockreq_ask_again(req); /* if in Redis; else it asks anew */
		return;
	}
	req = lockreq_new(OP_CHECK, NULL, h->ln->name, h->token);
	lockreq_for_hold(req, h, false);
	h->checking = req;
	lockcheck_send(req);
}

void
lockcheck_recheck(struct lock_name *ln)
{
	struct lock_hold *h;

	LIST_FOREACH (h, &ln->holds, name_entry)
		lockcheck_hold(h);
}

void
lockcheck_lose_holds(struct lock_name *ln)
{
	struct lock_hold *h, *next;

	for (h = LIST_FIRST(&ln->holds); h != NULL; h = next) {
		next = LIST_NEXT(h, name_entry);
		lockhold_lost(h, LOST_UNAVAILABLE);
	}
}

/* Lose ln's holds if it is in the scope asked (-1: any). */
static void
lockcheck_lose_name(struct lock_name *ln, void *arg)
{
	const int *scope = arg;

	if (*scope < 0 || lockscope_of(ln) == *scope)
		lockcheck_lose_holds(ln);
}

/* The stale timer at when (the earliest due stays). */
static void
lockcheck_stale_at(uint64_t when, uint64_t now)
{
	if (evtimer_pending(chk.stale_ev, NULL) && chk.stale_due_ms <= when)
		return;
	chk.stale_due_ms = when;
	locktimer_add(chk.stale_ev, when > now ? when - now : 0);
}

/* ln's stale holds whose scope's time to be put back is over are lost;
 * the others' scopes' times re-arm the timer. */
static void
lockcheck_stale_name(struct lock_name *ln, void *arg)
{
	const uint64_t *now = arg;
	struct lock_scope *sc = lockscope_get(lockscope_of(ln));
	struct lock_hold *h, *next;

	for (h = LIST_FIRST(&ln->holds); h != NULL; h = next) {
		next = LIST_NEXT(h, name_entry);
		if (!h->stale)
			continue;
		if (sc->stale_until_ms <= *now)
			lockhold_lost(h, LOST_UNAVAILABLE);
		else
			lockcheck_stale_at(sc->stale_until_ms, *now);
	}
}

static void
lockcheck_stale_cb(evutil_socket_t fd, short what, void *arg)
{
	uint64_t now = mono_ms();

	lockname_foreach(lockcheck_stale_name, &now);
}

/* Which holds lockcheck_confirm_name checks: in which scope (-1: any),
 * and all of them or only those not confirmed lately. */
struct lockcheck_which {
	int scope;
	bool all;
};

/* ln's holds not confirmed for half of trust_ms and not being checked
 * are checked now: with a beat every quarter of it, each is then
 * confirmed within trust_ms. A session hold is given three quarters: its
 * renewal, every lease/3 (3.3 s by default, trust_ms 5 s), confirms it
 * first. With all, every hold, one being checked asked again once
 * answered (an answer from before now says too little). */
static void
lockcheck_confirm_name(struct lock_name *ln, void *arg)
{
	uint64_t now = mono_ms(), trust = (uint64_t)chk.cf->redis.trust_ms;
	const struct lockcheck_which *w = arg;
	struct lock_hold *h;

	if (w->scope >= 0 && lockscope_of(ln) != w->scope)
		return;
	LIST_FOREACH (h, &ln->holds, name_entry) {
		uint64_t due =
		    h->kind == LOCK_SESSION ? trust * 3 / 4 : trust / 2;

		if (w->all ||
		    (h->checking == NULL && h->confirmed_ms + due <= now))
			lockcheck_hold(h);
	}
}

/* A new incarnation of the scope asked: every hold here in it asks to
 * be put back. */
static void
lockcheck_put_back_name(struct lock_name *ln, void *arg)
{
	const int *scope = arg;
	struct lock_hold *h;

	if (lockscope_of(ln) != *scope)
		return;
	LIST_FOREACH (h, &ln->holds, name_entry) {
		h->stale = true;
		lockcheck_hold(h);
	}
}

/* Nothing vouches for the holds here in scope any more (-1: in any):
 * every one is lost. */
void
lockcheck_lose_scope(int scope)
{
	lockname_foreach(lockcheck_lose_name, &scope);
}

/* Each hold in scope (-1: any) not confirmed lately is checked in Redis
 * now (all: every hold). */
void
lockcheck_confirm_scope(int scope, bool all)
{
	struct lockcheck_which w = { scope, all };

	lockname_foreach(lockcheck_confirm_name, &w);
}

/* A new incarnation of scope was learned at now: every hold here in it
 * is stale, asks to be put back, and is lost if not back in
 * stale_in_ms. */
void
lockcheck_new_incarnation(int scope, uint64_t now, uint64_t stale_in_ms)
{
	struct lock_scope *sc = lockscope_get(scope);

	sc->changed_ms = now;
	sc->stale_until_ms = now + stale_in_ms;
	lockcheck_stale_at(sc->stale_until_ms, now);
	lockname_foreach(lockcheck_put_back_name, &scope);
}

/* A grant made by the incarnation before the one learned since in its
 * scope (sent before it was learned) is stale: it asks to be put back,
 * and if the old incarnation no longer vouches for anything, it is lost
 * now. */
void
lockcheck_granted(struct lock_hold *h, uint64_t start_ms)
{
	struct lock_scope *sc = lockscope_get(lockscope_of(h->ln));

	if (start_ms < sc->changed_ms && !h->stale) {
		uint64_t now = mono_ms();

		h->stale = true;
		lockcheck_hold(h);
		lockcheck_stale_at(
		    sc->stale_until_ms > now ? sc->stale_until_ms : now, now);
	}
}

void
lockcheck_init(struct event_base *base, const struct config *cf)
{
	chk.base = base;
	chk.cf = cf;
	chk.stale_due_ms = 0;
	chk.stale_ev = locktimer_new(base, 0, lockcheck_stale_cb, NULL);
}

void
lockcheck_shutdown(void)
{
	if (chk.stale_ev == NULL)
		return;
	event_free(chk.stale_ev);
	chk.stale_ev = NULL;
}

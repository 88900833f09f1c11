/*
 * lock_release: releases nobody waits for, and the ones Redis did not hear of.
 * The list of owed releases is bounded by limits.max_waiters; past that
 * the oldest is left to its lease, which ends it anyway.
 */
#include <sys/queue.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "chaos.h"
#include "config.h"
#include "lockdb.h"
#include "lock_release.h"
#include "lock_timer.h"
#include "log.h"
#include "proto.h"
#include "stats.h"
#include "util.h"
#include "xmalloc.h"

/* A release in Redis, or owed to it. */
struct lockrel {
	TAILQ_ENTRY(lockrel) entry; /* in rel.owed, or rel.sending */
	bool cancelled;		    /* the token asked again: not redone */
	uint64_t lease_end_ms;	    /* 0: unknown, ask Redis */
	enum lockdb_done done;	    /* a client's RELEASE: FILL waiters' DONE */
	uint64_t fence;		    /* the grant meant; 0: any of the token's */
	uint64_t sent_ms;	    /* when it was last sent */
	char token[PROTO_TOKEN_MAX + 1];
	char name[];
};

static struct {
	const struct config *cf;
	lockrel_released_fn *released;
	TAILQ_HEAD(, lockrel) owed;
	TAILQ_HEAD(, lockrel) sending; /* in Redis now */
	unsigned nowed;
	struct event *retry_ev; /* try the owed ones again while any are left */
	bool stopping;
} rel;

static struct lockrel *
lockrel_new(
    const char *name, const char *token, uint64_t fence, uint64_t lease_end_ms)
{
	size_t len = strlen(name);
	struct lockrel *r = xcalloc(1, sizeof *r + len + 1);

	memcpy(r->name, name, len + 1);
	snprintf(r->token, sizeof r->token, "%s", token);
	r->fence = fence;
	r->lease_end_ms = lease_end_ms;
	return r;
}

/* How long a release's DONE mark stays for FILL waiters: past their next
 * try (as long as a waiter marks the name). */
static uint64_t
lockrel_done_ms(void)
{
	return config_mark_ms(rel.cf);
}

static void
lockrel_retry_later(void)
{
	locktimer_add(rel.retry_ev, (uint64_t)rel.cf->redis.command_timeout_ms);
}

/* Keep r to do when Redis is back; r is the list's now. */
static void
lockrel_owe(struct lockrel *r)
{
	struct lockrel *old;

	TAILQ_INSERT_TAIL(&rel.owed, r, entry);
	/* Redis may answer again without a reconnect (it was only slow). */
	if (!evtimer_pending(rel.retry_ev, NULL))
		lockrel_retry_later();
	if (++rel.nowed > (unsigned)rel.cf->limits.max_waiters) {
		old = TAILQ_FIRST(&rel.owed);
		TAILQ_REMOVE(&rel.owed, old, entry);
		rel.nowed--;
		log_warnx(
		    "lock %s: too many releases waiting for Redis; this one is left to its lease",
		    old->name);
		free(old);
	}
}

void
lockrel_remember(const char *name, const char *token, uint64_t fence,
    uint64_t lease_end_ms, enum lockdb_done done)
{
	struct lockrel *r;

	if (rel.stopping)
		return;
	r = lockrel_new(name, token, fence, lease_end_ms);
	r->done = done;
	if (fence == 0) /* lockreq_free_undo's: an ACQUIRE not answered */
		log_info(
		    "lock %s: an ACQUIRE Redis did not answer may have been granted; it is released when Redis answers",
		    name);
	else
		log_info(
		    "lock %s: Redis unavailable; will release it when Redis is back",
		    name);
	lockrel_owe(r);
}

/* A release sent: in rel.sending until Redis answers. */
static void
lockrel_send(struct lockrel *r, uint64_t fence, enum lockdb_done done,
    uint64_t done_ms, lockdb_cb *cb)
{
	TAILQ_INSERT_TAIL(&rel.sending, r, entry);
	r->sent_ms = mono_ms();
	lockdb_release(r->name, r->token, fence, done, done_ms, cb, r);
}

static void
lockrel_done_cb(const struct lockdb_reply *r, void *arg)
{
	struct lockrel *req = arg;

	TAILQ_REMOVE(&rel.sending, req, entry);
	if (req->cancelled) {
		/* Not ours to redo: the token asked for the lock again. */
	} else if (r->status == LDB_OK) {
		STAT_INC(releases_total);
		rel.released(req->name, r, req->sent_ms);
	} else if (r->status == LDB_UNAVAILABLE && !rel.stopping) {
		lockrel_owe(req);
		return;
	}
	free(req);
}

/* Release for nobody in particular; a vanished holder's lock is kept for
 * lock_delay_ms instead (Chubby's lock-delay), by shortening its lease. */
void
lockrel_release(const char *name, const char *token, uint64_t fence,
    bool vanished, uint64_t lease_end_ms)
{
	struct lockrel *req = lockrel_new(name, token, fence, lease_end_ms);
	uint64_t delay = (uint64_t)rel.cf->locks.lock_delay_ms;

	if (vanished && delay > 0) {
		TAILQ_INSERT_TAIL(&rel.sending, req, entry);
		lockdb_keep(name, token, fence, delay, lockrel_done_cb, req);
	} else
		lockrel_send(req, fence, LDB_DONE_NO, 0, lockrel_done_cb);
}

/*
 * The token asks for name again (an ACQUIRE is being sent): a release
 * of it owed or in Redis must not be done after that ACQUIRE, or it would
 * delete the grant it makes (the same grant, with the same fence, when
 * the release never ran). One in Redis now runs before the ACQUIRE, so
 * it is only not redone.
 */
void
lockrel_forget(const char *name, const char *token)
{
	struct lockrel *r, *next;

	if (chaos_fault == CHAOS_OWED_BLIND)
		return;
	for (r = TAILQ_FIRST(&rel.owed); r != NULL; r = next) {
		next = TAILQ_NEXT(r, entry);
		if (strcmp(r->token, token) != 0 || strcmp(r->name, name) != 0)
			continue;
		TAILQ_REMOVE(&rel.owed, r, entry);
		rel.nowed--;
		free(r);
	}
	TAILQ_FOREACH (r, &rel.sending, entry)
		if (strcmp(r->token, token) == 0 && strcmp(r->name, name) == 0)
			r->cancelled = true;
}

/* An owed release, done late: say whether it was still needed. */
static void
lockrel_late_cb(const struct lockdb_reply *r, void *arg)
{
	struct lockrel *req = arg;

	TAILQ_REMOVE(&rel.sending, req, entry);
	if (req->cancelled) {
		/* The token asked for the lock again: see lockrel_forget. */
	} else if (r->status == LDB_OK) {
		STAT_INC(releases_total);
		log_info("lock %s: released after Redis came back", req->name);
		rel.released(req->name, r, req->sent_ms);
	} else if (r->status == LDB_NO)
		log_info("lock %s: its lease ran out before Redis came back",
		    req->name);
	else {
		lockrel_owe(req);
		return;
	}
	free(req);
}

/* Redis is back (or was only slow): do the releases we owe whose names
 * it can serve (on a cluster, those whose master is up); the others wait
 * for a later try. */
static void
lockrel_redis_up(void *arg)
{
	struct lockrel *r, *next;
	uint64_t now = mono_ms();

	for (r = TAILQ_FIRST(&rel.owed); r != NULL; r = next) {
		next = TAILQ_NEXT(r, entry);
		if (!lockdb_up_for(r->name)) {
			lockrel_retry_later();
			continue;
		}
		TAILQ_REMOVE(&rel.owed, r, entry);
		rel.nowed--;
		if (r->lease_end_ms != 0 && now >= r->lease_end_ms) {
			log_info(
			    "lock %s: its lease ran out before Redis came back",
			    r->name);
			free(r);
		} else
			lockrel_send(r,
			    chaos_fault == CHAOS_OWED_BLIND ? 0 : r->fence,
			    r->done, lockrel_done_ms(), lockrel_late_cb);
	}
}

static void
lockrel_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	lockrel_redis_up(NULL);
}

void
lockrel_init(struct event_base *base, const struct config *cf,
    lockrel_released_fn *released)
{
	memset(&rel, 0, sizeof rel);
	rel.cf = cf;
	rel.released = released;
	TAILQ_INIT(&rel.owed);
	TAILQ_INIT(&rel.sending);
	rel.retry_ev = locktimer_new(base, 0, lockrel_retry_cb, NULL);
	lockdb_on_connect(lockrel_redis_up, NULL);
}

void
lockrel_stop(void)
{
	rel.stopping = true;
}

void
lockrel_shutdown(void)
{
	struct lockrel *r;

	while ((r = TAILQ_FIRST(&rel.owed)) != NULL) {
		TAILQ_REMOVE(&rel.owed, r, entry);
		log_warnx(
		    "lock %s: never released (Redis unavailable); its lease will end it",
		    r->name);
		free(r);
	}
	if (rel.retry_ev != NULL)
		event_free(rel.retry_ev);
	rel.retry_ev = NULL;
}

/*
 * lock_check: holds checked in Redis: when news was missed, a renewal
 * was refused, the beat finds one not confirmed lately, Redis's clock
 * stepped, or a new incarnation made them stale. Built on lock_name,
 * lock_req and lock_hold; lock_trust, lock_grant, lock_news and lock
 * call it.
 */
#ifndef LB_LOCK_CHECK_H
#define LB_LOCK_CHECK_H

#include <stdbool.h>
#include <stdint.h>

struct config;
struct event_base;
struct lock_hold;
struct lock_name;

void lockcheck_init(struct event_base *base, const struct config *cf);
/* Free the stale holds' timer (the last step of a shutdown). */
void lockcheck_shutdown(void);
/* Ask Redis whether h is still held (a check in Redis asks again once
 * answered). */
void lockcheck_hold(struct lock_hold *h);
/* h was granted by a request sent at start_ms: stale if a new
 * incarnation was learned since. */
void lockcheck_granted(struct lock_hold *h, uint64_t start_ms);
/* The subscriber missed messages: ask Redis whether ln's holds here still
 * hold it; those that do not are lost (revoked or stolen). */
void lockcheck_recheck(struct lock_name *ln);
/* Nothing vouches for any hold here any more: every one is lost. */
void lockcheck_lose_all(void);
/* Each hold not confirmed lately is checked in Redis now (all: every
 * hold, one being checked asked again once answered). */
void lockcheck_confirm_all(bool all);
/* A new incarnation was learned at now: every hold is stale, asks to be
 * put back, and is lost if not back in stale_in_ms. */
void lockcheck_new_incarnation(uint64_t now, uint64_t stale_in_ms);

#endif

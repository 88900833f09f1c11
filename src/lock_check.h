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
/* Nothing vouches for ln's holds any more: each one is lost. */
void lockcheck_lose_holds(struct lock_name *ln);
/* Nothing vouches for the holds here in scope (lock_scope.h; -1: in
 * any) any more: every one is lost. */
void lockcheck_lose_scope(int scope);
/* Each hold in scope (-1: any) not confirmed lately is checked in Redis
 * now (all: every such hold, one being checked asked again once
 * answered). */
void lockcheck_confirm_scope(int scope, bool all);
/* A new incarnation of scope was learned at now: every hold here in it is
 * stale, asks to be put back, and is lost if not back in stale_in_ms. */
void lockcheck_new_incarnation(int scope, uint64_t now, uint64_t stale_in_ms);

#endif

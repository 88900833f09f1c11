/*
 * lock_trust: trust in Redis itself: the beat that asks which
 * incarnation Redis serves, the holds' trust running out without an
 * answer, a new incarnation, and Redis's clock stepped forward. Built on
 * lock_name and lock_check; lock starts it.
 */
#ifndef LB_LOCK_TRUST_H
#define LB_LOCK_TRUST_H

struct config;
struct event_base;

/* Redis forgot the lock data of a scope (a new incarnation;
 * lock_scope.h): its queues too. */
typedef void locktrust_forgot_fn(int scope);
void locktrust_init(struct event_base *base, const struct config *cf,
    locktrust_forgot_fn *forgot);
/* Free the trust timers (the last step of a shutdown). */
void locktrust_shutdown(void);

#endif

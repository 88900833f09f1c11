/*
 * lock_queue: the local FIFO of each name's waiting ACQUIREs, its trier,
 * its back-off and retry timer, and each waiter's WAIT deadline. Built on
 * lock_name, lock_req, lock_hold and lock_release; lock_fill, lock_grant,
 * lock_handover, lock_try, lock_news and lock build on it. The trier's
 * try (lock_try) is called through the function given to lockq_init.
 */
#ifndef LB_LOCK_QUEUE_H
#define LB_LOCK_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

struct config;
struct event_base;
struct lock_name;
struct lock_req;

/* The trier of ln tries now (lock_try's locktry_attempt). */
typedef void lockq_attempt_fn(struct lock_name *ln);
void lockq_init(struct event_base *base, const struct config *cf,
    lockq_attempt_fn *attempt);
/* Queue an ACQUIRE (NEW to QUEUED): its ticket and WAIT deadline. */
void lockq_enqueue(struct lock_req *req);
/* The waiter whose tries keep ln's queue here going: the first with a
 * ticket, else the first; NULL when nobody waits. */
struct lock_req *lockq_trier(struct lock_name *ln);
/* req leaves its queue, granted or not (its ticket and a hand-over it
 * was to confirm go back to Redis when not granted). */
void lockq_leave(struct lock_req *req, bool granted);
/* req leaves its queue without a grant, if it is in it. */
void lockq_dequeue(struct lock_req *req);
/* Whether a hold, or a request other than req, goes by token on ln. */
bool lockq_token_used(
    struct lock_name *ln, const char *token, const struct lock_req *req);
/* CANCEL of a queued waiter: answered CANCELLED now (req may be freed). */
void lockq_cancel(struct lock_req *req);
/* Nobody wants this acquire's answer any more; free it unless in Redis. */
void lockq_abandon(struct lock_req *req);
/* A release of ln was seen: the trier tries at once, back-off reset. */
void lockq_kick(struct lock_name *ln);
/* The trier tries now with its back-off reset (a new waiter is it). */
void lockq_try_first(struct lock_name *ln);
/* The trier tries now, or once its try in Redis is answered. */
void lockq_try(struct lock_name *ln);
/* The trier's try goes to Redis; it was answered. */
void lockq_try_begins(struct lock_name *ln);
void lockq_try_ends(struct lock_name *ln);
/* After the trier's answer: the next try in next ms, or at once if a
 * release was seen meanwhile. */
void lockq_try_after(struct lock_name *ln, uint64_t next);
/* The trier's next try when the holder's lease runs out (pttl), or after
 * the jittered back-off, whichever is first. */
void lockq_schedule(struct lock_name *ln, uint64_t pttl);
/* The trier's ticket waits behind a holder: the longest back-off. */
void lockq_backoff_longest(struct lock_name *ln);
/* The trier tries again some time, unless a try or its timer is on. */
void lockq_keep_trying(struct lock_name *ln);
/* Cancel the trier's scheduled try. */
void lockq_retry_stop(struct lock_name *ln);
/* SIGTERM: every waiter is told ERR SHUTDOWN; no more waiting. */
void lockq_stop(void);
bool lockq_stopping(void);
/* Waiters here, on every name. */
unsigned lockq_waiters(void);
/* Counts the subscriptions made: a request sent in an earlier one may
 * have missed news. _next: a new one was made. */
uint64_t lockq_sub_epoch(void);
void lockq_sub_epoch_next(void);

#endif

/*
 * lock_queue: the queues of waiting ACQUIREs, one per name, whose heads
 * alone ask Redis. Built on lock_name, lock_req, lock_hold and
 * lock_release; lock calls it.
 */
#ifndef LB_LOCK_QUEUE_H
#define LB_LOCK_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

struct config;
struct event_base;
struct lock_name;
struct lock_req;
struct lockdb_reply;

void lockq_init(struct event_base *base, const struct config *cf);
/* Queue an ACQUIRE; a new head tries at once (or waits for a hold here). */
void lockq_enqueue(struct lock_req *req);
/* CANCEL of a queued waiter: answered CANCELLED now (req may be freed). */
void lockq_cancel(struct lock_req *req);
/* Nobody wants this acquire's answer any more; free it unless in Redis. */
void lockq_abandon(struct lock_req *req);
/* A release of ln was seen: the head tries at once. */
void lockq_kick(struct lock_name *ln);
/* Redis forgot its lock data: every waiter takes its place again. */
void lockq_forgot(void);
/* The head's try, now. */
void lockq_attempt(struct lock_name *ln);
/* Granted in Redis: the owner's hold and answer (or, if it left, the lock
 * goes straight back). */
void lockq_granted(struct lock_req *req, uint64_t fence);
/* The answer to the head's try (or to a hand-over made for it). */
void lockq_attempt_cb(const struct lockdb_reply *r, void *arg);
/* A grant answered after its validity ended is given back (fence: the
 * one it was granted); true if so. */
bool lockq_grant_late(struct lock_req *req, uint64_t fence);
/* Answer ERR ARGS for an ACQUIRE held in another mode (lockdb CONFLICT). */
void lockq_conflict(struct lock_req *req, const struct lockdb_reply *r);
/* Cancel the head's scheduled try. */
void lockq_retry_stop(struct lock_name *ln);
/* req, first in its queue, has never asked: it asks now (as the trier, or
 * a FILL along with the trier, or on its own while the trier is in
 * Redis). */
void lockq_try_now(struct lock_req *req);
/* A release handed name to this broker's ticket n, as fence under token:
 * sent_ms is when this broker sent that release, or 0 when another broker
 * made it, for ttl_ms (0: not said; the grant is confirmed first). */
void lockq_handed(const char *name, uint64_t ticket, uint64_t fence,
    const char *token, uint64_t sent_ms, uint64_t ttl_ms);
/* SIGTERM: every waiter is told ERR SHUTDOWN; no more waiting. */
void lockq_stop(void);
bool lockq_stopping(void);
/* Waiters here, on every name. */
unsigned lockq_waiters(void);
/* Counts the subscriptions made: a request sent in an earlier one may
 * have missed news. */
uint64_t lockq_sub_epoch(void);

#endif

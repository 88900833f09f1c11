/*
 * lockq: the queues of waiting ACQUIREs, one per name, whose heads alone
 * ask Redis. Built on lockreq, lockhold and lockrel; lock calls it.
 */
#ifndef LB_LOCKQ_H
#define LB_LOCKQ_H

#include <stdbool.h>
#include <stdint.h>

struct lock_name;
struct lock_req;
struct lockdb_reply;

void lockq_init(void);
/* Queue an ACQUIRE; a new head tries at once (or waits for a hold here). */
void lockq_enqueue(struct lock_req *req);
/* Nobody wants this acquire's answer any more; free it unless in Redis. */
void lockq_abandon(struct lock_req *req);
/* A release of ln was seen: the head tries at once. */
void lockq_kick(struct lock_name *ln);
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
/* The head a RELEASE here may hand the lock to in the same script, now
 * counted as trying; NULL if none may. */
struct lock_req *lockq_handover_claim(struct lock_name *ln);
/* SIGTERM: every waiter is told ERR SHUTDOWN. */
void lockq_stop(void);

#endif

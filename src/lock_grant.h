/*
 * lock_grant: what a grant comes to: the hold and the owner's answer, a
 * late grant given back, a conflict of modes, and the wait for the
 * replicas. Built on lock_name, lock_req, lock_hold, lock_release and
 * lock_queue; lock_handover, lock_try and lock call it.
 */
#ifndef LB_LOCK_GRANT_H
#define LB_LOCK_GRANT_H

#include <stdbool.h>
#include <stdint.h>

#include "lockdb.h"

struct config;
struct lock_req;

/* trier_cb and side_cb answer a grant once replicated: the trier's try
 * (TRYING), or any other (SENT). */
void lockgrant_init(
    const struct config *cf, lockdb_cb *trier_cb, lockdb_cb *side_cb);
/* Granted in Redis: the owner's hold and answer (or, if it left, the
 * lock goes straight back). */
void lockgrant_granted(struct lock_req *req, uint64_t fence);
/* A grant answered after its validity ended is given back (fence: the
 * one it was granted); true if so. */
bool lockgrant_late(struct lock_req *req, uint64_t fence);
/* A try-once's grant came after its lease ended: answered so. */
void lockgrant_answer_late(struct lock_req *req);
/* Answer ERR ARGS for an ACQUIRE held in another mode (lockdb CONFLICT). */
void lockgrant_conflict(struct lock_req *req, const struct lockdb_reply *r);
/* Granted with fence: it counts once redis.wait_replicas replicas have
 * it; else it is released and answered ERR UNAVAILABLE. */
void lockgrant_replicate(struct lock_req *req, uint64_t fence);

#endif

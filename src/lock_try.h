/*
 * lock_try: the trier's tries and their answers, and the start of an
 * ACQUIRE's wait. Built on lock_name, lock_req, lock_hold, lock_queue,
 * lock_fill, lock_grant and lock_handover; lock calls it.
 */
#ifndef LB_LOCK_TRY_H
#define LB_LOCK_TRY_H

struct config;
struct event_base;
struct lock_name;
struct lock_req;

/* Also sets up lock_queue, lock_grant and lock_handover. */
void locktry_init(struct event_base *base, const struct config *cf);
/* An ACQUIRE waits in its name's queue; a new trier tries at once. */
void locktry_wait(struct lock_req *req);
/* The trier of ln tries now. */
void locktry_attempt(struct lock_name *ln);
/* req, first in its queue, has never asked: it asks now (as the trier, or
 * a FILL along with the trier, or on its own while the trier is in
 * Redis). */
void locktry_now(struct lock_req *req);

#endif

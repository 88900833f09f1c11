/*
 * lock_fill: FILL waiting: which leader each FILL waiter waits on, and
 * DONE when that leader finishes. Built on lock_name, lock_req,
 * lock_hold and lock_queue; lock_grant, lock_handover and lock_try call
 * it.
 */
#ifndef LB_LOCK_FILL_H
#define LB_LOCK_FILL_H

#include <stdint.h>

struct lock_name;
struct lock_req;

/* A FILL try sent at tried_us was refused by the leader with fence: the
 * FILL waiters of ln that had asked by then wait on it. */
void lockfill_watch(struct lock_name *ln, uint64_t fence, uint64_t tried_us);
/* The leader a new FILL waiter of ln waits on (0: none here). */
uint64_t lockfill_leader(struct lock_name *ln);
/* The leader with fence done finished: its FILL waiters are told DONE
 * (all but head, which its caller frees, are freed). */
void lockfill_done(struct lock_req *head, uint64_t done);

#endif

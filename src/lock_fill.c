/*
 * lock_fill: FILL waiting. A FILL waiter takes no ticket: it waits on a
 * leader (the holder whose fence it watches) and is told DONE when that
 * leader finishes. Built on lock_name, lock_req, lock_hold and lock_queue.
 */
#include <sys/queue.h>

#include "lock_fill.h"
#include "lock_hold.h"
#include "lock_queue.h"
#include "lock_req.h"
#include "stats.h"

/*
 * A FILL try sent at tried_us was refused by the leader with this fence:
 * the FILL waiters here that had asked by then wait on that leader (or a
 * later one). One that asked later is not told DONE for it: its own try,
 * or the next one, says which leader it waits on.
 */
void
lockfill_watch(struct lock_name *ln, uint64_t fence, uint64_t tried_us)
{
	struct lock_req *r;

	TAILQ_FOREACH (r, &ln->waiters, queue_entry)
		if (r->mode == LOCK_FILL && r->wait_ms != 0 &&
		    r->created_us <= tried_us && r->watch < fence)
			lockreq_watch(r, fence);
}

/* A new FILL waiter waits on the leader here, unless it is releasing. */
uint64_t
lockfill_leader(struct lock_name *ln)
{
	struct lock_hold *h;
	uint64_t w = 0;

	LIST_FOREACH (h, &ln->holds, name_entry)
		if (h->mode == LOCK_FILL && !h->releasing && h->fence > w)
			w = h->fence;
	return w;
}

/* A FILL leader finished (done is its fence): every FILL waiter here that
 * waited on it, or on an earlier one, is told DONE. head is freed by its
 * caller. */
void
lockfill_done(struct lock_req *head, uint64_t done)
{
	struct lock_req *r, *next;

	for (r = TAILQ_FIRST(&head->ln->waiters); r != NULL; r = next) {
		next = TAILQ_NEXT(r, queue_entry);
		if (r->mode != LOCK_FILL || r->wait_ms == 0 || r->watch == 0 ||
		    r->watch > done)
			continue;
		STAT_INC(fills_done_total);
		lockq_dequeue(r);
		lockreq_answer_status(r, LOCK_DONE);
		if (r != head && !lockreq_in_flight(r))
			lockreq_free_undo(r);
	}
}

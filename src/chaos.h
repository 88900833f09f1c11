/*
 * chaos: deliberately broken variants of the broker, so that tests/chaos can
 * show its checkers catch them. They exist only in a build configured with
 * -Dchaos_faults=true, and act only when LOCKBROKER_CHAOS_FAULT names one;
 * in every other build chaos_fault is the constant CHAOS_NONE and the
 * compiler drops the broken paths.
 */
#ifndef LB_CHAOS_H
#define LB_CHAOS_H

#include <stddef.h>

#include "lb_build.h"

enum chaos_fault {
	CHAOS_NONE,
	CHAOS_NO_FENCE,		 /* every grant reports fence 1 */
	CHAOS_BLIND_RELEASE,	 /* a release deletes whatever token holds it */
	CHAOS_NO_VALIDITY,	 /* a grant that came too late is answered OK */
	CHAOS_NO_LIMIT,		 /* LIMIT <n> admits any number of holders */
	CHAOS_OWED_BLIND,	 /* an owed release compares the token only,
				    and an ACQUIRE of the token keeps it */
	CHAOS_NO_FOREIGN_NOTICE, /* a grant released or shortened through
				    another broker tells its holders nothing */
	CHAOS_NO_TICKETS,	 /* waiters take no ticket: each
				    broker's queue is its own again */
	CHAOS_NO_GRACE,		 /* a new incarnation of the lock data grants
				    again after 1 ms, not trust_ms, and
				    the holds here are not asked again */
	CHAOS_NO_CLOCK_FENCE,	 /* a fence is its counter + 1 only, never
				    Redis's clock: a forgotten counter
				    starts again at 1 */
	CHAOS_NO_CONFIRM,	 /* holds are not confirmed in Redis every
				    trust_ms, nor after Redis's clock ran
				    ahead */
	CHAOS_NO_EVICTION_CHECK, /* keys Redis evicted make no new
				    incarnation */
	CHAOS_LOCK_KEY_ONLY,	 /* scripts are passed only the lock key
				    and the marker, and name a name's other
				    keys themselves (undeclared) */
	CHAOS_ONE_SCOPE,	 /* on a cluster, a new incarnation of any
				    slot puts back the holds of slot 0's
				    names, not of that slot's (as one
				    incarnation kept in one shard would) */
};

#if LB_CHAOS_FAULTS
extern enum chaos_fault chaos_fault;
/* Read LOCKBROKER_CHAOS_FAULT; returns its name, or NULL for none. */
const char *chaos_init(void);
#else
#define chaos_fault CHAOS_NONE
static inline const char *
chaos_init(void)
{
	return NULL;
}
#endif

#endif

/*
 * lock_scope: what the engine knows of each scope of the lock data: the
 * whole of one Redis (scope 0), or each slot of a cluster, whose names
 * have an incarnation of their own (docs/protocol.md §8): when it last
 * vouched for the holds in it, when a new one was learned and until when
 * its stale holds may be put back, and Redis's clock as its answers
 * showed it. lock_trust writes the vouching and the clock, lock_check
 * the rest. An entry is made on first use and lives until shutdown.
 * Built on lock_name.
 */
#ifndef LB_LOCK_SCOPE_H
#define LB_LOCK_SCOPE_H

#include <stdbool.h>
#include <stdint.h>

struct lock_name;

struct lock_scope {
	int scope;
	/* lock_trust.c: when the last vouching answer (or grant) was sent;
	 * Redis's clock against ours at the last answer (locktrust_clock). */
	uint64_t vouched_ms;
	bool clock_known;
	int64_t clock_hi;
	uint64_t clock_sent_ms;
	uint64_t clock_ahead_ms;
	unsigned busy; /* the beat that last found holds or waiters in it */
	/* lock_check.c: when a new incarnation was learned (0: never), and
	 * until when its stale holds may be put back (0: none are). */
	uint64_t changed_ms;
	uint64_t stale_until_ms;
};

void lockscope_init(void);
void lockscope_shutdown(void);
/* The scope's entry, made if needed; _find: NULL if none. */
struct lock_scope *lockscope_get(int scope);
struct lock_scope *lockscope_find(int scope);
/* The scope of a name's lock data. */
int lockscope_of(const struct lock_name *ln);
/* fn(sc, arg) for every entry made. */
void lockscope_foreach(void (*fn)(struct lock_scope *, void *), void *arg);

#endif

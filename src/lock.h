/*
 * lock: the lock engine's entry points. It keeps what this broker's clients
 * hold, runs the Lua scripts through lockdb, and tells owners what happened
 * through the callbacks in struct lock_owner_ops. It never touches sockets,
 * so the unit tests can drive it. The types its callers see are declared
 * by the modules that own them: struct lock_owner and struct lock_result
 * in lock_req.h, struct lock_hold in lock_hold.h.
 */
#ifndef LB_LOCK_H
#define LB_LOCK_H

#include <sys/queue.h>

#include <stdbool.h>
#include <stdint.h>

#include "lock_hold.h"
#include "lock_req.h"
#include "util.h"

struct event_base;
struct config;

struct lock_acquire_args {
	uint64_t ttl_ms; /* 0: a session lock on locks.lease_ms */
	int64_t wait_ms; /* 0 = try once; -1 = forever */
	bool keep;
	const char *token; /* NULL: the broker makes one */
	enum lock_mode mode;
	unsigned limit; /* LOCK_LIMIT: 1..LOCK_LIMIT_MAX */
};

#define LOCK_LIMIT_MAX 10000

void lock_init(struct event_base *base, const struct config *cf);
/* SIGTERM: answer every waiter ERR SHUTDOWN, refuse new ACQUIREs. */
void lock_stop(void);
void lock_shutdown(void);
/*
 * The owner's input ended, so it can no longer cancel a wait by leaving:
 * an ACQUIRE on its first try becomes a try-once. Returns false when the
 * ACQUIRE already waits (the owner should be treated as gone).
 */
bool lock_owner_eof(struct lock_owner *o);
/*
 * CANCEL: the owner's ACQUIRE or FILL that waits is answered CANCELLED now,
 * as if its WAIT ran out (a try of it still in Redis that is granted is
 * given back). Nothing else of the owner changes. Returns whether there was
 * such a wait (a try-once is none).
 */
bool lock_owner_cancel(struct lock_owner *o);

void lock_owner_init(struct lock_owner *o, uint64_t id,
    const struct lock_owner_ops *ops, const char *peer);
/*
 * The owner is going away: leave the queue, release what it held. When it
 * vanished (no QUIT) the locks are kept for locks.lock_delay_ms first.
 */
void lock_owner_gone(struct lock_owner *o, bool vanished);

/*
 * Requests. Each returns 0 when it went to Redis (ops->done follows), or
 * fills *res and returns -1 when it was answered at once.
 */
int lock_acquire(struct lock_owner *o, const char *name,
    const struct lock_acquire_args *a, struct lock_result *res);
int lock_release(struct lock_owner *o, const char *name, const char *token,
    struct lock_result *res);
int lock_extend(struct lock_owner *o, const char *name, uint64_t ttl_ms,
    const char *token, struct lock_result *res);
int lock_status(
    struct lock_owner *o, const char *name, struct lock_result *res);
/* Whether a holder of name has fence (and token, if not NULL). */
int lock_validate(struct lock_owner *o, const char *name, uint64_t fence,
    const char *token, struct lock_result *res);
int lock_who(struct lock_owner *o, const char *name, struct lock_result *res);
/* Take name from all its holders (the caller checked the right to). */
int lock_revoke(
    struct lock_owner *o, const char *name, struct lock_result *res);

uint64_t lock_oldest_hold_ms(void);

const char *lock_kind_name(enum lock_kind kind);
const char *lock_hold_name(const struct lock_hold *h);
/* o's holds whose validity has passed are lost now (EVENT LOST), as their
 * timers would have: after a pause those run a loop turn late, and a
 * command that reads the holds (LOCKS) must not count one. */
void lock_owner_settle(struct lock_owner *o);
/* o's holds in grant order: the first after prev (NULL: the first). */
const struct lock_hold *lock_owner_hold(
    const struct lock_owner *o, const struct lock_hold *prev);
/* LOCKS's mode word with its space: "" for exclusive, else " SHARED",
 * " FILL" or " LIMIT=<n>". */
const char *lock_hold_mode_word(const struct lock_hold *h);
/* Milliseconds of trusted validity left (0 when past it). */
uint64_t lock_hold_ttl_left(const struct lock_hold *h, uint64_t now_ms);

#endif

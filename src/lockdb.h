/*
 * lockdb: the Redis side of a lock — the key layout of DESIGN.md §5 and the
 * Lua scripts that make every decision atomic — with replies parsed into a
 * plain struct. It knows nothing of owners, holds or queues.
 */
#ifndef LB_LOCKDB_H
#define LB_LOCKDB_H

#include <stdint.h>

enum lockdb_status {
	LDB_OK,		 /* granted / released / extended / held (STATUS) */
	LDB_NO,		 /* held by another (ACQUIRE), not ours, or free */
	LDB_UNAVAILABLE, /* no answer in time, or Redis cannot serve */
	LDB_INTERNAL,	 /* an answer that should not happen */
};

struct lockdb_reply {
	enum lockdb_status status;
	uint64_t fence; /* ACQUIRE, HANDOVER granted; STATUS held */
	uint64_t pttl;	/* ACQUIRE refused: the holder's ms left; STATUS held */
	const char *busy; /* UNAVAILABLE from an error reply: its code word */
};

typedef void lockdb_cb(const struct lockdb_reply *, void *arg);

void lockdb_init(const char *prefix);
/* The pub/sub channel releases are announced on. */
const char *lockdb_channel(void);

/* Grant if free (or if token holds it already: same fence back). Refused,
 * mark_ms > 0 marks the name as waited for that long. */
void lockdb_acquire(const char *name, const char *token, uint64_t ttl_ms,
    uint64_t mark_ms, lockdb_cb *cb, void *arg);
/* Compare-and-delete, announcing the release if the name is waited for. */
void lockdb_release(
    const char *name, const char *token, lockdb_cb *cb, void *arg);
/* Compare, then hand the lock to next with its own fence (reply's fence);
 * never free in between. */
void lockdb_handover(const char *name, const char *token, const char *next,
    uint64_t ttl_ms, lockdb_cb *cb, void *arg);
/* Compare-and-PEXPIRE. */
void lockdb_extend(const char *name, const char *token, uint64_t ttl_ms,
    lockdb_cb *cb, void *arg);
/* Held (with pttl and fence) or free. */
void lockdb_status(const char *name, lockdb_cb *cb, void *arg);

/* WAIT for replicas after a write; the reply's fence is how many acked. */
void lockdb_wait(const char *name, int replicas, uint64_t timeout_ms,
    lockdb_cb *cb, void *arg);

#endif

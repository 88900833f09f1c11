/*
 * lock_name: the name table. Each name this broker has anything to do with
 * (holds, waiters, requests in Redis) has one entry, alive while something
 * refers to it. It also gives memory back after a burst. Depends on
 * nothing else in the engine.
 */
#ifndef LB_LOCK_NAME_H
#define LB_LOCK_NAME_H

#include <sys/queue.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct lock_hold;
struct lock_req;

/* Per name: the local holds and the local queue, alive while referenced. */
struct lock_name {
	LIST_ENTRY(lock_name) entry;
	LIST_HEAD(, lock_hold) holds;
	TAILQ_HEAD(, lock_req) waiters;
	/* In Redis without a place in the queue: same-token ACQUIREs (they
	 * keep their token busy) and RELEASEs (an ACQUIRE of the token makes
	 * them not redone). */
	LIST_HEAD(, lock_req) asking;
	unsigned refs;
	/* The queue's trier (written in lock_queue.c alone). */
	struct event *retry_ev; /* the head's next attempt; made when needed */
	uint64_t backoff_ms;
	bool attempting; /* the head's attempt is in Redis */
	bool kicked;	 /* a release was seen while it was */
	/* The rest retake their places after its next try (lock_handover.c
	 * alone). */
	bool retaking;
	/* News (lock_news.c alone): the last REVOKE's fence heard of (0:
	 * none), and fences another broker released or shortened. */
	uint64_t revoked;
	uint64_t heard[4];
	unsigned nheard;
	char name[];
};

void lockname_init(struct event_base *base);
void lockname_shutdown(void);

/* The entry for name, or NULL; _ref makes it if needed and refers to it. */
struct lock_name *lockname_find(const char *name);
struct lock_name *lockname_ref(const char *name);
/* Another reference to an entry the caller has (while it works on it). */
void lockname_pin(struct lock_name *ln);
void lockname_unref(struct lock_name *ln);
/* fn(ln, arg) for every entry; ln is pinned while fn runs, and fn may
 * unref entries (the table keeps its size until the walk is done). */
void lockname_foreach(void (*fn)(struct lock_name *, void *), void *arg);

/* The table's size now (tests). */
size_t lockname_buckets(void);

/* Requests alive now (lock_req says), for giving memory back. */
void lockname_reqs(size_t n);

#endif

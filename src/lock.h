/*
 * lock: the lock engine. It keeps what this broker's clients hold, runs the
 * Lua scripts through lockdb, and tells owners what happened through the
 * callbacks in struct lock_owner_ops. It never touches sockets, so the unit
 * tests can drive it.
 */
#ifndef LB_LOCK_H
#define LB_LOCK_H

#include <sys/queue.h>

#include <stdbool.h>
#include <stdint.h>

#include "lockdb.h"
#include "proto.h"
#include "util.h"

struct event_base;
struct config;

enum lock_kind { LOCK_SESSION, LOCK_FIXED, LOCK_KEEP };

/* How a grant shares its name (docs/protocol.md §3): lockdb's modes, in
 * the engine's words. */
enum lock_mode {
	LOCK_EXCLUSIVE = LDB_EXCLUSIVE,
	LOCK_FILL = LDB_FILL,
	LOCK_SHARED = LDB_SHARED,
	LOCK_LIMIT = LDB_LIMIT,
};

/* What a request came to. LOCK_ERR carries a proto_err. */
enum lock_status {
	LOCK_OK,
	LOCK_TIMEOUT,
	LOCK_CANCELLED, /* CANCEL ended its wait */
	LOCK_DONE,	/* FILL: the leader finished */
	LOCK_FREE,
	LOCK_HELD,
	LOCK_ERR
};

struct lock_result {
	enum lock_status status;
	enum proto_err err;  /* LOCK_ERR */
	const char *errtext; /* LOCK_ERR */
	uint64_t fence;	     /* ACQUIRE granted, STATUS held, VALIDATE */
	uint64_t ttl_ms;     /* ACQUIRE granted, EXTEND, STATUS held */
	const char *token;   /* ACQUIRE granted */
	bool valid;	     /* VALIDATE: the fence is a holder's */
	enum lock_mode mode; /* STATUS held */
	unsigned limit;	     /* STATUS held LIMIT n */
	uint64_t count;	     /* STATUS: holders; REVOKE: holders removed */
	size_t nholders;     /* WHO; valid until done returns */
	const struct lockdb_holder *holders;
};

struct lock_owner;
struct lock_owner_ops {
	/* The request in flight finished (exactly once per request). */
	void (*done)(struct lock_owner *, const struct lock_result *);
	/* A held lock was lost; reason as in docs/protocol.md §7. */
	void (*lost)(struct lock_owner *, const char *name, uint64_t fence,
	    const char *reason);
};

struct lock_hold;
struct lock_req;

/* The engine's view of one client; embedded in the client's session. */
struct lock_owner {
	uint64_t id;
	const struct lock_owner_ops *ops;
	TAILQ_HEAD(, lock_hold) holds; /* in grant order, for LOCKS */
	unsigned nholds;
	struct lock_req *pending; /* the request in flight, or NULL */
	const char *peer;	  /* for WHO: "ip:port", "unix" */
};

/* One lock held by one owner, as LOCKS shows it. */
struct lock_hold {
	TAILQ_ENTRY(lock_hold) owner_entry;
	LIST_ENTRY(lock_hold) name_entry;
	struct lock_owner *owner;
	struct lock_name *ln;
	enum lock_kind kind;
	enum lock_mode mode;
	unsigned limit; /* LOCK_LIMIT */
	uint64_t fence;
	uint64_t ttl_ms;
	uint64_t granted_ms;	 /* monotonic, for max_hold_ms */
	uint64_t granted_us;	 /* for the hold-time histogram */
	uint64_t valid_until_ms; /* monotonic, docs/protocol.md §3 */
	uint64_t lease_seq;	 /* the last request sent to set its lease */
	uint64_t confirmed_ms;	 /* monotonic: when the last request that
				    found it held in Redis was sent */
	struct event *expire_ev; /* at valid_until_ms: EVENT LOST */
	struct event *renew_ev;	 /* session locks: every lease/3 */
	struct event *maxhold_ev;
	struct lock_req *renewing; /* the renewal in flight, or NULL */
	struct lock_req *checking; /* a check after missed messages */
	bool releasing;		   /* its RELEASE is in Redis */
	bool stale;		   /* of an incarnation Redis no longer has:
				      to be put back (lock_hold.c) */
	uint64_t since_ms;	   /* wall clock, its WHO entry's */
	char token[PROTO_TOKEN_MAX + 1];
};

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
/* "EXCLUSIVE", "FILL", "SHARED" or "LIMIT=<n>", as WHO and LOCKS show it. */
const char *lock_mode_name(enum lock_mode mode, unsigned limit);
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

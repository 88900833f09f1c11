/*
 * lockdb: the Redis side of a lock — the key layout of docs/protocol.md §8 and the
 * Lua scripts that make every decision atomic — with replies parsed into a
 * plain struct. It knows nothing of owners, holds or queues.
 */
#ifndef LB_LOCKDB_H
#define LB_LOCKDB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum lockdb_status {
	LDB_OK,		 /* granted / released / extended / held (STATUS) */
	LDB_NO,		 /* held by another (ACQUIRE), not ours, or free */
	LDB_DONE,	 /* FILL: a leader finished since the one watched */
	LDB_CONFLICT,	 /* ACQUIRE: held in another shared mode (limit) */
	LDB_UNAVAILABLE, /* no answer in time, or Redis cannot serve */
	LDB_INTERNAL,	 /* an answer that should not happen */
};

/*
 * How a grant shares its name. EXCLUSIVE and FILL hold the lock key;
 * SHARED and LIMIT holders sit in the name's sorted set, each with its own
 * expiry. A name is held in one mode at a time.
 */
enum lockdb_mode { LDB_EXCLUSIVE, LDB_FILL, LDB_SHARED, LDB_LIMIT };

/* One holder as WHO shows it: info is "<fence> <mode> <broker> <client>
 * <since_ms>" as its broker stored it, or "" if it stored none. */
struct lockdb_holder {
	uint64_t pttl;
	const char *info;
};

struct lockdb_reply {
	enum lockdb_status status;
	uint64_t fence; /* granted; STATUS held; refused: the holder's; DONE */
	uint64_t pttl;	/* ACQUIRE refused: when to look again; STATUS held;
			   CHECK held: its lease left to trust */
	const char *busy; /* UNAVAILABLE from an error reply: its code word */
	/* STATUS held: how; CONFLICT: how it is held */
	enum lockdb_mode mode;
	unsigned limit;	 /* LDB_LIMIT's n */
	uint64_t count;	 /* STATUS: holders; REVOKE: holders removed */
	bool valid;	 /* STATUS with a fence: a holder has it */
	bool marked;	 /* ACQUIRE refused by shared holders: marked writer */
	uint64_t head;	 /* ACQUIRE refused: the queue's first ticket, if it
			    is another of this broker's (0: not) */
	size_t nholders; /* WHO */
	const struct lockdb_holder *holders;
	/* RELEASE that handed the name to a ticket: fence is the new grant's;
	 * for this broker's ticket n, ticket is n and token its token (valid
	 * during the callback), else both are 0/NULL. */
	uint64_t ticket;
	const char *token;
	/* UNAVAILABLE: what to tell the client, when not Redis's error
	 * (busy) or no answer; valid during the callback. */
	const char *why;
	/* UNAVAILABLE from the gate: the request named an incarnation the
	 * broker has learned since is not Redis's; asked again now, it names
	 * the one Redis serves. */
	bool again;
	/* UNAVAILABLE from the gate: the script stopped there, having
	 * written nothing (a waiter's place in the queue was not taken). */
	bool closed;
	/* UNAVAILABLE, and the script surely did not run (never sent,
	 * refused before it ran, or stopped by the gate); without it, an
	 * ACQUIRE may have been granted unseen. */
	bool not_run;
};

/* An ACQUIRE or FILL as the scripts take it. */
struct lockdb_ask {
	const char *token;
	uint64_t ttl_ms;
	uint64_t mark_ms; /* refused: mark the name as waited for this long */
	enum lockdb_mode mode;
	unsigned limit;	   /* LDB_LIMIT */
	uint64_t watch;	   /* LDB_FILL: the leader's fence it waits on, or 0 */
	bool clear_writer; /* it marked the name as a waiting writer */
	const char *info;  /* "<mode> <broker> <client> <since_ms>", for WHO */
	uint64_t ticket;   /* its place in the queue is ticket n; 0: none */
	uint64_t least;	   /* the least n of this broker's live tickets */
};

typedef void lockdb_cb(const struct lockdb_reply *, void *arg);

/* What the release channel says (docs/protocol.md §8). */
enum lockdb_news_kind {
	LDB_NEWS_MISSED,   /* subscribed (again): news may have been missed */
	LDB_NEWS_RELEASED, /* name was released: its waiters may try */
	LDB_NEWS_REVOKED,  /* REVOKE: holders with fence or older are gone */
	LDB_NEWS_GONE,	   /* another broker released or shortened the grant
			      with fence: its holds here cannot trust it */
	LDB_NEWS_HANDED,   /* another broker's release handed name to our
			      ticket n: granted with fence, to be confirmed */
};

struct lockdb_news {
	enum lockdb_news_kind kind;
	const char *name; /* not for LDB_NEWS_MISSED */
	uint64_t fence;
	uint64_t ticket;   /* LDB_NEWS_HANDED */
	const char *token; /* LDB_NEWS_HANDED */
	uint64_t ttl_ms;   /* LDB_NEWS_HANDED: its lease; 0: not said */
};

typedef void lockdb_news_fn(const struct lockdb_news *);

/* Hear the release channel (set before Redis is connected). */
void lockdb_subscribe(lockdb_news_fn *fn);
/* fn(arg) each time the command connection is (re)made. */
void lockdb_on_connect(void (*fn)(void *), void *arg);
/* Whether the command connection is up. */
bool lockdb_up(void);
/* Whether Redis can serve name now: lockdb_up on one Redis; on a
 * cluster, whether the master of its slot is connected and known. */
bool lockdb_up_for(const char *name);
/* Why no lock may be granted from this Redis now ("Redis maxmemory-policy
 * is allkeys-lru; locks need noeviction"), or NULL. Read at every connect;
 * allow says to grant anyway. */
const char *lockdb_refusal(void);
void lockdb_allow_eviction(bool allow);
/* How long an incarnation's answer vouches for holds (redis.trust_ms). */
void lockdb_set_trust(uint64_t trust_ms);

/* broker ("<host>:<pid>:<random>") names this broker in WHO entries, in
 * its tickets, and in the messages that tell other brokers of a grant it
 * released or shortened; a release hands a grant to another broker's
 * ticket for handoff_ms until that broker confirms it; this broker's
 * tickets live live_ms past its last try with one; a new incarnation of
 * the lock data made by this broker grants nothing for grace_ms. Every
 * lease is set in Redis step_ms longer than asked (redis.clock_step_ms):
 * Redis ends keys by its wall clock, which may be stepped forward by that
 * much without ending one before its holder stops trusting it; a lease
 * in a hand-over's message is given back without it. */
void lockdb_init(const char *prefix, const char *broker, uint64_t handoff_ms,
    uint64_t live_ms, uint64_t grace_ms, uint64_t step_ms);

/* Grant if the mode allows (or if the token holds it already: same fence
 * back). A FILL whose watched leader finished is DONE instead. */
void lockdb_acquire(
    const char *name, const struct lockdb_ask *a, lockdb_cb *cb, void *arg);
/* Whether a release tells FILL waiters the work is done (:done). */
enum lockdb_done {
	LDB_DONE_NO,	    /* the broker's own releases: a waiter leads */
	LDB_DONE_IF_WAITED, /* a client's RELEASE: if FILL waiters marked it */
	LDB_DONE_ALWAYS,    /* a FILL leader's RELEASE */
};

/* Compare-and-delete, then hand the name to the first live ticket (the
 * reply says which, if it is ours; another broker hears of it on its
 * channel), or announce the release if the name is waited for (or, as
 * "<name> released <fence> <broker>", if another broker stored the
 * grant); done marks the work done for done_ms. fence != 0: only the
 * grant with that fence. */
void lockdb_release(const char *name, const char *token, uint64_t fence,
    enum lockdb_done done, uint64_t done_ms, lockdb_cb *cb, void *arg);
/* Ticket n of this broker leaves name's queue (its waiter left). */
void lockdb_cancel(const char *name, uint64_t ticket);
/* Compare-and-PEXPIRE, in any mode; fence != 0: only that grant. A lease
 * shortened in another broker's grant is announced. */
void lockdb_extend(const char *name, const char *token, uint64_t fence,
    uint64_t ttl_ms, lockdb_cb *cb, void *arg);
/* As lockdb_extend, for a grant no holder trusts any more (a lock delay):
 * kept keep_ms in Redis, without the margin for a step of its clock. */
void lockdb_keep(const char *name, const char *token, uint64_t fence,
    uint64_t keep_ms, lockdb_cb *cb, void *arg);
/* Held (pttl, fence, mode, holders) or free; fence != 0: whether a holder
 * has it (valid), under token if that is not NULL. */
void lockdb_status(const char *name, uint64_t fence, const char *token,
    lockdb_cb *cb, void *arg);
/* Every holder, for WHO. */
void lockdb_who(const char *name, lockdb_cb *cb, void *arg);
/* Remove every holder and announce "<name> revoked <fence>"; the fence is
 * also kept keep_ms in :revoked for brokers that miss the message. */
void lockdb_revoke(
    const char *name, uint64_t keep_ms, lockdb_cb *cb, void *arg);
/* Whether the grant of token with fence still holds name (OK; pttl: how
 * much of its lease is left to trust, UINT64_MAX for no end) or not (NO;
 * fence: the last REVOKE's remembered, or 0). With info (the WHO entry it
 * was granted with) an exclusive grant whose lock key alone went (deleted
 * by hand) is put back for the lease its fence counter remembers; with
 * restore_ms too, one Redis forgot is put back for that long, if a new
 * incarnation's grace period is running. A turn's
 * checks go to Redis in batches, as acquires and releases do. */
void lockdb_check(const char *name, const char *token, uint64_t fence,
    uint64_t restore_ms, const char *info, lockdb_cb *cb, void *arg);

/*
 * The incarnation of the lock data (docs/protocol.md §8, "When Redis
 * forgets"): asked at every connect, and by the engine as a heartbeat.
 * Each answer is passed on: whether it names another incarnation than the
 * one known before (first: none was), the grace period it has left,
 * when the question was sent (monotonic ms): until then the answer
 * vouches for the holds of the incarnation it names; and Redis's own time
 * then (ms on its wall clock, by which it ends keys).
 */
struct lockdb_inc {
	bool first;
	bool changed;
	uint64_t grace_ms;
	uint64_t sent_ms;
	uint64_t redis_ms;
	int scope; /* whose incarnation (lockdb_scope_of) */
};

typedef void lockdb_inc_fn(const struct lockdb_inc *);

void lockdb_on_incarnation(lockdb_inc_fn *fn);
/*
 * Each scope of the lock data has an incarnation of its own: the whole of
 * one Redis is scope 0; on a cluster each slot is a scope, whose names'
 * keys and whose marker live together (a failover of one shard, or a
 * slot moved, is a new incarnation of that shard's or slot's names only).
 * LOCKDB_SCOPES bounds them; lockdb_scoped says whether there are more
 * than one.
 */
#define LOCKDB_SCOPES 16384
int lockdb_scope_of(const char *name);
bool lockdb_scoped(void);
/* A node's (redisc.h) new incarnations learned here, and how long a
 * grace period of its slots has left: for INFO and /metrics. */
void lockdb_node_stats(
    int node, uint64_t *incarnations, uint64_t *grace_left_ms);
/* Ask which incarnation of scope Redis serves (once at a time per scope;
 * not when down); lockdb_incarnation asks scope 0's. */
void lockdb_incarnation_of(int scope);
void lockdb_incarnation(void);
/* Whether the engine holds nothing and nobody waits (said at each beat):
 * quiet, beats read no evicted_keys and no INFO memory, and the next
 * request is sent after a beat (what the broker knows may be old by
 * then). */
void lockdb_quiet(bool quiet);

/* WAIT for replicas after a write; the reply's fence is how many acked. */
void lockdb_wait(const char *name, int replicas, uint64_t timeout_ms,
    lockdb_cb *cb, void *arg);

#endif

/*
 * fake_lockdb: a scripted stand-in for lockdb.c, so the lock engine's unit
 * tests run without Redis. Every lockdb call is recorded and left pending
 * until the test answers it with a reply it builds (fake_answer), in any
 * order, late, or never. The test also plays the release channel
 * (fake_news), the command connection coming back (fake_connect) and
 * whether it is up (fake_set_up). It decides nothing: it is not a Redis.
 *
 * The real lockdb sends every call on one connection, and Redis answers
 * them in the order sent; only news (the subscriber, another connection)
 * may overtake an answer. A test that answers out of order plays a
 * request that timed out (UNAVAILABLE) or a reply that cannot come.
 */
#ifndef LB_FAKE_LOCKDB_H
#define LB_FAKE_LOCKDB_H

#include <sys/queue.h>

#include <stdbool.h>
#include <stdint.h>

#include "lockdb.h"
#include "proto.h"

enum fake_op {
	FAKE_ACQUIRE,
	FAKE_RELEASE,
	FAKE_EXTEND,
	FAKE_STATUS,
	FAKE_WHO,
	FAKE_REVOKE,
	FAKE_CHECK,
	FAKE_WAIT,
	FAKE_CANCEL, /* fire and forget: answering it calls nothing */
};

#define FAKE_INFO_MAX 256

/* One lockdb call waiting for its answer. */
struct fake_call {
	TAILQ_ENTRY(fake_call) entry;
	enum fake_op op;
	char name[PROTO_NAME_MAX + 1];
	/* RELEASE, EXTEND, CHECK: the grant acted on; STATUS: the
	 * VALIDATE's TOKEN ("" and has_token false without one). */
	char token[PROTO_TOKEN_MAX + 1];
	bool has_token;
	uint64_t fence;
	uint64_t ttl_ms;       /* EXTEND; CHECK: restore_ms (0: none) */
	uint64_t done_ms;      /* RELEASE */
	enum lockdb_done done; /* RELEASE */
	uint64_t keep_ms;      /* REVOKE */
	int replicas;	       /* WAIT */
	uint64_t timeout_ms;   /* WAIT */
	uint64_t ticket;       /* CANCEL */
	/* ACQUIRE; its token and info point below. */
	struct lockdb_ask ask;
	char ask_token[PROTO_TOKEN_MAX + 1];
	char ask_info[FAKE_INFO_MAX];
	lockdb_cb *cb;
	void *arg;
};

/* Forget every call, the subscriber and the connect callback; up again. */
void fake_reset(void);
/* Calls not answered yet, oldest first. */
unsigned fake_count(void);
struct fake_call *fake_pending(unsigned i);
struct fake_call *fake_next(void);
/* The oldest pending call of op on name, or NULL. */
struct fake_call *fake_find(enum fake_op op, const char *name);
/* Answer c (it is gone afterwards): its callback runs now. */
void fake_answer(struct fake_call *c, const struct lockdb_reply *r);
/* Shorthands: a reply of just status; a grant (or, for WAIT, that many
 * replicas); a refusal with the holder's PTTL and fence. */
void fake_reply(struct fake_call *c, enum lockdb_status status);
void fake_grant(struct fake_call *c, uint64_t fence);
void fake_refuse(struct fake_call *c, uint64_t pttl, uint64_t fence);
void fake_reply_head(struct fake_call *c, uint64_t head);
/* Answer every pending call, and those the answers make, with status, as
 * Redis going away does; returns how many. */
unsigned fake_drain(enum lockdb_status status);
/* Drop every pending call unanswered, returning how many. */
unsigned fake_drop(void);

/* The release channel says kind about name (NULL for MISSED). */
void fake_news(enum lockdb_news_kind kind, const char *name, uint64_t fence);
/* Another broker's release handed name to our ticket, as fence, for
 * ttl_ms (0: a message that does not say, an older broker's). */
void fake_handed(const char *name, uint64_t ticket, uint64_t fence,
    const char *token, uint64_t ttl_ms);
/* The command connection was (re)made. */
void fake_connect(void);
/* incarnation.lua answered (lockdb_on_incarnation's callback). */
void fake_incarnation(
    bool first, bool changed, uint64_t grace_ms, uint64_t sent_ms);
/* The same answer, saying Redis's time then (ms on its wall clock). */
void fake_incarnation_at(bool changed, uint64_t sent_ms, uint64_t redis_ms);
/* The same answer for a scope (names "s<scope>:..." are in it). */
void fake_incarnation_in(
    int scope, bool first, bool changed, uint64_t grace_ms, uint64_t sent_ms);
/* How many times the engine asked for the incarnation (of any scope);
 * of scope (below 4). */
unsigned fake_incarnation_asks(void);
unsigned fake_scope_asks(int scope);
/* What lockdb_scoped() answers: a cluster's several scopes (false after
 * fake_reset). */
void fake_set_scoped(bool scoped);
/* lockdb_up_for is false for the names of scope (below 4): a cluster's
 * master down (false after fake_reset). */
void fake_set_scope_down(int scope, bool down);
/* How many times the engine said it holds nothing (lockdb_quiet). */
unsigned fake_quiet(void);
/* What lockdb_up() answers (true after fake_reset). */
void fake_set_up(bool up);

/* "ACQUIRE", "RELEASE", ... for messages. */
const char *fake_op_name(enum fake_op op);
/* lockdb_init's arguments, as last given. */
const char *fake_broker(void);
uint64_t fake_handoff_ms(void);

#endif

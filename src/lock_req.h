/*
 * lock_req: the request records every part of the engine passes around,
 * and answering a request's owner once. Built on lock_name (a request
 * refers to its name) and lock_release (an unsure try is owed to Redis
 * when freed); lock_hold, lock_queue and lock build on it, and it calls
 * none of them.
 */
#ifndef LB_LOCK_REQ_H
#define LB_LOCK_REQ_H

#include <sys/queue.h>

#include <stdbool.h>
#include <stdint.h>

#include "lock.h"
#include "lock_name.h"
#include "lockdb.h"
#include "proto.h"

struct event;
struct event_base;

enum lock_op {
	OP_ACQUIRE,
	OP_RELEASE,
	OP_EXTEND,
	OP_STATUS,
	OP_VALIDATE,
	OP_RENEW, /* a session lease, for its hold */
	OP_WHO,
	OP_REVOKE,
	OP_CHECK, /* a hold, after the subscriber missed messages */
};

/*
 * One request. An ACQUIRE is also a waiter: it sits in its name's queue
 * until granted, refused (WAIT 0), or its deadline. A request never frees
 * while lockdb holds it (in_flight); its owner may leave meanwhile.
 */
struct lock_req {
	TAILQ_ENTRY(lock_req) queue_entry;
	LIST_ENTRY(lock_req) asking_entry; /* in ln->asking */
	enum lock_op op;
	struct lock_owner *owner; /* NULL once nobody waits for the answer */
	struct lock_name *ln;	  /* referenced */
	struct lock_hold *hold;	  /* OP_RENEW, OP_CHECK; NULL once it is gone */
	enum lockdb_done done;	  /* OP_RELEASE: how it tells FILL waiters */
	char token[PROTO_TOKEN_MAX + 1];
	bool own_token; /* the broker made it: nobody else knows it */
	unsigned tries; /* attempts sent, for an ACQUIRE */
	bool unsure;	/* an attempt got no answer: it may have been granted */
	bool cancelled; /* CANCEL: a TIMEOUT is answered CANCELLED */
	bool granted;
	bool replicating;   /* granted in Redis; WAITing for the replicas */
	bool marked_writer; /* a try marked it a writer readers wait for */
	bool queued;
	bool in_flight;
	bool heard;	 /* an answer to one of its tries has come back */
	bool again;	 /* OP_CHECK: more was missed while it was in Redis */
	bool confirming; /* OP_RENEW: of a hand-over answered before */
	bool trying;	 /* its name's attempt (lockq) is this request's */
	bool asking;	 /* in ln->asking */
	bool forget;	 /* OP_RELEASE: its token asked again; never redone */
	enum lock_kind kind;
	enum lock_mode mode;
	unsigned limit; /* LOCK_LIMIT */
	uint64_t watch; /* LOCK_FILL: the leader's fence it waits on */
	uint64_t ttl_ms;
	uint64_t fence; /* OP_VALIDATE */
	int64_t wait_ms;
	uint64_t start_ms;     /* monotonic, read before sending */
	uint64_t created_us;   /* for the wait-time histogram; FILL's watch */
	uint64_t tried_us;     /* the last try was sent (FILL's watch) */
	uint64_t lease_end_ms; /* a release: when the lease runs out, or 0 */
	uint64_t lease_seq;    /* numbered by lockhold_assume when sent */
	uint64_t sub_epoch;    /* lockq_sub_epoch() when an ACQUIRE was sent */
	/* A waiter's place in the queue every broker shares (docs/protocol.md
	 * §3 Waiting): ticket n, 0 for none; took: a try carried it, so it
	 * may be queued in Redis; handed: a grant another broker's release
	 * handed it while a try of its own was in Redis (confirmed after);
	 * ticket_ms: monotonic, read before the first try with it was sent;
	 * retake: its place may be gone (Redis forgot it, or news was missed)
	 * while a try of its own was in Redis: it takes it again once that
	 * try is answered. */
	uint64_t ticket;
	uint64_t ticket_ms;
	bool took;
	bool retake;
	uint64_t handed;
	uint64_t retry_ms; /* OP_CHECK: the wait before asking again */
	struct event *deadline_ev;
};

void lockreq_init(struct event_base *base);
void lockreq_shutdown(void);
/* "<hostname>:<pid>:<random>": this broker in WHO entries and messages. */
const char *lockreq_broker(void);

/* A request by o (or nobody) on name; it becomes o's pending one. */
struct lock_req *lockreq_new(
    enum lock_op op, struct lock_owner *o, const char *name, const char *token);
void lockreq_free(struct lock_req *req);

/* Answer the owner, once; the request itself may live on in Redis. */
void lockreq_answer(struct lock_req *req, const struct lock_result *res);
void lockreq_answer_status(struct lock_req *req, enum lock_status st);
void lockreq_set_err(
    struct lock_result *res, enum proto_err err, const char *text);
void lockreq_answer_err(
    struct lock_req *req, enum proto_err err, const char *text);
/* UNAVAILABLE and INTERNAL replies, the same for every request. */
void lockreq_answer_db_error(
    struct lock_req *req, const struct lockdb_reply *r);

/* The scripts' view of req's try; info is filled (LOCKREQ_INFO bytes). */
#define LOCKREQ_INFO 256
void lockreq_ask(const struct lock_req *req, uint64_t mark_ms,
    struct lockdb_ask *a, char *info, size_t len);
/* The WHO entry h was granted with (LOCKREQ_INFO bytes). */
void lockreq_hold_info(const struct lock_hold *h, char *info, size_t len);

/* req goes to Redis (it must not be freed until its answer comes), and
 * its answer came. */
void lockreq_send(struct lock_req *req);
void lockreq_landed(struct lock_req *req);
/* req (a same-token ACQUIRE or a RELEASE) is in Redis until freed. */
void lockreq_asking(struct lock_req *req);
/* Whether a same-token ACQUIRE other than except is in Redis for ln. */
bool lockreq_token_acquiring(const struct lock_name *ln, const char *token,
    const struct lock_req *except);
/* req's answer came: out of ln->asking. */
void lockreq_unask(struct lock_req *req);
/* An ACQUIRE by req's token is being sent: a release of that token owed
 * or in Redis must not be done after it (it would delete this grant). */
void lockreq_token_asks(const struct lock_req *req);

/* A one-shot timer ms from now. */
void lockreq_timer(struct event *ev, uint64_t ms);

#endif

/*
 * lock_req: the request records every part of the engine passes around,
 * and answering a request's owner once: struct lock_owner (the engine's
 * view of a client) and struct lock_result (what a request came to) are
 * declared here. Built on lock_name (a request
 * refers to its name) and lock_release (an unsure try is owed to Redis
 * when freed); lock_hold, lock_queue and lock build on it, and it calls
 * none of them.
 */
#ifndef LB_LOCK_REQ_H
#define LB_LOCK_REQ_H

#include <sys/queue.h>

#include <stdbool.h>
#include <stdint.h>

#include <event2/util.h>

#include "lock_name.h"
#include "lockdb.h"
#include "proto.h"

struct event;
struct event_base;

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
	const char *ident;	  /* for WHO: whom AUTH let in; NULL: nobody */
};

/* The owner's identity from now on, as WHO shows it (the string must
 * outlive its holds; NULL: none). */
void lockreq_owner_ident(struct lock_owner *o, const char *ident);

/* "EXCLUSIVE", "FILL", "SHARED" or "LIMIT=<n>", as WHO and LOCKS show it. */
const char *lock_mode_name(enum lock_mode mode, unsigned limit);

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
 * A request's life is two states, each moved only by lock_req.c
 * (HACKING.md, A request's way through the engine, has the table).
 *
 * Its place: an ACQUIRE is made (NEW), waits in its name's queue
 * (QUEUED), and leaves it granted (GRANTED) or not (LEFT: answered,
 * abandoned, refused); a try of it still in Redis may grant it after it
 * left. A same-token re-grant goes from NEW to GRANTED at once. Other
 * requests stay NEW.
 */
enum lockreq_place {
	LOCKREQ_NEW,
	LOCKREQ_QUEUED,
	LOCKREQ_GRANTED,
	LOCKREQ_LEFT,
};

/*
 * Its way to Redis: nothing of it there (IDLE), a request or a try of a
 * waiter there (SENT), its name's try there, sent as the trier (TRYING),
 * and either of these granted in Redis and waiting for the replicas
 * (SENT_REPLICAS, TRYING_REPLICAS). While not IDLE lockdb holds it and
 * it must not be freed; its answer brings it back to IDLE.
 */
enum lockreq_redis {
	LOCKREQ_IDLE,
	LOCKREQ_SENT,
	LOCKREQ_TRYING,
	LOCKREQ_SENT_REPLICAS,
	LOCKREQ_TRYING_REPLICAS,
};

/*
 * One request. An ACQUIRE is also a waiter: it sits in its name's queue
 * until granted, refused (WAIT 0), or its deadline. Its owner may leave
 * at any moment. Every field is written in lock_req.c alone; the other
 * files read them and move them through the functions below.
 */
struct lock_req {
	TAILQ_ENTRY(lock_req) queue_entry;
	LIST_ENTRY(lock_req) asking_entry; /* in ln->asking */
	enum lock_op op;
	enum lockreq_place place;
	enum lockreq_redis redis;
	struct lock_owner *owner; /* NULL once nobody waits for the answer */
	struct lock_name *ln;	  /* referenced */
	struct lock_hold *hold;	  /* OP_RENEW, OP_CHECK; NULL once it is gone */
	enum lockdb_done done;	  /* OP_RELEASE: how it tells FILL waiters */
	char token[PROTO_TOKEN_MAX + 1];
	/* Facts of its life, independent of the two states above. */
	bool own_token;	    /* the broker made it: nobody else knows it */
	unsigned tries;	    /* attempts sent as the trier, for an ACQUIRE */
	bool unsure;	    /* a try got no answer: it may have been granted */
	bool cancelled;	    /* CANCEL: a TIMEOUT is answered CANCELLED */
	bool marked_writer; /* a try marked it a writer readers wait for */
	bool heard;	    /* an answer to one of its tries has come back */
	bool again;	 /* OP_CHECK: more was missed while it was in Redis */
	bool confirming; /* OP_RENEW: of a hand-over answered before */
	bool asking;	 /* in ln->asking */
	bool forget;	 /* OP_RELEASE: its token asked again; never redone */
	enum lock_kind kind;
	enum lock_mode mode;
	unsigned limit; /* LOCK_LIMIT */
	uint64_t watch; /* LOCK_FILL: the leader's fence it waits on */
	uint64_t ttl_ms;
	uint64_t fence; /* OP_VALIDATE, OP_RELEASE; a grant awaiting replicas */
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
	uint64_t retry_ms;	   /* OP_CHECK: the wait before asking again */
	struct event *deadline_ev; /* WAIT's end, or OP_CHECK's next ask */
};

/* Whether req waits in its name's queue. */
static inline bool
lockreq_queued(const struct lock_req *req)
{
	return req->place == LOCKREQ_QUEUED;
}

/* Whether lockdb holds req (a request or try of it is in Redis). */
static inline bool
lockreq_in_flight(const struct lock_req *req)
{
	return req->redis != LOCKREQ_IDLE;
}

/* Whether req's try in Redis is its name's, sent as the trier. */
static inline bool
lockreq_trying(const struct lock_req *req)
{
	return req->redis == LOCKREQ_TRYING ||
	    req->redis == LOCKREQ_TRYING_REPLICAS;
}

/* Whether req's grant (or extension) is already waiting for replicas. */
static inline bool
lockreq_replicating(const struct lock_req *req)
{
	return req->redis == LOCKREQ_SENT_REPLICAS ||
	    req->redis == LOCKREQ_TRYING_REPLICAS;
}

void lockreq_init(struct event_base *base);
void lockreq_shutdown(void);
/* "<hostname>:<pid>:<random>": this broker in WHO entries and messages. */
const char *lockreq_broker(void);

/* A request by o (or nobody) on name; it becomes o's pending one. */
struct lock_req *lockreq_new(
    enum lock_op op, struct lock_owner *o, const char *name, const char *token);

/* Answer the owner, once; the request itself may live on in Redis. */
void lockreq_answer(struct lock_req *req, const struct lock_result *res);
void lockreq_answer_status(struct lock_req *req, enum lock_status st);
void lockreq_set_err(
    struct lock_result *res, enum proto_err err, const char *text);
/* A name, or a client's token (NULL: none), as the protocol allows them;
 * false with res's error set if not. */
bool lockreq_check_name(const char *name, struct lock_result *res);
bool lockreq_check_token(const char *token, struct lock_result *res);
void lockreq_answer_err(
    struct lock_req *req, enum proto_err err, const char *text);
/* UNAVAILABLE and INTERNAL replies, the same for every request. */
void lockreq_answer_db_error(
    struct lock_req *req, const struct lockdb_reply *r);

/* The scripts' view of req's try; info is filled (LOCKREQ_INFO bytes):
 * room for an identity's 64 bytes besides the rest. */
#define LOCKREQ_INFO 320
void lockreq_ask(const struct lock_req *req, uint64_t mark_ms,
    struct lockdb_ask *a, char *info, size_t len);
/* A WHO entry: "<mode> <broker> [<ident>/]<id>@<peer> <since, unix ms>"
 * (o may be NULL). */
void lockreq_info(const struct lock_owner *o, enum lock_mode mode,
    unsigned limit, uint64_t since_ms, char *info, size_t len);

/* Free req: nothing of it may be in Redis any more, nor in a queue. */
void lockreq_free(struct lock_req *req);
/* Free an ACQUIRE, and undo a try of it that got no answer and may have
 * been granted unseen: a release of it is owed to Redis (lock_release)
 * when the broker made its token, so nobody else can be using it. */
void lockreq_free_undo(struct lock_req *req);

/* What an ACQUIRE asks for, set once when it is made. */
void lockreq_terms(struct lock_req *req, enum lock_kind kind,
    enum lock_mode mode, unsigned limit, uint64_t ttl_ms, int64_t wait_ms);
/* The broker makes req's token: nobody else knows it. */
void lockreq_own_token(struct lock_req *req);
/* The lease an EXTEND or a renewal asks for. */
void lockreq_set_ttl(struct lock_req *req, uint64_t ttl_ms);
/* The fence a VALIDATE asks about. */
void lockreq_set_fence(struct lock_req *req, uint64_t fence);
/* A RELEASE of the grant held here with fence (0: none here), whose
 * lease runs out at lease_end_ms; done says how it tells FILL waiters. */
void lockreq_releases(struct lock_req *req, uint64_t fence,
    uint64_t lease_end_ms, enum lockdb_done done);
/* The hold a renewal or check is for; confirming: the renewal confirms
 * a hand-over. */
void lockreq_for_hold(
    struct lock_req *req, struct lock_hold *h, bool confirming);
/* Its hold is gone, or the renewal is of an earlier grant: its answer
 * is for nobody. */
void lockreq_hold_gone(struct lock_req *req);
/* lockhold_assume numbered req among the requests that set a lease. */
void lockreq_lease_seq(struct lock_req *req, uint64_t seq);
/* Nobody waits for req's answer any more (its owner left). */
void lockreq_orphan(struct lock_req *req);

/* Its way to Redis. IDLE to SENT: req goes to Redis (lockreq_send_at:
 * a try whose validity counts from start_ms, sent in subscription
 * sub_epoch); IDLE to TRYING: its name's try, as the trier. */
void lockreq_send(struct lock_req *req);
void lockreq_send_at(
    struct lock_req *req, uint64_t start_ms, uint64_t sub_epoch);
void lockreq_attempt(
    struct lock_req *req, uint64_t start_ms, uint64_t sub_epoch);
/* Granted in Redis with fence (or extended), it waits for the replicas:
 * SENT or TRYING to SENT_REPLICAS or TRYING_REPLICAS. */
void lockreq_replicate(struct lock_req *req, uint64_t fence);
/* Its answer came: back to IDLE, and heard. */
void lockreq_landed(struct lock_req *req);
/* A try of it got no answer: it may have been granted. */
void lockreq_unsure(struct lock_req *req);
/* OP_CHECK: news was missed again; asked again once answered if in
 * Redis now. */
void lockreq_ask_again(struct lock_req *req);

/* Its place. NEW to QUEUED: last in its name's queue, with ticket n (0:
 * none). */
void lockreq_queue(struct lock_req *req, uint64_t ticket);
/* Out of the queue, granted or not (QUEUED to GRANTED or LEFT), or
 * granted after it left or without queueing (NEW or LEFT to GRANTED);
 * leaving ungranted when not queued changes nothing. Returns the fence
 * of a hand-over it was still to confirm (0: none), forgotten now. */
uint64_t lockreq_leave(struct lock_req *req, bool granted);
/* The try about to be sent carries its ticket (unless it turned
 * try-once): it takes its place, naming first, the least ticket this
 * broker still queues on the name, in a. */
void lockreq_take_place(
    struct lock_req *req, struct lockdb_ask *a, uint64_t first);
/* A grant or hand-over took its place out of the queue in Redis. */
void lockreq_place_used(struct lock_req *req);
/* Its place may be gone: it takes it again. */
void lockreq_retake(struct lock_req *req);
/* A hand-over with fence came while a try of its own was in Redis, or
 * is to be confirmed. */
void lockreq_handed(struct lock_req *req, uint64_t fence);
/* Sends the confirmation of its hand-over (as lockreq_send_at): the
 * hand-over's fence becomes req's, returned. */
uint64_t lockreq_send_confirm(
    struct lock_req *req, uint64_t start_ms, uint64_t sub_epoch);
/* A try marked it a writer readers wait for. */
void lockreq_marked_writer(struct lock_req *req);
/* A FILL waiter waits on the leader with fence. */
void lockreq_watch(struct lock_req *req, uint64_t fence);
/* A try of it was sent at now_us (FILL's watch). */
void lockreq_tried(struct lock_req *req, uint64_t now_us);
/* Its input ended: it becomes a try-once, which waits for nothing. */
void lockreq_try_once(struct lock_req *req);
/* CANCEL ended its wait: its TIMEOUT is answered CANCELLED. */
void lockreq_cancel(struct lock_req *req);

/* req's one timer (WAIT's end, or a check's next ask) runs fn(req) ms
 * from now; made the first time. */
void lockreq_deadline(struct lock_req *req,
    void (*fn)(evutil_socket_t, short, void *), uint64_t ms);
void lockreq_deadline_stop(struct lock_req *req);
/* OP_CHECK's wait before asking again: min_ms, doubling up to max_ms. */
uint64_t lockreq_backoff(
    struct lock_req *req, uint64_t min_ms, uint64_t max_ms);

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

#endif

/*
 * redisc_int: what the Redis connection's files share and nothing outside
 * redisc*.c includes: a request, a connection, the module's one state, and
 * the functions one file calls in another. redisc.c owns requests (their
 * allocation, sending, timeouts and failing) and the module's life;
 * redisc_batch.c the calls of batched scripts held for the end of a turn;
 * redisc_conn.c each connection's life; redisc_sentinel.c the Sentinels.
 */
#ifndef LB_REDISC_INT_H
#define LB_REDISC_INT_H

#include <sys/queue.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "redisc.h"

#define REDISC_MAX_SCRIPTS 16
#define REDISC_BATCH_MAX 64 /* calls in one batch */
/* A batch's arguments: each call's (at most REDISC_MAX_ARGS + 2, its
 * own count and script number), n, and the keys of the first call. */
#define REDISC_BATCH_ARGS                                                      \
	(REDISC_BATCH_MAX * (REDISC_MAX_ARGS + 2) + REDISC_MAX_ARGS + 2)
/* A script's keys and arguments, and its key count. */
#define REDISC_MAX_ARGS 32
#define REDISC_HUNG_TIMEOUTS 3 /* command timeouts without any reply */

struct redisc_req {
	TAILQ_ENTRY(redisc_req) entry; /* in rc.inflight until answered */
	redisc_cb *cb;
	void *arg;
	uint64_t deadline_ms;
	uint64_t sent_us; /* for the round-trip histogram */
	bool answered;	  /* cb has run; a late reply is only freed */
	bool retried;	  /* NOSCRIPT was answered by EVAL once already */
	struct redisc_script *script;
	int nkeys;    /* a script's: argv[3..3+nkeys) */
	int argc;     /* argv[0], argv[1] are the verb and sha/body */
	char **argv;  /* into this same allocation, after the struct */
	size_t *lens; /* likewise */
	size_t size;  /* of the allocation, a multiple of REDISC_REQ_ROUND */
	struct redisc_req *pool_next;
	struct redisc_req *fail_next; /* in rc.failed */
};

/* One hiredis connection with its own reconnect and connect timers. */
struct redisc_conn {
	const char *what; /* "command", "subscriber" */
	redisAsyncContext *ac;
	bool connected;	   /* connect callback said OK */
	int setup_left;	   /* AUTH and SELECT answers still to come */
	bool up;	   /* connected, and AUTH and SELECT said OK */
	unsigned attempts; /* failed connects in a row */
	struct event *reconnect_ev;
	struct event *connect_timeout_ev;
	void (*setup)(redisAsyncContext *); /* queued at each connect */
	/* Where to connect: host and port, or -1 when it is not known yet. */
	int (*target)(char *host, size_t len, int *port);
};

/* The module's state: one per process, shared by redisc*.c. */
struct redisc_state {
	struct event_base *base;
	const struct config_redis *cf;
	struct redisc_conn cmd;	 /* scripts */
	struct redisc_conn sub;	 /* SUBSCRIBE to channel */
	struct redisc_conn sent; /* a Sentinel: the master and its moves */
	int sentinel;		 /* which of cf->sentinels is asked */
	char master_host[256];	 /* from Sentinel; "" until known */
	int master_port;
	bool stopping;
	char channel[2][256]; /* subscribed; the second may be "" */
	redisc_msg_cb *msg_cb;
	void *msg_arg;
	void (*up_cb)(void *);
	void *up_arg;
	struct event *timeout_ev;
	/* Requests that could not be sent, answered on the next turn. */
	struct redisc_req *failed, **failed_tail;
	struct event *failed_ev;
	uint64_t cmd_last_reply_ms; /* or when it connected */
	TAILQ_HEAD(, redisc_req) inflight;
	struct redisc_req *pool; /* freed requests to reuse */
	int npool;
	struct redisc_script *scripts[REDISC_MAX_SCRIPTS];
	int nscripts;
	/* Calls of batched scripts this turn, in flight but not sent. */
	struct redisc_req *batch[REDISC_BATCH_MAX];
	int nbatch;
	struct event *batch_ev; /* made active: send them */
};
extern struct redisc_state rc;

/* redisc.c: a request's memory back to the pool (or freed). */
void redisc_req_free(struct redisc_req *req);
/* redisc.c: a request with argv[0..1] left for the verb and the script,
 * the arguments copied from argv[2] on. */
struct redisc_req *redisc_req_new(int n, const char *const *args,
    const size_t *lens, redisc_cb *cb, void *arg);
/* redisc.c: in flight from now, with its deadline; failed from the loop
 * if unsent. */
void redisc_submit(struct redisc_req *req);
/* redisc.c: an in-flight request sent, or failed from the loop. */
void redisc_send_tracked(struct redisc_req *req);

/* redisc_batch.c: send this turn's held calls of batched scripts. */
void redisc_flush(void);
/* redisc_batch.c: rc.batch_ev's callback (made active by redisc_eval). */
void redisc_batch_ev_cb(evutil_socket_t fd, short what, void *arg);

/* redisc_conn.c: each connection's timers and what it sends at connect. */
void redisc_conn_init(struct redisc_conn *conn, const char *what,
    void (*setup)(redisAsyncContext *), int (*target)(char *, size_t, int *));
/* redisc_conn.c: the connection's context and timers freed (at stop). */
void redisc_conn_close(struct redisc_conn *conn);
/* redisc_conn.c: connect now (the target may not be known yet). */
void redisc_conn_open(struct redisc_conn *conn);
/* redisc_conn.c: close now, without waiting for the replies still owed;
 * the disconnect callback reconnects. */
void redisc_drop(struct redisc_conn *conn);
/* redisc_conn.c: AUTH and SELECT, queued at each connect. */
void redisc_cmd_setup(redisAsyncContext *ac);
/* redisc_conn.c: AUTH and SUBSCRIBE, queued at each connect. */
void redisc_sub_setup(redisAsyncContext *ac);

/* redisc_sentinel.c: where the master is (-1: not known yet). */
int redisc_target_master(char *host, size_t len, int *port);
/* redisc_sentinel.c: the Sentinel asked now. */
int redisc_target_sentinel(char *host, size_t len, int *port);
/* redisc_sentinel.c: what the Sentinel connection asks at connect. */
void redisc_sentinel_setup(redisAsyncContext *ac);

#endif

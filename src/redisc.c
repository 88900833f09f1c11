/*
 * redisc: one async hiredis command connection. Requests are kept in send
 * order in one list; since every request has the same timeout, one timer for
 * the oldest is enough to answer all that run late. A late reply finds its
 * request marked answered and is only freed.
 */
#include <sys/queue.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "config.h"
#include "log.h"
#include "redisc.h"
#include "redisc_ev.h"
#include "resp.h"
#include "stats.h"
#include "util.h"
#include "xmalloc.h"

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

/*
 * A request and its arguments are one allocation of about 1 KiB, in
 * glibc's large bins (each malloc of one consolidates the small free
 * chunks). Its size is rounded up to REDISC_REQ_ROUND bytes, so that a
 * lock's requests share a size, and those up to REDISC_REQ_POOLED bytes
 * are kept on a free list of at most REDISC_POOL_MAX when freed: no
 * allocation per request in steady state, and no more memory per
 * request in flight (9,800 waiters' tries at once) than the rounding.
 */
#define REDISC_REQ_ROUND 256
#define REDISC_REQ_POOLED 4096
#define REDISC_POOL_MAX 256

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

static struct {
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
} rc;

/* The calls one batch carries, answered from its one reply. */
struct redisc_batch {
	int n;
	struct redisc_req *call[];
};

static void redisc_schedule_reconnect(struct redisc_conn *conn);
static void redisc_set_up(struct redisc_conn *conn, bool up);

bool
redisc_sub_up(void)
{
	return rc.msg_cb == NULL || rc.sub.up;
}

bool
redisc_up(void)
{
	return rc.cmd.up;
}

bool
redisc_idle(void)
{
	return TAILQ_EMPTY(&rc.inflight);
}

static void
redisc_req_free(struct redisc_req *req)
{
	if (req->size <= REDISC_REQ_POOLED && !rc.stopping &&
	    rc.npool < REDISC_POOL_MAX) {
		req->pool_next = rc.pool;
		rc.pool = req;
		rc.npool++;
		return;
	}
	free(req);
}

/* Answer a request once and forget it; the hiredis reply may still come. */
static void
redisc_answer(struct redisc_req *req, const redisReply *reply)
{
	TAILQ_REMOVE(&rc.inflight, req, entry);
	req->answered = true;
	req->cb(reply, req->arg);
}

/* Keep the one timeout timer pointed at the oldest unanswered request. */
static void
redisc_arm_timeout(void)
{
	struct redisc_req *head = TAILQ_FIRST(&rc.inflight);
	struct timeval tv;
	uint64_t now, left;

	if (head == NULL) {
		evtimer_del(rc.timeout_ev);
		return;
	}
	now = mono_ms();
	left = head->deadline_ms > now ? head->deadline_ms - now : 0;
	tv = util_timeval(left);
	evtimer_add(rc.timeout_ev, &tv);
}

/*
 * Requests time out but nothing at all has come back for a while: the
 * connection may be dead without a reset (a host gone, a partition).
 * Close it and reconnect rather than wait for TCP to notice.
 */
/* Close conn now, without waiting for the replies still owed (those
 * requests are answered as not answered): its disconnect callback
 * schedules the reconnect. */
static void
redisc_drop(struct redisc_conn *conn)
{
	redisAsyncContext *ac = conn->ac;

	conn->ac = NULL;
	redisc_set_up(conn, false);
	redisAsyncFree(ac);
}

static void
redisc_check_hung(uint64_t now)
{
	uint64_t quiet =
	    REDISC_HUNG_TIMEOUTS * (uint64_t)rc.cf->command_timeout_ms;
	redisAsyncContext *ac = rc.cmd.ac;

	if (ac == NULL || !rc.cmd.up || now - rc.cmd_last_reply_ms < quiet)
		return;
	log_warnx("redis command: no reply for %llu ms; reconnecting",
	    (unsigned long long)(now - rc.cmd_last_reply_ms));
	redisc_drop(&rc.cmd);
}

static void
redisc_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct redisc_req *req;
	uint64_t now = mono_ms();

	while ((req = TAILQ_FIRST(&rc.inflight)) != NULL &&
	    req->deadline_ms <= now) {
		STAT_INC(redis_timeouts_total);
		log_debug("redis: request timed out after %d ms",
		    rc.cf->command_timeout_ms);
		redisc_answer(req, NULL);
		redisc_check_hung(now);
	}
	redisc_arm_timeout();
}

/*
 * A request that could not even be sent is failed from the loop, on its
 * next turn, never from inside its caller (which may hold state). Not in
 * this pass: a caller that asks again at each failure (with the
 * connection down, every ask fails) would then keep the loop from its
 * descriptors, timers and signals for good. The ones failed before a turn
 * are answered in the order they failed; those their answers fail wait
 * for the turn after.
 */
static void
redisc_fail(struct redisc_req *req)
{
	if (!req->answered)
		redisc_answer(req, NULL);
	redisc_req_free(req);
}

static void
redisc_fail_now(void)
{
	struct redisc_req *req = rc.failed, *next;

	rc.failed = NULL;
	rc.failed_tail = &rc.failed;
	for (; req != NULL; req = next) {
		next = req->fail_next;
		redisc_fail(req);
	}
}

static void
redisc_failed_cb(evutil_socket_t fd, short what, void *arg)
{
	redisc_fail_now();
}

/* Once stopped: the teardown's one pass of the loop answers it. */
static void
redisc_fail_stopped_cb(evutil_socket_t fd, short what, void *arg)
{
	redisc_fail(arg);
}

static void
redisc_fail_later(struct redisc_req *req)
{
	/* A timer due now is looked at after the next poll, whatever the
	 * clock's resolution (event_base_once would make a zero timeout
	 * active in this pass). */
	struct timeval now = { 0, 0 };

	if (rc.failed_ev == NULL) {
		if (event_base_once(rc.base, -1, EV_TIMEOUT,
			redisc_fail_stopped_cb, req, &now) != 0)
			fatalx("event_base_once failed");
		return;
	}
	req->fail_next = NULL;
	*rc.failed_tail = req;
	rc.failed_tail = &req->fail_next;
	if (!evtimer_pending(rc.failed_ev, NULL))
		evtimer_add(rc.failed_ev, &now);
}

static bool
redisc_is_noscript(const redisReply *r)
{
	return r != NULL && r->type == REDIS_REPLY_ERROR &&
	    strncmp(r->str, "NOSCRIPT", 8) == 0;
}

static int redisc_send(struct redisc_req *req, bool by_sha);
static void redisc_reply_cb(redisAsyncContext *ac, void *r, void *privdata);

/* Queue argv on the command connection, sent at the end of the turn. */
static int
redisc_write(
    struct redisc_req *req, int argc, char *const *argv, const size_t *lens)
{
	static char buf[65536]; /* a batch of calls fits */
	size_t len = resp_format(buf, sizeof buf, argc, argv, lens);
	int rv;

	if (len > 0)
		rv = redisAsyncFormattedCommand(
		    rc.cmd.ac, redisc_reply_cb, req, buf, len);
	else
		rv = redisAsyncCommandArgv(rc.cmd.ac, redisc_reply_cb, req,
		    argc, (const char **)argv, lens);
	return rv == REDIS_OK ? 0 : -1;
}

static void
redisc_reply_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redisc_req *req = privdata;
	const redisReply *reply = r;

	if (reply != NULL) {
		uint64_t now = mono_us();

		rc.cmd_last_reply_ms = now / 1000;
		stats_observe(HIST_redis_rtt_seconds, now - req->sent_us);
	}
	if (req->answered) {
		redisc_req_free(req);
		return;
	}
	/* SCRIPT FLUSH or a new server: run the body, which caches it again. */
	if (redisc_is_noscript(reply) && !req->retried && req->script != NULL) {
		STAT_INC(redis_noscript_total);
		log_info(
		    "redis: script %s not cached (NOSCRIPT), sending it again",
		    req->script->name);
		req->retried = true;
		req->sent_us = mono_us(); /* one round trip, not two */
		if (redisc_send(req, false) == 0)
			return;
		reply = NULL;
	}
	redisc_answer(req, reply);
	redisc_req_free(req);
}

/* Send as EVALSHA when the sha is known, else as EVAL with the body. */
static int
redisc_send(struct redisc_req *req, bool by_sha)
{
	if (rc.cmd.ac == NULL || !rc.cmd.up)
		return -1;
	STAT_INC(redis_requests_total);
	if (req->script == NULL) /* a plain command: argv[2] on */
		return redisc_write(
		    req, req->argc - 2, req->argv + 2, req->lens + 2);
	if (by_sha && req->script->sha[0] != '\0') {
		req->argv[0] = "EVALSHA";
		req->argv[1] = req->script->sha;
	} else {
		req->argv[0] = "EVAL";
		req->argv[1] = (char *)req->script->body;
	}
	req->lens[0] = strlen(req->argv[0]);
	req->lens[1] = strlen(req->argv[1]);
	return redisc_write(req, req->argc, req->argv, req->lens);
}

/*
 * A request whose argv[0..1] are left for the verb and the script (EVALSHA
 * sha or EVAL body); the caller's arguments are copied from argv[2] on. One
 * allocation holds the request, argv, lens and the argument bytes: it may
 * be sent twice (NOSCRIPT), so it keeps its own copy.
 */
static struct redisc_req *
redisc_req_new(int n, const char *const *args, const size_t *lens,
    redisc_cb *cb, void *arg)
{
	size_t argc = (size_t)n + 2, bytes = 0;
	struct redisc_req *req;
	char *p;

	for (int i = 0; i < n; i++)
		bytes += lens[i] + 1;
	bytes += sizeof *req + argc * (sizeof *req->argv + sizeof *req->lens);
	bytes = (bytes + REDISC_REQ_ROUND - 1) / REDISC_REQ_ROUND *
	    REDISC_REQ_ROUND;
	if (rc.pool != NULL && rc.pool->size >= bytes) {
		req = rc.pool;
		rc.pool = req->pool_next;
		rc.npool--;
		bytes = req->size;
		memset(req, 0, sizeof *req);
	} else
		req = xcalloc(1, bytes);
	req->size = bytes;
	req->cb = cb;
	req->arg = arg;
	req->argc = (int)argc;
	req->argv = (char **)(req + 1);
	req->lens = (size_t *)(req->argv + argc);
	p = (char *)(req->lens + argc);
	for (int i = 0; i < n; i++) {
		memcpy(p, args[i], lens[i]);
		p[lens[i]] = '\0';
		req->argv[i + 2] = p;
		req->lens[i + 2] = lens[i];
		p += lens[i] + 1;
	}
	return req;
}

static void redisc_submit(struct redisc_req *req);
static void redisc_track(struct redisc_req *req);
static void redisc_flush(void);

void
redisc_command(int n, const char *const *args, const size_t *lens,
    redisc_cb *cb, void *arg)
{
	redisc_flush();
	redisc_submit(redisc_req_new(n, args, lens, cb, arg));
}

void
redisc_eval(struct redisc_script *script, int nkeys, int n,
    const char *const *args, const size_t *lens, redisc_cb *cb, void *arg)
{
	const char *argv[REDISC_MAX_ARGS];
	size_t alens[REDISC_MAX_ARGS];
	char nk[UTIL_U64_LEN];
	struct redisc_req *req;

	if (n + 1 > REDISC_MAX_ARGS)
		fatalx("redisc_eval: too many arguments");
	argv[0] = nk;
	alens[0] = util_u64str(nk, (uint64_t)nkeys);
	for (int i = 0; i < n; i++) {
		argv[i + 1] = args[i];
		alens[i + 1] = lens[i];
	}
	req = redisc_req_new(n + 1, argv, alens, cb, arg);
	req->script = script;
	req->nkeys = nkeys;
	if (script->batch == NULL || !rc.cmd.up) {
		redisc_flush();
		redisc_submit(req);
		return;
	}
	if (rc.nbatch == REDISC_BATCH_MAX)
		redisc_flush();
	redisc_track(req);
	rc.batch[rc.nbatch++] = req;
	if (rc.nbatch == 1)
		event_active(rc.batch_ev, EV_TIMEOUT, 1);
}

/* In flight from now, with its deadline (not sent yet). */
static void
redisc_track(struct redisc_req *req)
{
	req->sent_us = mono_us();
	req->deadline_ms =
	    req->sent_us / 1000 + (uint64_t)rc.cf->command_timeout_ms;
	TAILQ_INSERT_TAIL(&rc.inflight, req, entry);
	if (!evtimer_pending(rc.timeout_ev, NULL))
		redisc_arm_timeout();
}

/* Sent, or failed from the loop: never answered from inside the caller,
 * which may hold state. */
static void
redisc_send_tracked(struct redisc_req *req)
{
	if (redisc_send(req, true) != 0)
		redisc_fail_later(req);
}

/* In flight from now, with its deadline; failed from the loop if unsent. */
static void
redisc_submit(struct redisc_req *req)
{
	redisc_track(req);
	redisc_send_tracked(req);
}

/* A batch's reply: each call gets its own element (or the batch's error,
 * or NULL). */
static void
redisc_batch_cb(const redisReply *reply, void *arg)
{
	struct redisc_batch *b = arg;
	bool each = reply != NULL && reply->type == REDIS_REPLY_ARRAY &&
	    reply->elements == (size_t)b->n;

	if (reply != NULL && reply->type != REDIS_REPLY_ERROR && !each)
		log_warnx(
		    "redis: a batch of %d calls had a malformed reply", b->n);
	for (int i = 0; i < b->n; i++) {
		struct redisc_req *call = b->call[i];
		const redisReply *r = each ? reply->element[i] : NULL;

		if (reply != NULL && reply->type == REDIS_REPLY_ERROR)
			r = reply;
		call->answered = true;
		call->cb(r, call->arg);
		redisc_req_free(call);
	}
	free(b);
}

/*
 * n calls of scripts with the same batch and the same keys after the
 * first, as one call of it: KEYS are each call's first key, then the
 * others; ARGV n, then for each call its script's number in the batch,
 * how many arguments it has, and those.
 */
static void
redisc_batch_send(struct redisc_req **call, int n)
{
	static const char *argv[REDISC_BATCH_ARGS];
	static size_t lens[REDISC_BATCH_ARGS];
	static char num[REDISC_BATCH_MAX * 2 + 2][UTIL_U64_LEN];
	struct redisc_script *batch = call[0]->script->batch;
	int rest = call[0]->nkeys - 1, argc = 0, k = 0;
	struct redisc_batch *b;
	struct redisc_req *req;

	lens[argc] = util_u64str(num[k], (uint64_t)(n + rest));
	argv[argc++] = num[k++];
	for (int i = 0; i < n; i++) {
		lens[argc] = call[i]->lens[3];
		argv[argc++] = call[i]->argv[3];
	}
	for (int j = 0; j < rest; j++) {
		lens[argc] = call[0]->lens[4 + j];
		argv[argc++] = call[0]->argv[4 + j];
	}
	lens[argc] = util_u64str(num[k], (uint64_t)n);
	argv[argc++] = num[k++];
	for (int i = 0; i < n; i++) {
		struct redisc_req *c = call[i];
		int first = 3 + c->nkeys;

		lens[argc] = util_u64str(num[k], (uint64_t)c->script->batch_op);
		argv[argc++] = num[k++];
		lens[argc] = util_u64str(num[k], (uint64_t)(c->argc - first));
		argv[argc++] = num[k++];
		for (int j = first; j < c->argc; j++) {
			lens[argc] = c->lens[j];
			argv[argc++] = c->argv[j];
		}
		TAILQ_REMOVE(&rc.inflight, c, entry);
	}
	stats[STAT_redis_batched_total] += n;
	b = xmalloc(sizeof *b + (size_t)n * sizeof b->call[0]);
	b->n = n;
	memcpy(b->call, call, (size_t)n * sizeof b->call[0]);
	req = redisc_req_new(argc, argv, lens, redisc_batch_cb, b);
	req->script = batch;
	req->nkeys = n + rest;
	redisc_submit(req);
}

/* Whether call c may go in one batch with first: the same script, and
 * the same keys after the first. */
static bool
redisc_batch_fits(const struct redisc_req *first, const struct redisc_req *c)
{
	if (c->script != first->script || c->nkeys != first->nkeys)
		return false;
	for (int j = 4; j < 3 + c->nkeys; j++)
		if (c->lens[j] != first->lens[j] ||
		    memcmp(c->argv[j], first->argv[j], c->lens[j]) != 0)
			return false;
	return true;
}

/* Calls of one script: a run of calls that fit in one batch as one
 * call, a call alone as itself. */
static void
redisc_send_runs(struct redisc_req **call, int n)
{
	int from = 0;

	while (from < n) {
		int to = from + 1;

		while (to < n && redisc_batch_fits(call[from], call[to]))
			to++;
		if (to - from == 1)
			redisc_send_tracked(call[from]);
		else
			redisc_batch_send(call + from, to - from);
		from = to;
	}
}

/* Whether calls a and b name the same first key (a lock). */
static bool
redisc_same_key(const struct redisc_req *a, const struct redisc_req *b)
{
	return a->lens[3] == b->lens[3] &&
	    memcmp(a->argv[3], b->argv[3], a->lens[3]) == 0;
}

/*
 * Calls that commute (no two of different scripts name one key): each
 * script's in batches of their own, the scripts in the order of their
 * first call.
 */
static void
redisc_send_phase(struct redisc_req **call, int n)
{
	struct redisc_req *group[REDISC_BATCH_MAX];

	for (int i = 0; i < n; i++) {
		const struct redisc_script *script;
		int g = 0;

		if (call[i] == NULL)
			continue;
		script = call[i]->script;
		for (int j = i; j < n; j++)
			if (call[j] != NULL && call[j]->script == script) {
				group[g++] = call[j];
				call[j] = NULL;
			}
		redisc_send_runs(group, g);
	}
}

/* Where the run of calls that commute, from call[from] on, ends: at
 * the first call on the key of an earlier one of another script. */
static int
redisc_phase_end(struct redisc_req **call, int from, int n)
{
	for (int to = from + 1; to < n; to++)
		for (int k = from; k < to; k++)
			if (call[k]->script != call[to]->script &&
			    redisc_same_key(call[k], call[to]))
				return to;
	return n;
}

/*
 * Send this turn's calls of batched scripts. A batch holds one script's
 * calls: Redis checks a script against maxmemory only until its first
 * write, and a release's DEL is one, so a batch of acquires after it
 * would write into a full Redis that refuses each alone. Calls of
 * different scripts on different keys commute, so each script's go
 * together; a call on the key of an earlier call of another script
 * sends everything before it first, so calls on one key keep their
 * order.
 */
static void
redisc_flush(void)
{
	struct redisc_req *call[REDISC_BATCH_MAX];
	int n = 0, from = 0;

	for (int i = 0; i < rc.nbatch; i++) {
		if (rc.batch[i]->answered)
			redisc_req_free(rc.batch[i]);
		else
			call[n++] = rc.batch[i];
	}
	rc.nbatch = 0;
	while (from < n) {
		int to = redisc_phase_end(call, from, n);

		redisc_send_phase(call + from, to - from);
		from = to;
	}
}

static void
redisc_batch_ev_cb(evutil_socket_t fd, short what, void *arg)
{
	redisc_flush();
}

void
redisc_script_add(struct redisc_script *script)
{
	if (rc.nscripts == REDISC_MAX_SCRIPTS)
		fatalx("redisc: too many scripts");
	rc.scripts[rc.nscripts++] = script;
}

static void
redisc_script_loaded_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redisc_script *script = privdata;
	redisReply *reply = r;

	if (reply == NULL)
		return;
	if (reply->type != REDIS_REPLY_STRING || reply->len != 40) {
		log_warnx("redis: SCRIPT LOAD %s failed: %s", script->name,
		    reply->type == REDIS_REPLY_ERROR ? reply->str
						     : "bad reply");
		return;
	}
	memcpy(script->sha, reply->str, 40);
	script->sha[40] = '\0';
	log_debug("redis: script %s loaded as %s", script->name, script->sha);
}

static void redisc_conn_ready(struct redisc_conn *conn);

/*
 * AUTH and SELECT answers. The connection is used only once all of them
 * said OK: until then a request would reach Redis unauthenticated (and a
 * long one is a protocol error that closes the connection). A wrong
 * password is logged, and we retry later.
 */
static void
redisc_setup_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redisc_conn *conn = ac->data;
	redisReply *reply = r;
	const char *what = privdata;

	if (reply == NULL)
		return;
	if (reply->type == REDIS_REPLY_ERROR) {
		log_warnx(
		    "redis %s: %s failed: %s", conn->what, what, reply->str);
		redisAsyncDisconnect(ac);
	} else if (--conn->setup_left == 0 && conn->connected)
		redisc_conn_ready(conn);
}

/* A setup command whose answer the connection waits for. */
static void
redisc_setup_command(
    redisAsyncContext *ac, const char *what, const char *fmt, ...)
{
	struct redisc_conn *conn = ac->data;
	va_list ap;

	va_start(ap, fmt);
	if (redisvAsyncCommand(ac, redisc_setup_cb, (void *)what, fmt, ap) ==
	    REDIS_OK)
		conn->setup_left++;
	va_end(ap);
}

/* AUTH is queued before anything else, so it reaches Redis first. */
static void
redisc_queue_auth(redisAsyncContext *ac)
{
	const struct config_redis *cf = rc.cf;
	char *pass = NULL;

	if (cf->password_file[0] != '\0') {
		if ((pass = util_read_secret(cf->password_file)) == NULL)
			log_warn("redis.password_file %s", cf->password_file);
	} else if (cf->password[0] != '\0')
		pass = xstrdup(cf->password);
	if (pass != NULL && cf->username[0] != '\0')
		redisc_setup_command(
		    ac, "AUTH", "AUTH %s %s", cf->username, pass);
	else if (pass != NULL)
		redisc_setup_command(ac, "AUTH", "AUTH %s", pass);
	freezero_str(pass);
}

static void
redisc_cmd_setup(redisAsyncContext *ac)
{
	redisc_queue_auth(ac);
	if (rc.cf->db != 0)
		redisc_setup_command(ac, "SELECT", "SELECT %d", rc.cf->db);
}

/*
 * Every message on the channel, for as long as the connection lives. The
 * subscribe confirmation is passed on as a NULL message: anything published
 * while we were not subscribed is lost, so the listener should look again.
 */
static void
redisc_message_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	redisReply *reply = r;
	redisReply **el;

	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY ||
	    reply->elements != 3)
		return;
	el = reply->element;
	if (el[0]->type != REDIS_REPLY_STRING || el[2]->type == REDIS_REPLY_NIL)
		return;
	/* Subscribed to all of them (the count says so): missed meanwhile. */
	if (strcmp(el[0]->str, "subscribe") == 0 &&
	    el[2]->type == REDIS_REPLY_INTEGER &&
	    el[2]->integer == (rc.channel[1][0] != '\0' ? 2 : 1))
		rc.msg_cb(NULL, NULL, 0, rc.msg_arg);
	else if (strcmp(el[0]->str, "message") == 0 &&
	    el[1]->type == REDIS_REPLY_STRING &&
	    el[2]->type == REDIS_REPLY_STRING)
		rc.msg_cb(el[1]->str, el[2]->str, el[2]->len, rc.msg_arg);
}

static void
redisc_sub_setup(redisAsyncContext *ac)
{
	redisc_queue_auth(ac);
	if (rc.channel[1][0] != '\0')
		redisAsyncCommand(ac, redisc_message_cb, NULL,
		    "SUBSCRIBE %s %s", rc.channel[0], rc.channel[1]);
	else
		redisAsyncCommand(
		    ac, redisc_message_cb, NULL, "SUBSCRIBE %s", rc.channel[0]);
}

static int
redisc_target_direct(char *host, size_t len, int *port)
{
	snprintf(host, len, "%s", rc.cf->host);
	*port = rc.cf->port;
	return 0;
}

/* With Sentinel, the master is wherever the Sentinel last said. */
static int
redisc_target_master(char *host, size_t len, int *port)
{
	if (rc.cf->nsentinels == 0)
		return redisc_target_direct(host, len, port);
	if (rc.master_host[0] == '\0')
		return -1;
	snprintf(host, len, "%s", rc.master_host);
	*port = rc.master_port;
	return 0;
}

/* "host:port" or "[v6]:port", already checked by the config. */
static int
redisc_target_sentinel(char *host, size_t len, int *port)
{
	const char *hp = rc.cf->sentinels[rc.sentinel];
	const char *colon = strrchr(hp, ':');
	size_t n = (size_t)(colon - hp);

	if (hp[0] == '[') {
		hp++;
		n -= 2;
	}
	snprintf(host, len, "%.*s", (int)n, hp);
	*port = atoi(colon + 1);
	return 0;
}

static const char *
redisc_where(struct redisc_conn *conn, char *buf, size_t len)
{
	char host[256];
	int port;

	if (conn != &rc.sent && rc.cf->unix_path[0] != '\0')
		snprintf(buf, len, "%s", rc.cf->unix_path);
	else if (conn->target(host, sizeof host, &port) == 0)
		snprintf(buf, len, "%s:%d", host, port);
	else
		snprintf(buf, len, "(master unknown)");
	return buf;
}

static void
redisc_set_up(struct redisc_conn *conn, bool up)
{
	conn->up = up;
	/* Up is lockdb's to say (once it knows the incarnation). */
	if (conn == &rc.cmd && !up)
		STAT_SET(redis_up, 0);
}

static void
redisc_connect_cb(const redisAsyncContext *ac, int status)
{
	struct redisc_conn *conn = ac->data;
	char where[300];

	if (status != REDIS_OK) {
		evtimer_del(conn->connect_timeout_ev);
		/* hiredis frees the context itself after this returns. */
		log_warnx("redis %s: cannot connect to %s: %s", conn->what,
		    redisc_where(conn, where, sizeof where), ac->errstr);
		conn->ac = NULL;
		redisc_schedule_reconnect(conn);
		return;
	}
	conn->connected = true;
	/* TCP only: on a Unix socket it fails and marks the context bad. */
	if (conn == &rc.sent || rc.cf->unix_path[0] == '\0')
		redisEnableKeepAlive((redisContext *)&ac->c);
	log_info("redis %s: connected to %s", conn->what,
	    redisc_where(conn, where, sizeof where));
	if (conn->setup_left == 0)
		redisc_conn_ready(conn);
}

/* Connected, authenticated and on its database: in use from now on. */
static void
redisc_conn_ready(struct redisc_conn *conn)
{
	evtimer_del(conn->connect_timeout_ev);
	redisc_set_up(conn, true);
	conn->attempts = 0;
	if (conn != &rc.cmd)
		return;
	/* Not before AUTH is answered: unauthenticated, Redis takes a
	 * script longer than 16 KiB (batch.lua) for a protocol error. */
	for (int i = 0; i < rc.nscripts; i++)
		redisAsyncCommand(conn->ac, redisc_script_loaded_cb,
		    rc.scripts[i], "SCRIPT LOAD %s", rc.scripts[i]->body);
	rc.cmd_last_reply_ms = mono_ms();
	STAT_INC(redis_connects_total);
	if (rc.up_cb != NULL)
		rc.up_cb(rc.up_arg);
}

static void
redisc_disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct redisc_conn *conn = ac->data;

	conn->ac = NULL;
	conn->connected = false;
	redisc_set_up(conn, false);
	if (rc.stopping)
		return;
	log_warnx("redis %s: connection lost: %s", conn->what,
	    status == REDIS_OK ? "closed" : ac->errstr);
	redisc_schedule_reconnect(conn);
}

/* hiredis 0.14 has no connect timeout: this timer is it. */
static void
redisc_connect_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct redisc_conn *conn = arg;
	redisAsyncContext *ac = conn->ac;

	if (ac == NULL || conn->up)
		return;
	if (conn->connected) {
		log_warnx("redis %s: AUTH or SELECT not answered within %d ms",
		    conn->what, rc.cf->connect_timeout_ms);
		conn->ac = NULL;
		redisAsyncFree(ac); /* its disconnect callback reconnects */
		return;
	}
	log_warnx("redis %s: connect timed out after %d ms", conn->what,
	    rc.cf->connect_timeout_ms);
	conn->ac = NULL;
	redisAsyncFree(ac); /* not connected: no disconnect callback */
	redisc_schedule_reconnect(conn);
}

static void
redisc_conn_open(struct redisc_conn *conn)
{
	const struct config_redis *cf = rc.cf;
	struct timeval tv;
	char where[300];

	char host[256];
	int port;

	if (conn != &rc.sent && cf->unix_path[0] != '\0')
		conn->ac = redisAsyncConnectUnix(cf->unix_path);
	else if (conn->target(host, sizeof host, &port) == 0)
		conn->ac = redisAsyncConnect(host, port);
	else
		return; /* the Sentinel will tell, then redisc_moved opens it */
	if (conn->ac == NULL)
		fatalx("redis: out of memory");
	if (conn->ac->err) {
		log_warnx("redis %s: cannot connect to %s: %s", conn->what,
		    redisc_where(conn, where, sizeof where), conn->ac->errstr);
		redisAsyncFree(conn->ac);
		conn->ac = NULL;
		redisc_schedule_reconnect(conn);
		return;
	}
	conn->ac->data = conn;
	conn->connected = false;
	conn->setup_left = 0;
	redisc_ev_attach(conn->ac, rc.base);
	redisAsyncSetConnectCallback(conn->ac, redisc_connect_cb);
	redisAsyncSetDisconnectCallback(conn->ac, redisc_disconnect_cb);
	conn->setup(conn->ac);
	tv = util_timeval((uint64_t)cf->connect_timeout_ms);
	evtimer_add(conn->connect_timeout_ev, &tv);
}

static void
redisc_reconnect_cb(evutil_socket_t fd, short what, void *arg)
{
	redisc_conn_open(arg);
}

/*
 * Exponential back-off with jitter, so brokers do not reconnect in step.
 * The first try after a connection is lost is spread wider, over up to
 * REDISC_SPREAD x reconnect_min_ms: a fleet that lost one Redis at once (a
 * restart) would otherwise come back in one burst that overflows Redis's
 * listen backlog (1,000 brokers' 2,000 connections within 50 ms; those
 * dropped wait for TCP to send their SYN again, 1 and 3 s later).
 *
 * No delay is longer than REDISC_TRUST_PART of trust_ms: the holds were
 * last vouched for up to a beat (a quarter of it) before Redis went, so a
 * Redis back within what is left (5/8 of trust_ms, 3.1 s by default) finds
 * the broker back in time to vouch for them again.
 */
#define REDISC_SPREAD 5
#define REDISC_TRUST_PART 8

static uint64_t
redisc_max_delay_ms(void)
{
	uint64_t hi = (uint64_t)rc.cf->reconnect_max_ms;
	uint64_t part = (uint64_t)rc.cf->trust_ms / REDISC_TRUST_PART;

	return hi < part ? hi : part; /* trust_ms is at least 100 */
}

static uint64_t
redisc_spread_ms(void)
{
	uint64_t ms = (uint64_t)rc.cf->reconnect_min_ms * REDISC_SPREAD;

	return ms < redisc_max_delay_ms() ? ms : redisc_max_delay_ms();
}

static void
redisc_schedule_reconnect(struct redisc_conn *conn)
{
	uint64_t hi = redisc_max_delay_ms();
	uint64_t delay = (uint64_t)rc.cf->reconnect_min_ms;
	struct timeval tv;

	/* A Sentinel that does not answer: ask the next one. */
	if (conn == &rc.sent)
		rc.sentinel = (rc.sentinel + 1) % rc.cf->nsentinels;
	for (unsigned i = 0; i < conn->attempts && delay < hi; i++)
		delay *= 2;
	if (delay > hi)
		delay = hi;
	if (conn->attempts == 0)
		delay = util_random_range(1, redisc_spread_ms());
	else
		delay = util_random_range(delay / 2 + 1, delay);
	conn->attempts++;
	log_info("redis %s: retrying in %llu ms", conn->what,
	    (unsigned long long)delay);
	tv = util_timeval(delay);
	evtimer_add(conn->reconnect_ev, &tv);
}

void
redisc_on_connect(void (*fn)(void *), void *arg)
{
	rc.up_cb = fn;
	rc.up_arg = arg;
}

void
redisc_subscribe(
    const char *channel, const char *channel2, redisc_msg_cb *cb, void *arg)
{
	snprintf(rc.channel[0], sizeof rc.channel[0], "%s", channel);
	snprintf(rc.channel[1], sizeof rc.channel[1], "%s",
	    channel2 != NULL ? channel2 : "");
	rc.msg_cb = cb;
	rc.msg_arg = arg;
}

/*
 * The master moved (or became known): both connections go there at once.
 * The old master may be frozen or cut off rather than dead, so nothing
 * waits for its replies (a graceful disconnect would): the requests still
 * out there are answered now as not answered (their outcome unknown), and
 * the disconnect callback reconnects, to the new master.
 */
static void
redisc_moved(void)
{
	struct redisc_conn *conns[] = { &rc.cmd, &rc.sub };

	for (size_t i = 0; i < 2; i++) {
		struct redisc_conn *conn = conns[i];

		if (conn == &rc.sub && rc.msg_cb == NULL)
			continue;
		conn->attempts = 0;
		if (conn->ac != NULL && conn->connected)
			redisc_drop(conn);
		else if (conn->ac == NULL &&
		    !evtimer_pending(conn->reconnect_ev, NULL))
			redisc_conn_open(conn);
	}
}

static void
redisc_set_master(
    const char *host, size_t hlen, const char *port, const char *why)
{
	int p = atoi(port);

	if (hlen >= sizeof rc.master_host || p <= 0 || p > 65535)
		return;
	if (rc.master_port == p && strlen(rc.master_host) == hlen &&
	    memcmp(rc.master_host, host, hlen) == 0)
		return;
	memcpy(rc.master_host, host, hlen);
	rc.master_host[hlen] = '\0';
	rc.master_port = p;
	log_info("redis: master %s is at %s:%d (%s)", rc.cf->master_name,
	    rc.master_host, p, why);
	redisc_moved();
}

/* SENTINEL get-master-addr-by-name: {ip, port}, or nil if unknown. */
static void
redisc_master_addr_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	redisReply *reply = r;

	if (reply == NULL)
		return;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
	    reply->element[0]->type != REDIS_REPLY_STRING ||
	    reply->element[1]->type != REDIS_REPLY_STRING) {
		log_warnx("redis sentinel: does not know master %s",
		    rc.cf->master_name);
		redisAsyncDisconnect(ac); /* try the next Sentinel */
		return;
	}
	redisc_set_master(reply->element[0]->str, reply->element[0]->len,
	    reply->element[1]->str, "from Sentinel");
}

/* +switch-master "<name> <old-ip> <old-port> <new-ip> <new-port>". */
static void
redisc_switch_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	redisReply *reply = r, *msg;
	char *f[5], buf[512];
	int n = 0;

	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY ||
	    reply->elements != 3)
		return;
	msg = reply->element[2];
	if (msg->type != REDIS_REPLY_STRING || msg->len >= sizeof buf)
		return;
	memcpy(buf, msg->str, msg->len + 1);
	for (char *p = strtok(buf, " "); p != NULL && n < 5;
	     p = strtok(NULL, " "))
		f[n++] = p;
	if (n == 5 && strcmp(f[0], rc.cf->master_name) == 0)
		redisc_set_master(f[3], strlen(f[3]), f[4], "switched");
}

static void
redisc_sentinel_setup(redisAsyncContext *ac)
{
	redisAsyncCommand(ac, redisc_master_addr_cb, NULL,
	    "SENTINEL get-master-addr-by-name %s", rc.cf->master_name);
	redisAsyncCommand(
	    ac, redisc_switch_cb, NULL, "SUBSCRIBE +switch-master");
}

void
redisc_connect(void)
{
	if (rc.cf->nsentinels > 0)
		redisc_conn_open(&rc.sent); /* it opens the others */
	redisc_conn_open(&rc.cmd);
	if (rc.msg_cb != NULL)
		redisc_conn_open(&rc.sub);
}

static void
redisc_conn_init(struct redisc_conn *conn, const char *what,
    void (*setup)(redisAsyncContext *), int (*target)(char *, size_t, int *))
{
	conn->what = what;
	conn->setup = setup;
	conn->target = target;
	conn->reconnect_ev = evtimer_new(rc.base, redisc_reconnect_cb, conn);
	conn->connect_timeout_ev =
	    evtimer_new(rc.base, redisc_connect_timeout_cb, conn);
	if (conn->reconnect_ev == NULL || conn->connect_timeout_ev == NULL)
		fatalx("redisc: evtimer_new failed");
}

void
redisc_init(struct event_base *base, const struct config_redis *cf)
{
	memset(&rc, 0, sizeof rc);
	rc.base = base;
	rc.cf = cf;
	TAILQ_INIT(&rc.inflight);
	redisc_conn_init(
	    &rc.cmd, "command", redisc_cmd_setup, redisc_target_master);
	redisc_conn_init(
	    &rc.sub, "subscriber", redisc_sub_setup, redisc_target_master);
	redisc_conn_init(&rc.sent, "sentinel", redisc_sentinel_setup,
	    redisc_target_sentinel);
	if ((rc.timeout_ev = evtimer_new(base, redisc_timeout_cb, NULL)) ==
	    NULL)
		fatalx("redisc: evtimer_new failed");
	if ((rc.batch_ev = event_new(base, -1, 0, redisc_batch_ev_cb, NULL)) ==
	    NULL)
		fatalx("redisc: event_new failed");
	rc.failed_tail = &rc.failed;
	if ((rc.failed_ev = evtimer_new(base, redisc_failed_cb, NULL)) == NULL)
		fatalx("redisc: evtimer_new failed");
}

static void
redisc_conn_close(struct redisc_conn *conn)
{
	redisAsyncContext *ac = conn->ac;

	conn->ac = NULL;
	conn->connected = false;
	redisc_set_up(conn, false);
	if (ac != NULL)
		redisAsyncFree(ac);
	event_free(conn->reconnect_ev);
	event_free(conn->connect_timeout_ev);
}

/* Close both connections: every request still waiting is answered NULL. */
void
redisc_stop(void)
{
	struct redisc_req *held[REDISC_BATCH_MAX];
	int nheld;

	rc.stopping = true;
	redisc_conn_close(&rc.sent);
	redisc_conn_close(&rc.sub);
	redisc_conn_close(&rc.cmd);
	/* Calls held for a batch were never sent. The command connection is
	 * down now: a call their answers make is not held, it fails. */
	nheld = rc.nbatch;
	memcpy(held, rc.batch, (size_t)nheld * sizeof held[0]);
	rc.nbatch = 0;
	for (int i = 0; i < nheld; i++) {
		if (!held[i]->answered)
			redisc_answer(held[i], NULL);
		redisc_req_free(held[i]);
	}
	/* Those failed before the stop; any their answers fail go to the
	 * teardown's pass of the loop. */
	event_free(rc.failed_ev);
	rc.failed_ev = NULL;
	redisc_fail_now();
	event_free(rc.batch_ev);
	event_free(rc.timeout_ev);
	while (rc.pool != NULL) {
		struct redisc_req *req = rc.pool;

		rc.pool = req->pool_next;
		free(req);
	}
	rc.npool = 0;
}

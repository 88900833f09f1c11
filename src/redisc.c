/*
 * redisc: requests on the command connection, and the module's life.
 * Requests are kept in send order in one list; since every request has
 * the same timeout, one timer for the oldest is enough to answer all that
 * run late. A late reply finds its request marked answered and is only
 * freed. A request is one pooled allocation, sent by EVALSHA with EVAL on
 * NOSCRIPT; one that cannot be sent is failed from the loop. Batched
 * scripts' calls go through redisc_batch.c, connections are
 * redisc_conn.c's, and the Sentinels redisc_sentinel.c's.
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
#include "redisc_int.h"
#include "resp.h"
#include "slot.h"
#include "stats.h"
#include "util.h"
#include "xmalloc.h"

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

/* The module's one state, shared by redisc*.c (redisc_int.h). */
struct redisc_state rc;

bool
redisc_sub_up(void)
{
	return rc.msg_cb == NULL || rc.sub.up;
}

/* The one Redis is up; a cluster's map is known and its nodes up. */
bool
redisc_up(void)
{
	if (!rc.cluster)
		return rc.node[0].conn.up;
	for (int i = 0; i < rc.nnodes; i++)
		if (rc.node[i].in_map && !rc.node[i].conn.up)
			return false;
	return rc.mapped && rc.served > 0;
}

bool
redisc_idle(void)
{
	return TAILQ_EMPTY(&rc.inflight);
}

void
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
static void
redisc_check_hung(struct redisc_conn *conn, uint64_t now)
{
	uint64_t quiet =
	    REDISC_HUNG_TIMEOUTS * (uint64_t)rc.cf->command_timeout_ms;

	if (conn->ac == NULL || !conn->up || now - conn->last_reply_ms < quiet)
		return;
	log_warnx("redis %s: no reply for %llu ms; reconnecting", conn->what,
	    (unsigned long long)(now - conn->last_reply_ms));
	redisc_drop(conn);
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
		rc.node[req->node].timeouts++;
		redisc_check_hung(&rc.node[req->node].conn, now);
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
	if (!req->answered) {
		rc.unsent = true;
		redisc_answer(req, NULL);
		rc.unsent = false;
	}
	redisc_req_free(req);
}

bool
redisc_unsent(void)
{
	return rc.unsent;
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

/* Queue argv on its node's connection, sent at the end of the turn. */
static int
redisc_write(
    struct redisc_req *req, int argc, char *const *argv, const size_t *lens)
{
	static char buf[65536]; /* a batch of calls fits */
	size_t len = resp_format(buf, sizeof buf, argc, argv, lens);
	redisAsyncContext *ac = rc.node[req->node].conn.ac;
	int rv;

	/* ASK: this once, the node that imports the slot takes it. */
	if (req->asking &&
	    redisAsyncCommand(ac, NULL, NULL, "ASKING") != REDIS_OK)
		return -1;
	if (len > 0)
		rv = redisAsyncFormattedCommand(
		    ac, redisc_reply_cb, req, buf, len);
	else
		rv = redisAsyncCommandArgv(
		    ac, redisc_reply_cb, req, argc, (const char **)argv, lens);
	return rv == REDIS_OK ? 0 : -1;
}

static void
redisc_reply_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redisc_req *req = privdata;
	const redisReply *reply = r;
	struct redisc_conn *conn = ac->data;

	if (reply != NULL) {
		uint64_t now = mono_us();

		conn->last_reply_ms = now / 1000;
		stats_observe(HIST_redis_rtt_seconds, now - req->sent_us);
		if (redisc_doubt_heard(conn->node, req, reply, now / 1000))
			return; /* held (redisc_doubt.c) */
	}
	if (req->answered)
		redisc_req_free(req);
	else
		redisc_reply_use(req, reply);
	/* A master turned replica: closed once its last reply came. */
	if (reply != NULL && conn->node >= 0)
		redisc_node_park(conn->node);
}

void
redisc_reply_use(struct redisc_req *req, const redisReply *reply)
{
	if (rc.cluster && reply != NULL && reply->type == REDIS_REPLY_ERROR &&
	    redisc_cluster_redirect(req, reply))
		return;
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
	int node = redisc_route(req);

	if (node < 0 || rc.node[node].conn.ac == NULL || !rc.node[node].conn.up)
		return -1;
	req->node = node;
	rc.node[node].requests++;
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
struct redisc_req *
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
	req->slot = -1;
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

static void redisc_track(struct redisc_req *req);

void
redisc_command(int n, const char *const *args, const size_t *lens,
    redisc_cb *cb, void *arg)
{
	redisc_command_on(0, n, args, lens, cb, arg);
}

void
redisc_command_on(int node, int n, const char *const *args, const size_t *lens,
    redisc_cb *cb, void *arg)
{
	struct redisc_req *req = redisc_req_new(n, args, lens, cb, arg);

	req->node = node;
	redisc_flush();
	redisc_submit(req);
}

void
redisc_command_slot(int slot, int n, const char *const *args,
    const size_t *lens, redisc_cb *cb, void *arg)
{
	struct redisc_req *req = redisc_req_new(n, args, lens, cb, arg);

	req->slot = slot;
	redisc_flush();
	redisc_submit(req);
}

/* A script's call: its key count, then its arguments. */
static struct redisc_req *
redisc_eval_req(struct redisc_script *script, int nkeys, int n,
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
	return req;
}

void
redisc_eval_slot(int slot, struct redisc_script *script, int n,
    const char *const *args, const size_t *lens, redisc_cb *cb, void *arg)
{
	struct redisc_req *req =
	    redisc_eval_req(script, 0, n, args, lens, cb, arg);

	req->slot = slot;
	redisc_flush();
	redisc_submit(req);
}

void
redisc_eval(struct redisc_script *script, int nkeys, int n,
    const char *const *args, const size_t *lens, redisc_cb *cb, void *arg)
{
	struct redisc_req *req =
	    redisc_eval_req(script, nkeys, n, args, lens, cb, arg);

	if (nkeys > 0)
		req->slot = slot_of_key(args[0], lens[0]);
	/* A cluster's batch would carry keys of several slots. */
	if (script->batch == NULL || rc.cluster || !rc.node[0].conn.up) {
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
void
redisc_send_tracked(struct redisc_req *req)
{
	if (redisc_send(req, true) != 0)
		redisc_fail_later(req);
}

/* Sent again where its slot is now; freed if it was answered (its
 * deadline passed) meanwhile. */
void
redisc_resend(struct redisc_req *req)
{
	if (req->answered) {
		redisc_req_free(req);
		return;
	}
	redisc_send_tracked(req);
}

/* In flight from now, with its deadline; failed from the loop if unsent. */
void
redisc_submit(struct redisc_req *req)
{
	redisc_track(req);
	redisc_send_tracked(req);
}

void
redisc_init(struct event_base *base, const struct config_redis *cf)
{
	memset(&rc, 0, sizeof rc);
	rc.base = base;
	rc.cf = cf;
	TAILQ_INIT(&rc.inflight);
	redisc_conn_init(
	    &rc.sub, "subscriber", redisc_sub_setup, redisc_target_sub);
	redisc_cluster_init();
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

/* Close both connections: every request still waiting is answered NULL. */
void
redisc_stop(void)
{
	struct redisc_req *held[REDISC_BATCH_MAX];
	int nheld;

	rc.stopping = true;
	redisc_conn_close(&rc.sent);
	redisc_conn_close(&rc.sub);
	redisc_cluster_stop();
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

/*
 * redisc: one async hiredis command connection. Requests are kept in send
 * order in one list; since every request has the same timeout, one timer for
 * the oldest is enough to answer all that run late. A late reply finds its
 * request marked answered and is only freed.
 */
#include <sys/queue.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>

#include "config.h"
#include "log.h"
#include "redisc.h"
#include "stats.h"
#include "util.h"
#include "xmalloc.h"

#define REDISC_MAX_SCRIPTS 8

struct redisc_req {
	TAILQ_ENTRY(redisc_req) entry; /* in rc.inflight until answered */
	redisc_cb *cb;
	void *arg;
	uint64_t deadline_ms;
	bool answered; /* cb has run; a late reply is only freed */
	bool retried;  /* NOSCRIPT was answered by EVAL once already */
	struct redisc_script *script;
	int argc; /* argv[0], argv[1] are the verb and sha/body */
	char **argv;
	size_t *lens;
};

static struct {
	struct event_base *base;
	const struct config_redis *cf;
	redisAsyncContext *ac;
	bool up; /* connect callback said OK */
	bool stopping;
	unsigned attempts; /* failed connects in a row, for the back-off */
	struct event *reconnect_ev;
	struct event *connect_timeout_ev;
	struct event *timeout_ev;
	TAILQ_HEAD(, redisc_req) inflight;
	struct redisc_script *scripts[REDISC_MAX_SCRIPTS];
	int nscripts;
} rc;

static void redisc_schedule_reconnect(void);

bool
redisc_up(void)
{
	return rc.up;
}

bool
redisc_idle(void)
{
	return TAILQ_EMPTY(&rc.inflight);
}

static void
redisc_req_free(struct redisc_req *req)
{
	for (int i = 2; i < req->argc; i++)
		free(req->argv[i]);
	free(req->argv);
	free(req->lens);
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
	tv.tv_sec = (time_t)(left / 1000);
	tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
	evtimer_add(rc.timeout_ev, &tv);
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
	}
	redisc_arm_timeout();
}

/* A request that could not even be sent is failed from the loop, later. */
static void
redisc_fail_later_cb(evutil_socket_t fd, short what, void *arg)
{
	struct redisc_req *req = arg;

	if (!req->answered)
		redisc_answer(req, NULL);
	redisc_req_free(req);
}

static void
redisc_fail_later(struct redisc_req *req)
{
	struct timeval zero = { 0, 0 };

	if (event_base_once(
		rc.base, -1, EV_TIMEOUT, redisc_fail_later_cb, req, &zero) != 0)
		fatalx("event_base_once failed");
}

static bool
redisc_is_noscript(const redisReply *r)
{
	return r != NULL && r->type == REDIS_REPLY_ERROR &&
	    strncmp(r->str, "NOSCRIPT", 8) == 0;
}

static int redisc_send(struct redisc_req *req, bool by_sha);

static void
redisc_reply_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redisc_req *req = privdata;
	const redisReply *reply = r;

	if (req->answered) {
		redisc_req_free(req);
		return;
	}
	/* SCRIPT FLUSH or a new server: run the body, which caches it again. */
	if (redisc_is_noscript(reply) && !req->retried) {
		STAT_INC(redis_noscript_total);
		log_info(
		    "redis: script %s not cached (NOSCRIPT), sending it again",
		    req->script->name);
		req->retried = true;
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
	if (rc.ac == NULL || !rc.up)
		return -1;
	if (by_sha && req->script->sha[0] != '\0') {
		req->argv[0] = "EVALSHA";
		req->argv[1] = req->script->sha;
	} else {
		req->argv[0] = "EVAL";
		req->argv[1] = (char *)req->script->body;
	}
	req->lens[0] = strlen(req->argv[0]);
	req->lens[1] = strlen(req->argv[1]);
	STAT_INC(redis_requests_total);
	if (redisAsyncCommandArgv(rc.ac, redisc_reply_cb, req, req->argc,
		(const char **)req->argv, req->lens) != REDIS_OK)
		return -1;
	return 0;
}

void
redisc_eval(struct redisc_script *script, int nkeys, int n,
    const char *const *args, const size_t *lens, redisc_cb *cb, void *arg)
{
	struct redisc_req *req = xcalloc(1, sizeof *req);
	char nk[16];

	req->cb = cb;
	req->arg = arg;
	req->script = script;
	req->argc = n + 3;
	req->argv = xcalloc((size_t)req->argc, sizeof *req->argv);
	req->lens = xcalloc((size_t)req->argc, sizeof *req->lens);
	snprintf(nk, sizeof nk, "%d", nkeys);
	req->argv[2] = xstrdup(nk);
	req->lens[2] = strlen(nk);
	for (int i = 0; i < n; i++) {
		req->argv[i + 3] = xstrndup(args[i], lens[i]);
		req->lens[i + 3] = lens[i];
	}
	req->deadline_ms = mono_ms() + (uint64_t)rc.cf->command_timeout_ms;
	TAILQ_INSERT_TAIL(&rc.inflight, req, entry);
	if (redisc_send(req, true) != 0) {
		/* Never answered from inside the caller: it may hold state. */
		redisc_fail_later(req);
		return;
	}
	if (!evtimer_pending(rc.timeout_ev, NULL))
		redisc_arm_timeout();
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

/* AUTH and SELECT answers: a wrong password is logged, and we retry later. */
static void
redisc_setup_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	redisReply *reply = r;
	const char *what = privdata;

	if (reply == NULL || reply->type != REDIS_REPLY_ERROR)
		return;
	log_warnx("redis: %s failed: %s", what, reply->str);
	redisAsyncDisconnect(ac);
}

/* Read a secret from a file: its first line, without the newline. */
static char *
redisc_read_secret(const char *path)
{
	char buf[512];
	FILE *f;

	if ((f = fopen(path, "r")) == NULL) {
		log_warn("redis: %s", path);
		return NULL;
	}
	if (fgets(buf, sizeof buf, f) == NULL)
		buf[0] = '\0';
	fclose(f);
	buf[strcspn(buf, "\r\n")] = '\0';
	return xstrdup(buf);
}

/* Queued before anything else, so they reach Redis first. */
static void
redisc_queue_setup(void)
{
	const struct config_redis *cf = rc.cf;
	char *pass = NULL;

	if (cf->password_file[0] != '\0')
		pass = redisc_read_secret(cf->password_file);
	else if (cf->password[0] != '\0')
		pass = xstrdup(cf->password);
	if (pass != NULL && cf->username[0] != '\0')
		redisAsyncCommand(rc.ac, redisc_setup_cb, "AUTH", "AUTH %s %s",
		    cf->username, pass);
	else if (pass != NULL)
		redisAsyncCommand(
		    rc.ac, redisc_setup_cb, "AUTH", "AUTH %s", pass);
	freezero_str(pass);
	if (cf->db != 0)
		redisAsyncCommand(
		    rc.ac, redisc_setup_cb, "SELECT", "SELECT %d", cf->db);
	for (int i = 0; i < rc.nscripts; i++)
		redisAsyncCommand(rc.ac, redisc_script_loaded_cb, rc.scripts[i],
		    "SCRIPT LOAD %s", rc.scripts[i]->body);
}

static const char *
redisc_where(char *buf, size_t len)
{
	if (rc.cf->unix_path[0] != '\0')
		snprintf(buf, len, "%s", rc.cf->unix_path);
	else
		snprintf(buf, len, "%s:%d", rc.cf->host, rc.cf->port);
	return buf;
}

static void
redisc_connect_cb(const redisAsyncContext *ac, int status)
{
	char where[256];

	evtimer_del(rc.connect_timeout_ev);
	if (status != REDIS_OK) {
		/* hiredis frees the context itself after this returns. */
		log_warnx("redis: cannot connect to %s: %s",
		    redisc_where(where, sizeof where), ac->errstr);
		rc.ac = NULL;
		redisc_schedule_reconnect();
		return;
	}
	rc.up = true;
	rc.attempts = 0;
	STAT_INC(redis_connects_total);
	STAT_SET(redis_up, 1);
	log_info("redis: connected to %s", redisc_where(where, sizeof where));
}

static void
redisc_disconnect_cb(const redisAsyncContext *ac, int status)
{
	rc.ac = NULL;
	rc.up = false;
	STAT_SET(redis_up, 0);
	if (rc.stopping)
		return;
	log_warnx("redis: connection lost: %s",
	    status == REDIS_OK ? "closed" : ac->errstr);
	redisc_schedule_reconnect();
}

/* hiredis 0.14 has no connect timeout: this timer is it. */
static void
redisc_connect_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	redisAsyncContext *ac = rc.ac;

	if (ac == NULL || rc.up)
		return;
	log_warnx(
	    "redis: connect timed out after %d ms", rc.cf->connect_timeout_ms);
	rc.ac = NULL;
	redisAsyncFree(ac); /* not connected: no disconnect callback */
	redisc_schedule_reconnect();
}

static void
redisc_timeval(struct timeval *tv, uint64_t ms)
{
	tv->tv_sec = (time_t)(ms / 1000);
	tv->tv_usec = (suseconds_t)(ms % 1000) * 1000;
}

void
redisc_connect(void)
{
	const struct config_redis *cf = rc.cf;
	struct timeval tv;
	char where[256];

	if (cf->unix_path[0] != '\0')
		rc.ac = redisAsyncConnectUnix(cf->unix_path);
	else
		rc.ac = redisAsyncConnect(cf->host, cf->port);
	if (rc.ac == NULL)
		fatalx("redis: out of memory");
	if (rc.ac->err) {
		log_warnx("redis: cannot connect to %s: %s",
		    redisc_where(where, sizeof where), rc.ac->errstr);
		redisAsyncFree(rc.ac);
		rc.ac = NULL;
		redisc_schedule_reconnect();
		return;
	}
	redisLibeventAttach(rc.ac, rc.base);
	redisAsyncSetConnectCallback(rc.ac, redisc_connect_cb);
	redisAsyncSetDisconnectCallback(rc.ac, redisc_disconnect_cb);
	redisc_queue_setup();
	redisc_timeval(&tv, (uint64_t)cf->connect_timeout_ms);
	evtimer_add(rc.connect_timeout_ev, &tv);
}

static void
redisc_reconnect_cb(evutil_socket_t fd, short what, void *arg)
{
	redisc_connect();
}

/* Exponential back-off with jitter, so brokers do not reconnect in step. */
static void
redisc_schedule_reconnect(void)
{
	uint64_t lo = (uint64_t)rc.cf->reconnect_min_ms;
	uint64_t hi = (uint64_t)rc.cf->reconnect_max_ms;
	uint64_t delay = lo;
	struct timeval tv;

	for (unsigned i = 0; i < rc.attempts && delay < hi; i++)
		delay *= 2;
	if (delay > hi)
		delay = hi;
	delay = util_random_range(delay / 2 + 1, delay);
	rc.attempts++;
	log_info("redis: retrying in %llu ms", (unsigned long long)delay);
	redisc_timeval(&tv, delay);
	evtimer_add(rc.reconnect_ev, &tv);
}

void
redisc_init(struct event_base *base, const struct config_redis *cf)
{
	memset(&rc, 0, sizeof rc);
	rc.base = base;
	rc.cf = cf;
	TAILQ_INIT(&rc.inflight);
	rc.reconnect_ev = evtimer_new(base, redisc_reconnect_cb, NULL);
	rc.connect_timeout_ev =
	    evtimer_new(base, redisc_connect_timeout_cb, NULL);
	rc.timeout_ev = evtimer_new(base, redisc_timeout_cb, NULL);
	if (rc.reconnect_ev == NULL || rc.connect_timeout_ev == NULL ||
	    rc.timeout_ev == NULL)
		fatalx("redisc: evtimer_new failed");
}

/* Close the connection: every request still waiting is answered NULL. */
void
redisc_stop(void)
{
	redisAsyncContext *ac = rc.ac;

	rc.stopping = true;
	rc.ac = NULL;
	rc.up = false;
	if (ac != NULL)
		redisAsyncFree(ac);
	event_free(rc.reconnect_ev);
	event_free(rc.connect_timeout_ev);
	event_free(rc.timeout_ev);
}

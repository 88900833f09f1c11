/*
 * redisc_conn: each connection's life (command, subscriber, Sentinel):
 * open with a connect timeout of its own, AUTH and SELECT before use, the
 * scripts loaded at every connect, the subscription's messages, and
 * reconnect with a jittered back-off from the disconnect callback. Calls
 * redisc_ev and, for where to connect, redisc_sentinel.c.
 */
#include <sys/queue.h>

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
#include "redisc_int.h"
#include "stats.h"
#include "util.h"
#include "xmalloc.h"

static void redisc_schedule_reconnect(struct redisc_conn *conn);

/* redis.unix is the one Redis's socket: never a Sentinel's, nor a
 * cluster's (whose nodes are found by address). */
static bool
redisc_on_unix(const struct redisc_conn *conn)
{
	return conn != &rc.sent && !rc.cluster && rc.cf->unix_path[0] != '\0';
}
static void redisc_set_up(struct redisc_conn *conn, bool up);

/* Close conn now, without waiting for the replies still owed (those
 * requests are answered as not answered): its disconnect callback
 * schedules the reconnect. */
void
redisc_drop(struct redisc_conn *conn)
{
	redisAsyncContext *ac = conn->ac;

	conn->ac = NULL;
	redisc_set_up(conn, false);
	redisAsyncFree(ac);
}

void
redisc_park(struct redisc_conn *conn)
{
	redisAsyncContext *ac = conn->ac;

	conn->parked = true;
	evtimer_del(conn->reconnect_ev);
	evtimer_del(conn->connect_timeout_ev);
	conn->attempts = 0;
	if (ac == NULL)
		return;
	conn->ac = NULL;
	conn->connected = false;
	redisc_set_up(conn, false);
	redisAsyncFree(ac);
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
		redisc_conn_failed(conn, "%s failed: %s", what, reply->str);
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

void
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

void
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

static const char *
redisc_where(struct redisc_conn *conn, char *buf, size_t len)
{
	char host[256];
	int port;

	if (redisc_on_unix(conn))
		snprintf(buf, len, "%s", rc.cf->unix_path);
	else if (conn->target(conn, host, sizeof host, &port) == 0)
		snprintf(buf, len, "%s:%d", host, port);
	else
		snprintf(buf, len, "(master unknown)");
	return buf;
}

/*
 * A connect that failed (refused, timed out, its AUTH or SELECT refused or
 * not answered). An outage is a state, not an event for each try: the
 * first failure after the connection was up (or the first ever) is
 * logged, and one of another kind; the same again only every
 * REDISC_STILL_MS, with how many came since. The connect that ends it
 * says how long it took (redisc_conn_ready).
 */
void
redisc_conn_failed(struct redisc_conn *conn, const char *fmt, ...)
{
	char why[sizeof conn->said];
	uint64_t now = mono_ms();
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	if (conn->fails++ == 0)
		conn->down_ms = now;
	if (conn->fails == 1 || strcmp(why, conn->said) != 0) {
		log_warnx("redis %s: %s", conn->what, why);
		memcpy(conn->said, why, sizeof why);
		conn->said_ms = now;
	} else if (now >= conn->said_ms + REDISC_STILL_MS) {
		log_warnx("redis %s: %s (still: %u attempts in %llu s)",
		    conn->what, why, conn->fails,
		    (unsigned long long)(now - conn->down_ms) / 1000);
		conn->said_ms = now;
	}
}

static void
redisc_set_up(struct redisc_conn *conn, bool up)
{
	conn->up = up;
	/* Up is lockdb's to say (once it knows the incarnation); down, any
	 * node in use. Not a cluster's node that the map no longer names
	 * (a seed that is a replica, a master turned replica), closed on
	 * purpose: nothing would say up again. */
	if (conn->node >= 0 && !up && redisc_node_used(conn->node))
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
		redisc_conn_failed(conn, "cannot connect to %s: %s",
		    redisc_where(conn, where, sizeof where),
		    redisc_tls_errstr(conn, ac));
		conn->ac = NULL;
		redisc_schedule_reconnect(conn);
		return;
	}
	conn->connected = true;
	/* TCP only: on a Unix socket it fails and marks the context bad. */
	if (!redisc_on_unix(conn))
		redisEnableKeepAlive((redisContext *)&ac->c);
	log_debug("redis %s: socket connected to %s; setting it up", conn->what,
	    redisc_where(conn, where, sizeof where));
	if (conn->setup_left == 0)
		redisc_conn_ready(conn);
}

/* Connected, authenticated and on its database: in use from now on. */
void
redisc_conn_ready(struct redisc_conn *conn)
{
	char where[300];

	evtimer_del(conn->connect_timeout_ev);
	redisc_set_up(conn, true);
	redisc_where(conn, where, sizeof where);
	if (conn->fails > 0)
		log_info(
		    "redis %s: connected to %s after %u failed attempts in %llu s",
		    conn->what, where, conn->fails,
		    (unsigned long long)(mono_ms() - conn->down_ms) / 1000);
	else
		log_info("redis %s: connected to %s", conn->what, where);
	conn->fails = 0;
	conn->attempts = 0;
	if (conn->node < 0)
		return;
	/* Not before AUTH is answered: unauthenticated, Redis takes a
	 * script longer than 16 KiB (batch.lua) for a protocol error. */
	for (int i = 0; i < rc.nscripts; i++)
		redisAsyncCommand(conn->ac, redisc_script_loaded_cb,
		    rc.scripts[i], "SCRIPT LOAD %s", rc.scripts[i]->body);
	conn->last_reply_ms = mono_ms();
	STAT_INC(redis_connects_total);
	redisc_cluster_connected(&rc.node[conn->node]);
	if (rc.up_cb != NULL)
		rc.up_cb(conn->node, rc.up_arg);
}

static void
redisc_disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct redisc_conn *conn = ac->data;

	bool was_up = conn->up;

	conn->ac = NULL;
	conn->connected = false;
	redisc_set_up(conn, false);
	if (rc.stopping || conn->parked)
		return;
	/* One that never came up failed its setup, and said so. */
	if (was_up)
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
		/* A TLS connection's first reply is its PING's. */
		redisc_conn_failed(conn, "%s not answered within %d ms",
		    conn->tls != NULL ? "TLS handshake" : "AUTH or SELECT",
		    rc.cf->connect_timeout_ms);
		conn->ac = NULL;
		redisAsyncFree(ac); /* its disconnect callback reconnects */
		return;
	}
	redisc_conn_failed(
	    conn, "connect timed out after %d ms", rc.cf->connect_timeout_ms);
	conn->ac = NULL;
	redisAsyncFree(ac); /* not connected: no disconnect callback */
	redisc_schedule_reconnect(conn);
}

void
redisc_conn_open(struct redisc_conn *conn)
{
	const struct config_redis *cf = rc.cf;
	struct timeval tv;
	char where[300];

	char host[256];
	int port;

	conn->parked = false;
	if (redisc_on_unix(conn))
		conn->ac = redisAsyncConnectUnix(cf->unix_path);
	else if (conn->target(conn, host, sizeof host, &port) == 0)
		conn->ac = redisAsyncConnect(host, port);
	else
		return; /* the Sentinel will tell, then redisc_moved opens it */
	if (conn->ac == NULL)
		fatalx("redis: out of memory");
	conn->setup_left = 0;
	if (!redisc_on_unix(conn))
		redisc_tls_start(conn, host, port); /* with redis.tls */
	if (conn->ac->err) {
		redisc_conn_failed(conn, "cannot connect to %s: %s",
		    redisc_where(conn, where, sizeof where), conn->ac->errstr);
		redisAsyncFree(conn->ac);
		conn->ac = NULL;
		redisc_schedule_reconnect(conn);
		return;
	}
	conn->ac->data = conn;
	conn->connected = false;
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
	struct redisc_conn *conn = arg;

	/* A cluster's node no longer in the map (a master killed, its
	 * replica promoted) is left alone until a map names it again. */
	if (conn->node >= 0 && rc.cluster && rc.mapped &&
	    !rc.node[conn->node].in_map)
		return;
	redisc_conn_open(conn);
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
	log_debug("redis %s: retrying in %llu ms", conn->what,
	    (unsigned long long)delay);
	tv = util_timeval(delay);
	evtimer_add(conn->reconnect_ev, &tv);
	/* A cluster's master that does not answer: the map may say
	 * another serves its slots by now. */
	if (conn->node >= 0 && rc.cluster)
		redisc_cluster_lost(conn->node);
}

void
redisc_on_connect(void (*fn)(int, void *), void *arg)
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

void
redisc_connect(void)
{
	rc.base_ready = true;
	if (rc.cf->nsentinels > 0)
		redisc_conn_open(&rc.sent); /* it opens the others */
	for (int i = 0; i < rc.nnodes; i++)
		redisc_conn_open(&rc.node[i].conn);
	if (rc.msg_cb != NULL)
		redisc_conn_open(&rc.sub);
}

void
redisc_conn_init(struct redisc_conn *conn, const char *what,
    void (*setup)(redisAsyncContext *),
    int (*target)(struct redisc_conn *, char *, size_t, int *))
{
	conn->what = what;
	conn->node = -1;
	conn->setup = setup;
	conn->target = target;
	conn->reconnect_ev = evtimer_new(rc.base, redisc_reconnect_cb, conn);
	conn->connect_timeout_ev =
	    evtimer_new(rc.base, redisc_connect_timeout_cb, conn);
	if (conn->reconnect_ev == NULL || conn->connect_timeout_ev == NULL)
		fatalx("redisc: evtimer_new failed");
}

void
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

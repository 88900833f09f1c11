/*
 * redisc_sentinel: where the master is. With redis.sentinels, one
 * Sentinel at a time is asked for the master and followed on
 * +switch-master; when the master moves both connections go there at
 * once. Without, the master is redis.host and redis.port. Calls
 * redisc_conn.c to drop and open connections.
 */
#include <sys/queue.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "config.h"
#include "log.h"
#include "redisc.h"
#include "redisc_int.h"

static int
redisc_target_direct(char *host, size_t len, int *port)
{
	snprintf(host, len, "%s", rc.cf->host);
	*port = rc.cf->port;
	return 0;
}

/* With Sentinel, the master is wherever the Sentinel last said. */
int
redisc_target_master(
    struct redisc_conn *conn, char *host, size_t len, int *port)
{
	if (rc.cf->nsentinels == 0)
		return redisc_target_direct(host, len, port);
	if (rc.master_host[0] == '\0')
		return -1;
	snprintf(host, len, "%s", rc.master_host);
	*port = rc.master_port;
	return 0;
}

/* The Sentinel asked now, from its "host:port" entry. */
int
redisc_target_sentinel(
    struct redisc_conn *conn, char *host, size_t len, int *port)
{
	redisc_split_hostport(rc.cf->sentinels[rc.sentinel], host, len, port);
	return 0;
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
	struct redisc_conn *conns[] = { &rc.node[0].conn, &rc.sub };

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

void
redisc_sentinel_setup(redisAsyncContext *ac)
{
	redisAsyncCommand(ac, redisc_master_addr_cb, NULL,
	    "SENTINEL get-master-addr-by-name %s", rc.cf->master_name);
	redisAsyncCommand(
	    ac, redisc_switch_cb, NULL, "SUBSCRIBE +switch-master");
}

/*
 * redisc_sentinel: where the master is. With redis.sentinels, one
 * Sentinel at a time is asked for the master (SENTINEL MASTER: its
 * address and config-epoch, which every failover raises) and followed on
 * +switch-master; when the master moves both connections go there at
 * once. Without, the master is redis.host and redis.port. Calls
 * redisc_conn.c to drop and open connections.
 *
 * The epoch goes into the incarnation marker (incarnation.lua): a master
 * stopped past a failover and made master again without ever being a
 * replica keeps its run_id and its replication id, and only the epoch
 * says that another master served in between. So no connection to the
 * master is made while its epoch is not known: +switch-master, which
 * does not carry it, makes the Sentinel be asked again.
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

/* With Sentinel, the master is wherever the Sentinel last said, once it
 * said with which epoch. */
int
redisc_target_master(
    struct redisc_conn *conn, char *host, size_t len, int *port)
{
	if (rc.cf->nsentinels == 0)
		return redisc_target_direct(host, len, port);
	if (rc.master_host[0] == '\0' || rc.master_epoch[0] == '\0')
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
		if (conn->ac != NULL && conn->connected) {
			redisc_drop(conn);
			continue;
		}
		/* One still connecting goes to the old address. */
		if (conn->ac != NULL)
			redisc_park(conn);
		if (!evtimer_pending(conn->reconnect_ev, NULL))
			redisc_conn_open(conn);
	}
}

const char *
redisc_master_epoch(void)
{
	return rc.cf->nsentinels > 0 ? rc.master_epoch : "";
}

static void
redisc_set_master(const redisReply *host, const redisReply *port,
    const redisReply *epoch, const char *why)
{
	int p = atoi(port->str);

	if (host->len >= sizeof rc.master_host || p <= 0 || p > 65535 ||
	    epoch->len >= sizeof rc.master_epoch ||
	    strspn(epoch->str, "0123456789") != epoch->len || epoch->len == 0)
		return;
	if (rc.master_port == p && strcmp(rc.master_host, host->str) == 0 &&
	    strcmp(rc.master_epoch, epoch->str) == 0)
		return;
	memcpy(rc.master_host, host->str, host->len + 1);
	memcpy(rc.master_epoch, epoch->str, epoch->len + 1);
	rc.master_port = p;
	log_info("redis: master %s is at %s:%d (%s), config-epoch %s",
	    rc.cf->master_name, rc.master_host, p, why, rc.master_epoch);
	redisc_moved();
}

static const redisReply *
redisc_field(const redisReply *reply, const char *name)
{
	for (size_t i = 0; i + 1 < reply->elements; i += 2) {
		const redisReply *k = reply->element[i],
				 *v = reply->element[i + 1];

		if (k->type == REDIS_REPLY_STRING && strcmp(k->str, name) == 0)
			return v->type == REDIS_REPLY_STRING ? v : NULL;
	}
	return NULL;
}

/* SENTINEL MASTER: the master's fields, as name and value in turn. */
static void
redisc_master_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	redisReply *reply = r;
	const redisReply *ip = NULL, *port = NULL, *epoch = NULL, *flags = NULL;

	if (reply == NULL)
		return;
	if (reply->type == REDIS_REPLY_ARRAY) {
		ip = redisc_field(reply, "ip");
		port = redisc_field(reply, "port");
		epoch = redisc_field(reply, "config-epoch");
		flags = redisc_field(reply, "flags");
	}
	/* Mid-failover the epoch is the new master's, the address still the
	 * old one's, until +switch-master: ask again. */
	if (flags != NULL &&
	    strstr(flags->str, "failover_in_progress") != NULL) {
		log_info(
		    "redis sentinel: master %s is being failed over; asking again",
		    rc.cf->master_name);
		redisAsyncDisconnect(ac);
		return;
	}
	if (ip == NULL || port == NULL || epoch == NULL) {
		log_warnx("redis sentinel: does not know master %s%s%s",
		    rc.cf->master_name,
		    reply->type == REDIS_REPLY_ERROR ? ": " : "",
		    reply->type == REDIS_REPLY_ERROR ? reply->str : "");
		redisAsyncDisconnect(ac); /* try the next Sentinel */
		return;
	}
	redisc_set_master(
	    ip, port, epoch, rc.switched ? "switched" : "from Sentinel");
	rc.switched = false;
}

/* The Sentinel connection is subscribed: another one asks. Not from its
 * own callback, which must not free it. */
static void
redisc_ask_again_cb(evutil_socket_t fd, short what, void *arg)
{
	if (rc.stopping)
		return;
	redisc_park(&rc.sent);
	redisc_conn_open(&rc.sent);
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
	if (n != 5 || strcmp(f[0], rc.cf->master_name) != 0)
		return;
	/* Its epoch is not said: nothing goes to either master until the
	 * Sentinel is asked again; what waits on the old one (perhaps
	 * frozen) is answered now as of unknown outcome. */
	log_info("redis: master %s switched to %s:%s; asking its config-epoch",
	    rc.cf->master_name, f[3], f[4]);
	rc.master_epoch[0] = '\0';
	rc.switched = true;
	redisc_moved();
	if (event_base_once(
		rc.base, -1, EV_TIMEOUT, redisc_ask_again_cb, NULL, NULL) != 0)
		fatalx("redisc: event_base_once failed");
}

void
redisc_sentinel_setup(redisAsyncContext *ac)
{
	redisAsyncCommand(ac, redisc_master_cb, NULL, "SENTINEL MASTER %s",
	    rc.cf->master_name);
	redisAsyncCommand(
	    ac, redisc_switch_cb, NULL, "SUBSCRIBE +switch-master");
}

/*
 * redisc_ev: hiredis's event hooks on libevent. hiredis's own adapter
 * adds its read event again after every read and its write event for every
 * command, so each command costs an epoll_ctl or two and an extra turn of
 * the loop before it is written. Here the read event stays added; a
 * command asks for a flush, an event made active (not a descriptor event),
 * which libevent runs after the callbacks already queued in this turn:
 * the commands that one turn's clients sent go to Redis in one write. The
 * descriptor's write event is added only while the kernel's buffer is full,
 * or the connection is still being made.
 */
#include <stdbool.h>
#include <stdlib.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "log.h"
#include "redisc_ev.h"
#include "xmalloc.h"

struct redisc_ev {
	redisAsyncContext *ac;
	struct event *read_ev;	/* persistent */
	struct event *write_ev; /* persistent, added while writes wait */
	struct event *flush_ev; /* made active: write at the end of the turn */
};

/* The context whose write is running: a write it cannot finish asks for
 * more, and that must wait for the descriptor, not flush again. It is not
 * a field: hiredis may free the context (and us) inside the write. */
static struct redisc_ev *writing;

static void
redisc_ev_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct redisc_ev *e = arg;

	redisAsyncHandleRead(e->ac);
}

static void
redisc_ev_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct redisc_ev *e = arg;

	writing = e;
	redisAsyncHandleWrite(e->ac);
	writing = NULL;
}

static void
redisc_ev_add_read(void *data)
{
	struct redisc_ev *e = data;

	if (!event_pending(e->read_ev, EV_READ, NULL))
		event_add(e->read_ev, NULL);
}

static void
redisc_ev_del_read(void *data)
{
	struct redisc_ev *e = data;

	event_del(e->read_ev);
}

/* hiredis has bytes to send: at the end of this turn, or when the
 * descriptor can take them (a connect in progress, a full buffer). */
static void
redisc_ev_add_write(void *data)
{
	struct redisc_ev *e = data;

	if (writing == e || !(e->ac->c.flags & REDIS_CONNECTED)) {
		if (!event_pending(e->write_ev, EV_WRITE, NULL))
			event_add(e->write_ev, NULL);
	} else if (!event_pending(e->write_ev, EV_WRITE, NULL) &&
	    !event_pending(e->flush_ev, EV_TIMEOUT, NULL))
		event_active(e->flush_ev, EV_TIMEOUT, 1);
}

static void
redisc_ev_del_write(void *data)
{
	struct redisc_ev *e = data;

	if (event_pending(e->write_ev, EV_WRITE, NULL))
		event_del(e->write_ev);
}

static void
redisc_ev_cleanup(void *data)
{
	struct redisc_ev *e = data;

	if (writing == e)
		writing = NULL;
	event_free(e->read_ev);
	event_free(e->write_ev);
	event_free(e->flush_ev);
	free(e);
}

int
redisc_ev_attach(redisAsyncContext *ac, struct event_base *base)
{
	struct redisc_ev *e;
	int fd = ac->c.fd;

	if (ac->ev.data != NULL)
		return -1;
	e = xcalloc(1, sizeof *e);
	e->ac = ac;
	e->read_ev =
	    event_new(base, fd, EV_READ | EV_PERSIST, redisc_ev_read_cb, e);
	e->write_ev =
	    event_new(base, fd, EV_WRITE | EV_PERSIST, redisc_ev_write_cb, e);
	e->flush_ev = event_new(base, -1, 0, redisc_ev_write_cb, e);
	if (e->read_ev == NULL || e->write_ev == NULL || e->flush_ev == NULL)
		fatalx("redis: event_new failed");
	ac->ev.addRead = redisc_ev_add_read;
	ac->ev.delRead = redisc_ev_del_read;
	ac->ev.addWrite = redisc_ev_add_write;
	ac->ev.delWrite = redisc_ev_del_write;
	ac->ev.cleanup = redisc_ev_cleanup;
	ac->ev.data = e;
	/* As hiredis's adapter: the connect completes on the write event. */
	event_add(e->read_ev, NULL);
	event_add(e->write_ev, NULL);
	return 0;
}

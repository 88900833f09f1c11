/*
 * client: a connection is read line by line. One request is in flight at a
 * time, so replies leave in the order requests came; while one is in flight
 * the rest of the input waits in the input buffer (bounded by max_pending).
 *
 * The socket is driven with plain events rather than a bufferevent: a read
 * is one read(2) into the buffer's free space, and replies are written once
 * per loop turn straight from the output buffer, so a request costs one
 * read and one write, and the write event is only armed when the kernel
 * would not take everything.
 */
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "client.h"
#include "client_int.h"
#include "cmd.h"
#include "config.h"
#include "log.h"
#include "stats.h"
#include "tls.h"
#include "util.h"
#include "xmalloc.h"

/* Replies a client may leave unread before it is dropped (Redis's
 * client-output-buffer-limit, in spirit). */
#define CLIENT_MAX_OUTPUT (4 * 1024 * 1024)
/* Before AUTH a line is short: AUTH, PING, HELP and QUIT need no more. */
#define CLIENT_PREAUTH_LINE 128

static struct {
	struct event_base *base;
	const struct config *cf;
	TAILQ_HEAD(, client) all;
	unsigned count;
	uint64_t next_id;
	char *line; /* one line being run; max_line + 2 bytes */
	size_t line_size;
} cl;

static void client_cancel_early(struct client *c);
static void client_drop(struct client *c, const char *why);

static void
client_peer_name(char *buf, size_t len, const struct sockaddr *sa)
{
	char addr[INET6_ADDRSTRLEN];

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const void *)sa;

		inet_ntop(AF_INET, &sin->sin_addr, addr, sizeof addr);
		snprintf(buf, len, "%s:%u", addr, ntohs(sin->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const void *)sa;

		inet_ntop(AF_INET6, &sin6->sin6_addr, addr, sizeof addr);
		snprintf(buf, len, "[%s]:%u", addr, ntohs(sin6->sin6_port));
	} else
		snprintf(buf, len, "unix");
}

/* Stop reading, let the output drain, then free (client_write_cb). */
static void
client_close(struct client *c)
{
	struct evbuffer *in = c->in;

	/* Its locks go now, not when a slow reader has drained its replies. */
	if (!c->ended) {
		c->ended = true;
		cmd_session_end(&c->s, !c->quit);
	}
	c->closing = true;
	event_del(c->read_ev);
	evbuffer_drain(in, evbuffer_get_length(in));
	if (evbuffer_get_length(c->out) == 0)
		event_active(c->process_ev, EV_TIMEOUT, 1);
}

/*
 * Take one line off the input. Returns its length (CR dropped), -1 when no
 * whole line is there yet, -2 when the line is longer than max_line.
 */
static ssize_t
client_read_line(struct client *c)
{
	struct evbuffer *in = c->in;
	size_t max = (size_t)cl.cf->limits.max_line;
	struct evbuffer_ptr eol;

	if (!c->s.authed && max > CLIENT_PREAUTH_LINE)
		max = CLIENT_PREAUTH_LINE;
	size_t eol_len, len;

	/* A CR before the LF is not part of the line, so allow one more. */
	eol = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_LF);
	if (eol.pos < 0)
		return evbuffer_get_length(in) > max + 1 ? -2 : -1;
	if ((size_t)eol.pos > max + 1)
		return -2;
	len = (size_t)eol.pos;
	evbuffer_remove(in, cl.line, len);
	evbuffer_drain(in, eol_len);
	if (len > 0 && cl.line[len - 1] == '\r')
		len--;
	if (len > max)
		return -2;
	cl.line[len] = '\0';
	return (ssize_t)len;
}

/* Run whole lines until one goes async, the input runs dry, or we close. */
static void
client_process(struct client *c)
{
	ssize_t len;

	while (!c->busy && !c->closing) {
		if ((len = client_read_line(c)) == -1) {
			/* Half-closed (printf ... | nc): answer all, then go. */
			if (c->eof)
				client_close(c);
			break;
		}
		if (len == -2) {
			log_info("client %" PRIu64 " [%s]: line too long",
			    c->s.id, c->peer);
			cmd_error(&c->s, PERR_PROTO, "line too long");
			client_close(c);
			break;
		}
		if (evbuffer_get_length(c->out) > CLIENT_MAX_OUTPUT) {
			client_drop(c, "not reading its replies");
			break;
		}
		switch (cmd_execute(&c->s, cl.line, (size_t)len)) {
		case CMD_DONE:
			break;
		case CMD_ASYNC:
			c->busy = true;
			client_cancel_early(c);
			break;
		case CMD_CLOSE:
			c->quit = true;
			client_close(c);
			break;
		}
	}
}

/* Give up on a client: no more replies, free it from the loop. */
static void
client_drop(struct client *c, const char *why)
{
	struct evbuffer *out = c->out;

	log_info("client %" PRIu64 " [%s]: %s; closing", c->s.id, c->peer, why);
	evbuffer_drain(out, evbuffer_get_length(out));
	client_close(c);
}

/*
 * Lines waiting behind a request in flight: more than limits.max_pending
 * gets one ERR LIMIT and the connection closed. We keep reading (so a
 * client that goes away is noticed), so this is what bounds the input.
 */
static bool
client_too_many_pending(struct client *c)
{
	struct evbuffer *in = c->in;
	size_t max = (size_t)cl.cf->limits.max_pending;
	struct evbuffer_ptr p;
	size_t lines = 0;

	if (evbuffer_get_length(in) > (max + 1) * cl.line_size)
		return true;
	p = evbuffer_search(in, "\n", 1, NULL);
	while (p.pos >= 0 && ++lines <= max) {
		evbuffer_ptr_set(in, &p, 1, EVBUFFER_PTR_ADD);
		p = evbuffer_search(in, "\n", 1, &p);
	}
	return lines > max;
}

/*
 * CANCEL as the next line behind a request in flight ends that request's
 * wait now (docs/protocol.md, CANCEL); the line itself stays, to be
 * answered in its turn. Anywhere else it is an ordinary request.
 */
static void
client_cancel_early(struct client *c)
{
	char buf[64];
	ev_ssize_t n = evbuffer_copyout(c->in, buf, sizeof buf);
	ev_ssize_t i = 0, j;

	/* Empty lines and blanks around the word are ignored, as for any
	 * request (proto.c). */
	while (i < n &&
	    (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' ||
		buf[i] == '\n'))
		i++;
	if (n - i < 7)
		return;
	for (j = i + 6;
	     j < n && (buf[j] == ' ' || buf[j] == '\t' || buf[j] == '\r'); j++)
		;
	if (j == n || buf[j] != '\n')
		return;
	buf[i + 6] = '\0';
	if (proto_keyword(buf + i, "CANCEL") && lock_owner_cancel(&c->s.owner))
		log_debug("client %" PRIu64 " [%s]: wait cancelled", c->s.id,
		    c->peer);
}

/* New input: run what it completes, unless too much waits behind a wait. */
void
client_input(struct client *c)
{
	c->active_ms = mono_ms();
	if (c->busy && client_too_many_pending(c)) {
		cmd_error(&c->s, PERR_LIMIT,
		    "more than %d requests queued behind one in progress",
		    cl.cf->limits.max_pending);
		log_info("client %" PRIu64 " [%s]: too many requests queued",
		    c->s.id, c->peer);
		client_close(c);
		return;
	}
	if (c->busy)
		client_cancel_early(c);
	client_process(c);
}

/*
 * End of input still gets the requests already read answered; an error
 * means nobody can read the answers, so the client goes at once.
 */
void
client_eof(struct client *c)
{
	event_del(c->read_ev);
	log_debug("client %" PRIu64 " [%s]: end of input", c->s.id, c->peer);
	/* Leaving cancels a wait (docs/protocol.md §1); quick requests still
 * run. */
	if (!lock_owner_eof(&c->s.owner)) {
		client_free(c, true);
		return;
	}
	c->eof = c->s.eof = true;
	if (!c->closing)
		client_process(c);
}

/* A socket error: nobody can read the answers, so the client goes now. */
void
client_error(struct client *c)
{
	log_debug("client %" PRIu64 " [%s]: %s", c->s.id, c->peer,
	    evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
	client_free(c, true);
}

/*
 * One read(2) into a buffer all clients share, then only what came is
 * copied to the client's input: requests are a few dozen bytes, and a
 * page-sized buffer per read would be allocated and freed every time.
 */
static void
client_read_cb(evutil_socket_t fd, short what, void *arg)
{
	static char buf[CLIENT_READ_SIZE];
	struct client *c = arg;
	ssize_t n;

	if (c->tls != NULL) {
		client_tls_read(c);
		return;
	}
	n = read(fd, buf, sizeof buf);
	if (n > 0) {
		if (evbuffer_add(c->in, buf, (size_t)n) != 0)
			fatalx("client: cannot grow an input buffer");
		client_input(c);
	} else if (n == 0)
		client_eof(c);
	else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		client_error(c);
}

/*
 * Replies were added (activated), or a blocked socket can take more
 * (added): write what we have in one call. The event stays added only
 * while the kernel would not take everything.
 */
static void
client_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct client *c = arg;
	size_t left;

	if (c->tls != NULL) {
		/* Freed, or a handshake that arms its own events. */
		if (!client_tls_write(c) || c->handshaking)
			return;
	} else if (evbuffer_get_length(c->out) > 0 &&
	    evbuffer_write(c->out, fd) < 0 && errno != EAGAIN &&
	    errno != EWOULDBLOCK && errno != EINTR) {
		client_error(c);
		return;
	}
	left = evbuffer_get_length(c->out);
	if (left > 0 && !event_pending(c->write_ev, EV_WRITE, NULL))
		event_add(c->write_ev, NULL);
	else if (left == 0 && event_pending(c->write_ev, EV_WRITE, NULL))
		event_del(c->write_ev);
	if (left == 0 && c->closing)
		client_free(c, !c->quit);
}

/* Anything appended to the output is written later in this loop turn,
 * once, however many replies and events it holds by then. */
static void
client_out_cb(
    struct evbuffer *out, const struct evbuffer_cb_info *info, void *arg)
{
	struct client *c = arg;

	if (info->n_added > 0)
		event_active(c->write_ev, EV_WRITE, 1);
}

/* Deferred work: go on after an async reply, or free a closed client. */
static void
client_process_cb(evutil_socket_t fd, short what, void *arg)
{
	struct client *c = arg;

	if (!c->closing)
		client_process(c);
	if (c->closing && evbuffer_get_length(c->out) == 0)
		client_free(c, !c->quit);
}

/* The lock engine answered: the next line may run, from the loop. */
static void
client_resume(struct session *s)
{
	struct client *c = s->ctx;

	c->busy = false;
	if (s->quit) { /* a wrong AUTH, answered after its back-off */
		c->quit = true;
		client_close(c);
		return;
	}
	c->active_ms = mono_ms(); /* a wait that just ended was not idling */
	event_active(c->process_ev, EV_TIMEOUT, 1);
}

static void
client_timer_arm(struct client *c, uint64_t now)
{
	const struct config_limits *lim = &cl.cf->limits;
	uint64_t next = UINT64_MAX, at;
	struct timeval tv;

	if (!c->s.authed || c->handshaking)
		next = c->accepted_ms + (uint64_t)lim->auth_timeout_s * 1000;
	if (lim->idle_timeout_s > 0) {
		at = c->active_ms + (uint64_t)lim->idle_timeout_s * 1000;
		next = at < next ? at : next;
	}
	if (next == UINT64_MAX)
		return;
	next = next > now ? next - now : 0;
	tv = util_timeval(next);
	evtimer_add(c->timer_ev, &tv);
}

/* Too slow to AUTH, or idle (not waiting, not sending) for too long. */
static void
client_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct client *c = arg;
	const struct config_limits *lim = &cl.cf->limits;
	uint64_t now = mono_ms();

	if (c->closing)
		return;
	/* The handshake counts against the AUTH timeout: a peer that
	 * stalls it holds a connection no longer than one that never
	 * sends AUTH. */
	if (c->handshaking &&
	    now >= c->accepted_ms + (uint64_t)lim->auth_timeout_s * 1000) {
		log_info("client %" PRIu64
			 " [%s]: no TLS handshake within %d s",
		    c->s.id, c->peer, lim->auth_timeout_s);
		client_free(c, true);
		return;
	}
	if (!c->s.authed &&
	    now >= c->accepted_ms + (uint64_t)lim->auth_timeout_s * 1000) {
		cmd_error(&c->s, PERR_NOAUTH, "no AUTH within %d s",
		    lim->auth_timeout_s);
		log_info("client %" PRIu64 " [%s]: no AUTH in time", c->s.id,
		    c->peer);
		client_close(c);
		return;
	}
	if (lim->idle_timeout_s > 0 && !c->busy &&
	    now >= c->active_ms + (uint64_t)lim->idle_timeout_s * 1000) {
		cmd_error(
		    &c->s, PERR_LIMIT, "idle for %d s", lim->idle_timeout_s);
		log_info(
		    "client %" PRIu64 " [%s]: idle; closing", c->s.id, c->peer);
		client_close(c);
		return;
	}
	if (c->busy)
		c->active_ms = now; /* waiting is not idling */
	client_timer_arm(c, now);
}

/* Refused before any state is made: one line, then close. */
static void
client_refuse(evutil_socket_t fd)
{
	static const char msg[] = "ERR LIMIT too many clients\n";

	STAT_INC(connections_rejected_total);
	(void)send(fd, msg, sizeof msg - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	evutil_closesocket(fd);
}

/*
 * A silent client whose host has gone would keep its session locks for the
 * system's 2 hours: probe after limits.tcp_keepalive_s, 3 probes a third
 * of it apart, and give up on unacknowledged data as soon.
 */
static void
client_keepalive(evutil_socket_t fd)
{
	int s = cl.cf->limits.tcp_keepalive_s, one = 1, cnt = 3;
	int intvl = s / 3 > 0 ? s / 3 : 1;
	unsigned int user = (unsigned int)(s + cnt * intvl) * 1000;

	if (s == 0)
		return;
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &s, sizeof s);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user, sizeof user);
}

void
client_accept(evutil_socket_t fd, const struct sockaddr *sa, int salen,
    struct tls_server *tls)
{
	struct client *c;
	int one = 1;

	if (cl.count >= (unsigned)cl.cf->limits.max_clients) {
		client_refuse(fd);
		return;
	}
	if (sa->sa_family == AF_INET || sa->sa_family == AF_INET6) {
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		client_keepalive(fd);
	}
	evutil_make_socket_nonblocking(fd);
	c = xcalloc(1, sizeof *c);
	c->fd = fd;
	c->in = evbuffer_new();
	c->out = evbuffer_new();
	c->read_ev =
	    event_new(cl.base, fd, EV_READ | EV_PERSIST, client_read_cb, c);
	c->write_ev =
	    event_new(cl.base, fd, EV_WRITE | EV_PERSIST, client_write_cb, c);
	c->process_ev = event_new(cl.base, -1, 0, client_process_cb, c);
	c->timer_ev = evtimer_new(cl.base, client_timer_cb, c);
	if (c->in == NULL || c->out == NULL || c->read_ev == NULL ||
	    c->write_ev == NULL || c->process_ev == NULL ||
	    c->timer_ev == NULL ||
	    evbuffer_add_cb(c->out, client_out_cb, c) == NULL)
		fatalx("client: out of memory");
	client_peer_name(c->peer, sizeof c->peer, sa);
	cmd_session_init(
	    &c->s, ++cl.next_id, c->peer, c->out, client_resume, c);
	if (tls != NULL)
		client_tls_start(c, tls);
	event_add(c->read_ev, NULL);
	c->accepted_ms = c->active_ms = mono_ms();
	client_timer_arm(c, c->accepted_ms);
	TAILQ_INSERT_TAIL(&cl.all, c, entry);
	cl.count++;
	STAT_INC(connections_total);
	STAT_SET(clients, cl.count);
	log_debug("client %" PRIu64 " [%s]: connected", c->s.id, c->peer);
}

/* vanished: the peer went without QUIT; its locks get the lock delay. */
void
client_free(struct client *c, bool vanished)
{
	TAILQ_REMOVE(&cl.all, c, entry);
	cl.count--;
	STAT_SET(clients, cl.count);
	if (!c->ended)
		cmd_session_end(&c->s, vanished);
	event_free(c->read_ev);
	event_free(c->write_ev);
	evbuffer_free(c->in);
	evbuffer_free(c->out);
	tls_conn_free(c->tls); /* close_notify, before the socket closes */
	evutil_closesocket(c->fd);
	event_free(c->process_ev);
	event_free(c->timer_ev);
	free(c);
}

/* Graceful stop: read no more, let replies drain, then free each. */
void
client_close_all(void)
{
	struct client *c;

	TAILQ_FOREACH (c, &cl.all, entry) {
		if (!c->closing) {
			c->quit = true; /* our stop, not the client vanishing */
			client_close(c);
		}
	}
}

unsigned
client_count(void)
{
	return cl.count;
}

/*
 * An identity the reload removed may do nothing more: its connections
 * are closed, their locks released, as Redis does for a deleted ACL user.
 * Taking its secret away must not leave its holds in place for as long as
 * its connections live.
 */
static void
client_close_gone(void)
{
	struct client *c;

	TAILQ_FOREACH (c, &cl.all, entry) {
		if (c->closing || !cmd_session_gone(&c->s))
			continue;
		log_info("client %" PRIu64 " [%s]: its identity was removed "
			 "by the reload; closing",
		    c->s.id, c->peer);
		c->quit = true; /* our doing, not the client vanishing */
		client_close(c);
	}
}

/* limits.max_line may have changed: the line buffer follows it; and a
 * removed identity's connections close. */
void
client_reload(void)
{
	size_t size = (size_t)cl.cf->limits.max_line + 2;

	client_close_gone();
	if (size == cl.line_size)
		return;
	cl.line = xrealloc(cl.line, size, 1);
	cl.line_size = size;
}

void
client_init(struct event_base *base, const struct config *cf)
{
	cl.base = base;
	cl.cf = cf;
	TAILQ_INIT(&cl.all);
	cl.line_size = (size_t)cf->limits.max_line + 2;
	cl.line = xmalloc(cl.line_size);
}

void
client_shutdown(void)
{
	struct client *c;

	while ((c = TAILQ_FIRST(&cl.all)) != NULL)
		client_free(c, false);
	free(cl.line);
	cl.line = NULL;
}

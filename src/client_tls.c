/*
 * client_tls: a client of the TLS listener. Its socket's read and write
 * events step the handshake first (each WANT_WRITE arms the write event;
 * the read event stays armed), then decrypt into the input buffer and
 * encrypt from the output buffer, as client.c's read(2) and write do for
 * a plain one. A certificate the handshake verified may name an identity
 * (cmd_session_certified); the handshake counts against the AUTH timeout
 * (client.c's timer). Calls tls, cmd and log.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "client_int.h"
#include "cmd.h"
#include "identity.h"
#include "log.h"
#include "stats.h"
#include "tls.h"

void
client_tls_start(struct client *c, struct tls_server *srv)
{
	c->tls = tls_conn_new(srv, c->fd);
	c->handshaking = true;
}

/* The handshake is over: say with what, and whom it names. */
static void
client_tls_done(struct client *c)
{
	char how[96];

	c->handshaking = false;
	event_del(c->write_ev);
	/* What came with the last flight may wait in OpenSSL, not the
	 * socket: no read event would come for it. */
	event_active(c->read_ev, EV_READ, 1);
	STAT_INC(tls_handshakes_total);
	tls_describe(c->tls, how, sizeof how);
	if (cmd_session_certified(&c->s, c->tls))
		log_info("client %" PRIu64 " [%s]: %s, certificate of %s",
		    c->s.id, c->peer, how, c->s.ident->name);
	else
		log_debug("client %" PRIu64 " [%s]: %s", c->s.id, c->peer, how);
}

/* One step of the handshake; false if it failed (c is freed). */
static bool
client_tls_shake(struct client *c)
{
	switch (tls_handshake(c->tls)) {
	case TLS_DONE:
		client_tls_done(c);
		return true;
	case TLS_WANT_WRITE:
		event_add(c->write_ev, NULL);
		return true;
	case TLS_WANT_READ:
		event_del(c->write_ev);
		return true;
	case TLS_CLOSED:
	case TLS_FAILED:
		break;
	}
	STAT_INC(tls_failures_total);
	log_info("client %" PRIu64 " [%s]: TLS handshake failed: %s", c->s.id,
	    c->peer, tls_error(c->tls));
	client_free(c, true);
	return false;
}

/*
 * What the socket brought, decrypted into the input buffer; OpenSSL may
 * hold more than one read returns (no read event comes for it), so go on
 * while it does, up to a bound.
 */
void
client_tls_read(struct client *c)
{
	struct evbuffer_iovec v;
	size_t n = 0, got = 0;
	enum tls_io io = TLS_DONE;

	if (c->handshaking) {
		(void)client_tls_shake(c);
		return;
	}
	do {
		if (evbuffer_reserve_space(c->in, CLIENT_READ_SIZE, &v, 1) < 1)
			fatalx("client: cannot grow an input buffer");
		io = tls_read(c->tls, v.iov_base, v.iov_len, &n);
		v.iov_len = n;
		evbuffer_commit_space(c->in, &v, 1);
		got += n;
	} while (io == TLS_DONE && tls_pending(c->tls) && got < 65536);
	if (io == TLS_WANT_WRITE)
		event_add(c->write_ev, NULL);
	if (got > 0)
		client_input(c);
	if (io == TLS_CLOSED)
		client_eof(c);
	else if (io == TLS_FAILED) {
		log_debug("client %" PRIu64 " [%s]: %s", c->s.id, c->peer,
		    tls_error(c->tls));
		client_free(c, true);
	}
}

/* The output buffer encrypted onto the socket, a chunk at a time, until
 * the socket would block (during the handshake, its next step). */
bool
client_tls_write(struct client *c)
{
	struct evbuffer_iovec v;
	size_t n;

	if (c->handshaking)
		return client_tls_shake(c);
	while (evbuffer_peek(c->out, -1, NULL, &v, 1) > 0) {
		switch (tls_write(c->tls, v.iov_base, v.iov_len, &n)) {
		case TLS_DONE:
			evbuffer_drain(c->out, n);
			continue;
		case TLS_WANT_READ:
		case TLS_WANT_WRITE:
			return true;
		case TLS_CLOSED:
		case TLS_FAILED:
			break;
		}
		log_debug("client %" PRIu64 " [%s]: %s", c->s.id, c->peer,
		    tls_error(c->tls));
		client_free(c, true);
		return false;
	}
	return true;
}

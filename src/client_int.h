/*
 * client_int: what client.c and client_tls.c share and nothing else
 * includes: a connection, and the functions client.c gives client_tls.c
 * to hand it what a TLS read brought.
 */
#ifndef LB_CLIENT_INT_H
#define LB_CLIENT_INT_H

#include <sys/queue.h>

#include <netinet/in.h>

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>

#include "cmd.h"

/* One read takes at most this much; the socket stays readable for more. */
#define CLIENT_READ_SIZE 4096

struct tls_conn;
struct tls_server;

struct client {
	TAILQ_ENTRY(client) entry;
	struct session s;
	evutil_socket_t fd;
	struct evbuffer *in;
	struct evbuffer *out;
	struct event *read_ev;
	struct event *write_ev;	  /* activated to flush; added while blocked */
	struct event *process_ev; /* runs client_process from the loop */
	char peer[INET6_ADDRSTRLEN + 8];
	bool busy;		/* a request is in flight */
	bool closing;		/* flush the output, then free */
	bool eof;		/* the peer is done sending; finish, close */
	bool quit;		/* closed by QUIT (or AUTH), not vanished */
	bool ended;		/* its session (locks, wait) is over */
	struct event *timer_ev; /* auth_timeout_s and idle_timeout_s */
	uint64_t accepted_ms;
	uint64_t active_ms;   /* when it last sent anything */
	struct tls_conn *tls; /* a TLS listener's client, else NULL */
	bool handshaking;     /* its TLS handshake is not over */
};

/* client.c: new input in c->in; the peer done sending; a socket error;
 * the client freed (vanished: without QUIT). */
void client_input(struct client *c);
void client_eof(struct client *c);
void client_error(struct client *c);
void client_free(struct client *c, bool vanished);

/* client_tls.c: the handshake begun on c's socket; a read event's and a
 * write event's work (false: c was freed). */
void client_tls_start(struct client *c, struct tls_server *srv);
void client_tls_read(struct client *c);
bool client_tls_write(struct client *c);

#endif

/*
 * client: one connection — its socket and buffers, bounded line framing,
 * replies in request order (one request in flight at a time), and a late
 * free so that nothing in the middle of a callback ever sees it vanish.
 */
#ifndef LB_CLIENT_H
#define LB_CLIENT_H

#include <sys/socket.h>

#include <event2/util.h>

struct event_base;
struct config;

void client_init(struct event_base *base, const struct config *cf);
/* A new connection from the listener; the client module owns fd now.
 * tls: the TLS listener's context (the handshake comes first), or NULL. */
struct tls_server;
void client_accept(evutil_socket_t fd, const struct sockaddr *sa, int salen,
    struct tls_server *tls);
/* Stop reading everywhere; each client goes once its replies are out. */
void client_close_all(void);
unsigned client_count(void);
/* Apply a reloaded configuration (the line buffer's size). */
void client_reload(void);
/* Free every client at once (their locks are released). */
void client_shutdown(void);

#endif

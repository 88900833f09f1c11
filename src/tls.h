/*
 * tls: TLS for clients on OpenSSL, driven on the client's own socket and
 * events (no bufferevent): a server context made from the configured
 * certificate, key and CA, and each connection's handshake, reads and
 * writes, and the identity of a client certificate that was verified.
 * Calls log and xmalloc only.
 */
#ifndef LB_TLS_H
#define LB_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Whether a client must present a certificate. */
enum tls_verify {
	TLS_VERIFY_NONE,     /* none asked for */
	TLS_VERIFY_OPTIONAL, /* asked for; one that fails refuses the client */
	TLS_VERIFY_REQUIRE,  /* a client without one is refused */
};

struct tls_settings {
	const char *certificate; /* PEM: the server's, then its chain */
	const char *key;	 /* PEM */
	const char *ca;		 /* PEM: signers of client certificates */
	enum tls_verify verify;
	const char *min_version; /* "TLSv1.2" or "TLSv1.3" */
};

/* What a handshake, read or write step came to. */
enum tls_io {
	TLS_DONE,	/* the handshake is over, or bytes moved */
	TLS_WANT_READ,	/* wait until the socket is readable */
	TLS_WANT_WRITE, /* wait until the socket is writable */
	TLS_CLOSED,	/* the peer closed (close_notify, or EOF) */
	TLS_FAILED,	/* an error: tls_error says which */
};

struct tls_server;
struct tls_conn;

/* A server context from the files, or NULL with the reason in err. */
struct tls_server *tls_server_new(
    const struct tls_settings *ts, char *err, size_t len);
/* A context is freed once its last connection is (reload swaps them). */
void tls_server_free(struct tls_server *srv);

/* A connection on fd, accepted; tls_handshake until TLS_DONE. */
struct tls_conn *tls_conn_new(struct tls_server *srv, int fd);
enum tls_io tls_handshake(struct tls_conn *tc);
/* Up to len bytes into buf (*n of them); TLS_DONE with *n > 0. */
enum tls_io tls_read(struct tls_conn *tc, void *buf, size_t len, size_t *n);
/* Up to len bytes from buf (*n written). */
enum tls_io tls_write(
    struct tls_conn *tc, const void *buf, size_t len, size_t *n);
/* Bytes already decrypted and not read yet (a read event will not come
 * for them). */
bool tls_pending(const struct tls_conn *tc);
/* The last failure, for the log. */
const char *tls_error(const struct tls_conn *tc);
/* A verified client certificate's names (subjectAltName DNS, URI and
 * email entries, else the subject's CN), each given to fn until it
 * returns true; none without a verified certificate. */
bool tls_peer_names(const struct tls_conn *tc,
    bool (*fn)(const char *name, void *arg), void *arg);
/* The protocol and cipher, for the log ("TLSv1.3 TLS_AES_256_GCM_SHA384"). */
void tls_describe(const struct tls_conn *tc, char *buf, size_t len);
/* Said close_notify (without waiting for the peer's) and freed. */
void tls_conn_free(struct tls_conn *tc);

#endif

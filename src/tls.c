/*
 * tls: OpenSSL on the client's socket, stepped by the client's own read
 * and write events. libevent's OpenSSL bufferevents have a history of
 * hangs and lost closes (a filter that waits for a read that never
 * comes, a close_notify never flushed); a client here is already one
 * read(2) into its input buffer and one write from its output buffer a
 * turn, so the TLS connection takes their place one for one
 * (SSL_read_ex, SSL_write_ex), and each step's WANT_READ or WANT_WRITE
 * arms the same events a plain socket would.
 *
 * A context holds the certificate, key and CA; each connection holds a
 * reference to it (OpenSSL counts them), so a reload can make a new one
 * and free the old while connections made under it live on. Without
 * session resumption or renegotiation, each connection's peer is the one
 * its own handshake verified.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "log.h"
#include "tls.h"
#include "xmalloc.h"

struct tls_server {
	SSL_CTX *ctx;
};

struct tls_conn {
	SSL *ssl;
	char err[160];
};

/* The oldest queued OpenSSL error (or what), the queue emptied. */
static void
tls_take_error(char *buf, size_t len, const char *what)
{
	unsigned long e = ERR_get_error();

	if (e == 0)
		snprintf(buf, len, "%s", what);
	else
		ERR_error_string_n(e, buf, len);
	ERR_clear_error();
}

/* The protocol floor: TLS 1.2 unless 1.3 is asked for. */
static int
tls_version(const char *v)
{
	return v != NULL && strcmp(v, "TLSv1.3") == 0 ? TLS1_3_VERSION
						      : TLS1_2_VERSION;
}

/* Certificate, chain and key, and that they belong together. */
static bool
tls_load_identity(
    SSL_CTX *ctx, const struct tls_settings *ts, char *err, size_t len)
{
	char why[160];

	if (SSL_CTX_use_certificate_chain_file(ctx, ts->certificate) != 1) {
		tls_take_error(why, sizeof why, "unreadable");
		snprintf(err, len, "certificate %s: %s", ts->certificate, why);
		return false;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, ts->key, SSL_FILETYPE_PEM) != 1) {
		tls_take_error(why, sizeof why, "unreadable");
		snprintf(err, len, "key %s: %s", ts->key, why);
		return false;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		tls_take_error(why, sizeof why, "does not match");
		snprintf(err, len, "key %s does not match certificate %s: %s",
		    ts->key, ts->certificate, why);
		return false;
	}
	return true;
}

/* The CA that signs client certificates, and whether one is asked for. */
static bool
tls_load_verify(
    SSL_CTX *ctx, const struct tls_settings *ts, char *err, size_t len)
{
	STACK_OF(X509_NAME) * names;
	char why[160];
	int mode = SSL_VERIFY_NONE;

	if (ts->verify == TLS_VERIFY_NONE)
		return true;
	if (ts->ca == NULL || ts->ca[0] == '\0') {
		snprintf(err, len, "client certificates need a CA file");
		return false;
	}
	if (SSL_CTX_load_verify_locations(ctx, ts->ca, NULL) != 1 ||
	    (names = SSL_load_client_CA_file(ts->ca)) == NULL) {
		tls_take_error(why, sizeof why, "no certificate in it");
		snprintf(err, len, "CA %s: %s", ts->ca, why);
		return false;
	}
	SSL_CTX_set_client_CA_list(ctx, names);
	mode = SSL_VERIFY_PEER;
	if (ts->verify == TLS_VERIFY_REQUIRE)
		mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
	SSL_CTX_set_verify(ctx, mode, NULL);
	return true;
}

struct tls_server *
tls_server_new(const struct tls_settings *ts, char *err, size_t len)
{
	struct tls_server *srv;
	SSL_CTX *ctx;

	ERR_clear_error();
	if ((ctx = SSL_CTX_new(TLS_server_method())) == NULL) {
		tls_take_error(err, len, "SSL_CTX_new failed");
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, tls_version(ts->min_version));
	/* Each handshake verifies its own peer: no tickets, no cache, no
	 * renegotiation. */
	SSL_CTX_set_options(ctx,
	    SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
		SSL_OP_CIPHER_SERVER_PREFERENCE);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_num_tickets(ctx, 0);
	/* Writes straight from the output buffer's chunks. */
	SSL_CTX_set_mode(ctx,
	    SSL_MODE_ENABLE_PARTIAL_WRITE |
		SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
	if (!tls_load_identity(ctx, ts, err, len) ||
	    !tls_load_verify(ctx, ts, err, len)) {
		SSL_CTX_free(ctx);
		return NULL;
	}
	srv = xcalloc(1, sizeof *srv);
	srv->ctx = ctx;
	return srv;
}

void
tls_server_free(struct tls_server *srv)
{
	if (srv == NULL)
		return;
	SSL_CTX_free(srv->ctx);
	free(srv);
}

struct tls_conn *
tls_conn_new(struct tls_server *srv, int fd)
{
	struct tls_conn *tc = xcalloc(1, sizeof *tc);

	if ((tc->ssl = SSL_new(srv->ctx)) == NULL ||
	    SSL_set_fd(tc->ssl, fd) != 1)
		fatalx("tls: SSL_new failed");
	SSL_set_accept_state(tc->ssl);
	return tc;
}

/* What one SSL call that returned rv (not success) comes to. A peer that
 * closes without close_notify is closed all the same: the protocol's
 * lines say where a request ends. */
static enum tls_io
tls_outcome(struct tls_conn *tc, int rv, const char *what)
{
	switch (SSL_get_error(tc->ssl, rv)) {
	case SSL_ERROR_WANT_READ:
		return TLS_WANT_READ;
	case SSL_ERROR_WANT_WRITE:
		return TLS_WANT_WRITE;
	case SSL_ERROR_ZERO_RETURN:
		return TLS_CLOSED;
	case SSL_ERROR_SYSCALL:
		if (ERR_peek_error() == 0) {
			ERR_clear_error();
			return TLS_CLOSED;
		}
		break;
	default:
		break;
	}
	tls_take_error(tc->err, sizeof tc->err, what);
	return TLS_FAILED;
}

enum tls_io
tls_handshake(struct tls_conn *tc)
{
	int rv;

	enum tls_io io;
	long v;

	ERR_clear_error();
	if ((rv = SSL_accept(tc->ssl)) == 1)
		return TLS_DONE;
	io = tls_outcome(tc, rv, "handshake failed");
	/* A refused certificate: say why in X509's words. */
	if (io == TLS_FAILED &&
	    (v = SSL_get_verify_result(tc->ssl)) != X509_V_OK)
		snprintf(tc->err, sizeof tc->err,
		    "client certificate refused: %s",
		    X509_verify_cert_error_string(v));
	return io;
}

enum tls_io
tls_read(struct tls_conn *tc, void *buf, size_t len, size_t *n)
{
	int rv;

	*n = 0;
	ERR_clear_error();
	if ((rv = SSL_read_ex(tc->ssl, buf, len, n)) == 1)
		return TLS_DONE;
	return tls_outcome(tc, rv, "read failed");
}

enum tls_io
tls_write(struct tls_conn *tc, const void *buf, size_t len, size_t *n)
{
	int rv;

	*n = 0;
	ERR_clear_error();
	if ((rv = SSL_write_ex(tc->ssl, buf, len, n)) == 1)
		return TLS_DONE;
	return tls_outcome(tc, rv, "write failed");
}

bool
tls_pending(const struct tls_conn *tc)
{
	return SSL_pending(tc->ssl) > 0;
}

const char *
tls_error(const struct tls_conn *tc)
{
	return tc->err[0] != '\0' ? tc->err : "no error";
}

/* One name of the certificate, if it is text without a NUL in it (a
 * name that hides a NUL would match a shorter one). */
static bool
tls_name(const ASN1_STRING *s, bool (*fn)(const char *, void *), void *arg)
{
	const unsigned char *p = ASN1_STRING_get0_data(s);
	int len = ASN1_STRING_length(s);
	char buf[256];

	if (p == NULL || len <= 0 || (size_t)len >= sizeof buf ||
	    memchr(p, '\0', (size_t)len) != NULL)
		return false;
	memcpy(buf, p, (size_t)len);
	buf[len] = '\0';
	return fn(buf, arg);
}

/* The subjectAltName entries that name a client: DNS, URI and email. */
static bool
tls_alt_names(
    X509 *cert, bool (*fn)(const char *, void *), void *arg, bool *any)
{
	GENERAL_NAMES *names =
	    X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
	bool found = false;

	for (int i = 0;
	     names != NULL && !found && i < sk_GENERAL_NAME_num(names); i++) {
		const GENERAL_NAME *g = sk_GENERAL_NAME_value(names, i);

		if (g->type != GEN_DNS && g->type != GEN_URI &&
		    g->type != GEN_EMAIL)
			continue;
		*any = true;
		found = tls_name(g->d.ia5, fn, arg);
	}
	GENERAL_NAMES_free(names);
	return found;
}

bool
tls_peer_names(const struct tls_conn *tc,
    bool (*fn)(const char *name, void *arg), void *arg)
{
	X509 *cert = SSL_get0_peer_certificate(tc->ssl);
	const X509_NAME *subject;
	bool any = false;
	int at;

	/* Only a certificate this connection's handshake verified. */
	if (cert == NULL || SSL_get_verify_result(tc->ssl) != X509_V_OK ||
	    !SSL_is_init_finished(tc->ssl))
		return false;
	if (tls_alt_names(cert, fn, arg, &any))
		return true;
	if (any) /* names in subjectAltName: the CN is not one */
		return false;
	subject = X509_get_subject_name(cert);
	at = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
	if (at < 0)
		return false;
	return tls_name(
	    X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at)), fn,
	    arg);
}

void
tls_describe(const struct tls_conn *tc, char *buf, size_t len)
{
	snprintf(buf, len, "%s %s", SSL_get_version(tc->ssl),
	    SSL_get_cipher_name(tc->ssl));
}

void
tls_conn_free(struct tls_conn *tc)
{
	if (tc == NULL)
		return;
	/* close_notify, once, without waiting for the peer's. */
	if (SSL_is_init_finished(tc->ssl))
		(void)SSL_shutdown(tc->ssl);
	ERR_clear_error();
	SSL_free(tc->ssl);
	free(tc);
}

/*
 * conn_tls: lockctl's connection inside TLS, when a CA is given (-T or
 * $LOCKBROKER_CA): the broker's certificate must be signed by it and name
 * the host lockctl connects to; -C and -K (or $LOCKBROKER_CERT and
 * $LOCKBROKER_KEY) present a client certificate. The socket stays
 * non-blocking and every step waits with poll() until the same deadlines
 * as a plain one.
 */
#include <arpa/inet.h>
#include <err.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "lockctl.h"
#include "util.h"

/* The oldest queued OpenSSL error, or what. */
static const char *
conn_tls_why(const char *what)
{
	static char buf[256];
	unsigned long e = ERR_get_error();

	if (e == 0)
		return what;
	ERR_error_string_n(e, buf, sizeof(buf));
	ERR_clear_error();
	return buf;
}

/* A context that trusts the CA and, if given, presents cert and key. */
static SSL_CTX *
conn_tls_ctx(const struct conn_addr *a)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

	if (ctx == NULL)
		return NULL;
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (SSL_CTX_load_verify_locations(ctx, a->ca, NULL) != 1) {
		warnx("CA %s: %s", a->ca, conn_tls_why("unreadable"));
		goto fail;
	}
	if (a->cert != NULL &&
	    (SSL_CTX_use_certificate_chain_file(ctx, a->cert) != 1 ||
		SSL_CTX_use_PrivateKey_file(ctx, a->key, SSL_FILETYPE_PEM) !=
		    1)) {
		warnx("client certificate %s, key %s: %s", a->cert, a->key,
		    conn_tls_why("unreadable"));
		goto fail;
	}
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

/* The name the broker's certificate must have: its host, as an address
 * if it is one, else as a DNS name (also sent as SNI). */
static int
conn_tls_name(SSL *ssl, const char *host)
{
	unsigned char ip[16];

	if (inet_pton(AF_INET, host, ip) == 1 ||
	    inet_pton(AF_INET6, host, ip) == 1)
		return X509_VERIFY_PARAM_set1_ip_asc(
			   SSL_get0_param(ssl), host) == 1
		    ? 0
		    : -1;
	if (SSL_set_tlsext_host_name(ssl, host) != 1 ||
	    SSL_set1_host(ssl, host) != 1)
		return -1;
	return 0;
}

/* Wait for what the last SSL call on c said it needs; -1: timeout or an
 * error (already said). */
static int
conn_tls_wait(struct conn *c, int rv, uint64_t deadline, const char *what)
{
	struct pollfd p = { .fd = c->fd };
	int e = SSL_get_error(c->ssl, rv), left;

	if (e == SSL_ERROR_WANT_READ)
		p.events = POLLIN;
	else if (e == SSL_ERROR_WANT_WRITE)
		p.events = POLLOUT;
	else {
		long v = SSL_get_verify_result(c->ssl);

		if (v != X509_V_OK)
			warnx("%s: the broker's certificate: %s", what,
			    X509_verify_cert_error_string(v));
		else
			warnx(
			    "%s: %s", what, conn_tls_why("connection closed"));
		return -1;
	}
	do {
		uint64_t now = mono_ms();

		left = deadline > now ? (int)(deadline - now) : 0;
	} while (poll(&p, 1, left) < 0 && errno == EINTR);
	if (p.revents == 0) {
		warnx("%s: timed out", what);
		return -1;
	}
	return 0;
}

int
conn_tls_open(struct conn *c, const struct conn_addr *a)
{
	uint64_t deadline = mono_ms() + LC_IO_TIMEOUT_MS;
	int rv, fl = fcntl(c->fd, F_GETFL);

	if (fl < 0 || fcntl(c->fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    (c->tls = conn_tls_ctx(a)) == NULL ||
	    (c->ssl = SSL_new(c->tls)) == NULL ||
	    SSL_set_fd(c->ssl, c->fd) != 1 ||
	    conn_tls_name(c->ssl, a->host) != 0)
		return -1;
	while ((rv = SSL_connect(c->ssl)) != 1)
		if (conn_tls_wait(c, rv, deadline, "TLS handshake") != 0)
			return -1;
	return 0;
}

int
conn_tls_send(struct conn *c, const char *buf, size_t len)
{
	uint64_t deadline = mono_ms() + LC_IO_TIMEOUT_MS;
	size_t n, off = 0;
	int rv;

	while (off < len) {
		if ((rv = SSL_write_ex(c->ssl, buf + off, len - off, &n)) == 1)
			off += n;
		else if (conn_tls_wait(c, rv, deadline, "send to broker") != 0)
			return -1;
	}
	return 0;
}

enum conn_status
conn_tls_fill(struct conn *c)
{
	size_t n;
	int rv =
	    SSL_read_ex(c->ssl, c->buf + c->len, CONN_LINE_MAX - c->len, &n);

	if (rv == 1) {
		c->len += n;
		return CONN_OK;
	}
	switch (SSL_get_error(c->ssl, rv)) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		return CONN_OK;
	case SSL_ERROR_ZERO_RETURN:
		return CONN_EOF;
	case SSL_ERROR_SYSCALL:
		if (ERR_peek_error() == 0)
			return CONN_EOF;
		break;
	default:
		break;
	}
	warnx("read from broker: %s", conn_tls_why("failed"));
	return CONN_ERROR;
}

bool
conn_tls_pending(const struct conn *c)
{
	return c->ssl != NULL && SSL_pending(c->ssl) > 0;
}

void
conn_tls_close(struct conn *c, bool notify)
{
	if (c->ssl != NULL) {
		if (notify)
			(void)SSL_shutdown(c->ssl);
		SSL_free(c->ssl);
	}
	SSL_CTX_free(c->tls);
	ERR_clear_error();
	c->ssl = NULL;
	c->tls = NULL;
}

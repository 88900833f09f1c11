/*
 * redisc_tls: TLS to Redis, to its Sentinels and to a cluster's nodes
 * (redis.tls; a build with hiredis 1.x and its hiredis_ssl). One client
 * context, made from redis.tls_ca, tls_certificate and tls_key at the
 * first connect and again at a connect after those settings or their
 * files changed (a reload, a rotation), the running one kept when the new
 * files cannot be used; each TCP connection gets an SSL of its own that
 * verifies redis.tls_server_name, or else the host it connects to, and
 * hiredis reads and writes through it.
 *
 * hiredis calls a connection made once TCP is; the handshake runs with
 * the first writes. So a TLS connection is in use only once a reply came
 * through it: a PING queued first, whose answer (PONG, or NOAUTH before
 * AUTH) counts as one of the setup's. One that fails before is logged with
 * the host and OpenSSL's reason, once per outage (redisc_conn_failed).
 * Calls redisc_conn.c.
 */
#include <sys/queue.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>

#include "config.h"
#include "lb_build.h"
#include "log.h"
#include "redisc_int.h"
#include "xmalloc.h"

#if LB_REDIS_TLS
#include <hiredis/hiredis_ssl.h>
#ifdef redisInitiateSSL
/* hiredict's hiredis-named shim maps the names but declares nothing. */
#include <hiredict/hiredict_ssl.h>
#endif
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

/* The files' paths and what stat says of each, one string: a context is
 * made again when it changes. */
#define REDISC_TLS_SIG 2048

static struct {
	SSL_CTX *ctx;		     /* the running context; NULL before */
	char sig[REDISC_TLS_SIG];    /* what it was made from */
	char failed[REDISC_TLS_SIG]; /* the last that could not be used */
} rt;

/* A connection's PING, the first reply through it: the SSL to ask why
 * it failed (hiredis's, alive until the callbacks ran), where, and
 * whether Redis asked for a client certificate (tls-auth-clients). */
struct redisc_tls_hello {
	SSL *ssl;
	char where[300];
	bool asked;
};

/* OpenSSL's reason for the last failure (or what), the queue emptied. */
static void
redisc_tls_take_error(char *buf, size_t len, const char *what)
{
	unsigned long e = ERR_peek_last_error();
	const char *reason = e != 0 ? ERR_reason_error_string(e) : NULL;

	snprintf(buf, len, "%s", reason != NULL ? reason : what);
	ERR_clear_error();
}

/* A file replaced in place (a rotation) changes its inode or mtime. */
static void
redisc_tls_signature(const struct config_redis *cf, char *buf, size_t len)
{
	const char *files[] = { cf->tls_ca, cf->tls_certificate, cf->tls_key };
	size_t off = 0;
	struct stat st;
	int n;

	buf[0] = '\0';
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		memset(&st, 0, sizeof st);
		if (files[i][0] != '\0')
			(void)stat(files[i], &st);
		n = snprintf(buf + off, len - off,
		    "%s|%llu:%llu:%lld:%lld.%ld|", files[i],
		    (unsigned long long)st.st_dev,
		    (unsigned long long)st.st_ino, (long long)st.st_size,
		    (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
		if (n < 0 || (size_t)n >= len - off)
			return;
		off += (size_t)n;
	}
}

/* Who may sign Redis's certificate: redis.tls_ca, or the system's CAs
 * (a managed Redis's certificate from a public CA). */
static bool
redisc_tls_load_ca(
    SSL_CTX *ctx, const struct config_redis *cf, char *err, size_t len)
{
	char why[160];

	if (cf->tls_ca[0] == '\0') {
		if (SSL_CTX_set_default_verify_paths(ctx) == 1)
			return true;
		redisc_tls_take_error(why, sizeof why, "unreadable");
		snprintf(err, len, "the system's CAs: %s", why);
		return false;
	}
	if (SSL_CTX_load_verify_locations(ctx, cf->tls_ca, NULL) == 1)
		return true;
	redisc_tls_take_error(why, sizeof why, "no certificate in it");
	snprintf(err, len, "redis.tls_ca %s: %s", cf->tls_ca, why);
	return false;
}

/* The broker's own certificate and key, for Redis's tls-auth-clients. */
static bool
redisc_tls_load_identity(
    SSL_CTX *ctx, const struct config_redis *cf, char *err, size_t len)
{
	char why[160];

	if (cf->tls_certificate[0] == '\0')
		return true;
	if (SSL_CTX_use_certificate_chain_file(ctx, cf->tls_certificate) != 1) {
		redisc_tls_take_error(why, sizeof why, "unreadable");
		snprintf(err, len, "redis.tls_certificate %s: %s",
		    cf->tls_certificate, why);
		return false;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, cf->tls_key, SSL_FILETYPE_PEM) !=
		1 ||
	    SSL_CTX_check_private_key(ctx) != 1) {
		redisc_tls_take_error(why, sizeof why, "does not match");
		snprintf(err, len, "redis.tls_key %s: %s", cf->tls_key, why);
		return false;
	}
	return true;
}

/* Redis asks for the broker's certificate (its SSL's app data is the
 * hello): remembered, to say why a connection it refused failed. */
static int
redisc_tls_asked_cb(SSL *ssl, void *arg)
{
	struct redisc_tls_hello *hello = SSL_get_app_data(ssl);

	if (hello != NULL)
		hello->asked = true;
	return 1;
}

/* A client context that always verifies Redis's certificate. */
static SSL_CTX *
redisc_tls_ctx_new(const struct config_redis *cf, char *err, size_t len)
{
	SSL_CTX *ctx;

	ERR_clear_error();
	if ((ctx = SSL_CTX_new(TLS_client_method())) == NULL) {
		redisc_tls_take_error(err, len, "SSL_CTX_new failed");
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_cert_cb(ctx, redisc_tls_asked_cb, NULL);
	if (!redisc_tls_load_ca(ctx, cf, err, len) ||
	    !redisc_tls_load_identity(ctx, cf, err, len)) {
		SSL_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

/*
 * The context for a new connection, made again when the settings or
 * their files changed. Files that cannot be used stop a start; later
 * they leave the running context in place, said once for each change.
 */
static SSL_CTX *
redisc_tls_context(void)
{
	char sig[REDISC_TLS_SIG], err[512];
	SSL_CTX *ctx;

	redisc_tls_signature(rc.cf, sig, sizeof sig);
	if (strcmp(sig, rt.sig) == 0 || strcmp(sig, rt.failed) == 0)
		return rt.ctx;
	if ((ctx = redisc_tls_ctx_new(rc.cf, err, sizeof err)) == NULL) {
		if (rt.ctx == NULL)
			fatalx("redis.tls: %s", err);
		log_warnx(
		    "redis: TLS: %s; keeping the running certificates", err);
		memcpy(rt.failed, sig, sizeof sig);
		return rt.ctx;
	}
	if (rt.ctx != NULL)
		log_info("redis: TLS certificates read again");
	SSL_CTX_free(rt.ctx);
	rt.ctx = ctx;
	memcpy(rt.sig, sig, sizeof sig);
	rt.failed[0] = '\0';
	return ctx;
}

/* The name a connection verifies: an IP address as an address (a
 * certificate names one in an IP entry; SNI carries none). */
static bool
redisc_tls_name(SSL *ssl, const char *host)
{
	const char *name =
	    rc.cf->tls_server_name[0] != '\0' ? rc.cf->tls_server_name : host;
	unsigned char addr[sizeof(struct in6_addr)];

	if (inet_pton(AF_INET, name, addr) == 1 ||
	    inet_pton(AF_INET6, name, addr) == 1)
		return X509_VERIFY_PARAM_set1_ip_asc(
			   SSL_get0_param(ssl), name) == 1;
	SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	return SSL_set1_host(ssl, name) == 1 &&
	    SSL_set_tlsext_host_name(ssl, name) == 1;
}

/*
 * Why a connection failed before its first reply, one text whether
 * SSL_connect saw it at once (a Redis on this host answers that fast)
 * or hiredis later: a certificate not verified (and why), a client
 * certificate Redis asked for and refused, an alert from Redis, or
 * hiredis's words (a refused connect said as a plain one says it).
 *
 * Under TLS 1.3 Redis refuses a client certificate after the handshake:
 * its alert may be lost to the reset that closing with our PING unread
 * makes, seen by a read or by hiredis's check that the connect is done.
 * So a connection on which Redis asked for one and that ended before
 * its first reply is said to have refused it, whichever came.
 */
static void
redisc_tls_why(SSL *ssl, const char *said, char *buf, size_t len)
{
	static const char prefix[] = "SSL_connect failed: ";
	const struct redisc_tls_hello *hello = SSL_get_app_data(ssl);
	long v = SSL_get_verify_result(ssl);
	unsigned long e = ERR_peek_last_error();
	const char *reason = e != 0 ? ERR_reason_error_string(e) : NULL;

	if (v != X509_V_OK)
		snprintf(buf, len, "TLS: certificate verify failed: %s",
		    X509_verify_cert_error_string(v));
	else if (hello->asked)
		snprintf(buf, len, "TLS: Redis refused %s",
		    SSL_get_certificate(ssl) != NULL
			? "the broker's certificate (redis.tls_certificate)"
			: "a broker without a certificate (tls-auth-clients; "
			  "redis.tls_certificate)");
	else if (reason != NULL)
		snprintf(buf, len, "TLS: %s", reason);
	else if (said == NULL)
		snprintf(buf, len, "closed");
	else if (strncmp(said, prefix, sizeof prefix - 1) == 0)
		snprintf(buf, len, "%s", said + sizeof prefix - 1);
	else
		snprintf(buf, len, "%s", said);
	if (reason != NULL)
		log_debug("redis: TLS to %s: %s", hello->where, reason);
	ERR_clear_error();
}

/*
 * The PING's answer: the handshake is over, one setup answer less. NULL:
 * the connection failed first, said here unless we closed it ourselves
 * (a connect timeout, a stop: conn->ac is no longer it) or it never
 * connected (redisc_connect_cb said so).
 */
static void
redisc_tls_hello_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redisc_tls_hello *hello = privdata;
	struct redisc_conn *conn = ac->data;
	char why[256];

	if (r != NULL) {
		log_debug("redis %s: TLS to %s: %s %s", conn->what,
		    hello->where, SSL_get_version(hello->ssl),
		    SSL_get_cipher_name(hello->ssl));
		if (--conn->setup_left == 0 && conn->connected)
			redisc_conn_ready(conn);
	} else if (conn->ac == ac && conn->connected && ac->err != 0) {
		redisc_tls_why(hello->ssl, ac->errstr, why, sizeof why);
		redisc_conn_failed(
		    conn, "cannot connect to %s: %s", hello->where, why);
	}
	if (conn->tls == hello)
		conn->tls = NULL;
	SSL_set_app_data(hello->ssl, NULL);
	free(hello);
}

/* A connection that cannot start TLS fails as one that cannot connect:
 * hiredis keeps why in the context, the async one shows its copy. */
static void
redisc_tls_refuse(redisAsyncContext *ac, const char *why)
{
	ac->c.err = REDIS_ERR_OTHER;
	snprintf(ac->c.errstr, sizeof ac->c.errstr, "%s", why);
	ac->err = ac->c.err;
	ac->errstr = ac->c.errstr;
}

void
redisc_tls_start(struct redisc_conn *conn, const char *host, int port)
{
	redisAsyncContext *ac = conn->ac;
	struct redisc_tls_hello *hello;
	char why[sizeof ac->c.errstr];
	SSL *ssl;

	if (!rc.cf->tls || ac->err != 0)
		return;
	if ((ssl = SSL_new(redisc_tls_context())) == NULL)
		fatalx("redis: SSL_new failed");
	if (!redisc_tls_name(ssl, host)) {
		SSL_free(ssl);
		snprintf(
		    why, sizeof why, "TLS: cannot verify the name %s", host);
		redisc_tls_refuse(ac, why);
		return;
	}
	hello = xcalloc(1, sizeof *hello);
	hello->ssl = ssl;
	snprintf(hello->where, sizeof hello->where, "%s:%d", host, port);
	SSL_set_app_data(ssl, hello);
	/* On failure the SSL stays ours. */
	if (redisInitiateSSL(&ac->c, ssl) != REDIS_OK) {
		redisc_tls_why(ssl, ac->c.errstr, why, sizeof why);
		SSL_free(ssl);
		free(hello);
		redisc_tls_refuse(ac, why);
		return;
	}
	if (redisAsyncCommand(ac, redisc_tls_hello_cb, hello, "PING") !=
	    REDIS_OK)
		fatalx("redis: cannot queue a PING");
	conn->setup_left++;
	conn->tls = hello;
}

const char *
redisc_tls_errstr(struct redisc_conn *conn, const redisAsyncContext *ac)
{
	static char why[256];

	if (conn->tls == NULL)
		return ac->errstr;
	redisc_tls_why(conn->tls->ssl, ac->errstr, why, sizeof why);
	return why;
}

#else

/* Without hiredis_ssl the configuration refuses redis.tls: no TLS. */
void
redisc_tls_start(struct redisc_conn *conn, const char *host, int port)
{
}

const char *
redisc_tls_errstr(struct redisc_conn *conn, const redisAsyncContext *ac)
{
	return ac->errstr;
}

#endif

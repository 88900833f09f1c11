/*
 * tls: the server context's checks, and handshakes, reads and writes
 * against an OpenSSL client over a socketpair, with the certificates
 * tests/e2e/lbtls.py makes (LB_TLS_CERTS names their directory): which
 * clients each client-certificate policy lets in, and which names a
 * verified certificate gives.
 */
#include <sys/socket.h>

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "tls.h"

static char paths[8][512];

/* A file of the certificates' directory (one of eight slots). */
static const char *
cert(int slot, const char *name)
{
	const char *dir = getenv("LB_TLS_CERTS");

	ck_assert_msg(dir != NULL, "LB_TLS_CERTS is not set");
	snprintf(paths[slot], sizeof paths[slot], "%s/%s", dir, name);
	return paths[slot];
}

static struct tls_server *
server(enum tls_verify verify, char *err, size_t len)
{
	struct tls_settings ts = { .certificate = cert(0, "server.crt"),
		.key = cert(1, "server.key"),
		.ca = cert(2, "ca.crt"),
		.verify = verify,
		.min_version = "TLSv1.2" };

	return tls_server_new(&ts, err, len);
}

/* A client presenting the named certificate ("" for none). */
static SSL *
client(int fd, const char *who)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	char crt[64], key[64];
	SSL *ssl;

	ck_assert_ptr_nonnull(ctx);
	if (who[0] != '\0') {
		snprintf(crt, sizeof crt, "%s.crt", who);
		snprintf(key, sizeof key, "%s.key", who);
		ck_assert_int_eq(SSL_CTX_use_certificate_file(
				     ctx, cert(3, crt), SSL_FILETYPE_PEM),
		    1);
		ck_assert_int_eq(SSL_CTX_use_PrivateKey_file(
				     ctx, cert(4, key), SSL_FILETYPE_PEM),
		    1);
	}
	ssl = SSL_new(ctx);
	SSL_CTX_free(ctx); /* the SSL holds it */
	SSL_set_fd(ssl, fd);
	SSL_set_connect_state(ssl);
	return ssl;
}

struct pair {
	int fd[2];
	struct tls_conn *s;
	SSL *c;
};

static void
pair_open(struct pair *p, struct tls_server *srv, const char *who)
{
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, p->fd), 0);
	for (int i = 0; i < 2; i++)
		fcntl(p->fd[i], F_SETFL, O_NONBLOCK);
	p->s = tls_conn_new(srv, p->fd[0]);
	p->c = client(p->fd[1], who);
}

static void
pair_close(struct pair *p)
{
	tls_conn_free(p->s);
	SSL_free(p->c);
	close(p->fd[0]);
	close(p->fd[1]);
}

/* Both sides stepped in turn: the server's outcome (TLS_DONE or
 * TLS_FAILED). */
static enum tls_io
handshake(struct pair *p)
{
	enum tls_io s = TLS_WANT_READ;
	int c = 0;

	for (int i = 0; i < 100 && (s != TLS_DONE || c != 1); i++) {
		if (s != TLS_DONE && s != TLS_FAILED && s != TLS_CLOSED)
			s = tls_handshake(p->s);
		if (c != 1 && (c = SSL_connect(p->c)) != 1)
			(void)SSL_get_error(p->c, c);
		if (s == TLS_FAILED || s == TLS_CLOSED)
			break;
	}
	/* The client may see the refusal only on its first read. */
	if (s == TLS_DONE) {
		char b;

		(void)SSL_read(p->c, &b, 1);
		ERR_clear_error();
		s = SSL_get_verify_result(p->c) == X509_V_OK ? TLS_DONE : s;
	}
	return s;
}

static bool
first_name(const char *name, void *arg)
{
	snprintf(arg, 128, "%s", name);
	return true;
}

/* The verified certificate's first name, "" for none. */
static const char *
peer(struct pair *p)
{
	static char name[128];

	name[0] = '\0';
	(void)tls_peer_names(p->s, first_name, name);
	return name;
}

START_TEST(test_bad_files_are_refused_with_the_reason)
{
	struct tls_settings ts = { .certificate = "/nonexistent/server.crt",
		.key = cert(1, "server.key"),
		.verify = TLS_VERIFY_NONE };
	char err[256];

	ck_assert_ptr_null(tls_server_new(&ts, err, sizeof err));
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/server.crt"));
	ts.certificate = cert(0, "server.crt");
	ts.key = cert(1, "billing.key");
	ck_assert_ptr_null(tls_server_new(&ts, err, sizeof err));
	ck_assert_msg(strstr(err, "billing.key") != NULL &&
		strstr(err, "mismatch") != NULL,
	    "%s", err);
	ts.key = cert(1, "server.key");
	ts.verify = TLS_VERIFY_REQUIRE;
	ts.ca = "";
	ck_assert_ptr_null(tls_server_new(&ts, err, sizeof err));
	ck_assert_ptr_nonnull(strstr(err, "CA"));
}
END_TEST

/* Each policy with each client: let in (and the name it gives) or not. */
START_TEST(test_who_each_policy_lets_in)
{
	static const struct {
		enum tls_verify verify;
		const char *who;
		bool in;
		const char *name;
	} t[] = {
		{ TLS_VERIFY_NONE, "", true, "" },
		{ TLS_VERIFY_NONE, "billing", true, "" },
		{ TLS_VERIFY_OPTIONAL, "", true, "" },
		{ TLS_VERIFY_OPTIONAL, "billing", true, "billing.example" },
		{ TLS_VERIFY_OPTIONAL, "expired", false, "" },
		{ TLS_VERIFY_OPTIONAL, "rogue-billing", false, "" },
		{ TLS_VERIFY_REQUIRE, "", false, "" },
		{ TLS_VERIFY_REQUIRE, "billing", true, "billing.example" },
		{ TLS_VERIFY_REQUIRE, "cnonly", true, "orders.example" },
		{ TLS_VERIFY_REQUIRE, "expired", false, "" },
		{ TLS_VERIFY_REQUIRE, "rogue-billing", false, "" },
	};
	char err[256];

	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		struct tls_server *srv = server(t[i].verify, err, sizeof err);
		struct pair p;
		enum tls_io got;

		ck_assert_msg(srv != NULL, "%s", err);
		pair_open(&p, srv, t[i].who);
		got = handshake(&p);
		ck_assert_msg((got == TLS_DONE) == t[i].in, "case %zu (%s): %d",
		    i, t[i].who, (int)got);
		if (t[i].in)
			ck_assert_str_eq(peer(&p), t[i].name);
		else
			ck_assert_str_ne(tls_error(p.s), "no error");
		pair_close(&p);
		tls_server_free(srv);
	}
}
END_TEST

/* Lines both ways, and the peer's close seen as closed. A connection
 * outlives its context (a reload frees the old one). */
START_TEST(test_read_write_and_close)
{
	char err[256], buf[64];
	struct tls_server *srv = server(TLS_VERIFY_NONE, err, sizeof err);
	struct pair p;
	size_t n = 0;
	enum tls_io io;

	ck_assert_msg(srv != NULL, "%s", err);
	pair_open(&p, srv, "");
	tls_server_free(srv);
	ck_assert_int_eq(handshake(&p), TLS_DONE);
	ck_assert_int_eq(tls_read(p.s, buf, sizeof buf, &n), TLS_WANT_READ);
	ck_assert_int_eq(SSL_write(p.c, "PING\n", 5), 5);
	ck_assert_int_eq(tls_read(p.s, buf, sizeof buf, &n), TLS_DONE);
	ck_assert_uint_eq(n, 5);
	ck_assert_int_eq(memcmp(buf, "PING\n", 5), 0);
	ck_assert_int_eq(tls_write(p.s, "PONG\n", 5, &n), TLS_DONE);
	ck_assert_uint_eq(n, 5);
	ck_assert_int_eq(SSL_read(p.c, buf, sizeof buf), 5);
	(void)SSL_shutdown(p.c);
	io = tls_read(p.s, buf, sizeof buf, &n);
	ck_assert_int_eq(io, TLS_CLOSED);
	pair_close(&p);
}
END_TEST

/* Plain text to a TLS socket: a failed handshake, nothing read. */
START_TEST(test_plain_text_fails_the_handshake)
{
	char err[256];
	struct tls_server *srv = server(TLS_VERIFY_NONE, err, sizeof err);
	struct tls_conn *tc;
	int fd[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0);
	fcntl(fd[0], F_SETFL, O_NONBLOCK);
	tc = tls_conn_new(srv, fd[0]);
	ck_assert_int_eq(write(fd[1], "ACQUIRE x\r\n", 11), 11);
	ck_assert_int_eq(tls_handshake(tc), TLS_FAILED);
	tls_conn_free(tc);
	tls_server_free(srv);
	close(fd[0]);
	close(fd[1]);
}
END_TEST

static Suite *
tls_suite(void)
{
	Suite *s = suite_create("tls");
	TCase *tc = tcase_create("tls");

	tcase_add_test(tc, test_bad_files_are_refused_with_the_reason);
	tcase_add_test(tc, test_who_each_policy_lets_in);
	tcase_add_test(tc, test_read_write_and_close);
	tcase_add_test(tc, test_plain_text_fails_the_handshake);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(tls_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

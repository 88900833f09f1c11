/*
 * lockctl: a command-line client of lockbrokerd. One header, a section per
 * .c file: lockctl.c (options, subcommands), ask.c (a request and its reply,
 * the exit code of a reply), conn.c (the connection and its line framing),
 * run.c (holding a lock while a command runs). lockctl.c and run.c call
 * ask.c and conn.c, never each other but for run_main.
 */
#ifndef LOCKCTL_H
#define LOCKCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/*
 * Exit codes. They are part of the interface (lockctl(1), EXIT STATUS):
 * keep them stable. 0 and COMMAND's own status are not listed.
 */
enum {
	LC_EXIT_USAGE = 64,	  /* bad command line */
	LC_EXIT_LOST = 66,	  /* run: lock lost while COMMAND ran */
	LC_EXIT_NOTHELD = 67,	  /* release: the token does not hold it */
	LC_EXIT_UNAVAILABLE = 69, /* broker or Redis unavailable */
	LC_EXIT_BROKER = 70,	  /* any other ERR, or a reply not understood */
	LC_EXIT_OSERR = 71,	  /* local: fork, pipe, secret file, stdout */
	LC_EXIT_BUSY = 75, /* lock not obtained (TIMEOUT); -E changes it */
	LC_EXIT_AUTH = 77, /* ERR AUTH or ERR NOAUTH */
	/* Not an exit code: ask_acquire's answer when a FILL is DONE (the
	 * leader finished the work); run_main passes it on, fill exits 0. */
	LC_FILL_DONE = 256,
	/* Not an exit code: ask_acquire's answer when the lock is busy;
	 * main turns it into -E's code (which may be 0, so not here). */
	LC_BUSY = 257,
};

/* How long a request that does not wait for a lock may take, connect too. */
#define LC_IO_TIMEOUT_MS 10000

/* ask.c */

/*
 * An ACQUIRE (or FILL) to make: lockctl.c builds it for acquire, run.c for
 * run and fill.
 */
struct acquire_req {
	const char *name;
	uint64_t ttl_ms;   /* 0: a session lock */
	int64_t wait_ms;   /* -1: until granted, 0: try once */
	bool keep;	   /* KEEP: the lock outlives the connection */
	const char *token; /* our own TOKEN, or NULL */
	bool shared;	   /* SHARED: one of many readers */
	uint64_t limit;	   /* LIMIT <n>: one of at most n holders; 0: none */
	bool fill;	   /* FILL: single-flight, RELEASE only after success */
	bool quiet;	   /* -q: no "lock busy" line on stderr */
};

/* A grant: "OK <fence> <ttl_ms> <token>". */
struct grant {
	uint64_t fence;
	uint64_t ttl_ms;
	char token[PROTO_TOKEN_MAX + 1];
};

/* What run.c needs from the command line. */
struct run_opts {
	struct acquire_req req;
	uint64_t grace_ms; /* from SIGTERM to SIGKILL */
	char **argv;	   /* COMMAND and its arguments, NULL-terminated */
};

struct conn;

/* Whether a secret was given: ERR AUTH then says how to give one. */
extern bool ask_have_secret;

int ask_acquire(struct conn *c, const struct acquire_req *r, struct grant *g);
int ask_reply(struct conn *c, int64_t timeout_ms, char **line);
int ask_err_exit(const char *line);

/* conn.c */

#define CONN_LINE_MAX 4096

/* What conn_fill and conn_readline return; CONN_OK: input, or a line. */
enum conn_status {
	CONN_OK,
	CONN_EOF,
	CONN_TIMEOUT,
	CONN_ERROR,
};

/* Where the broker listens: a Unix socket path, or a TCP host and port. */
struct conn_addr {
	char path[108];
	char host[256];
	char port[16];
	const char *ca;	  /* TLS when set: the CA that signs the broker's */
	const char *cert; /* a client certificate (with key), or NULL */
	const char *key;
};

struct ssl_st;
struct ssl_ctx_st;

struct conn {
	int fd;
	struct ssl_st *ssl; /* inside TLS (conn_tls.c), else NULL */
	struct ssl_ctx_st *tls;
	size_t len;		      /* bytes in buf */
	char buf[CONN_LINE_MAX + 1];  /* input not yet taken as lines */
	char line[CONN_LINE_MAX + 1]; /* the last line taken */
};

int conn_parse_addr(const char *s, struct conn_addr *a);
int conn_open(struct conn *c, const struct conn_addr *a);
int conn_send(struct conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
enum conn_status conn_fill(struct conn *c);
bool conn_take(struct conn *c, char **line);
enum conn_status conn_readline(struct conn *c, int64_t timeout_ms, char **line);
void conn_quit(struct conn *c, int timeout_ms);
void conn_close(struct conn *c);

/* conn_tls.c: the handshake on c's connected socket (-1: said why);
 * sending, one read, whether OpenSSL holds input already read from the
 * socket, and freeing (notify: close_notify first). */
int conn_tls_open(struct conn *c, const struct conn_addr *a);
int conn_tls_send(struct conn *c, const char *buf, size_t len);
enum conn_status conn_tls_fill(struct conn *c);
bool conn_tls_pending(const struct conn *c);
void conn_tls_close(struct conn *c, bool notify);

/* run.c */

int run_main(struct conn *c, const struct run_opts *o);

#endif

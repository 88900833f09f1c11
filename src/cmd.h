/*
 * cmd: one command table for protocol v1. A line is split, looked up, its
 * arity and auth checked in one place, and its handler runs. Replies go to
 * the session's output buffer; the client module owns the socket.
 */
#ifndef LB_CMD_H
#define LB_CMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lock.h"

struct evbuffer;
struct event;
struct event_base;
struct config;
struct session;
struct ident;

enum cmd_result {
	CMD_DONE,  /* answered; go on with the next line */
	CMD_ASYNC, /* in flight; session->resume is called when answered */
	CMD_CLOSE, /* answered; flush and close the connection */
};

typedef void session_resume_fn(struct session *);

/* A connection as the command layer sees it. */
struct session {
	uint64_t id;
	struct evbuffer *out; /* replies are appended here */
	struct lock_owner owner;
	bool authed;
	struct ident *ident; /* whom AUTH let in (a reference); NULL: none */
	bool eof;	     /* no more input: ACQUIRE does not wait */
	session_resume_fn *resume; /* the request in flight was answered */
	void *ctx;		   /* the client module's */
	void (*reply)(struct session *, const struct lock_result *);
	bool quit;	   /* an answer that came later closes (AUTH) */
	char *auth_secret; /* an AUTH waiting for its peer's slot */
	struct event *auth_ev;
};

#define CMD_NOAUTH 0x1 /* may run before AUTH */

/* The options a verb takes after its arguments, in any order, each once
 * (cmd.c's cmd_optdefs says what each is). */
#define CMD_OPT_TTL 0x01
#define CMD_OPT_WAIT 0x02
#define CMD_OPT_KEEP 0x04
#define CMD_OPT_TOKEN 0x08
#define CMD_OPT_SHARED 0x10
#define CMD_OPT_LIMIT 0x20

struct cmd_entry {
	const char *name;
	int min_args; /* its arguments, before any option */
	int flags;
	enum cmd_result (*fn)(struct session *, int, char **);
	const char *args; /* "<name>", as usage shows them */
	int opts;	  /* CMD_OPT_* */
	int right;	  /* CONFIG_RIGHT_* its first argument, a name, needs */
	/* Made from the above by cmd_init: */
	int max_args; /* with every option it may take */
	char usage[128];
};

/* base NULL: no timers (lockbrokerd -t); AUTH is then never delayed. */
void cmd_init(const struct config *cf, struct event_base *base);
void cmd_reload(void);
void cmd_shutdown(void);
const struct cmd_entry *cmd_lookup(const char *verb);

/* peer: "ip:port", "[ip6]:port" or "unix" (the string must outlive s). */
void cmd_session_init(struct session *s, uint64_t id, const char *peer,
    struct evbuffer *out, session_resume_fn *resume, void *ctx);
/* The connection is gone; vanished: without QUIT or a stop of ours. */
void cmd_session_end(struct session *s, bool vanished);

/* Run one line (without its LF; line[len] must be writable). */
enum cmd_result cmd_execute(struct session *s, char *line, size_t len);

/* Whether an identity removed by a reload is the session's: the client
 * module then closes the connection. */
/* The session let in as the identity a verified TLS client certificate
 * names (client_tls.c), without AUTH; false if none does. */
struct tls_conn;
bool cmd_session_certified(struct session *s, const struct tls_conn *tc);
bool cmd_session_gone(const struct session *s);

/* Append "ERR <CODE> <text>" to the session's output. */
void cmd_error(struct session *s, enum proto_err err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif

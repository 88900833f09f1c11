/*
 * cmd_int: what the command module's files share and nothing outside
 * cmd*.c includes. cmd.c owns the table, dispatch, options and sessions;
 * cmd_lock.c the handlers that ask the lock engine; cmd_auth.c AUTH and
 * the secrets. The handlers are named here for cmd.c's table.
 */
#ifndef LB_CMD_INT_H
#define LB_CMD_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "cmd.h"

struct config;
struct event_base;

/* The module's state: cmd.c sets it up; cmd_auth.c owns the AUTH log's
 * counters (the secrets are the identity module's). */
struct cmd_state {
	const struct config *cf;
	struct event_base *base;
	uint64_t auth_logged_ms; /* the last "AUTH failed" line */
	unsigned auth_unlogged;	 /* failures since, not logged */
	uint64_t started_ms;	 /* monotonic: a clock jump is not uptime */
};
extern struct cmd_state cmds;

/* What the options of a request said. */
struct cmd_opts {
	int seen; /* CMD_OPT_* */
	uint64_t ttl_ms, wait_ms;
	const char *token;
	unsigned limit;
};

/* cmd.c: answer now if the engine answered now, else when its done
 * callback runs. */
enum cmd_result cmd_dispatch(struct session *s, int rc,
    const struct lock_result *res,
    void (*reply)(struct session *, const struct lock_result *));
/* cmd.c: an ERR result, the same in every reply function (false: none). */
bool cmd_reply_err(struct session *s, const struct lock_result *res);
/* cmd.c: milliseconds as a plain decimal, or ERR ARGS naming what. */
int cmd_parse_ms(
    struct session *s, const char *what, const char *arg, uint64_t *out);
/* cmd.c: the options after ce's arguments (ERR ARGS and -1 if wrong). */
int cmd_parse_opts(struct session *s, const struct cmd_entry *ce, int argc,
    char **argv, struct cmd_opts *o);

/* cmd_lock.c: the commands on locks. */
enum cmd_result cmd_acquire(struct session *, int, char **);
enum cmd_result cmd_extend(struct session *, int, char **);
enum cmd_result cmd_locks(struct session *, int, char **);
enum cmd_result cmd_release(struct session *, int, char **);
enum cmd_result cmd_revoke(struct session *, int, char **);
enum cmd_result cmd_status(struct session *, int, char **);
enum cmd_result cmd_validate(struct session *, int, char **);
enum cmd_result cmd_who(struct session *, int, char **);

/* cmd_auth.c: AUTH. */
enum cmd_result cmd_auth(struct session *, int, char **);
/* cmd_auth.c: ERR DENIED for s's identity, right and name. */
void cmd_denied(struct session *s, int right, const char *name);

#endif

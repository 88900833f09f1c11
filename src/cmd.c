/*
 * cmd: the command table and dispatch. Lookup, arity and auth are checked
 * in cmd_execute only; the options every verb may take are parsed here
 * (cmd_parse_opts), and a session is the lock engine's owner. The handlers
 * on locks are in cmd_lock.c, AUTH and the secrets in cmd_auth.c; a
 * handler asks the lock engine and names the function that formats the
 * answer, which runs at once or when Redis replies. Calls the lock engine,
 * proto, stats and log, never the Redis module.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "lb_build.h"
#include "authwait.h"
#include "cmd.h"
#include "cmd_int.h"
#include "config.h"
#include "identity.h"
#include "log.h"
#include "metrics.h"
#include "proto.h"
#include "stats.h"
#include "xmalloc.h"

static enum cmd_result cmd_cancel(struct session *, int, char **);
static enum cmd_result cmd_help(struct session *, int, char **);
static enum cmd_result cmd_info(struct session *, int, char **);
static enum cmd_result cmd_ping(struct session *, int, char **);
static enum cmd_result cmd_quit(struct session *, int, char **);

/*
 * Arity counts the arguments after the verb; options follow them. HELP and
 * the usage error print a usage made from the table (cmd_table_init).
 */
#define ACQ_OPTS                                                               \
	(CMD_OPT_TTL | CMD_OPT_WAIT | CMD_OPT_KEEP | CMD_OPT_TOKEN |           \
	    CMD_OPT_SHARED | CMD_OPT_LIMIT)
#define LOCK CONFIG_RIGHT_LOCK
#define READ CONFIG_RIGHT_READ
static struct cmd_entry cmd_table[] = {
	{ "PING", 0, CMD_NOAUTH, cmd_ping, "", 0 },
	{ "AUTH", 1, CMD_NOAUTH, cmd_auth, "<secret>", 0 },
	{ "ACQUIRE", 1, 0, cmd_acquire, "<name>", ACQ_OPTS, LOCK },
	{ "FILL", 1, 0, cmd_acquire, "<name>",
	    CMD_OPT_TTL | CMD_OPT_WAIT | CMD_OPT_TOKEN, LOCK },
	{ "RELEASE", 1, 0, cmd_release, "<name>", CMD_OPT_TOKEN, LOCK },
	{ "EXTEND", 2, 0, cmd_extend, "<name> <ttl_ms>", CMD_OPT_TOKEN, LOCK },
	{ "STATUS", 1, 0, cmd_status, "<name>", 0, READ },
	{ "VALIDATE", 2, 0, cmd_validate, "<name> <fence>", CMD_OPT_TOKEN,
	    LOCK },
	{ "WHO", 1, 0, cmd_who, "<name>", 0, READ },
	{ "CANCEL", 0, 0, cmd_cancel, "", 0 },
	{ "REVOKE", 1, 0, cmd_revoke, "<name>", 0, CONFIG_RIGHT_REVOKE },
	{ "LOCKS", 0, 0, cmd_locks, "", 0 },
	{ "INFO", 0, 0, cmd_info, "", 0 },
	{ "HELP", 0, CMD_NOAUTH, cmd_help, "", 0 },
	{ "QUIT", 0, CMD_NOAUTH, cmd_quit, "", 0 },
};
#undef LOCK
#undef READ
#define CMD_COUNT (sizeof cmd_table / sizeof cmd_table[0])

struct cmd_state cmds;

static const struct lock_owner_ops cmd_owner_ops;

const struct cmd_entry *
cmd_lookup(const char *verb)
{
	for (size_t i = 0; i < CMD_COUNT; i++)
		if (proto_keyword(verb, cmd_table[i].name))
			return &cmd_table[i];
	return NULL;
}

void
cmd_error(struct session *s, enum proto_err err, const char *fmt, ...)
{
	va_list ap;

	STAT_INC(errors_total);
	evbuffer_add_printf(s->out, "ERR %s ", proto_err_name(err));
	va_start(ap, fmt);
	evbuffer_add_vprintf(s->out, fmt, ap);
	va_end(ap);
	evbuffer_add(s->out, "\n", 1);
}

/*
 * The one check of an identity's rights, before the handler runs, so a
 * refused request does nothing at all. A REVOKE by an identity without
 * that right anywhere is left to cmd_revoke, which says what was meant
 * by the two secrets of before; the rest is counted for /metrics.
 */
static bool
cmd_permitted(struct session *s, const struct cmd_entry *ce, const char *name)
{
	if (ce->right == 0 || ident_allows(s->ident, ce->right, name) ||
	    (ce->right == CONFIG_RIGHT_REVOKE &&
		(s->ident == NULL || s->ident->builtin))) {
		if (!(ce->flags & CMD_NOAUTH))
			ident_count(s->ident, false);
		return true;
	}
	cmd_denied(s, ce->right, name);
	return false;
}

enum cmd_result
cmd_execute(struct session *s, char *line, size_t len)
{
	const struct cmd_entry *ce;
	char *argv[PROTO_MAX_ARGS];
	int argc;

	argc = proto_split(line, len, argv, PROTO_MAX_ARGS);
	if (argc == 0)
		return CMD_DONE;
	STAT_INC(commands_total);
	if (argc == PROTO_SPLIT_BADBYTE) {
		cmd_error(s, PERR_PROTO, "control byte in request");
		return CMD_DONE;
	}
	if (argc == PROTO_SPLIT_TOOMANY) {
		cmd_error(s, PERR_ARGS, "more than %d words", PROTO_MAX_ARGS);
		return CMD_DONE;
	}
	if ((ce = cmd_lookup(argv[0])) == NULL) {
		cmd_error(s, PERR_UNKNOWN, "unknown command, try HELP");
		return CMD_DONE;
	}
	if (!s->authed && !(ce->flags & CMD_NOAUTH)) {
		cmd_error(s, PERR_NOAUTH, "AUTH first");
		return CMD_DONE;
	}
	if (argc - 1 < ce->min_args || argc - 1 > ce->max_args) {
		cmd_error(s, PERR_ARGS, "usage: %s", ce->usage);
		return CMD_DONE;
	}
	if (!cmd_permitted(s, ce, argv[1]))
		return CMD_DONE;
	return ce->fn(s, argc, argv);
}

/* Answer now if the engine answered now, else when its done callback runs. */
enum cmd_result
cmd_dispatch(struct session *s, int rc, const struct lock_result *res,
    void (*reply)(struct session *, const struct lock_result *))
{
	if (rc == 0) {
		s->reply = reply;
		return CMD_ASYNC;
	}
	reply(s, res);
	return CMD_DONE;
}

/* Shared by every reply function: ERR results look the same everywhere. */
bool
cmd_reply_err(struct session *s, const struct lock_result *res)
{
	if (res->status != LOCK_ERR)
		return false;
	cmd_error(s, res->err, "%s", res->errtext);
	return true;
}

/* Milliseconds as a plain decimal, or ERR ARGS naming what. */
int
cmd_parse_ms(
    struct session *s, const char *what, const char *arg, uint64_t *out)
{
	if (proto_parse_u64(arg, INT64_MAX, out) == 0)
		return 0;
	cmd_error(s, PERR_ARGS, "%s wants milliseconds, a plain decimal", what);
	return -1;
}

static int cmd_opt_ttl(struct session *, const char *, struct cmd_opts *);
static int cmd_opt_wait(struct session *, const char *, struct cmd_opts *);
static int cmd_opt_token(struct session *, const char *, struct cmd_opts *);
static int cmd_opt_limit(struct session *, const char *, struct cmd_opts *);

/* Every option: its keyword, its usage, and its value's parser (NULL: a
 * flag). In the order usage shows them. */
static const struct cmd_optdef {
	const char *name;
	int bit;
	const char *usage;
	int (*parse)(struct session *, const char *, struct cmd_opts *);
} cmd_optdefs[] = {
	{ "TTL", CMD_OPT_TTL, " [TTL <ms>]", cmd_opt_ttl },
	{ "WAIT", CMD_OPT_WAIT, " [WAIT <ms>]", cmd_opt_wait },
	{ "KEEP", CMD_OPT_KEEP, " [KEEP]", NULL },
	{ "TOKEN", CMD_OPT_TOKEN, " [TOKEN <t>]", cmd_opt_token },
	{ "SHARED", CMD_OPT_SHARED, " [SHARED", NULL },
	{ "LIMIT", CMD_OPT_LIMIT, " | LIMIT <n>]", cmd_opt_limit },
};
#define CMD_OPTDEFS (sizeof cmd_optdefs / sizeof cmd_optdefs[0])

static int
cmd_opt_ttl(struct session *s, const char *v, struct cmd_opts *o)
{
	if (cmd_parse_ms(s, "TTL", v, &o->ttl_ms) != 0)
		return -1;
	if (o->ttl_ms == 0) { /* the rule the engine checks, same words */
		cmd_error(s, PERR_ARGS,
		    "ttl must be between %" PRId64 " and %" PRId64 " ms",
		    cmds.cf->locks.min_ttl_ms, cmds.cf->locks.max_ttl_ms);
		return -1;
	}
	return 0;
}

/* WAIT -1 waits until granted, as locks.default_wait_ms -1 does. */
static int
cmd_opt_wait(struct session *s, const char *v, struct cmd_opts *o)
{
	if (strcmp(v, "-1") == 0) {
		o->wait_ms = UINT64_MAX;
		return 0;
	}
	return cmd_parse_ms(s, "WAIT", v, &o->wait_ms);
}

static int
cmd_opt_token(struct session *s, const char *v, struct cmd_opts *o)
{
	o->token = v; /* the engine checks it */
	return 0;
}

/* LIMIT <n>'s n. */
static int
cmd_opt_limit(struct session *s, const char *arg, struct cmd_opts *o)
{
	uint64_t v;

	if (proto_parse_u64(arg, LOCK_LIMIT_MAX, &v) == 0 && v > 0) {
		o->limit = (unsigned)v;
		return 0;
	}
	cmd_error(s, PERR_ARGS, "LIMIT wants 1-%d", LOCK_LIMIT_MAX);
	return -1;
}

/* The option keyword w if ce takes it, or NULL. */
static const struct cmd_optdef *
cmd_optdef(const struct cmd_entry *ce, const char *w)
{
	for (size_t i = 0; i < CMD_OPTDEFS; i++)
		if ((ce->opts & cmd_optdefs[i].bit) &&
		    proto_keyword(w, cmd_optdefs[i].name))
			return &cmd_optdefs[i];
	return NULL;
}

/* A word that is not an option of ce's (another command's, or none). */
static int
cmd_opt_unknown(struct session *s, const struct cmd_entry *ce, const char *w)
{
	if (ce->opts == CMD_OPT_TOKEN) {
		cmd_error(s, PERR_ARGS, "expected TOKEN <t>");
		return -1;
	}
	for (size_t i = 0; i < CMD_OPTDEFS; i++)
		if (proto_keyword(w, cmd_optdefs[i].name)) {
			cmd_error(s, PERR_ARGS, "%s takes no %s", ce->name,
			    cmd_optdefs[i].name);
			return -1;
		}
	cmd_error(s, PERR_ARGS, "unknown option '%s'", w);
	return -1;
}

/* The options after ce's arguments: any order, each at most once, SHARED
 * and LIMIT not together. */
int
cmd_parse_opts(struct session *s, const struct cmd_entry *ce, int argc,
    char **argv, struct cmd_opts *o)
{
	const struct cmd_optdef *d;
	const int mode = CMD_OPT_SHARED | CMD_OPT_LIMIT;

	memset(o, 0, sizeof *o);
	for (int i = 1 + ce->min_args; i < argc; i++) {
		if ((d = cmd_optdef(ce, argv[i])) == NULL)
			return cmd_opt_unknown(s, ce, argv[i]);
		if ((d->bit & mode) && (o->seen & mode & ~d->bit)) {
			cmd_error(s, PERR_ARGS,
			    "SHARED and LIMIT exclude each other");
			return -1;
		}
		if (o->seen & d->bit) {
			cmd_error(
			    s, PERR_ARGS, "repeated option '%s'", d->name);
			return -1;
		}
		if (d->parse != NULL && i + 1 == argc) {
			if (ce->opts == CMD_OPT_TOKEN)
				cmd_error(s, PERR_ARGS, "expected TOKEN <t>");
			else { /* "TTL needs a value: TTL <ms>" */
				const char *v = strchr(d->usage, '<');

				cmd_error(s, PERR_ARGS,
				    "%s needs a value: %s %.*s", d->name,
				    d->name, (int)(strchr(v, '>') + 1 - v), v);
			}
			return -1;
		}
		o->seen |= d->bit;
		if (d->parse != NULL && d->parse(s, argv[++i], o) != 0)
			return -1;
	}
	return 0;
}

static enum cmd_result
cmd_info(struct session *s, int argc, char **argv)
{
	evbuffer_add_printf(s->out, "STAT version %s\n", LB_VERSION);
	evbuffer_add_printf(s->out, "STAT pid %ld\n", (long)getpid());
	evbuffer_add_printf(s->out, "STAT uptime_s %" PRIu64 "\n",
	    (mono_ms() - cmds.started_ms) / 1000);
	for (int i = 0; i < STAT__COUNT; i++)
		evbuffer_add_printf(s->out, "STAT %s %" PRId64 "\n",
		    stats_name((enum stats_id)i), stats[i]);
	for (int i = 0; i < HIST__COUNT; i++)
		evbuffer_add_printf(s->out,
		    "STAT %s_count %" PRIu64 "\nSTAT %s_sum %.6f\n",
		    stats_hist_name((enum stats_hist_id)i),
		    stats_hists[i].count,
		    stats_hist_name((enum stats_hist_id)i),
		    (double)stats_hists[i].sum_us / 1e6);
	metrics_info_nodes(s->out);
	evbuffer_add(s->out, "END\n", 4);
	return CMD_DONE;
}

static enum cmd_result
cmd_help(struct session *s, int argc, char **argv)
{
	for (size_t i = 0; i < CMD_COUNT; i++)
		evbuffer_add_printf(s->out, "%s\n", cmd_table[i].usage);
	evbuffer_add(s->out, "END\n", 4);
	return CMD_DONE;
}

/*
 * CANCEL right behind a waiting request ended that wait when it was read
 * (client.c); in its turn it has nothing left to do.
 */
static enum cmd_result
cmd_cancel(struct session *s, int argc, char **argv)
{
	evbuffer_add(s->out, "OK\n", 3);
	return CMD_DONE;
}

static enum cmd_result
cmd_ping(struct session *s, int argc, char **argv)
{
	evbuffer_add(s->out, "PONG\n", 5);
	return CMD_DONE;
}

static enum cmd_result
cmd_quit(struct session *s, int argc, char **argv)
{
	evbuffer_add(s->out, "OK\n", 3);
	return CMD_CLOSE;
}

static void
cmd_owner_done(struct lock_owner *o, const struct lock_result *res)
{
	struct session *s =
	    (struct session *)((char *)o - offsetof(struct session, owner));
	void (*reply)(struct session *, const struct lock_result *) = s->reply;

	s->reply = NULL;
	reply(s, res);
	s->resume(s);
}

static void
cmd_owner_lost(
    struct lock_owner *o, const char *name, uint64_t fence, const char *reason)
{
	struct session *s =
	    (struct session *)((char *)o - offsetof(struct session, owner));

	evbuffer_add_printf(
	    s->out, "EVENT LOST %s %" PRIu64 " %s\n", name, fence, reason);
}

static const struct lock_owner_ops cmd_owner_ops = {
	.done = cmd_owner_done,
	.lost = cmd_owner_lost,
};

void
cmd_session_init(struct session *s, uint64_t id, const char *peer,
    struct evbuffer *out, session_resume_fn *resume, void *ctx)
{
	memset(s, 0, sizeof *s);
	s->id = id;
	s->out = out;
	s->resume = resume;
	s->ctx = ctx;
	s->authed = !ident_required();
	lock_owner_init(&s->owner, id, &cmd_owner_ops, peer);
}

bool
cmd_session_gone(const struct session *s)
{
	return s->ident != NULL && s->ident->gone;
}

void
cmd_session_end(struct session *s, bool vanished)
{
	lock_owner_gone(&s->owner, vanished);
	if (s->auth_ev != NULL)
		event_free(s->auth_ev);
	s->auth_ev = NULL;
	freezero_str(s->auth_secret);
	s->auth_secret = NULL;
	lockreq_owner_ident(&s->owner, NULL);
	ident_unref(s->ident);
	s->ident = NULL;
}

/* Each verb's usage and most arguments, from its arguments and options. */
static void
cmd_table_init(void)
{
	struct cmd_entry *ce;
	size_t n;

	for (ce = cmd_table; ce < cmd_table + CMD_COUNT; ce++) {
		n = (size_t)snprintf(ce->usage, sizeof ce->usage, "%s%s%s",
		    ce->name, ce->args[0] != '\0' ? " " : "", ce->args);
		ce->max_args = ce->min_args;
		for (size_t i = 0; i < CMD_OPTDEFS; i++) {
			const struct cmd_optdef *d = &cmd_optdefs[i];
			const char *u = d->usage;

			if (!(ce->opts & d->bit))
				continue;
			/* SHARED and LIMIT exclude each other: together
			 * "[SHARED | LIMIT <n>]", two words at most. */
			if (d->bit == CMD_OPT_SHARED &&
			    !(ce->opts & CMD_OPT_LIMIT))
				u = " [SHARED]";
			else if (d->bit == CMD_OPT_LIMIT &&
			    !(ce->opts & CMD_OPT_SHARED))
				u = " [LIMIT <n>]";
			n += (size_t)snprintf(ce->usage + n,
			    n < sizeof ce->usage ? sizeof ce->usage - n : 0,
			    "%s", u);
			if (d->bit != CMD_OPT_SHARED ||
			    !(ce->opts & CMD_OPT_LIMIT))
				ce->max_args += d->parse != NULL ? 2 : 1;
		}
	}
}

void
cmd_init(const struct config *cf, struct event_base *base)
{
	cmd_table_init();
	cmds.cf = cf;
	cmds.base = base;
	cmds.started_ms = mono_ms();
	if (!ident_load(cf))
		fatal_config("cannot read the AUTH secrets");
}

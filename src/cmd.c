/*
 * cmd: the command table and its handlers. Lookup, arity and auth are checked
 * in cmd_execute only; a handler parses its own options, asks the lock engine
 * and names the function that formats the answer, which runs at once or when
 * Redis replies.
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
#include "config.h"
#include "log.h"
#include "proto.h"
#include "stats.h"
#include "xmalloc.h"

static enum cmd_result cmd_acquire(struct session *, int, char **);
static enum cmd_result cmd_auth(struct session *, int, char **);
static enum cmd_result cmd_extend(struct session *, int, char **);
static enum cmd_result cmd_cancel(struct session *, int, char **);
static enum cmd_result cmd_help(struct session *, int, char **);
static enum cmd_result cmd_info(struct session *, int, char **);
static enum cmd_result cmd_locks(struct session *, int, char **);
static enum cmd_result cmd_ping(struct session *, int, char **);
static enum cmd_result cmd_quit(struct session *, int, char **);
static enum cmd_result cmd_release(struct session *, int, char **);
static enum cmd_result cmd_revoke(struct session *, int, char **);
static enum cmd_result cmd_status(struct session *, int, char **);
static enum cmd_result cmd_validate(struct session *, int, char **);
static enum cmd_result cmd_who(struct session *, int, char **);

/*
 * Arity counts the arguments after the verb; options follow them. HELP and
 * the usage error print a usage made from the table (cmd_table_init).
 */
#define ACQ_OPTS                                                               \
	(CMD_OPT_TTL | CMD_OPT_WAIT | CMD_OPT_KEEP | CMD_OPT_TOKEN |           \
	    CMD_OPT_SHARED | CMD_OPT_LIMIT)
static struct cmd_entry cmd_table[] = {
	{ "PING", 0, CMD_NOAUTH, cmd_ping, "", 0 },
	{ "AUTH", 1, CMD_NOAUTH, cmd_auth, "<secret>", 0 },
	{ "ACQUIRE", 1, 0, cmd_acquire, "<name>", ACQ_OPTS },
	{ "FILL", 1, 0, cmd_acquire, "<name>",
	    CMD_OPT_TTL | CMD_OPT_WAIT | CMD_OPT_TOKEN },
	{ "RELEASE", 1, 0, cmd_release, "<name>", CMD_OPT_TOKEN },
	{ "EXTEND", 2, 0, cmd_extend, "<name> <ttl_ms>", CMD_OPT_TOKEN },
	{ "STATUS", 1, 0, cmd_status, "<name>", 0 },
	{ "VALIDATE", 2, 0, cmd_validate, "<name> <fence>", CMD_OPT_TOKEN },
	{ "WHO", 1, 0, cmd_who, "<name>", 0 },
	{ "CANCEL", 0, 0, cmd_cancel, "", 0 },
	{ "REVOKE", 1, 0, cmd_revoke, "<name>", 0 },
	{ "LOCKS", 0, 0, cmd_locks, "", 0 },
	{ "INFO", 0, 0, cmd_info, "", 0 },
	{ "HELP", 0, CMD_NOAUTH, cmd_help, "", 0 },
	{ "QUIT", 0, CMD_NOAUTH, cmd_quit, "", 0 },
};
#define CMD_COUNT (sizeof cmd_table / sizeof cmd_table[0])

static struct {
	const struct config *cf;
	struct event_base *base;
	uint64_t auth_logged_ms; /* the last "AUTH failed" line */
	unsigned auth_unlogged;	 /* failures since, not logged */
	char *secret; /* "" when AUTH is not required; wiped at shutdown */
	char *admin;  /* "" when nobody may REVOKE; wiped at shutdown */
	uint64_t started_ms; /* monotonic: a clock jump is not uptime */
} cmds;

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
	return ce->fn(s, argc, argv);
}

/* Answer now if the engine answered now, else when its done callback runs. */
static enum cmd_result
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
static bool
cmd_reply_err(struct session *s, const struct lock_result *res)
{
	if (res->status != LOCK_ERR)
		return false;
	cmd_error(s, res->err, "%s", res->errtext);
	return true;
}

static int
cmd_parse_ms(
    struct session *s, const char *what, const char *arg, uint64_t *out)
{
	if (proto_parse_u64(arg, INT64_MAX, out) == 0)
		return 0;
	cmd_error(s, PERR_ARGS, "%s wants milliseconds, a plain decimal", what);
	return -1;
}

static void
cmd_acquire_reply(struct session *s, const struct lock_result *res)
{
	/* The most frequent answer, made without printf (issue 16). */
	char line[3 + 2 * UTIL_U64_LEN + PROTO_TOKEN_MAX + 2], *p = line;
	char *end = line + sizeof line;

	if (cmd_reply_err(s, res))
		return;
	if (res->status == LOCK_TIMEOUT) {
		evbuffer_add(s->out, "TIMEOUT\n", 8);
		return;
	}
	if (res->status == LOCK_DONE) {
		evbuffer_add(s->out, "DONE\n", 5);
		return;
	}
	if (res->status == LOCK_CANCELLED) {
		evbuffer_add(s->out, "CANCELLED\n", 10);
		return;
	}
	util_cat(&p, end, "OK ");
	util_cat_u64(&p, end, res->fence);
	util_cat(&p, end, " ");
	util_cat_u64(&p, end, res->ttl_ms);
	util_cat(&p, end, " ");
	util_cat(&p, end, res->token);
	util_cat(&p, end, "\n");
	evbuffer_add(s->out, line, (size_t)(p - line));
}

/* What the options of a request said. */
struct cmd_opts {
	int seen; /* CMD_OPT_* */
	uint64_t ttl_ms, wait_ms;
	const char *token;
	unsigned limit;
};

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
static int
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

/* The TOKEN option of RELEASE, EXTEND and VALIDATE (NULL: none). */
static int
cmd_token(struct session *s, int argc, char **argv, const char **token)
{
	struct cmd_opts o;

	if (cmd_parse_opts(s, cmd_lookup(argv[0]), argc, argv, &o) != 0)
		return -1;
	*token = o.token;
	return 0;
}

static enum cmd_result
cmd_acquire(struct session *s, int argc, char **argv)
{
	struct lock_acquire_args a = { 0 };
	struct lock_result res;
	struct cmd_opts o;
	/* FILL is single-flight: the first caller is the leader (OK, and
	 * RELEASE when the work is done); the others wait and hear DONE. */
	bool fill = proto_keyword(argv[0], "FILL");
	int rc;

	if (cmd_parse_opts(s, cmd_lookup(argv[0]), argc, argv, &o) != 0)
		return CMD_DONE;
	a.ttl_ms = o.ttl_ms;
	a.keep = (o.seen & CMD_OPT_KEEP) != 0;
	a.token = o.token;
	a.limit = o.limit;
	a.mode = fill			? LOCK_FILL
	    : (o.seen & CMD_OPT_SHARED) ? LOCK_SHARED
	    : (o.seen & CMD_OPT_LIMIT)	? LOCK_LIMIT
					: LOCK_EXCLUSIVE;
	/* Without WAIT, the configured default (-1: as long as it takes). */
	a.wait_ms = !(o.seen & CMD_OPT_WAIT) ? cmds.cf->locks.default_wait_ms
	    : o.wait_ms == UINT64_MAX	     ? -1
					     : (int64_t)o.wait_ms;
	/* Half-closed: nobody could cancel a wait by leaving any more. */
	if (s->eof)
		a.wait_ms = 0;
	rc = lock_acquire(&s->owner, argv[1], &a, &res);
	return cmd_dispatch(s, rc, &res, cmd_acquire_reply);
}

static void
cmd_ok_reply(struct session *s, const struct lock_result *res)
{
	if (!cmd_reply_err(s, res))
		evbuffer_add(s->out, "OK\n", 3);
}

static enum cmd_result
cmd_release(struct session *s, int argc, char **argv)
{
	struct lock_result res;
	const char *token;
	int rc;

	if (cmd_token(s, argc, argv, &token) != 0)
		return CMD_DONE;
	rc = lock_release(&s->owner, argv[1], token, &res);
	return cmd_dispatch(s, rc, &res, cmd_ok_reply);
}

static void
cmd_extend_reply(struct session *s, const struct lock_result *res)
{
	if (!cmd_reply_err(s, res))
		evbuffer_add_printf(s->out, "OK %" PRIu64 "\n", res->ttl_ms);
}

static enum cmd_result
cmd_extend(struct session *s, int argc, char **argv)
{
	struct lock_result res;
	const char *token;
	uint64_t ttl;
	int rc;

	if (cmd_parse_ms(s, "EXTEND", argv[2], &ttl) != 0 ||
	    cmd_token(s, argc, argv, &token) != 0)
		return CMD_DONE;
	rc = lock_extend(&s->owner, argv[1], ttl, token, &res);
	return cmd_dispatch(s, rc, &res, cmd_extend_reply);
}

static void
cmd_status_reply(struct session *s, const struct lock_result *res)
{
	if (cmd_reply_err(s, res))
		return;
	if (res->status == LOCK_FREE)
		evbuffer_add(s->out, "OK FREE\n", 8);
	else if (res->mode == LOCK_SHARED || res->mode == LOCK_LIMIT)
		evbuffer_add_printf(s->out,
		    "OK HELD %" PRIu64 " %" PRIu64 " %s %" PRIu64 "\n",
		    res->ttl_ms, res->fence,
		    lock_mode_name(res->mode, res->limit), res->count);
	else
		evbuffer_add_printf(s->out, "OK HELD %" PRIu64 " %" PRIu64 "\n",
		    res->ttl_ms, res->fence);
}

static enum cmd_result
cmd_status(struct session *s, int argc, char **argv)
{
	struct lock_result res;
	int rc;

	rc = lock_status(&s->owner, argv[1], &res);
	return cmd_dispatch(s, rc, &res, cmd_status_reply);
}

static void
cmd_validate_reply(struct session *s, const struct lock_result *res)
{
	if (!cmd_reply_err(s, res))
		evbuffer_add_printf(
		    s->out, "OK %s\n", res->valid ? "VALID" : "STALE");
}

static enum cmd_result
cmd_validate(struct session *s, int argc, char **argv)
{
	struct lock_result res;
	const char *token;
	uint64_t fence;
	int rc;

	if (proto_parse_u64(argv[2], UINT64_MAX, &fence) != 0) {
		cmd_error(s, PERR_ARGS, "a fence is a plain decimal");
		return CMD_DONE;
	}
	if (cmd_token(s, argc, argv, &token) != 0)
		return CMD_DONE;
	rc = lock_validate(&s->owner, argv[1], fence, token, &res);
	return cmd_dispatch(s, rc, &res, cmd_validate_reply);
}

static enum cmd_result
cmd_locks(struct session *s, int argc, char **argv)
{
	const struct lock_hold *h;
	uint64_t now = mono_ms();

	lock_owner_settle(&s->owner); /* what ran out is told, not listed */
	for (h = lock_owner_hold(&s->owner, NULL); h != NULL;
	     h = lock_owner_hold(&s->owner, h))
		evbuffer_add_printf(s->out,
		    "LOCK %s %" PRIu64 " %" PRIu64 " %s%s\n", lock_hold_name(h),
		    h->fence, lock_hold_ttl_left(h, now),
		    lock_kind_name(h->kind), lock_hold_mode_word(h));
	evbuffer_add(s->out, "END\n", 4);
	return CMD_DONE;
}

/*
 * One holder's info as its broker stored it: "<fence> <mode> <broker>
 * <client> <since>", five words of printable bytes. Anything else (a lock
 * taken by an older broker stores none) shows as dashes.
 */
static bool
cmd_holder_info_ok(const char *info)
{
	int words = 0;

	for (const char *p = info; *p != '\0'; p++) {
		if ((unsigned char)*p < ' ' || (unsigned char)*p > '~')
			return false;
		if (*p != ' ' && (p == info || p[-1] == ' '))
			words++;
	}
	return words == 5 && info[0] >= '0' && info[0] <= '9';
}

/* The connection's address, for the AUTH back-off. */
static const char *
cmd_peer(const struct session *s)
{
	return s->owner.peer != NULL ? s->owner.peer : "-";
}

/* At most one "AUTH failed" line a second: a guesser must not flood the
 * log. */
static void
cmd_auth_log(const struct session *s)
{
	uint64_t now = mono_ms();

	if (now - cmds.auth_logged_ms < 1000 && cmds.auth_logged_ms != 0) {
		cmds.auth_unlogged++;
		return;
	}
	if (cmds.auth_unlogged > 0)
		log_info(
		    "client %" PRIu64
		    " [%s]: AUTH failed (and %u more since the last such line)",
		    s->id, cmd_peer(s), cmds.auth_unlogged);
	else
		log_info(
		    "client %" PRIu64 " [%s]: AUTH failed", s->id, cmd_peer(s));
	cmds.auth_logged_ms = now;
	cmds.auth_unlogged = 0;
}

/* Right secret: OK; wrong: ERR AUTH, and the connection closes. The
 * admin secret authenticates too, and allows REVOKE. */
static enum cmd_result
cmd_auth_judge(struct session *s, const char *secret)
{
	bool admin =
	    cmds.admin[0] != '\0' && util_secret_equal(secret, cmds.admin);
	bool user =
	    cmds.secret[0] != '\0' && util_secret_equal(secret, cmds.secret);

	if (admin || user) {
		authwait_passed(cmd_peer(s), mono_ms());
		s->authed = true;
		s->admin = s->admin || admin;
		evbuffer_add(s->out, "OK\n", 3);
		return CMD_DONE;
	}
	cmd_auth_log(s);
	cmd_error(s, PERR_AUTH, "wrong secret");
	return CMD_CLOSE;
}

/* The slot of an AUTH held back came. */
static void
cmd_auth_later_cb(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;

	s->quit = cmd_auth_judge(s, s->auth_secret) == CMD_CLOSE;
	freezero_str(s->auth_secret);
	s->auth_secret = NULL;
	s->resume(s);
}

/* Unix ms as RFC 3339 UTC ("2026-11-25T06:07:11.123Z"): a person reads
 * it, and every language parses it; false if it is not a time. */
static bool
cmd_utc(const char *ms, char *out, size_t len)
{
	uint64_t v;
	time_t t;
	struct tm tm;

	if (proto_parse_u64(ms, UINT64_MAX, &v) != 0 ||
	    v / 1000 > (uint64_t)INT32_MAX * 8)
		return false;
	t = (time_t)(v / 1000);
	if (gmtime_r(&t, &tm) == NULL ||
	    strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm) == 0)
		return false;
	snprintf(out + strlen(out), len - strlen(out), ".%03uZ",
	    (unsigned)(v % 1000));
	return true;
}

/*
 * A WHO entry's broker field, [b, end), as WHO shows it: a broker is stored
 * as "<hostname>:<pid>:<random>" (two brokers may share a hostname and
 * pid), and the brokers that share a grant joined by ","; WHO shows each
 * as "<hostname>:<pid>".
 */
static void
cmd_who_brokers(struct evbuffer *out, const char *b, const char *end)
{
	while (b < end) {
		const char *next = memchr(b, ',', (size_t)(end - b));
		const char *e = next != NULL ? next : end;
		const char *c = memchr(b, ':', (size_t)(e - b));
		const char *r =
		    c != NULL ? memchr(c + 1, ':', (size_t)(e - c - 1)) : NULL;

		evbuffer_add(out, b, (size_t)((r != NULL ? r : e) - b));
		if (next == NULL)
			break;
		evbuffer_add(out, ",", 1);
		b = next + 1;
	}
}

/* One HOLDER line from "<fence> <mode> <broker> <client> <since>" (sp: its
 * first space), the grant's Unix ms as UTC. */
static void
cmd_who_holder(
    struct session *s, const char *info, const char *sp, uint64_t pttl)
{
	const char *mode = sp + 1, *broker = strchr(mode, ' ') + 1;
	const char *rest = strchr(broker, ' ');
	const char *since = strrchr(rest, ' ') + 1;
	char utc[40];

	if (!cmd_utc(since, utc, sizeof utc))
		snprintf(utc, sizeof utc, "%s", since);
	evbuffer_add_printf(s->out, "HOLDER %.*s %" PRIu64 " %.*s",
	    (int)(sp - info), info, pttl, (int)(broker - mode), mode);
	cmd_who_brokers(s->out, broker, rest);
	evbuffer_add_printf(
	    s->out, "%.*s %s\n", (int)(since - 1 - rest), rest, utc);
}

static void
cmd_who_reply(struct session *s, const struct lock_result *res)
{
	const char *info, *sp;

	if (cmd_reply_err(s, res))
		return;
	for (size_t i = 0; i < res->nholders; i++) {
		info = res->holders[i].info;
		if (!cmd_holder_info_ok(info) ||
		    (sp = strchr(info, ' ')) == NULL) {
			evbuffer_add_printf(s->out,
			    "HOLDER - %" PRIu64 " - - - -\n",
			    res->holders[i].pttl);
			continue;
		}
		cmd_who_holder(s, info, sp, res->holders[i].pttl);
	}
	evbuffer_add(s->out, "END\n", 4);
}

static enum cmd_result
cmd_who(struct session *s, int argc, char **argv)
{
	struct lock_result res;
	int rc;

	rc = lock_who(&s->owner, argv[1], &res);
	return cmd_dispatch(s, rc, &res, cmd_who_reply);
}

static void
cmd_revoke_reply(struct session *s, const struct lock_result *res)
{
	if (!cmd_reply_err(s, res))
		evbuffer_add_printf(s->out, "OK %" PRIu64 "\n", res->count);
}

/* Only a connection that sent AUTH with auth.admin_secret may. */
static enum cmd_result
cmd_revoke(struct session *s, int argc, char **argv)
{
	struct lock_result res;
	int rc;

	if (cmds.admin[0] == '\0') {
		cmd_error(s, PERR_NOAUTH,
		    "REVOKE is off: auth.admin_secret is not set");
		return CMD_DONE;
	}
	if (!s->admin) {
		cmd_error(
		    s, PERR_NOAUTH, "REVOKE needs AUTH with auth.admin_secret");
		return CMD_DONE;
	}
	log_info("client %" PRIu64 ": REVOKE %s", s->id, argv[1]);
	rc = lock_revoke(&s->owner, argv[1], &res);
	return cmd_dispatch(s, rc, &res, cmd_revoke_reply);
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

/*
 * A wrong secret closes the connection: no guessing on one socket; and a
 * peer that sent wrong ones lately has its next AUTH judged only in its
 * slot (authwait), however many connections it opens. Without either
 * secret, AUTH is a no-op that says OK.
 */
static enum cmd_result
cmd_auth(struct session *s, int argc, char **argv)
{
	uint64_t now = mono_ms(), slot;
	struct timeval tv;

	if (cmds.secret[0] == '\0' && cmds.admin[0] == '\0') {
		s->authed = true;
		evbuffer_add(s->out, "OK\n", 3);
		return CMD_DONE;
	}
	slot = authwait_slot(cmd_peer(s), now);
	if (slot <= now || cmds.base == NULL)
		return cmd_auth_judge(s, argv[1]);
	/* Its peer sent wrong secrets lately: judged in its slot. */
	s->auth_secret = xstrdup(argv[1]);
	if (s->auth_ev == NULL &&
	    (s->auth_ev = evtimer_new(cmds.base, cmd_auth_later_cb, s)) == NULL)
		fatalx("cmd: evtimer_new failed");
	tv = util_timeval(slot - now);
	evtimer_add(s->auth_ev, &tv);
	return CMD_ASYNC;
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
	s->authed = cmds.secret[0] == '\0';
	lock_owner_init(&s->owner, id, &cmd_owner_ops, peer);
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
}

/* A secret in force: its file wins over its inline value. */
static char *
cmd_secret(const char *inline_value, const char *file, const char *key)
{
	char *secret;

	if (file[0] == '\0')
		return xstrdup(inline_value);
	if ((secret = util_read_secret(file)) == NULL)
		log_warn("%s %s", key, file);
	return secret;
}

/* Both secrets, or neither (and *secret, *admin untouched). */
static bool
cmd_secrets(const struct config *cf, char **secret, char **admin)
{
	char *s, *a;

	if ((s = cmd_secret(cf->auth.secret, cf->auth.secret_file,
		 "auth.secret_file")) == NULL)
		return false;
	if ((a = cmd_secret(cf->auth.admin_secret, cf->auth.admin_secret_file,
		 "auth.admin_secret_file")) == NULL) {
		freezero_str(s);
		return false;
	}
	if (a[0] != '\0' && strcmp(a, s) == 0) {
		log_warnx("auth.admin_secret must differ from auth.secret");
		freezero_str(s);
		freezero_str(a);
		return false;
	}
	*secret = s;
	*admin = a;
	return true;
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
	if (!cmd_secrets(cf, &cmds.secret, &cmds.admin))
		fatalx("cannot read the AUTH secrets");
}

/* New secrets apply to AUTHs from now on. */
void
cmd_reload(void)
{
	char *secret, *admin;

	if (!cmd_secrets(cmds.cf, &secret, &admin)) {
		log_warnx("reload: keeping the old AUTH secrets");
		return;
	}
	freezero_str(cmds.secret);
	freezero_str(cmds.admin);
	cmds.secret = secret;
	cmds.admin = admin;
}

void
cmd_shutdown(void)
{
	freezero_str(cmds.secret);
	freezero_str(cmds.admin);
	cmds.secret = NULL;
	cmds.admin = NULL;
}

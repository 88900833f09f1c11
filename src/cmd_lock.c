/*
 * cmd_lock: the handlers of the commands on locks (ACQUIRE and FILL,
 * RELEASE, EXTEND, STATUS, VALIDATE, WHO, REVOKE, LOCKS) and the
 * functions that format their answers. Each parses its own options
 * through cmd.c, asks one entry point of lock.h and hands the answer to
 * cmd_dispatch; it calls nothing else but proto and log.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>

#include "cmd.h"
#include "cmd_int.h"
#include "config.h"
#include "identity.h"
#include "log.h"
#include "proto.h"

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

enum cmd_result
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

enum cmd_result
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

enum cmd_result
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

enum cmd_result
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

enum cmd_result
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

enum cmd_result
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

enum cmd_result
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

/*
 * Only an identity with the right revoke on the name may (cmd_permitted
 * checked a named identity's). The two secrets of before keep their
 * answers: ERR NOAUTH when nobody may, or when this connection is not
 * the admin.
 */
enum cmd_result
cmd_revoke(struct session *s, int argc, char **argv)
{
	struct lock_result res;
	int rc;

	if (!ident_any_right(CONFIG_RIGHT_REVOKE)) {
		cmd_error(s, PERR_NOAUTH,
		    "REVOKE is off: auth.admin_secret is not set");
		return CMD_DONE;
	}
	if (!ident_allows(s->ident, CONFIG_RIGHT_REVOKE, argv[1])) {
		cmd_error(
		    s, PERR_NOAUTH, "REVOKE needs AUTH with auth.admin_secret");
		return CMD_DONE;
	}
	log_info("client %" PRIu64 " [%s]: REVOKE %s as %s", s->id,
	    s->owner.peer != NULL ? s->owner.peer : "-", argv[1],
	    s->ident->name);
	rc = lock_revoke(&s->owner, argv[1], &res);
	return cmd_dispatch(s, rc, &res, cmd_revoke_reply);
}

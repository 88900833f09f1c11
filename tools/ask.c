/*
 * ask: one request and its reply, as both lockctl.c's subcommands and
 * run.c's held command need them: an ACQUIRE (or FILL) until granted, the
 * next reply past EVENT lines, and the exit code for an unwanted reply.
 */
#include <err.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lockctl.h"

/*
 * Without --wait an ACQUIRE waits a day at a time and is sent again after a
 * TIMEOUT: "until granted" whatever the broker's locks.default_wait_ms.
 */
#define ASK_WAIT_CHUNK_MS 86400000

bool ask_have_secret;

/* The exit code for a reply that is not the one hoped for. */
int
ask_err_exit(const char *line)
{
	static const struct {
		const char *prefix;
		int code;
	} map[] = {
		{ "ERR UNAVAILABLE ", LC_EXIT_UNAVAILABLE },
		{ "ERR SHUTDOWN ", LC_EXIT_UNAVAILABLE },
		{ "ERR NOTHELD ", LC_EXIT_NOTHELD },
		{ "ERR AUTH ", LC_EXIT_AUTH },
		{ "ERR NOAUTH ", LC_EXIT_AUTH },
	};

	if (strncmp(line, "ERR ", 4) != 0) {
		warnx("unexpected reply from the broker: %s", line);
		return LC_EXIT_BROKER;
	}
	warnx("broker: %s", line);
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strncmp(line, map[i].prefix, strlen(map[i].prefix)) == 0) {
			if (map[i].code == LC_EXIT_AUTH && !ask_have_secret)
				warnx(
				    "give the secret with -a FILE or $LOCKBROKER_SECRET");
			return map[i].code;
		}
	return LC_EXIT_BROKER;
}

/*
 * The reply to the request just sent, skipping EVENT lines (which may come
 * before any reply); 0, or the exit code when the broker did not answer.
 */
int
ask_reply(struct conn *c, int64_t timeout_ms, char **line)
{
	for (;;) {
		switch (conn_readline(c, timeout_ms, line)) {
		case CONN_OK:
			if (strncmp(*line, "EVENT ", 6) != 0)
				return 0;
			warnx("broker: %s", *line);
			continue;
		case CONN_EOF:
			warnx("the broker closed the connection");
			break;
		case CONN_TIMEOUT:
			warnx("no reply from the broker in %" PRId64 " ms",
			    timeout_ms);
			break;
		case CONN_ERROR:
			break;
		}
		return LC_EXIT_UNAVAILABLE;
	}
}

/* "OK <fence> <ttl_ms> <token>" into g; anything else is an error. */
static int
ask_grant(char *line, struct grant *g)
{
	char copy[CONN_LINE_MAX + 1], *argv[4];
	size_t len = strlen(line);

	memcpy(copy, line, len + 1);
	if (proto_split(copy, len, argv, 4) != 4 ||
	    strcmp(argv[0], "OK") != 0 ||
	    proto_parse_u64(argv[1], UINT64_MAX, &g->fence) != 0 ||
	    proto_parse_u64(argv[2], INT64_MAX, &g->ttl_ms) != 0 ||
	    !proto_valid_token(argv[3]))
		return ask_err_exit(line);
	strcpy(g->token, argv[3]);
	return 0;
}

/* The mode words of an ACQUIRE: " SHARED", " LIMIT <n>", or none. */
static void
ask_mode_words(const struct acquire_req *r, char *buf, size_t size)
{
	if (r->shared)
		snprintf(buf, size, " SHARED");
	else if (r->limit > 0)
		snprintf(buf, size, " LIMIT %" PRIu64, r->limit);
	else
		buf[0] = '\0';
}

/* A wait in seconds as people write it: "1.5 s", "2 s", "0.25 s". */
static void
ask_fmt_secs(int64_t ms, char *buf, size_t size)
{
	int n = snprintf(
	    buf, size, "%" PRId64 ".%03d", ms / 1000, (int)(ms % 1000));

	while (n > 0 && buf[n - 1] == '0')
		buf[--n] = '\0';
	if (n > 0 && buf[n - 1] == '.')
		buf[--n] = '\0';
	snprintf(buf + n, size - (size_t)n, " s");
}

/*
 * A TIMEOUT: busy, or Redis away. The broker answers TIMEOUT to a wait
 * that ran out while Redis could not be reached as well (protocol §4,
 * Waiting), so a STATUS tells the two apart: ERR UNAVAILABLE there means
 * nobody could have been granted the lock, and cron must see an outage.
 */
static int
ask_busy(struct conn *c, const struct acquire_req *r)
{
	char secs[48], *line;
	int rc;

	if (conn_send(c, "STATUS %s", r->name) != 0)
		return LC_EXIT_UNAVAILABLE;
	if ((rc = ask_reply(c, LC_IO_TIMEOUT_MS, &line)) != 0)
		return rc;
	if (strncmp(line, "ERR UNAVAILABLE ", 16) == 0 ||
	    strncmp(line, "ERR SHUTDOWN ", 13) == 0) {
		warnx("%s: lock not obtained: the broker cannot reach Redis",
		    r->name);
		return ask_err_exit(line);
	}
	if (r->quiet)
		return LC_BUSY;
	if (r->wait_ms == 0) {
		warnx("%s: lock busy (tried once)", r->name);
	} else {
		ask_fmt_secs(r->wait_ms, secs, sizeof(secs));
		warnx("%s: lock busy (waited %s)", r->name, secs);
	}
	return LC_BUSY;
}

/*
 * ACQUIRE (or FILL) until granted, LC_BUSY, or an error's exit code. A
 * FILL may also be answered DONE: LC_FILL_DONE.
 */
int
ask_acquire(struct conn *c, const struct acquire_req *r, struct grant *g)
{
	int64_t wait = r->wait_ms < 0 ? ASK_WAIT_CHUNK_MS : r->wait_ms;
	char ttl[32] = "", mode[32];
	char *line;
	int rc;

	if (r->ttl_ms > 0)
		snprintf(ttl, sizeof(ttl), " TTL %" PRIu64, r->ttl_ms);
	ask_mode_words(r, mode, sizeof(mode));
	for (;;) {
		if (conn_send(c, "%s %s%s WAIT %" PRId64 "%s%s%s%s",
			r->fill ? "FILL" : "ACQUIRE", r->name, ttl, wait,
			r->keep ? " KEEP" : "", r->token ? " TOKEN " : "",
			r->token ? r->token : "", mode) != 0)
			return LC_EXIT_UNAVAILABLE;
		/* The broker answers TIMEOUT itself when the wait ends. */
		if ((rc = ask_reply(c, wait + LC_IO_TIMEOUT_MS, &line)) != 0)
			return rc;
		if (r->fill && strcmp(line, "DONE") == 0)
			return LC_FILL_DONE;
		if (strcmp(line, "TIMEOUT") != 0)
			return ask_grant(line, g);
		if (r->wait_ms >= 0)
			return ask_busy(c, r);
	}
}

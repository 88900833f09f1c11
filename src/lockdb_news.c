/*
 * lockdb_news: what the channels say (lib/tell.lua publishes it), parsed
 * into struct lockdb_news for the engine.
 */
#include <ctype.h>
#include <stdint.h>
#include <string.h>

#include "lockdb.h"
#include "lockdb_int.h"
#include "proto.h"
#include "redisc.h"

/*
 * News of a name, on this broker's own channel or, when which brokers it
 * concerns is unknown, on the release channel every broker hears
 * (lib/tell.lua): "<name>" (its waiters may try), "<name> revoked
 * <fence>", or "<name> released|shortened <fence> <broker>" (names hold
 * no space). A release or shortening this broker made is only a release
 * for its waiters: it dealt with its own holds when it made it.
 */
static bool
lockdb_parse_news(char **w, int n, struct lockdb_news *news)
{
	news->name = w[0];
	news->kind = LDB_NEWS_RELEASED;
	if (n == 1)
		return true;
	if (n == 2 || n > 4 ||
	    proto_parse_u64(w[2], UINT64_MAX, &news->fence) != 0)
		return false;
	if (n == 3 && strcmp(w[1], "revoked") == 0)
		news->kind = LDB_NEWS_REVOKED;
	else if (n == 4 &&
	    (strcmp(w[1], "released") == 0 || strcmp(w[1], "shortened") == 0))
		news->kind = strcmp(w[3], lockdb.broker) != 0
		    ? LDB_NEWS_GONE
		    : LDB_NEWS_RELEASED;
	else
		return false;
	return true;
}

/* On this broker's channel only: "<name> <n> <fence> <token> <ttl>", a
 * release handed name to ticket n for ttl ms (an older broker's says no
 * ttl). */
static bool
lockdb_parse_handed(char **w, int n, struct lockdb_news *news)
{
	if ((n != 4 && n != 5) ||
	    proto_parse_u64(w[1], UINT64_MAX, &news->ticket) != 0 ||
	    proto_parse_u64(w[2], UINT64_MAX, &news->fence) != 0 ||
	    !proto_valid_token(w[3]) ||
	    (n == 5 &&
		(proto_parse_u64(w[4], UINT64_MAX, &news->ttl_ms) != 0 ||
		    news->ttl_ms == 0)))
		return false;
	/* The lease in Redis has the margin lockdb_init says; the broker
	 * trusts the rest. */
	if (news->ttl_ms != 0)
		news->ttl_ms = news->ttl_ms > lockdb.step_ms + 1
		    ? news->ttl_ms - lockdb.step_ms
		    : 1;
	news->kind = LDB_NEWS_HANDED;
	news->name = w[0];
	news->token = w[3];
	return true;
}

static void
lockdb_message_cb(const char *channel, const char *msg, size_t len, void *arg)
{
	struct lockdb_news news = { LDB_NEWS_MISSED, NULL, 0, 0, NULL, 0 };
	char buf[PROTO_NAME_MAX + 160], *w[6];
	int n;

	if (msg != NULL) {
		if (len >= sizeof buf)
			return;
		memcpy(buf, msg, len);
		buf[len] = '\0';
		n = proto_split(buf, len, w, 6);
		if (n < 1 || !proto_valid_name(w[0]))
			return;
		/* A hand-over's second word is a ticket's number. */
		if (n >= 4 && strcmp(channel, lockdb.mine) == 0 &&
			    isdigit((unsigned char)w[1][0])
			? !lockdb_parse_handed(w, n, &news)
			: !lockdb_parse_news(w, n, &news))
			return;
	}
	lockdb.news(&news);
}

void
lockdb_subscribe(lockdb_news_fn *fn)
{
	lockdb.news = fn;
	redisc_subscribe(lockdb.channel, lockdb.mine, lockdb_message_cb, NULL);
}

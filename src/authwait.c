/*
 * authwait: a small table of peers that sent wrong secrets lately. It is
 * bounded: when full, the peer heard from longest ago makes room.
 */
#include <stdio.h>
#include <string.h>

#include "authwait.h"

#define AUTHWAIT_PEERS 512

struct authwait_peer {
	char host[64];	  /* the address without its port; "" unused */
	unsigned fails;	  /* AUTHs since the last right one */
	uint64_t next_ms; /* its next AUTH is judged no sooner */
	uint64_t seen_ms;
};

static struct authwait_peer peers[AUTHWAIT_PEERS];

/* "1.2.3.4:5" -> "1.2.3.4", "[::1]:5" -> "[::1]", "unix" -> "unix". */
static void
authwait_host(const char *peer, char *host, size_t len)
{
	const char *colon = strrchr(peer, ':');
	size_t n = strlen(peer);

	if (colon != NULL && (peer[0] == '[' || strchr(peer, ':') == colon))
		n = (size_t)(colon - peer);
	snprintf(host, len, "%.*s", (int)n, peer);
}

/* peer's entry, made (in the oldest slot) if it has none. */
static struct authwait_peer *
authwait_find(const char *peer, uint64_t now_ms)
{
	struct authwait_peer *p, *old = &peers[0];
	char host[64];

	authwait_host(peer, host, sizeof host);
	for (p = peers; p < peers + AUTHWAIT_PEERS; p++) {
		if (p->host[0] != '\0' && strcmp(p->host, host) == 0)
			break;
		if (p->seen_ms < old->seen_ms)
			old = p;
	}
	if (p == peers + AUTHWAIT_PEERS) {
		p = old;
		memset(p, 0, sizeof *p);
		snprintf(p->host, sizeof p->host, "%s", host);
	}
	if (now_ms - p->seen_ms > AUTHWAIT_FORGET_MS)
		p->fails = 0;
	p->seen_ms = now_ms;
	return p;
}

static uint64_t
authwait_delay(unsigned fails)
{
	uint64_t d = AUTHWAIT_MIN_MS;

	if (fails == 0)
		return 0;
	while (--fails > 0 && d < AUTHWAIT_MAX_MS)
		d *= 2;
	return d < AUTHWAIT_MAX_MS ? d : AUTHWAIT_MAX_MS;
}

uint64_t
authwait_slot(const char *peer, uint64_t now_ms)
{
	struct authwait_peer *p = authwait_find(peer, now_ms);
	uint64_t slot = p->next_ms > now_ms ? p->next_ms : now_ms;

	/* Each AUTH since the last right one pushes the next slot out
	 * further, whether judged yet or not: parallel guesses queue. */
	p->next_ms = slot + authwait_delay(++p->fails);
	return slot;
}

void
authwait_passed(const char *peer, uint64_t now_ms)
{
	struct authwait_peer *p = authwait_find(peer, now_ms);

	p->fails = 0;
	p->next_ms = now_ms;
}

void
authwait_reset(void)
{
	memset(peers, 0, sizeof peers);
}

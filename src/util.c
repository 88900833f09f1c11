/*
 * util: randomness and decimal strings, kept apart so the unit tests can
 * reach them; the clocks are in util_clock.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "util.h"
#include "xmalloc.h"

size_t
util_u64str(char *buf, uint64_t v)
{
	size_t n = 1;
	char *p;

	for (uint64_t t = v; t >= 10; t /= 10)
		n++;
	p = buf + n;
	*p = '\0';
	do {
		*--p = (char)('0' + v % 10);
		v /= 10;
	} while (v > 0);
	return n;
}

void
util_cat(char **p, char *end, const char *src)
{
	size_t room = (size_t)(end - *p), n = strlen(src);

	if (room == 0)
		return;
	if (n > room - 1)
		n = room - 1;
	memcpy(*p, src, n);
	*p += n;
	**p = '\0';
}

void
util_cat_u64(char **p, char *end, uint64_t v)
{
	char num[UTIL_U64_LEN];

	util_u64str(num, v);
	util_cat(p, end, num);
}

/* getrandom may return short for a large block, or fail with EINTR. */
static void
util_random_bytes(void *buf, size_t len)
{
	unsigned char *p = buf;

	while (len > 0) {
		ssize_t n = getrandom(p, len, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			abort();
		}
		p += n;
		len -= (size_t)n;
	}
}

/*
 * Random bytes come from a block of getrandom(2) output handed out a piece
 * at a time (one system call per 256 tokens); each piece is wiped as it
 * is used, so no token can be read back from the block afterwards.
 */
static void
util_random_draw(void *out, size_t len)
{
	static unsigned char pool[4096];
	static size_t left;

	if (left < len) {
		util_random_bytes(pool, sizeof pool);
		left = sizeof pool;
	}
	left -= len;
	memcpy(out, pool + left, len);
	explicit_bzero(pool + left, len);
}

void
util_random_token(char out[UTIL_TOKEN_HEXLEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char raw[UTIL_TOKEN_HEXLEN / 2];

	util_random_draw(raw, sizeof raw);
	for (size_t i = 0; i < sizeof raw; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 0xf];
	}
	explicit_bzero(raw, sizeof raw);
	out[UTIL_TOKEN_HEXLEN] = '\0';
}

uint64_t
util_random_range(uint64_t lo, uint64_t hi)
{
	uint64_t r;

	if (hi <= lo)
		return lo;
	util_random_draw(&r, sizeof r);
	return lo + r % (hi - lo + 1);
}

uint64_t
util_validity_end(uint64_t start_ms, uint64_t ttl_ms, double drift)
{
	uint64_t trusted = (uint64_t)((double)ttl_ms * (1.0 - drift));

	if (trusted <= 2)
		return start_ms;
	return start_ms + trusted - 2;
}

bool
util_secret_equal(const char *given, const char *secret)
{
	size_t glen = strlen(given), slen = strlen(secret);
	unsigned char diff = glen != slen || slen == 0;

	/* Always walk all of given; index the secret modulo its length. */
	for (size_t i = 0; i < glen && slen > 0; i++)
		diff |=
		    (unsigned char)given[i] ^ (unsigned char)secret[i % slen];
	return diff == 0;
}

char *
util_read_secret(const char *path)
{
	char buf[1024], *copy;
	FILE *f;
	int saved;

	if ((f = fopen(path, "re")) == NULL)
		return NULL;
	setvbuf(f, NULL, _IONBF, 0); /* no copy left in a stdio buffer */
	errno = 0;
	if (fgets(buf, sizeof buf, f) == NULL)
		buf[0] = '\0';
	saved = errno;
	fclose(f);
	buf[strcspn(buf, "\r\n")] = '\0';
	if (buf[0] == '\0') {
		explicit_bzero(buf, sizeof buf);
		errno = saved != 0 ? saved : ENODATA;
		return NULL;
	}
	/* The copy is the caller's to wipe (freezero_str); ours goes now. */
	copy = xstrdup(buf);
	explicit_bzero(buf, sizeof buf);
	return copy;
}

struct timeval
util_timeval(uint64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000),
		(suseconds_t)(ms % 1000) * 1000 };

	return tv;
}

bool
util_every(struct util_every *e, uint64_t now, uint64_t period_ms,
    unsigned *unsaid, uint64_t *ago_ms)
{
	if (e->said && now < e->said_ms + period_ms) {
		e->unsaid++;
		return false;
	}
	*unsaid = e->unsaid;
	*ago_ms = e->said ? now - e->said_ms : 0;
	e->said = true;
	e->said_ms = now;
	e->unsaid = 0;
	return true;
}

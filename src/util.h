/*
 * util: the monotonic clock (util_clock.c, which a test may replace with
 * a virtual one), random tokens and printf-free decimal strings (util.c).
 * Depends on nothing else.
 */
#ifndef LB_UTIL_H
#define LB_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

#define UTIL_TOKEN_HEXLEN 32

/* Milliseconds on CLOCK_MONOTONIC: every timer and lease decision uses it. */
uint64_t mono_ms(void);
uint64_t wall_ms(void);
/* The same clock in microseconds, for latency figures. */
uint64_t mono_us(void);

/* 128 random bits as 32 lowercase hex characters and a NUL (33 bytes). */
void util_random_token(char out[UTIL_TOKEN_HEXLEN + 1]);

/*
 * Strings built on the request path without printf: util_u64str writes v
 * in decimal and a NUL (UTIL_U64_LEN bytes at most) and returns its
 * length; util_cat copies src after *p, never past end - 1 (the last byte
 * stays for the NUL it writes), and moves *p past what it copied.
 */
#define UTIL_U64_LEN 21
size_t util_u64str(char *buf, uint64_t v);
void util_cat(char **p, char *end, const char *src);
void util_cat_u64(char **p, char *end, uint64_t v);

/* A random integer in [lo, hi], for jitter. */
uint64_t util_random_range(uint64_t lo, uint64_t hi);

/*
 * The end of a lease as the broker may trust it (docs/protocol.md §3,
 * Validity):
 * start + ttl * (1 - drift) - 2 ms, never before start.
 */
uint64_t util_validity_end(uint64_t start_ms, uint64_t ttl_ms, double drift);

/* ms as a timeval, for libevent's timers. */
struct timeval util_timeval(uint64_t ms);

/*
 * Compare a given secret with the real one in time that depends only on the
 * given one's length, never on how many leading bytes match.
 */
bool util_secret_equal(const char *given, const char *secret);

/*
 * A secret kept in a file: its first line without the newline, malloc'd
 * (wipe it with freezero_str). NULL with errno set if unreadable or empty.
 */
char *util_read_secret(const char *path);

/* A log line said at most once a period, the others counted. */
struct util_every {
	bool said;
	uint64_t said_ms;
	unsigned unsaid;
};

/*
 * Whether the line may be said at now: the first, or one period_ms after
 * the last said; if not, it is counted and false returned. On true,
 * *unsaid is how many were held back since the last one said and *ago_ms
 * how long ago that was (both 0 for the first).
 */
bool util_every(struct util_every *e, uint64_t now, uint64_t period_ms,
    unsigned *unsaid, uint64_t *ago_ms);

#endif

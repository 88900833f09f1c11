/*
 * lock_name: the name table, and giving memory back after a burst.
 */
#include <sys/queue.h>

#include <malloc.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "lock_name.h"
#include "lock_timer.h"
#include "log.h"
#include "util.h"
#include "xmalloc.h"

/* The table's least size, and how often memory is given back. */
#define LOCKNAME_BUCKETS 64
#define LOCKNAME_TRIM_S 10

LIST_HEAD(lock_bucket, lock_name);

static struct {
	struct lock_bucket *buckets;
	size_t nbuckets;
	size_t nnames;
	size_t nreqs;	/* requests alive, as lock_req last said */
	size_t peak;	/* nnames + nreqs at most since the last trim */
	unsigned walks; /* lockname_foreach running: the size stays */
	struct event *trim_ev;
} names;

/* FNV-1a: names are short and untrusted; this is only a table index. */
static size_t
lockname_hash(const char *s)
{
	uint64_t h = 14695981039346656037ULL;

	for (; *s != '\0'; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return (size_t)h;
}

static void
lockname_resize(size_t n)
{
	struct lock_bucket *b = xcalloc(n, sizeof *b);
	struct lock_name *ln;

	for (size_t i = 0; i < names.nbuckets; i++) {
		while ((ln = LIST_FIRST(&names.buckets[i])) != NULL) {
			LIST_REMOVE(ln, entry);
			LIST_INSERT_HEAD(
			    &b[lockname_hash(ln->name) % n], ln, entry);
		}
	}
	free(names.buckets);
	names.buckets = b;
	names.nbuckets = n;
}

/* The most names and requests alive at once since memory was last given
 * back. */
static void
lockname_busier(void)
{
	if (names.nnames + names.nreqs > names.peak)
		names.peak = names.nnames + names.nreqs;
}

struct lock_name *
lockname_find(const char *name)
{
	struct lock_name *ln;

	LIST_FOREACH (
	    ln, &names.buckets[lockname_hash(name) % names.nbuckets], entry)
		if (strcmp(ln->name, name) == 0)
			return ln;
	return NULL;
}

/* Find or make the entry for name, and take a reference on it. */
struct lock_name *
lockname_ref(const char *name)
{
	struct lock_name *ln = lockname_find(name);
	size_t len;

	if (ln == NULL) {
		len = strlen(name);
		ln = xcalloc(1, sizeof *ln + len + 1);
		memcpy(ln->name, name, len + 1);
		LIST_INIT(&ln->holds);
		TAILQ_INIT(&ln->waiters);
		LIST_INIT(&ln->asking);
		LIST_INSERT_HEAD(
		    &names.buckets[lockname_hash(name) % names.nbuckets], ln,
		    entry);
		if (++names.nnames > names.nbuckets && names.walks == 0)
			lockname_resize(names.nbuckets * 2);
		lockname_busier();
	}
	ln->refs++;
	return ln;
}

void
lockname_pin(struct lock_name *ln)
{
	ln->refs++;
}

void
lockname_unref(struct lock_name *ln)
{
	if (--ln->refs > 0)
		return;
	LIST_REMOVE(ln, entry);
	names.nnames--;
	if (ln->retry_ev != NULL)
		event_free(ln->retry_ev);
	free(ln);
	/* A burst of names is over: a table a quarter the size. */
	if (names.nbuckets > LOCKNAME_BUCKETS &&
	    names.nnames < names.nbuckets / 8 && names.walks == 0)
		lockname_resize(names.nbuckets / 4 > LOCKNAME_BUCKETS
			? names.nbuckets / 4
			: LOCKNAME_BUCKETS);
}

void
lockname_foreach(void (*fn)(struct lock_name *, void *), void *arg)
{
	struct lock_name *ln, *next;

	names.walks++;
	for (size_t i = 0; i < names.nbuckets; i++) {
		for (ln = LIST_FIRST(&names.buckets[i]); ln != NULL;
		     ln = next) {
			ln->refs++;
			fn(ln, arg);
			next = LIST_NEXT(ln, entry);
			lockname_unref(ln);
		}
	}
	names.walks--;
}

size_t
lockname_buckets(void)
{
	return names.nbuckets;
}

void
lockname_reqs(size_t n)
{
	names.nreqs = n;
	lockname_busier();
}

/*
 * After a burst (tens of thousands of holds or waiters) the allocator
 * keeps the freed memory; give it back to the system once the engine holds
 * less than half of what it did, checked every LOCKNAME_TRIM_S.
 */
static void
lockname_trim_cb(evutil_socket_t fd, short what, void *arg)
{
	size_t now = names.nnames + names.nreqs;

	locktimer_add(names.trim_ev, LOCKNAME_TRIM_S * 1000);
	if (names.peak < 4096 || now > names.peak / 2)
		return;
	malloc_trim(0);
	names.peak = now;
}

void
lockname_init(struct event_base *base)
{
	memset(&names, 0, sizeof names);
	names.nbuckets = LOCKNAME_BUCKETS;
	names.buckets = xcalloc(names.nbuckets, sizeof *names.buckets);
	names.trim_ev = locktimer_new(base, 0, lockname_trim_cb, NULL);
	locktimer_add(names.trim_ev, LOCKNAME_TRIM_S * 1000);
}

void
lockname_shutdown(void)
{
	free(names.buckets);
	names.buckets = NULL;
	if (names.trim_ev != NULL)
		event_free(names.trim_ev);
	names.trim_ev = NULL;
}

/*
 * test_engine: the lock engine (lbengine) driven without Redis, through
 * the scripted stand-in fake_lockdb. Each test makes requests as clients
 * would, answers what the engine asks of lockdb (in order, late, or
 * never), moves the virtual clock of fake_clock on so the engine's timers
 * fire (nothing waits in real time), and checks what the owners were told
 * and what the engine asked, in order.
 *
 * What owners are told is kept as text, one entry per done() or lost():
 * "1 OK fence=7 ttl=10000", "2 TIMEOUT", "1 LOST a 7 expired".
 */
#include <check.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "config.h"
#include "fake_clock.h"
#include "fake_lockdb.h"
#include "lock.h"
#include "lock_name.h"
#include "log.h"
#include "stats.h"
#include "util.h"

#define NOWNERS 5
#define WAIT_MAX_MS 5000 /* virtual: a bound on a wait that never ends */

static struct config cf;
static struct event_base *base;

/* A client as the engine sees it, and what it heard last. */
struct towner {
	struct lock_owner o; /* first: the engine's pointer is ours */
	char token[PROTO_TOKEN_MAX + 1];
	struct lock_result last;
};
static struct towner owners[NOWNERS];
#define O(i) (&owners[(i)-1].o)

static char told[64][192];
static unsigned ntold;

static void told_add(const char *fmt, ...) LB_PRINTF(1, 2);

static void
told_add(const char *fmt, ...)
{
	va_list ap;

	ck_assert_uint_lt(ntold, 64);
	va_start(ap, fmt);
	vsnprintf(told[ntold++], sizeof told[0], fmt, ap);
	va_end(ap);
}

/* Everything told since the last call, "; "-separated; then forgotten. */
static const char *
told_take(void)
{
	static char buf[64 * 194];

	buf[0] = '\0';
	for (unsigned i = 0; i < ntold; i++) {
		if (i > 0)
			strcat(buf, "; ");
		strcat(buf, told[i]);
	}
	ntold = 0;
	return buf;
}

/* A result as one line of text (the parts a reply would show). */
static void
result_text(char *s, size_t len, const struct lock_result *res)
{
	static const char *const st[] = { [LOCK_OK] = "OK",
		[LOCK_TIMEOUT] = "TIMEOUT",
		[LOCK_CANCELLED] = "CANCELLED",
		[LOCK_DONE] = "DONE",
		[LOCK_FREE] = "FREE",
		[LOCK_HELD] = "HELD",
		[LOCK_ERR] = "ERR" };
	size_t n;

	n = (size_t)snprintf(s, len, "%s", st[res->status]);
	if (res->status == LOCK_ERR) {
		snprintf(s + n, len - n, " %s %s", proto_err_name(res->err),
		    res->errtext);
		return;
	}
	if (res->fence != 0)
		n += (size_t)snprintf(
		    s + n, len - n, " fence=%" PRIu64, res->fence);
	if (res->ttl_ms != 0)
		n += (size_t)snprintf(
		    s + n, len - n, " ttl=%" PRIu64, res->ttl_ms);
	if (res->status == LOCK_HELD)
		n += (size_t)snprintf(s + n, len - n, " %s",
		    lock_mode_name(res->mode, res->limit));
	if (res->valid)
		n += (size_t)snprintf(s + n, len - n, " valid");
	if (res->count != 0)
		n += (size_t)snprintf(
		    s + n, len - n, " count=%" PRIu64, res->count);
	for (size_t i = 0; i < res->nholders && n < len; i++)
		n += (size_t)snprintf(s + n, len - n, " [%" PRIu64 " %s]",
		    res->holders[i].pttl, res->holders[i].info);
}

static void
owner_done(struct lock_owner *o, const struct lock_result *res)
{
	struct towner *t = (struct towner *)o;
	char s[160];

	ck_assert_ptr_null(o->pending); /* answered: nothing in flight */
	result_text(s, sizeof s, res);
	told_add("%" PRIu64 " %s", o->id, s);
	t->last = *res;
	t->last.errtext = NULL;
	t->last.holders = NULL;
	if (res->token != NULL)
		snprintf(t->token, sizeof t->token, "%s", res->token);
}

static void
owner_lost(
    struct lock_owner *o, const char *name, uint64_t fence, const char *reason)
{
	told_add(
	    "%" PRIu64 " LOST %s %" PRIu64 " %s", o->id, name, fence, reason);
}

static const struct lock_owner_ops ops = { owner_done, owner_lost };

/* An immediate answer (-1) is told like a later one, so tests read the
 * same either way. */
static int
answered(struct lock_owner *o, int rc, const struct lock_result *res)
{
	if (rc == -1)
		owner_done(o, res);
	return rc;
}

static struct lock_acquire_args
args(uint64_t ttl_ms, int64_t wait_ms)
{
	struct lock_acquire_args a = { .ttl_ms = ttl_ms, .wait_ms = wait_ms };

	return a;
}

static int
acquire(int i, const char *name, const struct lock_acquire_args *a)
{
	struct lock_result res;

	return answered(O(i), lock_acquire(O(i), name, a, &res), &res);
}

static int
release(int i, const char *name, const char *token)
{
	struct lock_result res;

	return answered(O(i), lock_release(O(i), name, token, &res), &res);
}

static int
extend(int i, const char *name, uint64_t ttl_ms, const char *token)
{
	struct lock_result res;

	return answered(
	    O(i), lock_extend(O(i), name, ttl_ms, token, &res), &res);
}

/* The next call lockdb got: op on name. */
static struct fake_call *
expect(enum fake_op op, const char *name)
{
	struct fake_call *c = fake_next();

	ck_assert_msg(
	    c != NULL, "no lockdb call; wanted %s %s", fake_op_name(op), name);
	ck_assert_msg(c->op == op && strcmp(c->name, name) == 0,
	    "lockdb got %s %s; wanted %s %s", fake_op_name(c->op), c->name,
	    fake_op_name(op), name);
	return c;
}

/* The pending call of op on name, wherever it is in the list. */
static struct fake_call *
expect_find(enum fake_op op, const char *name)
{
	struct fake_call *c = fake_find(op, name);

	ck_assert_msg(c != NULL, "no pending %s %s", fake_op_name(op), name);
	return c;
}

/* Let ms of virtual time pass: every timer due by then fires, in order. */
static void
run_ms(unsigned ms)
{
	fakeclock_advance(ms);
}

/* Run the loop until lockdb has n calls pending (false: it never did). */
static bool
wait_calls(unsigned n)
{
	uint64_t end = mono_ms() + WAIT_MAX_MS;

	while (fake_count() < n && mono_ms() < end)
		run_ms(1);
	return fake_count() >= n;
}

/* Run the loop until n things were told (not yet taken). */
static bool
wait_told(unsigned n)
{
	uint64_t end = mono_ms() + WAIT_MAX_MS;

	while (ntold < n && mono_ms() < end)
		run_ms(1);
	return ntold >= n;
}

/* o's hold of name, or NULL. */
static const struct lock_hold *
hold_of(int i, const char *name)
{
	const struct lock_hold *h = NULL;

	while ((h = lock_owner_hold(O(i), h)) != NULL)
		if (strcmp(lock_hold_name(h), name) == 0)
			return h;
	return NULL;
}

static uint64_t
ttl_left(int i, const char *name)
{
	const struct lock_hold *h = hold_of(i, name);

	ck_assert_ptr_nonnull(h);
	return lock_hold_ttl_left(h, mono_ms());
}

/* Owner i asks for name and is granted fence at once: its token. */
static const char *
hold(int i, const char *name, const struct lock_acquire_args *a, uint64_t fence)
{
	ck_assert_int_eq(acquire(i, name, a), 0);
	fake_grant(expect(FAKE_ACQUIRE, name), fence);
	ck_assert_ptr_nonnull(hold_of(i, name));
	ntold = 0;
	return owners[i - 1].token;
}

/* Owner i asks for name and is refused, the holder's lease far off: it
 * waits, its place taken. */
static void
waits(int i, const char *name, const struct lock_acquire_args *a)
{
	ck_assert_int_eq(acquire(i, name, a), 0);
	fake_refuse(expect(FAKE_ACQUIRE, name), 100000, 1);
}

static void
count_name(struct lock_name *ln, void *arg)
{
	(*(unsigned *)arg)++;
}

static unsigned
names_alive(void)
{
	unsigned n = 0;

	lockname_foreach(count_name, &n);
	return n;
}

static void
setup(void)
{
	log_init(LOG_LVL_ERROR, false);
	fake_reset();
	config_defaults(&cf);
	/* Small values, so the timers the tests wait for come soon. */
	cf.locks.retry_min_ms = 5;
	cf.locks.retry_max_ms = 40;
	cf.redis.command_timeout_ms = 50;
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	fakeclock_reset(base);
	lock_init(base, &cf);
	memset(owners, 0, sizeof owners);
	for (int i = 1; i <= NOWNERS; i++)
		lock_owner_init(O(i), (uint64_t)i, &ops, "test");
	ntold = 0;
}

/* As the daemon stops: owners go, Redis goes away (every call answered
 * UNAVAILABLE), and then nothing may be left of any name. */
static void
teardown(void)
{
	lock_stop();
	for (int i = 1; i <= NOWNERS; i++)
		lock_owner_gone(O(i), false);
	fake_set_up(false);
	fake_drain(LDB_UNAVAILABLE);
	ck_assert_uint_eq(names_alive(), 0);
	lock_shutdown();
	fake_drop();
	event_base_free(base);
	config_free(&cf);
}

/* -- ACQUIRE and RELEASE, uncontended -- */

static const struct {
	uint64_t ttl_ms;
	bool keep;
	uint64_t lease;
	enum lock_kind kind;
	const char *kind_name;
} kinds[] = {
	{ 0, false, 10000, LOCK_SESSION, "SESSION" },
	{ 500, false, 500, LOCK_FIXED, "FIXED" },
	{ 500, true, 500, LOCK_KEEP, "KEEP" },
};

START_TEST(test_acquire_release)
{
	struct lock_acquire_args a = args(kinds[_i].ttl_ms, -1);
	const struct lock_hold *h;
	struct fake_call *c;
	char tok[PROTO_TOKEN_MAX + 1], want[64], info[64];

	a.keep = kinds[_i].keep;
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	ck_assert_ptr_nonnull(O(1)->pending);
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert_uint_eq(fake_count(), 1);
	ck_assert_uint_eq(c->ask.ttl_ms, kinds[_i].lease);
	ck_assert_uint_eq(c->ask.mark_ms, config_mark_ms(&cf));
	ck_assert_int_eq(c->ask.mode, LDB_EXCLUSIVE);
	ck_assert_uint_eq(c->ask.watch, 0);
	ck_assert(!c->ask.clear_writer);
	ck_assert_uint_eq(strlen(c->ask.token), UTIL_TOKEN_HEXLEN);
	/* WHO's entry: mode, this broker, client id@peer, then the time. */
	snprintf(info, sizeof info, "EXCLUSIVE %s 1@test ", fake_broker());
	ck_assert_msg(strncmp(c->ask.info, info, strlen(info)) == 0,
	    "info '%s'", c->ask.info);
	snprintf(tok, sizeof tok, "%s", c->ask.token);
	fake_grant(c, 7);
	snprintf(
	    want, sizeof want, "1 OK fence=7 ttl=%" PRIu64, kinds[_i].lease);
	ck_assert_str_eq(told_take(), want);
	ck_assert_str_eq(owners[0].token, tok);
	ck_assert_ptr_null(O(1)->pending);

	h = hold_of(1, "a");
	ck_assert_ptr_nonnull(h);
	ck_assert_ptr_eq(lock_owner_hold(O(1), NULL), h);
	ck_assert_ptr_null(lock_owner_hold(O(1), h));
	ck_assert_int_eq(h->kind, kinds[_i].kind);
	ck_assert_str_eq(lock_kind_name(h->kind), kinds[_i].kind_name);
	ck_assert_uint_eq(h->fence, 7);
	ck_assert_str_eq(lock_hold_mode_word(h), "");
	ck_assert_uint_gt(ttl_left(1, "a"), 0);
	ck_assert_uint_le(ttl_left(1, "a"), kinds[_i].lease);
	ck_assert_uint_eq(fake_count(), 0);

	ck_assert_int_eq(release(1, "a", NULL), 0);
	c = expect(FAKE_RELEASE, "a");
	ck_assert_str_eq(c->token, tok);
	ck_assert_uint_eq(c->fence, 7);
	ck_assert_int_eq(c->done, LDB_DONE_IF_WAITED);
	ck_assert_uint_eq(c->done_ms, config_mark_ms(&cf));
	fake_reply(c, LDB_OK);
	ck_assert_str_eq(told_take(), "1 OK");
	ck_assert_ptr_null(hold_of(1, "a"));
	ck_assert_uint_eq(O(1)->nholds, 0);
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* RELEASE of what nobody here holds: at once without TOKEN, Redis's NO
 * with one. */
START_TEST(test_release_notheld)
{
	ck_assert_int_eq(release(1, "a", NULL), -1);
	ck_assert_str_eq(told_take(),
	    "1 ERR NOTHELD this connection does not hold it "
	    "(give TOKEN <t> for a grant made elsewhere)");
	ck_assert_uint_eq(fake_count(), 0);
	ck_assert_int_eq(release(1, "a", "someone-else"), 0);
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_NO);
	ck_assert_str_eq(
	    told_take(), "1 ERR NOTHELD the lock is not held by this token");
	ck_assert_int_eq(release(1, "a", "bad token!"), -1);
	ck_assert_str_eq(
	    told_take(), "1 ERR ARGS a token is 1-64 of A-Z a-z 0-9 _ . -");
}
END_TEST

/* -- Try-once -- */

START_TEST(test_wait0_refused)
{
	struct lock_acquire_args a = args(0, 0);
	struct fake_call *c;

	ck_assert_int_eq(acquire(1, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert_uint_eq(c->ask.mark_ms, 0); /* waits for no announcement */
	fake_refuse(c, 100, 3);
	ck_assert_str_eq(told_take(), "1 TIMEOUT");
	ck_assert_ptr_null(O(1)->pending);
	ck_assert_uint_eq(fake_count(), 0);
	run_ms(20); /* no retry for a try-once */
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* A try-once never jumps the queue: TIMEOUT at once while others wait. */
START_TEST(test_wait0_behind_waiters)
{
	struct lock_acquire_args w = args(0, -1), once = args(0, 0);

	ck_assert_int_eq(acquire(1, "a", &w), 0);
	ck_assert_int_eq(acquire(2, "a", &once), -1);
	ck_assert_str_eq(told_take(), "2 TIMEOUT");
	ck_assert_uint_eq(fake_count(), 1); /* only the waiter's try */
}
END_TEST

/* A try-once Redis did not answer: ERR UNAVAILABLE, and the broker's own
 * token is released once Redis is back (the grant may have happened); a
 * client's TOKEN is not. */
START_TEST(test_wait0_unavailable)
{
	struct lock_acquire_args a = args(0, 0);
	struct lockdb_reply busy = { .status = LDB_UNAVAILABLE,
		.busy = "LOADING" };
	struct fake_call *c;
	char tok[PROTO_TOKEN_MAX + 1];

	cf.redis.command_timeout_ms = 10000; /* only fake_connect retries */
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	snprintf(tok, sizeof tok, "%s", c->ask.token);
	fake_reply(c, LDB_UNAVAILABLE);
	ck_assert_str_eq(
	    told_take(), "1 ERR UNAVAILABLE Redis did not answer in time");
	a.token = "mine";
	ck_assert_int_eq(acquire(2, "b", &a), 0);
	fake_answer(expect(FAKE_ACQUIRE, "b"), &busy);
	ck_assert_str_eq(
	    told_take(), "2 ERR UNAVAILABLE Redis answered LOADING");
	ck_assert_uint_eq(fake_count(), 0);

	fake_connect();
	ck_assert_uint_eq(fake_count(), 1);
	c = expect(FAKE_RELEASE, "a");
	ck_assert_str_eq(c->token, tok);
	ck_assert_uint_eq(c->fence, 0); /* any grant: nobody else knows it */
	fake_reply(c, LDB_NO);
	ck_assert_uint_eq(fake_count(), 0);
	ck_assert_str_eq(told_take(), "");
}
END_TEST

/* -- Waiting: retries -- */

/* Refused with the holder's PTTL: the head tries again when it runs out
 * (the back-off is longer here), with the same token, not before. */
START_TEST(test_retry_after_pttl)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;
	char tok[PROTO_TOKEN_MAX + 1];
	uint64_t t0;

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 2000;
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	snprintf(tok, sizeof tok, "%s", c->ask.token);
	t0 = mono_ms();
	fake_refuse(c, 30, 1);
	ck_assert_str_eq(told_take(), "");
	ck_assert_uint_eq(fake_count(), 0);
	ck_assert(wait_calls(1));
	ck_assert_uint_ge(mono_ms() - t0, 30);
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert_str_eq(c->ask.token, tok);
	ck_assert_uint_eq(c->ask.mark_ms, config_mark_ms(&cf));
	fake_grant(c, 2);
	ck_assert_str_eq(told_take(), "1 OK fence=2 ttl=10000");
	ck_assert_str_eq(owners[0].token, tok);
}
END_TEST

/* Refused with a long PTTL: the back-off doubles from retry_min_ms to
 * retry_max_ms, each delay at least half of it: 5, 10, 20, 40, 40 ms give
 * at least 3 + 6 + 11 + 21 + 21 ms over five tries. */
START_TEST(test_retry_backoff)
{
	struct lock_acquire_args a = args(0, -1);
	uint64_t t0 = mono_ms();

	ck_assert_int_eq(acquire(1, "a", &a), 0);
	for (int i = 0; i < 5; i++) {
		ck_assert(wait_calls(1));
		fake_refuse(expect(FAKE_ACQUIRE, "a"), 100000, 1);
		ck_assert_uint_eq(fake_count(), 0);
	}
	ck_assert(wait_calls(1));
	ck_assert_uint_ge(mono_ms() - t0, 3 + 6 + 11 + 21 + 21);
	fake_grant(expect(FAKE_ACQUIRE, "a"), 9);
	ck_assert_str_eq(told_take(), "1 OK fence=9 ttl=10000");
}
END_TEST

/* A release announced on the channel: the head tries at once; news of
 * another name changes nothing. */
START_TEST(test_retry_on_released_news)
{
	struct lock_acquire_args a = args(0, -1);

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	waits(1, "a", &a);
	fake_news(LDB_NEWS_RELEASED, "other", 0);
	ck_assert_uint_eq(fake_count(), 0);
	fake_news(LDB_NEWS_RELEASED, "a", 0);
	ck_assert_uint_eq(fake_count(), 1);
	fake_grant(expect(FAKE_ACQUIRE, "a"), 2);
	ck_assert_str_eq(told_take(), "1 OK fence=2 ttl=10000");
}
END_TEST

/* News while the head's try is in Redis: it tries again as soon as that
 * try is refused, not after a back-off. */
START_TEST(test_kick_while_attempting)
{
	struct lock_acquire_args a = args(0, -1);

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	fake_news(LDB_NEWS_RELEASED, "a", 0);
	ck_assert_uint_eq(fake_count(), 1); /* one try at a time */
	fake_refuse(expect(FAKE_ACQUIRE, "a"), 100000, 1);
	ck_assert_uint_eq(fake_count(), 1);
	fake_grant(expect(FAKE_ACQUIRE, "a"), 2);
	ck_assert_str_eq(told_take(), "1 OK fence=2 ttl=10000");
}
END_TEST

/* -- Waiting: one queue across brokers, and hand-over -- */

/* Several exclusive waiters on one broker: each takes a ticket in arrival
 * order and sends one try carrying it, with the least ticket this broker
 * still queues, even while the name is held here; only the first (the
 * trier) asks again. A RELEASE's script hands the name to the first live
 * ticket, and its reply says which waiter here has it, with its fence. */
START_TEST(test_fifo_tickets)
{
	struct lock_acquire_args a = args(0, -1);
	char tok[5][PROTO_TOKEN_MAX + 1];
	struct lockdb_reply r = { .status = LDB_OK };
	struct fake_call *c;
	char want[96];

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	snprintf(tok[1], sizeof tok[1], "%s", hold(1, "a", &a, 1));
	ck_assert_uint_eq(fake_handoff_ms(), 50); /* command_timeout_ms */
	for (int i = 2; i <= 4; i++)
		ck_assert_int_eq(acquire(i, "a", &a), 0);
	ck_assert_uint_eq(fake_count(), 3);
	for (unsigned i = 0; i < 3; i++) {
		c = fake_pending(i);
		ck_assert_int_eq(c->op, FAKE_ACQUIRE);
		ck_assert_uint_eq(c->ask.ticket, i + 2);
		ck_assert_uint_eq(c->ask.least, 2);
		snprintf(tok[i + 2], sizeof tok[0], "%s", c->ask.token);
	}
	for (int i = 0; i < 3; i++)
		fake_refuse(fake_next(), 5000, 1);
	ck_assert_uint_eq(fake_count(), 0);
	for (int i = 1; i <= 3; i++) {
		ck_assert_int_eq(release(i, "a", NULL), 0);
		c = expect(FAKE_RELEASE, "a");
		ck_assert_uint_eq(fake_count(), 1);
		ck_assert_str_eq(c->token, tok[i]);
		ck_assert_uint_eq(c->fence, (uint64_t)i);
		r.fence = r.ticket = (uint64_t)i + 1;
		r.token = tok[i + 1];
		fake_answer(c, &r);
		/* The waiter is told first: its grant is the one waited on. */
		snprintf(want, sizeof want, "%d OK fence=%d ttl=10000; %d OK",
		    i + 1, i + 1, i);
		ck_assert_str_eq(told_take(), want);
		ck_assert_str_eq(owners[i].token, tok[i + 1]);
		ck_assert_uint_eq(fake_count(), 0);
	}
	ck_assert_int_eq(release(4, "a", NULL), 0);
	c = expect(FAKE_RELEASE, "a");
	ck_assert_uint_eq(c->fence, 4);
	fake_reply(c, LDB_OK);
	ck_assert_str_eq(told_take(), "4 OK");
}
END_TEST

/* A RELEASE's answers, with a waiter here: handed to it; released to
 * nobody (the waiter tries at once); handed to another broker's waiter
 * (ours waits on); handed to a ticket of ours nobody has any more (given
 * back); not ours; or no answer (owed). */
enum then { THEN_NOTHING, THEN_TRIES, THEN_GIVEN_BACK, THEN_OWED };

static const struct {
	struct lockdb_reply r;
	bool to_waiter; /* r.token is the waiter's */
	const char *told;
	enum then then;
} releases[] = {
	{ { .status = LDB_OK, .fence = 2, .ticket = 2 }, true,
	    "2 OK fence=2 ttl=10000; 1 OK", THEN_NOTHING },
	{ { .status = LDB_OK }, false, "1 OK", THEN_TRIES },
	{ { .status = LDB_OK, .fence = 5 }, false, "1 OK", THEN_NOTHING },
	{ { .status = LDB_OK, .fence = 5, .ticket = 9, .token = "gone" }, false,
	    "1 OK", THEN_GIVEN_BACK },
	{ { .status = LDB_OK, .fence = 5, .ticket = 2, .token = "other" },
	    false, "1 OK", THEN_GIVEN_BACK },
	{ { .status = LDB_NO }, false,
	    "1 ERR NOTHELD the lock is not held by this token", THEN_NOTHING },
	{ { .status = LDB_INTERNAL }, false,
	    "1 ERR INTERNAL unexpected reply from Redis", THEN_NOTHING },
	{ { .status = LDB_UNAVAILABLE }, false,
	    "1 ERR UNAVAILABLE Redis did not answer in time", THEN_OWED },
};

START_TEST(test_release_answers)
{
	struct lock_acquire_args a = args(0, -1);
	struct lockdb_reply r = releases[_i].r;
	char tok1[PROTO_TOKEN_MAX + 1], tok2[PROTO_TOKEN_MAX + 1];
	struct fake_call *c;

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	snprintf(tok1, sizeof tok1, "%s", hold(1, "a", &a, 1));
	ck_assert_int_eq(acquire(2, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert_uint_eq(c->ask.ticket, 2);
	snprintf(tok2, sizeof tok2, "%s", c->ask.token);
	fake_refuse(c, 5000, 1);
	ck_assert_int_eq(release(1, "a", NULL), 0);
	c = expect(FAKE_RELEASE, "a");
	ck_assert_str_eq(c->token, tok1);
	ck_assert_uint_eq(c->fence, 1);
	ck_assert_int_eq(c->done, LDB_DONE_IF_WAITED);
	if (releases[_i].to_waiter)
		r.token = tok2;
	fake_answer(c, &r);
	ck_assert_str_eq(told_take(), releases[_i].told);
	ck_assert_ptr_null(hold_of(1, "a"));
	switch (releases[_i].then) {
	case THEN_NOTHING:
		ck_assert_uint_eq(fake_count(), 0);
		break;
	case THEN_TRIES:
		c = expect(FAKE_ACQUIRE, "a");
		ck_assert_uint_eq(fake_count(), 1);
		ck_assert_str_eq(c->ask.token, tok2);
		ck_assert_uint_eq(c->ask.ticket, 2);
		fake_grant(c, 3);
		ck_assert_str_eq(told_take(), "2 OK fence=3 ttl=10000");
		break;
	case THEN_GIVEN_BACK:
		/* The grant goes back, which hands it on. */
		c = expect(FAKE_RELEASE, "a");
		ck_assert_uint_eq(fake_count(), 1);
		ck_assert_str_eq(c->token, r.token);
		ck_assert_uint_eq(c->fence, 5);
		ck_assert_int_eq(c->done, LDB_DONE_NO);
		break;
	case THEN_OWED:
		/* Done, with its fence, when Redis answers again. */
		ck_assert_uint_eq(fake_count(), 0);
		ck_assert(wait_calls(1));
		c = expect(FAKE_RELEASE, "a");
		ck_assert_str_eq(c->token, tok1);
		ck_assert_uint_eq(c->fence, 1);
		break;
	}
	if (releases[_i].to_waiter)
		ck_assert_uint_eq(hold_of(2, "a")->fence, 2);
	else if (releases[_i].then != THEN_TRIES)
		ck_assert_ptr_null(hold_of(2, "a"));
}
END_TEST

/* Handed our ticket while the waiter's own try is in Redis: that try was
 * sent after the release (one connection keeps order), so it finds the
 * grant its own, and its answer decides. */
START_TEST(test_handed_while_trying)
{
	struct lock_acquire_args a = args(0, -1);
	struct lockdb_reply r = { .status = LDB_OK, .fence = 2, .ticket = 2 };
	struct fake_call *rel;
	char tok2[PROTO_TOKEN_MAX + 1];

	hold(1, "a", &a, 1);
	ck_assert_int_eq(acquire(2, "a", &a), 0);
	snprintf(tok2, sizeof tok2, "%s", expect(FAKE_ACQUIRE, "a")->ask.token);
	fake_refuse(expect(FAKE_ACQUIRE, "a"), 100000, 1);
	ck_assert_int_eq(release(1, "a", NULL), 0);
	rel = expect(FAKE_RELEASE, "a");
	ck_assert(wait_calls(2)); /* the trier's next try, after the release */
	ck_assert_int_eq(fake_pending(1)->op, FAKE_ACQUIRE);
	r.token = tok2;
	fake_answer(rel, &r);
	ck_assert_str_eq(told_take(), "1 OK");
	fake_grant(expect(FAKE_ACQUIRE, "a"), 2);
	ck_assert_str_eq(told_take(), "2 OK fence=2 ttl=10000");
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* Another broker's release handed our ticket the name, its message not
 * saying for how long (an older broker's): the waiter counts it only once
 * it confirmed it (EXTEND with that fence to its own TTL); not confirmed,
 * it queues again. */
static const struct {
	bool trying; /* its own try is in Redis when the news comes */
	enum lockdb_status confirm;
	const char *told;
} handeds[] = {
	{ false, LDB_OK, "2 OK fence=7 ttl=10000" },
	{ false, LDB_NO, "" },
	{ true, LDB_OK, "2 OK fence=7 ttl=10000" },
};

START_TEST(test_handed_by_other_broker)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;
	char tok2[PROTO_TOKEN_MAX + 1];

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	hold(1, "b", &a, 1); /* ticket 1 */
	ck_assert_int_eq(acquire(2, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert_uint_eq(c->ask.ticket, 2);
	snprintf(tok2, sizeof tok2, "%s", c->ask.token);
	if (!handeds[_i].trying)
		fake_refuse(c, 100000, 1);
	fake_handed("a", 2, 7, tok2, 0);
	if (handeds[_i].trying) {
		ck_assert_uint_eq(fake_count(), 1); /* its try decides first */
		fake_refuse(c, 100000, 1);
	}
	c = expect(FAKE_EXTEND, "a");
	ck_assert_uint_eq(fake_count(), 1);
	ck_assert_str_eq(c->token, tok2);
	ck_assert_uint_eq(c->fence, 7);
	ck_assert_uint_eq(c->ttl_ms, 10000);
	fake_reply(c, handeds[_i].confirm);
	ck_assert_str_eq(told_take(), handeds[_i].told);
	if (handeds[_i].confirm == LDB_OK) {
		ck_assert_uint_eq(hold_of(2, "a")->fence, 7);
		ck_assert_uint_eq(fake_count(), 0);
		return;
	}
	c = expect(FAKE_ACQUIRE, "a"); /* its place again */
	ck_assert_uint_eq(c->ask.ticket, 2);
}
END_TEST

/*
 * Another broker's hand-over for ttl ms, the waiter's first try with its
 * ticket sent age ms before: with more than half of the lease ahead (and
 * no replicas to wait for) the waiter is answered at once, trusts the
 * hold until the lease's end counted from that try, and confirms it
 * meanwhile; the confirmation's answer lengthens the hold to its own TTL,
 * or loses it. Else it is confirmed first, as an older broker's is.
 */
static const struct {
	uint64_t ttl, age;
	int replicas;
	bool early;
	enum lockdb_status confirm;
	const char *then; /* told after the confirmation's answer */
} earlies[] = {
	{ 1000, 0, 0, true, LDB_OK, "" },
	{ 1000, 0, 0, true, LDB_NO, "2 LOST a 7 stolen" },
	{ 1000, 0, 0, true, LDB_UNAVAILABLE, "" },
	{ 100, 60, 0, false, LDB_OK, "2 OK fence=7 ttl=10000" },
	{ 1000, 0, 1, false, LDB_NO, "" },
};

START_TEST(test_handed_early)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;
	char tok2[PROTO_TOKEN_MAX + 1];
	uint64_t t0;

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	hold(1, "b", &a, 1); /* ticket 1 */
	cf.redis.wait_replicas = earlies[_i].replicas;
	t0 = mono_ms();
	ck_assert_int_eq(acquire(2, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	snprintf(tok2, sizeof tok2, "%s", c->ask.token);
	fake_refuse(c, 100000, 1);
	if (earlies[_i].age > 0)
		run_ms((unsigned)earlies[_i].age);
	fake_handed("a", 2, 7, tok2, earlies[_i].ttl);
	c = expect(FAKE_EXTEND, "a");
	ck_assert_uint_eq(fake_count(), 1);
	ck_assert_uint_eq(c->fence, 7);
	ck_assert_uint_eq(c->ttl_ms, 10000);
	if (!earlies[_i].early) {
		ck_assert_str_eq(told_take(), "");
		fake_reply(c, earlies[_i].confirm);
		ck_assert_str_eq(told_take(), earlies[_i].then);
		return;
	}
	ck_assert_str_eq(told_take(), "2 OK fence=7 ttl=10000");
	/* Trusted until the hand-over's lease ends, from the first try. */
	ck_assert_uint_le(ttl_left(2, "a") + (mono_ms() - t0), earlies[_i].ttl);
	ck_assert_uint_gt(ttl_left(2, "a"), earlies[_i].ttl / 2);
	fake_reply(c, earlies[_i].confirm);
	if (earlies[_i].confirm == LDB_NO) {
		/* Refused: check says whether only its key went. */
		ck_assert_str_eq(told_take(), "");
		fake_reply(expect(FAKE_CHECK, "a"), LDB_NO);
	}
	ck_assert_str_eq(told_take(), earlies[_i].then);
	switch (earlies[_i].confirm) {
	case LDB_OK:
		ck_assert_uint_gt(ttl_left(2, "a"), earlies[_i].ttl);
		break;
	case LDB_NO:
		ck_assert_ptr_null(hold_of(2, "a"));
		break;
	default:
		/* No answer that counts: lost when the hand-over's lease
		 * ends. */
		ck_assert_uint_le(ttl_left(2, "a"), earlies[_i].ttl);
		ck_assert(wait_told(1));
		ck_assert_str_eq(told_take(), "2 LOST a 7 unavailable");
		break;
	}
}
END_TEST

/* A hand-over to a ticket nobody here has (the waiter left, or another
 * token): given back at once, which hands it on. A waiter that leaves
 * gives its place in Redis up. */
START_TEST(test_handed_to_nobody)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;

	waits(2, "a", &a);
	lock_owner_gone(O(2), false);
	c = expect(FAKE_CANCEL, "a");
	ck_assert_uint_eq(c->ticket, 1);
	fake_reply(c, LDB_OK);
	fake_handed("a", 1, 7, "tokX", 0);
	c = expect(FAKE_RELEASE, "a");
	ck_assert_str_eq(c->token, "tokX");
	ck_assert_uint_eq(c->fence, 7);
	fake_reply(c, LDB_OK);
	ck_assert_str_eq(told_take(), "");
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* A waiter behind the trier sends one try of its own, taking its ticket's
 * place (it is granted if the name is free and nobody queues before it).
 * Its answers: granted (after the replicas, if asked for); refused or
 * unanswered (it waits on, the trier asks); CONFLICT or INTERNAL (the
 * wait ends and the place is given up); or its owner left meanwhile. */
enum take_then { TAKE_WAITS, TAKE_GRANTED, TAKE_ENDS, TAKE_RELEASED };

static const struct {
	struct lockdb_reply r;
	int replicas;
	bool gone;
	const char *told;
	enum take_then then;
} takes[] = {
	{ { .status = LDB_OK, .fence = 4 }, 0, false, "2 OK fence=4 ttl=10000",
	    TAKE_GRANTED },
	{ { .status = LDB_OK, .fence = 4 }, 1, false, "2 OK fence=4 ttl=10000",
	    TAKE_GRANTED },
	{ { .status = LDB_NO, .pttl = 5000, .fence = 1 }, 0, false, "",
	    TAKE_WAITS },
	{ { .status = LDB_UNAVAILABLE }, 0, false, "", TAKE_WAITS },
	{ { .status = LDB_CONFLICT, .mode = LDB_SHARED }, 0, false,
	    "2 ERR ARGS this token holds it SHARED", TAKE_ENDS },
	{ { .status = LDB_INTERNAL }, 0, false,
	    "2 ERR INTERNAL unexpected reply from Redis", TAKE_ENDS },
	{ { .status = LDB_OK, .fence = 4 }, 0, true, "", TAKE_RELEASED },
	{ { .status = LDB_NO, .pttl = 5000, .fence = 1 }, 0, true, "",
	    TAKE_WAITS },
};

START_TEST(test_take_answers)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	waits(1, "a", &a);
	ck_assert_int_eq(acquire(2, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert_uint_eq(c->ask.ticket, 2);
	ck_assert_uint_eq(c->ask.least, 1);
	if (takes[_i].gone) {
		lock_owner_gone(O(2), false);
		ck_assert_int_eq(fake_pending(1)->op, FAKE_CANCEL);
		fake_reply(fake_pending(1), LDB_OK);
	}
	cf.redis.wait_replicas = takes[_i].replicas;
	fake_answer(c, &takes[_i].r);
	if (takes[_i].replicas > 0) {
		ck_assert_str_eq(told_take(), "");
		fake_grant(expect(FAKE_WAIT, "a"), 1);
	}
	ck_assert_str_eq(told_take(), takes[_i].told);
	switch (takes[_i].then) {
	case TAKE_WAITS:
		ck_assert_uint_eq(fake_count(), 0);
		break;
	case TAKE_GRANTED:
		ck_assert_uint_eq(hold_of(2, "a")->fence, 4);
		ck_assert_uint_eq(fake_count(), 0);
		break;
	case TAKE_ENDS:
		ck_assert_uint_eq(expect(FAKE_CANCEL, "a")->ticket, 2);
		ck_assert_uint_eq(fake_count(), 1);
		break;
	case TAKE_RELEASED:
		ck_assert_uint_eq(expect(FAKE_RELEASE, "a")->fence, 4);
		ck_assert_uint_eq(fake_count(), 1);
		break;
	}
	/* The trier waits on, whatever became of the other. */
	ck_assert_ptr_nonnull(O(1)->pending);
}
END_TEST

/* Subscribed again: a hand-over's message may have been lost, so every
 * ticketed waiter takes its place again at once (the try finds a grant its
 * token's), the trier first, so that the places keep their order. */
START_TEST(test_missed_retakes)
{
	struct lock_acquire_args a = args(0, -1);

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	waits(1, "a", &a);
	waits(2, "a", &a);
	fake_news(LDB_NEWS_MISSED, NULL, 0);
	ck_assert_uint_eq(fake_count(), 2);
	ck_assert_uint_eq(fake_pending(0)->ask.ticket, 1);
	ck_assert_uint_eq(fake_pending(1)->ask.ticket, 2);
	fake_grant(fake_pending(1), 5);
	ck_assert_str_eq(told_take(), "2 OK fence=5 ttl=10000");
}
END_TEST

/* Handed a grant by another broker while its own try is in Redis, then
 * gone before confirming it: the grant is released (its fence), which
 * hands it on; the try's late answer tells nobody. */
START_TEST(test_handed_then_gone)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;
	char tok[PROTO_TOKEN_MAX + 1];

	ck_assert_int_eq(acquire(1, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	snprintf(tok, sizeof tok, "%s", c->ask.token);
	fake_handed("a", 1, 7, tok, 0);
	ck_assert_uint_eq(fake_count(), 1);
	lock_owner_gone(O(1), false);
	c = fake_pending(1);
	ck_assert_int_eq(c->op, FAKE_RELEASE);
	ck_assert_str_eq(c->token, tok);
	ck_assert_uint_eq(c->fence, 7);
	ck_assert_uint_eq(fake_count(), 2); /* no CANCEL: the grant took it */
	fake_refuse(expect(FAKE_ACQUIRE, "a"), 100000, 1);
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_OK);
	ck_assert_str_eq(told_take(), "");
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* A hand-over is a grant like any other: one whose answer comes after its
 * lease's validity (counted from sending the release, or the
 * confirmation) is not OK; it is given back and the waiter queues
 * again. */
START_TEST(test_handed_late)
{
	struct lock_acquire_args a = args(0, -1), w = args(20, -1);
	struct lockdb_reply r = { .status = LDB_OK, .fence = 2, .ticket = 2 };
	struct fake_call *rel, *c;
	char tok2[PROTO_TOKEN_MAX + 1];

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	hold(1, "a", &a, 1);
	ck_assert_int_eq(acquire(2, "a", &w), 0);
	snprintf(tok2, sizeof tok2, "%s", expect(FAKE_ACQUIRE, "a")->ask.token);
	fake_refuse(expect(FAKE_ACQUIRE, "a"), 100000, 1);
	ck_assert_int_eq(release(1, "a", NULL), 0);
	rel = expect(FAKE_RELEASE, "a");
	run_ms(30);
	r.token = tok2;
	fake_answer(rel, &r);
	ck_assert_str_eq(told_take(), "1 OK");
	ck_assert_ptr_null(hold_of(2, "a"));
	c = expect(FAKE_RELEASE, "a"); /* given back, with its fence */
	ck_assert_str_eq(c->token, tok2);
	ck_assert_uint_eq(c->fence, 2);
	c = fake_pending(1); /* and its place taken again */
	ck_assert_int_eq(c->op, FAKE_ACQUIRE);
	ck_assert_uint_eq(c->ask.ticket, 2);
	ck_assert_uint_eq(fake_count(), 2);

	/* The same for another broker's hand-over, confirmed too late. */
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_OK);
	fake_refuse(expect(FAKE_ACQUIRE, "a"), 100000, 1);
	fake_handed("a", 2, 3, tok2, 0);
	c = expect(FAKE_EXTEND, "a");
	ck_assert_uint_eq(c->ttl_ms, 20);
	run_ms(30);
	fake_reply(c, LDB_OK);
	ck_assert_str_eq(told_take(), "");
	ck_assert_uint_eq(expect(FAKE_RELEASE, "a")->fence, 3);
	ck_assert_uint_eq(fake_pending(1)->ask.ticket, 2);
}
END_TEST

/* -- WAIT's deadline -- */

/* TIMEOUT when WAIT runs out, and its place in the queue is given up;
 * the try still in Redis is released when it lands granted, with its
 * fence. */
START_TEST(test_deadline_late_grant)
{
	struct lock_acquire_args a = args(0, 30);
	struct fake_call *c;
	char tok[PROTO_TOKEN_MAX + 1];

	ck_assert_int_eq(acquire(1, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	snprintf(tok, sizeof tok, "%s", c->ask.token);
	ck_assert(wait_told(1));
	ck_assert_str_eq(told_take(), "1 TIMEOUT");
	ck_assert_uint_eq(fake_count(), 2);
	ck_assert_int_eq(fake_pending(1)->op, FAKE_CANCEL);
	ck_assert_uint_eq(fake_pending(1)->ticket, 1);
	fake_reply(fake_pending(1), LDB_OK);
	fake_grant(c, 5);
	c = expect(FAKE_RELEASE, "a");
	ck_assert_uint_eq(fake_count(), 1);
	ck_assert_str_eq(c->token, tok);
	ck_assert_uint_eq(c->fence, 5);
	ck_assert_int_eq(c->done, LDB_DONE_NO);
	fake_reply(c, LDB_OK);
	ck_assert_str_eq(told_take(), "");
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* A kept lock under the client's own token is not given back: it can
 * ask again with the token and learn the fence. */
START_TEST(test_deadline_late_grant_keep)
{
	struct lock_acquire_args a = args(5000, 30);

	a.keep = true;
	a.token = "job-1";
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	ck_assert(wait_told(1));
	ck_assert_str_eq(told_take(), "1 TIMEOUT");
	fake_grant(expect(FAKE_ACQUIRE, "a"), 5);
	expect(FAKE_CANCEL, "a"); /* its place; no release */
	ck_assert_uint_eq(fake_count(), 1);
}
END_TEST

/* A waiter refused, then out of time: no more tries after TIMEOUT. */
START_TEST(test_deadline_no_more_tries)
{
	struct lock_acquire_args a = args(0, 30);
	uint64_t end = mono_ms() + WAIT_MAX_MS;
	unsigned tries = 0;

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 20;
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	/* Every try refused at once, until the deadline. */
	while (ntold == 0 && mono_ms() < end) {
		if (fake_count() > 0) {
			fake_refuse(expect(FAKE_ACQUIRE, "a"), 100000, 1);
			tries++;
		}
		run_ms(1);
	}
	ck_assert_uint_ge(tries, 2); /* a retry at 10-20 ms, before 30 */
	ck_assert_str_eq(told_take(), "1 TIMEOUT");
	/* A try sent just before the deadline lands: nobody is told. */
	if (fake_next()->op == FAKE_ACQUIRE)
		fake_refuse(fake_next(), 100000, 1);
	fake_reply(expect(FAKE_CANCEL, "a"), LDB_OK);
	ck_assert_str_eq(told_take(), "");
	run_ms(50);
	ck_assert_uint_eq(fake_count(), 0);
	ck_assert_ptr_null(O(1)->pending);
}
END_TEST

/* -- Owners leaving -- */

/* A holder goes: QUIT releases at once, a vanished one is kept for
 * lock_delay_ms (compare-and-PEXPIRE), a kept lock stays. */
static const struct {
	uint64_t ttl_ms;
	bool keep, vanished;
	int64_t delay;
	int op; /* the call sent, or -1 */
	uint64_t ttl_sent;
} gone[] = {
	{ 0, false, false, 0, FAKE_RELEASE, 0 },
	{ 0, false, true, 0, FAKE_RELEASE, 0 },
	{ 0, false, false, 200, FAKE_RELEASE, 0 },
	{ 0, false, true, 200, FAKE_EXTEND, 200 },
	{ 800, false, true, 200, FAKE_EXTEND, 200 },
	{ 800, false, false, 0, FAKE_RELEASE, 0 },
	{ 800, true, true, 200, -1, 0 },
	{ 800, true, false, 0, -1, 0 },
};

START_TEST(test_owner_gone_holding)
{
	struct lock_acquire_args a = args(gone[_i].ttl_ms, -1);
	char tok[PROTO_TOKEN_MAX + 1];
	struct fake_call *c;

	a.keep = gone[_i].keep;
	cf.locks.lock_delay_ms = gone[_i].delay;
	snprintf(tok, sizeof tok, "%s", hold(1, "a", &a, 4));
	lock_owner_gone(O(1), gone[_i].vanished);
	ck_assert_uint_eq(O(1)->nholds, 0);
	ck_assert_str_eq(told_take(), "");
	if (gone[_i].op == -1) {
		ck_assert_uint_eq(fake_count(), 0);
		return;
	}
	c = expect((enum fake_op)gone[_i].op, "a");
	ck_assert_uint_eq(fake_count(), 1);
	ck_assert_str_eq(c->token, tok);
	ck_assert_uint_eq(c->fence, 4);
	ck_assert_uint_eq(c->ttl_ms, gone[_i].ttl_sent);
	if (c->op == FAKE_RELEASE)
		ck_assert_int_eq(c->done, LDB_DONE_NO);
	fake_reply(c, LDB_OK);
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* A holder that goes lets the waiter here try at once, or hands the
 * name to its ticket (the release's reply says so). */
START_TEST(test_owner_gone_kicks_waiter)
{
	struct lock_acquire_args a = args(0, -1);
	struct lockdb_reply r = { .status = LDB_OK, .fence = 3, .ticket = 2 };
	char tok2[PROTO_TOKEN_MAX + 1];

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	hold(1, "a", &a, 1);
	ck_assert_int_eq(acquire(2, "a", &a), 0);
	snprintf(tok2, sizeof tok2, "%s", expect(FAKE_ACQUIRE, "a")->ask.token);
	fake_refuse(expect(FAKE_ACQUIRE, "a"), 100000, 1);
	if (_i == 1) {
		lock_owner_gone(O(1), false);
		r.token = tok2;
		fake_answer(expect(FAKE_RELEASE, "a"), &r);
		ck_assert_str_eq(told_take(), "2 OK fence=3 ttl=10000");
		ck_assert_uint_eq(fake_count(), 0);
		return;
	}
	lock_owner_gone(O(1), false);
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_OK);
	fake_grant(expect(FAKE_ACQUIRE, "a"), 2);
	ck_assert_str_eq(told_take(), "2 OK fence=2 ttl=10000");
}
END_TEST

/* A waiter goes: out of the queue at once; if its try is in Redis, a
 * grant that lands is released; a refusal is only forgotten. */
START_TEST(test_owner_gone_waiting)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;
	char tok[PROTO_TOKEN_MAX + 1];

	hold(1, "a", &a, 1);
	waits(2, "a", &a);
	lock_owner_gone(O(2), true);
	ck_assert_uint_eq(expect(FAKE_CANCEL, "a")->ticket, 2);
	fake_reply(expect(FAKE_CANCEL, "a"), LDB_OK);
	ck_assert_int_eq(release(1, "a", NULL), 0);
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_OK); /* nobody to hand to */
	ck_assert_str_eq(told_take(), "1 OK");

	ck_assert_int_eq(acquire(3, "b", &a), 0);
	ck_assert_int_eq(acquire(4, "c", &a), 0);
	c = expect(FAKE_ACQUIRE, "b");
	snprintf(tok, sizeof tok, "%s", c->ask.token);
	lock_owner_gone(O(3), false);
	lock_owner_gone(O(4), false);
	/* Their places are given up, after their tries. */
	ck_assert_uint_eq(fake_count(), 4);
	ck_assert_int_eq(fake_pending(2)->op, FAKE_CANCEL);
	ck_assert_str_eq(fake_pending(2)->name, "b");
	ck_assert_int_eq(fake_pending(3)->op, FAKE_CANCEL);
	ck_assert_str_eq(fake_pending(3)->name, "c");
	fake_grant(c, 6);
	c = expect(FAKE_ACQUIRE, "c");
	fake_refuse(c, 1000, 2);
	fake_reply(expect(FAKE_CANCEL, "b"), LDB_OK);
	fake_reply(expect(FAKE_CANCEL, "c"), LDB_OK);
	c = expect(FAKE_RELEASE, "b");
	ck_assert_str_eq(c->token, tok);
	ck_assert_uint_eq(c->fence, 6);
	fake_reply(c, LDB_OK);
	ck_assert_uint_eq(fake_count(), 0);
	ck_assert_str_eq(told_take(), "");
}
END_TEST

/* An owner that goes while STATUS is in Redis is never answered. */
START_TEST(test_owner_gone_other_request)
{
	struct lock_result res;

	ck_assert_int_eq(lock_status(O(1), "a", &res), 0);
	lock_owner_gone(O(1), false);
	fake_reply(expect(FAKE_STATUS, "a"), LDB_NO);
	ck_assert_str_eq(told_take(), "");
}
END_TEST

/* -- CANCEL: a wait ends, nothing else of the owner changes -- */

START_TEST(test_cancel_waiting)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;
	/* (one process for every test under valgrind: counts as deltas) */
	int64_t cancels = stats[STAT_cancels_total];
	int64_t timeouts = stats[STAT_timeouts_total];

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 20;
	hold(1, "b", &a, 1);
	waits(2, "a", &a);
	ck_assert(lock_owner_cancel(O(2)));
	ck_assert_str_eq(told_take(), "2 CANCELLED");
	c = expect(FAKE_CANCEL, "a"); /* its place, given up */
	fake_reply(c, LDB_OK);
	ck_assert(!lock_owner_cancel(O(2))); /* nothing pending now */
	ck_assert_ptr_nonnull(hold_of(1, "b"));
	ck_assert_int_eq(stats[STAT_cancels_total], cancels + 1);
	ck_assert_int_eq(stats[STAT_timeouts_total], timeouts);
	run_ms(200); /* a waiter would have tried again by now */
	ck_assert_ptr_null(fake_find(FAKE_ACQUIRE, "a")); /* it asks no more */
}
END_TEST

/* On its first try, still in Redis: answered at once; a grant that try
 * gets is given back, its place in the queue too. */
static const enum lockdb_status cancel_tries[] = { LDB_NO, LDB_OK };

START_TEST(test_cancel_first_try)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 20;
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert(lock_owner_cancel(O(1)));
	ck_assert_str_eq(told_take(), "1 CANCELLED");
	ck_assert(!lock_owner_cancel(O(1))); /* once */
	if (cancel_tries[_i] == LDB_NO) {
		fake_refuse(c, 100, 1);
		fake_reply(expect(FAKE_CANCEL, "a"), LDB_OK);
	} else {
		fake_grant(c, 5); /* given back, its place too */
		fake_reply(expect(FAKE_CANCEL, "a"), LDB_OK);
		fake_reply(expect(FAKE_RELEASE, "a"), LDB_OK);
	}
	ck_assert_str_eq(told_take(), "");
	ck_assert_ptr_null(hold_of(1, "a"));
	run_ms(200);
	ck_assert_ptr_null(fake_find(FAKE_ACQUIRE, "a"));
}
END_TEST

/* A try-once is no wait: CANCEL leaves it to its answer. */
START_TEST(test_cancel_try_once)
{
	struct lock_acquire_args a = args(0, 0);

	ck_assert(!lock_owner_cancel(O(1))); /* nothing pending */
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	ck_assert(!lock_owner_cancel(O(1)));
	fake_refuse(expect(FAKE_ACQUIRE, "a"), 100, 0);
	ck_assert_str_eq(told_take(), "1 TIMEOUT");
}
END_TEST

/* -- End of input: a first try becomes a try-once -- */

START_TEST(test_eof_first_try)
{
	struct lock_acquire_args a = args(0, -1);

	ck_assert(lock_owner_eof(O(1))); /* nothing pending */
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	ck_assert(lock_owner_eof(O(1)));
	fake_refuse(expect(FAKE_ACQUIRE, "a"), 100, 1);
	ck_assert_str_eq(told_take(), "1 TIMEOUT");
	/* It had taken a place in the queue (it was to wait): given up. */
	expect(FAKE_CANCEL, "a");
	ck_assert_uint_eq(fake_count(), 1);
}
END_TEST

/* Once refused it waits: the owner must be treated as gone. */
START_TEST(test_eof_already_waiting)
{
	struct lock_acquire_args a = args(0, -1);

	waits(1, "a", &a);
	ck_assert(!lock_owner_eof(O(1)));
	lock_owner_gone(O(1), true);
	ck_assert_str_eq(told_take(), "");
}
END_TEST

/*
 * Input ends while a waiter's confirmation of a hand-over is in Redis
 * (its first try was answered long before): it was waiting, so it is
 * gone, whatever that confirmation answers, and it asks nothing more.
 * Taken for its first try, it became a try-once with no ticket that took
 * its place again at every answer, for ever; with Redis away, inside one
 * pass of the loop.
 */
static const enum lockdb_status confirms[] = { LDB_OK, LDB_NO,
	LDB_UNAVAILABLE };

START_TEST(test_eof_while_confirming)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;
	char tok2[PROTO_TOKEN_MAX + 1];

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	hold(1, "b", &a, 1); /* ticket 1 */
	ck_assert_int_eq(acquire(2, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	snprintf(tok2, sizeof tok2, "%s", c->ask.token);
	fake_refuse(c, 100000, 1);
	fake_handed("a", 2, 7, tok2, 0);
	c = expect(FAKE_EXTEND, "a");
	ck_assert(!lock_owner_eof(O(2)));
	lock_owner_gone(O(2), true);
	fake_reply(c, confirms[_i]);
	run_ms(20);
	ck_assert_str_eq(told_take(), "");
	ck_assert_ptr_null(fake_find(FAKE_ACQUIRE, "a"));
	if (confirms[_i] == LDB_OK) { /* granted to nobody: released */
		c = expect(FAKE_RELEASE, "a");
		ck_assert_str_eq(c->token, tok2);
		fake_reply(c, LDB_OK);
	}
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/*
 * A waiter behind another here takes its place with a try of its own;
 * input that ends while that first try is in Redis makes it a try-once:
 * its one answer ends it (its place given up), and it asks no more.
 */
static const struct {
	enum lockdb_status status;
	const char *told;
} first_takes[] = {
	{ LDB_NO, "3 TIMEOUT" },
	{ LDB_UNAVAILABLE, "3 ERR UNAVAILABLE Redis did not answer in time" },
};

START_TEST(test_eof_first_take)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;
	uint64_t ticket;

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	hold(1, "a", &a, 1);
	waits(2, "a", &a);
	ck_assert_int_eq(acquire(3, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	ticket = c->ask.ticket;
	ck_assert_uint_ne(ticket, 0);
	ck_assert(lock_owner_eof(O(3)));
	if (first_takes[_i].status == LDB_NO)
		fake_refuse(c, 100000, 1);
	else
		fake_reply(c, first_takes[_i].status);
	ck_assert_str_eq(told_take(), first_takes[_i].told);
	run_ms(20);
	ck_assert_ptr_null(fake_find(FAKE_ACQUIRE, "a"));
	c = expect(FAKE_CANCEL, "a"); /* its place, given up */
	ck_assert_uint_eq(c->ticket, ticket);
	fake_reply(c, LDB_OK);
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/*
 * A waiter whose own take was refused waits, even once it is first in
 * the queue here (the one before it left): input ending then drops it,
 * unanswered; it is not made a try-once that, with no ticket, would be
 * refused behind its own live ticket.
 */
START_TEST(test_eof_refused_take_now_first)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	waits(1, "a", &a);
	ck_assert_int_eq(acquire(2, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert_uint_eq(c->ask.ticket, 2);
	fake_refuse(c, 100000, 1); /* answered: it waits */
	lock_owner_gone(O(1), false);
	fake_reply(expect(FAKE_CANCEL, "a"), LDB_OK);
	ck_assert_uint_eq(fake_count(), 0);
	ck_assert(!lock_owner_eof(O(2)));
	ck_assert_uint_eq(fake_count(), 0);
	ck_assert_str_eq(told_take(), "");
}
END_TEST

/* -- Holds: renewal, expiry, max_hold -- */

/* A session lease is renewed every lease/3 with the grant's token and
 * fence; a renewal answered NO loses it as stolen (nothing released). */
START_TEST(test_renewal_stolen)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;
	char tok[PROTO_TOKEN_MAX + 1];
	uint64_t t0 = mono_ms();

	cf.locks.lease_ms = 300;
	snprintf(tok, sizeof tok, "%s", hold(1, "a", &a, 1));
	ck_assert(wait_calls(1));
	ck_assert_uint_ge(mono_ms() - t0, 90);
	c = expect(FAKE_EXTEND, "a");
	ck_assert_str_eq(c->token, tok);
	ck_assert_uint_eq(c->fence, 1);
	ck_assert_uint_eq(c->ttl_ms, 300);
	fake_reply(c, LDB_OK);
	ck_assert_uint_gt(ttl_left(1, "a"), 0);
	ck_assert(wait_calls(1));
	fake_reply(expect(FAKE_EXTEND, "a"), LDB_NO);
	/* Not held as it was: asked again, with how it was granted, so that
	 * a key deleted by hand alone is put back. */
	ck_assert_str_eq(told_take(), "");
	c = expect(FAKE_CHECK, "a");
	ck_assert_uint_eq(c->fence, 1);
	ck_assert_msg(
	    strncmp(c->ask_info, "EXCLUSIVE ", 10) == 0, "%s", c->ask_info);
	fake_reply(c, LDB_NO);
	ck_assert_str_eq(told_take(), "1 LOST a 1 stolen");
	ck_assert_ptr_null(hold_of(1, "a"));
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* Renewals that get no answer: the hold ends at its validity as
 * 'unavailable', and the broker releases it (it may still be ours). */
START_TEST(test_renewal_unavailable)
{
	struct lock_acquire_args a = args(0, -1);
	uint64_t t0 = mono_ms();
	struct fake_call *c;

	cf.locks.lease_ms = 300;
	hold(1, "a", &a, 1);
	ck_assert(wait_calls(1));
	fake_reply(expect(FAKE_EXTEND, "a"), LDB_UNAVAILABLE);
	ck_assert_str_eq(told_take(), "");
	ck_assert(wait_calls(1)); /* tried again at the next tick */
	expect(FAKE_EXTEND, "a"); /* never answered */
	ck_assert(wait_told(1));
	ck_assert_str_eq(told_take(), "1 LOST a 1 unavailable");
	/* 300 ms x (1 - 0.01) - 2 ms after the grant was asked for. */
	ck_assert_uint_ge(mono_ms() - t0, 295);
	c = expect_find(FAKE_RELEASE, "a");
	ck_assert_uint_eq(c->fence, 1);
	ck_assert_uint_eq(fake_count(), 2);
	fake_reply(expect(FAKE_EXTEND, "a"), LDB_OK); /* too late: no hold */
	ck_assert_str_eq(told_take(), "");
}
END_TEST

/* No renewal while the owner's own same-token ACQUIRE is in Redis: that
 * request sets the lease. */
START_TEST(test_renewal_skipped_while_regrant)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;

	cf.locks.lease_ms = 900; /* a tick every 300 ms */
	a.token = "tok";
	hold(1, "a", &a, 1);
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	run_ms(350); /* past a tick */
	ck_assert_uint_eq(fake_count(), 1);
	fake_grant(c, 1);
	ck_assert_str_eq(told_take(), "1 OK fence=1 ttl=900");
	ck_assert(wait_calls(1));
	expect(FAKE_EXTEND, "a");
}
END_TEST

/* A fixed lease ends at its validity: EVENT LOST expired, released. */
START_TEST(test_ttl_expired)
{
	struct lock_acquire_args a = args(50, -1);
	uint64_t t0 = mono_ms();
	struct fake_call *c;

	hold(1, "a", &a, 3);
	ck_assert(wait_told(1));
	ck_assert_uint_ge(mono_ms() - t0, 47);
	ck_assert_str_eq(told_take(), "1 LOST a 3 expired");
	ck_assert_ptr_null(hold_of(1, "a"));
	c = expect(FAKE_RELEASE, "a");
	ck_assert_uint_eq(c->fence, 3);
	ck_assert_int_eq(c->done, LDB_DONE_NO);
}
END_TEST

/* A hold past its validity whose timer has not run yet (the broker was
 * paused, the loop is a turn late) is lost when its owner's holds are
 * read (LOCKS), before they are listed; one still valid stays. */
START_TEST(test_settle_before_reading)
{
	struct lock_acquire_args a = args(50, -1), b = args(10000, -1);

	hold(1, "a", &a, 3);
	hold(1, "b", &b, 4);
	fakeclock_skip(60); /* no loop turn: no timer has run */
	ck_assert_ptr_nonnull(hold_of(1, "a"));
	lock_owner_settle(O(1));
	ck_assert_str_eq(told_take(), "1 LOST a 3 expired");
	ck_assert_ptr_null(hold_of(1, "a"));
	ck_assert_ptr_nonnull(hold_of(1, "b"));
	ck_assert_ptr_eq(lock_owner_hold(O(1), NULL), hold_of(1, "b"));
	ck_assert_uint_eq(expect(FAKE_RELEASE, "a")->fence, 3);
}
END_TEST

/* max_hold_ms ends any lock: EVENT LOST maxhold, then the lock delay
 * applies as for a vanished client. */
static const struct {
	int64_t delay;
	enum fake_op op;
} maxholds[] = { { 0, FAKE_RELEASE }, { 200, FAKE_EXTEND } };

START_TEST(test_maxhold)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;

	cf.locks.max_hold_ms = 40;
	cf.locks.lock_delay_ms = maxholds[_i].delay;
	hold(1, "a", &a, 2);
	ck_assert(wait_told(1));
	ck_assert_str_eq(told_take(), "1 LOST a 2 maxhold");
	c = expect(maxholds[_i].op, "a");
	ck_assert_uint_eq(c->fence, 2);
	if (maxholds[_i].op == FAKE_EXTEND)
		ck_assert_uint_eq(c->ttl_ms, 200);
}
END_TEST

/* -- A grant that comes after its validity ended is never OK -- */

START_TEST(test_late_grant_try_once)
{
	struct lock_acquire_args a = args(20, 0);
	struct fake_call *c;
	char tok[PROTO_TOKEN_MAX + 1];

	ck_assert_int_eq(acquire(1, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	snprintf(tok, sizeof tok, "%s", c->ask.token);
	run_ms(30);
	fake_grant(c, 4);
	ck_assert_str_eq(told_take(),
	    "1 ERR UNAVAILABLE the grant came after "
	    "its lease ended; Redis is slow");
	c = expect(FAKE_RELEASE, "a");
	ck_assert_str_eq(c->token, tok);
	ck_assert_uint_eq(c->fence, 4);
}
END_TEST

/* A grant answered more than redis.trust_ms after it was asked is of an
 * incarnation the broker can no longer vouch for (a master frozen with
 * the request in its socket, resumed after its replacement): given back,
 * even with its lease still running, not OK and then EVENT LOST. */
START_TEST(test_grant_answered_after_trust_is_late)
{
	struct lock_acquire_args a = args(60000, 0);
	struct fake_call *c;

	cf.redis.trust_ms = 300;
	fake_incarnation(true, true, 0, mono_ms());
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	run_ms(300);
	fake_grant(c, 4);
	ck_assert_str_eq(told_take(),
	    "1 ERR UNAVAILABLE the grant came after "
	    "its lease ended; Redis is slow");
	c = expect(FAKE_RELEASE, "a");
	ck_assert_uint_eq(c->fence, 4);
	ck_assert_ptr_null(hold_of(1, "a"));
}
END_TEST

/* A waiter's late grant is given back and it tries again at once. */
START_TEST(test_late_grant_waiter)
{
	struct lock_acquire_args a = args(300, -1);
	struct fake_call *c;

	ck_assert_int_eq(acquire(1, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	run_ms(310);
	fake_grant(c, 4);
	ck_assert_str_eq(told_take(), "");
	c = expect(FAKE_RELEASE, "a");
	ck_assert_uint_eq(c->fence, 4);
	fake_reply(c, LDB_OK);
	ck_assert(wait_calls(1));
	fake_grant(expect(FAKE_ACQUIRE, "a"), 5);
	ck_assert_str_eq(told_take(), "1 OK fence=5 ttl=300");
}
END_TEST

/* -- redis.wait_replicas -- */

static const struct {
	struct lockdb_reply r;
	const char *told;
	bool released;
} replicas[] = {
	{ { LDB_OK, 1 }, "1 OK fence=3 ttl=10000", false },
	{ { LDB_OK, 2 }, "1 OK fence=3 ttl=10000", false },
	{ { LDB_OK, 0 },
	    "1 ERR UNAVAILABLE the grant did not reach "
	    "redis.wait_replicas replicas in time",
	    true },
	{ { LDB_UNAVAILABLE },
	    "1 ERR UNAVAILABLE the grant did not reach "
	    "redis.wait_replicas replicas in time",
	    true },
};

START_TEST(test_wait_replicas)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;

	cf.redis.wait_replicas = 1;
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	fake_grant(expect(FAKE_ACQUIRE, "a"), 3);
	ck_assert_str_eq(told_take(), ""); /* not before the replicas */
	c = expect(FAKE_WAIT, "a");
	ck_assert_int_eq(c->replicas, 1);
	ck_assert_uint_eq(c->timeout_ms, 25);
	fake_answer(c, &replicas[_i].r);
	ck_assert_str_eq(told_take(), replicas[_i].told);
	if (replicas[_i].released) {
		ck_assert_ptr_null(hold_of(1, "a"));
		c = expect(FAKE_RELEASE, "a");
		ck_assert_uint_eq(c->fence, 3);
	} else {
		ck_assert_uint_eq(hold_of(1, "a")->fence, 3);
		ck_assert_uint_eq(fake_count(), 0);
	}
}
END_TEST

/* A same-token re-grant waits for the replicas too. */
START_TEST(test_wait_replicas_regrant)
{
	struct lock_acquire_args a = args(0, -1);

	a.token = "tok";
	hold(1, "a", &a, 3);
	cf.redis.wait_replicas = 1;
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	fake_grant(expect(FAKE_ACQUIRE, "a"), 3);
	fake_grant(expect(FAKE_WAIT, "a"), 1);
	ck_assert_str_eq(told_take(), "1 OK fence=3 ttl=10000");
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	fake_grant(expect(FAKE_ACQUIRE, "a"), 3);
	fake_grant(expect(FAKE_WAIT, "a"), 0);
	ck_assert_str_eq(told_take(),
	    "1 ERR UNAVAILABLE the grant did not "
	    "reach redis.wait_replicas replicas in "
	    "time");
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* Whose grant comes late after its replicas' WAIT: the trier's own try,
 * or the take of a waiter behind it. */
static const struct {
	int owner;
	bool behind;
} late_replicas[] = { { 1, false }, { 2, true } };

/* A grant given back for coming late leaves its waiter queued, and the
 * waiter's next grant waits for the replicas as the first did: it is
 * answered only once their WAIT is. */
START_TEST(test_wait_replicas_after_late_grant)
{
	struct lock_acquire_args a = args(100, -1), w = args(0, -1);
	int i = late_replicas[_i].owner;
	struct fake_call *c;
	char want[32];

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	cf.redis.wait_replicas = 1;
	if (late_replicas[_i].behind)
		waits(1, "a", &w);
	ck_assert_int_eq(acquire(i, "a", &a), 0);
	fake_grant(expect(FAKE_ACQUIRE, "a"), 4);
	c = expect(FAKE_WAIT, "a");
	run_ms(100); /* past the lease the grant was asked for */
	fake_grant(c, 1);
	ck_assert_str_eq(told_take(), ""); /* late: given back */
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_OK);
	ck_assert(wait_calls(1)); /* it asks again, still queued */
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert_uint_eq(c->ask.ticket, (uint64_t)i);
	fake_grant(c, 5);
	/* The trier asks along with the take; Redis answers in order. */
	if (late_replicas[_i].behind)
		fake_refuse(expect(FAKE_ACQUIRE, "a"), 100, 5);
	ck_assert_str_eq(told_take(), ""); /* not before the replicas */
	c = expect(FAKE_WAIT, "a");
	ck_assert_ptr_null(hold_of(i, "a"));
	fake_grant(c, 1);
	snprintf(want, sizeof want, "%d OK fence=5 ttl=100", i);
	ck_assert_str_eq(told_take(), want);
	ck_assert_uint_eq(hold_of(i, "a")->fence, 5);
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* -- The same token again -- */

/* From another connection: no queue, the same fence back, and a shorter
 * TTL shortens the first hold's validity from the moment it is sent.
 * Both then end together, and only the last of them releases. */
START_TEST(test_same_token_regrant)
{
	struct lock_acquire_args a = args(1000, -1), b = args(100, -1);
	struct lock_acquire_args w = args(0, -1);
	struct fake_call *c;
	const char *t;

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	a.token = b.token = "shared-tok";
	hold(1, "a", &a, 1);
	ck_assert_int_eq(acquire(3, "a", &w), 0); /* a waiter behind */
	fake_refuse(expect(FAKE_ACQUIRE, "a"), 100000, 1);
	ck_assert_uint_gt(ttl_left(1, "a"), 500);
	ck_assert_int_eq(acquire(2, "a", &b), 0);
	ck_assert_uint_le(ttl_left(1, "a"), 100);
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert_str_eq(c->ask.token, "shared-tok");
	ck_assert_uint_eq(c->ask.ttl_ms, 100);
	ck_assert_uint_eq(c->ask.mark_ms, 0);
	fake_grant(c, 1);
	ck_assert_str_eq(told_take(), "2 OK fence=1 ttl=100");
	ck_assert_uint_eq(hold_of(2, "a")->fence, 1);
	ck_assert_uint_eq(hold_of(2, "a")->kind, LOCK_FIXED);
	ck_assert_uint_le(ttl_left(1, "a"), 100);
	ck_assert(wait_told(2));
	/* Both end at the same moment, in either order. */
	t = told_take();
	ck_assert_msg(
	    strcmp(t, "1 LOST a 1 expired; 2 LOST a 1 expired") == 0 ||
		strcmp(t, "2 LOST a 1 expired; 1 LOST a 1 expired") == 0,
	    "told %s", t);
	/* One release, for the last, and the waiter's try. */
	ck_assert_uint_eq(fake_count(), 2);
	ck_assert_uint_eq(expect_find(FAKE_RELEASE, "a")->fence, 1);
	expect_find(FAKE_ACQUIRE, "a");
}
END_TEST

/* A same-token re-grant answered after its lease ended: ERR UNAVAILABLE,
 * and the other hold under the token, which trusted the shorter lease
 * from the moment it was sent, has ended with it; the grant is given
 * back. */
START_TEST(test_same_token_late)
{
	struct lock_acquire_args a = args(1000, -1), b = args(20, -1);
	struct fake_call *c;

	a.token = b.token = "tokL";
	hold(1, "a", &a, 1);
	ck_assert_int_eq(acquire(2, "a", &b), 0);
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert(wait_told(1));
	ck_assert_str_eq(told_take(), "1 LOST a 1 expired");
	run_ms(10);
	fake_grant(c, 1);
	ck_assert_str_eq(told_take(),
	    "2 ERR UNAVAILABLE the grant came after "
	    "its lease ended; Redis is slow");
	ck_assert_ptr_null(hold_of(2, "a"));
	/* The expired hold left it to the re-grant; the re-grant gives it
	 * back. */
	ck_assert_uint_eq(fake_count(), 1);
	c = expect(FAKE_RELEASE, "a");
	ck_assert_str_eq(c->token, "tokL");
	ck_assert_uint_eq(c->fence, 1);
}
END_TEST

/* Asked again on its own connection: the hold is updated in place, its
 * kind too; answered NO, the token's holds here are stale (stolen). */
START_TEST(test_same_token_own_connection)
{
	struct lock_acquire_args a = args(0, -1), b = args(500, -1);

	a.token = b.token = "t1";
	hold(1, "a", &a, 4);
	hold(2, "a", &a, 4); /* another connection, same grant */
	ck_assert_int_eq(acquire(1, "a", &b), 0);
	fake_grant(expect(FAKE_ACQUIRE, "a"), 4);
	ck_assert_str_eq(told_take(), "1 OK fence=4 ttl=500");
	ck_assert_uint_eq(O(1)->nholds, 1);
	ck_assert_int_eq(hold_of(1, "a")->kind, LOCK_FIXED);
	ck_assert_int_eq(acquire(1, "a", &b), 0);
	fake_refuse(expect(FAKE_ACQUIRE, "a"), 100, 9);
	ck_assert_str_eq(told_take(),
	    "2 LOST a 4 stolen; 1 LOST a 4 stolen; "
	    "1 TIMEOUT");
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* Another token of this connection: ERR HELD at once. */
START_TEST(test_same_connection_other_token)
{
	struct lock_acquire_args a = args(0, -1);

	hold(1, "a", &a, 1);
	ck_assert_int_eq(acquire(1, "a", &a), -1);
	ck_assert_str_eq(
	    told_take(), "1 ERR HELD this connection holds it already");
}
END_TEST

/* -- EXTEND -- */

static const struct {
	uint64_t ttl_ms;
	enum lockdb_status st;
	const char *told;
	bool held;
	uint64_t max_left, min_left; /* the hold's validity after */
} extends[] = {
	{ 500, LDB_OK, "1 OK ttl=500", true, 500, 400 },
	{ 5000, LDB_OK, "1 OK ttl=5000", true, 5000, 1000 },
	{ 500, LDB_NO, "1 ERR NOTHELD the lock is not held by this token",
	    false },
	/* No answer: the shorter lease may have been set; a longer one
	 * may not have. */
	{ 500, LDB_UNAVAILABLE,
	    "1 ERR UNAVAILABLE Redis did not answer in time", true, 500, 1 },
	{ 5000, LDB_UNAVAILABLE,
	    "1 ERR UNAVAILABLE Redis did not answer in time", true, 1000, 1 },
};

START_TEST(test_extend)
{
	struct lock_acquire_args a = args(1000, -1);
	struct fake_call *c;
	char tok[PROTO_TOKEN_MAX + 1];

	snprintf(tok, sizeof tok, "%s", hold(1, "a", &a, 2));
	ck_assert_int_eq(extend(1, "a", extends[_i].ttl_ms, NULL), 0);
	c = expect(FAKE_EXTEND, "a");
	ck_assert_str_eq(c->token, tok);
	ck_assert_uint_eq(c->ttl_ms, extends[_i].ttl_ms);
	ck_assert_uint_le(ttl_left(1, "a"), extends[_i].ttl_ms);
	fake_reply(c, extends[_i].st);
	ck_assert_str_eq(told_take(), extends[_i].told);
	if (!extends[_i].held) {
		ck_assert_ptr_null(hold_of(1, "a"));
		return;
	}
	ck_assert_uint_le(ttl_left(1, "a"), extends[_i].max_left);
	ck_assert_uint_ge(ttl_left(1, "a"), extends[_i].min_left);
	ck_assert_int_eq(hold_of(1, "a")->kind, LOCK_FIXED);
}
END_TEST

/* EXTEND refused before Redis: a session lock, a bad TTL, nothing held. */
START_TEST(test_extend_refused)
{
	struct lock_acquire_args a = args(0, -1);

	hold(1, "a", &a, 1);
	ck_assert_int_eq(extend(1, "a", 500, NULL), -1);
	ck_assert_int_eq(extend(1, "a", 5, NULL), -1);
	ck_assert_int_eq(extend(1, "b", 500, NULL), -1);
	ck_assert_str_eq(told_take(),
	    "1 ERR ARGS a session lock is renewed by the broker; EXTEND is "
	    "for TTL locks; "
	    "1 ERR ARGS ttl must be between 10 and 86400000 ms; "
	    "1 ERR NOTHELD this connection does not hold it "
	    "(give TOKEN <t> for a grant made elsewhere)");
	ck_assert_uint_eq(fake_count(), 0);
	/* With TOKEN anyone may ask; Redis decides. */
	ck_assert_int_eq(extend(2, "b", 500, "x"), 0);
	fake_reply(expect(FAKE_EXTEND, "b"), LDB_INTERNAL);
	ck_assert_str_eq(
	    told_take(), "2 ERR INTERNAL unexpected reply from Redis");
}
END_TEST

/* Two EXTENDs of one grant in Redis at once: Redis runs them in order, so
 * only the answer to the last one sent sets the lease; an earlier one's
 * may only shorten it (docs/protocol.md §3). Either order of answers
 * leaves the hold on the last one's lease. */
START_TEST(test_extend_answers_out_of_order)
{
	struct lock_acquire_args a = args(1000, -1);
	struct fake_call *first, *last;

	a.token = "tokE";
	hold(1, "a", &a, 1);
	ck_assert_int_eq(extend(2, "a", 5000, "tokE"), 0);
	ck_assert_int_eq(extend(3, "a", 3000, "tokE"), 0);
	first = expect(FAKE_EXTEND, "a");
	last = fake_pending(1);
	ck_assert_uint_eq(last->ttl_ms, 3000);
	if (_i == 0) {
		fake_reply(first, LDB_OK);
		ck_assert_uint_le(ttl_left(1, "a"), 1000); /* not yet */
		fake_reply(last, LDB_OK);
	} else {
		fake_reply(last, LDB_OK);
		fake_reply(first, LDB_OK); /* earlier and longer: ignored */
	}
	ck_assert_uint_gt(ttl_left(1, "a"), 2000);
	ck_assert_uint_le(ttl_left(1, "a"), 3000);
	ck_assert_str_eq(told_take(),
	    _i == 0 ? "2 OK ttl=5000; 3 OK ttl=3000"
		    : "3 OK ttl=3000; 2 OK ttl=5000");
}
END_TEST

/* A same-token ACQUIRE in the other family assumes no lease: refused by
 * Redis (CONFLICT), the holder keeps what it had. */
START_TEST(test_same_token_other_family)
{
	struct lock_acquire_args a = args(1000, -1), s = args(100, -1);
	struct lockdb_reply r = { .status = LDB_CONFLICT,
		.mode = LDB_EXCLUSIVE };

	a.token = s.token = "tokF";
	s.mode = LOCK_SHARED;
	hold(1, "a", &a, 1);
	ck_assert_int_eq(acquire(2, "a", &s), 0);
	ck_assert_uint_gt(ttl_left(1, "a"), 500);
	fake_answer(expect(FAKE_ACQUIRE, "a"), &r);
	ck_assert_str_eq(
	    told_take(), "2 ERR ARGS this token holds it exclusively");
	ck_assert_uint_gt(ttl_left(1, "a"), 500);
	ck_assert_ptr_nonnull(hold_of(1, "a"));
}
END_TEST

/* A RELEASE by token: the token's holds of other connections here are
 * lost when it is sent, whatever Redis answers. */
START_TEST(test_release_by_token_tells_others)
{
	struct lock_acquire_args a = args(1000, -1);

	a.token = "tokR";
	hold(1, "a", &a, 1);
	hold(2, "a", &a, 1);
	ck_assert_int_eq(release(3, "a", "tokR"), 0);
	ck_assert_str_eq(told_take(), "2 LOST a 1 revoked; 1 LOST a 1 revoked");
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_NO);
	ck_assert_str_eq(
	    told_take(), "3 ERR NOTHELD the lock is not held by this token");
}
END_TEST

/* A RELEASE … TOKEN of a lock nobody here holds is not redone after
 * ERR UNAVAILABLE: the broker could not tell that grant from a later
 * one. */
START_TEST(test_release_by_token_not_redone)
{
	cf.redis.command_timeout_ms = 10000;
	ck_assert_int_eq(release(1, "a", "elsewhere"), 0);
	ck_assert_uint_eq(expect(FAKE_RELEASE, "a")->fence, 0);
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_UNAVAILABLE);
	ck_assert_str_eq(
	    told_take(), "1 ERR UNAVAILABLE Redis did not answer in time");
	fake_connect();
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* Redis trouble does not end a wait (the head tries again); ERR INTERNAL
 * does; a try-once answers either. */
static const struct {
	int64_t wait_ms;
	enum lockdb_status st;
	const char *told; /* "" : still waiting, and tries again */
} troubles[] = {
	{ -1, LDB_UNAVAILABLE, "" },
	{ -1, LDB_INTERNAL, "1 ERR INTERNAL unexpected reply from Redis" },
	{ 0, LDB_UNAVAILABLE,
	    "1 ERR UNAVAILABLE Redis did not answer in time" },
	{ 0, LDB_INTERNAL, "1 ERR INTERNAL unexpected reply from Redis" },
};

START_TEST(test_redis_trouble_while_waiting)
{
	struct lock_acquire_args a = args(0, troubles[_i].wait_ms);

	a.token = "tokW"; /* nothing owed for a client's token */
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	fake_reply(expect(FAKE_ACQUIRE, "a"), troubles[_i].st);
	ck_assert_str_eq(told_take(), troubles[_i].told);
	if (troubles[_i].told[0] != '\0') {
		ck_assert_ptr_null(O(1)->pending);
		/* A waiter gives its place in the queue up. */
		if (troubles[_i].wait_ms != 0)
			fake_reply(expect(FAKE_CANCEL, "a"), LDB_OK);
		run_ms(20);
		ck_assert_uint_eq(fake_count(), 0);
		return;
	}
	ck_assert(wait_calls(1));
	fake_grant(expect(FAKE_ACQUIRE, "a"), 2);
	ck_assert_str_eq(told_take(), "1 OK fence=2 ttl=10000");
}
END_TEST

/* -- Releases owed to Redis -- */

/* A RELEASE Redis did not answer: the hold is forgotten, and the release
 * is done (that grant's token and fence) when Redis is back. */
START_TEST(test_owed_release_on_connect)
{
	struct lock_acquire_args a = args(5000, -1);
	struct fake_call *c;

	cf.redis.command_timeout_ms = 10000; /* only fake_connect retries */
	a.token = "tokA";
	hold(1, "a", &a, 1);
	ck_assert_int_eq(release(1, "a", NULL), 0);
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_UNAVAILABLE);
	ck_assert_str_eq(
	    told_take(), "1 ERR UNAVAILABLE Redis did not answer in time");
	ck_assert_ptr_null(hold_of(1, "a"));
	ck_assert_uint_eq(fake_count(), 0);
	fake_set_up(false);
	fake_connect(); /* not up after all: nothing sent */
	ck_assert_uint_eq(fake_count(), 0);
	fake_set_up(true);
	fake_connect();
	c = expect(FAKE_RELEASE, "a");
	ck_assert_str_eq(c->token, "tokA");
	ck_assert_uint_eq(c->fence, 1);
	ck_assert_int_eq(c->done, LDB_DONE_IF_WAITED);
	ck_assert_uint_eq(c->done_ms, config_mark_ms(&cf));
	fake_reply(c, LDB_UNAVAILABLE); /* owed again */
	ck_assert_uint_eq(fake_count(), 0);
	fake_connect();
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_OK);
	fake_connect(); /* nothing owed any more */
	ck_assert_uint_eq(fake_count(), 0);
	ck_assert_str_eq(told_take(), "");
}
END_TEST

/* Releases owed are bounded by limits.max_waiters: past that the oldest
 * is left to its lease. */
/* On a cluster an owed release is done once its own master is up: one
 * master down keeps only its names' releases owed. */
START_TEST(test_owed_release_per_master)
{
	struct lock_acquire_args a = args(5000, -1);

	cf.redis.command_timeout_ms = 10000; /* only fake_connect retries */
	fake_set_scoped(true);
	hold(1, "s1:a", &a, 1);
	hold(2, "s2:b", &a, 2);
	ck_assert_int_eq(release(1, "s1:a", NULL), 0);
	fake_reply(expect(FAKE_RELEASE, "s1:a"), LDB_UNAVAILABLE);
	ck_assert_int_eq(release(2, "s2:b", NULL), 0);
	fake_reply(expect(FAKE_RELEASE, "s2:b"), LDB_UNAVAILABLE);
	told_take();
	fake_set_scope_down(1, true);
	fake_connect(); /* s2:b's master is up, s1:a's not */
	fake_reply(expect(FAKE_RELEASE, "s2:b"), LDB_OK);
	ck_assert_uint_eq(fake_count(), 0);
	fake_set_scope_down(1, false);
	fake_connect();
	fake_reply(expect(FAKE_RELEASE, "s1:a"), LDB_OK);
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

START_TEST(test_owed_release_bound)
{
	struct lock_acquire_args a = args(5000, -1);

	cf.redis.command_timeout_ms = 10000;
	cf.limits.max_waiters = 1;
	hold(1, "a", &a, 1);
	hold(2, "b", &a, 2);
	ck_assert_int_eq(release(1, "a", NULL), 0);
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_UNAVAILABLE);
	ck_assert_int_eq(release(2, "b", NULL), 0);
	fake_reply(expect(FAKE_RELEASE, "b"), LDB_UNAVAILABLE);
	fake_connect();
	ck_assert_uint_eq(expect(FAKE_RELEASE, "b")->fence, 2);
	ck_assert_uint_eq(fake_count(), 1);
}
END_TEST

/* It is also tried again after command_timeout_ms (Redis was only slow);
 * a lease that ran out meanwhile is not released. */
START_TEST(test_owed_release_timer)
{
	struct lock_acquire_args a = args(5000, -1), b = args(20, -1);

	hold(1, "a", &a, 1);
	hold(2, "b", &b, 1);
	ck_assert_int_eq(release(1, "a", NULL), 0);
	ck_assert_int_eq(release(2, "b", NULL), 0);
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_UNAVAILABLE);
	fake_reply(expect(FAKE_RELEASE, "b"), LDB_UNAVAILABLE);
	ntold = 0;
	ck_assert(wait_calls(1));
	ck_assert_uint_eq(fake_count(), 1);
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_NO); /* its lease ended */
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* An ACQUIRE with the token drops the release owed for it (it would
 * delete the grant the ACQUIRE may get back). */
START_TEST(test_owed_release_dropped_by_acquire)
{
	struct lock_acquire_args a = args(5000, -1);

	cf.redis.command_timeout_ms = 10000;
	a.token = "tokA";
	hold(1, "a", &a, 1);
	ck_assert_int_eq(release(1, "a", NULL), 0);
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_UNAVAILABLE);
	ntold = 0;
	ck_assert_int_eq(acquire(2, "a", &a), 0);
	ck_assert_str_eq(expect(FAKE_ACQUIRE, "a")->ask.token, "tokA");
	fake_connect();
	ck_assert_uint_eq(fake_count(), 1); /* the ACQUIRE only */
	fake_grant(expect(FAKE_ACQUIRE, "a"), 1);
	ck_assert_str_eq(told_take(), "2 OK fence=1 ttl=5000");
}
END_TEST

/* The same when the ACQUIRE is sent while the RELEASE is in Redis: the
 * RELEASE's UNAVAILABLE is then not redone. */
START_TEST(test_release_in_redis_forgotten)
{
	struct lock_acquire_args a = args(5000, -1);
	struct fake_call *rel;

	cf.redis.command_timeout_ms = 10000;
	a.token = "tokA";
	hold(1, "a", &a, 1);
	ck_assert_int_eq(release(1, "a", NULL), 0);
	rel = expect(FAKE_RELEASE, "a");
	ck_assert_int_eq(acquire(2, "a", &a), 0);
	fake_reply(rel, LDB_UNAVAILABLE);
	fake_connect();
	ck_assert_uint_eq(fake_count(), 1);
	expect(FAKE_ACQUIRE, "a");
}
END_TEST

/* -- STATUS, VALIDATE, WHO, REVOKE -- */

enum ask_kind {
	ASK_STATUS,
	ASK_VALIDATE,
	ASK_VALIDATE_TOKEN,
	ASK_WHO,
	ASK_REVOKE
};

static const struct lockdb_holder two[] = { { 900, "5 EXCLUSIVE b1 1@x 17" },
	{ 800, "" } };

static const struct {
	enum ask_kind ask;
	struct lockdb_reply r;
	const char *told;
} asks[] = {
	{ ASK_STATUS,
	    { .status = LDB_OK,
		.fence = 5,
		.pttl = 800,
		.mode = LDB_SHARED,
		.count = 3 },
	    "1 HELD fence=5 ttl=800 SHARED count=3" },
	{ ASK_STATUS,
	    { .status = LDB_OK,
		.fence = 6,
		.pttl = 70,
		.mode = LDB_LIMIT,
		.limit = 4,
		.count = 1 },
	    "1 HELD fence=6 ttl=70 LIMIT=4 count=1" },
	{ ASK_STATUS, { .status = LDB_NO }, "1 FREE" },
	{ ASK_STATUS, { .status = LDB_UNAVAILABLE, .busy = "MASTERDOWN" },
	    "1 ERR UNAVAILABLE Redis answered MASTERDOWN" },
	{ ASK_STATUS, { .status = LDB_INTERNAL },
	    "1 ERR INTERNAL unexpected reply from Redis" },
	{ ASK_VALIDATE, { .status = LDB_OK, .fence = 7, .valid = true },
	    "1 OK fence=7 valid" },
	{ ASK_VALIDATE, { .status = LDB_OK, .fence = 8, .valid = false },
	    "1 OK fence=7" },
	{ ASK_VALIDATE, { .status = LDB_NO }, "1 OK fence=7" },
	{ ASK_VALIDATE_TOKEN, { .status = LDB_OK, .fence = 7, .valid = true },
	    "1 OK fence=7 valid" },
	{ ASK_VALIDATE_TOKEN, { .status = LDB_UNAVAILABLE },
	    "1 ERR UNAVAILABLE Redis did not answer in time" },
	{ ASK_WHO, { .status = LDB_OK, .nholders = 2, .holders = two },
	    "1 OK [900 5 EXCLUSIVE b1 1@x 17] [800 ]" },
	{ ASK_WHO, { .status = LDB_OK }, "1 OK" },
	{ ASK_WHO, { .status = LDB_UNAVAILABLE },
	    "1 ERR UNAVAILABLE Redis did not answer in time" },
	{ ASK_REVOKE, { .status = LDB_OK, .count = 2 }, "1 OK count=2" },
	{ ASK_REVOKE, { .status = LDB_OK }, "1 OK" },
	{ ASK_REVOKE, { .status = LDB_INTERNAL },
	    "1 ERR INTERNAL unexpected reply from Redis" },
};

START_TEST(test_queries)
{
	struct lock_result res;
	struct fake_call *c;
	int rc = -1;

	switch (asks[_i].ask) {
	case ASK_STATUS:
		rc = lock_status(O(1), "a", &res);
		break;
	case ASK_VALIDATE:
		rc = lock_validate(O(1), "a", 7, NULL, &res);
		break;
	case ASK_VALIDATE_TOKEN:
		rc = lock_validate(O(1), "a", 7, "tok", &res);
		break;
	case ASK_WHO:
		rc = lock_who(O(1), "a", &res);
		break;
	case ASK_REVOKE:
		rc = lock_revoke(O(1), "a", &res);
		break;
	}
	ck_assert_int_eq(rc, 0);
	c = fake_next();
	ck_assert_ptr_nonnull(c);
	ck_assert_str_eq(c->name, "a");
	ck_assert_uint_eq(fake_count(), 1);
	if (asks[_i].ask == ASK_STATUS) {
		ck_assert_int_eq(c->op, FAKE_STATUS);
		ck_assert_uint_eq(c->fence, 0);
		ck_assert(!c->has_token);
	} else if (asks[_i].ask == ASK_VALIDATE ||
	    asks[_i].ask == ASK_VALIDATE_TOKEN) {
		ck_assert_int_eq(c->op, FAKE_STATUS);
		ck_assert_uint_eq(c->fence, 7);
		ck_assert(c->has_token == (asks[_i].ask == ASK_VALIDATE_TOKEN));
		if (c->has_token)
			ck_assert_str_eq(c->token, "tok");
	} else if (asks[_i].ask == ASK_WHO) {
		ck_assert_int_eq(c->op, FAKE_WHO);
	} else {
		ck_assert_int_eq(c->op, FAKE_REVOKE);
		ck_assert_uint_eq(c->keep_ms, (uint64_t)cf.locks.max_ttl_ms);
	}
	fake_answer(c, &asks[_i].r);
	ck_assert_str_eq(told_take(), asks[_i].told);
	ck_assert_ptr_null(O(1)->pending);
	ck_assert_uint_eq(names_alive(), 0);
}
END_TEST

/* Bad names and tokens are answered before Redis. */
START_TEST(test_queries_refused)
{
	struct lock_result res;
	static char long_name[300];

	memset(long_name, 'x', sizeof long_name - 1);
	ck_assert_int_eq(answered(O(1), lock_status(O(1), "", &res), &res), -1);
	ck_assert_int_eq(
	    answered(O(1), lock_who(O(1), long_name, &res), &res), -1);
	ck_assert_int_eq(
	    answered(O(1), lock_revoke(O(1), "a b", &res), &res), -1);
	ck_assert_int_eq(
	    answered(O(1), lock_validate(O(1), "a", 1, "t/t", &res), &res), -1);
	ck_assert_str_eq(told_take(),
	    "1 ERR NAME a name is 1-200 bytes of 0x21-0x7E or 0x80-0xFF; "
	    "1 ERR NAME a name is 1-200 bytes of 0x21-0x7E or 0x80-0xFF; "
	    "1 ERR NAME a name is 1-200 bytes of 0x21-0x7E or 0x80-0xFF; "
	    "1 ERR ARGS a token is 1-64 of A-Z a-z 0-9 _ . -");
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* -- News on the release channel -- */

static const struct {
	enum lockdb_news_kind kind;
	uint64_t fence;
	const char *told;
} news[] = {
	{ LDB_NEWS_REVOKED, 3, "1 LOST a 3 revoked" },
	{ LDB_NEWS_REVOKED, 4, "1 LOST a 3 revoked" }, /* and older */
	{ LDB_NEWS_REVOKED, 2, "" },		       /* a newer grant */
	{ LDB_NEWS_GONE, 3, "1 LOST a 3 revoked" },
	{ LDB_NEWS_GONE, 4, "" },
	{ LDB_NEWS_RELEASED, 3, "" },
};

START_TEST(test_news_on_hold)
{
	struct lock_acquire_args a = args(5000, -1);

	hold(1, "a", &a, 3);
	fake_news(news[_i].kind, "a", news[_i].fence);
	ck_assert_str_eq(told_take(), news[_i].told);
	ck_assert((hold_of(1, "a") == NULL) == (strlen(news[_i].told) > 0));
	/* Not ours any more in Redis: nothing released. */
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* News of a grant that comes before the grant's own answer (the
 * subscriber is another connection): it is lost as soon as it is made;
 * a later grant is not. */
static const enum lockdb_news_kind early[] = { LDB_NEWS_REVOKED, LDB_NEWS_GONE,
	LDB_NEWS_RELEASED };

START_TEST(test_news_before_grant)
{
	struct lock_acquire_args a = args(0, -1);

	ck_assert_int_eq(acquire(1, "a", &a), 0);
	ck_assert_int_eq(acquire(2, "b", &a), 0);
	fake_news(early[_i], "a", 5);
	fake_news(early[_i], "b", 5);
	fake_grant(expect(FAKE_ACQUIRE, "a"), 5);
	fake_grant(expect(FAKE_ACQUIRE, "b"), 6);
	if (early[_i] == LDB_NEWS_RELEASED)
		ck_assert_str_eq(told_take(),
		    "1 OK fence=5 ttl=10000; 2 OK fence=6 ttl=10000");
	else
		ck_assert_str_eq(told_take(),
		    "1 OK fence=5 ttl=10000; "
		    "1 LOST a 5 revoked; "
		    "2 OK fence=6 ttl=10000");
}
END_TEST

/* Subscribed again: every hold is checked (token and fence); OK keeps
 * it, NO loses it (revoked if a REVOKE with its fence is remembered,
 * else stolen), no answer asks again (after a back-off) until one
 * comes. */
START_TEST(test_missed_checks)
{
	struct lock_acquire_args a = args(5000, -1);
	struct lockdb_reply revoked = { .status = LDB_NO, .fence = 2 };
	struct fake_call *c;
	char tok2[PROTO_TOKEN_MAX + 1];

	hold(1, "a", &a, 1);
	snprintf(tok2, sizeof tok2, "%s", hold(2, "b", &a, 2));
	hold(3, "c", &a, 3);
	hold(4, "d", &a, 4);
	fake_news(LDB_NEWS_MISSED, NULL, 0);
	ck_assert_uint_eq(fake_count(), 4);
	c = expect_find(FAKE_CHECK, "b");
	ck_assert_str_eq(c->token, tok2);
	ck_assert_uint_eq(c->fence, 2);
	fake_reply(expect_find(FAKE_CHECK, "a"), LDB_OK);
	fake_answer(expect_find(FAKE_CHECK, "b"), &revoked);
	fake_reply(expect_find(FAKE_CHECK, "c"), LDB_NO);
	fake_reply(expect_find(FAKE_CHECK, "d"), LDB_UNAVAILABLE);
	ck_assert_str_eq(told_take(), "2 LOST b 2 revoked; 3 LOST c 3 stolen");
	ck_assert_uint_eq(fake_count(), 0);
	ck_assert(wait_calls(1));
	fake_reply(expect(FAKE_CHECK, "d"), LDB_INTERNAL);
	ck_assert(wait_calls(1));
	fake_reply(expect(FAKE_CHECK, "d"), LDB_NO);
	ck_assert_str_eq(told_take(), "4 LOST d 4 stolen");
	ck_assert_ptr_nonnull(hold_of(1, "a"));
}
END_TEST

/* Missed again while the check is in Redis: asked once more after it. */
START_TEST(test_missed_again)
{
	struct lock_acquire_args a = args(5000, -1);

	hold(1, "a", &a, 1);
	fake_news(LDB_NEWS_MISSED, NULL, 0);
	fake_news(LDB_NEWS_MISSED, NULL, 0);
	ck_assert_uint_eq(fake_count(), 1);
	fake_reply(expect(FAKE_CHECK, "a"), LDB_OK);
	fake_reply(expect(FAKE_CHECK, "a"), LDB_OK);
	ck_assert_uint_eq(fake_count(), 0);
	ck_assert_str_eq(told_take(), "");
}
END_TEST

/* A grant whose ACQUIRE was sent before the subscription was made again
 * is checked as soon as it is made; a waiter asks at once. */
START_TEST(test_missed_while_acquiring)
{
	struct lock_acquire_args a = args(0, -1);

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	ck_assert_int_eq(acquire(2, "b", &a), 0);
	fake_refuse(fake_find(FAKE_ACQUIRE, "b"), 100000, 1);
	fake_news(LDB_NEWS_MISSED, NULL, 0);
	fake_grant(expect(FAKE_ACQUIRE, "a"), 5);
	ck_assert_str_eq(told_take(), "1 OK fence=5 ttl=10000");
	expect_find(FAKE_CHECK, "a");
	expect_find(FAKE_ACQUIRE, "b"); /* the trier of b asks at once */
}
END_TEST

/* The queue's first ticket is another of ours (the trier's grant came
 * late and was given back, so it queued again behind it): Redis's refusal
 * names it, and its waiter asks at once; nobody else would. */
START_TEST(test_head_of_the_queue_here_is_asked)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	waits(1, "a", &a);
	waits(2, "a", &a);
	ck_assert_uint_eq(fake_count(), 0);
	fake_news(LDB_NEWS_RELEASED, "a", 0);
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert_uint_eq(c->ask.ticket, 1);
	fake_reply_head(c, 2); /* refused: free, but ticket 2 is first */
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert_uint_eq(c->ask.ticket, 2);
	fake_grant(c, 7);
	ck_assert_str_eq(told_take(), "2 OK fence=7 ttl=10000");
}
END_TEST

/* /metrics' oldest hold: none is 0; then the age of the first grant,
 * whichever holds came after it. */
START_TEST(test_oldest_hold)
{
	struct lock_acquire_args a = args(0, -1);
	uint64_t age;

	ck_assert_uint_eq(lock_oldest_hold_ms(), 0);
	hold(1, "a", &a, 1);
	run_ms(60);
	hold(2, "b", &a, 1);
	age = lock_oldest_hold_ms();
	ck_assert_uint_ge(age, 50);
	ck_assert_uint_lt(age, 5000);
	ck_assert_int_eq(release(1, "a", NULL), 0);
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_OK);
	ck_assert_uint_lt(lock_oldest_hold_ms(), age);
}
END_TEST

/* -- Sharing modes -- */

/* Readers share: after a SHARED grant the next in the queue tries at
 * once; LOCKS shows the mode. */
START_TEST(test_shared_and_limit)
{
	struct lock_acquire_args s = args(0, -1), l = args(0, -1);
	struct fake_call *c;

	s.mode = LOCK_SHARED;
	l.mode = LOCK_LIMIT;
	l.limit = 3;
	ck_assert_int_eq(acquire(1, "a", &s), 0);
	ck_assert_int_eq(acquire(2, "a", &s), 0);
	ck_assert_uint_eq(fake_count(), 2); /* each asks for its place */
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert_int_eq(c->ask.mode, LDB_SHARED);
	ck_assert_msg(
	    strncmp(c->ask.info, "SHARED ", 7) == 0, "%s", c->ask.info);
	fake_grant(c, 1);
	fake_grant(expect(FAKE_ACQUIRE, "a"), 2);
	ck_assert_str_eq(
	    told_take(), "1 OK fence=1 ttl=10000; 2 OK fence=2 ttl=10000");
	ck_assert_str_eq(lock_hold_mode_word(hold_of(2, "a")), " SHARED");

	ck_assert_int_eq(acquire(3, "b", &l), 0);
	c = expect(FAKE_ACQUIRE, "b");
	ck_assert_int_eq(c->ask.mode, LDB_LIMIT);
	ck_assert_uint_eq(c->ask.limit, 3);
	ck_assert_msg(
	    strncmp(c->ask.info, "LIMIT=3 ", 8) == 0, "%s", c->ask.info);
	fake_grant(c, 1);
	ck_assert_str_eq(told_take(), "3 OK fence=1 ttl=10000");
	ck_assert_str_eq(lock_hold_mode_word(hold_of(3, "b")), " LIMIT=3");
	/* A release of a shared hold never hands over. */
	ck_assert_int_eq(release(1, "a", NULL), 0);
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_OK);
	ck_assert_str_eq(told_take(), "1 OK");
}
END_TEST

/* Held in another mode: ERR ARGS, no more waiting. */
static const struct {
	enum lock_mode ask;
	unsigned ask_limit;
	enum lockdb_mode held;
	unsigned held_limit;
	const char *told;
} conflicts[] = {
	{ LOCK_SHARED, 0, LDB_LIMIT, 2,
	    "1 ERR ARGS the lock is held with "
	    "LIMIT 2" },
	{ LOCK_LIMIT, 3, LDB_SHARED, 0, "1 ERR ARGS the lock is held SHARED" },
	{ LOCK_LIMIT, 3, LDB_LIMIT, 5,
	    "1 ERR ARGS the lock is held with "
	    "LIMIT 5" },
	{ LOCK_SHARED, 0, LDB_EXCLUSIVE, 0,
	    "1 ERR ARGS this token holds it "
	    "exclusively" },
	{ LOCK_EXCLUSIVE, 0, LDB_SHARED, 0,
	    "1 ERR ARGS this token holds it "
	    "SHARED" },
	{ LOCK_EXCLUSIVE, 0, LDB_LIMIT, 4,
	    "1 ERR ARGS this token holds it "
	    "with LIMIT 4" },
};

START_TEST(test_conflict)
{
	struct lock_acquire_args a = args(0, -1), w = args(0, -1);
	struct lockdb_reply r = { .status = LDB_CONFLICT,
		.mode = conflicts[_i].held,
		.limit = conflicts[_i].held_limit };

	a.mode = conflicts[_i].ask;
	a.limit = conflicts[_i].ask_limit;
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	ck_assert_int_eq(acquire(2, "a", &w), 0); /* behind it */
	fake_answer(expect(FAKE_ACQUIRE, "a"), &r);
	ck_assert_str_eq(told_take(), conflicts[_i].told);
	ck_assert(wait_calls(1)); /* the next tries at once */
	fake_grant(expect(FAKE_ACQUIRE, "a"), 3);
	ck_assert_str_eq(told_take(), "2 OK fence=3 ttl=10000");
}
END_TEST

/* A writer refused by readers marked itself: its next try says so, so
 * the grant clears the mark. */
START_TEST(test_writer_mark)
{
	struct lock_acquire_args a = args(0, -1);
	struct lockdb_reply r = {
		.status = LDB_NO, .pttl = 5000, .marked = true
	};
	struct fake_call *c;

	ck_assert_int_eq(acquire(1, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert(!c->ask.clear_writer);
	fake_answer(c, &r);
	ck_assert(wait_calls(1));
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert(c->ask.clear_writer);
	fake_grant(c, 2);
	ck_assert_str_eq(told_take(), "1 OK fence=2 ttl=10000");
}
END_TEST

/* -- FILL -- */

/* The leader gets OK; callers that came while it held wait on its fence
 * and are told DONE when it RELEASEs (a DONE-always release, no
 * hand-over). */
START_TEST(test_fill_done)
{
	struct lock_acquire_args f = args(0, -1);
	struct lockdb_reply done = { .status = LDB_DONE, .fence = 1 };
	struct fake_call *c;

	f.mode = LOCK_FILL;
	ck_assert_int_eq(acquire(1, "a", &f), 0);
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert_int_eq(c->ask.mode, LDB_FILL);
	ck_assert_uint_eq(c->ask.watch, 0);
	fake_grant(c, 1);
	ck_assert_str_eq(told_take(), "1 OK fence=1 ttl=10000");
	ck_assert_str_eq(lock_hold_mode_word(hold_of(1, "a")), " FILL");

	ck_assert_int_eq(acquire(2, "a", &f), 0);
	ck_assert_int_eq(acquire(3, "a", &f), 0);
	c = expect(FAKE_ACQUIRE, "a"); /* a FILL asks even while held here */
	ck_assert_uint_eq(fake_count(), 1);
	ck_assert_uint_eq(c->ask.watch, 1);
	fake_refuse(c, 100000, 1);

	ck_assert_int_eq(release(1, "a", NULL), 0);
	c = expect_find(FAKE_RELEASE, "a");
	ck_assert_int_eq(c->done, LDB_DONE_ALWAYS);
	fake_reply(c, LDB_OK);
	ck_assert_str_eq(told_take(), "1 OK");
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert_uint_eq(c->ask.watch, 1);
	fake_answer(c, &done);
	ck_assert_str_eq(told_take(), "2 DONE; 3 DONE");
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* A leader whose lock ends otherwise: no DONE, the next caller leads. */
START_TEST(test_fill_leader_lost)
{
	struct lock_acquire_args f = args(50, -1), g = args(0, -1);

	/* The waiter's only try after its refusal is the one the loss
	 * makes. */
	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	f.mode = g.mode = LOCK_FILL;
	hold(1, "a", &f, 1);
	ck_assert_int_eq(acquire(2, "a", &g), 0);
	fake_refuse(expect(FAKE_ACQUIRE, "a"), 100000, 1);
	ck_assert(wait_told(1));
	ck_assert_str_eq(told_take(), "1 LOST a 1 expired");
	ck_assert_uint_eq(fake_count(), 2);
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_OK);
	fake_grant(expect(FAKE_ACQUIRE, "a"), 2);
	ck_assert_str_eq(told_take(), "2 OK fence=2 ttl=10000");
}
END_TEST

/* A FILL try-once never hears DONE: TIMEOUT. */
START_TEST(test_fill_try_once)
{
	struct lock_acquire_args f = args(0, 0);
	struct lockdb_reply done = { .status = LDB_DONE, .fence = 1 };

	f.mode = LOCK_FILL;
	ck_assert_int_eq(acquire(1, "a", &f), 0);
	fake_refuse(expect(FAKE_ACQUIRE, "a"), 100, 1);
	ck_assert_str_eq(told_take(), "1 TIMEOUT");
	/* End of input turns a first try into a try-once: DONE is TIMEOUT. */
	f.wait_ms = -1;
	ck_assert_int_eq(acquire(2, "b", &f), 0);
	ck_assert(lock_owner_eof(O(2)));
	fake_answer(expect(FAKE_ACQUIRE, "b"), &done);
	ck_assert_str_eq(told_take(), "2 TIMEOUT");
}
END_TEST

/*
 * Owner 4 leaves while its try is in Redis, so the FILL of owner 3 that
 * comes next, first in the queue now, does not ask; owner 2 queues behind
 * it with a ticket and asks for its place. Returns 4's try, unanswered.
 */
static struct fake_call *
fill_first_unasked(int retry_ms)
{
	struct lock_acquire_args a = args(0, -1), f = args(0, -1);
	struct fake_call *c;

	f.mode = LOCK_FILL;
	cf.locks.retry_min_ms = cf.locks.retry_max_ms = retry_ms;
	ck_assert_int_eq(acquire(4, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	lock_owner_gone(O(4), false);
	ck_assert_int_eq(acquire(3, "a", &f), 0);
	ck_assert_int_eq(acquire(2, "a", &a), 0);
	return c;
}

/*
 * A FILL first in its broker's queue that has not asked yet (a try was
 * in Redis when it came), behind a waiter with a ticket that asks for the
 * queue: when its input ends it asks once at once, along with the trier
 * (docs/protocol.md §1), and a refusal or its leader's DONE is TIMEOUT.
 * It used to wait for its answer until it became the trier itself.
 */
START_TEST(test_fill_eof_behind_ticketed_trier)
{
	struct lockdb_reply done = { .status = LDB_DONE, .fence = 1 };
	struct fake_call *c, *fill = NULL, *trier = NULL;

	fake_refuse(fill_first_unasked(5000), 100000, 1);
	while ((c = fake_next()) != NULL) {
		ck_assert(c->op != FAKE_ACQUIRE || c->ask.mode != LDB_FILL);
		if (c->op == FAKE_ACQUIRE)
			fake_refuse(c, 100000, 1);
		else
			fake_reply(c, LDB_OK);
	}
	ck_assert(lock_owner_eof(O(3)));
	ck_assert_uint_eq(fake_count(), 2);
	for (unsigned k = 0; k < 2; k++) {
		c = fake_pending(k);
		ck_assert(c->op == FAKE_ACQUIRE);
		if (c->ask.mode == LDB_FILL)
			fill = c;
		else
			trier = c;
	}
	ck_assert_ptr_nonnull(fill);
	ck_assert_ptr_nonnull(trier);
	ck_assert_uint_ne(trier->ask.ticket, 0);
	ck_assert_uint_eq(fill->ask.ticket, 0);
	ck_assert_uint_eq(fill->ask.watch, 0);
	if (_i == 0)
		fake_refuse(fill, 100000, 1);
	else
		fake_answer(fill, &done);
	ck_assert_str_eq(told_take(), "3 TIMEOUT");
	fake_refuse(trier, 100000, 1);
	ck_assert_str_eq(told_take(), "");
}
END_TEST

/*
 * The same FILL once it has asked along with the trier and been refused:
 * it has started to wait, so the end of its input cancels it (the client
 * is taken as gone, docs/protocol.md §1), as any waiter's does. (Found in
 * review: it turned try-once and then never asked again.)
 */
START_TEST(test_fill_eof_after_asking_along)
{
	struct fake_call *c;
	unsigned fills = 0;

	fake_refuse(fill_first_unasked(40), 100000, 1);
	while ((c = fake_next()) != NULL)
		if (c->op == FAKE_ACQUIRE)
			fake_refuse(c, 100000, 1);
		else
			fake_reply(c, LDB_OK);
	/* The trier's next try takes the FILL along; both are refused. */
	ck_assert(wait_calls(2));
	while ((c = fake_next()) != NULL) {
		ck_assert(c->op == FAKE_ACQUIRE);
		fills += c->ask.mode == LDB_FILL;
		fake_refuse(c, 100000, 1);
	}
	ck_assert_uint_eq(fills, 1);
	ck_assert(!lock_owner_eof(O(3)));
	lock_owner_gone(O(3), true);
	ck_assert_str_eq(told_take(), "");
}
END_TEST

/*
 * A FILL that has not asked, its input ending while the trier's own try
 * is in Redis: it makes its one try at once, not at the trier's next.
 */
START_TEST(test_fill_eof_while_trier_in_redis)
{
	struct fake_call *c, *trier = NULL;

	fake_refuse(fill_first_unasked(5000), 100000, 1);
	for (unsigned k = 0; k < fake_count(); k++)
		if (fake_pending(k)->op == FAKE_ACQUIRE)
			trier = fake_pending(k);
	ck_assert_ptr_nonnull(trier);
	ck_assert_uint_ne(trier->ask.ticket, 0);
	ck_assert(lock_owner_eof(O(3)));
	c = expect_find(FAKE_ACQUIRE, "a");
	for (unsigned k = 0; k < fake_count(); k++)
		if (fake_pending(k)->op == FAKE_ACQUIRE &&
		    fake_pending(k)->ask.mode == LDB_FILL)
			c = fake_pending(k);
	ck_assert_int_eq(c->ask.mode, LDB_FILL);
	fake_refuse(c, 100000, 1);
	ck_assert_str_eq(told_take(), "3 TIMEOUT");
}
END_TEST

/* -- Stopping -- */

/* lock_stop: every waiter is told ERR SHUTDOWN (its place in the queue
 * given up), new ACQUIREs are refused, holds stay, and a release Redis
 * does not answer is left to its lease. */
START_TEST(test_stop)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *c;

	hold(1, "a", &a, 1);
	waits(2, "a", &a);
	ck_assert_int_eq(acquire(3, "b", &a), 0);
	c = expect(FAKE_ACQUIRE, "b");
	lock_stop();
	ck_assert_str_eq(told_take(),
	    "2 ERR SHUTDOWN the broker is stopping; "
	    "3 ERR SHUTDOWN the broker is stopping");
	/* Their places in the queue are given up (order: the name table's). */
	ck_assert_uint_eq(fake_count(), 3);
	fake_reply(expect_find(FAKE_CANCEL, "a"), LDB_OK);
	fake_reply(expect_find(FAKE_CANCEL, "b"), LDB_OK);
	ck_assert_int_eq(acquire(4, "c", &a), -1);
	ck_assert_str_eq(told_take(), "4 ERR SHUTDOWN the broker is stopping");
	/* The try in Redis lands granted: released, nobody told. */
	fake_grant(c, 2);
	ck_assert_uint_eq(expect(FAKE_RELEASE, "b")->fence, 2);
	fake_reply(expect(FAKE_RELEASE, "b"), LDB_OK);
	ck_assert_ptr_nonnull(hold_of(1, "a"));
	ck_assert_int_eq(release(1, "a", NULL), 0);
	fake_reply(expect(FAKE_RELEASE, "a"), LDB_UNAVAILABLE);
	ck_assert_str_eq(
	    told_take(), "1 ERR UNAVAILABLE Redis did not answer in time");
	fake_connect(); /* stopping: left to its lease, not owed */
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* -- Limits and arguments answered at once -- */

START_TEST(test_limits)
{
	struct lock_acquire_args a = args(0, -1), once = args(0, 0);

	cf.limits.max_locks_per_client = 1;
	cf.limits.max_waiters = 1;
	hold(1, "a", &a, 1);
	ck_assert_int_eq(acquire(1, "b", &a), -1);
	ck_assert_int_eq(acquire(2, "c", &a), 0); /* waits */
	ck_assert_int_eq(acquire(3, "d", &a), -1);
	ck_assert_int_eq(acquire(3, "d", &once), 0); /* a try-once may */
	ck_assert_str_eq(told_take(),
	    "1 ERR LIMIT too many locks on this connection; "
	    "3 ERR LIMIT too many waiters");
	ck_assert_uint_eq(fake_count(), 2);
}
END_TEST

/* On a cluster a name beginning with "}" would have an empty hash tag,
 * its keys in slots Redis refuses together: refused before Redis. On one
 * Redis it is a name like another. */
START_TEST(test_brace_name_on_a_cluster)
{
	struct lock_acquire_args a = args(0, 0);

	fake_set_scoped(true);
	ck_assert_int_eq(acquire(1, "}x", &a), -1);
	ck_assert_str_eq(told_take(),
	    "1 ERR NAME on a Redis Cluster a name may not begin with \"}\"");
	ck_assert_uint_eq(fake_count(), 0);
	ck_assert_int_eq(acquire(1, "x}", &a), 0);
	fake_grant(expect(FAKE_ACQUIRE, "x}"), 3);
	ck_assert_str_eq(told_take(), "1 OK fence=3 ttl=10000");
	fake_set_scoped(false);
	ck_assert_int_eq(acquire(1, "}y", &a), 0);
	ck_assert_uint_eq(fake_count(), 1);
}
END_TEST

static const struct {
	const char *name;
	struct lock_acquire_args a;
	const char *told;
} badargs[] = {
	{ "", { .wait_ms = -1 },
	    "1 ERR NAME a name is 1-200 bytes of 0x21-0x7E or 0x80-0xFF" },
	{ "a", { .wait_ms = -1, .token = "no spaces" },
	    "1 ERR ARGS a token is 1-64 of A-Z a-z 0-9 _ . -" },
	{ "a", { .ttl_ms = 9, .wait_ms = -1 },
	    "1 ERR ARGS ttl must be between 10 and 86400000 ms" },
	{ "a", { .wait_ms = -1, .keep = true }, "1 ERR ARGS KEEP needs TTL" },
};

START_TEST(test_acquire_bad_args)
{
	ck_assert_int_eq(acquire(1, badargs[_i].name, &badargs[_i].a), -1);
	ck_assert_str_eq(told_take(), badargs[_i].told);
	ck_assert_uint_eq(fake_count(), 0);
	ck_assert_ptr_null(O(1)->pending);
}
END_TEST

/* §3 Renewal: a tick is skipped only while the connection's own ACQUIRE
 * or EXTEND of the name is in Redis (they set the lease themselves); its
 * STATUS of the name does not hold the renewal back. */
START_TEST(test_renewal_during_own_status)
{
	struct lock_acquire_args a = args(0, -1);
	struct lock_result res;

	cf.locks.lease_ms = 300; /* a tick every 100 ms */
	hold(1, "a", &a, 1);
	ck_assert_int_eq(lock_status(O(1), "a", &res), 0);
	run_ms(150); /* past a tick */
	ck_assert_uint_eq(fake_count(), 2);
	fake_reply(expect(FAKE_STATUS, "a"), LDB_NO);
	expect(FAKE_EXTEND, "a"); /* the renewal went all the same */
}
END_TEST

/* §3 Sharing modes, Order: a reader takes its place in the queue across
 * brokers at once, as a writer does, so a writer that came after it here
 * is behind it everywhere. */
START_TEST(test_reader_takes_its_place_before_a_later_writer)
{
	struct lock_acquire_args a = args(0, -1), s = args(0, -1);
	struct fake_call *c;
	uint64_t reader;

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	s.mode = LOCK_SHARED;
	hold(1, "a", &a, 1);
	ck_assert_int_eq(acquire(2, "a", &s), 0); /* first */
	ck_assert_uint_eq(fake_count(), 1);	  /* asks for its place */
	ck_assert_int_eq(acquire(3, "a", &a), 0); /* then a writer */
	ck_assert_uint_eq(fake_count(), 2);
	c = expect(FAKE_ACQUIRE, "a");
	ck_assert_int_eq(c->ask.mode, LDB_SHARED);
	ck_assert_uint_ne(c->ask.ticket, 0);
	reader = c->ask.ticket;
	c = fake_pending(1);
	ck_assert_int_eq(c->ask.mode, LDB_EXCLUSIVE);
	ck_assert_uint_gt(c->ask.ticket, reader);
}
END_TEST

/* Redis vouches for the holds (incarnation answers) and then falls
 * silent: after redis.trust_ms every hold is lost, and released. */
START_TEST(test_trust_runs_out)
{
	struct lock_acquire_args a = args(60000, -1);
	uint64_t t0;

	cf.redis.trust_ms = 100;
	fake_incarnation(true, true, 0, mono_ms());
	hold(1, "a", &a, 7);
	for (int i = 0; i < 6; i++) { /* answers keep it */
		run_ms(40);
		fake_incarnation(false, false, 0, mono_ms());
	}
	ck_assert_str_eq(told_take(), "");
	t0 = mono_ms();
	ck_assert(wait_told(1));
	ck_assert_uint_ge(mono_ms() - t0, 95);
	ck_assert_str_eq(told_take(), "1 LOST a 7 unavailable");
	ck_assert_uint_eq(expect(FAKE_RELEASE, "a")->fence, 7);
}
END_TEST

/* A new incarnation: each hold asks to be put back (an exclusive one
 * with its entry and what is left of its validity, a shared one only
 * asks); back, it stays; not held, it is lost; unanswered until the old
 * incarnation's last answer stops vouching, it is lost too, although the
 * new incarnation's answers vouch for the rest. */
START_TEST(test_new_incarnation)
{
	struct lock_acquire_args a = args(60000, -1), s = args(60000, -1);
	struct fake_call *c;
	uint64_t t0;

	cf.redis.trust_ms = 300;
	s.mode = LOCK_SHARED;
	fake_incarnation(true, true, 0, mono_ms());
	hold(1, "a", &a, 7);
	hold(2, "s", &s, 8);
	hold(3, "q", &a, 9);
	t0 = mono_ms();
	fake_incarnation(false, true, 300, t0);
	c = expect_find(FAKE_CHECK, "a");
	ck_assert_uint_eq(c->fence, 7);
	ck_assert_uint_gt(c->ttl_ms, 50000);
	ck_assert_msg(
	    strncmp(c->ask_info, "EXCLUSIVE ", 10) == 0, "%s", c->ask_info);
	fake_reply(c, LDB_OK);
	c = expect_find(FAKE_CHECK, "s");
	ck_assert_uint_eq(c->ttl_ms, 0);
	fake_reply(c, LDB_NO);
	ck_assert_str_eq(told_take(), "2 LOST s 8 unavailable");
	c = expect_find(FAKE_CHECK, "q"); /* never answered */
	while (mono_ms() - t0 < 280) {
		run_ms(40);
		fake_incarnation(false, false, 0, mono_ms());
	}
	ck_assert(wait_told(1));
	ck_assert_uint_ge(mono_ms() - t0, 295);
	ck_assert_str_eq(told_take(), "3 LOST q 9 unavailable");
	ck_assert_ptr_nonnull(hold_of(1, "a"));
}
END_TEST

/* On a cluster each slot is a scope with its own incarnation: a new one
 * in scope 1 (a failover of its shard, or the slot moved) asks only
 * scope 1's holds to be put back, and only they are lost if not back in
 * time; a hold in scope 2 is neither checked nor told. */
START_TEST(test_new_incarnation_in_one_scope)
{
	struct lock_acquire_args a = args(60000, -1);
	struct fake_call *c;
	uint64_t t0;

	cf.redis.trust_ms = 300;
	fake_set_scoped(true);
	fake_incarnation_in(1, true, true, 0, mono_ms());
	fake_incarnation_in(2, true, true, 0, mono_ms());
	hold(1, "s1:a", &a, 7);
	hold(2, "s2:b", &a, 8);
	t0 = mono_ms();
	fake_incarnation_in(1, false, true, 300, t0);
	c = expect_find(FAKE_CHECK, "s1:a"); /* never answered */
	ck_assert_uint_eq(c->fence, 7);
	ck_assert_ptr_null(fake_find(FAKE_CHECK, "s2:b"));
	while (mono_ms() - t0 < 280) {
		run_ms(40);
		fake_incarnation_in(1, false, false, 0, mono_ms());
		fake_incarnation_in(2, false, false, 0, mono_ms());
	}
	ck_assert(wait_told(1));
	ck_assert_uint_ge(mono_ms() - t0, 295);
	ck_assert_str_eq(told_take(), "1 LOST s1:a 7 unavailable");
	ck_assert_ptr_nonnull(hold_of(2, "s2:b"));
	ck_assert_ptr_null(fake_find(FAKE_CHECK, "s2:b"));
}
END_TEST

/* Trust runs out per scope: scope 1 falls silent while scope 2 goes on
 * answering; only scope 1's hold is lost, after trust_ms. */
START_TEST(test_trust_runs_out_in_one_scope)
{
	struct lock_acquire_args a = args(60000, -1);
	uint64_t t0;

	cf.redis.trust_ms = 100;
	fake_set_scoped(true);
	fake_incarnation_in(1, true, true, 0, mono_ms());
	fake_incarnation_in(2, true, true, 0, mono_ms());
	hold(1, "s1:a", &a, 7);
	hold(2, "s2:b", &a, 8);
	t0 = mono_ms();
	while (mono_ms() - t0 < 200) {
		run_ms(20);
		fake_incarnation_in(2, false, false, 0, mono_ms());
	}
	ck_assert_str_eq(told_take(), "1 LOST s1:a 7 unavailable");
	ck_assert_ptr_nonnull(hold_of(2, "s2:b"));
}
END_TEST

/* The beat asks each scope that has holds here, on its own, and no
 * other (a cluster's broker asks only the slots it uses). */
START_TEST(test_beat_asks_busy_scopes)
{
	struct lock_acquire_args a = args(60000, -1);
	unsigned asks1, asks2;
	uint64_t t0;

	fake_set_scoped(true);
	fake_incarnation_in(1, true, true, 0, mono_ms());
	fake_incarnation_in(2, true, true, 0, mono_ms());
	hold(1, "s1:a", &a, 7);
	hold(2, "s2:b", &a, 8);
	asks1 = fake_scope_asks(1);
	asks2 = fake_scope_asks(2);
	t0 = mono_ms();
	while (mono_ms() - t0 < (uint64_t)cf.redis.trust_ms) {
		run_ms(100);
		fake_incarnation_in(1, false, false, 0, mono_ms());
		fake_incarnation_in(2, false, false, 0, mono_ms());
	}
	ck_assert_uint_ge(fake_scope_asks(1), asks1 + 3);
	ck_assert_uint_ge(fake_scope_asks(2), asks2 + 3);
	ck_assert_uint_eq(fake_scope_asks(0), 0);
	ck_assert_uint_eq(fake_scope_asks(3), 0);
	ck_assert_str_eq(told_take(), "");
}
END_TEST

/* Redis forgot its lock data (a new incarnation): the queues went with
 * it, so every ticketed waiter takes its place again at once, the trier
 * first. One whose try is in Redis then takes it again as soon as that
 * try is answered: the trier not after its back-off, the other not
 * never. */
START_TEST(test_new_incarnation_retakes)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *t1, *t2;

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	fake_incarnation(true, true, 0, mono_ms());
	waits(1, "a", &a);
	waits(2, "a", &a);
	ck_assert_uint_eq(fake_count(), 0);
	fake_incarnation(false, true, 300, mono_ms());
	ck_assert_uint_eq(fake_count(), 2);
	t1 = fake_pending(0);
	t2 = fake_pending(1);
	ck_assert_uint_eq(t1->ask.ticket, 1);
	ck_assert_uint_eq(t2->ask.ticket, 2);
	/* Both tries in Redis when another new incarnation is learned. */
	fake_incarnation(false, true, 300, mono_ms());
	ck_assert_uint_eq(fake_count(), 2);
	fake_reply(t1, LDB_UNAVAILABLE);
	ck_assert_uint_eq(fake_count(), 2);
	ck_assert_uint_eq(fake_pending(1)->ask.ticket, 1);
	fake_reply(t2, LDB_UNAVAILABLE);
	ck_assert_uint_eq(fake_count(), 2);
	ck_assert_uint_eq(fake_pending(1)->ask.ticket, 2);
	/* Answered, nobody asks again before its back-off. */
	fake_refuse(fake_pending(0), 100000, 1);
	fake_refuse(fake_pending(0), 100000, 1);
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* A try-once the gate refused because it named an incarnation the
 * broker has learned since is gone (again: it was quiet meanwhile) asks
 * once more at once, with the one Redis serves, instead of answering ERR
 * UNAVAILABLE; refused so a second time, it is answered. */
START_TEST(test_try_once_asks_again_after_a_new_incarnation)
{
	struct lock_acquire_args a = args(0, 0);
	struct lockdb_reply again = { .status = LDB_UNAVAILABLE,
		.again = true,
		.why =
		    "Redis holds lock data this broker has not checked yet" };

	ck_assert_int_eq(acquire(1, "a", &a), 0);
	fake_answer(expect(FAKE_ACQUIRE, "a"), &again);
	ck_assert_str_eq(told_take(), "");
	run_ms(5);
	fake_grant(expect(FAKE_ACQUIRE, "a"), 3);
	ck_assert_str_eq(told_take(), "1 OK fence=3 ttl=10000");
	ck_assert_int_eq(acquire(1, "b", &a), 0);
	fake_answer(expect(FAKE_ACQUIRE, "b"), &again);
	run_ms(5);
	fake_answer(expect(FAKE_ACQUIRE, "b"), &again);
	ck_assert_str_eq(told_take(),
	    "1 ERR UNAVAILABLE Redis holds lock data this broker has not checked yet");
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* A waiter's take that the gate refused (Redis holds another incarnation
 * than the one known here, as at a slot's first use) took no place in
 * the queue: it takes it again, at once when the incarnation was learned
 * since, else right after a try of the trier's. Hand-overs otherwise
 * pass it by until its wait ends. */
START_TEST(test_take_refused_by_the_gate_takes_again)
{
	struct lock_acquire_args a = args(0, -1);
	struct lockdb_reply closed = { .status = LDB_UNAVAILABLE,
		.closed = true,
		.why =
		    "Redis holds lock data this broker has not checked yet" };
	struct fake_call *t;

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	waits(1, "a", &a);
	ck_assert_int_eq(acquire(2, "a", &a), 0);
	t = expect(FAKE_ACQUIRE, "a");
	ck_assert_uint_eq(t->ask.ticket, 2);
	closed.again = true;
	fake_answer(t, &closed);
	t = expect(FAKE_ACQUIRE, "a");
	ck_assert_uint_eq(t->ask.ticket, 2);
	/* Not learned since: the trier tries at once, the waiter after it
	 * (as after a new incarnation: lockhand_retake). */
	closed.again = false;
	fake_answer(t, &closed);
	ck_assert_uint_eq(fake_count(), 2);
	ck_assert_uint_eq(fake_pending(0)->ask.ticket, 1);
	ck_assert_uint_eq(fake_pending(1)->ask.ticket, 2);
	fake_refuse(fake_pending(0), 100000, 1);
	fake_refuse(fake_pending(0), 100000, 1);
	ck_assert_uint_eq(fake_count(), 0);
	ck_assert_str_eq(told_take(), "");
}
END_TEST

/* Redis forgot its lock data while the trier's try was in Redis (it may
 * have run before the loss): the waiters behind it take their places again
 * only after the trier's next try, so that a later waiter does not queue
 * in front of it. */
START_TEST(test_new_incarnation_trier_busy)
{
	struct lock_acquire_args a = args(0, -1);
	struct fake_call *t1;

	cf.locks.retry_min_ms = cf.locks.retry_max_ms = 5000;
	fake_incarnation(true, true, 0, mono_ms());
	waits(1, "a", &a);
	waits(2, "a", &a);
	fake_news(LDB_NEWS_RELEASED, "a", 0); /* the trier tries */
	t1 = expect(FAKE_ACQUIRE, "a");
	ck_assert_uint_eq(t1->ask.ticket, 1);
	fake_incarnation(false, true, 300, mono_ms());
	ck_assert_uint_eq(fake_count(), 1);
	fake_reply(t1, LDB_UNAVAILABLE);
	ck_assert_uint_eq(fake_count(), 2);
	ck_assert_uint_eq(fake_pending(0)->ask.ticket, 1);
	ck_assert_uint_eq(fake_pending(1)->ask.ticket, 2);
	/* Answered, nobody asks again before its back-off. */
	fake_refuse(fake_pending(0), 100000, 1);
	fake_refuse(fake_pending(0), 100000, 1);
	ck_assert_uint_eq(fake_count(), 0);
}
END_TEST

/* A grant asked for before a new incarnation was learned, answered
 * after: it is of the old one, and asks to be put back. */
START_TEST(test_grant_from_before_new_incarnation)
{
	struct lock_acquire_args a = args(60000, -1);
	struct fake_call *c;

	cf.redis.trust_ms = 300;
	fake_incarnation(true, true, 0, mono_ms());
	ck_assert_int_eq(acquire(1, "a", &a), 0);
	c = expect(FAKE_ACQUIRE, "a");
	run_ms(5);
	fake_incarnation(false, true, 300, mono_ms());
	fake_grant(c, 4);
	ck_assert_msg(hold_of(1, "a") != NULL, "%s", told_take());
	c = expect_find(FAKE_CHECK, "a");
	ck_assert_uint_gt(c->ttl_ms, 0);
	fake_reply(c, LDB_OK);
	for (int i = 0; i < 9; i++) { /* past the stale holds' end */
		run_ms(40);
		fake_incarnation(false, false, 0, mono_ms());
	}
	ck_assert_ptr_nonnull(hold_of(1, "a"));
	ck_assert_str_eq(told_take(), "1 OK fence=4 ttl=60000");
}
END_TEST

/* Every hold is confirmed in Redis at least once every trust_ms (the
 * beat checks those not confirmed for half of it); one Redis no longer
 * has is lost. */
START_TEST(test_holds_confirmed)
{
	struct lock_acquire_args a = args(60000, -1);
	struct fake_call *c;

	uint64_t end;

	fake_incarnation(true, true, 0, mono_ms());
	hold(1, "a", &a, 4);
	/* Within trust_ms (lock_init's: 5 s), Redis vouching meanwhile. */
	end = mono_ms() + (uint64_t)cf.redis.trust_ms;
	while (fake_count() == 0 && mono_ms() < end) {
		run_ms(50);
		fake_incarnation(false, false, 0, mono_ms());
	}
	c = expect(FAKE_CHECK, "a");
	ck_assert_uint_eq(c->fence, 4);
	ck_assert_uint_eq(c->ttl_ms, 0); /* asks, puts nothing back */
	fake_reply(c, LDB_NO);
	ck_assert_str_eq(told_take(), "1 LOST a 4 stolen");
}
END_TEST

/* Redis's clock ran ahead of ours by more than half of clock_step_ms
 * between two beats: every hold is confirmed at once, and trusts no
 * more than Redis says is left. A smaller step changes nothing. */
START_TEST(test_clock_step_confirms_every_hold)
{
	struct lock_acquire_args a = args(60000, -1);
	struct lockdb_reply left = { .status = LDB_OK, .pttl = 30 };
	uint64_t redis0 = 1800000000000, t0;

	cf.redis.clock_step_ms = 1000;
	fake_incarnation(true, true, 0, mono_ms());
	hold(1, "a", &a, 4);
	t0 = mono_ms();
	fake_incarnation_at(false, t0, redis0);
	run_ms(20);
	fake_incarnation_at(false, mono_ms(), redis0 + (mono_ms() - t0) + 400);
	ck_assert_uint_eq(fake_count(), 0);
	run_ms(20);
	fake_incarnation_at(
	    false, mono_ms(), redis0 + (mono_ms() - t0) + 400 + 2000);
	fake_answer(expect(FAKE_CHECK, "a"), &left);
	ck_assert_uint_le(ttl_left(1, "a"), 30);
	ck_assert(wait_told(1));
	ck_assert_str_eq(told_take(), "1 LOST a 4 expired");
}
END_TEST

static Suite *
engine_suite(void)
{
	Suite *s = suite_create("engine");
	TCase *tc = tcase_create("engine");

#define LOOP(t, tab) tcase_add_loop_test(tc, t, 0, sizeof tab / sizeof tab[0])
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	LOOP(test_acquire_release, kinds);
	tcase_add_test(tc, test_release_notheld);
	tcase_add_test(tc, test_wait0_refused);
	tcase_add_test(tc, test_wait0_behind_waiters);
	tcase_add_test(tc, test_wait0_unavailable);
	tcase_add_test(tc, test_retry_after_pttl);
	tcase_add_test(tc, test_retry_backoff);
	tcase_add_test(tc, test_retry_on_released_news);
	tcase_add_test(tc, test_kick_while_attempting);
	tcase_add_test(tc, test_fifo_tickets);
	LOOP(test_release_answers, releases);
	tcase_add_test(tc, test_handed_while_trying);
	LOOP(test_handed_by_other_broker, handeds);
	LOOP(test_handed_early, earlies);
	tcase_add_test(tc, test_handed_to_nobody);
	LOOP(test_take_answers, takes);
	tcase_add_test(tc, test_missed_retakes);
	tcase_add_test(tc, test_handed_then_gone);
	tcase_add_test(tc, test_handed_late);
	tcase_add_test(tc, test_deadline_late_grant);
	tcase_add_test(tc, test_deadline_late_grant_keep);
	tcase_add_test(tc, test_deadline_no_more_tries);
	LOOP(test_owner_gone_holding, gone);
	tcase_add_loop_test(tc, test_owner_gone_kicks_waiter, 0, 2);
	tcase_add_test(tc, test_owner_gone_waiting);
	tcase_add_test(tc, test_owner_gone_other_request);
	tcase_add_test(tc, test_cancel_waiting);
	tcase_add_loop_test(tc, test_cancel_first_try, 0, 2);
	tcase_add_test(tc, test_cancel_try_once);
	tcase_add_test(tc, test_eof_first_try);
	tcase_add_test(tc, test_eof_already_waiting);
	LOOP(test_eof_while_confirming, confirms);
	LOOP(test_eof_first_take, first_takes);
	tcase_add_test(tc, test_eof_refused_take_now_first);
	tcase_add_test(tc, test_renewal_stolen);
	tcase_add_test(tc, test_renewal_unavailable);
	tcase_add_test(tc, test_renewal_skipped_while_regrant);
	tcase_add_test(tc, test_ttl_expired);
	tcase_add_test(tc, test_settle_before_reading);
	LOOP(test_maxhold, maxholds);
	tcase_add_test(tc, test_late_grant_try_once);
	tcase_add_test(tc, test_late_grant_waiter);
	LOOP(test_wait_replicas, replicas);
	tcase_add_test(tc, test_wait_replicas_regrant);
	LOOP(test_wait_replicas_after_late_grant, late_replicas);
	tcase_add_test(tc, test_same_token_regrant);
	tcase_add_test(tc, test_same_token_late);
	tcase_add_test(tc, test_same_token_own_connection);
	tcase_add_test(tc, test_same_connection_other_token);
	LOOP(test_extend, extends);
	tcase_add_test(tc, test_extend_refused);
	tcase_add_loop_test(tc, test_extend_answers_out_of_order, 0, 2);
	tcase_add_test(tc, test_same_token_other_family);
	tcase_add_test(tc, test_release_by_token_tells_others);
	tcase_add_test(tc, test_release_by_token_not_redone);
	LOOP(test_redis_trouble_while_waiting, troubles);
	tcase_add_test(tc, test_owed_release_on_connect);
	tcase_add_test(tc, test_owed_release_bound);
	tcase_add_test(tc, test_owed_release_timer);
	tcase_add_test(tc, test_owed_release_dropped_by_acquire);
	tcase_add_test(tc, test_release_in_redis_forgotten);
	LOOP(test_queries, asks);
	tcase_add_test(tc, test_queries_refused);
	LOOP(test_news_on_hold, news);
	LOOP(test_news_before_grant, early);
	tcase_add_test(tc, test_missed_checks);
	tcase_add_test(tc, test_missed_again);
	tcase_add_test(tc, test_missed_while_acquiring);
	tcase_add_test(tc, test_head_of_the_queue_here_is_asked);
	tcase_add_test(tc, test_oldest_hold);
	tcase_add_test(tc, test_shared_and_limit);
	LOOP(test_conflict, conflicts);
	tcase_add_test(tc, test_writer_mark);
	tcase_add_test(tc, test_fill_done);
	tcase_add_test(tc, test_fill_leader_lost);
	tcase_add_test(tc, test_fill_try_once);
	tcase_add_loop_test(tc, test_fill_eof_behind_ticketed_trier, 0, 2);
	tcase_add_test(tc, test_fill_eof_after_asking_along);
	tcase_add_test(tc, test_fill_eof_while_trier_in_redis);
	tcase_add_test(tc, test_stop);
	tcase_add_test(tc, test_limits);
	tcase_add_test(tc, test_renewal_during_own_status);
	tcase_add_test(tc, test_reader_takes_its_place_before_a_later_writer);
	LOOP(test_acquire_bad_args, badargs);
	tcase_add_test(tc, test_trust_runs_out);
	tcase_add_test(tc, test_new_incarnation);
	tcase_add_test(tc, test_new_incarnation_in_one_scope);
	tcase_add_test(tc, test_owed_release_per_master);
	tcase_add_test(tc, test_trust_runs_out_in_one_scope);
	tcase_add_test(tc, test_beat_asks_busy_scopes);
	tcase_add_test(tc, test_new_incarnation_retakes);
	tcase_add_test(tc, test_new_incarnation_trier_busy);
	tcase_add_test(tc, test_try_once_asks_again_after_a_new_incarnation);
	tcase_add_test(tc, test_take_refused_by_the_gate_takes_again);
	tcase_add_test(tc, test_brace_name_on_a_cluster);
	tcase_add_test(tc, test_grant_answered_after_trust_is_late);
	tcase_add_test(tc, test_grant_from_before_new_incarnation);
	tcase_add_test(tc, test_holds_confirmed);
	tcase_add_test(tc, test_clock_step_confirms_every_hold);
#undef LOOP
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(engine_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

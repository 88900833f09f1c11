/*
 * test_lock: the lock engine's base, lockreq, with no network: the name
 * table (references, growth, lookup), a request's owner answered
 * exactly once, whatever happens to the request afterwards, and a
 * request's two states moved as lock_req.h says.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "config.h"
#include "lock.h"
#include "lock_name.h"
#include "lock_req.h"
#include "redisc.h"

static struct config cf;
static struct event_base *base;
static int done_calls;
static struct lock_result last;
static char last_text[128]; /* errtext lives only during the callback */

static void
owner_done(struct lock_owner *o, const struct lock_result *res)
{
	done_calls++;
	last = *res;
	snprintf(last_text, sizeof last_text, "%s",
	    res->errtext != NULL ? res->errtext : "");
}

static void
owner_lost(
    struct lock_owner *o, const char *name, uint64_t fence, const char *reason)
{
	ck_abort_msg("nothing is held here");
}

static const struct lock_owner_ops ops = { owner_done, owner_lost };

static void
setup(void)
{
	config_defaults(&cf);
	base = event_base_new();
	redisc_init(base, &cf.redis);
	lock_init(base, &cf);
	done_calls = 0;
}

static void
teardown(void)
{
	lock_shutdown();
	redisc_stop();
	event_base_free(base);
	config_free(&cf);
}

static void
count_name(struct lock_name *ln, void *arg)
{
	(*(size_t *)arg)++;
}

static size_t
names_now(void)
{
	size_t n = 0;

	lockname_foreach(count_name, &n);
	return n;
}

/* Thousands of names: each found while referred to, gone after, and the
 * table grows past its first 64 buckets without losing any. */
START_TEST(test_name_table)
{
	enum { N = 5000 };
	static struct lock_name *ln[N];
	char name[32];

	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof name, "n%d", i);
		ln[i] = lockname_ref(name);
		ck_assert_str_eq(ln[i]->name, name);
	}
	ck_assert_uint_eq(names_now(), N);
	ck_assert_uint_ge(lockname_buckets(), N);
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof name, "n%d", i);
		ck_assert_ptr_eq(lockname_find(name), ln[i]);
		/* A second reference is the same entry. */
		ck_assert_ptr_eq(lockname_ref(name), ln[i]);
		ck_assert_uint_eq(ln[i]->refs, 2);
		lockname_unref(ln[i]);
	}
	ck_assert_ptr_null(lockname_find("n-none"));
	for (int i = 0; i < N; i++)
		lockname_unref(ln[i]);
	ck_assert_uint_eq(names_now(), 0);
	ck_assert_uint_eq(lockname_buckets(), 64);
	ck_assert_ptr_null(lockname_find("n0"));
}
END_TEST

/* A request is its owner's pending one until answered, once. */
START_TEST(test_answer_once)
{
	struct lock_owner o;
	struct lock_req *req;

	lock_owner_init(&o, 1, &ops, NULL);
	req = lockreq_new(OP_STATUS, &o, "a", NULL);
	ck_assert_ptr_eq(o.pending, req);
	ck_assert_ptr_eq(req->ln, lockname_find("a"));
	lockreq_answer_status(req, LOCK_FREE);
	ck_assert_int_eq(done_calls, 1);
	ck_assert_int_eq(last.status, LOCK_FREE);
	ck_assert_ptr_null(o.pending);
	ck_assert_ptr_null(req->owner);
	/* Late news for it (Redis answering after all) reaches nobody. */
	lockreq_answer_err(req, PERR_UNAVAILABLE, "late");
	ck_assert_int_eq(done_calls, 1);
	lockreq_free(req);
	ck_assert_ptr_null(lockname_find("a"));
	lock_owner_gone(&o, false);
}
END_TEST

/* An ACQUIRE's place and way to Redis move as lock_req.h's tables say. */
START_TEST(test_request_states)
{
	struct lock_owner o;
	struct lock_req *req;

	lock_owner_init(&o, 3, &ops, NULL);
	req = lockreq_new(OP_ACQUIRE, &o, "c", "t");
	ck_assert_int_eq(req->place, LOCKREQ_NEW);
	ck_assert(!lockreq_in_flight(req));
	lockreq_queue(req, 7);
	ck_assert(lockreq_queued(req));
	ck_assert_uint_eq(req->ticket, 7);
	ck_assert_ptr_eq(TAILQ_FIRST(&req->ln->waiters), req);
	lockreq_attempt(req, 100, 0);
	ck_assert(lockreq_trying(req) && !lockreq_replicating(req));
	ck_assert_uint_eq(req->tries, 1);
	lockreq_replicate(req, 42);
	ck_assert(lockreq_trying(req) && lockreq_replicating(req));
	ck_assert_uint_eq(req->fence, 42);
	lockreq_landed(req);
	ck_assert(!lockreq_in_flight(req) && !lockreq_replicating(req));
	ck_assert(req->heard);
	/* Leaving ungranted gives back the hand-over it was to confirm. */
	lockreq_handed(req, 9);
	ck_assert_uint_eq(lockreq_leave(req, false), 9);
	ck_assert_int_eq(req->place, LOCKREQ_LEFT);
	ck_assert(TAILQ_EMPTY(&req->ln->waiters));
	ck_assert_uint_eq(lockreq_leave(req, false), 0); /* no move */
	ck_assert_int_eq(req->place, LOCKREQ_LEFT);
	/* A try of it still in Redis when it left may grant it. */
	lockreq_send_at(req, 200, 0);
	ck_assert(lockreq_in_flight(req) && !lockreq_trying(req));
	ck_assert_uint_eq(req->start_ms, 200);
	lockreq_landed(req);
	lockreq_leave(req, true);
	ck_assert_int_eq(req->place, LOCKREQ_GRANTED);
	lockreq_orphan(req);
	ck_assert_ptr_null(o.pending);
	ck_assert_ptr_null(req->owner);
	lockreq_free_undo(req); /* answered: nothing owed */
	ck_assert_ptr_null(lockname_find("c"));
	lock_owner_gone(&o, false);
}
END_TEST

/* Redis's error words reach the client's line; anything else is INTERNAL. */
START_TEST(test_db_errors)
{
	struct lockdb_reply busy = { LDB_UNAVAILABLE, 0, 0, "READONLY" };
	struct lockdb_reply slow = { LDB_UNAVAILABLE, 0, 0, NULL };
	struct lockdb_reply odd = { LDB_INTERNAL, 0, 0, NULL };
	const struct lockdb_reply *r[] = { &busy, &slow, &odd };
	const char *want[] = { "Redis answered READONLY",
		"Redis did not answer in time", "unexpected reply from Redis" };
	enum proto_err code[] = { PERR_UNAVAILABLE, PERR_UNAVAILABLE,
		PERR_INTERNAL };
	struct lock_owner o;

	lock_owner_init(&o, 2, &ops, NULL);
	for (int i = 0; i < 3; i++) {
		struct lock_req *req = lockreq_new(OP_EXTEND, &o, "b", "t");

		lockreq_answer_db_error(req, r[i]);
		ck_assert_int_eq(last.status, LOCK_ERR);
		ck_assert_int_eq(last.err, code[i]);
		ck_assert_str_eq(last_text, want[i]);
		lockreq_free(req);
	}
	ck_assert_int_eq(done_calls, 3);
}
END_TEST

static Suite *
lock_suite(void)
{
	Suite *s = suite_create("lock");
	TCase *tc = tcase_create("lockreq");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_name_table);
	tcase_add_test(tc, test_answer_once);
	tcase_add_test(tc, test_db_errors);
	tcase_add_test(tc, test_request_states);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(lock_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

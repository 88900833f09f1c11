/*
 * test_redisc: the Redis connection's own promises that need no Redis.
 * A request that cannot be sent (no connection) is failed from the loop,
 * on a later turn and in the order made: a caller that asks again at each
 * failure must not keep the loop from its timers and descriptors.
 */
#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "config.h"
#include "log.h"
#include "redisc.h"
#include "redisc_int.h"

/* The old code ran every failure of the chain in one pass: the timer
 * came only after the asker gave up, at ASKS_MAX. */
#define ASKS_MAX 100000

static struct event_base *base;
static unsigned asks, asks_when_fired;
static bool fired, stop_asking;

static void ask(void);

static void
ask_cb(const redisReply *reply, void *arg)
{
	ck_assert_ptr_null(reply); /* never connected: each one fails */
	if (!stop_asking && asks < ASKS_MAX)
		ask();
}

static void
ask(void)
{
	static const char *const argv[] = { "PING" };
	static const size_t lens[] = { 4 };

	asks++;
	redisc_command(1, argv, lens, ask_cb, NULL);
}

static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
	fired = true;
	asks_when_fired = asks;
	stop_asking = true;
	event_base_loopbreak(base);
}

START_TEST(test_failures_let_the_loop_turn)
{
	struct config cf;
	struct event *timer;
	struct timeval tv = { 0, 20000 };

	log_init(LOG_LVL_ERROR, false);
	config_defaults(&cf);
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	redisc_init(base, &cf.redis); /* not connected: nothing is sent */
	timer = evtimer_new(base, timer_cb, NULL);
	evtimer_add(timer, &tv);
	ask();
	event_base_dispatch(base);
	ck_assert(fired);
	ck_assert_msg(asks_when_fired < ASKS_MAX,
	    "the 20 ms timer waited for %u failures in a row", asks_when_fired);
	ck_assert_uint_gt(asks_when_fired, 1); /* it was failing all along */
	/* The failure still pending is answered from the stop's one pass. */
	redisc_stop();
	event_base_loop(base, EVLOOP_NONBLOCK);
	event_free(timer);
	event_base_free(base);
	config_free(&cf);
}
END_TEST

static char order[8];

static void
order_cb(const redisReply *reply, void *arg)
{
	size_t n = strlen(order);

	ck_assert_ptr_null(reply);
	order[n] = *(const char *)arg;
	order[n + 1] = '\0';
	if (n + 1 == 4)
		event_base_loopbreak(base);
}

/* Requests failed in one turn are answered on the next, in the order they
 * were made (a timer heap would not keep it). */
START_TEST(test_failures_answered_in_order)
{
	static const char *const argv[] = { "PING" };
	static const size_t lens[] = { 4 };
	struct config cf;

	log_init(LOG_LVL_ERROR, false);
	config_defaults(&cf);
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	redisc_init(base, &cf.redis);
	order[0] = '\0';
	redisc_command(1, argv, lens, order_cb, "a");
	redisc_command(1, argv, lens, order_cb, "b");
	redisc_command(1, argv, lens, order_cb, "c");
	redisc_command(1, argv, lens, order_cb, "d");
	ck_assert_str_eq(order, ""); /* never from inside the caller */
	event_base_dispatch(base);
	ck_assert_str_eq(order, "abcd");
	redisc_stop();
	event_base_free(base);
	config_free(&cf);
}
END_TEST

/* A cluster's redirections, as Redis words them. */
START_TEST(test_redirect_parse)
{
	char host[64];
	int slot = -1, port = -1;

	ck_assert_int_eq(redisc_redirect_parse("MOVED 12182 127.0.0.1:7303",
			     &slot, host, sizeof host, &port),
	    REDISC_MOVED);
	ck_assert_int_eq(slot, 12182);
	ck_assert_str_eq(host, "127.0.0.1");
	ck_assert_int_eq(port, 7303);
	ck_assert_int_eq(redisc_redirect_parse(
			     "ASK 0 ::1:6380", &slot, host, sizeof host, &port),
	    REDISC_ASK);
	ck_assert_int_eq(slot, 0);
	ck_assert_str_eq(host, "::1");
	ck_assert_int_eq(port, 6380);
	ck_assert_int_eq(
	    redisc_redirect_parse("MOVED 3999 redis-2.example:7000", &slot,
		host, sizeof host, &port),
	    REDISC_MOVED);
	ck_assert_str_eq(host, "redis-2.example");
	/* Not redirections, or malformed: the request's answer as it is. */
	ck_assert_int_eq(redisc_redirect_parse("TRYAGAIN Multiple keys", &slot,
			     host, sizeof host, &port),
	    0);
	ck_assert_int_eq(redisc_redirect_parse("MOVED 16384 h:1", &slot, host,
			     sizeof host, &port),
	    0);
	ck_assert_int_eq(redisc_redirect_parse(
			     "MOVED 1 h:0", &slot, host, sizeof host, &port),
	    0);
	ck_assert_int_eq(redisc_redirect_parse("MOVED 1 h:70000", &slot, host,
			     sizeof host, &port),
	    0);
	ck_assert_int_eq(redisc_redirect_parse(
			     "MOVED 1 :80", &slot, host, sizeof host, &port),
	    0);
	ck_assert_int_eq(redisc_redirect_parse(
			     "MOVED x h:80", &slot, host, sizeof host, &port),
	    0);
	ck_assert_int_eq(redisc_redirect_parse(
			     "MOVED 1 h80", &slot, host, sizeof host, &port),
	    0);
	ck_assert_int_eq(redisc_redirect_parse(
			     "MOVED 1 h:80x", &slot, host, sizeof host, &port),
	    0);
	/* A host longer than the caller's buffer is refused, not cut. */
	ck_assert_int_eq(redisc_redirect_parse("MOVED 1 "
					       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
					       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
					       "aaaaaa:80",
			     &slot, host, sizeof host, &port),
	    0);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("redisc");
	TCase *tc = tcase_create("redisc");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_failures_let_the_loop_turn);
	tcase_add_test(tc, test_failures_answered_in_order);
	tcase_add_test(tc, test_redirect_parse);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

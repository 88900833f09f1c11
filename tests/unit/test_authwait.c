/*
 * test_authwait: the per-peer back-off after wrong AUTH secrets: slots
 * spaced by a doubling delay, per address (not per port), parallel
 * guesses queued, a right secret starting afresh, a quiet peer forgotten.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "authwait.h"

static void
setup(void)
{
	authwait_reset();
}

START_TEST(test_slots_double_and_cap)
{
	uint64_t t = 1000000, want = t, d = AUTHWAIT_MIN_MS;

	/* Six guesses at once from one address, each on its own port. */
	ck_assert_uint_eq(authwait_slot("10.0.0.1:4000", t), t);
	for (int i = 1; i < 12; i++) {
		want += d;
		ck_assert_uint_eq(authwait_slot("10.0.0.1:5000", t), want);
		d = d * 2 < AUTHWAIT_MAX_MS ? d * 2 : AUTHWAIT_MAX_MS;
	}
	/* Another address is not held back. */
	ck_assert_uint_eq(authwait_slot("10.0.0.2:4000", t), t);
}
END_TEST

START_TEST(test_right_secret_starts_afresh)
{
	uint64_t t = 5000000;

	authwait_slot("[::1]:1", t);
	ck_assert_uint_eq(authwait_slot("[::1]:2", t), t + AUTHWAIT_MIN_MS);
	authwait_passed("[::1]:2", t + AUTHWAIT_MIN_MS);
	ck_assert_uint_eq(
	    authwait_slot("[::1]:3", t + AUTHWAIT_MIN_MS), t + AUTHWAIT_MIN_MS);
}
END_TEST

START_TEST(test_unix_peers_share_one_entry)
{
	uint64_t t = 7000000;

	authwait_slot("unix", t);
	ck_assert_uint_gt(authwait_slot("unix", t), t);
}
END_TEST

START_TEST(test_quiet_peer_forgotten)
{
	uint64_t t = 9000000;

	for (int i = 0; i < 5; i++)
		authwait_slot("10.1.1.1:9", t);
	t += AUTHWAIT_FORGET_MS + 1 + 5 * AUTHWAIT_MAX_MS;
	ck_assert_uint_eq(authwait_slot("10.1.1.1:9", t), t);
}
END_TEST

START_TEST(test_table_is_bounded)
{
	char peer[32];
	uint64_t t = 11000000;

	/* Far more addresses than the table holds: the oldest make room. */
	for (int i = 0; i < 5000; i++) {
		snprintf(peer, sizeof peer, "10.2.%d.%d:1", i / 250, i % 250);
		ck_assert_uint_eq(
		    authwait_slot(peer, t + (uint64_t)i), t + (uint64_t)i);
	}
}
END_TEST

static Suite *
authwait_suite(void)
{
	Suite *s = suite_create("authwait");
	TCase *tc = tcase_create("authwait");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_slots_double_and_cap);
	tcase_add_test(tc, test_right_secret_starts_afresh);
	tcase_add_test(tc, test_unix_peers_share_one_entry);
	tcase_add_test(tc, test_quiet_peer_forgotten);
	tcase_add_test(tc, test_table_is_bounded);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(authwait_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

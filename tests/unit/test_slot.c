/*
 * test_slot: Redis Cluster's hash slots, as Redis computes them (each
 * figure below is what redis-server 7.0's CLUSTER KEYSLOT answered), and
 * the tag table's promise: each slot's tag hashes to that slot.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "slot.h"

static int
slot_of(const char *key)
{
	return slot_of_key(key, strlen(key));
}

START_TEST(test_crc16_xmodem)
{
	/* The check value of CRC-16/XMODEM. */
	ck_assert_uint_eq(slot_crc16("123456789", 9), 0x31c3);
	ck_assert_uint_eq(slot_crc16("", 0), 0);
}
END_TEST

START_TEST(test_slots_as_redis)
{
	ck_assert_int_eq(slot_of("123456789"), 12739);
	ck_assert_int_eq(slot_of("foo"), 12182);
	/* The first {...} with something in it is the tag. */
	ck_assert_int_eq(slot_of("{user1000}.following"), 3443);
	ck_assert_int_eq(slot_of("{user1000}.followers"), 3443);
	/* An empty first tag: the whole key. */
	ck_assert_int_eq(slot_of("foo{}{bar}"), 8363);
	/* "{{bar}" up to the first "}": the tag is "{bar". */
	ck_assert_int_eq(slot_of("foo{{bar}}zap"), 4015);
	ck_assert_int_eq(slot_of("{}x"), 10595);
	/* No closing brace: the whole key. */
	ck_assert_int_eq(slot_of("{a"), 10276);
	/* A lock name's keys share its slot. */
	ck_assert_int_eq(
	    slot_of("lockbroker:{job:7}"), slot_of("lockbroker:{job:7}:queue"));
	ck_assert_int_eq(slot_of("lockbroker:{job:7}"), slot_of("job:7"));
}
END_TEST

START_TEST(test_every_slot_has_a_tag)
{
	for (int s = 0; s < SLOT_COUNT; s++) {
		const char *tag = slot_tag(s);
		char key[32] = "lockbroker:{";

		ck_assert_uint_gt(strlen(tag), 0);
		ck_assert_uint_lt(strlen(tag), SLOT_TAG_MAX);
		ck_assert_int_eq(slot_of(tag), s);
		strcat(key, tag);
		strcat(key, "}incarnation");
		ck_assert_int_eq(slot_of(key), s);
	}
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("slot");
	TCase *tc = tcase_create("slot");
	SRunner *sr = srunner_create(s);
	int failed;

	tcase_add_test(tc, test_crc16_xmodem);
	tcase_add_test(tc, test_slots_as_redis);
	tcase_add_test(tc, test_every_slot_has_a_tag);
	suite_add_tcase(s, tc);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

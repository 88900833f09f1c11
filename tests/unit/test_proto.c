/*
 * test_proto: the tokenizer, integer parsing, name and token rules, the
 * constant-time secret compare, the lease arithmetic and RESP formatting,
 * table by table.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto.h"
#include "resp.h"
#include "util.h"

#define nitems(a) (sizeof(a) / sizeof((a)[0]))

static const struct {
	const char *line;
	int argc; /* or PROTO_SPLIT_* */
	const char *argv[4];
} split_cases[] = {
	{ "", 0, { NULL } },
	{ "   \t ", 0, { NULL } },
	{ "PING", 1, { "PING" } },
	{ "  ACQUIRE\tx  TTL 10 ", 4, { "ACQUIRE", "x", "TTL", "10" } },
	{ "a\t\tb", 2, { "a", "b" } },
	{ "caf\xc3\xa9 {x}", 2, { "caf\xc3\xa9", "{x}" } },
	{ "PI\rNG", PROTO_SPLIT_BADBYTE, { NULL } },
	{ "a\x01", PROTO_SPLIT_BADBYTE, { NULL } },
	{ "a\x7f", PROTO_SPLIT_BADBYTE, { NULL } },
	{ "a\x1f b", PROTO_SPLIT_BADBYTE, { NULL } },
	{ "a b c d e", PROTO_SPLIT_TOOMANY, { NULL } },
};

START_TEST(test_split)
{
	char buf[64], *argv[4];
	size_t len = strlen(split_cases[_i].line);
	int argc;

	memcpy(buf, split_cases[_i].line, len + 1);
	argc = proto_split(buf, len, argv, 4);
	ck_assert_int_eq(argc, split_cases[_i].argc);
	for (int j = 0; j < argc; j++)
		ck_assert_str_eq(argv[j], split_cases[_i].argv[j]);
}
END_TEST

START_TEST(test_split_nul_byte)
{
	char buf[] = "PI\0NG";
	char *argv[4];

	ck_assert_int_eq(proto_split(buf, 5, argv, 4), PROTO_SPLIT_BADBYTE);
}
END_TEST

static const struct {
	const char *s;
	uint64_t max;
	int rc;
	uint64_t v;
} int_cases[] = {
	{ "0", UINT64_MAX, 0, 0 },
	{ "007", UINT64_MAX, 0, 7 },
	{ "18446744073709551615", UINT64_MAX, 0, UINT64_MAX },
	{ "18446744073709551616", UINT64_MAX, -1, 0 },
	{ "99999999999999999999", UINT64_MAX, -1, 0 },
	{ "184467440737095516150", UINT64_MAX, -1, 0 },
	{ "9223372036854775807", INT64_MAX, 0, INT64_MAX },
	{ "9223372036854775808", INT64_MAX, -1, 0 },
	{ "10", 9, -1, 0 },
	{ "9", 9, 0, 9 },
	{ "9", 5, -1, 0 },
	{ "", UINT64_MAX, -1, 0 },
	{ "-1", UINT64_MAX, -1, 0 },
	{ "+1", UINT64_MAX, -1, 0 },
	{ "1e3", UINT64_MAX, -1, 0 },
	{ "0x10", UINT64_MAX, -1, 0 },
	{ " 1", UINT64_MAX, -1, 0 },
	{ "1 ", UINT64_MAX, -1, 0 },
	{ "1.5", UINT64_MAX, -1, 0 },
};

START_TEST(test_parse_u64)
{
	uint64_t v = 12345;
	int rc = proto_parse_u64(int_cases[_i].s, int_cases[_i].max, &v);

	ck_assert_msg(rc == int_cases[_i].rc, "%s: rc %d", int_cases[_i].s, rc);
	if (rc == 0)
		ck_assert_uint_eq(v, int_cases[_i].v);
	else
		ck_assert_uint_eq(v, 12345); /* untouched on error */
}
END_TEST

START_TEST(test_names)
{
	char name[PROTO_NAME_MAX + 2];

	ck_assert(proto_valid_name("x"));
	ck_assert(proto_valid_name("orders/{eu}:42"));
	ck_assert(proto_valid_name("caf\xc3\xa9"));
	ck_assert(proto_valid_name("!~"));
	ck_assert(!proto_valid_name(""));
	ck_assert(!proto_valid_name("a b"));
	ck_assert(!proto_valid_name("a\tb"));
	ck_assert(!proto_valid_name("a\x7f"));
	ck_assert(!proto_valid_name("\x1f"));
	memset(name, 'n', PROTO_NAME_MAX);
	name[PROTO_NAME_MAX] = '\0';
	ck_assert(proto_valid_name(name));
	name[PROTO_NAME_MAX] = 'n';
	name[PROTO_NAME_MAX + 1] = '\0';
	ck_assert(!proto_valid_name(name));
}
END_TEST

START_TEST(test_tokens)
{
	char tok[PROTO_TOKEN_MAX + 2];

	ck_assert(proto_valid_token("a"));
	ck_assert(proto_valid_token("Job-42_x.y"));
	ck_assert(!proto_valid_token(""));
	ck_assert(!proto_valid_token("a/b"));
	ck_assert(!proto_valid_token("a b"));
	ck_assert(!proto_valid_token("caf\xc3\xa9"));
	memset(tok, 'T', PROTO_TOKEN_MAX);
	tok[PROTO_TOKEN_MAX] = '\0';
	ck_assert(proto_valid_token(tok));
	tok[PROTO_TOKEN_MAX] = 'T';
	tok[PROTO_TOKEN_MAX + 1] = '\0';
	ck_assert(!proto_valid_token(tok));
}
END_TEST

START_TEST(test_keywords_and_errors)
{
	ck_assert(proto_keyword("acquire", "ACQUIRE"));
	ck_assert(proto_keyword("AcQuIrE", "ACQUIRE"));
	ck_assert(!proto_keyword("ACQUIREX", "ACQUIRE"));
	ck_assert_str_eq(proto_err_name(PERR_PROTO), "PROTO");
	ck_assert_str_eq(proto_err_name(PERR_NOTHELD), "NOTHELD");
	ck_assert_str_eq(proto_err_name(PERR_INTERNAL), "INTERNAL");
	ck_assert_str_eq(proto_err_name(PERR_DENIED), "DENIED");
}
END_TEST

START_TEST(test_random_token)
{
	char a[UTIL_TOKEN_HEXLEN + 1], b[UTIL_TOKEN_HEXLEN + 1];

	util_random_token(a);
	util_random_token(b);
	ck_assert_uint_eq(strlen(a), 32);
	ck_assert(proto_valid_token(a));
	ck_assert_uint_eq(strspn(a, "0123456789abcdef"), 32);
	ck_assert_str_ne(a, b);
}
END_TEST

/* Tokens come from a pool refilled every 256: across several refills,
 * none repeats. */
START_TEST(test_random_tokens_distinct)
{
	enum { N = 1000 };
	static char tok[N][UTIL_TOKEN_HEXLEN + 1];

	for (int i = 0; i < N; i++) {
		util_random_token(tok[i]);
		ck_assert(proto_valid_token(tok[i]));
		for (int j = 0; j < i; j++)
			ck_assert_str_ne(tok[i], tok[j]);
	}
}
END_TEST

static const struct {
	int argc;
	const char *argv[3];
	size_t buflen;
	const char *want; /* NULL: does not fit */
} resp_cases[] = {
	{ 1, { "PING" }, 64, "*1\r\n$4\r\nPING\r\n" },
	{ 3, { "SET", "k", "" }, 64,
	    "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n" },
	{ 0, { NULL }, 64, "*0\r\n" },
	{ 2, { "EVALSHA", "0123456789" }, 40, NULL },
	{ 1, { "PING" }, 8, NULL },
};

START_TEST(test_resp_format)
{
	char buf[64], *argv[3];
	size_t lens[3], n;

	for (int i = 0; i < resp_cases[_i].argc; i++) {
		argv[i] = (char *)resp_cases[_i].argv[i];
		lens[i] = strlen(argv[i]);
	}
	n = resp_format(
	    buf, resp_cases[_i].buflen, resp_cases[_i].argc, argv, lens);
	if (resp_cases[_i].want == NULL) {
		ck_assert_uint_eq(n, 0);
		return;
	}
	ck_assert_uint_eq(n, strlen(resp_cases[_i].want));
	ck_assert_mem_eq(buf, resp_cases[_i].want, n);
}
END_TEST

/* Binary arguments go through as they are, lengths counted, not scanned. */
START_TEST(test_resp_format_binary)
{
	char buf[64], arg[] = { 'a', '\0', '\r', '\n', 'b' };
	char *argv[1] = { arg };
	size_t lens[1] = { sizeof arg };
	static const char want[] = "*1\r\n$5\r\na\0\r\nb\r\n";

	ck_assert_uint_eq(
	    resp_format(buf, sizeof buf, 1, argv, lens), sizeof want - 1);
	ck_assert_mem_eq(buf, want, sizeof want - 1);
}
END_TEST

/* util_u64str and util_cat: the request path's printf-free strings. */
START_TEST(test_u64str_and_cat)
{
	static const struct {
		uint64_t v;
		const char *want;
	} nums[] = { { 0, "0" }, { 7, "7" }, { 10, "10" },
		{ 1795603425813984, "1795603425813984" },
		{ UINT64_MAX, "18446744073709551615" } };
	char buf[UTIL_U64_LEN], small[8], *p;

	for (size_t i = 0; i < nitems(nums); i++) {
		memset(buf, 'x', sizeof buf);
		ck_assert_uint_eq(
		    util_u64str(buf, nums[i].v), strlen(nums[i].want));
		ck_assert_str_eq(buf, nums[i].want);
	}
	p = buf;
	util_cat(&p, buf + sizeof buf, "OK ");
	util_cat_u64(&p, buf + sizeof buf, 42);
	util_cat(&p, buf + sizeof buf, "");
	ck_assert_str_eq(buf, "OK 42");
	ck_assert_ptr_eq(p, buf + 5);
	/* Never past the end: what does not fit is cut, and NUL-ended. */
	memset(small, 'x', sizeof small);
	p = small;
	util_cat(&p, small + sizeof small, "abcd");
	util_cat_u64(&p, small + sizeof small, 123456);
	ck_assert_str_eq(small, "abcd123");
	ck_assert_ptr_eq(p, small + 7);
	util_cat(&p, small + sizeof small, "more");
	ck_assert_str_eq(small, "abcd123");
	ck_assert_ptr_eq(p, small + 7);
}
END_TEST

START_TEST(test_validity_end)
{
	/* start + ttl * (1 - drift) - 2 ms */
	ck_assert_uint_eq(
	    util_validity_end(1000, 10000, 0.01), 1000 + 9900 - 2);
	ck_assert_uint_eq(util_validity_end(0, 300, 0.0), 298);
	ck_assert_uint_eq(util_validity_end(500, 2, 0.0), 500);
	ck_assert_uint_eq(util_validity_end(500, 1, 0.5), 500);
	ck_assert_uint_eq(util_validity_end(UINT64_C(1) << 40, 86400000, 0.01),
	    (UINT64_C(1) << 40) + 85536000 - 2);
}
END_TEST

/* Ranges draw from the tokens' pool: across its refills, and between
 * tokens, every value comes up. */
START_TEST(test_random_range)
{
	unsigned seen = 0;

	for (int i = 0; i < 1000; i++) {
		char tok[UTIL_TOKEN_HEXLEN + 1];
		uint64_t v = util_random_range(5, 9);

		ck_assert(v >= 5 && v <= 9);
		seen |= 1u << (v - 5);
		if (i % 3 == 0)
			util_random_token(tok);
	}
	ck_assert_uint_eq(seen, 0x1f);
	ck_assert_uint_eq(util_random_range(7, 7), 7);
	ck_assert_uint_eq(util_random_range(9, 3), 9);
}
END_TEST

/* A line said once, then at most once a period, with the count held
 * back and how long ago the last was said. */
START_TEST(test_util_every)
{
	struct util_every e = { 0 };
	unsigned unsaid = 9;
	uint64_t ago = 9;

	ck_assert(util_every(&e, 1000, 100, &unsaid, &ago));
	ck_assert_uint_eq(unsaid, 0);
	ck_assert_uint_eq(ago, 0);
	ck_assert(!util_every(&e, 1050, 100, &unsaid, &ago));
	ck_assert(!util_every(&e, 1099, 100, &unsaid, &ago));
	ck_assert(util_every(&e, 1100, 100, &unsaid, &ago));
	ck_assert_uint_eq(unsaid, 2);
	ck_assert_uint_eq(ago, 100);
	ck_assert(util_every(&e, 1300, 100, &unsaid, &ago));
	ck_assert_uint_eq(unsaid, 0);
	ck_assert_uint_eq(ago, 200);
}
END_TEST

START_TEST(test_secret_equal)
{
	ck_assert(util_secret_equal("hunter2", "hunter2"));
	ck_assert(!util_secret_equal("hunter3", "hunter2"));
	ck_assert(!util_secret_equal("hunter", "hunter2"));
	ck_assert(!util_secret_equal("hunter22", "hunter2"));
	ck_assert(!util_secret_equal("", "hunter2"));
	ck_assert(!util_secret_equal("", ""));
	ck_assert(!util_secret_equal("x", ""));
}
END_TEST

static double
secret_time(const char *given, const char *secret, int rounds)
{
	struct timespec a, b;
	volatile int sink = 0;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < rounds; i++)
		sink += util_secret_equal(given, secret);
	clock_gettime(CLOCK_MONOTONIC, &b);
	(void)sink;
	return (double)(b.tv_sec - a.tv_sec) * 1e9 +
	    (double)(b.tv_nsec - a.tv_nsec);
}

/*
 * Timing does not depend on how many leading bytes match: a guess that
 * shares no byte with the secret and one that shares all but the last take
 * the same time, within noise. Best of several runs, to beat scheduling.
 */
START_TEST(test_secret_equal_constant_time)
{
	char secret[4097], none[4097], most[4097];
	double t_none = 1e30, t_most = 1e30;

	memset(secret, 'k', 4096);
	memset(none, 'a', 4096);
	memcpy(most, secret, 4096);
	most[4095] = 'z';
	secret[4096] = none[4096] = most[4096] = '\0';
	for (int run = 0; run < 7; run++) {
		double n = secret_time(none, secret, 2000);
		double m = secret_time(most, secret, 2000);

		t_none = n < t_none ? n : t_none;
		t_most = m < t_most ? m : t_most;
	}
	/* An early-exit compare would make t_none ~4096x smaller; a factor
	 * of 3 either way leaves room for a loaded machine (a sanitizer
	 * build under CI's load once measured 1.3x) and still catches it. */
	ck_assert_msg(t_none > t_most / 3 && t_none < t_most * 3,
	    "none %.0f ns, most %.0f ns", t_none, t_most);
}
END_TEST

static Suite *
proto_suite(void)
{
	Suite *s = suite_create("proto");
	TCase *tc = tcase_create("core");

	tcase_add_loop_test(tc, test_split, 0, nitems(split_cases));
	tcase_add_test(tc, test_split_nul_byte);
	tcase_add_loop_test(tc, test_parse_u64, 0, nitems(int_cases));
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_tokens);
	tcase_add_test(tc, test_keywords_and_errors);
	tcase_add_test(tc, test_random_token);
	tcase_add_test(tc, test_random_tokens_distinct);
	tcase_add_loop_test(tc, test_resp_format, 0, nitems(resp_cases));
	tcase_add_test(tc, test_resp_format_binary);
	tcase_add_test(tc, test_u64str_and_cat);
	tcase_add_test(tc, test_validity_end);
	tcase_add_test(tc, test_random_range);
	tcase_add_test(tc, test_secret_equal);
	tcase_add_test(tc, test_util_every);
	tcase_add_test(tc, test_secret_equal_constant_time);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(proto_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

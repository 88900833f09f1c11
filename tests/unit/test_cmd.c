/*
 * test_cmd: the command table and everything answered before the lock engine
 * would go to Redis — lookup, arity, auth gating, option parsing and the
 * exact error line for each — driven through cmd_execute with no network.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "cmd.h"
#include "config.h"
#include "lock.h"
#include "redisc.h"

#define nitems(a) (sizeof(a) / sizeof((a)[0]))

static struct config cf;
static struct event_base *base;

static void
resume_never(struct session *s)
{
	ck_abort_msg("no request here should go async");
}

static void
setup_with(const char *secret, const char *admin)
{
	config_defaults(&cf);
	free(cf.auth.secret);
	cf.auth.secret = strdup(secret);
	free(cf.auth.admin_secret);
	cf.auth.admin_secret = strdup(admin);
	cf.limits.max_locks_per_client = 1;
	base = event_base_new();
	redisc_init(base, &cf.redis);
	lock_init(base, &cf);
	cmd_init(&cf, NULL);
}

static void
setup(void)
{
	setup_with("", "");
}

/* One entry of auth.identities, made by hand (cmd_init reads it). */
static void
add_ident(const char *name, const char *secret, const char *prefix, int rights)
{
	struct config_identities *ids = &cf.auth.identities;
	struct config_identity *id;

	ids->v = realloc(ids->v, (size_t)(ids->n + 1) * sizeof *ids->v);
	id = &ids->v[ids->n++];
	memset(id, 0, sizeof *id);
	id->name = strdup(name);
	id->secret = strdup(secret);
	id->secret_file = strdup("");
	id->certificate = strdup("");
	id->names[id->nnames++] = strdup(prefix);
	id->rights = rights;
}

/* "billing" may lock under billing/, "auditor" read and revoke under
 * billing/, besides the admin secret of before. */
static void
setup_idents(void)
{
	config_defaults(&cf);
	free(cf.auth.admin_secret);
	cf.auth.admin_secret = strdup("root");
	add_ident("billing", "b1ll", "billing/", CONFIG_RIGHT_LOCK);
	add_ident("auditor", "aud1t", "billing/",
	    CONFIG_RIGHT_READ | CONFIG_RIGHT_REVOKE);
	cf.limits.max_locks_per_client = 1;
	base = event_base_new();
	redisc_init(base, &cf.redis);
	lock_init(base, &cf);
	cmd_init(&cf, NULL);
}

/* Identities that only a TLS client certificate can be: no secret. */
static void
setup_certs(void)
{
	config_defaults(&cf);
	add_ident("billing", "", "billing/", CONFIG_RIGHT_LOCK);
	free(cf.auth.identities.v[0].certificate);
	cf.auth.identities.v[0].certificate = strdup("billing.example");
	base = event_base_new();
	redisc_init(base, &cf.redis);
	lock_init(base, &cf);
	cmd_init(&cf, NULL);
}

static void
setup_auth(void)
{
	setup_with("sesame", "");
}

static void
setup_admin(void)
{
	setup_with("", "root");
}

static void
teardown(void)
{
	cmd_shutdown();
	lock_shutdown();
	redisc_stop();
	event_base_free(base);
	config_free(&cf);
}

/* Run one line on a fresh session; returns the output, caller frees. */
static char *
run(const char *line, enum cmd_result *res)
{
	struct evbuffer *out = evbuffer_new();
	struct session s;
	char buf[1024];
	size_t len = strlen(line);
	char *text;

	memcpy(buf, line, len + 1);
	cmd_session_init(&s, 1, NULL, out, resume_never, NULL);
	/* Lines separated by LF run one after the other on the session. */
	for (char *p = buf, *nl; p != NULL; p = nl) {
		if ((nl = strchr(p, '\n')) != NULL)
			*nl++ = '\0';
		*res = cmd_execute(&s, p, strlen(p));
	}
	cmd_session_end(&s, false);
	len = evbuffer_get_length(out);
	text = calloc(1, len + 1);
	evbuffer_remove(out, text, len);
	evbuffer_free(out);
	return text;
}

/* One line (or LF-separated lines) on a fresh session, and all it says. */
struct cmd_case {
	const char *line;
	const char *reply; /* the whole output */
	enum cmd_result res;
};

static void
check_case(const struct cmd_case *c)
{
	enum cmd_result res;
	char *out = run(c->line, &res);

	ck_assert_str_eq(out, c->reply);
	ck_assert_int_eq(res, c->res);
	free(out);
}

static const struct cmd_case sync_cases[] = {
	{ "", "", CMD_DONE },
	{ "PING", "PONG\n", CMD_DONE },
	{ "ping", "PONG\n", CMD_DONE },
	{ "QUIT", "OK\n", CMD_CLOSE },
	{ "AUTH anything", "OK\n", CMD_DONE }, /* no secret configured */
	{ "NOPE", "ERR UNKNOWN unknown command, try HELP\n", CMD_DONE },
	{ "PING x", "ERR ARGS usage: PING\n", CMD_DONE },
	{ "STATUS", "ERR ARGS usage: STATUS <name>\n", CMD_DONE },
	{ "EXTEND x", "ERR ARGS usage: EXTEND <name> <ttl_ms> [TOKEN <t>]\n",
	    CMD_DONE },
	{ "PING\x01", "ERR PROTO control byte in request\n", CMD_DONE },
	{ "a b c d e f g h i j k l m n o p q", "ERR ARGS more than 16 words\n",
	    CMD_DONE },
	{ "ACQUIRE x TTL abc",
	    "ERR ARGS TTL wants milliseconds, a plain decimal\n", CMD_DONE },
	{ "ACQUIRE x TTL 0",
	    "ERR ARGS ttl must be between 10 and 86400000 ms\n", CMD_DONE },
	{ "ACQUIRE x TTL", "ERR ARGS TTL needs a value: TTL <ms>\n", CMD_DONE },
	{ "ACQUIRE x WAIT", "ERR ARGS WAIT needs a value: WAIT <ms>\n",
	    CMD_DONE },
	{ "ACQUIRE x TLL 500", "ERR ARGS unknown option 'TLL'\n", CMD_DONE },
	{ "ACQUIRE x TTL 5",
	    "ERR ARGS ttl must be between 10 and 86400000 ms\n", CMD_DONE },
	{ "ACQUIRE x KEEP", "ERR ARGS KEEP needs TTL\n", CMD_DONE },
	{ "ACQUIRE x KEEP KEEP", "ERR ARGS repeated option 'KEEP'\n",
	    CMD_DONE },
	{ "ACQUIRE x WAIT 1 wait 2", "ERR ARGS repeated option 'WAIT'\n",
	    CMD_DONE },
	{ "ACQUIRE x TOKEN", "ERR ARGS TOKEN needs a value: TOKEN <t>\n",
	    CMD_DONE },
	{ "ACQUIRE x TOKEN a/b",
	    "ERR ARGS a token is 1-64 of A-Z a-z 0-9 _ . -\n", CMD_DONE },
	{ "ACQUIRE \x80\xff\x80 TTL 5",
	    "ERR ARGS ttl must be between 10 and 86400000 ms\n", CMD_DONE },
	{ "RELEASE x",
	    "ERR NOTHELD this connection does not hold it (give TOKEN <t> "
	    "for a grant made elsewhere)\n",
	    CMD_DONE },
	{ "RELEASE x TOKEN", "ERR ARGS expected TOKEN <t>\n", CMD_DONE },
	{ "RELEASE x TICKET t", "ERR ARGS expected TOKEN <t>\n", CMD_DONE },
	{ "EXTEND x 100",
	    "ERR NOTHELD this connection does not hold it (give TOKEN <t> "
	    "for a grant made elsewhere)\n",
	    CMD_DONE },
	{ "EXTEND x -1",
	    "ERR ARGS EXTEND wants milliseconds, a plain decimal\n", CMD_DONE },
	{ "VALIDATE x 0x1", "ERR ARGS a fence is a plain decimal\n", CMD_DONE },
	{ "LOCKS", "END\n", CMD_DONE },
	{ "ACQUIRE x SHARED LIMIT 2",
	    "ERR ARGS SHARED and LIMIT exclude each other\n", CMD_DONE },
	{ "ACQUIRE x LIMIT 2 SHARED",
	    "ERR ARGS SHARED and LIMIT exclude each other\n", CMD_DONE },
	{ "ACQUIRE x SHARED shared", "ERR ARGS repeated option 'SHARED'\n",
	    CMD_DONE },
	{ "ACQUIRE x LIMIT 2 LIMIT 3", "ERR ARGS repeated option 'LIMIT'\n",
	    CMD_DONE },
	{ "ACQUIRE x LIMIT", "ERR ARGS LIMIT needs a value: LIMIT <n>\n",
	    CMD_DONE },
	{ "ACQUIRE x LIMIT 0", "ERR ARGS LIMIT wants 1-10000\n", CMD_DONE },
	{ "ACQUIRE x LIMIT 10001", "ERR ARGS LIMIT wants 1-10000\n", CMD_DONE },
	{ "ACQUIRE x LIMIT -1", "ERR ARGS LIMIT wants 1-10000\n", CMD_DONE },
	{ "ACQUIRE x LIMIT 3 TTL 5",
	    "ERR ARGS ttl must be between 10 and 86400000 ms\n", CMD_DONE },
	{ "FILL x KEEP", "ERR ARGS FILL takes no KEEP\n", CMD_DONE },
	{ "FILL x SHARED", "ERR ARGS FILL takes no SHARED\n", CMD_DONE },
	{ "FILL x LIMIT 2", "ERR ARGS FILL takes no LIMIT\n", CMD_DONE },
	{ "FILL x TTL 5", "ERR ARGS ttl must be between 10 and 86400000 ms\n",
	    CMD_DONE },
	{ "FILL",
	    "ERR ARGS usage: FILL <name> [TTL <ms>] [WAIT <ms>] "
	    "[TOKEN <t>]\n",
	    CMD_DONE },
	{ "WHO", "ERR ARGS usage: WHO <name>\n", CMD_DONE },
	{ "WHO a b", "ERR ARGS usage: WHO <name>\n", CMD_DONE },
	{ "REVOKE x",
	    "ERR NOAUTH REVOKE is off: auth.admin_secret is not set\n",
	    CMD_DONE },
	{ "REVOKE", "ERR ARGS usage: REVOKE <name>\n", CMD_DONE },
};

START_TEST(test_sync_replies)
{
	check_case(&sync_cases[_i]);
}
END_TEST

START_TEST(test_name_errors)
{
	char line[300] = "STATUS ";
	enum cmd_result res;
	char *out;

	memset(line + 7, 'n', 201);
	out = run(line, &res);
	ck_assert_str_eq(
	    out, "ERR NAME a name is 1-200 bytes of 0x21-0x7E or 0x80-0xFF\n");
	free(out);
}
END_TEST

START_TEST(test_table)
{
	static const char *const verbs[] = { "PING", "AUTH", "ACQUIRE", "FILL",
		"RELEASE", "EXTEND", "STATUS", "VALIDATE", "WHO", "REVOKE",
		"LOCKS", "INFO", "HELP", "QUIT" };
	enum cmd_result res;
	char *help = run("HELP", &res);

	for (size_t i = 0; i < nitems(verbs); i++) {
		const struct cmd_entry *ce = cmd_lookup(verbs[i]);

		ck_assert_ptr_nonnull(ce);
		ck_assert_str_eq(ce->name, verbs[i]);
		ck_assert_int_le(ce->min_args, ce->max_args);
		/* The usage HELP prints starts with the verb. */
		ck_assert(strncmp(ce->usage, ce->name, strlen(ce->name)) == 0);
		ck_assert_ptr_nonnull(strstr(help, ce->usage));
	}
	ck_assert_ptr_null(cmd_lookup("ACQUIREX"));
	ck_assert_ptr_null(cmd_lookup(""));
	ck_assert(
	    strlen(help) > 4 && strcmp(help + strlen(help) - 4, "END\n") == 0);
	free(help);
}
END_TEST

START_TEST(test_info)
{
	enum cmd_result res;
	char *out = run("INFO", &res);

	ck_assert_ptr_nonnull(strstr(out, "STAT version "));
	ck_assert_ptr_nonnull(strstr(out, "\nSTAT grants_total "));
	ck_assert_ptr_nonnull(strstr(out, "\nSTAT redis_up 0\n"));
	ck_assert(strcmp(out + strlen(out) - 4, "END\n") == 0);
	free(out);
}
END_TEST

static const struct cmd_case auth_cases[] = {
	{ "PING", "PONG\n", CMD_DONE },
	{ "QUIT", "OK\n", CMD_CLOSE },
	{ "ACQUIRE x", "ERR NOAUTH AUTH first\n", CMD_DONE },
	{ "ACQUIRE", "ERR NOAUTH AUTH first\n", CMD_DONE },
	{ "LOCKS", "ERR NOAUTH AUTH first\n", CMD_DONE },
	{ "INFO", "ERR NOAUTH AUTH first\n", CMD_DONE },
	{ "AUTH sesame", "OK\n", CMD_DONE },
	{ "AUTH sesam", "ERR AUTH wrong secret\n", CMD_CLOSE },
	{ "AUTH sesamee", "ERR AUTH wrong secret\n", CMD_CLOSE },
	{ "AUTH", "ERR ARGS usage: AUTH <secret>\n", CMD_DONE },
	{ "REVOKE x", "ERR NOAUTH AUTH first\n", CMD_DONE },
	{ "AUTH sesame\nREVOKE x",
	    "OK\nERR NOAUTH REVOKE is off: auth.admin_secret is not set\n",
	    CMD_DONE },
};

/* Only the admin secret set: no AUTH needed, AUTH root makes an admin. */
static const struct cmd_case admin_cases[] = {
	{ "LOCKS", "END\n", CMD_DONE },
	{ "REVOKE x", "ERR NOAUTH REVOKE needs AUTH with auth.admin_secret\n",
	    CMD_DONE },
	{ "AUTH root", "OK\n", CMD_DONE },
	{ "AUTH roo", "ERR AUTH wrong secret\n", CMD_CLOSE },
	{ "AUTH anything", "ERR AUTH wrong secret\n", CMD_CLOSE },
};

/* Identities: each request outside its rights is ERR DENIED, at once. */
static const struct cmd_case ident_cases[] = {
	{ "ACQUIRE billing/x", "ERR NOAUTH AUTH first\n", CMD_DONE },
	{ "AUTH b1ll\nACQUIRE ops/x",
	    "OK\nERR DENIED billing may not lock ops/x\n", CMD_DONE },
	{ "AUTH b1ll\nACQUIRE billing", /* a prefix, not a word */
	    "OK\nERR DENIED billing may not lock billing\n", CMD_DONE },
	{ "AUTH b1ll\nFILL ops/x TTL 100",
	    "OK\nERR DENIED billing may not lock ops/x\n", CMD_DONE },
	{ "AUTH b1ll\nRELEASE ops/x",
	    "OK\nERR DENIED billing may not lock ops/x\n", CMD_DONE },
	{ "AUTH b1ll\nEXTEND ops/x 1000",
	    "OK\nERR DENIED billing may not lock ops/x\n", CMD_DONE },
	{ "AUTH b1ll\nVALIDATE ops/x 7",
	    "OK\nERR DENIED billing may not lock ops/x\n", CMD_DONE },
	{ "AUTH b1ll\nWHO billing/x",
	    "OK\nERR DENIED billing may not read billing/x\n", CMD_DONE },
	{ "AUTH b1ll\nSTATUS billing/x",
	    "OK\nERR DENIED billing may not read billing/x\n", CMD_DONE },
	{ "AUTH b1ll\nREVOKE billing/x",
	    "OK\nERR DENIED billing may not revoke billing/x\n", CMD_DONE },
	{ "AUTH aud1t\nACQUIRE billing/x",
	    "OK\nERR DENIED auditor may not lock billing/x\n", CMD_DONE },
	{ "AUTH aud1t\nWHO ops/x",
	    "OK\nERR DENIED auditor may not read ops/x\n", CMD_DONE },
	{ "AUTH aud1t\nREVOKE ops/x",
	    "OK\nERR DENIED auditor may not revoke ops/x\n", CMD_DONE },
	{ "AUTH b1ll\nLOCKS\nPING\nCANCEL", "OK\nEND\nPONG\nOK\n", CMD_DONE },
	{ "AUTH b1ll\nAUTH aud1t\nACQUIRE billing/x",
	    "OK\nOK\nERR DENIED auditor may not lock billing/x\n", CMD_DONE },
	{ "AUTH b1ll\nAUTH nope", "OK\nERR AUTH wrong secret\n", CMD_CLOSE },
	/* The right is checked before the options: nothing else is said. */
	{ "AUTH b1ll\nACQUIRE ops/x TTL soon",
	    "OK\nERR DENIED billing may not lock ops/x\n", CMD_DONE },
};

/* With only certificate identities, a plain connection is let in by no
 * AUTH: no secret (not even an empty one) is anybody's. */
static const struct cmd_case cert_cases[] = {
	{ "ACQUIRE billing/x", "ERR NOAUTH AUTH first\n", CMD_DONE },
	{ "AUTH anything", "ERR AUTH wrong secret\n", CMD_CLOSE },
	{ "AUTH billing.example", "ERR AUTH wrong secret\n", CMD_CLOSE },
	{ "PING", "PONG\n", CMD_DONE },
};

START_TEST(test_certs)
{
	check_case(&cert_cases[_i]);
}
END_TEST

START_TEST(test_idents)
{
	check_case(&ident_cases[_i]);
}
END_TEST

START_TEST(test_admin)
{
	check_case(&admin_cases[_i]);
}
END_TEST

START_TEST(test_auth_gate)
{
	check_case(&auth_cases[_i]);
}
END_TEST

static Suite *
cmd_suite(void)
{
	Suite *s = suite_create("cmd");
	TCase *tc = tcase_create("open");
	TCase *ta = tcase_create("auth");
	TCase *tm = tcase_create("admin");
	TCase *ti = tcase_create("identities");
	TCase *tcert = tcase_create("certificates");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_sync_replies, 0, nitems(sync_cases));
	tcase_add_test(tc, test_name_errors);
	tcase_add_test(tc, test_table);
	tcase_add_test(tc, test_info);
	suite_add_tcase(s, tc);
	tcase_add_checked_fixture(ta, setup_auth, teardown);
	tcase_add_loop_test(ta, test_auth_gate, 0, nitems(auth_cases));
	suite_add_tcase(s, ta);
	tcase_add_checked_fixture(tm, setup_admin, teardown);
	tcase_add_loop_test(tm, test_admin, 0, nitems(admin_cases));
	suite_add_tcase(s, tm);
	tcase_add_checked_fixture(ti, setup_idents, teardown);
	tcase_add_loop_test(ti, test_idents, 0, nitems(ident_cases));
	suite_add_tcase(s, ti);
	tcase_add_checked_fixture(tcert, setup_certs, teardown);
	tcase_add_loop_test(tcert, test_certs, 0, nitems(cert_cases));
	suite_add_tcase(s, tcert);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(cmd_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

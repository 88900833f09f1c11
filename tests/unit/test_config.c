/*
 * test_config: the config table seen from outside: defaults, a file that sets
 * every key, every kind of bad file (each error must name file, line and
 * key), the shipped example file, and config_diff's reloadable flags.
 */
#include <check.h>
#include <dirent.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "identity.h"
#include "lb_build.h"

#define nitems(a) (sizeof(a) / sizeof((a)[0]))

static char tmpdir[256]; /* short, so every path built on it fits */

/* Unchecked fixture: runs in the parent, so files of failed tests go too. */
static void
tmp_setup(void)
{
	const char *base = getenv("TMPDIR");

	snprintf(tmpdir, sizeof tmpdir, "%s/lbconfig.XXXXXX",
	    base != NULL && *base != '\0' ? base : "/tmp");
	if (mkdtemp(tmpdir) == NULL) {
		perror("mkdtemp");
		exit(1);
	}
}

/* Empty the directory, then remove it. */
static void
tmp_teardown(void)
{
	char path[PATH_MAX + 256];
	struct dirent *de;
	DIR *d;

	if ((d = opendir(tmpdir)) != NULL) {
		while ((de = readdir(d)) != NULL) {
			if (de->d_name[0] == '.')
				continue;
			snprintf(
			    path, sizeof path, "%s/%s", tmpdir, de->d_name);
			unlink(path);
		}
		closedir(d);
	}
	rmdir(tmpdir);
}

/* A fresh file under tmpdir holding text; its name goes to path. */
static void
write_conf(const char *text, char *path, size_t len)
{
	size_t n = strlen(text);
	int fd;

	snprintf(path, len, "%s/conf.XXXXXX", tmpdir);
	fd = mkstemp(path);
	ck_assert_int_ne(fd, -1);
	ck_assert_int_eq(write(fd, text, n), (ssize_t)n);
	ck_assert_int_eq(close(fd), 0);
}

/* Load text as a file; the file is gone again when this returns. */
static int
load_text(struct config *cf, const char *text, char *path, size_t pathlen,
    char *err, size_t errlen)
{
	int rv;

	write_conf(text, path, pathlen);
	rv = config_load(cf, path, true, err, errlen);
	unlink(path);
	return rv;
}

/* config_diff callback that counts and remembers what it was told. */
struct seen {
	int n;
	char key[64][40];
	bool reloadable[64];
};

static void
seen_fn(const char *key, bool reloadable, void *arg)
{
	struct seen *s = arg;

	ck_assert_int_lt(s->n, 64);
	snprintf(s->key[s->n], sizeof s->key[s->n], "%s", key);
	s->reloadable[s->n] = reloadable;
	s->n++;
}

/* Index of key in what config_diff reported, -1 if absent. */
static int
seen_find(const struct seen *s, const char *key)
{
	int i;

	for (i = 0; i < s->n; i++) {
		if (strcmp(s->key[i], key) == 0)
			return i;
	}
	return -1;
}

/* Every default of docs/configuration.md, checked field by field. */
static void
assert_defaults(const struct config *cf)
{
	ck_assert_str_eq(cf->listen.address, "127.0.0.1");
	ck_assert_int_eq(cf->listen.port, 7878);
	ck_assert_str_eq(cf->listen.unix_path, "");
	ck_assert_int_eq(cf->listen.unix_mode, 0660);
	ck_assert_str_eq(cf->redis.host, "127.0.0.1");
	ck_assert_int_eq(cf->redis.port, 6379);
	ck_assert_str_eq(cf->redis.unix_path, "");
	ck_assert_str_eq(cf->redis.username, "");
	ck_assert_str_eq(cf->redis.password, "");
	ck_assert_str_eq(cf->redis.password_file, "");
	ck_assert_int_eq(cf->redis.db, 0);
	ck_assert_str_eq(cf->redis.prefix, "lockbroker:");
	ck_assert_int_eq(cf->redis.connect_timeout_ms, 1000);
	ck_assert_int_eq(cf->redis.command_timeout_ms, 1000);
	ck_assert_int_eq(cf->redis.reconnect_min_ms, 100);
	ck_assert_int_eq(cf->redis.reconnect_max_ms, 5000);
	ck_assert_int_eq(cf->redis.nsentinels, 0);
	ck_assert_str_eq(cf->redis.master_name, "");
	ck_assert_int_eq(cf->redis.wait_replicas, 0);
	ck_assert(!cf->redis.tls);
	ck_assert_str_eq(cf->redis.tls_ca, "");
	ck_assert_str_eq(cf->redis.tls_certificate, "");
	ck_assert_str_eq(cf->redis.tls_key, "");
	ck_assert_str_eq(cf->redis.tls_server_name, "");
	ck_assert_int_eq(cf->locks.lease_ms, 10000);
	ck_assert_int_eq(cf->locks.min_ttl_ms, 10);
	ck_assert_int_eq(cf->locks.max_ttl_ms, 86400000);
	ck_assert_int_eq(cf->locks.default_wait_ms, -1);
	ck_assert_int_eq(cf->locks.max_hold_ms, 0);
	ck_assert_int_eq(cf->locks.lock_delay_ms, 0);
	ck_assert_int_eq(cf->locks.retry_min_ms, 5);
	ck_assert_int_eq(cf->locks.retry_max_ms, 1000);
	ck_assert_double_eq(cf->locks.clock_drift, 0.01);
	ck_assert_int_eq(cf->limits.max_clients, 1024);
	ck_assert_int_eq(cf->limits.max_line, 512);
	ck_assert_int_eq(cf->limits.max_locks_per_client, 64);
	ck_assert_int_eq(cf->limits.max_pending, 32);
	ck_assert_int_eq(cf->limits.max_waiters, 100000);
	ck_assert_int_eq(cf->limits.idle_timeout_s, 0);
	ck_assert_int_eq(cf->limits.auth_timeout_s, 10);
	ck_assert_str_eq(cf->auth.secret, "");
	ck_assert_str_eq(cf->auth.secret_file, "");
	ck_assert_str_eq(cf->auth.admin_secret, "");
	ck_assert_str_eq(cf->auth.admin_secret_file, "");
	ck_assert_str_eq(cf->log.level, "info");
	ck_assert(!cf->log.syslog);
	ck_assert(!cf->metrics.enabled);
	ck_assert_str_eq(cf->metrics.address, "127.0.0.1");
	ck_assert_int_eq(cf->metrics.port, 9878);
}

/* After a failed load nothing may be left allocated. */
static void
assert_zeroed(const struct config *cf)
{
	static const struct config zero;

	ck_assert(memcmp(cf, &zero, sizeof zero) == 0);
}

START_TEST(test_defaults)
{
	struct config cf, cd;
	char err[256] = "untouched";
	struct seen s = { 0 };

	ck_assert_int_eq(config_load(&cf, NULL, true, err, sizeof err), 0);
	ck_assert_str_eq(err, "");
	ck_assert_ptr_null(cf.path);
	assert_defaults(&cf);
	config_defaults(&cd);
	config_diff(&cf, &cd, seen_fn, &s);
	ck_assert_int_eq(s.n, 0);
	config_free(&cd);
	config_free(&cf);
	assert_zeroed(&cf);
}
END_TEST

/* Every key away from its default, so a dropped row shows up here. */
static const char full_conf[] =
    "# every key, none at its default\n"
    "listen = {\n"
    "  address = \"0.0.0.0\";\n"
    "  port = 17878;\n"
    "  unix = \"/run/lockbroker/lb.sock\";\n"
    "  unix_mode = \"0600\";\n"
    "};\n"
    "redis = {\n"
    "  host = \"redis.example\";\n"
    "  port = 16379;\n"
    "  unix = \"/run/redis/redis.sock\";\n"
    "  username = \"lb\";\n"
    "  password = \"hunter2\";\n"
    "  password_file = \"/etc/lockbroker/redis.pw\";\n"
    "  db = 3;\n"
    "  prefix = \"lb:test:\";\n"
    "  connect_timeout_ms = 2000;\n"
    "  command_timeout_ms = 3000;\n"
    "  reconnect_min_ms = 50;\n"
    "  reconnect_max_ms = 10000;\n"
    "  sentinels = [ \"10.0.0.1:26379\", \"10.0.0.2:26379\",\n"
    "                \"[::1]:26380\" ];\n"
    "  master_name = \"mymaster\";\n"
    "  wait_replicas = 2;\n"
    "};\n"
    "locks = {\n"
    "  lease_ms = 20000;\n"
    "  min_ttl_ms = 100;\n"
    "  max_ttl_ms = 2147483647000L;\n"
    "  default_wait_ms = 5000;\n"
    "  max_hold_ms = 3600000;\n"
    "  lock_delay_ms = 250;\n"
    "  retry_min_ms = 10;\n"
    "  retry_max_ms = 2000;\n"
    "  clock_drift = 0.05;\n"
    "};\n"
    "limits = {\n"
    "  max_clients = 4096;\n"
    "  max_line = 1024;\n"
    "  max_locks_per_client = 128;\n"
    "  max_pending = 64;\n"
    "  max_waiters = 5000;\n"
    "  idle_timeout_s = 300;\n"
    "  auth_timeout_s = 5;\n"
    "};\n"
    "auth = { secret = \"s3cret\"; secret_file = \"/etc/lockbroker/secret\";\n"
    "  admin_secret = \"adm1n\";\n"
    "  admin_secret_file = \"/etc/lockbroker/admin\";\n"
    "  identities = ( { name = \"billing\"; secret = \"b1ll\";\n"
    "    names = [ \"billing/\", \"invoices.\" ]; rights = [ \"lock\" ]; },\n"
    "    { name = \"ops\"; secret_file = \"/etc/lockbroker/ops\";\n"
    "      names = [ \"*\" ]; rights = [ \"read\", \"revoke\" ]; } ); };\n"
    "log = { level = \"debug\"; syslog = true; };\n"
    "metrics = { enabled = true; address = \"0.0.0.0\"; port = 19878; };\n";

START_TEST(test_full_file)
{
	struct config cf;
	char path[PATH_MAX], err[512];

	ck_assert_msg(
	    load_text(&cf, full_conf, path, sizeof path, err, sizeof err) == 0,
	    "%s", err);
	ck_assert_str_eq(cf.path, path);
	ck_assert_str_eq(cf.listen.address, "0.0.0.0");
	ck_assert_int_eq(cf.listen.port, 17878);
	ck_assert_str_eq(cf.listen.unix_path, "/run/lockbroker/lb.sock");
	ck_assert_int_eq(cf.listen.unix_mode, 0600);
	ck_assert_str_eq(cf.redis.host, "redis.example");
	ck_assert_int_eq(cf.redis.port, 16379);
	ck_assert_str_eq(cf.redis.unix_path, "/run/redis/redis.sock");
	ck_assert_str_eq(cf.redis.username, "lb");
	ck_assert_str_eq(cf.redis.password, "hunter2");
	ck_assert_str_eq(cf.redis.password_file, "/etc/lockbroker/redis.pw");
	ck_assert_int_eq(cf.redis.db, 3);
	ck_assert_str_eq(cf.redis.prefix, "lb:test:");
	ck_assert_int_eq(cf.redis.connect_timeout_ms, 2000);
	ck_assert_int_eq(cf.redis.command_timeout_ms, 3000);
	ck_assert_int_eq(cf.redis.reconnect_min_ms, 50);
	ck_assert_int_eq(cf.redis.reconnect_max_ms, 10000);
	ck_assert_int_eq(cf.redis.nsentinels, 3);
	ck_assert_str_eq(cf.redis.sentinels[0], "10.0.0.1:26379");
	ck_assert_str_eq(cf.redis.sentinels[1], "10.0.0.2:26379");
	ck_assert_str_eq(cf.redis.sentinels[2], "[::1]:26380");
	ck_assert_str_eq(cf.redis.master_name, "mymaster");
	ck_assert_int_eq(cf.redis.wait_replicas, 2);
	ck_assert_int_eq(cf.locks.lease_ms, 20000);
	ck_assert_int_eq(cf.locks.min_ttl_ms, 100);
	ck_assert_int_eq(cf.locks.max_ttl_ms, INT64_C(2147483647000));
	ck_assert_int_eq(cf.locks.default_wait_ms, 5000);
	ck_assert_int_eq(cf.locks.max_hold_ms, 3600000);
	ck_assert_int_eq(cf.locks.lock_delay_ms, 250);
	ck_assert_int_eq(cf.locks.retry_min_ms, 10);
	ck_assert_int_eq(cf.locks.retry_max_ms, 2000);
	ck_assert_double_eq(cf.locks.clock_drift, 0.05);
	ck_assert_int_eq(cf.limits.max_clients, 4096);
	ck_assert_int_eq(cf.limits.max_line, 1024);
	ck_assert_int_eq(cf.limits.max_locks_per_client, 128);
	ck_assert_int_eq(cf.limits.max_pending, 64);
	ck_assert_int_eq(cf.limits.max_waiters, 5000);
	ck_assert_int_eq(cf.limits.idle_timeout_s, 300);
	ck_assert_int_eq(cf.limits.auth_timeout_s, 5);
	ck_assert_str_eq(cf.auth.secret, "s3cret");
	ck_assert_str_eq(cf.auth.secret_file, "/etc/lockbroker/secret");
	ck_assert_str_eq(cf.auth.admin_secret, "adm1n");
	ck_assert_str_eq(cf.auth.admin_secret_file, "/etc/lockbroker/admin");
	ck_assert_int_eq(cf.auth.identities.n, 2);
	ck_assert_str_eq(cf.auth.identities.v[0].name, "billing");
	ck_assert_str_eq(cf.auth.identities.v[0].secret, "b1ll");
	ck_assert_str_eq(cf.auth.identities.v[0].secret_file, "");
	ck_assert_int_eq(cf.auth.identities.v[0].nnames, 2);
	ck_assert_str_eq(cf.auth.identities.v[0].names[0], "billing/");
	ck_assert_str_eq(cf.auth.identities.v[0].names[1], "invoices.");
	ck_assert_int_eq(cf.auth.identities.v[0].rights, CONFIG_RIGHT_LOCK);
	ck_assert_int_eq(cf.auth.identities.v[0].line, 49);
	ck_assert_str_eq(cf.auth.identities.v[1].name, "ops");
	ck_assert_str_eq(cf.auth.identities.v[1].secret, "");
	ck_assert_str_eq(
	    cf.auth.identities.v[1].secret_file, "/etc/lockbroker/ops");
	ck_assert_str_eq(cf.auth.identities.v[1].names[0], ""); /* "*" */
	ck_assert_int_eq(cf.auth.identities.v[1].rights,
	    CONFIG_RIGHT_READ | CONFIG_RIGHT_REVOKE);
	ck_assert_str_eq(cf.log.level, "debug");
	ck_assert(cf.log.syslog);
	ck_assert(cf.metrics.enabled);
	ck_assert_str_eq(cf.metrics.address, "0.0.0.0");
	ck_assert_int_eq(cf.metrics.port, 19878);
	config_free(&cf);
	assert_zeroed(&cf);
}
END_TEST

/* Reloadable: log.level, limits.*, locks.*, auth.*, redis.password(_file). */
static bool
expect_reloadable(const char *key)
{
	return strcmp(key, "log.level") == 0 ||
	    strncmp(key, "limits.", 7) == 0 || strncmp(key, "locks.", 6) == 0 ||
	    strcmp(key, "auth.secret") == 0 ||
	    strcmp(key, "auth.secret_file") == 0 ||
	    strcmp(key, "auth.admin_secret") == 0 ||
	    strcmp(key, "auth.admin_secret_file") == 0 ||
	    strcmp(key, "auth.identities") == 0 ||
	    strcmp(key, "redis.password") == 0 ||
	    strcmp(key, "redis.password_file") == 0;
}

/* The full file changes every key: each reported once, flagged right. */
START_TEST(test_diff_every_key)
{
	struct config a, b;
	struct seen s = { 0 };
	char path[PATH_MAX], err[512];
	int i;

	config_defaults(&a);
	ck_assert_msg(
	    load_text(&b, full_conf, path, sizeof path, err, sizeof err) == 0,
	    "%s", err);
	config_diff(&a, &b, seen_fn, &s);
	ck_assert_int_eq(s.n, 45); /* every row of config_keys[] */
	for (i = 0; i < s.n; i++) {
		ck_assert_int_eq(seen_find(&s, s.key[i]), i);
		ck_assert_msg(s.reloadable[i] == expect_reloadable(s.key[i]),
		    "%s: reloadable %d", s.key[i], s.reloadable[i]);
	}
	config_free(&a);
	config_free(&b);
}
END_TEST

/* A few hand-made changes: exactly those keys, with their flags. */
START_TEST(test_diff_some_keys)
{
	static const struct {
		const char *key;
		bool reloadable;
	} want[] = {
		{ "listen.port", false },
		{ "redis.password", true },
		{ "redis.sentinels", false },
		{ "redis.tls", false },
		{ "redis.tls_ca", true },
		{ "locks.lease_ms", true },
		{ "locks.clock_drift", true },
		{ "auth.admin_secret", true },
		{ "auth.admin_secret_file", true },
		{ "log.level", true },
		{ "log.syslog", false },
	};
	struct config a, b;
	struct seen s = { 0 };
	size_t i;
	int at;

	config_defaults(&a);
	config_defaults(&b);
	config_diff(&a, &b, seen_fn, &s);
	ck_assert_int_eq(s.n, 0);

	b.listen.port = 1;
	free(b.redis.password);
	b.redis.password = strdup("changed");
	b.redis.sentinels[b.redis.nsentinels++] = strdup("h:1");
	b.redis.tls = true;
	free(b.redis.tls_ca);
	b.redis.tls_ca = strdup("/etc/lockbroker/redis-ca.pem");
	b.locks.lease_ms++;
	b.locks.clock_drift = 0.2;
	free(b.auth.admin_secret);
	b.auth.admin_secret = strdup("adm1n");
	free(b.auth.admin_secret_file);
	b.auth.admin_secret_file = strdup("/etc/lockbroker/admin");
	free(b.log.level);
	b.log.level = strdup("debug");
	b.log.syslog = true;
	config_diff(&a, &b, seen_fn, &s);
	ck_assert_int_eq(s.n, (int)nitems(want));
	for (i = 0; i < nitems(want); i++) {
		at = seen_find(&s, want[i].key);
		ck_assert_msg(at != -1, "%s not reported", want[i].key);
		ck_assert(s.reloadable[at] == want[i].reloadable);
	}
	config_free(&a);
	config_free(&b);
}
END_TEST

START_TEST(test_missing_ok)
{
	struct config cf;
	char path[PATH_MAX], err[256];

	snprintf(path, sizeof path, "%s/does-not-exist.conf", tmpdir);
	ck_assert_int_eq(config_load(&cf, path, false, err, sizeof err), 0);
	ck_assert_ptr_null(cf.path);
	assert_defaults(&cf);
	config_free(&cf);
}
END_TEST

START_TEST(test_missing_must_exist)
{
	struct config cf;
	char path[PATH_MAX], err[PATH_MAX + 64], want[PATH_MAX + 64];

	snprintf(path, sizeof path, "%s/does-not-exist.conf", tmpdir);
	ck_assert_int_eq(config_load(&cf, path, true, err, sizeof err), -1);
	snprintf(want, sizeof want, "%s: No such file or directory", path);
	ck_assert_str_eq(err, want);
	assert_zeroed(&cf);
}
END_TEST

/* A directory is not a missing file: it is an error either way. */
START_TEST(test_directory)
{
	struct config cf;
	char err[PATH_MAX + 64], want[PATH_MAX + 64];

	ck_assert_int_eq(config_load(&cf, tmpdir, false, err, sizeof err), -1);
	snprintf(want, sizeof want, "%s: Is a directory", tmpdir);
	ck_assert_str_eq(err, want);
	assert_zeroed(&cf);
}
END_TEST

/* Files libconfig accepts but that must not load; key NULL: no key. */
static const struct bad {
	const char *text;
	int line;
	const char *key;
	const char *why;
} bad[] = {
	{ "listen = {\n  port = ;\n};\n", 2, NULL, "syntax error" },
	{ "log = { level = \"info\"; };\nlog = { };\n", 2, "log",
	    "duplicate setting name (first at line 1)" },
	{ "auth = { secret = \"s\"; };\n# more\nauth = { secret_file = \"f\"; };\n",
	    3, "auth", "duplicate setting name (first at line 1)" },
	{ "locks = {\n  lease_ms = 100;\n  lease_ms = 200;\n};\n", 3,
	    "locks.lease_ms", "duplicate setting name (first at line 2)" },
	{ "redis = { cluster = ( { a = 1; }, { a = 2; } ); a = 3;\n  a = 4; };\n",
	    2, "redis.a", "duplicate setting name (first at line 1)" },
	{ "@include \"other.conf\"\n", 1, NULL, "@include is not supported" },
	{ "listen = { port = 1; };\nfoo = { bar = 1; };\n", 2, "foo",
	    "unknown key" },
	{ "port = 1;\n", 1, "port", "unknown key" },
	{ "locks = 5;\n", 1, "locks", "expected a group" },
	{ "redis = {\n  host = \"x\";\n  hots = \"y\";\n};\n", 3, "redis.hots",
	    "unknown key" },
	{ "redis = { sentinel = { x = 1; }; };\n", 1, "redis.sentinel",
	    "unknown key" },
	{ "listen = {\n  port = \"7878\";\n};\n", 2, "listen.port",
	    "expected an integer" },
	{ "redis = {\n  host = 5;\n};\n", 2, "redis.host",
	    "expected a string" },
	{ "limits = { max_line = 1.5; };\n", 1, "limits.max_line",
	    "expected an integer" },
	{ "locks = { lease_ms = \"10s\"; };\n", 1, "locks.lease_ms",
	    "expected an integer" },
	{ "locks = { clock_drift = \"0.1\"; };\n", 1, "locks.clock_drift",
	    "expected a number" },
	{ "log = { syslog = 1; };\n", 1, "log.syslog",
	    "expected true or false" },
	{ "listen = {\n  port = 0;\n};\n", 2, "listen.port",
	    "must be between 1 and 65535" },
	{ "listen = {\n\n  port = 70000;\n};\n", 3, "listen.port",
	    "must be between 1 and 65535" },
	{ "metrics = { port = 5000000000L; };\n", 1, "metrics.port",
	    "must be between 1 and 65535" },
	{ "listen = {\n  port = 4294973296;\n};\n", 2, "listen.port",
	    "4294973296 is too large for a plain integer; write 4294973296L" },
	{ "locks = { max_ttl_ms = 86400000000; };\n", 1, "locks.max_ttl_ms",
	    "too large for a plain integer" },
	{ "redis = { db = 0xFFFFFFFF; };\n", 1, "redis.db",
	    "too large for a plain integer" },
	{ "redis = { db = -1; };\n", 1, "redis.db",
	    "must be between 0 and 2147483647" },
	{ "locks = { lease_ms = 29; };\n", 1, "locks.lease_ms",
	    "must be between 30 and 86400000" },
	{ "locks = { max_ttl_ms = 2147483647001L; };\n", 1, "locks.max_ttl_ms",
	    "must be between 1 and 2147483647000" },
	{ "locks = { default_wait_ms = -2; };\n", 1, "locks.default_wait_ms",
	    "must be between -1 and 86400000" },
	{ "locks = { clock_drift = 0.6; };\n", 1, "locks.clock_drift",
	    "must be between 0 and 0.5" },
	{ "locks = { clock_drift = 1; };\n", 1, "locks.clock_drift",
	    "must be between 0 and 0.5" },
	{ "limits = { max_line = 63; };\n", 1, "limits.max_line",
	    "must be between 64 and 65536" },
	{ "redis = {\n  sentinels = [ \"127.0.0.1:26379\" ];\n};\n", 2,
	    "redis.sentinels",
	    "redis.sentinels and redis.master_name go together" },
	{ "redis = {\n  master_name = \"m\";\n};\n", 2, "redis.master_name",
	    "redis.sentinels and redis.master_name go together" },
	{ "redis = {\n  unix = \"/tmp/r.sock\";\n  cluster = [ \"127.0.0.1:7000\" ];\n};\n",
	    3, "redis.cluster",
	    "a cluster's nodes are found by address: not with redis.sentinels or redis.unix" },
	{ "redis = {\n  cluster = [ \"127.0.0.1\" ];\n};\n", 2, "redis.cluster",
	    "each entry must be \"host:port\"" },
	{ "locks = {\n  retry_min_ms = 2000;\n  retry_max_ms = 1500;\n};\n", 3,
	    "locks.retry_max_ms",
	    "must be at least locks.retry_min_ms (2000)" },
	{ "locks = {\n  retry_max_ms = 1500;\n  retry_min_ms = 2000;\n};\n", 2,
	    "locks.retry_max_ms",
	    "must be at least locks.retry_min_ms (2000)" },
	{ "locks = {\n  retry_min_ms = 2000;\n};\n", 2, "locks.retry_min_ms",
	    "must be at most locks.retry_max_ms (1000)" },
	{ "locks = {\n  min_ttl_ms = 50;\n  max_ttl_ms = 20;\n};\n", 3,
	    "locks.max_ttl_ms", "must be at least locks.min_ttl_ms (50)" },
	{ "redis = {\n  reconnect_max_ms = 10;\n};\n", 2,
	    "redis.reconnect_max_ms",
	    "must be at least redis.reconnect_min_ms (100)" },
	{ "log = {\n  level = \"verbose\";\n};\n", 2, "log.level",
	    "must be one of debug, info, warning, error" },
	{ "log = { level = \"INFO\"; };\n", 1, "log.level", "must be one of" },
	{ "listen = {\n  unix_mode = \"0999\";\n};\n", 2, "listen.unix_mode",
	    "must be octal digits between \"0000\" and \"0777\"" },
	{ "listen = { unix_mode = \"1777\"; };\n", 1, "listen.unix_mode",
	    "must be octal digits" },
	{ "listen = { unix_mode = \"\"; };\n", 1, "listen.unix_mode",
	    "must be octal digits" },
	{ "listen = { unix_mode = \"0660 \"; };\n", 1, "listen.unix_mode",
	    "must be octal digits" },
	{ "listen = { unix_mode = 0660; };\n", 1, "listen.unix_mode",
	    "expected a string of octal digits such as \"0660\"" },
	{ "redis = {\n  sentinels = [ \"a:1\", \"b:2\", \"c:3\", \"d:4\", "
	  "\"e:5\", \"f:6\", \"g:7\", \"h:8\", \"i:9\", \"j:10\", \"k:11\", "
	  "\"l:12\", \"m:13\", \"n:14\", \"o:15\", \"p:16\", \"q:17\" ];\n};\n",
	    2, "redis.sentinels", "must have at most 16 entries" },
	{ "redis = {\n  sentinels = ( \"a:1\",\n    \"nocolon\" );\n};\n", 3,
	    "redis.sentinels", "each entry must be \"host:port\"" },
	{ "redis = { sentinels = [ \"a:0\" ]; };\n", 1, "redis.sentinels",
	    "port must be between 1 and 65535" },
	{ "redis = { sentinels = [ \"a:\" ]; };\n", 1, "redis.sentinels",
	    "each entry must be" },
	{ "redis = { sentinels = [ \":1\" ]; };\n", 1, "redis.sentinels",
	    "each entry must be" },
	{ "redis = { sentinels = ( \"a:1\", 5 ); };\n", 1, "redis.sentinels",
	    "expected a list of strings" },
	{ "redis = { sentinels = \"a:1\"; };\n", 1, "redis.sentinels",
	    "expected a list of strings" },
	{ "redis = { prefix = \"\"; };\n", 1, "redis.prefix",
	    "must be 1 to 64 bytes" },
	{ "redis = { prefix = \"0123456789012345678901234567890123456789"
	  "01234567890123456789012345\"; };\n",
	    1, "redis.prefix", "must be 1 to 64 bytes" },
	{ "redis = { prefix = \"lock broker:\"; };\n", 1, "redis.prefix",
	    "must not contain spaces, braces or control characters" },
	{ "redis = { prefix = \"{lb}:\"; };\n", 1, "redis.prefix",
	    "must not contain" },
	{ "redis = { prefix = \"lb\\t:\"; };\n", 1, "redis.prefix",
	    "must not contain" },
	{ "listen = { unix = \"/tmp/012345678901234567890123456789012345678901"
	  "2345678901234567890123456789012345678901234567890123456789.sock\"; "
	  "};\n",
	    1, "listen.unix", "must be at most 107 bytes" },
	{ "auth = {\n  secret = \"same\";\n  admin_secret = \"same\";\n};\n", 3,
	    "auth.admin_secret", "must differ from auth.secret" },
	{ "auth = {\n  admin_secret = \"same\";\n\n  secret = \"same\";\n};\n",
	    2, "auth.admin_secret", "must differ from auth.secret" },
	{ "auth = { secret = \"same\"; secret_file = \"/s\";\n"
	  "  admin_secret = \"same\"; admin_secret_file = \"/a\"; };\n",
	    2, "auth.admin_secret", "must differ from auth.secret" },
	{ "auth = {\n  admin_secret = 5;\n};\n", 2, "auth.admin_secret",
	    "expected a string" },
	{ "auth = { admin_secret_file = true; };\n", 1,
	    "auth.admin_secret_file", "expected a string" },
	{ "auth = { admin_secret = [ \"a\" ]; };\n", 1, "auth.admin_secret",
	    "expected a string" },
	{ "auth = { admin_secrets = \"a\"; };\n", 1, "auth.admin_secrets",
	    "unknown key" },
	{ "listen = {\n  address = \"0.0.0.0\";\n};\n"
	  "auth = { admin_secret = \"adm1n\"; };\n",
	    2, "listen.address", "beyond loopback needs auth.secret" },
	{ "auth = { secret_file = \"lockbroker.secret\"; };\n", 1,
	    "auth.secret_file",
	    "\"lockbroker.secret\" is a credential name, but "
	    "CREDENTIALS_DIRECTORY is not set" },
	{ "redis = {\n  password_file = \"redis.pw\";\n};\n", 2,
	    "redis.password_file", "CREDENTIALS_DIRECTORY is not set" },
	{ "auth = { admin_secret_file = \"creds/admin\"; };\n", 1,
	    "auth.admin_secret_file",
	    "must be an absolute path or a credential name (no \"/\")" },
	{ "auth = { secret_file = \"..\"; };\n", 1, "auth.secret_file",
	    "must be an absolute path or a credential name" },
	/* auth.identities: each member checked, with its line. */
	{ "auth = { identities = { name = \"a\"; }; };\n", 1, "auth.identities",
	    "expected a list of groups" },
	{ "auth = { identities = ( \"a\" ); };\n", 1, "auth.identities[0]",
	    "expected a group" },
	{ "auth = { identities = (\n  { name = \"a\"; secret = \"x\";\n"
	  "    names = [ \"a/\" ]; rights = [ \"lock\" ];\n"
	  "    right = [ \"read\" ]; } ); };\n",
	    4, "auth.identities[0].right", "unknown key" },
	{ "auth = { identities = (\n  { secret = \"x\"; names = [ \"*\" ]; "
	  "rights = [ \"lock\" ]; } ); };\n",
	    2, "auth.identities[0].name", "missing" },
	{ "auth = { identities = ( { name = \"a b\"; secret = \"x\"; "
	  "names = [ \"*\" ]; rights = [ \"lock\" ]; } ); };\n",
	    1, "auth.identities[0].name", "may hold only letters" },
	{ "auth = { identities = ( { name = \"admin\"; secret = \"x\"; "
	  "names = [ \"*\" ]; rights = [ \"lock\" ]; } ); };\n",
	    1, "auth.identities[0].name", "are the names of auth.secret" },
	{ "auth = { identities = ( { name = \"a\"; names = [ \"*\" ]; "
	  "rights = [ \"lock\" ]; } ); };\n",
	    1, "auth.identities[0]",
	    "needs secret, secret_file or certificate" },
	{ "auth = { identities = ( { name = \"a\"; secret = \"x\"; "
	  "secret_file = \"/x\"; names = [ \"*\" ]; rights = [ \"lock\" ]; "
	  "} ); };\n",
	    1, "auth.identities[0]", "needs secret or secret_file, not both" },
	{ "auth = { identities = ( { name = \"a\"; certificate = \"c.example\"; "
	  "names = [ \"*\" ]; rights = [ \"lock\" ]; }, { name = \"b\"; "
	  "certificate = \"c.example\"; names = [ \"*\" ]; "
	  "rights = [ \"lock\" ]; } ); };\n",
	    1, "auth.identities[1].certificate",
	    "\"c.example\" is already the certificate of \"a\"" },
	{ "tls = { port = 7879; key = \"/k\"; };\n", 1, "tls.certificate",
	    "needed with tls.port" },
	{ "tls = { port = 7879; certificate = \"/c\"; key = \"/k\"; "
	  "client_certificates = \"require\"; };\n",
	    1, "tls.ca", "needed with tls.client_certificates" },
	/* redis.tls: its keys need it, and a build with it (-Dredis_tls). */
	{ "redis = {\n  tls_ca = \"/ca.pem\";\n};\n", 2, "redis.tls_ca",
	    "needs redis.tls = true" },
	{ "redis = { tls = false; tls_server_name = \"r.example\"; };\n", 1,
	    "redis.tls_server_name", "needs redis.tls = true" },
#if LB_REDIS_TLS
	{ "redis = { tls = true;\n  tls_certificate = \"/c.pem\"; };\n", 2,
	    "redis.tls_certificate", "needs redis.tls_key" },
	{ "redis = { tls = true;\n  tls_key = \"/k.pem\"; };\n", 2,
	    "redis.tls_key", "needs redis.tls_certificate" },
	{ "redis = {\n  tls = true;\n  unix = \"/run/r.sock\";\n};\n", 2,
	    "redis.tls",
	    "not with redis.unix: a Unix socket is not encrypted" },
#else
	{ "redis = {\n  tls = true;\n};\n", 2, "redis.tls",
	    "this lockbrokerd was built without TLS to Redis (meson setup "
	    "-Dredis_tls=enabled; see the README)" },
#endif
	{ "tls = { client_certificates = \"maybe\"; };\n", 1,
	    "tls.client_certificates", "must be \"none\", \"optional\"" },
	{ "tls = { min_version = \"TLSv1.1\"; };\n", 1, "tls.min_version",
	    "must be \"TLSv1.2\" or \"TLSv1.3\"" },
	{ "auth = { identities = ( { name = \"a\"; secret = \"\"; "
	  "names = [ \"*\" ]; rights = [ \"lock\" ]; } ); };\n",
	    1, "auth.identities[0]", "an empty secret" },
	{ "auth = { identities = ( { name = \"a\"; secret_file = \"a.s\"; "
	  "names = [ \"*\" ]; rights = [ \"lock\" ]; } ); };\n",
	    1, "auth.identities[0].secret_file", "CREDENTIALS_DIRECTORY" },
	{ "auth = { identities = ( { name = \"a\"; secret = \"x\"; "
	  "rights = [ \"lock\" ]; } ); };\n",
	    1, "auth.identities[0].names", "missing" },
	{ "auth = { identities = ( { name = \"a\"; secret = \"x\";\n"
	  "  names = [ ]; rights = [ \"lock\" ]; } ); };\n",
	    2, "auth.identities[0].names", "1 to 16 strings" },
	{ "auth = { identities = ( { name = \"a\"; secret = \"x\";\n"
	  "  names = [ \"a b\" ]; rights = [ \"lock\" ]; } ); };\n",
	    2, "auth.identities[0].names", "must not contain spaces" },
	{ "auth = { identities = ( { name = \"a\"; secret = \"x\";\n"
	  "  names = [ \"*\" ]; } ); };\n",
	    1, "auth.identities[0].rights", "missing" },
	{ "auth = { identities = ( { name = \"a\"; secret = \"x\";\n"
	  "  names = [ \"*\" ];\n  rights = [ \"lock\", \"write\" ]; } ); };\n",
	    3, "auth.identities[0].rights", "expected \"lock\", \"read\"" },
	{ "auth = { identities = (\n"
	  "  { name = \"a\"; secret = \"x\"; names = [ \"*\" ]; "
	  "rights = [ \"lock\" ]; },\n"
	  "  { name = \"a\"; secret = \"y\"; names = [ \"*\" ]; "
	  "rights = [ \"lock\" ]; } ); };\n",
	    3, "auth.identities[1].name", "already the name of" },
	{ "auth = { identities = (\n"
	  "  { name = \"a\"; secret = \"x\"; names = [ \"*\" ]; "
	  "rights = [ \"lock\" ]; },\n"
	  "  { name = \"b\"; secret = \"x\"; names = [ \"*\" ]; "
	  "rights = [ \"lock\" ]; } ); };\n",
	    3, "auth.identities[1].secret",
	    "the same secret as auth.identities[0] (\"a\")" },
	{ "auth = { secret = \"x\";\n  identities = (\n"
	  "  { name = \"b\"; secret = \"x\"; names = [ \"*\" ]; "
	  "rights = [ \"lock\" ]; } ); };\n",
	    3, "auth.identities[0].secret", "the same secret as auth.secret" },
};

/* Each bad file: -1, nothing allocated, "FILE:LINE: KEY: why". */
START_TEST(test_bad_file)
{
	const struct bad *b = &bad[_i];
	struct config cf;
	char path[PATH_MAX], err[1024], want[PATH_MAX + 128];

	ck_assert_int_eq(
	    load_text(&cf, b->text, path, sizeof path, err, sizeof err), -1);
	assert_zeroed(&cf);
	if (b->key != NULL)
		snprintf(
		    want, sizeof want, "%s:%d: %s: ", path, b->line, b->key);
	else
		snprintf(want, sizeof want, "%s:%d: ", path, b->line);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0,
	    "case %d: got \"%s\", want prefix \"%s\"", _i, err, want);
	ck_assert_msg(strstr(err + strlen(want), b->why) != NULL,
	    "case %d: got \"%s\", want \"%s\"", _i, err, b->why);
}
END_TEST

/* An int where a double goes, an empty file, limits at their edges. */
START_TEST(test_edges)
{
	struct config cf;
	char path[PATH_MAX], err[512];

	ck_assert_int_eq(
	    load_text(&cf, "", path, sizeof path, err, sizeof err), 0);
	assert_defaults(&cf);
	config_free(&cf);

	ck_assert_msg(load_text(&cf,
			  "locks = { clock_drift = 0; max_hold_ms = 5; };\n"
			  "listen = { port = 65535; unix_mode = \"777\"; };\n"
			  "metrics = { port = 1; };\n"
			  "redis = { sentinels = ( ); db = 2147483647; "
			  "prefix = \"x\"; };\n"
			  "limits = { idle_timeout_s = 31536000; };\n",
			  path, sizeof path, err, sizeof err) == 0,
	    "%s", err);
	ck_assert_double_eq(cf.locks.clock_drift, 0.0);
	ck_assert_int_eq(cf.locks.max_hold_ms, 5);
	ck_assert_int_eq(cf.listen.port, 65535);
	ck_assert_int_eq(cf.listen.unix_mode, 0777);
	ck_assert_int_eq(cf.metrics.port, 1);
	ck_assert_int_eq(cf.redis.nsentinels, 0);
	ck_assert_int_eq(cf.redis.db, INT_MAX);
	ck_assert_str_eq(cf.redis.prefix, "x");
	ck_assert_int_eq(cf.limits.idle_timeout_s, 31536000);
	config_free(&cf);
}
END_TEST

/* Big numbers in comments, strings and floats are not integers. */
START_TEST(test_big_numbers_elsewhere)
{
	struct config cf;
	char path[PATH_MAX], err[512];

	ck_assert_msg(load_text(&cf,
			  "# lease_ms = 5000000000;\n"
			  "// 5000000000\n"
			  "/* 5000000000\n 5000000000 */\n"
			  "redis = { master_name = \"m5000000000\"; "
			  "password = \"\\\"5000000000\"; };\n"
			  "locks = { clock_drift = .0000000001; "
			  "max_hold_ms = 5000000000L; };\n"
			  "locks2 = 1;\n",
			  path, sizeof path, err, sizeof err) == -1,
	    "loaded");
	/* Only the last line is wrong, and for its name, not a number. */
	ck_assert_msg(
	    strstr(err, ":7: locks2: unknown key") != NULL, "%s", err);
}
END_TEST

/* An admin secret alone, or one unlike auth.secret, loads; "" is unset. */
START_TEST(test_admin_secret)
{
	struct config cf;
	char path[PATH_MAX], err[512];

	ck_assert_msg(load_text(&cf, "auth = { admin_secret = \"adm1n\"; };\n",
			  path, sizeof path, err, sizeof err) == 0,
	    "%s", err);
	ck_assert_str_eq(cf.auth.secret, "");
	ck_assert_str_eq(cf.auth.admin_secret, "adm1n");
	ck_assert_str_eq(cf.auth.admin_secret_file, "");
	config_free(&cf);

	ck_assert_msg(load_text(&cf,
			  "auth = { secret = \"s3cret\"; admin_secret = "
			  "\"s3cret2\";\n  admin_secret_file = \"/a\"; };\n"
			  "listen = { address = \"0.0.0.0\"; };\n",
			  path, sizeof path, err, sizeof err) == 0,
	    "%s", err);
	ck_assert_str_eq(cf.auth.secret, "s3cret");
	ck_assert_str_eq(cf.auth.admin_secret, "s3cret2");
	ck_assert_str_eq(cf.auth.admin_secret_file, "/a");
	config_free(&cf);

	/* Both empty are "no secret", not two equal secrets. */
	ck_assert_msg(
	    load_text(&cf, "auth = { secret = \"\"; admin_secret = \"\"; };\n",
		path, sizeof path, err, sizeof err) == 0,
	    "%s", err);
	assert_defaults(&cf);
	config_free(&cf);
}
END_TEST

/* Under systemd a secret's file may name a credential; absolute stays. */
START_TEST(test_credentials)
{
	struct config cf;
	char path[PATH_MAX], err[512];

	setenv("CREDENTIALS_DIRECTORY", "/run/credentials/lb.service", 1);
	ck_assert_msg(
	    load_text(&cf,
		"auth = { secret_file = \"lockbroker.secret\";\n"
		"  admin_secret_file = \"/etc/lockbroker/admin\"; };\n"
		"redis = { password_file = \"redis.pw\"; };\n",
		path, sizeof path, err, sizeof err) == 0,
	    "%s", err);
	unsetenv("CREDENTIALS_DIRECTORY");
	ck_assert_str_eq(cf.auth.secret_file,
	    "/run/credentials/lb.service/lockbroker.secret");
	ck_assert_str_eq(cf.auth.admin_secret_file, "/etc/lockbroker/admin");
	ck_assert_str_eq(
	    cf.redis.password_file, "/run/credentials/lb.service/redis.pw");
	config_free(&cf);
}
END_TEST

/* A file under tmpdir holding one secret line; its path goes to path. */
static void
write_secret(const char *name, const char *secret, char *path, size_t len)
{
	FILE *f;

	snprintf(path, len, "%s/%s", tmpdir, name);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fprintf(f, "%s\n", secret);
	ck_assert_int_eq(fclose(f), 0);
}

/* Two identities of auth.identities, one from a file, as text. */
static void
ident_conf(char *out, size_t len, const char *second, const char *file)
{
	int n = snprintf(out, len,
	    "auth = { secret = \"user\"; admin_secret = \"root\";\n"
	    "  identities = (\n"
	    "    { name = \"billing\"; secret = \"b1ll\";\n"
	    "      names = [ \"billing/\", \"inv.\" ]; rights = [ \"lock\" ]; },\n"
	    "    { name = \"%s\"; secret_file = \"%s\";\n"
	    "      names = [ \"*\" ]; rights = [ \"read\", \"revoke\" ]; } );\n"
	    "};\n",
	    second, file);

	ck_assert(n > 0 && (size_t)n < len);
}

/* Load text and make the identity table of it (cf stays loaded). */
static bool
ident_load_text(struct config *cf, const char *text)
{
	char path[PATH_MAX], err[512];

	ck_assert_msg(
	    load_text(cf, text, path, sizeof path, err, sizeof err) == 0, "%s",
	    err);
	return ident_load(cf);
}

/*
 * The identities in force: found by secret and by name, each one's
 * rights only under its prefixes; the two secrets of before are "default"
 * and "admin" on every name.
 */
START_TEST(test_identities)
{
	struct config cf;
	char text[PATH_MAX * 2], file[PATH_MAX];
	struct ident *b, *o;

	write_secret("ops.secret", "0ps", file, sizeof file);
	ident_conf(text, sizeof text, "ops", file);
	ck_assert(ident_load_text(&cf, text));
	ck_assert(ident_required());
	ck_assert_ptr_nonnull(b = ident_by_secret("b1ll"));
	ck_assert_str_eq(b->name, "billing");
	ck_assert_ptr_eq(ident_by_name("billing"), b);
	ck_assert_ptr_nonnull(o = ident_by_secret("0ps"));
	ck_assert_str_eq(o->name, "ops");
	ck_assert_ptr_null(ident_by_secret("b1l"));
	ck_assert_ptr_null(ident_by_secret(""));
	ck_assert_str_eq(ident_by_secret("user")->name, "default");
	ck_assert_str_eq(ident_by_secret("root")->name, "admin");

	ck_assert(ident_allows(b, CONFIG_RIGHT_LOCK, "billing/x"));
	ck_assert(ident_allows(b, CONFIG_RIGHT_LOCK, "inv.2026"));
	ck_assert(!ident_allows(b, CONFIG_RIGHT_LOCK, "billing"));
	ck_assert(!ident_allows(b, CONFIG_RIGHT_LOCK, "ops/x"));
	ck_assert(!ident_allows(b, CONFIG_RIGHT_READ, "billing/x"));
	ck_assert(!ident_allows(b, CONFIG_RIGHT_REVOKE, "billing/x"));
	ck_assert(ident_allows(o, CONFIG_RIGHT_READ, "anything"));
	ck_assert(ident_allows(o, CONFIG_RIGHT_REVOKE, "billing/x"));
	ck_assert(!ident_allows(o, CONFIG_RIGHT_LOCK, "billing/x"));
	ck_assert(ident_allows(
	    ident_by_secret("user"), CONFIG_RIGHT_LOCK, "anything"));
	ck_assert(!ident_allows(
	    ident_by_secret("user"), CONFIG_RIGHT_REVOKE, "anything"));
	ck_assert(ident_allows(
	    ident_by_secret("root"), CONFIG_RIGHT_REVOKE, "anything"));
	ck_assert(ident_allows(NULL, CONFIG_RIGHT_LOCK, "anything"));
	ck_assert(!ident_allows(NULL, CONFIG_RIGHT_REVOKE, "anything"));
	ident_shutdown();
	config_free(&cf);
}
END_TEST

/*
 * A reload keeps an identity of the same name as the same object, with
 * its new secret; one it drops is gone (its connections close), and a
 * file secret equal to another's is refused with the table kept.
 */
START_TEST(test_identities_reload)
{
	struct config cf;
	char text[PATH_MAX * 2], file[PATH_MAX], dup[PATH_MAX];
	struct ident *b, *o;

	write_secret("ops.secret", "0ps", file, sizeof file);
	write_secret("dup.secret", "b1ll", dup, sizeof dup);
	ident_conf(text, sizeof text, "ops", file);
	ck_assert(ident_load_text(&cf, text));
	b = ident_ref(ident_by_secret("b1ll"));
	o = ident_ref(ident_by_secret("0ps"));
	config_free(&cf);

	write_secret("ops.secret", "0ps2", file, sizeof file);
	ident_conf(text, sizeof text, "audit", file);
	ck_assert(ident_load_text(&cf, text));
	ck_assert_ptr_eq(ident_by_secret("b1ll"), b);
	ck_assert(!b->gone);
	ck_assert(o->gone);
	ck_assert(!ident_allows(o, CONFIG_RIGHT_READ, "x"));
	ck_assert_ptr_null(ident_by_name("ops"));
	ck_assert_str_eq(ident_by_secret("0ps2")->name, "audit");
	config_free(&cf);

	ident_conf(text, sizeof text, "dup", dup);
	ck_assert(!ident_load_text(&cf, text));
	ck_assert_str_eq(ident_by_secret("0ps2")->name, "audit");
	ck_assert_ptr_null(ident_by_name("dup"));
	config_free(&cf);

	ident_unref(b);
	ident_unref(o);
	ident_shutdown();
}
END_TEST

/* A reload swaps both admin keys in, and hands the old values back. */
START_TEST(test_apply_admin)
{
	struct config live, fresh;
	char path[PATH_MAX], err[512];

	config_defaults(&live);
	ck_assert_msg(load_text(&fresh,
			  "auth = { admin_secret = \"adm1n\";\n"
			  "  admin_secret_file = \"/a\"; };\n"
			  "listen = { port = 1; };\n",
			  path, sizeof path, err, sizeof err) == 0,
	    "%s", err);
	config_apply_reloadable(&live, &fresh);
	ck_assert_str_eq(live.auth.admin_secret, "adm1n");
	ck_assert_str_eq(live.auth.admin_secret_file, "/a");
	ck_assert_int_eq(live.listen.port, 7878);
	ck_assert_str_eq(fresh.auth.admin_secret, "");
	ck_assert_str_eq(fresh.auth.admin_secret_file, "");
	config_free(&fresh);
	config_free(&live);
}
END_TEST

/* The example file that ships must load and say exactly the defaults. */
START_TEST(test_example_conf)
{
	const char *path = getenv("LB_EXAMPLE_CONF");
	struct config cf, cd;
	struct seen s = { 0 };
	char err[1024];
	int i;

	if (path == NULL)
		path = "conf/lockbroker.conf";
	ck_assert_msg(config_load(&cf, path, true, err, sizeof err) == 0,
	    "%s (set LB_EXAMPLE_CONF or run from the source root)", err);
	ck_assert_str_eq(cf.path, path);
	config_defaults(&cd);
	config_diff(&cf, &cd, seen_fn, &s);
	for (i = 0; i < s.n; i++)
		ck_assert_msg(0, "%s differs from its default", s.key[i]);
	assert_defaults(&cf);
	config_free(&cd);
	config_free(&cf);
}
END_TEST

static Suite *
config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc;

	tc = tcase_create("load");
	tcase_add_unchecked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_full_file);
	tcase_add_test(tc, test_missing_ok);
	tcase_add_test(tc, test_missing_must_exist);
	tcase_add_test(tc, test_directory);
	tcase_add_test(tc, test_edges);
	tcase_add_test(tc, test_big_numbers_elsewhere);
	tcase_add_test(tc, test_admin_secret);
	tcase_add_test(tc, test_credentials);
	tcase_add_test(tc, test_identities);
	tcase_add_test(tc, test_identities_reload);
	tcase_add_test(tc, test_example_conf);
	suite_add_tcase(s, tc);

	tc = tcase_create("bad");
	tcase_add_unchecked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_add_loop_test(tc, test_bad_file, 0, (int)nitems(bad));
	suite_add_tcase(s, tc);

	tc = tcase_create("diff");
	tcase_add_unchecked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_add_test(tc, test_diff_every_key);
	tcase_add_test(tc, test_diff_some_keys);
	tcase_add_test(tc, test_apply_admin);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(config_suite());
	int failed;

	/* The bad files' credential names must find none, even under systemd. */
	unsetenv("CREDENTIALS_DIRECTORY");
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}

/*
 * config_keys: every key is one row of config_keys[] (name, type, where it
 * lives in struct config, default, range or check, flags), with the checks
 * a string must pass and the pairs of keys that must be in order. Here too
 * what each type of key accepts from the file (config_set_*), and the walk
 * of the file's settings against the table, so a misspelt key is an
 * error. A new key is one row here plus a field in config.h. Calls only
 * config.c's error helper and xmalloc.
 */
#include <sys/socket.h>
#include <sys/un.h>

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <libconfig.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_int.h"
#include "xmalloc.h"

#define nitems(a) (sizeof(a) / sizeof((a)[0]))

/* The "expected ..." half of a wrong-type error, per type. */
static const char *const config_expect[] = {
	[CT_INT] = "an integer",
	[CT_INT64] = "an integer",
	[CT_DOUBLE] = "a number",
	[CT_BOOL] = "true or false",
	[CT_STRING] = "a string",
	[CT_LIST] = "a list of strings",
	[CT_MODE] = "a string of octal digits such as \"0660\"",
	[CT_IDENTS] = "a list of groups",
};

#define OFF(f) offsetof(struct config, f)
#define K_INT(n, f, d, lo, hi, fl)                                             \
	{                                                                      \
		.name = n, .type = CT_INT, .flags = fl, .off = OFF(f),         \
		.idef = d, .min = lo, .max = hi                                \
	}
#define K_I64(n, f, d, lo, hi, fl)                                             \
	{                                                                      \
		.name = n, .type = CT_INT64, .flags = fl, .off = OFF(f),       \
		.idef = d, .min = lo, .max = hi                                \
	}
#define K_DBL(n, f, d, lo, hi, fl)                                             \
	{                                                                      \
		.name = n, .type = CT_DOUBLE, .flags = fl, .off = OFF(f),      \
		.ddef = d, .dmin = lo, .dmax = hi                              \
	}
#define K_BOOL(n, f, d, fl)                                                    \
	{                                                                      \
		.name = n, .type = CT_BOOL, .flags = fl, .off = OFF(f),        \
		.idef = d                                                      \
	}
#define K_STR(n, f, d, chk, fl)                                                \
	{                                                                      \
		.name = n, .type = CT_STRING, .flags = fl, .off = OFF(f),      \
		.sdef = d, .check = chk                                        \
	}
#define K_LIST(n, f, cnt, most, chk, fl)                                       \
	{                                                                      \
		.name = n, .type = CT_LIST, .flags = fl, .off = OFF(f),        \
		.count_off = OFF(cnt), .max = most, .check = chk               \
	}
#define K_MODE(n, f, d, fl)                                                    \
	{                                                                      \
		.name = n, .type = CT_MODE, .flags = fl, .off = OFF(f),        \
		.idef = d, .min = 0, .max = 0777                               \
	}

#define K_IDENTS(n, f, fl)                                                     \
	{                                                                      \
		.name = n, .type = CT_IDENTS, .flags = fl, .off = OFF(f),      \
		.max = CONFIG_MAX_IDENTITIES                                   \
	}

#define R KF_RELOAD
#define S KF_SECRET
#define C KF_CRED
#define TTL_MAX (INT64_C(2147483647) * 1000) /* seconds that fit in an int */

/* The error text below says 107; keep it honest on this platform. */
_Static_assert(
    sizeof(((struct sockaddr_un *)0)->sun_path) == 108, "unix path limit");

/* A socket path must fit sun_path with its NUL or bind() fails later. */
static const char *
config_check_unix(const char *s)
{
	if (strlen(s) > 107)
		return "must be at most 107 bytes";
	return NULL;
}

/* The socket's group must exist where -t runs as where the daemon does. */
static const char *
config_check_group(const char *s)
{
	static char why[96];

	if (s[0] == '\0' || getgrnam(s) != NULL)
		return NULL;
	snprintf(why, sizeof why, "no group named \"%.40s\"", s);
	return why;
}

/* Spaces would split Redis commands and braces change cluster hash tags. */
static const char *
config_check_prefix(const char *s)
{
	size_t len = strlen(s);

	if (len < 1 || len > 64)
		return "must be 1 to 64 bytes";
	for (; *s != '\0'; s++) {
		if (isspace((unsigned char)*s) || iscntrl((unsigned char)*s) ||
		    *s == '{' || *s == '}')
			return "must not contain spaces, braces or control characters";
	}
	return NULL;
}

/* The same four names log_level_parse() knows, without depending on log.c. */
static const char *
config_check_level(const char *s)
{
	static const char *const levels[] = { "debug", "info", "warning",
		"error" };
	size_t i;

	for (i = 0; i < nitems(levels); i++) {
		if (strcmp(s, levels[i]) == 0)
			return NULL;
	}
	return "must be one of debug, info, warning, error";
}

/* Split at the last colon so "[::1]:26379" works as well as "host:26379". */
static const char *
config_check_hostport(const char *s)
{
	const char *colon, *p;
	long port = 0;

	if ((colon = strrchr(s, ':')) == NULL || colon == s ||
	    colon[1] == '\0' || strlen(colon + 1) > 5)
		return "each entry must be \"host:port\"";
	for (p = colon + 1; *p != '\0'; p++) {
		if (!isdigit((unsigned char)*p))
			return "each entry must be \"host:port\"";
		port = port * 10 + (*p - '0');
	}
	if (port < 1 || port > 65535)
		return "each entry's port must be between 1 and 65535";
	return NULL;
}

/* Whether a TLS client must show a certificate (tls.h's policies). */
static const char *
config_check_tls_verify(const char *s)
{
	if (strcmp(s, "none") == 0 || strcmp(s, "optional") == 0 ||
	    strcmp(s, "require") == 0)
		return NULL;
	return "must be \"none\", \"optional\" or \"require\"";
}

static const char *
config_check_tls_version(const char *s)
{
	if (strcmp(s, "TLSv1.2") == 0 || strcmp(s, "TLSv1.3") == 0)
		return NULL;
	return "must be \"TLSv1.2\" or \"TLSv1.3\"";
}

/* Every key, once: name, type, where it lives, default, range, flags. */
const struct config_key config_keys[] = {
	K_STR("listen.address", listen.address, "127.0.0.1", NULL, 0),
	K_INT("listen.port", listen.port, 7878, 1, 65535, 0),
	K_STR("listen.unix", listen.unix_path, "", config_check_unix, 0),
	K_MODE("listen.unix_mode", listen.unix_mode, 0660, 0),
	K_STR(
	    "listen.unix_group", listen.unix_group, "", config_check_group, 0),
	K_BOOL("listen.insecure", listen.insecure, false, 0),
	K_INT("listen.backlog", listen.backlog, 511, 1, 65535, 0),

	K_STR("redis.host", redis.host, "127.0.0.1", NULL, 0),
	K_INT("redis.port", redis.port, 6379, 1, 65535, 0),
	K_STR("redis.unix", redis.unix_path, "", config_check_unix, 0),
	K_STR("redis.username", redis.username, "", NULL, 0),
	K_STR("redis.password", redis.password, "", NULL, R | S),
	K_STR("redis.password_file", redis.password_file, "", NULL, R | C),
	K_INT("redis.db", redis.db, 0, 0, INT_MAX, 0),
	K_STR("redis.prefix", redis.prefix, "lockbroker:", config_check_prefix,
	    0),
	K_INT("redis.connect_timeout_ms", redis.connect_timeout_ms, 1000, 10,
	    600000, 0),
	K_INT("redis.command_timeout_ms", redis.command_timeout_ms, 1000, 10,
	    600000, 0),
	K_INT("redis.reconnect_min_ms", redis.reconnect_min_ms, 100, 1, 600000,
	    0),
	K_INT("redis.reconnect_max_ms", redis.reconnect_max_ms, 5000, 1, 600000,
	    0),
	K_LIST("redis.sentinels", redis.sentinels, redis.nsentinels,
	    CONFIG_MAX_SENTINELS, config_check_hostport, 0),
	K_STR("redis.master_name", redis.master_name, "", NULL, 0),
	K_LIST("redis.cluster", redis.cluster, redis.ncluster,
	    CONFIG_MAX_SENTINELS, config_check_hostport, 0),
	K_INT("redis.wait_replicas", redis.wait_replicas, 0, 0, 100, 0),
	K_BOOL("redis.allow_eviction", redis.allow_eviction, false, 0),
	K_INT("redis.trust_ms", redis.trust_ms, 5000, 100, 600000, 0),
	K_INT("redis.clock_step_ms", redis.clock_step_ms, 1000, 0, 60000, 0),
	K_BOOL("redis.tls", redis.tls, false, 0),
	K_STR("redis.tls_ca", redis.tls_ca, "", NULL, R),
	K_STR("redis.tls_certificate", redis.tls_certificate, "", NULL, R),
	K_STR("redis.tls_key", redis.tls_key, "", NULL, R | C),
	K_STR("redis.tls_server_name", redis.tls_server_name, "", NULL, R),

	K_I64("locks.lease_ms", locks.lease_ms, 10000, 30, 86400000, R),
	K_I64("locks.min_ttl_ms", locks.min_ttl_ms, 10, 1, 86400000, R),
	K_I64("locks.max_ttl_ms", locks.max_ttl_ms, 86400000, 1, TTL_MAX, R),
	K_I64("locks.default_wait_ms", locks.default_wait_ms, -1, -1, 86400000,
	    R),
	K_I64("locks.max_hold_ms", locks.max_hold_ms, 0, 0, TTL_MAX, R),
	K_I64("locks.lock_delay_ms", locks.lock_delay_ms, 0, 0, 600000, R),
	K_I64("locks.retry_min_ms", locks.retry_min_ms, 5, 1, 600000, R),
	K_I64("locks.retry_max_ms", locks.retry_max_ms, 1000, 1, 600000, R),
	K_DBL("locks.clock_drift", locks.clock_drift, 0.01, 0.0, 0.5, R),

	K_INT("limits.max_clients", limits.max_clients, 1024, 1, 1000000, R),
	K_INT("limits.max_line", limits.max_line, 512, 64, 65536, R),
	K_INT("limits.max_locks_per_client", limits.max_locks_per_client, 64, 1,
	    1000000, R),
	K_INT("limits.max_pending", limits.max_pending, 32, 1, 100000, R),
	K_INT("limits.max_waiters", limits.max_waiters, 100000, 1, 10000000, R),
	K_INT("limits.idle_timeout_s", limits.idle_timeout_s, 0, 0, 86400 * 365,
	    R),
	K_INT("limits.auth_timeout_s", limits.auth_timeout_s, 10, 1, 3600, R),
	K_INT("limits.tcp_keepalive_s", limits.tcp_keepalive_s, 60, 0, 7200, R),

	K_STR("auth.secret", auth.secret, "", NULL, R | S),
	K_STR("auth.secret_file", auth.secret_file, "", NULL, R | C),
	K_STR("auth.admin_secret", auth.admin_secret, "", NULL, R | S),
	K_STR(
	    "auth.admin_secret_file", auth.admin_secret_file, "", NULL, R | C),
	K_IDENTS("auth.identities", auth.identities, R | S),

	K_STR("log.level", log.level, "info", config_check_level, R),
	K_BOOL("log.syslog", log.syslog, 0, 0),

	K_STR("tls.address", tls.address, "127.0.0.1", NULL, 0),
	K_INT("tls.port", tls.port, 0, 0, 65535, 0),
	K_STR("tls.certificate", tls.certificate, "", NULL, R),
	K_STR("tls.key", tls.key, "", NULL, R | C),
	K_STR("tls.ca", tls.ca, "", NULL, R),
	K_STR("tls.client_certificates", tls.client_certificates, "none",
	    config_check_tls_verify, R),
	K_STR("tls.min_version", tls.min_version, "TLSv1.2",
	    config_check_tls_version, R),

	K_BOOL("metrics.enabled", metrics.enabled, 0, 0),
	K_STR("metrics.address", metrics.address, "127.0.0.1", NULL, 0),
	K_INT("metrics.port", metrics.port, 9878, 1, 65535, 0),
};

#undef R
#undef S
#undef C

const size_t config_nkeys = nitems(config_keys);
_Static_assert(nitems(config_keys) <= CONFIG_MAX_KEYS, "config_load's where[]");

/* Pairs that must satisfy lo <= hi once the whole file is read. */
static const struct {
	const char *lo;
	const char *hi;
} config_order[] = {
	{ "redis.reconnect_min_ms", "redis.reconnect_max_ms" },
	{ "locks.min_ttl_ms", "locks.max_ttl_ms" },
	{ "locks.retry_min_ms", "locks.retry_max_ms" },
};

/* Linear search: forty-odd keys, read once per load. */
const struct config_key *
config_key_find(const char *name)
{
	size_t i;

	for (i = 0; i < nitems(config_keys); i++) {
		if (strcmp(config_keys[i].name, name) == 0)
			return &config_keys[i];
	}
	return NULL;
}

/* Groups are not listed anywhere: a group exists if some key lives in it. */
static int
config_group_known(const char *name)
{
	size_t i, len = strlen(name);

	for (i = 0; i < nitems(config_keys); i++) {
		if (strncmp(config_keys[i].name, name, len) == 0 &&
		    config_keys[i].name[len] == '.')
			return 1;
	}
	return 0;
}

/* Secrets get wiped, everything else is just freed. */
void
config_str_free(const struct config_key *k, char *s)
{
	if (k->flags & KF_SECRET)
		freezero_str(s);
	else
		free(s);
}

/* Either kind of integer key, widened, for range and order checks. */
static int64_t
config_int_value(const struct config *cf, const struct config_key *k)
{
	if (k->type == CT_INT64)
		return *(int64_t *)config_field(cf, k->off);
	return *(int *)config_field(cf, k->off);
}

/* Small and big libconfig integers both arrive here; the range decides. */
static int
config_set_int(struct config_load *ld, const struct config_key *k,
    const config_setting_t *s)
{
	int type = config_setting_type(s);
	int64_t v;

	if (type != CONFIG_TYPE_INT && type != CONFIG_TYPE_INT64)
		return config_error(ld, s, k->name, "expected an integer");
	v = config_setting_get_int64(s);
	if (v < k->min || v > k->max)
		return config_error(ld, s, k->name,
		    "must be between %" PRId64 " and %" PRId64, k->min, k->max);
	if (k->type == CT_INT64)
		*(int64_t *)config_field(ld->cf, k->off) = v;
	else
		*(int *)config_field(ld->cf, k->off) = (int)v;
	return 0;
}

/* libconfig will not turn "0" into a float by itself; do it here. */
static int
config_set_double(struct config_load *ld, const struct config_key *k,
    const config_setting_t *s)
{
	int type = config_setting_type(s);
	double v;

	if (type == CONFIG_TYPE_FLOAT)
		v = config_setting_get_float(s);
	else if (type == CONFIG_TYPE_INT || type == CONFIG_TYPE_INT64)
		v = (double)config_setting_get_int64(s);
	else
		return config_error(ld, s, k->name, "expected a number");
	if (!(v >= k->dmin && v <= k->dmax))
		return config_error(ld, s, k->name, "must be between %g and %g",
		    k->dmin, k->dmax);
	*(double *)config_field(ld->cf, k->off) = v;
	return 0;
}

/* Only true and false: 0 and 1 are too easy to confuse with counts. */
static int
config_set_bool(struct config_load *ld, const struct config_key *k,
    const config_setting_t *s)
{
	if (config_setting_type(s) != CONFIG_TYPE_BOOL)
		return config_error(ld, s, k->name, "expected true or false");
	*(bool *)config_field(ld->cf, k->off) = config_setting_get_bool(s);
	return 0;
}

/*
 * A secret's file that is not an absolute path names a systemd credential
 * (LoadCredential=): it is read from $CREDENTIALS_DIRECTORY. Without that
 * variable the name is refused, not read from whatever directory the daemon
 * was started in, so -t, a start and a reload all mean the same file.
 */
char *
config_cred_path(struct config_load *ld, const char *key,
    const config_setting_t *s, const char *v)
{
	const char *dir = getenv("CREDENTIALS_DIRECTORY");
	size_t len;
	char *path;

	if (v[0] == '\0' || v[0] == '/')
		return xstrdup(v);
	if (strchr(v, '/') != NULL || strcmp(v, ".") == 0 ||
	    strcmp(v, "..") == 0) {
		config_error(ld, s, key,
		    "must be an absolute path or a credential name (no \"/\")");
		return NULL;
	}
	if (dir == NULL || dir[0] == '\0') {
		config_error(ld, s, key,
		    "\"%s\" is a credential name, but CREDENTIALS_DIRECTORY is "
		    "not set (run under systemd with LoadCredential=, or give "
		    "an absolute path)",
		    v);
		return NULL;
	}
	len = strlen(dir) + 1 + strlen(v) + 1;
	path = xmalloc(len);
	snprintf(path, len, "%s/%s", dir, v);
	return path;
}

/* Vet first, then replace the default so an error leaves nothing new. */
static int
config_set_string(struct config_load *ld, const struct config_key *k,
    const config_setting_t *s)
{
	char **p = config_field(ld->cf, k->off);
	const char *v, *why;
	char *copy;

	if (config_setting_type(s) != CONFIG_TYPE_STRING)
		return config_error(ld, s, k->name, "expected a string");
	v = config_setting_get_string(s);
	if (k->check != NULL && (why = k->check(v)) != NULL)
		return config_error(ld, s, k->name, "%s", why);
	if (k->flags & KF_CRED)
		copy = config_cred_path(ld, k->name, s, v);
	else
		copy = xstrdup(v);
	if (copy == NULL)
		return -1;
	config_str_free(k, *p);
	*p = copy;
	return 0;
}

/* Both [ ... ] and ( ... ) are accepted; every entry is checked first. */
static int
config_set_list(struct config_load *ld, const struct config_key *k,
    const config_setting_t *s)
{
	char **v = config_field(ld->cf, k->off);
	int *count = config_field(ld->cf, k->count_off);
	const config_setting_t *e;
	const char *why;
	int i, n;

	if (!config_setting_is_list(s) && !config_setting_is_array(s))
		return config_error(
		    ld, s, k->name, "expected a list of strings");
	if ((n = config_setting_length(s)) > k->max)
		return config_error(ld, s, k->name,
		    "must have at most %" PRId64 " entries", k->max);
	for (i = 0; i < n; i++) {
		e = config_setting_get_elem(s, i);
		if (config_setting_type(e) != CONFIG_TYPE_STRING)
			return config_error(
			    ld, e, k->name, "expected a list of strings");
		if (k->check != NULL &&
		    (why = k->check(config_setting_get_string(e))) != NULL)
			return config_error(ld, e, k->name, "%s", why);
	}
	for (i = 0; i < *count; i++)
		config_str_free(k, v[i]);
	for (i = 0; i < n; i++)
		v[i] = xstrdup(config_setting_get_string_elem(s, i));
	*count = n;
	return 0;
}

/* A string, because libconfig reads 0660 as the decimal number 660. */
static int
config_set_mode(struct config_load *ld, const struct config_key *k,
    const config_setting_t *s)
{
	const char *v, *p;
	long mode = 0;

	if (config_setting_type(s) != CONFIG_TYPE_STRING)
		return config_error(
		    ld, s, k->name, "expected %s", config_expect[CT_MODE]);
	v = config_setting_get_string(s);
	for (p = v; *p >= '0' && *p <= '7' && p - v < 4; p++)
		mode = mode * 8 + (*p - '0');
	if (p == v || *p != '\0' || mode > k->max)
		return config_error(ld, s, k->name,
		    "must be octal digits between \"0000\" and \"0777\"");
	*(int *)config_field(ld->cf, k->off) = (int)mode;
	return 0;
}

/* Remember which setting set the key so later checks can point at it. */
static int
config_set(struct config_load *ld, ptrdiff_t i, const config_setting_t *s)
{
	const struct config_key *k = &config_keys[i];

	ld->where[i] = s;
	switch (k->type) {
	case CT_INT:
	case CT_INT64:
		return config_set_int(ld, k, s);
	case CT_DOUBLE:
		return config_set_double(ld, k, s);
	case CT_BOOL:
		return config_set_bool(ld, k, s);
	case CT_STRING:
		return config_set_string(ld, k, s);
	case CT_LIST:
		return config_set_list(ld, k, s);
	case CT_MODE:
		return config_set_mode(ld, k, s);
	case CT_IDENTS:
		return config_ident_set(ld, k, s);
	}
	return config_error(ld, s, k->name, "unhandled type");
}

/* Inside a group every member must be a key of the table. */
static int
config_walk_group(struct config_load *ld, const config_setting_t *g)
{
	const config_setting_t *s;
	const struct config_key *k;
	char name[128];
	int j;

	for (j = 0; j < config_setting_length(g); j++) {
		s = config_setting_get_elem(g, j);
		snprintf(name, sizeof name, "%s.%s", config_setting_name(g),
		    config_setting_name(s));
		if ((k = config_key_find(name)) == NULL)
			return config_error(ld, s, name, "unknown key");
		if (config_set(ld, k - config_keys, s) == -1)
			return -1;
	}
	return 0;
}

/* Walk the file, not the table, so a misspelt key is an error, not a no-op. */
int
config_walk(struct config_load *ld, const config_setting_t *root)
{
	const config_setting_t *g;
	const char *name;
	int j;

	for (j = 0; j < config_setting_length(root); j++) {
		g = config_setting_get_elem(root, j);
		name = config_setting_name(g);
		if (!config_group_known(name))
			return config_error(ld, g, name, "unknown key");
		if (!config_setting_is_group(g))
			return config_error(ld, g, name, "expected a group");
		if (config_walk_group(ld, g) == -1)
			return -1;
	}
	return 0;
}

/* Blame the pair's second key if the file set it, else the first. */
int
config_check_order(struct config_load *ld)
{
	const config_setting_t *where_lo, *where_hi;
	const struct config_key *lo, *hi;
	int64_t vlo, vhi;
	size_t i;

	for (i = 0; i < nitems(config_order); i++) {
		lo = config_key_find(config_order[i].lo);
		hi = config_key_find(config_order[i].hi);
		vlo = config_int_value(ld->cf, lo);
		vhi = config_int_value(ld->cf, hi);
		if (vlo <= vhi)
			continue;
		where_lo = ld->where[lo - config_keys];
		where_hi = ld->where[hi - config_keys];
		if (where_hi != NULL)
			return config_error(ld, where_hi, hi->name,
			    "must be at least %s (%" PRId64 ")", lo->name, vlo);
		return config_error(ld, where_lo, lo->name,
		    "must be at most %s (%" PRId64 ")", hi->name, vhi);
	}
	return 0;
}

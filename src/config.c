/*
 * config: every key is one row of config_keys[]. Defaults, loading, type and
 * range checks, freeing and config_diff all walk that one table, so a new key
 * is one row here plus a field in config.h. Errors come back as text; this
 * file depends on nothing in lockbroker but xmalloc.
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <libconfig.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "xmalloc.h"

#define nitems(a) (sizeof(a) / sizeof((a)[0]))

/* A config file is a few kilobytes; anything this big is a mistake. */
#define CONFIG_MAX_FILE (1024 * 1024)

/* How a key is stored in struct config and what the file must hold. */
enum config_type {
	CT_INT,	   /* int; libconfig int or int64 within range */
	CT_INT64,  /* int64_t; libconfig int or int64 */
	CT_DOUBLE, /* double; an integer is accepted too */
	CT_BOOL,   /* bool */
	CT_STRING, /* char *, vetted by check if set */
	CT_LIST,   /* char *[max] + int count; list or array of strings */
	CT_MODE,   /* int from a string of octal digits such as "0660" */
};

/* The "expected ..." half of a wrong-type error, per type. */
static const char *const config_expect[] = {
	[CT_INT] = "an integer",
	[CT_INT64] = "an integer",
	[CT_DOUBLE] = "a number",
	[CT_BOOL] = "true or false",
	[CT_STRING] = "a string",
	[CT_LIST] = "a list of strings",
	[CT_MODE] = "a string of octal digits such as \"0660\"",
};

#define KF_RELOAD 0x1 /* may change on SIGHUP */
#define KF_SECRET 0x2 /* wiped before free */
#define KF_CRED 0x4   /* a secret's file: a relative value is a credential */

struct config_key {
	const char *name; /* "group.key", as written in the file */
	enum config_type type;
	int flags;
	size_t off;	  /* offsetof(struct config, ...) */
	size_t count_off; /* CT_LIST: offset of the int count */
	int64_t idef;	  /* CT_INT, CT_INT64, CT_MODE, CT_BOOL */
	int64_t min;
	int64_t max; /* CT_LIST: most entries */
	double ddef;
	double dmin;
	double dmax;
	const char *sdef;		    /* CT_STRING */
	const char *(*check)(const char *); /* NULL or why a string is bad */
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

/* Every key, once: name, type, where it lives, default, range, flags. */
static const struct config_key config_keys[] = {
	K_STR("listen.address", listen.address, "127.0.0.1", NULL, 0),
	K_INT("listen.port", listen.port, 7878, 1, 65535, 0),
	K_STR("listen.unix", listen.unix_path, "", config_check_unix, 0),
	K_MODE("listen.unix_mode", listen.unix_mode, 0660, 0),
	K_BOOL("listen.insecure", listen.insecure, false, 0),

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
	K_INT("redis.wait_replicas", redis.wait_replicas, 0, 0, 100, 0),
	K_BOOL("redis.allow_eviction", redis.allow_eviction, false, 0),
	K_INT("redis.trust_ms", redis.trust_ms, 5000, 100, 600000, 0),
	K_INT("redis.clock_step_ms", redis.clock_step_ms, 1000, 0, 60000, 0),

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

	K_STR("log.level", log.level, "info", config_check_level, R),
	K_BOOL("log.syslog", log.syslog, 0, 0),

	K_BOOL("metrics.enabled", metrics.enabled, 0, 0),
	K_STR("metrics.address", metrics.address, "127.0.0.1", NULL, 0),
	K_INT("metrics.port", metrics.port, 9878, 1, 65535, 0),
};

#undef R
#undef S
#undef C

/* Pairs that must satisfy lo <= hi once the whole file is read. */
static const struct {
	const char *lo;
	const char *hi;
} config_order[] = {
	{ "redis.reconnect_min_ms", "redis.reconnect_max_ms" },
	{ "locks.min_ttl_ms", "locks.max_ttl_ms" },
	{ "locks.retry_min_ms", "locks.retry_max_ms" },
};

/* One load in progress: where errors go and which setting set each key. */
struct config_load {
	struct config *cf;
	const char *path;
	char *err;
	size_t errlen;
	const config_setting_t *where[nitems(config_keys)];
};

/* Fields are reached through the table's offsets, so one cast lives here. */
static void *
config_field(const struct config *cf, size_t off)
{
	return (char *)cf + off;
}

/* Linear search: forty-odd keys, read once per load. */
static const struct config_key *
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

/* One shape for every error: "FILE: why", "FILE:LINE: why", or with KEY. */
static int __attribute__((format(printf, 4, 0)))
config_verror(struct config_load *ld, unsigned line, const char *key,
    const char *fmt, va_list ap)
{
	char why[256];

	if (ld->err == NULL || ld->errlen == 0)
		return -1;
	vsnprintf(why, sizeof why, fmt, ap);
	if (line == 0)
		snprintf(ld->err, ld->errlen, "%s: %s", ld->path, why);
	else if (key == NULL)
		snprintf(ld->err, ld->errlen, "%s:%u: %s", ld->path, line, why);
	else
		snprintf(ld->err, ld->errlen, "%s:%u: %s: %s", ld->path, line,
		    key, why);
	return -1;
}

/* For errors that know a line (0: none) but maybe no key. */
static int __attribute__((format(printf, 4, 5)))
config_at(struct config_load *ld, unsigned line, const char *key,
    const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	config_verror(ld, line, key, fmt, ap);
	va_end(ap);
	return -1;
}

/* For errors about one setting: its line, its dotted key. */
static int __attribute__((format(printf, 4, 5)))
config_error(struct config_load *ld, const config_setting_t *s, const char *key,
    const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	config_verror(ld, config_setting_source_line(s), key, fmt, ap);
	va_end(ap);
	return -1;
}

/* Secrets get wiped, everything else is just freed. */
static void
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
static char *
config_cred_path(struct config_load *ld, const struct config_key *k,
    const config_setting_t *s, const char *v)
{
	const char *dir = getenv("CREDENTIALS_DIRECTORY");
	size_t len;
	char *path;

	if (v[0] == '\0' || v[0] == '/')
		return xstrdup(v);
	if (strchr(v, '/') != NULL || strcmp(v, ".") == 0 ||
	    strcmp(v, "..") == 0) {
		config_error(ld, s, k->name,
		    "must be an absolute path or a credential name (no \"/\")");
		return NULL;
	}
	if (dir == NULL || dir[0] == '\0') {
		config_error(ld, s, k->name,
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
		copy = config_cred_path(ld, k, s, v);
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
static int
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
static int
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

/* Skip a comment or string starting at p, counting lines; NULL if none. */
static const char *
config_lex_skip(const char *p, unsigned *line)
{
	const char *end;

	if (*p == '#' || (p[0] == '/' && p[1] == '/'))
		end = p + strcspn(p, "\n");
	else if (p[0] == '/' && p[1] == '*') {
		if ((end = strstr(p + 2, "*/")) != NULL)
			end += 2;
		else
			end = p + strlen(p);
	} else if (*p == '"') {
		for (end = p + 1; *end != '\0' && *end != '"'; end++) {
			if (*end == '\\' && end[1] != '\0')
				end++;
		}
		if (*end == '"')
			end++;
	} else
		return NULL;
	for (; p < end; p++)
		*line += (*p == '\n');
	return end;
}

/* What the text scan found that libconfig 1.5 would get silently wrong. */
struct config_lex {
	unsigned include_line; /* first @include; 0 if none */
	unsigned big_line;     /* first integer atoi() would truncate */
	char big[32];	       /* that integer as written */
};

/* Names may hold digits ("x5000000000"): they are not numbers. */
static const char *
config_lex_name(const char *p)
{
	while (
	    isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '*')
		p++;
	return p;
}

/*
 * libconfig 1.5 reads an integer without an L suffix with atoi(), so
 * 5000000000 silently becomes 705032704 and would pass a range check. Note
 * the first such literal; floats and L-suffixed integers are fine.
 */
static const char *
config_lex_number(
    const char *buf, const char *p, unsigned line, struct config_lex *lx)
{
	const char *start = (p > buf && p[-1] == '-') ? p - 1 : p;
	int hex = (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'));
	long long v;

	p += hex ? 2 : 0;
	while (hex ? isxdigit((unsigned char)*p) : isdigit((unsigned char)*p))
		p++;
	if (*p == 'L' || *p == '.' || *p == 'e' || *p == 'E') {
		while (isalnum((unsigned char)*p) || *p == '.' || *p == '+' ||
		    *p == '-')
			p++;
		return p;
	}
	errno = 0;
	v = strtoll(start, NULL, hex ? 16 : 10);
	if (lx->big_line == 0 &&
	    (errno == ERANGE || v > INT_MAX || v < INT_MIN)) {
		lx->big_line = line;
		snprintf(
		    lx->big, sizeof lx->big, "%.*s", (int)(p - start), start);
	}
	return p;
}

/* A scan shaped like libconfig's lexer: comments, strings, names, numbers. */
static void
config_lex(const char *buf, struct config_lex *lx)
{
	const char *p = buf, *next;
	unsigned line = 1;

	memset(lx, 0, sizeof *lx);
	while (*p != '\0') {
		if ((next = config_lex_skip(p, &line)) != NULL)
			p = next;
		else if (isalpha((unsigned char)*p) || *p == '*')
			p = config_lex_name(p);
		else if (isdigit((unsigned char)*p) ||
		    (*p == '.' && isdigit((unsigned char)p[1])))
			p = config_lex_number(buf, p, line, lx);
		else {
			if (*p == '@' && lx->include_line == 0)
				lx->include_line = line;
			line += (*p++ == '\n');
		}
	}
}

/* libconfig keeps no pointer from text to setting: find one by its line. */
static void
config_name_at(
    const config_setting_t *root, unsigned line, char *name, size_t len)
{
	const config_setting_t *g, *s;
	int i, j;

	name[0] = '\0';
	for (i = 0; i < config_setting_length(root); i++) {
		g = config_setting_get_elem(root, i);
		if (config_setting_source_line(g) == line)
			snprintf(name, len, "%s", config_setting_name(g));
		if (!config_setting_is_group(g))
			continue;
		for (j = 0; j < config_setting_length(g); j++) {
			s = config_setting_get_elem(g, j);
			if (config_setting_source_line(s) == line)
				snprintf(name, len, "%s.%s",
				    config_setting_name(g),
				    config_setting_name(s));
		}
	}
}

/* Parse, refusing what libconfig 1.5 would read differently from us. */
static int
config_parse(struct config_load *ld, config_t *lc, const char *text)
{
	struct config_lex lx;
	char name[128];

	config_lex(text, &lx);
	if (lx.include_line != 0)
		return config_at(
		    ld, lx.include_line, NULL, "@include is not supported");
	if (config_read_string(lc, text) != CONFIG_TRUE)
		return config_at(ld, (unsigned)config_error_line(lc), NULL,
		    "%s", config_error_text(lc));
	if (lx.big_line == 0)
		return 0;
	config_name_at(config_root_setting(lc), lx.big_line, name, sizeof name);
	return config_at(ld, lx.big_line, name[0] != '\0' ? name : NULL,
	    "%s is too large for a plain integer; write %sL", lx.big, lx.big);
}

/* libconfig's tree holds its own copy of each secret: wipe it too. */
static void
config_wipe_tree(config_t *lc)
{
	config_setting_t *s;
	size_t i;

	for (i = 0; i < nitems(config_keys); i++) {
		if (!(config_keys[i].flags & KF_SECRET))
			continue;
		s = config_lookup(lc, config_keys[i].name);
		if (s != NULL && config_setting_type(s) == CONFIG_TYPE_STRING &&
		    s->value.sval != NULL)
			explicit_bzero(s->value.sval, strlen(s->value.sval));
	}
}

bool
config_addr_loopback(int family, const void *addr)
{
	const unsigned char *a = addr;

	if (family == AF_INET)
		return a[0] == 127;
	if (family != AF_INET6)
		return false;
	if (IN6_IS_ADDR_LOOPBACK((const struct in6_addr *)addr))
		return true;
	return IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)addr) &&
	    a[12] == 127;
}

/*
 * A numeric listen.address beyond loopback needs a secret or an explicit
 * listen.insecure, so -t catches it (the listener checks names it resolves).
 * auth.admin_secret alone does not count: ordinary commands need no AUTH.
 */
static int
config_check_exposure(struct config_load *ld)
{
	const struct config *cf = ld->cf;
	const struct config_key *k = config_key_find("listen.address");
	unsigned char a[16];
	int family = AF_INET;

	if (cf->listen.insecure || cf->auth.secret[0] != '\0' ||
	    cf->auth.secret_file[0] != '\0' || cf->listen.address[0] == '\0')
		return 0;
	if (inet_pton(family, cf->listen.address, a) != 1 &&
	    inet_pton(family = AF_INET6, cf->listen.address, a) != 1)
		return 0;
	if (config_addr_loopback(family, a))
		return 0;
	return config_error(ld, ld->where[k - config_keys], k->name,
	    "beyond loopback needs auth.secret (or listen.insecure = true)");
}

/*
 * One secret for both would make every client an admin. Only inline values
 * are compared: the *_file keys are paths, read outside config.
 */
static int
config_check_admin(struct config_load *ld)
{
	const struct config_auth *a = &ld->cf->auth;
	const struct config_key *k = config_key_find("auth.admin_secret");

	if (a->secret[0] == '\0' || strcmp(a->secret, a->admin_secret) != 0)
		return 0;
	return config_error(ld, ld->where[k - config_keys], k->name,
	    "must differ from auth.secret");
}

/* Sentinels and a master name only make sense together. */
static int
config_check_sentinel(struct config_load *ld)
{
	const struct config_redis *r = &ld->cf->redis;
	const struct config_key *k;

	if ((r->nsentinels > 0) == (r->master_name[0] != '\0'))
		return 0;
	k = config_key_find(
	    r->nsentinels > 0 ? "redis.sentinels" : "redis.master_name");
	return config_error(ld, ld->where[k - config_keys], k->name,
	    "redis.sentinels and redis.master_name go together");
}

/* libconfig's tree lives only this long: parse, check, copy out, wipe. */
static int
config_load_text(struct config_load *ld, const char *text)
{
	config_t lc;
	int rv;

	config_init(&lc);
	rv = config_parse(ld, &lc, text);
	if (rv == 0)
		rv = config_walk(ld, config_root_setting(&lc));
	if (rv == 0)
		rv = config_check_order(ld);
	if (rv == 0)
		rv = config_check_sentinel(ld);
	if (rv == 0)
		rv = config_check_admin(ld);
	if (rv == 0)
		rv = config_check_exposure(ld);
	config_wipe_tree(&lc);
	config_destroy(&lc);
	return rv;
}

/* Whole-file read into one buffer we can wipe; unbuffered, so no copies. */
static int
config_read_fp(struct config_load *ld, FILE *fp, char **text)
{
	struct stat sb;
	char *buf;
	size_t n;

	if (fstat(fileno(fp), &sb) == -1)
		return config_at(ld, 0, NULL, "%s", strerror(errno));
	if (S_ISDIR(sb.st_mode))
		return config_at(ld, 0, NULL, "%s", strerror(EISDIR));
	setvbuf(fp, NULL, _IONBF, 0);
	buf = xmalloc(CONFIG_MAX_FILE + 1);
	n = fread(buf, 1, CONFIG_MAX_FILE + 1, fp);
	if (ferror(fp) || n > CONFIG_MAX_FILE || memchr(buf, '\0', n) != NULL) {
		explicit_bzero(buf, n);
		free(buf);
		if (ferror(fp))
			return config_at(ld, 0, NULL, "%s", strerror(errno));
		return config_at(ld, 0, NULL,
		    n > CONFIG_MAX_FILE ? "larger than 1 MiB"
					: "contains a NUL byte");
	}
	buf[n] = '\0';
	*text = buf;
	return 0;
}

/* A missing file is only an error if asked for; other errors always are. */
static int
config_read_text(struct config_load *ld, bool must_exist, char **text)
{
	FILE *fp;
	int rv;

	*text = NULL;
	if ((fp = fopen(ld->path, "re")) == NULL) {
		if (errno == ENOENT && !must_exist)
			return 0;
		return config_at(ld, 0, NULL, "%s", strerror(errno));
	}
	rv = config_read_fp(ld, fp, text);
	fclose(fp);
	return rv;
}

/* The table's default for one key; strings are always allocated. */
static void
config_key_default(struct config *cf, const struct config_key *k)
{
	void *p = config_field(cf, k->off);

	switch (k->type) {
	case CT_INT:
	case CT_MODE:
		*(int *)p = (int)k->idef;
		break;
	case CT_INT64:
		*(int64_t *)p = k->idef;
		break;
	case CT_DOUBLE:
		*(double *)p = k->ddef;
		break;
	case CT_BOOL:
		*(bool *)p = k->idef != 0;
		break;
	case CT_STRING:
		*(char **)p = xstrdup(k->sdef);
		break;
	case CT_LIST:
		break; /* empty */
	}
}

/* Strings and lists own memory; the rest is plain data. */
static void
config_key_free(struct config *cf, const struct config_key *k)
{
	char **p = config_field(cf, k->off);
	int i, *count;

	if (k->type == CT_STRING)
		config_str_free(k, *p);
	else if (k->type == CT_LIST) {
		count = config_field(cf, k->count_off);
		for (i = 0; i < *count; i++)
			config_str_free(k, p[i]);
	}
}

/* A freed (zeroed) config has NULL strings; compare those safely. */
static int
config_streq(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return strcmp(a, b) == 0;
}

/* Lists are equal only entry by entry, in order. */
static int
config_list_equal(
    const struct config *a, const struct config *b, const struct config_key *k)
{
	char **la = config_field(a, k->off), **lb = config_field(b, k->off);
	int i, n = *(int *)config_field(a, k->count_off);

	if (n != *(int *)config_field(b, k->count_off))
		return 0;
	for (i = 0; i < n; i++) {
		if (!config_streq(la[i], lb[i]))
			return 0;
	}
	return 1;
}

/* Equality by type, so config_diff never compares padding or pointers. */
static int
config_key_equal(
    const struct config *a, const struct config *b, const struct config_key *k)
{
	void *pa = config_field(a, k->off), *pb = config_field(b, k->off);

	switch (k->type) {
	case CT_INT:
	case CT_MODE:
		return *(int *)pa == *(int *)pb;
	case CT_INT64:
		return *(int64_t *)pa == *(int64_t *)pb;
	case CT_DOUBLE:
		return *(double *)pa == *(double *)pb;
	case CT_BOOL:
		return *(bool *)pa == *(bool *)pb;
	case CT_STRING:
		return config_streq(*(char **)pa, *(char **)pb);
	case CT_LIST:
		return config_list_equal(a, b, k);
	}
	return 0;
}

void
config_defaults(struct config *cf)
{
	size_t i;

	memset(cf, 0, sizeof *cf);
	for (i = 0; i < nitems(config_keys); i++)
		config_key_default(cf, &config_keys[i]);
}

int
config_load(struct config *cf, const char *path, bool must_exist, char *err,
    size_t errlen)
{
	struct config_load ld;
	char *text;
	int rv;

	if (err != NULL && errlen > 0)
		err[0] = '\0';
	config_defaults(cf);
	if (path == NULL)
		return 0;
	memset(&ld, 0, sizeof ld);
	ld.cf = cf;
	ld.path = path;
	ld.err = err;
	ld.errlen = errlen;
	if ((rv = config_read_text(&ld, must_exist, &text)) == 0 &&
	    text != NULL) {
		rv = config_load_text(&ld, text);
		freezero_str(text);
		if (rv == 0)
			cf->path = xstrdup(path);
	}
	if (rv == -1)
		config_free(cf);
	return rv;
}

void
config_free(struct config *cf)
{
	size_t i;

	for (i = 0; i < nitems(config_keys); i++)
		config_key_free(cf, &config_keys[i]);
	free(cf->path);
	memset(cf, 0, sizeof *cf);
}

void
config_diff(const struct config *a, const struct config *b, config_diff_fn *fn,
    void *arg)
{
	const struct config_key *k;
	size_t i;

	for (i = 0; i < nitems(config_keys); i++) {
		k = &config_keys[i];
		if (!config_key_equal(a, b, k))
			fn(k->name, (k->flags & KF_RELOAD) != 0, arg);
	}
}

/* How many bytes a key's field takes in struct config. */
static size_t
config_key_size(const struct config_key *k)
{
	switch (k->type) {
	case CT_INT:
	case CT_MODE:
		return sizeof(int);
	case CT_INT64:
		return sizeof(int64_t);
	case CT_DOUBLE:
		return sizeof(double);
	case CT_BOOL:
		return sizeof(bool);
	case CT_STRING:
		return sizeof(char *);
	case CT_LIST:
		return 0; /* no list is reloadable */
	}
	return 0;
}

void
config_apply_reloadable(struct config *live, struct config *fresh)
{
	unsigned char tmp[sizeof(int64_t) + sizeof(double)];
	const struct config_key *k;
	size_t i, n;

	for (i = 0; i < nitems(config_keys); i++) {
		k = &config_keys[i];
		if (!(k->flags & KF_RELOAD) || (n = config_key_size(k)) == 0)
			continue;
		/* Swapped, not copied: fresh then owns (and frees) the old. */
		memcpy(tmp, config_field(live, k->off), n);
		memcpy(
		    config_field(live, k->off), config_field(fresh, k->off), n);
		memcpy(config_field(fresh, k->off), tmp, n);
	}
}

/*
 * The grace period of a new incarnation of the lock data (docs/protocol.md
 * §8): a broker trusts its holds up to redis.trust_ms after Redis last
 * vouched for them, on its own clock; the grace period runs on Redis's.
 * Either clock may run fast or slow by locks.clock_drift, so the grace
 * period is trust_ms stretched by twice that; and Redis's wall clock may
 * step forward by redis.clock_step_ms meanwhile, which would end it early.
 */
uint64_t
config_grace_ms(const struct config *cf)
{
	double t = (double)cf->redis.trust_ms;

	return (uint64_t)(t + 2 * t * cf->locks.clock_drift) + 1 +
	    (uint64_t)cf->redis.clock_step_ms;
}

uint64_t
config_mark_ms(const struct config *cf)
{
	return 2 * (uint64_t)cf->locks.retry_max_ms +
	    (uint64_t)cf->redis.command_timeout_ms;
}

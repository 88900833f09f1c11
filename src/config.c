/*
 * config: loading, checking and reloading. A file is read whole, parsed
 * (config_parse.c), walked against the key table (config_keys.c), then
 * the rules between keys are checked; defaults, freeing, config_diff and
 * the reload swap walk the table row by row. Errors come back as text;
 * this file depends on nothing in lockbroker but xmalloc.
 */
#include <sys/socket.h>
#include <sys/stat.h>

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
#include "config_int.h"
#include "lb_build.h"
#include "xmalloc.h"

/* A config file is a few kilobytes; anything this big is a mistake. */
#define CONFIG_MAX_FILE (1024 * 1024)

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
int
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
int
config_error(struct config_load *ld, const config_setting_t *s, const char *key,
    const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	config_verror(ld, config_setting_source_line(s), key, fmt, ap);
	va_end(ap);
	return -1;
}

/* libconfig's tree holds its own copy of each secret: wipe it too. */
static void
config_wipe_tree(config_t *lc)
{
	config_setting_t *s;
	size_t i;

	for (i = 0; i < config_nkeys; i++) {
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
	    cf->auth.secret_file[0] != '\0' || cf->auth.identities.n > 0 ||
	    cf->listen.address[0] == '\0')
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

/* Sentinels and a master name only make sense together, and a
 * cluster's seed nodes with neither. */
static int
config_check_sentinel(struct config_load *ld)
{
	const struct config_redis *r = &ld->cf->redis;
	const struct config_key *k;

	if (r->ncluster > 0 && (r->nsentinels > 0 || r->unix_path[0] != '\0')) {
		k = config_key_find("redis.cluster");
		return config_error(ld, ld->where[k - config_keys], k->name,
		    "a cluster's nodes are found by address: not with redis.sentinels or redis.unix");
	}
	if ((r->nsentinels > 0) == (r->master_name[0] != '\0'))
		return 0;
	k = config_key_find(
	    r->nsentinels > 0 ? "redis.sentinels" : "redis.master_name");
	return config_error(ld, ld->where[k - config_keys], k->name,
	    "redis.sentinels and redis.master_name go together");
}

/* A TLS listener needs its certificate and key, and a client
 * certificate policy other than none needs the CA that signs them. */
static int
config_check_tls(struct config_load *ld)
{
	const struct config_tls *t = &ld->cf->tls;
	const char *name = NULL, *why = NULL;
	const struct config_key *k;

	if (t->port == 0)
		return 0;
	if (t->certificate[0] == '\0')
		name = "tls.certificate", why = "needed with tls.port";
	else if (t->key[0] == '\0')
		name = "tls.key", why = "needed with tls.port";
	else if (t->ca[0] == '\0' &&
	    strcmp(t->client_certificates, "none") != 0)
		name = "tls.ca", why = "needed with tls.client_certificates";
	if (name == NULL)
		return 0;
	k = config_key_find("tls.port");
	return config_error(ld, ld->where[k - config_keys], name, "%s", why);
}

/* The first redis.tls_* key the file set, or NULL. */
static const char *
config_redis_tls_set(const struct config_redis *r)
{
	if (r->tls_ca[0] != '\0')
		return "redis.tls_ca";
	if (r->tls_certificate[0] != '\0')
		return "redis.tls_certificate";
	if (r->tls_key[0] != '\0')
		return "redis.tls_key";
	if (r->tls_server_name[0] != '\0')
		return "redis.tls_server_name";
	return NULL;
}

/* A build without TLS to Redis refuses redis.tls, so -t says so before a
 * start would; its other keys without it would be a plain-text link the
 * file seems to encrypt; a client certificate needs its key. */
static int
config_check_redis_tls(struct config_load *ld)
{
	const struct config_redis *r = &ld->cf->redis;
	const char *name = "redis.tls", *why = NULL;
	const struct config_key *k;

	if (r->tls && !LB_REDIS_TLS)
		why = "this lockbrokerd was built without TLS to Redis "
		      "(meson setup -Dredis_tls=enabled; see the README)";
	else if (r->tls && r->unix_path[0] != '\0' && r->nsentinels == 0)
		why = "not with redis.unix: a Unix socket is not encrypted";
	else if (!r->tls && (name = config_redis_tls_set(r)) != NULL)
		why = "needs redis.tls = true";
	else if (r->tls_certificate[0] != '\0' && r->tls_key[0] == '\0')
		name = "redis.tls_certificate", why = "needs redis.tls_key";
	else if (r->tls_key[0] != '\0' && r->tls_certificate[0] == '\0')
		name = "redis.tls_key", why = "needs redis.tls_certificate";
	if (why == NULL)
		return 0;
	k = config_key_find(name);
	return config_error(ld, ld->where[k - config_keys], name, "%s", why);
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
		rv = config_ident_check(ld);
	if (rv == 0)
		rv = config_check_exposure(ld);
	if (rv == 0)
		rv = config_check_tls(ld);
	if (rv == 0)
		rv = config_check_redis_tls(ld);
	config_wipe_tree(&lc);
	config_ident_wipe_tree(&lc);
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
	case CT_IDENTS:
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
	} else if (k->type == CT_IDENTS)
		config_ident_free(config_field(cf, k->off));
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
	case CT_IDENTS:
		return config_ident_equal(pa, pb);
	}
	return 0;
}

void
config_defaults(struct config *cf)
{
	size_t i;

	memset(cf, 0, sizeof *cf);
	for (i = 0; i < config_nkeys; i++)
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

	for (i = 0; i < config_nkeys; i++)
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

	for (i = 0; i < config_nkeys; i++) {
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
	case CT_IDENTS:
		return sizeof(struct config_identities);
	}
	return 0;
}

void
config_apply_reloadable(struct config *live, struct config *fresh)
{
	unsigned char tmp[sizeof(struct config_identities) + sizeof(double)];
	const struct config_key *k;
	size_t i, n;

	for (i = 0; i < config_nkeys; i++) {
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

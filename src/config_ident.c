/*
 * config_ident: the key auth.identities, a list of groups, each one
 * identity: its name, its secret (inline or a file), the name prefixes it
 * may touch and its rights there. Every member is checked here with the
 * file's line, so a typo is an error at -t, not a refusal at run time;
 * the secret files themselves are read by the identity module. Calls only
 * config.c's error helpers, config_keys.c's credential paths and xmalloc.
 */
#include <ctype.h>
#include <libconfig.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_int.h"
#include "xmalloc.h"

/* The members an identity's group may have. */
static const char *const config_ident_members[] = { "name", "secret",
	"secret_file", "certificate", "names", "rights" };
#define CONFIG_IDENT_MEMBERS 6

/* The rights by their word in the file. */
static const struct {
	const char *word;
	int bit;
} config_rights[] = {
	{ "lock", CONFIG_RIGHT_LOCK },
	{ "read", CONFIG_RIGHT_READ },
	{ "revoke", CONFIG_RIGHT_REVOKE },
};

const char *
config_right_name(int right)
{
	for (size_t r = 0; r < 3; r++)
		if (config_rights[r].bit == right)
			return config_rights[r].word;
	return "?";
}

/* The names the two secrets of before take as identities. */
static const char *const config_ident_reserved[] = { "default", "admin" };

#define CONFIG_PREFIX_MAX 256

/* Every string of one identity freed, its secret wiped. */
static void
config_ident_clear(struct config_identity *id)
{
	free(id->name);
	freezero_str(id->secret);
	free(id->secret_file);
	free(id->certificate);
	for (int i = 0; i < id->nnames; i++)
		free(id->names[i]);
	memset(id, 0, sizeof *id);
}

void
config_ident_free(struct config_identities *ids)
{
	for (int i = 0; i < ids->n; i++)
		config_ident_clear(&ids->v[i]);
	free(ids->v);
	ids->v = NULL;
	ids->n = 0;
}

/* A key for error lines: "auth.identities[2].names". */
static const char *
config_ident_key(char *buf, size_t len, int i, const char *member)
{
	snprintf(buf, len, "auth.identities[%d]%s%s", i,
	    member != NULL ? "." : "", member != NULL ? member : "");
	return buf;
}

/* A name is a log word, a /metrics label and later a certificate's
 * subject: short, and only bytes that need no quoting anywhere. */
static const char *
config_ident_check_name(const char *v)
{
	size_t len = strlen(v);

	if (len < 1 || len > CONFIG_IDENT_NAME_MAX)
		return "must be 1 to 64 bytes";
	for (const char *p = v; *p != '\0'; p++)
		if (!isalnum((unsigned char)*p) && strchr("._@:-", *p) == NULL)
			return "may hold only letters, digits and . _ @ : -";
	for (size_t i = 0; i < 2; i++)
		if (strcmp(v, config_ident_reserved[i]) == 0)
			return "\"default\" and \"admin\" are the names of "
			       "auth.secret and auth.admin_secret";
	return NULL;
}

/* A prefix is compared with lock names, which have no spaces. */
static const char *
config_ident_check_prefix(const char *v)
{
	if (strlen(v) > CONFIG_PREFIX_MAX)
		return "must be at most 256 bytes";
	for (const char *p = v; *p != '\0'; p++)
		if (isspace((unsigned char)*p) || iscntrl((unsigned char)*p))
			return "must not contain spaces or control characters";
	return NULL;
}

/* One string member into *out (NULL when absent), or -1 naming it. */
static int
config_ident_string(struct config_load *ld, const config_setting_t *g, int i,
    const char *member, const char **out)
{
	const config_setting_t *s = config_setting_get_member(g, member);
	char key[96];

	*out = NULL;
	if (s == NULL)
		return 0;
	if (config_setting_type(s) != CONFIG_TYPE_STRING)
		return config_error(ld, s,
		    config_ident_key(key, sizeof key, i, member),
		    "expected a string");
	*out = config_setting_get_string(s);
	return 0;
}

/* "names": one to sixteen prefixes; "*" is every name, as "" is. */
static int
config_ident_names(struct config_load *ld, const config_setting_t *g, int i,
    struct config_identity *id)
{
	const config_setting_t *s = config_setting_get_member(g, "names"), *e;
	const char *v, *why;
	char key[96];
	int n;

	config_ident_key(key, sizeof key, i, "names");
	if (s == NULL)
		return config_error(ld, g, key,
		    "missing: the name prefixes it may use (\"*\" for all)");
	if ((!config_setting_is_list(s) && !config_setting_is_array(s)) ||
	    (n = config_setting_length(s)) < 1 || n > CONFIG_MAX_PREFIXES)
		return config_error(
		    ld, s, key, "expected a list of 1 to 16 strings");
	for (int j = 0; j < n; j++) {
		e = config_setting_get_elem(s, j);
		if (config_setting_type(e) != CONFIG_TYPE_STRING)
			return config_error(ld, e, key, "expected a string");
		v = config_setting_get_string(e);
		if ((why = config_ident_check_prefix(v)) != NULL)
			return config_error(ld, e, key, "%s", why);
		id->names[id->nnames++] = xstrdup(strcmp(v, "*") == 0 ? "" : v);
	}
	return 0;
}

/* One word of "rights", or -1 (an error in ld). */
static int
config_ident_right(
    struct config_load *ld, const config_setting_t *e, const char *key)
{
	const char *v;

	if (config_setting_type(e) == CONFIG_TYPE_STRING) {
		v = config_setting_get_string(e);
		for (size_t r = 0; r < 3; r++)
			if (strcmp(v, config_rights[r].word) == 0)
				return config_rights[r].bit;
	}
	config_error(
	    ld, e, key, "expected \"lock\", \"read\" or \"revoke\" in a list");
	return -1;
}

/* "rights": at least one of lock, read, revoke. */
static int
config_ident_rights(struct config_load *ld, const config_setting_t *g, int i,
    struct config_identity *id)
{
	const config_setting_t *s = config_setting_get_member(g, "rights");
	char key[96];
	int n, bit;

	config_ident_key(key, sizeof key, i, "rights");
	if (s == NULL)
		return config_error(ld, g, key,
		    "missing: some of \"lock\", \"read\", \"revoke\"");
	if ((!config_setting_is_list(s) && !config_setting_is_array(s)) ||
	    (n = config_setting_length(s)) < 1)
		return config_error(ld, s, key,
		    "expected some of \"lock\", \"read\", \"revoke\"");
	for (int j = 0; j < n; j++) {
		if ((bit = config_ident_right(
			 ld, config_setting_get_elem(s, j), key)) < 0)
			return -1;
		id->rights |= bit;
	}
	return 0;
}

/* Members that are not an identity's are typos: refused. */
static int
config_ident_members_known(
    struct config_load *ld, const config_setting_t *g, int i)
{
	const config_setting_t *s;
	char key[96];
	size_t m;

	for (int j = 0; j < config_setting_length(g); j++) {
		s = config_setting_get_elem(g, j);
		for (m = 0; m < CONFIG_IDENT_MEMBERS; m++)
			if (strcmp(config_setting_name(s),
				config_ident_members[m]) == 0)
				break;
		if (m == CONFIG_IDENT_MEMBERS)
			return config_error(ld, s,
			    config_ident_key(
				key, sizeof key, i, config_setting_name(s)),
			    "unknown key");
	}
	return 0;
}

/* Its name, unique among those before it. */
static int
config_ident_name(struct config_load *ld, const config_setting_t *g, int i,
    struct config_identity *id, const struct config_identities *ids)
{
	const char *v, *why;
	char key[96];

	if (config_ident_string(ld, g, i, "name", &v) != 0)
		return -1;
	config_ident_key(key, sizeof key, i, "name");
	if (v == NULL)
		return config_error(ld, g, key, "missing");
	if ((why = config_ident_check_name(v)) != NULL)
		return config_error(
		    ld, config_setting_get_member(g, "name"), key, "%s", why);
	for (int j = 0; j < ids->n; j++)
		if (strcmp(ids->v[j].name, v) == 0)
			return config_error(ld,
			    config_setting_get_member(g, "name"), key,
			    "\"%s\" is already the name of auth.identities[%d]",
			    v, j);
	id->name = xstrdup(v);
	return 0;
}

/* certificate: the name a verified client certificate gives (its
 * subjectAltName DNS, URI or email entry, or its CN), one identity's. */
static int
config_ident_certificate(struct config_load *ld, const config_setting_t *g,
    int i, struct config_identity *id, const struct config_identities *ids)
{
	const char *v;
	char key[96];

	if (config_ident_string(ld, g, i, "certificate", &v) != 0)
		return -1;
	id->certificate = xstrdup(v != NULL ? v : "");
	if (v == NULL)
		return 0;
	config_ident_key(key, sizeof key, i, "certificate");
	if (v[0] == '\0' || strlen(v) > 255)
		return config_error(ld,
		    config_setting_get_member(g, "certificate"), key,
		    "must be 1 to 255 bytes");
	for (int j = 0; j < ids->n; j++)
		if (strcmp(ids->v[j].certificate, v) == 0)
			return config_error(ld,
			    config_setting_get_member(g, "certificate"), key,
			    "\"%s\" is already the certificate of \"%s\"", v,
			    ids->v[j].name);
	return 0;
}

/* secret or secret_file: exactly one, or at most one with a
 * certificate. */
static int
config_ident_secret(struct config_load *ld, const config_setting_t *g, int i,
    struct config_identity *id)
{
	const config_setting_t *fs =
	    config_setting_get_member(g, "secret_file");
	const char *sv, *fv;
	char key[96];

	if (config_ident_string(ld, g, i, "secret", &sv) != 0 ||
	    config_ident_string(ld, g, i, "secret_file", &fv) != 0)
		return -1;
	config_ident_key(key, sizeof key, i, NULL);
	if (sv != NULL && fv != NULL)
		return config_error(
		    ld, g, key, "needs secret or secret_file, not both");
	if (sv == NULL && fv == NULL && id->certificate[0] == '\0')
		return config_error(
		    ld, g, key, "needs secret, secret_file or certificate");
	if ((sv != NULL && sv[0] == '\0') || (fv != NULL && fv[0] == '\0'))
		return config_error(ld, g, key, "an empty secret");
	id->secret = xstrdup(sv != NULL ? sv : "");
	if (fv == NULL) {
		id->secret_file = xstrdup("");
		return 0;
	}
	id->secret_file = config_cred_path(
	    ld, config_ident_key(key, sizeof key, i, "secret_file"), fs, fv);
	return id->secret_file == NULL ? -1 : 0;
}

/* One group of the list into id, every member checked. */
static int
config_ident_one(struct config_load *ld, const config_setting_t *g, int i,
    struct config_identity *id, const struct config_identities *ids)
{
	char key[96];

	if (!config_setting_is_group(g))
		return config_error(ld, g,
		    config_ident_key(key, sizeof key, i, NULL),
		    "expected a group { name = ...; ... }");
	id->line = (int)config_setting_source_line(g);
	if (config_ident_members_known(ld, g, i) != 0 ||
	    config_ident_name(ld, g, i, id, ids) != 0 ||
	    config_ident_certificate(ld, g, i, id, ids) != 0 ||
	    config_ident_secret(ld, g, i, id) != 0 ||
	    config_ident_names(ld, g, i, id) != 0 ||
	    config_ident_rights(ld, g, i, id) != 0)
		return -1;
	return 0;
}

/* Read the whole list into a new array; swap it in only if all is well. */
int
config_ident_set(struct config_load *ld, const struct config_key *k,
    const config_setting_t *s)
{
	struct config_identities *field = config_field(ld->cf, k->off);
	struct config_identities ids = { NULL, 0 };
	int n;

	if (!config_setting_is_list(s))
		return config_error(ld, s, k->name,
		    "expected a list of groups: ( { name = ...; }, ... )");
	if ((n = config_setting_length(s)) > k->max)
		return config_error(ld, s, k->name,
		    "must have at most %d entries", CONFIG_MAX_IDENTITIES);
	ids.v = xcalloc(n > 0 ? (size_t)n : 1, sizeof *ids.v);
	for (int i = 0; i < n; i++) {
		if (config_ident_one(ld, config_setting_get_elem(s, i), i,
			&ids.v[i], &ids) != 0) {
			ids.n = i + 1; /* the failed one's parts too */
			config_ident_free(&ids);
			return -1;
		}
		ids.n = i + 1;
	}
	config_ident_free(field);
	*field = ids;
	return 0;
}

/* The identity whose inline secret is v, before index upto; -1: none. */
static int
config_ident_same(const struct config_identities *ids, int upto, const char *v)
{
	for (int j = 0; j < upto; j++)
		if (ids->v[j].secret[0] != '\0' &&
		    strcmp(ids->v[j].secret, v) == 0)
			return j;
	return -1;
}

/*
 * One secret, one identity: a secret two identities share would make
 * AUTH pick one of them. Only inline values are compared here; files are
 * read, and compared, by the identity module.
 */
int
config_ident_check(struct config_load *ld)
{
	const struct config_auth *a = &ld->cf->auth;
	const struct config_identities *ids = &a->identities;
	const struct config_identity *id;
	char key[96];
	int j;

	for (int i = 0; i < ids->n; i++) {
		id = &ids->v[i];
		if (id->secret[0] == '\0')
			continue;
		config_ident_key(key, sizeof key, i, "secret");
		if ((j = config_ident_same(ids, i, id->secret)) >= 0)
			return config_at(ld, (unsigned)id->line, key,
			    "the same secret as auth.identities[%d] (\"%s\")",
			    j, ids->v[j].name);
		if (strcmp(id->secret, a->secret) == 0 ||
		    strcmp(id->secret, a->admin_secret) == 0)
			return config_at(ld, (unsigned)id->line, key,
			    "the same secret as auth.%s",
			    strcmp(id->secret, a->secret) == 0
				? "secret"
				: "admin_secret");
	}
	return 0;
}

/* Both strings NULL, or both equal. */
static bool
config_ident_streq(const char *a, const char *b)
{
	return (a == NULL || b == NULL) ? a == b : strcmp(a, b) == 0;
}

/* Two identities alike in every member. */
static bool
config_ident_one_equal(
    const struct config_identity *a, const struct config_identity *b)
{
	if (!config_ident_streq(a->name, b->name) ||
	    !config_ident_streq(a->secret, b->secret) ||
	    !config_ident_streq(a->secret_file, b->secret_file) ||
	    !config_ident_streq(a->certificate, b->certificate) ||
	    a->rights != b->rights || a->nnames != b->nnames)
		return false;
	for (int i = 0; i < a->nnames; i++)
		if (!config_ident_streq(a->names[i], b->names[i]))
			return false;
	return true;
}

bool
config_ident_equal(
    const struct config_identities *a, const struct config_identities *b)
{
	if (a->n != b->n)
		return false;
	for (int i = 0; i < a->n; i++)
		if (!config_ident_one_equal(&a->v[i], &b->v[i]))
			return false;
	return true;
}

/* libconfig keeps its own copy of each inline secret: wipe those too. */
void
config_ident_wipe_tree(config_t *lc)
{
	config_setting_t *l = config_lookup(lc, "auth.identities"), *s;

	if (l == NULL || !config_setting_is_list(l))
		return;
	for (int i = 0; i < config_setting_length(l); i++) {
		s = config_setting_get_elem(l, (unsigned)i);
		if (s == NULL || !config_setting_is_group(s) ||
		    (s = config_setting_get_member(s, "secret")) == NULL)
			continue;
		if (config_setting_type(s) == CONFIG_TYPE_STRING &&
		    s->value.sval != NULL)
			explicit_bzero(s->value.sval, strlen(s->value.sval));
	}
}

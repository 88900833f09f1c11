/*
 * identity: the table of identities, their secrets and rights (identity.h
 * says what an identity is). A reload builds a whole new table first and
 * merges it into the running one only if every secret could be read and
 * no two are alike, so a bad reload changes nothing.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "identity.h"
#include "log.h"
#include "util.h"
#include "xmalloc.h"

#define IDENT_MAX (CONFIG_MAX_IDENTITIES + 2)

/* The identities in force, in order: "default", "admin", the file's. */
static struct {
	struct ident *v[IDENT_MAX];
	int n;
} it;

/* A table being built, and where each entry came from for its errors. */
struct ident_build {
	struct ident *v[IDENT_MAX];
	const char *key[IDENT_MAX]; /* its secret's key, for error lines */
	int line[IDENT_MAX];	    /* its line in the file, 0: none known */
	int n;
};

/* A new identity, its secret taken over (wiped with it). */
static struct ident *
ident_new(const char *name, char *secret, int rights, bool builtin)
{
	struct ident *id = xcalloc(1, sizeof *id);

	id->name = xstrdup(name);
	id->secret = secret;
	id->certificate = xstrdup("");
	id->rights = rights;
	id->builtin = builtin;
	id->refs = 1;
	return id;
}

/* Free once nothing refers to it. */
static void
ident_free(struct ident *id)
{
	free(id->name);
	freezero_str(id->secret);
	free(id->certificate);
	for (int i = 0; i < id->nnames; i++)
		free(id->names[i]);
	free(id);
}

struct ident *
ident_ref(struct ident *id)
{
	if (id != NULL)
		id->refs++;
	return id;
}

void
ident_unref(struct ident *id)
{
	if (id != NULL && --id->refs == 0)
		ident_free(id);
}

/* A secret in force: its file wins over its inline value (NULL, logged,
 * if the file cannot be read). */
static char *
ident_secret(const char *inline_value, const char *file, const char *key)
{
	char *secret;

	if (file[0] == '\0')
		return xstrdup(inline_value);
	if ((secret = util_read_secret(file)) == NULL)
		log_warn("%s %s", key, file);
	return secret;
}

/* Add one identity to the table being built. */
static void
ident_add(struct ident_build *b, struct ident *id, const char *key, int line)
{
	b->key[b->n] = key;
	b->line[b->n] = line;
	b->v[b->n++] = id;
}

/* "default" and "admin", from the two secrets of before (if set). */
static bool
ident_builtins(const struct config *cf, struct ident_build *b)
{
	const int all = CONFIG_RIGHT_LOCK | CONFIG_RIGHT_READ;
	char *s, *a;
	struct ident *id;

	if ((s = ident_secret(cf->auth.secret, cf->auth.secret_file,
		 "auth.secret_file")) == NULL)
		return false;
	if ((a = ident_secret(cf->auth.admin_secret, cf->auth.admin_secret_file,
		 "auth.admin_secret_file")) == NULL) {
		freezero_str(s);
		return false;
	}
	id = ident_new("default", s, all, true);
	id->names[id->nnames++] = xstrdup("");
	ident_add(b, id, "auth.secret", 0);
	id = ident_new("admin", a, all | CONFIG_RIGHT_REVOKE, true);
	id->names[id->nnames++] = xstrdup("");
	ident_add(b, id, "auth.admin_secret", 0);
	return true;
}

/* Each of auth.identities, its secret read. */
static bool
ident_configured(const struct config *cf, struct ident_build *b)
{
	const struct config_identity *ci;
	struct ident *id;
	char *secret, key[64];

	for (int i = 0; i < cf->auth.identities.n; i++) {
		ci = &cf->auth.identities.v[i];
		snprintf(key, sizeof key, "auth.identities[%d].secret_file", i);
		if ((secret = ident_secret(ci->secret, ci->secret_file, key)) ==
		    NULL)
			return false;
		id = ident_new(ci->name, secret, ci->rights, false);
		free(id->certificate);
		id->certificate =
		    xstrdup(ci->certificate != NULL ? ci->certificate : "");
		for (int j = 0; j < ci->nnames; j++)
			id->names[id->nnames++] = xstrdup(ci->names[j]);
		ident_add(b, id, ci->name, ci->line);
	}
	return true;
}

/* One secret, one identity: AUTH must know whom it let in. */
static bool
ident_distinct(const struct config *cf, const struct ident_build *b)
{
	for (int i = 0; i < b->n; i++)
		for (int j = 0; j < i; j++) {
			if (b->v[i]->secret[0] == '\0' ||
			    strcmp(b->v[i]->secret, b->v[j]->secret) != 0)
				continue;
			if (b->v[i]->builtin)
				log_warnx("auth.admin_secret must differ from "
					  "auth.secret");
			else
				log_warnx("%s:%d: auth.identities: \"%s\": "
					  "the same secret as \"%s\"",
				    cf->path != NULL ? cf->path : "-",
				    b->line[i], b->v[i]->name, b->v[j]->name);
			return false;
		}
	return true;
}

/* The running identity of that name, for a reload to keep. */
static struct ident *
ident_running(const char *name)
{
	for (int i = 0; i < it.n; i++)
		if (strcmp(it.v[i]->name, name) == 0)
			return it.v[i];
	return NULL;
}

/* A kept identity takes its new secret, names and rights in place. */
static void
ident_update(struct ident *old, struct ident *fresh)
{
	struct ident tmp = *old;

	old->secret = fresh->secret;
	old->certificate = fresh->certificate;
	old->rights = fresh->rights;
	old->nnames = fresh->nnames;
	memcpy(old->names, fresh->names, sizeof old->names);
	fresh->secret = tmp.secret;
	fresh->certificate = tmp.certificate;
	fresh->nnames = tmp.nnames;
	memcpy(fresh->names, tmp.names, sizeof fresh->names);
	ident_unref(fresh);
}

/* The built table replaces the running one; dropped identities are gone. */
static void
ident_merge(struct ident_build *b)
{
	struct ident *old;

	for (int i = 0; i < b->n; i++)
		if ((old = ident_running(b->v[i]->name)) != NULL) {
			ident_update(old, b->v[i]);
			b->v[i] = ident_ref(old);
		}
	for (int i = 0; i < it.n; i++) {
		bool kept = false;

		for (int j = 0; j < b->n; j++)
			kept = kept || b->v[j] == it.v[i];
		it.v[i]->gone = !kept;
		ident_unref(it.v[i]);
	}
	memcpy(it.v, b->v, sizeof it.v);
	it.n = b->n;
}

bool
ident_load(const struct config *cf)
{
	struct ident_build b;

	memset(&b, 0, sizeof b);
	if (ident_builtins(cf, &b) && ident_configured(cf, &b) &&
	    ident_distinct(cf, &b)) {
		ident_merge(&b);
		return true;
	}
	for (int i = 0; i < b.n; i++)
		ident_unref(b.v[i]);
	return false;
}

void
ident_shutdown(void)
{
	for (int i = 0; i < it.n; i++) {
		explicit_bzero(
		    it.v[i]->secret, strlen(it.v[i]->secret)); /* now */
		it.v[i]->gone = true;
		ident_unref(it.v[i]);
	}
	it.n = 0;
}

/* Every secret compared, none skipped, so the time does not tell which. */
struct ident *
ident_by_secret(const char *secret)
{
	struct ident *found = NULL;

	for (int i = 0; i < it.n; i++)
		if (it.v[i]->secret[0] != '\0' &&
		    util_secret_equal(secret, it.v[i]->secret))
			found = it.v[i];
	return found;
}

struct ident *
ident_by_certificate(const char *name)
{
	for (int i = 0; i < it.n; i++)
		if (it.v[i]->certificate[0] != '\0' &&
		    strcmp(it.v[i]->certificate, name) == 0)
			return it.v[i];
	return NULL;
}

struct ident *
ident_by_name(const char *name)
{
	return ident_running(name);
}

bool
ident_any(void)
{
	for (int i = 0; i < it.n; i++)
		if (ident_usable(it.v[i]))
			return true;
	return false;
}

bool
ident_required(void)
{
	for (int i = 0; i < it.n; i++)
		if (ident_usable(it.v[i]) &&
		    strcmp(it.v[i]->name, "admin") != 0)
			return true;
	return false;
}

bool
ident_any_right(int right)
{
	for (int i = 0; i < it.n; i++)
		if (ident_usable(it.v[i]) && (it.v[i]->rights & right))
			return true;
	return false;
}

bool
ident_usable(const struct ident *id)
{
	return id->secret[0] != '\0' || id->certificate[0] != '\0';
}

bool
ident_allows(const struct ident *id, int right, const char *name)
{
	if (id == NULL)
		return right != CONFIG_RIGHT_REVOKE;
	if (id->gone || !(id->rights & right))
		return false;
	for (int i = 0; i < id->nnames; i++)
		if (strncmp(name, id->names[i], strlen(id->names[i])) == 0)
			return true;
	return false;
}

void
ident_count(struct ident *id, bool denied)
{
	if (id == NULL)
		return;
	id->requests++;
	if (denied)
		id->denied++;
}

int
ident_table_size(void)
{
	return it.n;
}

const struct ident *
ident_table_at(int i)
{
	return it.v[i];
}

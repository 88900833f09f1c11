/*
 * config_int: what the config module's files share and nothing outside
 * config*.c includes: the key table's row (config_keys.c owns the table),
 * one load in progress, and the functions one file calls in another.
 */
#ifndef LB_CONFIG_INT_H
#define LB_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libconfig.h>

#include "config.h"

/* How a key is stored in struct config and what the file must hold. */
enum config_type {
	CT_INT,	   /* int; libconfig int or int64 within range */
	CT_INT64,  /* int64_t; libconfig int or int64 */
	CT_DOUBLE, /* double; an integer is accepted too */
	CT_BOOL,   /* bool */
	CT_STRING, /* char *, vetted by check if set */
	CT_LIST,   /* char *[max] + int count; list or array of strings */
	CT_MODE,   /* int from a string of octal digits such as "0660" */
	CT_IDENTS, /* struct config_identities; a list of groups */
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

/* The table, config_keys.c's, and how many rows it has. */
extern const struct config_key config_keys[];
extern const size_t config_nkeys;

/* Room for every row of config_keys[] (config_keys.c asserts it fits). */
#define CONFIG_MAX_KEYS 96

/* One load in progress: where errors go and which setting set each key. */
struct config_load {
	struct config *cf;
	const char *path;
	char *err;
	size_t errlen;
	const config_setting_t *where[CONFIG_MAX_KEYS];
};

/* Fields are reached through the table's offsets, so one cast lives here. */
static inline void *
config_field(const struct config *cf, size_t off)
{
	return (char *)cf + off;
}

/* config.c: an error that knows a line (0: none) but maybe no key. */
int config_at(struct config_load *ld, unsigned line, const char *key,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* config.c: an error about one setting: its line, its dotted key. */
int config_error(struct config_load *ld, const config_setting_t *s,
    const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* config_keys.c: a key's row by its dotted name, or NULL. */
const struct config_key *config_key_find(const char *name);
/* config_keys.c: a string of key k's freed, wiped first if a secret. */
void config_str_free(const struct config_key *k, char *s);
/* config_keys.c: every setting of the file into ld->cf, by the table. */
int config_walk(struct config_load *ld, const config_setting_t *root);
/* config_keys.c: config_order[]'s pairs, blaming the key the file set. */
int config_check_order(struct config_load *ld);

/* config_keys.c: a secret's file as a path: absolute, or a credential
 * name under $CREDENTIALS_DIRECTORY (NULL and an error in ld if neither). */
char *config_cred_path(struct config_load *ld, const char *key,
    const config_setting_t *s, const char *v);

/* config_ident.c: auth.identities, each group checked, into k's field. */
int config_ident_set(struct config_load *ld, const struct config_key *k,
    const config_setting_t *s);
/* config_ident.c: no two inline secrets alike (auth.secret's included). */
int config_ident_check(struct config_load *ld);
/* config_ident.c: every identity's strings freed, secrets wiped. */
void config_ident_free(struct config_identities *ids);
/* config_ident.c: the same identities, in the same order. */
bool config_ident_equal(
    const struct config_identities *a, const struct config_identities *b);
/* config_ident.c: wipe the inline secrets in libconfig's own tree. */
void config_ident_wipe_tree(config_t *lc);

/* config_parse.c: text into lc, or an error in ld. */
int config_parse(struct config_load *ld, config_t *lc, const char *text);

#endif

/*
 * identity: who a connection is once it sent AUTH, and what it may do on
 * which names. The table is built from the configuration: each entry of
 * auth.identities, plus "default" (auth.secret: every name, lock and
 * read) and "admin" (auth.admin_secret: every name, lock, read and
 * revoke). Secrets are read from their files here, at start and on each
 * reload, and wiped at shutdown. An identity a reload keeps (same name)
 * stays the same object, so its connections see its new rights at once;
 * one a reload drops is marked gone and lives on only while a connection
 * holds it. Identities are found by secret (AUTH) and by name (a verified
 * certificate's subject, later). Calls config, util, log and xmalloc.
 */
#ifndef LB_IDENTITY_H
#define LB_IDENTITY_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"

struct ident {
	char *name;
	char *secret;	   /* "" when it has none; wiped before free */
	char *certificate; /* the name a verified certificate gives; "" none */
	char *names[CONFIG_MAX_PREFIXES]; /* prefixes; "" is every name */
	int nnames;
	int rights;    /* CONFIG_RIGHT_* */
	bool builtin;  /* "default" or "admin", from the secrets of before */
	bool gone;     /* dropped by a reload */
	unsigned refs; /* the table's and each connection's */
	uint64_t requests; /* commands it sent after AUTH */
	uint64_t denied;   /* of those, refused with ERR DENIED */
};

/* Read every secret of cf and make the table; false (logged, the table
 * untouched) if a file cannot be read or two identities share a secret. */
bool ident_load(const struct config *cf);
/* Free the table, secrets wiped (connections' references stay valid). */
void ident_shutdown(void);

/* The identity whose secret this is, or NULL; the time taken does not
 * depend on which one matched. */
struct ident *ident_by_secret(const char *secret);
/* The identity of that name, or NULL. */
struct ident *ident_by_name(const char *name);
/* The identity whose certificate is that name (one a verified client
 * certificate gives), or NULL. */
struct ident *ident_by_certificate(const char *name);
/* Whether a connection can be let in as id: it has a secret, or a
 * certificate name (the built-in ones have none when their key is not
 * set). */
bool ident_usable(const struct ident *id);
/* Whether any identity can be had, by secret or certificate (else AUTH
 * is not needed). */
bool ident_any(void);
/* Whether a connection must AUTH before its first command: auth.secret or
 * any of auth.identities is set (auth.admin_secret alone does not). */
bool ident_required(void);
/* Whether any identity has right (REVOKE is off when none has it). */
bool ident_any_right(int right);

/* Whether id may use right on name; NULL (AUTH not needed) may lock and
 * read every name. */
bool ident_allows(const struct ident *id, int right, const char *name);
/* One command of id's counted, denied or not. */
void ident_count(struct ident *id, bool denied);

/* A connection takes and drops its reference. */
struct ident *ident_ref(struct ident *id);
void ident_unref(struct ident *id);

/* The table in order ("default", "admin", then auth.identities). */
int ident_table_size(void);
const struct ident *ident_table_at(int i);

#endif

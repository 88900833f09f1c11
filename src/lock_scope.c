/*
 * lock_scope: each scope's entry (lock_scope.h). A table of pointers,
 * one per possible scope (16384: 128 KiB), and the entries made, in the
 * order made, for a walk that does not visit the empty ones.
 */
#include <stdlib.h>

#include "lock_name.h"
#include "lock_scope.h"
#include "lockdb.h"
#include "log.h"
#include "xmalloc.h"

static struct {
	struct lock_scope **tab; /* LOCKDB_SCOPES, NULL until made */
	int *made;		 /* the scopes made, in order */
	int nmade;
} scopes;

void
lockscope_init(void)
{
	scopes.tab = xcalloc(LOCKDB_SCOPES, sizeof *scopes.tab);
	scopes.made = xcalloc(LOCKDB_SCOPES, sizeof *scopes.made);
	scopes.nmade = 0;
}

void
lockscope_shutdown(void)
{
	if (scopes.tab == NULL)
		return;
	for (int i = 0; i < scopes.nmade; i++)
		free(scopes.tab[scopes.made[i]]);
	free(scopes.tab);
	free(scopes.made);
	scopes.tab = NULL;
	scopes.made = NULL;
	scopes.nmade = 0;
}

struct lock_scope *
lockscope_find(int scope)
{
	if (scope < 0 || scope >= LOCKDB_SCOPES)
		fatalx("lock_scope: scope %d out of range", scope);
	return scopes.tab[scope];
}

struct lock_scope *
lockscope_get(int scope)
{
	struct lock_scope *sc = lockscope_find(scope);

	if (sc != NULL)
		return sc;
	sc = xcalloc(1, sizeof *sc);
	sc->scope = scope;
	scopes.tab[scope] = sc;
	scopes.made[scopes.nmade++] = scope;
	return sc;
}

int
lockscope_of(const struct lock_name *ln)
{
	return lockdb_scope_of(ln->name);
}

void
lockscope_foreach(void (*fn)(struct lock_scope *, void *), void *arg)
{
	for (int i = 0; i < scopes.nmade; i++)
		fn(scopes.tab[scopes.made[i]], arg);
}

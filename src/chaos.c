/*
 * chaos: the switch for the broken variants of chaos.h (test builds only).
 */
#include "chaos.h"

#if LB_CHAOS_FAULTS
#include <stdlib.h>
#include <string.h>

#include "log.h"

enum chaos_fault chaos_fault;

const char *
chaos_init(void)
{
	static const char *const names[] = { NULL, "no_fence", "blind_release",
		"no_validity", "no_limit", "owed_blind", "no_foreign_notice",
		"no_tickets", "no_grace", "no_clock_fence", "no_confirm",
		"no_eviction_check", "lock_key_only", "one_scope" };
	const char *v = getenv("LOCKBROKER_CHAOS_FAULT");

	if (v == NULL || *v == '\0' || strcmp(v, "none") == 0)
		return NULL;
	for (size_t i = 1; i < sizeof names / sizeof names[0]; i++)
		if (strcmp(v, names[i]) == 0) {
			chaos_fault = (enum chaos_fault)i;
			return names[i];
		}
	fatalx("LOCKBROKER_CHAOS_FAULT: unknown variant '%s'", v);
}
#else
/* ISO C wants something in a translation unit. */
typedef int chaos_unused;
#endif

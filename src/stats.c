/* stats: the values, and names taken from the one table in stats.h. */
#include "stats.h"

int64_t stats[STAT__COUNT];

static const char *const stats_names[] = {
#define STATS_NAME(name, kind, help) #name,
	STATS_TABLE(STATS_NAME)
#undef STATS_NAME
};

static const char *const stats_helps[] = {
#define STATS_HELP(name, kind, help) help,
	STATS_TABLE(STATS_HELP)
#undef STATS_HELP
};

const char *
stats_name(enum stats_id id)
{
	return stats_names[id];
}

const char *
stats_help(enum stats_id id)
{
	return stats_helps[id];
}

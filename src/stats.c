/* stats: the values, and names taken from the one table in stats.h. */
#include <stddef.h>

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

static const int stats_counter[] = {
#define STATS_KIND_COUNTER 1
#define STATS_KIND_GAUGE 0
#define STATS_KIND(name, kind, help) STATS_KIND_##kind,
	STATS_TABLE(STATS_KIND)
#undef STATS_KIND
};

int
stats_is_counter(enum stats_id id)
{
	return stats_counter[id];
}

struct stats_hist stats_hists[HIST__COUNT];

/* From half a millisecond (a local handoff) to a minute (a long wait). */
const uint64_t stats_bucket_us[STATS_NBUCKETS] = { 500, 1000, 2500, 5000, 10000,
	25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000,
	10000000, 30000000, 60000000 };

static const char *const stats_hist_names[] = {
#define STATS_HNAME(name, help) #name,
	STATS_HISTOGRAMS(STATS_HNAME)
#undef STATS_HNAME
};

static const char *const stats_hist_helps[] = {
#define STATS_HHELP(name, help) help,
	STATS_HISTOGRAMS(STATS_HHELP)
#undef STATS_HHELP
};

void
stats_observe(enum stats_hist_id id, uint64_t us)
{
	struct stats_hist *h = &stats_hists[id];
	size_t i = 0;

	while (i < STATS_NBUCKETS && us > stats_bucket_us[i])
		i++;
	h->buckets[i]++;
	h->count++;
	h->sum_us += us;
}

const char *
stats_hist_name(enum stats_hist_id id)
{
	return stats_hist_names[id];
}

const char *
stats_hist_help(enum stats_hist_id id)
{
	return stats_hist_helps[id];
}

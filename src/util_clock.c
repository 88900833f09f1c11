/*
 * util_clock: the clocks util.h declares, alone in their file so that the
 * lock engine's unit tests link tests/unit/fake_clock.c in their place (a
 * virtual clock they move on) and the daemon pays nothing for it. Define
 * nothing else here: a test linking the fake would then get both.
 */
#include <time.h>

#include "util.h"

uint64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The wall clock, as WHO entries show when a hold began. */
uint64_t
wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t
mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

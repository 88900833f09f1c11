/*
 * lock_timer: the engine's one way to arm a timer, alone in its file so
 * that the unit tests' virtual clock (tests/unit/fake_clock.c) takes its
 * place at link time and the daemon pays nothing for it. Define nothing
 * else here: a test linking the fake would then get both.
 */
#include <event2/event.h>

#include "lock_timer.h"
#include "util.h"

void
locktimer_add(struct event *ev, uint64_t ms)
{
	struct timeval tv = util_timeval(ms);

	evtimer_add(ev, &tv);
}

/*
 * lock_timer: every timer of the lock engine is armed here, so that the
 * engine's unit tests link tests/unit/fake_clock.c in its place and move
 * a virtual clock on instead of waiting. The engine reads the time with
 * util.h's mono_ms() and mono_us(), which the same file replaces. Calls
 * nothing of the engine.
 */
#ifndef LB_LOCK_TIMER_H
#define LB_LOCK_TIMER_H

#include <stdint.h>

#include <event2/event.h>

#include "log.h"

/* A timer for the engine (flags 0, or EV_PERSIST to fire every ms once
 * armed); it cannot fail. */
static inline struct event *
locktimer_new(
    struct event_base *base, short flags, event_callback_fn fn, void *arg)
{
	struct event *ev = event_new(base, -1, flags, fn, arg);

	if (ev == NULL)
		fatalx("lock: event_new failed");
	return ev;
}

/* Arm ev (made with evtimer_new or event_new) to fire ms from now; a
 * persistent event (EV_PERSIST) fires every ms from then on. */
void locktimer_add(struct event *ev, uint64_t ms);

#endif

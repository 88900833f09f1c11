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

struct event;

/* Arm ev (made with evtimer_new or event_new) to fire ms from now; a
 * persistent event (EV_PERSIST) fires every ms from then on. */
void locktimer_add(struct event *ev, uint64_t ms);

#endif

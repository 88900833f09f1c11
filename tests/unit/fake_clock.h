/*
 * fake_clock: a virtual clock for the lock engine's unit tests. It takes
 * the place of src/util_clock.c (mono_ms, mono_us, wall_ms) and
 * src/lock_timer.c (locktimer_add) at link time, so the engine reads a
 * time that stands still until the test moves it on, and its timers fire
 * when the virtual time reaches them, in order, however long they are:
 * the tests wait for nothing.
 *
 * An armed timer is also added to libevent, far in the future, so that
 * evtimer_pending, evtimer_del and event_free work on it as in the daemon;
 * moving the clock on activates (event_active) each one due, earliest
 * first, and runs the loop once after each.
 */
#ifndef LB_FAKE_CLOCK_H
#define LB_FAKE_CLOCK_H

#include <stdint.h>

struct event_base;

/* Start again at the same virtual time, with no timers, on base. */
void fakeclock_reset(struct event_base *base);
/* Move the clock on by ms, firing every timer due by then, in order. */
void fakeclock_advance(uint64_t ms);
/* Move the clock on by ms and fire nothing, as for a broker paused: its
 * loop has not turned, so the timers due run late, at the next advance. */
void fakeclock_skip(uint64_t ms);

#endif

/*
 * fake_clock: the virtual clock of the engine's unit tests (fake_clock.h
 * says what it stands in for). Its timers are a table beside libevent's:
 * libevent keeps each armed event pending, far off, and the table says
 * when it is due in virtual time.
 */
#include <check.h>
#include <stdbool.h>
#include <stdlib.h>

#include <event2/event.h>

#include "fake_clock.h"
#include "lock_timer.h"
#include "util.h"

/* Where virtual time starts: far from 0, as a machine's uptime is. */
#define FAKECLOCK_START_MS 1000000000ULL
/* The wall clock then (2026-01-01T00:00:00Z). */
#define FAKECLOCK_WALL_MS 1767225600000ULL
/* How far off libevent keeps an armed timer: it never fires by itself. */
#define FAKECLOCK_FAR_S (100 * 86400)

/* One armed timer: when it is due, its period, and the order it was
 * armed in (of two due at once, the earlier armed fires first). */
struct fakeclock_timer {
	struct event *ev;
	uint64_t due_ms;
	uint64_t period_ms;
	uint64_t seq;
	bool seen;
};

static struct {
	struct event_base *base;
	uint64_t now_ms;
	unsigned tick; /* microseconds read within now_ms */
	struct fakeclock_timer *timers;
	size_t n, cap;
	uint64_t seq;
} fc;

uint64_t
mono_ms(void)
{
	return fc.now_ms;
}

/* Each reading is a microsecond later than the last within the same ms,
 * as the real clock would be: the engine orders events by it. */
uint64_t
mono_us(void)
{
	if (fc.tick < 999)
		fc.tick++;
	return fc.now_ms * 1000 + fc.tick;
}

uint64_t
wall_ms(void)
{
	return FAKECLOCK_WALL_MS + (fc.now_ms - FAKECLOCK_START_MS);
}

static struct fakeclock_timer *
fakeclock_find(const struct event *ev)
{
	for (size_t i = 0; i < fc.n; i++)
		if (fc.timers[i].ev == ev)
			return &fc.timers[i];
	return NULL;
}

void
locktimer_add(struct event *ev, uint64_t ms)
{
	struct timeval far = { FAKECLOCK_FAR_S, 0 };
	struct fakeclock_timer *t = fakeclock_find(ev);

	ck_assert_int_eq(evtimer_add(ev, &far), 0);
	if (t == NULL) {
		if (fc.n == fc.cap) {
			fc.cap = fc.cap == 0 ? 64 : fc.cap * 2;
			fc.timers =
			    realloc(fc.timers, fc.cap * sizeof *fc.timers);
			ck_assert_ptr_nonnull(fc.timers);
		}
		t = &fc.timers[fc.n++];
		t->ev = ev;
	}
	t->due_ms = fc.now_ms + ms;
	t->period_ms = ms;
	t->seq = ++fc.seq;
}

/* Marks the timers libevent still has; one it has that was not armed
 * through locktimer_add would never fire here, so it fails the test. */
static int
fakeclock_mark(const struct event_base *base, const struct event *ev, void *arg)
{
	struct fakeclock_timer *t = fakeclock_find(ev);

	(void)base;
	(void)arg;
	if (t != NULL)
		t->seen = true;
	else
		ck_assert_msg(event_get_fd(ev) != -1 ||
			(event_get_events(ev) & EV_SIGNAL) != 0,
		    "a timer armed without locktimer_add");
	return 0;
}

/* Forget the timers deleted or freed since they were armed (an event
 * freed is no longer in its base, so its pointer is never read). */
static void
fakeclock_prune(void)
{
	size_t kept = 0;

	for (size_t i = 0; i < fc.n; i++)
		fc.timers[i].seen = false;
	event_base_foreach_event(fc.base, fakeclock_mark, NULL);
	for (size_t i = 0; i < fc.n; i++)
		if (fc.timers[i].seen)
			fc.timers[kept++] = fc.timers[i];
	fc.n = kept;
}

/* The earliest live timer due by until_ms, or NULL. */
static struct fakeclock_timer *
fakeclock_first(uint64_t until_ms)
{
	struct fakeclock_timer *first = NULL;

	fakeclock_prune();
	for (size_t i = 0; i < fc.n; i++) {
		struct fakeclock_timer *t = &fc.timers[i];

		if (t->due_ms > until_ms)
			continue;
		if (first == NULL || t->due_ms < first->due_ms ||
		    (t->due_ms == first->due_ms && t->seq < first->seq))
			first = t;
	}
	return first;
}

/* t is due: the clock moves to it and it fires; a persistent timer is
 * due again a period later, as libevent would have it. */
static void
fakeclock_fire(struct fakeclock_timer *t)
{
	struct event *ev = t->ev;

	if (t->due_ms > fc.now_ms) {
		fc.now_ms = t->due_ms;
		fc.tick = 0;
	}
	if (event_get_events(ev) & EV_PERSIST) {
		t->due_ms += t->period_ms > 0 ? t->period_ms : 1;
		t->seq = ++fc.seq;
	} else
		*t = fc.timers[--fc.n]; /* libevent deletes it as it fires */
	event_active(ev, EV_TIMEOUT, 1);
	event_base_loop(fc.base, EVLOOP_NONBLOCK);
}

void
fakeclock_advance(uint64_t ms)
{
	uint64_t until = fc.now_ms + ms;
	struct fakeclock_timer *t;

	while ((t = fakeclock_first(until)) != NULL)
		fakeclock_fire(t);
	if (until > fc.now_ms) {
		fc.now_ms = until;
		fc.tick = 0;
	}
	event_base_loop(fc.base, EVLOOP_NONBLOCK);
}

void
fakeclock_skip(uint64_t ms)
{
	fc.now_ms += ms;
	fc.tick = 0;
}

void
fakeclock_reset(struct event_base *base)
{
	free(fc.timers);
	fc.timers = NULL;
	fc.n = fc.cap = 0;
	fc.seq = 0;
	fc.base = base;
	fc.now_ms = FAKECLOCK_START_MS;
	fc.tick = 0;
}

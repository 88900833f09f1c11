/*
 * lock_trust: trust in Redis itself (docs/protocol.md §8, When Redis
 * forgets). Every redis.trust_ms / 4 the broker asks which incarnation
 * of the lock data Redis serves. An answer naming the one known vouches
 * for every hold until trust_ms after it was asked; with none for
 * trust_ms every hold is lost (a failover or a FLUSHALL may have come
 * meanwhile, and the grace period after it ends trust_ms after it is
 * noticed). An answer naming a new incarnation makes every hold stale:
 * each is asked for again and put back if Redis forgot it (check.lua, in
 * the grace period); those not back when the old incarnation's last
 * answer stops vouching are lost.
 *
 * The incarnation vouches for what Redis still has, not that it has each
 * hold: a key deleted or evicted is gone in the same incarnation. So each
 * hold is also confirmed in Redis at least once every trust_ms (a
 * renewal counts; the others are checked with the beat, a loop turn's
 * checks in one batch). That also catches Redis's wall clock stepped
 * forward, which ends keys early: each beat's answer carries Redis's
 * time, and when it ran ahead of ours by more than the drift allows and
 * half of redis.clock_step_ms (the margin every lease has in Redis),
 * every hold is confirmed again at once.
 *
 * Built on lock_name, lock_req and lock_check (which checks and loses the holds);
 * Redis forgetting its queues is told through the callback given to
 * locktrust_init.
 */
#include <sys/queue.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>

#include "chaos.h"
#include "config.h"
#include "lockdb.h"
#include "lock_check.h"
#include "lock_name.h"
#include "lock_req.h"
#include "lock_scope.h"
#include "lock_timer.h"
#include "lock_trust.h"
#include "log.h"
#include "stats.h"
#include "util.h"

static struct {
	const struct config *cf;
	locktrust_forgot_fn *forgot;
	struct event *beat_ev;	/* every trust_ms / 4: ask the incarnations */
	struct event *trust_ev; /* at the earliest scope's trust_ms after its
				   last vouching answer */
	uint64_t trust_due_ms;
	unsigned beats; /* beats so far: a scope's busy names the last */
} trust_;

/* The trust timer at when (the earliest due stays). */
static void
locktrust_due(uint64_t when, uint64_t now)
{
	if (evtimer_pending(trust_.trust_ev, NULL) &&
	    trust_.trust_due_ms <= when)
		return;
	trust_.trust_due_ms = when;
	locktimer_add(trust_.trust_ev, when > now ? when - now : 0);
}

/* What the trust timer found: how many holds lost, and the next end. */
struct locktrust_walk {
	uint64_t now;
	unsigned lost;
	uint64_t next;
};

/* ln's holds are lost if their scope's trust ran out (it was not heard
 * for trust_ms); else its end is a candidate for the next firing. */
static void
locktrust_lose_name(struct lock_name *ln, void *arg)
{
	struct locktrust_walk *w = arg;
	struct lock_scope *sc;
	uint64_t end;

	if (LIST_EMPTY(&ln->holds))
		return;
	sc = lockscope_get(lockscope_of(ln));
	end = sc->vouched_ms + (uint64_t)trust_.cf->redis.trust_ms;
	if (end > w->now) {
		if (end < w->next)
			w->next = end;
		return;
	}
	w->lost++;
	lockcheck_lose_holds(ln);
}

static void
locktrust_lost_cb(evutil_socket_t fd, short what, void *arg)
{
	struct locktrust_walk w = { mono_ms(), 0, UINT64_MAX };

	lockname_foreach(locktrust_lose_name, &w);
	if (w.lost > 0)
		log_warnx(
		    "redis: no word of the incarnation of %u name%s held here for %d ms: their holds are lost (redis.trust_ms)",
		    w.lost, w.lost == 1 ? "" : "s", trust_.cf->redis.trust_ms);
	if (w.next != UINT64_MAX)
		locktrust_due(w.next, w.now);
}

/* ln's scope is busy in this beat if ln has holds or waiters here. */
static void
locktrust_busy_name(struct lock_name *ln, void *arg)
{
	if (!LIST_EMPTY(&ln->holds) || !TAILQ_EMPTY(&ln->waiters))
		lockscope_get(lockscope_of(ln))->busy = trust_.beats;
}

/* A scope busy in this beat is asked which incarnation it serves. */
static void
locktrust_ask_scope(struct lock_scope *sc, void *arg)
{
	unsigned *asked = arg;

	if (sc->busy != trust_.beats)
		return;
	lockdb_incarnation_of(sc->scope);
	(*asked)++;
}

/*
 * The beat. A broker that holds nothing and has nobody waiting has nothing
 * to vouch for, and asks nothing: a fleet of idle sidecars costs Redis
 * only their connections (TCP keepalive finds a dead one), and its next
 * request is sent after a beat (lockdb_quiet). Not while it refuses grants
 * for Redis's maxmemory-policy, nor before Redis first answered which
 * incarnation it serves: it must see either change, and no request of its
 * own will show it. Each scope (lock_scope.h) with holds or waiters here
 * is asked; on one Redis, scope 0 is asked whenever the broker is not
 * quiet.
 */
static void
locktrust_beat_cb(evutil_socket_t fd, short what, void *arg)
{
	/* One that refuses grants for Redis's policy keeps reading it; one
	 * that has not heard the incarnation since it connected (its first
	 * ask refused, say NOREPLICAS) keeps asking. */
	bool quiet = stats[STAT_locks_held] == 0 && stats[STAT_waiters] == 0 &&
	    lockdb_refusal() == NULL && lockdb_up();
	unsigned asked = 0;

	lockdb_quiet(quiet);
	if (quiet)
		return;
	trust_.beats++;
	lockname_foreach(locktrust_busy_name, NULL);
	lockscope_foreach(locktrust_ask_scope, &asked);
	if (asked == 0 && !lockdb_scoped())
		lockdb_incarnation_of(0);
	if (stats[STAT_locks_held] > 0 && lockdb_up() &&
	    chaos_fault != CHAOS_NO_CONFIRM)
		lockcheck_confirm_scope(-1, false);
}

/*
 * Redis's time, read at a beat sent at inc->sent_ms and answered now,
 * against our monotonic clock: Redis's offset from ours was between lo
 * and hi then. From the last answer's most to this one's least it may
 * grow by the drift alone; what it grew beyond is a forward step of
 * Redis's wall clock (never less than the step was). Steps add up: past
 * half of redis.clock_step_ms, the margin each lease has in Redis, every
 * hold in the scope is confirmed again, and trusts no more than Redis
 * says is left. Each scope keeps its own: a cluster's nodes have clocks
 * of their own.
 */
static void
locktrust_clock(
    struct lock_scope *sc, const struct lockdb_inc *inc, uint64_t now)
{
	int64_t lo = (int64_t)inc->redis_ms - (int64_t)now;
	int64_t hi = (int64_t)inc->redis_ms - (int64_t)inc->sent_ms;

	if (inc->redis_ms == 0)
		return; /* not said */
	if (sc->clock_known) {
		double allow = trust_.cf->locks.clock_drift *
		    (double)(now - sc->clock_sent_ms);
		int64_t ahead = lo - sc->clock_hi - (int64_t)allow - 1;

		if (ahead > 0)
			sc->clock_ahead_ms += (uint64_t)ahead;
	}
	sc->clock_known = true;
	sc->clock_hi = hi;
	sc->clock_sent_ms = inc->sent_ms;
	if (sc->clock_ahead_ms * 2 <= (uint64_t)trust_.cf->redis.clock_step_ms)
		return;
	if (stats[STAT_locks_held] > 0)
		log_warnx(
		    "redis: its clock ran %" PRIu64
		    " ms ahead of this broker's: every hold here in its names is confirmed again (redis.clock_step_ms)",
		    sc->clock_ahead_ms);
	sc->clock_ahead_ms = 0;
	STAT_INC(redis_clock_steps_total);
	if (chaos_fault != CHAOS_NO_CONFIRM)
		lockcheck_confirm_scope(sc->scope, true);
}

static void
locktrust_incarnation_cb(const struct lockdb_inc *inc)
{
	uint64_t trust = (uint64_t)trust_.cf->redis.trust_ms, now = mono_ms();
	struct lock_scope *sc = lockscope_get(inc->scope);
	/* CHAOS_ONE_SCOPE: the holds put back are always scope 0's. */
	int stale = chaos_fault == CHAOS_ONE_SCOPE ? 0 : inc->scope;

	if (inc->changed && !inc->first && chaos_fault != CHAOS_NO_GRACE) {
		lockcheck_new_incarnation(stale, now,
		    sc->vouched_ms + trust > now ? sc->vouched_ms + trust - now
						 : 0);
	}
	if (inc->changed && !inc->first)
		trust_.forgot(stale);
	locktrust_clock(sc, inc, now);
	if (inc->sent_ms > sc->vouched_ms)
		sc->vouched_ms = inc->sent_ms;
	locktrust_due(sc->vouched_ms + trust, now);
}

void
locktrust_init(struct event_base *base, const struct config *cf,
    locktrust_forgot_fn *forgot)
{
	trust_.cf = cf;
	trust_.forgot = forgot;
	trust_.beats = 0;
	trust_.trust_ev = locktimer_new(base, 0, locktrust_lost_cb, NULL);
	trust_.beat_ev =
	    locktimer_new(base, EV_PERSIST, locktrust_beat_cb, NULL);
	locktimer_add(trust_.beat_ev, (uint64_t)cf->redis.trust_ms / 4);
	lockdb_on_incarnation(locktrust_incarnation_cb);
}

void
locktrust_shutdown(void)
{
	if (trust_.beat_ev == NULL)
		return;
	event_free(trust_.beat_ev);
	event_free(trust_.trust_ev);
	trust_.beat_ev = trust_.trust_ev = NULL;
}

/*
 * stats: every counter, gauge and histogram defined once, so INFO and the
 * Prometheus page cannot drift from what the code counts.
 */
#ifndef LB_STATS_H
#define LB_STATS_H

#include <stdint.h>

/* X(name, kind, help): kind is COUNTER (only grows) or GAUGE. */
#define STATS_TABLE(X)                                                          \
	X(connections_total, COUNTER, "client connections accepted")            \
	X(connections_rejected_total, COUNTER,                                  \
	    "connections refused by max_clients")                               \
	X(tls_handshakes_total, COUNTER, "TLS handshakes completed")            \
	X(tls_failures_total, COUNTER,                                          \
	    "TLS handshakes failed (a certificate refused, not TLS, an error)") \
	X(clients, GAUGE, "clients connected now")                              \
	X(commands_total, COUNTER, "requests processed")                        \
	X(errors_total, COUNTER, "requests answered with ERR")                  \
	X(grants_total, COUNTER, "ACQUIREs granted")                            \
	X(late_grants_total, COUNTER,                                           \
	    "grants that came after their lease ended, given back")             \
	X(timeouts_total, COUNTER, "ACQUIREs answered TIMEOUT")                 \
	X(cancels_total, COUNTER, "waits ended by CANCEL")                      \
	X(fills_done_total, COUNTER, "FILL waiters answered DONE")              \
	X(revokes_total, COUNTER, "holders removed by REVOKE here")             \
	X(releases_total, COUNTER, "locks released in Redis")                   \
	X(extends_total, COUNTER, "leases extended")                            \
	X(notheld_total, COUNTER, "RELEASE/EXTEND answered NOTHELD")            \
	X(locks_held, GAUGE, "locks held by this broker's clients")             \
	X(waiters, GAUGE, "ACQUIREs waiting in this broker")                    \
	X(tickets_total, COUNTER,                                               \
	    "waiters given a place in their name's queue across brokers")       \
	X(handovers_total, COUNTER,                                             \
	    "releases here that handed the name to a queued waiter")            \
	X(handovers_in_total, COUNTER,                                          \
	    "hand-overs to a waiter here (from any broker)")                    \
	X(renewals_total, COUNTER, "session leases renewed")                    \
	X(renewal_failures_total, COUNTER, "renewals Redis did not answer")     \
	X(confirms_total, COUNTER,                                              \
	    "holds asked of Redis again (at least every redis.trust_ms)")       \
	X(lost_expired_total, COUNTER, "EVENT LOST expired")                    \
	X(lost_stolen_total, COUNTER, "EVENT LOST stolen")                      \
	X(lost_unavailable_total, COUNTER, "EVENT LOST unavailable")            \
	X(lost_maxhold_total, COUNTER, "EVENT LOST maxhold")                    \
	X(lost_revoked_total, COUNTER, "EVENT LOST revoked")                    \
	X(redis_up, GAUGE,                                                      \
	    "1 while the Redis command connection is up (and Redis's "          \
	    "incarnation of the lock data known)")                              \
	X(redis_refusing, GAUGE,                                                \
	    "1 while every grant is refused for a Redis setting (a "            \
	    "maxmemory-policy other than noeviction)")                          \
	X(redis_requests_total, COUNTER, "requests sent to Redis")              \
	X(redis_batched_total, COUNTER,                                         \
	    "script calls sent in one request with others (a batch)")           \
	X(redis_timeouts_total, COUNTER, "Redis requests that timed out")       \
	X(redis_noscript_total, COUNTER, "NOSCRIPT replies answered by EVAL")   \
	X(redis_connects_total, COUNTER, "successful Redis connections")        \
	X(redis_doubts_total, COUNTER,                                          \
	    "times a cluster master answered after a silence longer than its "  \
	    "cluster-node-timeout (its replies held until another vouched)")    \
	X(redis_deposed_total, COUNTER,                                         \
	    "replies given up as unknown: their master had been replaced "      \
	    "while it was silent")                                              \
	X(redis_evicted_keys, GAUGE,                                            \
	    "Redis's evicted_keys (INFO stats) at the last beat: any rise is "  \
	    "lock data lost")                                                   \
	X(redis_clock_steps_total, COUNTER,                                     \
	    "times Redis's clock ran ahead by half of redis.clock_step_ms "     \
	    "or more (every hold confirmed again)")

enum stats_id {
#define STATS_ENUM(name, kind, help) STAT_##name,
	STATS_TABLE(STATS_ENUM)
#undef STATS_ENUM
	    STAT__COUNT
};

extern int64_t stats[STAT__COUNT];

/* X(name, help): latencies, observed in microseconds, shown in seconds. */
#define STATS_HISTOGRAMS(X)                                                    \
	X(wait_seconds, "time from ACQUIRE to its answer")                     \
	X(hold_seconds, "time a lock was held by a client of this broker")     \
	X(redis_rtt_seconds, "Redis request round trips")

enum stats_hist_id {
#define STATS_HENUM(name, help) HIST_##name,
	STATS_HISTOGRAMS(STATS_HENUM)
#undef STATS_HENUM
	    HIST__COUNT
};

/* Upper bounds in microseconds; the last bucket is +Inf. */
#define STATS_NBUCKETS 16
extern const uint64_t stats_bucket_us[STATS_NBUCKETS];

struct stats_hist {
	uint64_t buckets[STATS_NBUCKETS + 1]; /* not cumulative; last: +Inf */
	uint64_t count;
	uint64_t sum_us;
};

extern struct stats_hist stats_hists[HIST__COUNT];

void stats_observe(enum stats_hist_id id, uint64_t us);
const char *stats_hist_name(enum stats_hist_id id);
const char *stats_hist_help(enum stats_hist_id id);
/* COUNTER or GAUGE, as the table says. */
int stats_is_counter(enum stats_id id);

#define STAT_INC(id) (stats[STAT_##id]++)
#define STAT_DEC(id) (stats[STAT_##id]--)
#define STAT_SET(id, v) (stats[STAT_##id] = (v))

const char *stats_name(enum stats_id id);
const char *stats_help(enum stats_id id);

#endif

/*
 * stats: every counter and gauge defined once, so INFO (and later the
 * Prometheus page) cannot drift from what the code counts.
 */
#ifndef LB_STATS_H
#define LB_STATS_H

#include <stdint.h>

/* X(name, kind, help): kind is COUNTER (only grows) or GAUGE. */
#define STATS_TABLE(X)                                                         \
	X(connections_total, COUNTER, "client connections accepted")           \
	X(connections_rejected, COUNTER, "connections refused by max_clients") \
	X(clients, GAUGE, "clients connected now")                             \
	X(commands_total, COUNTER, "requests processed")                       \
	X(errors_total, COUNTER, "requests answered with ERR")                 \
	X(grants_total, COUNTER, "ACQUIREs granted")                           \
	X(timeouts_total, COUNTER, "ACQUIREs answered TIMEOUT")                \
	X(releases_total, COUNTER, "locks released in Redis")                  \
	X(extends_total, COUNTER, "leases extended")                           \
	X(notheld_total, COUNTER, "RELEASE/EXTEND answered NOTHELD")           \
	X(locks_held, GAUGE, "locks held by this broker's clients")            \
	X(waiters, GAUGE, "ACQUIREs waiting in this broker")                   \
	X(renewals_total, COUNTER, "session leases renewed")                   \
	X(renewal_failures_total, COUNTER, "renewals Redis did not answer")    \
	X(lost_expired_total, COUNTER, "EVENT LOST expired")                   \
	X(lost_stolen_total, COUNTER, "EVENT LOST stolen")                     \
	X(lost_unavailable_total, COUNTER, "EVENT LOST unavailable")           \
	X(lost_maxhold_total, COUNTER, "EVENT LOST maxhold")                   \
	X(lost_revoked_total, COUNTER, "EVENT LOST revoked")                   \
	X(redis_up, GAUGE, "1 while the Redis command connection is up")       \
	X(redis_requests_total, COUNTER, "requests sent to Redis")             \
	X(redis_timeouts_total, COUNTER, "Redis requests that timed out")      \
	X(redis_noscript_total, COUNTER, "NOSCRIPT replies answered by EVAL")  \
	X(redis_connects_total, COUNTER, "successful Redis connections")

enum stats_id {
#define STATS_ENUM(name, kind, help) STAT_##name,
	STATS_TABLE(STATS_ENUM)
#undef STATS_ENUM
	    STAT__COUNT
};

extern int64_t stats[STAT__COUNT];

#define STAT_INC(id) (stats[STAT_##id]++)
#define STAT_DEC(id) (stats[STAT_##id]--)
#define STAT_SET(id, v) (stats[STAT_##id] = (v))

const char *stats_name(enum stats_id id);
const char *stats_help(enum stats_id id);

#endif

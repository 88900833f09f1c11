/*
 * redisc: the daemon's Redis connection — async hiredis on the libevent loop,
 * reconnect with back-off, per-request timeouts of its own (hiredis 0.14 has
 * none), and Lua scripts run by EVALSHA with EVAL on NOSCRIPT. It knows
 * nothing of clients or locks: it is a small library the lock engine uses.
 */
#ifndef LB_REDISC_H
#define LB_REDISC_H

#include <stdbool.h>
#include <stddef.h>

#include <hiredis/hiredis.h>

struct event_base;
struct config_redis;

#define REDISC_NODES_MAX 32 /* a cluster's masters (the one Redis: 1) */

/*
 * Called exactly once per request, always from the event loop and never from
 * inside redisc_eval. reply NULL means Redis could not answer in time: not
 * connected, connection lost, or command_timeout_ms passed.
 */
typedef void redisc_cb(const redisReply *reply, void *arg);

struct redisc_script {
	const char *name; /* for logs */
	const char *body;
	char sha[41]; /* learnt from SCRIPT LOAD; "" until then */
	/*
	 * Calls of this script made in one turn of the loop go to Redis as
	 * one call of batch (this script's flags), which runs each call as
	 * its script number batch_op with its own keys and arguments
	 * (src/lua/batch.lua); each call still gets its own reply. NULL:
	 * each call on its own, as every call on a cluster (a batch's keys
	 * would span slots).
	 */
	struct redisc_script *batch;
	int batch_op;
};

/*
 * Called for each message on a subscribed channel. msg NULL means the
 * subscription was (re)made: messages sent meanwhile were missed.
 */
typedef void redisc_msg_cb(
    const char *channel, const char *msg, size_t len, void *arg);

void redisc_init(struct event_base *base, const struct config_redis *cf);
/* Called each time a node's command connection is (re)established: the
 * one Redis is node 0, a cluster has one node per master. */
void redisc_on_connect(void (*fn)(int node, void *), void *arg);
/* Called before a request that MOVED redirects is sent again, to the
 * node to: its arguments (argv[2..argc), not the verb nor the script)
 * may be changed in place, none made longer. */
typedef void redisc_moved_fn(
    char **argv, size_t *lens, int argc, int from, int to);
void redisc_on_moved(redisc_moved_fn *fn);
/* One or two channels (channel2 may be NULL) on a second connection; set
 * before redisc_connect. */
void redisc_subscribe(
    const char *channel, const char *channel2, redisc_msg_cb *cb, void *arg);
/* Register a script; it is loaded at every (re)connect. */
void redisc_script_add(struct redisc_script *script);
void redisc_connect(void);
/* A node said it is a cluster's (INFO's cluster_enabled:1): requests go
 * to the masters that serve their slots from now on. */
void redisc_cluster_found(int node);
/* Whether the Redis is a cluster (configured, or found). */
bool redisc_cluster(void);
/* How many masters serve slots in the cluster's map. */
int redisc_masters(void);
/* The node that serves slot now (0 on one Redis; -1: none known), how
 * many nodes there are, and whether one is in the cluster's map (node 0
 * of one Redis always is). */
int redisc_node_of(int slot);
int redisc_nodes(void);
bool redisc_node_used(int node);
bool redisc_node_up(int node);
/* Its "host:port", for logs. */
const char *redisc_node_name(int node, char *buf, size_t len);
/* A cluster's node heard from again after a silence longer than ms (its
 * cluster-node-timeout) may have been replaced meanwhile: its replies
 * are held until another node's map says (redisc_doubt.c). */
void redisc_node_quiet(int node, uint64_t ms);
/* A node in use, for INFO and /metrics: false if it is not. */
struct redisc_node_stats {
	char addr[280];
	bool up;
	uint64_t requests;  /* sent to it */
	uint64_t timeouts;  /* not answered in time */
	uint64_t redirects; /* answered MOVED, ASK, TRYAGAIN or CLUSTERDOWN */
};
bool redisc_node_stats(int node, struct redisc_node_stats *st);
void redisc_stop(void);
bool redisc_up(void);
/* With redis.sentinels, the config-epoch of the master's address, as the
 * Sentinel that gave it said (every failover raises it); "" without. */
const char *redisc_master_epoch(void);
/* Whether the subscriber connection is up (or not used). */
bool redisc_sub_up(void);
/* No request is waiting for an answer. */
bool redisc_idle(void);

/*
 * Run script with nkeys keys followed by the other arguments (args[0..n)).
 * The arguments are copied. A script with a batch is sent at the end of
 * the turn, with the other calls of that script made meanwhile (calls of
 * two scripts on one first key, and any other request, send the calls
 * made before them first), so Redis runs the calls on one key, and every
 * other request, in the order they were made.
 */
/*
 * In a callback answered NULL: true if the request never reached Redis
 * (no connection to send it on; or only redirected: MOVED, ASK and
 * TRYAGAIN run nothing), false if it may have run unanswered (timed out,
 * or its connection was lost with it in flight).
 */
bool redisc_unsent(void);
/* While a request is answered NULL because the cluster master that ran it
 * answered after a silence and the map no longer names it for the
 * request's slot (replaced, failing, or the slot moved: redisc_doubt.c):
 * true. */
bool redisc_deposed(void);
void redisc_eval(struct redisc_script *script, int nkeys, int n,
    const char *const *args, const size_t *lens, redisc_cb *cb, void *arg);
/* A script that declares no keys, to the node that serves a slot (on
 * one Redis, to it), alone. */
void redisc_eval_slot(int slot, struct redisc_script *script, int n,
    const char *const *args, const size_t *lens, redisc_cb *cb, void *arg);

/* A plain command (args[0] is the verb) to node 0; arguments are
 * copied. */
void redisc_command(int n, const char *const *args, const size_t *lens,
    redisc_cb *cb, void *arg);
/* The same, to a node (as redisc_on_connect names them). */
void redisc_command_on(int node, int n, const char *const *args,
    const size_t *lens, redisc_cb *cb, void *arg);
/* The same, to the node that serves a slot (slot.h): WAIT after a write
 * goes where the write went. */
void redisc_command_slot(int slot, int n, const char *const *args,
    const size_t *lens, redisc_cb *cb, void *arg);

#endif

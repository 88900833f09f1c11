/*
 * redisc_int: what the Redis connection's files share and nothing outside
 * redisc*.c includes: a request, a connection, the module's one state, and
 * the functions one file calls in another. redisc.c owns requests (their
 * allocation, sending, timeouts and failing) and the module's life;
 * redisc_batch.c the calls of batched scripts held for the end of a turn;
 * redisc_conn.c each connection's life; redisc_sentinel.c the Sentinels;
 * redisc_cluster.c a cluster's nodes and where each request goes.
 */
#ifndef LB_REDISC_INT_H
#define LB_REDISC_INT_H

#include <sys/queue.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "log.h"
#include "redisc.h"

#define REDISC_MAX_SCRIPTS 16
#define REDISC_BATCH_MAX 64 /* calls in one batch */
/* A batch's key count and arguments: each call's keys and arguments (at
 * most REDISC_MAX_ARGS - 1) with its script number, key count and
 * argument count, and n. */
#define REDISC_BATCH_ARGS (REDISC_BATCH_MAX * (REDISC_MAX_ARGS + 2) + 2)
/* A script's keys and arguments, and its key count. */
#define REDISC_MAX_ARGS 32
#define REDISC_HUNG_TIMEOUTS 3 /* command timeouts without any reply */
#define REDISC_REDIRECTS 5     /* MOVED or ASK followed for one request */
#define REDISC_TRYAGAIN_MS 20  /* a TRYAGAIN is sent again this much later */

struct redisc_req {
	TAILQ_ENTRY(redisc_req) entry; /* in rc.inflight until answered */
	redisc_cb *cb;
	void *arg;
	uint64_t deadline_ms;
	uint64_t sent_us; /* for the round-trip histogram */
	bool answered;	  /* cb has run; a late reply is only freed */
	bool retried;	  /* NOSCRIPT was answered by EVAL once already */
	struct redisc_script *script;
	int slot;      /* its first key's, or -1: sent to node */
	int node;      /* where it was (or is to be) sent */
	int redirects; /* MOVED or ASK followed (at most REDISC_REDIRECTS) */
	bool asking;   /* sent after ASKING: a MOVED or ASK now is final */
	struct redisc_req *retry_next; /* in rc.retry: TRYAGAIN, sent again */
	int nkeys;		       /* a script's: argv[3..3+nkeys) */
	int argc;     /* argv[0], argv[1] are the verb and sha/body */
	char **argv;  /* into this same allocation, after the struct */
	size_t *lens; /* likewise */
	size_t size;  /* of the allocation, a multiple of REDISC_REQ_ROUND */
	struct redisc_req *pool_next;
	struct redisc_req *fail_next; /* in rc.failed */
};

struct redisc_tls_hello;

/* One hiredis connection with its own reconnect and connect timers. */
struct redisc_conn {
	const char *what; /* "command", "subscriber" */
	int node;	  /* a command connection's node in rc.node, else -1 */
	uint64_t last_reply_ms; /* a command connection's, or its connect */
	redisAsyncContext *ac;
	bool connected; /* connect callback said OK */
	int setup_left; /* AUTH and SELECT answers still to come */
	struct redisc_tls_hello *tls; /* redisc_tls.c's: its first reply */
	bool up;	   /* connected, and AUTH and SELECT said OK */
	bool parked;	   /* closed on purpose: not reconnected */
	unsigned attempts; /* failed connects in a row */
	/* redisc_conn_failed: failures since it was last up, since when,
	 * and the last one logged, when. */
	unsigned fails;
	uint64_t down_ms;
	char said[320];
	uint64_t said_ms;
	struct event *reconnect_ev;
	struct event *connect_timeout_ev;
	void (*setup)(redisAsyncContext *); /* queued at each connect */
	/* Where to connect: host and port, or -1 when it is not known yet. */
	int (*target)(struct redisc_conn *, char *host, size_t len, int *port);
};

/*
 * A Redis that serves commands: the one master (found directly or
 * through Sentinel), or each master of a cluster (redisc_cluster.c),
 * with the command connection to it.
 */
struct redisc_node {
	struct redisc_conn conn;
	char host[256]; /* a cluster node's; the one master's is the target's */
	int port;
	bool in_map; /* a cluster's: serves slots in the last map */
	/* For INFO and /metrics (redisc_node_stats). */
	uint64_t requests, timeouts, redirects;
	/* A cluster's (redisc_doubt.c): its last reply to a request, how long
	 * a silence puts it in doubt (0: never), since when it is (0: not),
	 * and the replies held meanwhile. */
	uint64_t heard_ms, quiet_ms, doubt_ms;
	struct redisc_held *held, **held_tail;
	/* When a map asked of it last went unanswered: a node stopped with
	 * its socket open is not asked again soon (redisc_map_pick). */
	uint64_t map_failed_ms;
};

/* How often an outage's same failure is logged again. */
#define REDISC_STILL_MS 60000

/* The module's state: one per process, shared by redisc*.c. */
struct redisc_state {
	struct event_base *base;
	const struct config_redis *cf;
	struct redisc_node node[REDISC_NODES_MAX]; /* node[0]: the master */
	int nnodes;
	bool cluster;	     /* a Redis Cluster: rc.slot routes requests */
	int16_t *slot;	     /* a cluster's: each slot's node, or -1 */
	bool mapping;	     /* a CLUSTER SHARDS (or SLOTS) is out */
	bool mapped;	     /* a map was read */
	bool shards_unknown; /* a Redis before 7.0: CLUSTER SLOTS */
	bool base_ready; /* redisc_connect ran: a new node connects at once */
	int served;	 /* slots served in the last map */
	int map_node;	 /* the node the map was last asked of */
	uint64_t mapped_ms;	  /* when the last one was sent */
	unsigned map_seq;	  /* which one is awaited (others are stale) */
	struct event *map_ev;	  /* ask for the map again (redisc_cluster.c) */
	struct redisc_req *retry; /* answered TRYAGAIN: sent again soon */
	struct event *retry_ev;
	struct redisc_conn sub;	 /* SUBSCRIBE to channel */
	struct redisc_conn sent; /* a Sentinel: the master and its moves */
	int sentinel;		 /* which of cf->sentinels is asked */
	char master_host[256];	 /* from Sentinel; "" until known */
	int master_port;
	char master_epoch[24]; /* its config-epoch; "" until known */
	bool switched;	       /* +switch-master: asking again */
	bool stopping;
	char channel[2][256]; /* subscribed; the second may be "" */
	redisc_msg_cb *msg_cb;
	void *msg_arg;
	void (*up_cb)(int, void *);
	void *up_arg;
	redisc_moved_fn *moved_fn;
	struct event *timeout_ev;
	/* Requests that could not be sent, answered on the next turn; unsent
	 * while one is answered (redisc_unsent). */
	struct redisc_req *failed, **failed_tail;
	bool unsent;
	/* While one held is answered as unknown: its master was replaced
	 * (redisc_deposed). */
	bool deposed;
	struct event *failed_ev;
	TAILQ_HEAD(, redisc_req) inflight;
	struct redisc_req *pool; /* freed requests to reuse */
	int npool;
	struct redisc_script *scripts[REDISC_MAX_SCRIPTS];
	int nscripts;
	/* Calls of batched scripts this turn, in flight but not sent. */
	struct redisc_req *batch[REDISC_BATCH_MAX];
	int nbatch;
	struct event *batch_ev; /* made active: send them */
};
extern struct redisc_state rc;

/* redisc.c: a request's memory back to the pool (or freed). */
void redisc_req_free(struct redisc_req *req);
/* redisc.c: a request with argv[0..1] left for the verb and the script,
 * the arguments copied from argv[2] on. */
struct redisc_req *redisc_req_new(int n, const char *const *args,
    const size_t *lens, redisc_cb *cb, void *arg);
/* redisc.c: in flight from now, with its deadline; failed from the loop
 * if unsent. */
void redisc_submit(struct redisc_req *req);
/* redisc.c: an in-flight request sent, or failed from the loop. */
void redisc_send_tracked(struct redisc_req *req);

/* redisc_batch.c: send this turn's held calls of batched scripts. */
void redisc_flush(void);
/* redisc_batch.c: rc.batch_ev's callback (made active by redisc_eval). */
void redisc_batch_ev_cb(evutil_socket_t fd, short what, void *arg);

/* redisc_conn.c: each connection's timers and what it sends at connect. */
void redisc_conn_init(struct redisc_conn *conn, const char *what,
    void (*setup)(redisAsyncContext *),
    int (*target)(struct redisc_conn *, char *, size_t, int *));
/* redisc_conn.c: the connection's context and timers freed (at stop). */
void redisc_conn_close(struct redisc_conn *conn);
/* redisc_conn.c: connect now (the target may not be known yet). */
void redisc_conn_open(struct redisc_conn *conn);
/* redisc_conn.c: close now, without waiting for the replies still owed;
 * the disconnect callback reconnects. */
void redisc_drop(struct redisc_conn *conn);
/* redisc_conn.c: close now and do not reconnect (a cluster node that
 * serves no slots); redisc_conn_open undoes it. */
void redisc_park(struct redisc_conn *conn);
/* redisc_conn.c: a connect that failed, logged once per outage (and
 * when the reason changes). */
void redisc_conn_failed(struct redisc_conn *conn, const char *fmt, ...)
    LB_PRINTF(2, 3);
/* redisc_conn.c: every setup answer came: in use from now on. */
void redisc_conn_ready(struct redisc_conn *conn);
/* redisc_tls.c: with redis.tls, TLS on a TCP connection just opened (a
 * failure to start it is the context's error) and a PING queued whose
 * answer says the handshake is over (conn->setup_left counts it). */
void redisc_tls_start(struct redisc_conn *conn, const char *host, int port);
/* redisc_tls.c: why a connect failed: ac->errstr, or what TLS knows
 * better (a connect found reset after Redis refused our certificate). */
const char *redisc_tls_errstr(
    struct redisc_conn *conn, const redisAsyncContext *ac);
/* redisc_conn.c: AUTH and SELECT, queued at each connect. */
void redisc_cmd_setup(redisAsyncContext *ac);
/* redisc_conn.c: AUTH and SUBSCRIBE, queued at each connect. */
void redisc_sub_setup(redisAsyncContext *ac);
/* redisc_cluster.c: where the subscriber goes: the one master, or a node
 * of the cluster's map (each cluster node has every message). */
int redisc_target_sub(
    struct redisc_conn *conn, char *host, size_t len, int *port);

/* redisc_sentinel.c: where the master is (-1: not known yet). */
int redisc_target_master(
    struct redisc_conn *conn, char *host, size_t len, int *port);
/* redisc_sentinel.c: the Sentinel asked now. */
int redisc_target_sentinel(
    struct redisc_conn *conn, char *host, size_t len, int *port);

/* redisc.c: send a request again where its slot is now (a TRYAGAIN's
 * retry, a redirect); failed from the loop if it cannot be. */
void redisc_resend(struct redisc_req *req);

/* redisc.c: a request's reply used (a redirect followed, NOSCRIPT sent
 * again, or answered and freed); NULL: unknown. */
void redisc_reply_use(struct redisc_req *req, const redisReply *reply);

/* redisc_doubt.c: a reply to req came from node; true if it is held
 * because the node is in doubt (it may have been replaced). */
bool redisc_doubt_heard(
    int node, struct redisc_req *req, const redisReply *r, uint64_t now_ms);
/* redisc_doubt.c: a map asked of node asked at asked_ms is in use: the
 * nodes in doubt since before then, other than asked, are settled. */
void redisc_doubt_mapped(int asked, uint64_t asked_ms);
/* redisc_doubt.c: the node to ask for a map vouching for node (-1:
 * none up), whether a node is in doubt, a node's list set up, and what
 * is held answered as unknown at stop. */
int redisc_doubt_asker(int node);
bool redisc_doubted(int node);
void redisc_doubt_init(struct redisc_node *n);
void redisc_doubt_stop(void);
/* redisc_cluster.c: a map asked of node and not answered yet will not be
 * used; the map asked of a node other than node. */
void redisc_map_forget(int node);
void redisc_map_ask_other(int node);

/* A node whose map went unanswered is asked again only this much later,
 * while another is up. */
#define REDISC_MAP_AVOID_MS 10000
/* redisc_doubt.c: the node to ask for the map: one that is up, other
 * than avoid, whose last map answered, heard from most recently (not in
 * doubt, and in the map, if there is such a one); -1: none is up. */
int redisc_map_pick(int avoid);
/* redisc_cluster.c: a node the map no longer names has its connection
 * closed once nothing is in flight or held there. */
void redisc_node_park(int node);

/* redisc_cluster.c: whether r is an error the routing handles (MOVED,
 * ASK, TRYAGAIN, CLUSTERDOWN): not an answer of the request itself. */
bool redisc_cluster_word(const redisReply *r);

/* redisc_cluster.c: "host:port" or "[v6]:port" (a redis.sentinels or
 * redis.cluster entry, checked by the config) into its parts. */
void redisc_split_hostport(const char *hp, char *host, size_t len, int *port);
/* redisc_cluster.c: where a cluster's node is (its host and port). */
int redisc_target_node(
    struct redisc_conn *conn, char *host, size_t len, int *port);
/* redisc_cluster.c: the nodes and the slot map, set up at init. */
void redisc_cluster_init(void);
void redisc_cluster_stop(void);
/* redisc_cluster.c: the node a request goes to (-1: none serves its
 * slot now). */
int redisc_route(const struct redisc_req *req);
/* redisc_cluster.c: a node's command connection is ready: learn whether
 * it is a cluster's, and the map. */
void redisc_cluster_connected(struct redisc_node *node);
/* redisc_cluster.c: a cluster's error reply to req was handled (sent
 * again, or after ASKING); false: it is req's answer. */
bool redisc_cluster_redirect(struct redisc_req *req, const redisReply *r);
/* redisc_cluster.c: a node's command connection was lost: the map is
 * asked for again (of another node). */
void redisc_cluster_lost(int node);
/* redisc_cluster.c: MOVED or ASK "<slot> <host>:<port>" (pure). */
int redisc_redirect_parse(
    const char *err, int *slot, char *host, size_t len, int *port);
#define REDISC_MOVED 1
#define REDISC_ASK 2
/* redisc_sentinel.c: what the Sentinel connection asks at connect. */
void redisc_sentinel_setup(redisAsyncContext *ac);

#endif

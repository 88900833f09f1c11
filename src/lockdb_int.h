/*
 * lockdb's own: what its files (lockdb.c: the connection and the
 * incarnation; lockdb_script.c: the scripts and their calls;
 * lockdb_reply.c: the replies; lockdb_news.c: the channels' news) share.
 * Nothing outside lockdb includes it.
 */
#ifndef LB_LOCKDB_INT_H
#define LB_LOCKDB_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "lockdb.h"
#include "proto.h"
#include "redisc.h"
#include "slot.h"

/*
 * The scripts live in src/lua/<script>.lua, each with its KEYS, ARGV and
 * replies in its opening comment, and are embedded at build time
 * (lua_scripts.h, made by src/lua/embed.py). A script is passed every key
 * its KEYS line declares, in order: the lock key "<prefix>{<name>}", the
 * name's other keys "<prefix>{<name>}:<word>", and the keys of no name
 * (lockdb_key_of_no_name), so that it touches no key it was not passed.
 */
#define LOCKDB_KEYS_MAX 12 /* keys of one script (acquire's, release's) */
/* A key: redis.prefix is at most 64 bytes, a name 200, a suffix short. */
#define LOCKDB_KEY_MAX (PROTO_NAME_MAX + 160)
/* A call's keys and arguments: redisc's most (32) less the key count. */
#define LOCKDB_ARGV_MAX 31

struct lockdb_script {
	struct redisc_script rs;
	int nkeys;
	const char *keys[LOCKDB_KEYS_MAX];
	int nargs; /* its ARGV, each named: LUA_<X>_ARG_<NAME> is its index */
};

enum lockdb_op {
	LDB_ACQUIRE,
	LDB_RELEASE,
	LDB_CANCEL,
	LDB_EXTEND,
	LDB_STATUS,
	LDB_WHO,
	LDB_REVOKE,
	LDB_CHECK,
	LDB_WAIT
};

struct lockdb_req {
	enum lockdb_op op;
	const struct lockdb_script *script; /* NULL for WAIT */
	lockdb_cb *cb;
	void *arg;
	unsigned incs; /* lockdb.incs when it was sent */
	int scope;     /* its name's (lockdb_scope_of) */
	unsigned gen;  /* its scope's gen when it was sent */
	uint64_t sent_ms;
	char name[]; /* for logs */
};

/* The least time between two log lines of one busy reply (LOADING,
 * NOREPLICAS, CLUSTERDOWN, ...). */
#define LOCKDB_BUSY_LOG_MS 10000

/* Redis's default cluster-node-timeout, for a node that will not say. */
#define LOCKDB_NODE_TIMEOUT_MS 15000

/* What a node said of itself at its connect (INFO, CONFIG GET). */
struct lockdb_node {
	char runid[48];		  /* "?" until INFO answers, "" if it may not be
			      read */
	char policy[32];	  /* its maxmemory-policy, "" until known */
	char refusal[96];	  /* lockdb_refusal's text, "" for none */
	uint64_t lag_ms;	  /* how long it takes writes cut off from its
			      replicas (min-replicas-max-lag + 2 s) or, a
			      cluster's, from the majority (node timeout) */
	uint64_t min_lag_ms;	  /* min-replicas-max-lag + 2 s, or 0 */
	uint64_t node_timeout_ms; /* cluster-node-timeout, or 0 unread */
	char grace[24];	    /* grace_ms + lag_ms, as incarnation.lua takes it */
	bool min_replicas;  /* min-replicas-to-write > 0, as far as known */
	bool told_eviction; /* warned of evicting, allowed, since connect */
	uint64_t memory_ms; /* when INFO memory was last asked (a cluster) */
	/* For INFO and /metrics (lockdb_node_stats): new incarnations of
	 * its scopes learned here, and until when a grace period runs. */
	uint64_t incarnations;
	uint64_t grace_until_ms;
};

/* A scope's incarnation (lockdb.h: the whole of one Redis, or a slot). */
struct lockdb_scope {
	char inc[32];	   /* the id this broker knows, "" until it knows one */
	bool asking;	   /* an incarnation.lua is out */
	uint64_t asked_ms; /* when the last answered one was sent */
	unsigned gen;	   /* how many times inc changed */
	bool seeding;	   /* asked by lockdb_seed, which logs it */
};

/* lockdb's state: lockdb.c sets it up and keeps the connection's and
 * the incarnation's parts; the others read it. */
struct lockdb_state {
	const char *prefix;
	const char *broker;   /* "<host>:<pid>:<random>", as entries name it */
	char channel[128];    /* the release channel, every broker's */
	char to[128];	      /* "<prefix>to:": + a broker, that broker's */
	char mine[256];	      /* this broker's: hand-overs to its tickets */
	char handoff[24];     /* ms a hand-over waits for its broker */
	char live[24];	      /* ms a broker with waiters goes without asking */
	uint64_t step_ms;     /* every lease's margin in Redis (lockdb_init) */
	char skew[24];	      /* step_ms, as incarnation.lua takes it */
	int64_t evicted;      /* Redis's evicted_keys at the last beat, or -1 */
	lockdb_news_fn *news; /* what the channels say goes here */
	void (*up_fn)(void *); /* the engine's, at every connect */
	void *up_arg;
	bool allow_eviction;
	/* What each node (redisc.h: the one Redis is node 0) said of itself
	 * at its connect (lockdb.c). */
	struct lockdb_node node[REDISC_NODES_MAX];
	/* The incarnation of each scope's lock data (lockdb_inc.c). */
	struct lockdb_scope **scope; /* LOCKDB_SCOPES, NULL until asked */
	uint64_t grace_ms; /* a new incarnation refuses grants this long */
	uint64_t trust_ms; /* how long an answer vouches (lockdb_set_trust) */
	bool quiet;	   /* lockdb_quiet: nothing held, nobody waits */
	unsigned incs;	   /* incarnations learned (changes of any scope's) */
	bool checked;	   /* scope 0 answered on this connection (one Redis) */
	bool told_need;	   /* warned of a longer grace period elsewhere */
	unsigned beats;	   /* incarnation questions asked (one Redis) */
	lockdb_inc_fn *inc_fn;
	char why[96]; /* a gate's refusal, for lockdb_reply.why */
};

extern struct lockdb_state lockdb;

/* lockdb_reply.c: a script's or WAIT's reply, parsed for its request. */
void lockdb_reply_cb(const redisReply *r, void *arg);
struct lockdb_req *lockdb_req_new(enum lockdb_op op,
    const struct lockdb_script *script, const char *name, lockdb_cb *cb,
    void *arg);

/* lockdb_script.c: the scripts added to redisc (and broken on purpose
 * for a chaos fault). */
void lockdb_scripts_init(void);

/* lockdb_script.c: incarnation.lua for scope, asked by the beat
 * (lockdb_inc.c). */
void lockdb_script_incarnation(int scope, redisc_cb *cb, void *arg);
/* markers.lua for n (up to LOCKDB_SEED_MAX) slots of one node, whose
 * run_id is runid. */
#define LOCKDB_SEED_MAX 24
void lockdb_script_markers(
    const char *runid, const int *slots, int n, redisc_cb *cb, void *arg);
/* lockdb_seed.c: a cluster node's slots without a marker, or with one
 * another Redis process served, made anew at once. */
void lockdb_seed(int node);
void lockdb_seed_reset(void);

/* lockdb_inc.c: scope's entry, made if needed; the incarnation id known
 * for it ("" for none); the run_id, and the grace period to ask for, of
 * the node that serves it now. */
struct lockdb_scope *lockdb_scope(int scope);
const char *lockdb_inc_of(int scope);
const char *lockdb_runid_of(int scope);
const char *lockdb_grace_of(int scope);
/* lockdb_inc.c: every scope forgotten (at init: a test inits again). */
void lockdb_scopes_reset(void);
/* lockdb_inc.c: a request on a scope not heard lately asks first, so
 * that its answer (sent first on the same node) vouches anew. */
void lockdb_inc_before(int scope);
void lockdb_vouched(int scope, unsigned gen, uint64_t sent_ms);
/* lockdb_inc.c: a node said who it is (INFO): its scopes are asked. */
void lockdb_inc_node_known(int node);
/* lockdb.c: the node's facts (INFO memory, asked with the beat). */
void lockdb_memory(int node);

/* lockdb_script.c: a key of no name ("/<word>" in a KEYS line) for name
 * (NULL: the beat's) in buf; its length. */
size_t lockdb_key_of_no_name(
    const char *name, const char *word, char *buf, size_t size);

#endif

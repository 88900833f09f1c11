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
	char name[];   /* for logs */
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
	char policy[32];  /* Redis's maxmemory-policy, "" until known */
	char refusal[96]; /* lockdb_refusal's text, "" for none */
	/* The incarnation of the lock data (incarnation.lua). */
	char inc[32];	   /* the id this broker knows, "" until it knows one */
	char runid[48];	   /* the command connection's Redis: "?" until INFO
			    answers, "" if it may not be read */
	uint64_t grace_ms; /* a new incarnation refuses grants this long */
	uint64_t lag_ms;   /* how long a master cut off from its replicas
			      takes writes (min-replicas-max-lag + 2 s) */
	char grace[24];	   /* grace_ms + lag_ms, as incarnation.lua takes it */
	bool asking;	   /* an incarnation.lua is out */
	bool quiet;	   /* lockdb_quiet: nothing held, nobody waits */
	unsigned incs;	   /* incarnations learned (changes of inc) */
	bool checked;	   /* answered on this connection */
	bool min_replicas; /* min-replicas-to-write > 0, as far as known */
	bool told_need;	   /* warned of a longer grace period elsewhere */
	bool told_eviction; /* warned of evicting, allowed, since connect */
	unsigned beats;	    /* incarnation questions asked */
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

/* lockdb_script.c: incarnation.lua, asked by the beat (lockdb.c). */
void lockdb_script_incarnation(redisc_cb *cb, void *arg);

/* lockdb_script.c: a key of no name ("/<word>" in a KEYS line) for name
 * (NULL: the beat's) in buf; its length. */
size_t lockdb_key_of_no_name(
    const char *name, const char *word, char *buf, size_t size);

#endif

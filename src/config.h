/*
 * config: the libconfig file -> struct config, every key described once in a
 * table (type, default, range, reloadable), validated with file:line errors.
 * Depends on nothing else in lockbroker: errors come back as text.
 */
#ifndef LB_CONFIG_H
#define LB_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CONFIG_MAX_SENTINELS 16

struct config_listen {
	char *address;	 /* "127.0.0.1"; "" = no TCP listener */
	int port;	 /* 7878, 1..65535 */
	char *unix_path; /* key "unix"; "" = none */
	int unix_mode; /* key "unix_mode", a string of octal digits, default "0660" */
	char *unix_group; /* the socket's group; "" = the daemon's */
	bool insecure;	  /* listen beyond loopback without auth.secret */
	int backlog;	  /* 511, 1..65535: the own sockets' listen(2) */
};

struct config_redis {
	char *host;	 /* "127.0.0.1" */
	int port;	 /* 6379, 1..65535 */
	char *unix_path; /* key "unix"; "" = TCP */
	char *username;	 /* "" = default user */
	char *password;	 /* "" = none; wiped before free */
	char *password_file;
	int db;	      /* 0..(INT_MAX) */
	char *prefix; /* "lockbroker:", 1..64 bytes, no spaces or braces */
	int connect_timeout_ms; /* 1000, 10..600000 */
	int command_timeout_ms; /* 1000, 10..600000 */
	int reconnect_min_ms;	/* 100, 1..600000 */
	int reconnect_max_ms;	/* 5000, 1..600000, >= reconnect_min_ms */
	char *sentinels[CONFIG_MAX_SENTINELS]; /* "host:port" strings */
	int nsentinels;
	char *master_name;		     /* "" */
	char *cluster[CONFIG_MAX_SENTINELS]; /* a cluster's seed nodes */
	int ncluster;
	int wait_replicas;   /* 0, 0..100 */
	bool allow_eviction; /* grant from a Redis that may evict keys */
	int trust_ms;	     /* 5000, 100..600000 */
	int clock_step_ms;   /* 1000, 0..60000 */
	/* TLS to Redis and the Sentinels (a build with redis_tls only). */
	bool tls;	       /* false */
	char *tls_ca;	       /* PEM: Redis's signers; "" the system's */
	char *tls_certificate; /* PEM: the broker's, for tls-auth-clients */
	char *tls_key;	       /* PEM; an absolute path or a credential name */
	char *tls_server_name; /* the name verified (and SNI); "" the host */
};

struct config_locks {
	int64_t lease_ms;	 /* 10000, 30..86400000 */
	int64_t min_ttl_ms;	 /* 10, 1..86400000 */
	int64_t max_ttl_ms;	 /* 86400000, 1..(2^31-1)*1000, >= min_ttl_ms */
	int64_t default_wait_ms; /* -1 (forever), -1..86400000 */
	int64_t max_hold_ms;	 /* 0 (none), 0..(2^31-1)*1000 */
	int64_t lock_delay_ms;	 /* 0 (off), 0..600000 */
	int64_t retry_min_ms;	 /* 5, 1..600000 */
	int64_t retry_max_ms;	 /* 1000, 1..600000, >= retry_min_ms */
	double clock_drift;	 /* 0.01, 0.0..0.5 */
};

struct config_limits {
	int max_clients;	  /* 1024, 1..1000000 */
	int max_line;		  /* 512, 64..65536 */
	int max_locks_per_client; /* 64, 1..1000000 */
	int max_pending;	  /* 32, 1..100000 */
	int max_waiters;	  /* 100000, 1..10000000 */
	int idle_timeout_s;	  /* 0 (none), 0..(86400*365) */
	int tcp_keepalive_s;	  /* 0 (the system's), 0..7200 */
	int auth_timeout_s;	  /* 10, 1..3600 */
};

/* What an identity may do on the names it is given (key "rights"). */
#define CONFIG_RIGHT_LOCK 0x1	/* ACQUIRE, FILL, RELEASE, EXTEND, VALIDATE */
#define CONFIG_RIGHT_READ 0x2	/* WHO, STATUS */
#define CONFIG_RIGHT_REVOKE 0x4 /* REVOKE */
/* A right's word in the file: "lock", "read" or "revoke". */
const char *config_right_name(int right);
#define CONFIG_MAX_IDENTITIES 64
#define CONFIG_MAX_PREFIXES 16
#define CONFIG_IDENT_NAME_MAX 64

/*
 * One entry of auth.identities: a name (as logs, WHO and /metrics show
 * it), how it proves itself, and what it may do on which names. The
 * identity module looks identities up by secret and by name.
 */
struct config_identity {
	char *name;	   /* 1..64 of [A-Za-z0-9._@:-] */
	char *secret;	   /* wiped before free; "" when secret_file is set */
	char *secret_file; /* an absolute path; "" when secret is set */
	char *certificate; /* a verified client certificate's name; "" none */
	char *names[CONFIG_MAX_PREFIXES]; /* name prefixes; "" every name */
	int nnames;
	int rights; /* CONFIG_RIGHT_* */
	int line;   /* its line in the file, for errors found later */
};

struct config_identities {
	struct config_identity *v; /* NULL when there are none */
	int n;
};

struct config_auth {
	char *secret; /* "" = no AUTH; wiped before free */
	char *secret_file;
	char *admin_secret;	 /* "" = no admins (REVOKE refused); wiped */
	char *admin_secret_file; /* wins over admin_secret when set */
	struct config_identities identities; /* key "identities" */
};

struct config_log {
	char *level; /* "debug" | "info" | "warning" | "error" */
	bool syslog; /* false */
};

/* The TLS listener, beside the plain ones (docs/operations.md, TLS). */
struct config_tls {
	char *address;	   /* "127.0.0.1" */
	int port;	   /* 0 = no TLS listener, else 1..65535 */
	char *certificate; /* PEM: the broker's, then its chain */
	char *key;	   /* PEM; an absolute path or a credential name */
	char *ca;	   /* PEM: who signs client certificates */
	char *client_certificates; /* "none" | "optional" | "require" */
	char *min_version;	   /* "TLSv1.2" | "TLSv1.3" */
};

struct config_metrics {
	bool enabled;  /* false */
	char *address; /* "127.0.0.1" */
	int port;      /* 9878, 1..65535 */
};

struct config {
	char *path; /* the file it was read from, NULL for defaults */
	struct config_listen listen;
	struct config_redis redis;
	struct config_locks locks;
	struct config_limits limits;
	struct config_auth auth;
	struct config_log log;
	struct config_metrics metrics;
	struct config_tls tls;
};

/* Fill *cf with every default. Never fails. */
void config_defaults(struct config *cf);

/*
 * Read path into *cf (defaults for absent keys). path NULL means defaults
 * only. On error returns -1, leaves *cf with nothing allocated, and writes
 * "FILE:LINE: KEY: reason" (or "FILE: reason" when there is no line) to err.
 * A missing file is an error only if must_exist.
 */
int config_load(struct config *cf, const char *path, bool must_exist, char *err,
    size_t errlen);

/* Free every string (secrets wiped first). *cf is zeroed. */
void config_free(struct config *cf);

/*
 * Compare two loaded configs: calls fn once per key whose value differs,
 * with its dotted name ("locks.lease_ms") and whether it can change on
 * reload. Secrets are compared but never passed as values.
 */
typedef void config_diff_fn(const char *key, bool reloadable, void *arg);
void config_diff(const struct config *a, const struct config *b,
    config_diff_fn *fn, void *arg);

/*
 * Reload: move every reloadable key's value from fresh into live, and the
 * old values into fresh (free it after). Restart-only keys stay as they are.
 */
void config_apply_reloadable(struct config *live, struct config *fresh);

/*
 * How long a refused waiter's marks (:waiting, :writer, :fill) and a FILL
 * leader's :done last: past the head's next try, which comes at least
 * every retry_max_ms, with room for a slow reply (docs/protocol.md §8).
 */
uint64_t config_mark_ms(const struct config *cf);
/* A new incarnation's grace period: redis.trust_ms, clock drift and
 * redis.clock_step_ms. */
uint64_t config_grace_ms(const struct config *cf);
/* Whether an IPv4 (struct in_addr) or IPv6 (struct in6_addr) address
 * reaches only this host: 127.0.0.0/8, ::1, ::ffff:127.x. */
bool config_addr_loopback(int family, const void *addr);

#endif

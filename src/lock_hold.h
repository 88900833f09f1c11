/*
 * lock_hold: the holds of this broker's clients: made at a grant, trusted
 * until their validity ends, renewed (session locks), and lost with an
 * EVENT LOST to their owner. Built on lock_name, lock_req and
 * lock_release; lock_check (its checks in Redis) is called through
 * the functions given to lockhold_init; it calls nothing else above.
 * struct lock_hold is declared here; every field but checking and stale
 * (lock_check's) is written in lock_hold.c alone.
 */
#ifndef LB_LOCK_HOLD_H
#define LB_LOCK_HOLD_H

#include <sys/queue.h>

#include <stdbool.h>
#include <stdint.h>

#include "lock_req.h"

struct config;
struct event_base;
struct lock_name;
struct lock_req;

/* One lock held by one owner, as LOCKS shows it. */
struct lock_hold {
	TAILQ_ENTRY(lock_hold) owner_entry;
	LIST_ENTRY(lock_hold) name_entry;
	struct lock_owner *owner;
	struct lock_name *ln;
	enum lock_kind kind;
	enum lock_mode mode;
	unsigned limit; /* LOCK_LIMIT */
	uint64_t fence;
	uint64_t ttl_ms;
	uint64_t granted_ms;	 /* monotonic, for max_hold_ms */
	uint64_t granted_us;	 /* for the hold-time histogram */
	uint64_t valid_until_ms; /* monotonic, docs/protocol.md §3 */
	uint64_t lease_seq;	 /* the last request sent to set its lease */
	uint64_t confirmed_ms;	 /* monotonic: when the last request that
				    found it held in Redis was sent */
	struct event *expire_ev; /* at valid_until_ms: EVENT LOST */
	struct event *renew_ev;	 /* session locks: every lease/3 */
	struct event *maxhold_ev;
	struct lock_req *renewing; /* the renewal in flight, or NULL */
	struct lock_req *checking; /* a check after missed messages */
	bool releasing;		   /* its RELEASE is in Redis */
	bool stale;		   /* of an incarnation Redis no longer has:
				      to be put back (lock_hold.c) */
	uint64_t since_ms;	   /* wall clock, its WHO entry's */
	char token[PROTO_TOKEN_MAX + 1];
};

enum lock_lost {
	LOST_EXPIRED,
	LOST_STOLEN,
	LOST_UNAVAILABLE,
	LOST_MAXHOLD,
	LOST_REVOKED,
};

/* A hold of ln ended: the queue may try. */
typedef void lockhold_kick_fn(struct lock_name *ln);
/* Check h in Redis (lock_check). */
typedef void lockhold_check_fn(struct lock_hold *h);
/* h was granted by a request sent at start_ms (lock_check). */
typedef void lockhold_granted_fn(struct lock_hold *h, uint64_t start_ms);
void lockhold_init(struct event_base *base, const struct config *cf,
    lockhold_kick_fn *kick, lockhold_check_fn *check,
    lockhold_granted_fn *granted);
/* The WHO entry h was granted with (LOCKREQ_INFO bytes). */
void lockhold_info(const struct lock_hold *h, char *info, size_t len);
/* o has no holds yet. */
void lockhold_owner_init(struct lock_owner *o);
/* h's RELEASE is in Redis. */
void lockhold_releasing(struct lock_hold *h);
/* A grant (or a same-token re-grant) becomes the owner's hold. */
struct lock_hold *lockhold_set(
    struct lock_owner *o, struct lock_req *req, uint64_t fence);
/* o's hold of name, or NULL. */
struct lock_hold *lockhold_find(struct lock_owner *o, const char *name);
/* req, which may set its token's lease on its name to req->ttl_ms, is
 * sent: its holds here trust no more than that lease until Redis answers
 * the last such request. */
void lockhold_assume(struct lock_req *req);
/* Redis set the lease as req asked, for the grant with fence (0: any of
 * req's token). */
void lockhold_lease(const struct lock_req *req, uint64_t fence);
/* h was granted on another broker's hand-over before confirming it: it
 * trusts it no further than until_ms, and confirms it now. */
void lockhold_handed(struct lock_hold *h, uint64_t until_ms);
/* o's holds past their validity are lost now, as their timers would. */
void lockhold_settle(struct lock_owner *o);
/* h is no longer trusted: its owner is told EVENT LOST (why), and a
 * lease given up on is released in Redis. */
void lockhold_lost(struct lock_hold *h, enum lock_lost why);
/* A request sent at sent_ms found h held with left_ms of its lease
 * (UINT64_MAX: no end): h trusts no more than that. */
void lockhold_left(struct lock_hold *h, uint64_t sent_ms, uint64_t left_ms);
/* Re-arm the expiry timer for the hold's trusted end. */
void lockhold_arm(struct lock_hold *h);
void lockhold_free(struct lock_hold *h);
/* Forget every hold of ln under token; another owner's is lost (why). */
void lockhold_drop_token(struct lock_name *ln, const char *token,
    const struct lock_owner *o, enum lock_lost why);
/* o sends a RELEASE of token's grant: the token's holds of other
 * connections here are lost at once. */
void lockhold_release_sent(
    struct lock_name *ln, const char *token, const struct lock_owner *o);
/* An admin revoked ln: holds with fence or older are lost. */
void lockhold_revoked(struct lock_name *ln, uint64_t fence);
/* Another broker released or shortened the grant with fence: its holds
 * here are lost. */
void lockhold_released(struct lock_name *ln, uint64_t fence);
/* Whether a release for except's owner would take the lock from someone
 * else here too (see lock_hold.c). */
bool lockhold_token_busy(struct lock_name *ln, const char *token,
    const struct lock_hold *except, const struct lock_owner *o);

/* How long the longest-held lock here has been held (ms; 0: none). */
uint64_t lockhold_oldest_ms(void);

#endif

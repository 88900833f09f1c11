/*
 * lockdb_script: the Lua scripts (src/lua/, embedded at build time) and
 * the calls that send them, each argument filled by its name in the
 * script's header.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chaos.h"
#include "lockdb.h"
#include "lockdb_int.h"
#include "log.h"
#include "lua_scripts.h"
#include "proto.h"
#include "redisc.h"
#include "slot.h"
#include "util.h"
#include "xmalloc.h"

#define LOCKDB_SCRIPT(x, X)                                                    \
	static struct lockdb_script lockdb_lua_##x = {                         \
		{ LUA_##X##_FILE, LUA_##X##_BODY, "" }, LUA_##X##_NKEYS,       \
		LUA_##X##_KEYS, LUA_##X##_NARGS                                \
	}

LOCKDB_SCRIPT(acquire, ACQUIRE);
LOCKDB_SCRIPT(share, SHARE);
LOCKDB_SCRIPT(release, RELEASE);
LOCKDB_SCRIPT(blind_release, BLIND_RELEASE); /* CHAOS_BLIND_RELEASE */
LOCKDB_SCRIPT(cancel, CANCEL);
LOCKDB_SCRIPT(extend, EXTEND);
LOCKDB_SCRIPT(status, STATUS);
LOCKDB_SCRIPT(who, WHO);
LOCKDB_SCRIPT(check, CHECK);
LOCKDB_SCRIPT(revoke, REVOKE);
LOCKDB_SCRIPT(incarnation, INCARNATION);
LOCKDB_SCRIPT(markers, MARKERS);
/* A batch of one script's calls, with that script's flags (batch.lua). */
#define LOCKDB_BATCH(x, X)                                                     \
	static struct lockdb_script lockdb_lua_batch_##x = {                   \
		{ LUA_BATCH_FILE, LUA_BATCH_AS_##X##_BODY, "" },               \
		LUA_BATCH_NKEYS, LUA_BATCH_KEYS, LUA_BATCH_NARGS               \
	}

LOCKDB_BATCH(acquire, ACQUIRE);
LOCKDB_BATCH(release, RELEASE);
LOCKDB_BATCH(check, CHECK);

/* blind_release.lua is sent release.lua's arguments: the first it names. */
_Static_assert(LUA_BLIND_RELEASE_ARG_TOKEN == LUA_RELEASE_ARG_TOKEN &&
	LUA_BLIND_RELEASE_ARG_CHANNEL == LUA_RELEASE_ARG_CHANNEL &&
	LUA_BLIND_RELEASE_ARG_LOCK_NAME == LUA_RELEASE_ARG_LOCK_NAME &&
	LUA_BLIND_RELEASE_NARGS <= LUA_RELEASE_NARGS,
    "blind_release.lua takes release.lua's arguments");

/*
 * The key of no name "/<word>" a script declares (today only
 * /incarnation) of scope, in buf: "<prefix><word>", one for the whole of
 * one Redis; on a cluster one per slot, in the slot itself
 * ("<prefix>{<tag of the slot>}<word>": slot.h), so that every key of a
 * call is in one slot, and the marker moves with its slot's names. This
 * function alone makes it. Its length.
 */
static size_t
lockdb_scope_key(int scope, const char *word, char *buf, size_t size)
{
	char *p = buf;

	util_cat(&p, buf + size, lockdb.prefix);
	if (lockdb_scoped()) {
		util_cat(&p, buf + size, "{");
		util_cat(&p, buf + size, slot_tag(scope));
		util_cat(&p, buf + size, "}");
	}
	util_cat(&p, buf + size, word);
	return (size_t)(p - buf);
}

/* The key of no name "/<word>" for name's call, in its scope. */
size_t
lockdb_key_of_no_name(
    const char *name, const char *word, char *buf, size_t size)
{
	return lockdb_scope_key(lockdb_scope_of(name), word, buf, size);
}

/* The key of name with suffix ("", ":<word>" or "/<word>", as a KEYS
 * line declares it: docs/protocol.md §8) in buf; its length. */
static size_t
lockdb_key(const char *name, const char *suffix, char *buf, size_t size)
{
	char *p = buf;

	if (suffix[0] == '/')
		return lockdb_key_of_no_name(name, suffix + 1, buf, size);
	util_cat(&p, buf + size, lockdb.prefix);
	util_cat(&p, buf + size, "{");
	util_cat(&p, buf + size, name);
	util_cat(&p, buf + size, "}");
	util_cat(&p, buf + size, suffix);
	return (size_t)(p - buf);
}

/*
 * The script with every key it declares (embed.py: LUA_<X>_KEYS, each
 * suffix made a key by lockdb_key) and its arguments,
 * args[LUA_<X>_ARG_<NAME>]: each must be filled.
 */
static void
lockdb_send(enum lockdb_op op, struct lockdb_script *script, const char *name,
    const char *const *args, lockdb_cb *cb, void *arg)
{
	int nkeys = script->nkeys, nargs = script->nargs;
	struct lockdb_req *req = lockdb_req_new(op, script, name, cb, arg);
	int n = 0;
	char key[LOCKDB_KEYS_MAX][LOCKDB_KEY_MAX];
	const char *argv[LOCKDB_ARGV_MAX];
	size_t lens[LOCKDB_ARGV_MAX];

	if (nkeys > LOCKDB_KEYS_MAX || nkeys + nargs > LOCKDB_ARGV_MAX)
		fatalx("lockdb: %d keys and %d arguments are too many", nkeys,
		    nargs);
	if (lockdb.quiet && !lockdb_scoped()) {
		/* Quiet since the last beat: a beat first, whose answer
		 * comes before this one's. */
		lockdb.quiet = false;
		lockdb.beats = 3; /* with INFO memory: the policy may be new */
		lockdb_incarnation();
	}
	lockdb_inc_before(req->scope);
	for (int i = 0; i < nkeys; i++) {
		lens[n] =
		    lockdb_key(name, script->keys[i], key[i], sizeof key[i]);
		argv[n++] = key[i];
	}
	for (int i = 0; i < nargs; i++) {
		if (args[i] == NULL) /* a name the call did not fill */
			fatalx("lockdb: %s's argument %d is not filled",
			    script->rs.name, i + 1);
		lens[n] = strlen(args[i]);
		argv[n++] = args[i];
	}
	redisc_eval(&script->rs, nkeys, n, argv, lens, lockdb_reply_cb, req);
}

/* A ticket's "<broker>#<n>" in buf ("" for none). */
static void
lockdb_ticket(char *buf, size_t size, uint64_t n)
{
	char *p = buf;

	buf[0] = '\0';
	if (n == 0)
		return;
	util_cat(&p, buf + size, lockdb.broker);
	util_cat(&p, buf + size, "#");
	util_cat_u64(&p, buf + size, n);
}

/* An exclusive ACQUIRE or a FILL: acquire.lua. No printf on the request
 * path: util_u64str. */
static void
lockdb_acquire_exclusive(
    const char *name, const struct lockdb_ask *a, lockdb_cb *cb, void *arg)
{
	const int scope = lockdb_scope_of(name);
	char ttl[UTIL_U64_LEN], mark[UTIL_U64_LEN], watch[UTIL_U64_LEN];
	char least[UTIL_U64_LEN], ticket[sizeof lockdb.mine];
	const char *args[LUA_ACQUIRE_NARGS] = {
		[LUA_ACQUIRE_ARG_TOKEN] = a->token,
		[LUA_ACQUIRE_ARG_TTL_MS] = ttl,
		[LUA_ACQUIRE_ARG_MARK_MS] = mark,
		[LUA_ACQUIRE_ARG_WHO_ENTRY] = a->info,
		[LUA_ACQUIRE_ARG_IS_FILL] = a->mode == LDB_FILL ? "1" : "0",
		[LUA_ACQUIRE_ARG_WATCH_FENCE] = watch,
		[LUA_ACQUIRE_ARG_CLEAR_WRITER] = a->clear_writer ? "1" : "0",
		[LUA_ACQUIRE_ARG_CHANNEL] = lockdb.channel,
		[LUA_ACQUIRE_ARG_LOCK_NAME] = name,
		[LUA_ACQUIRE_ARG_TICKET] = ticket,
		[LUA_ACQUIRE_ARG_LEAST_N] = least,
		[LUA_ACQUIRE_ARG_LIVE_MS] = lockdb.live,
		[LUA_ACQUIRE_ARG_INCARNATION] = lockdb_inc_of(scope),
		[LUA_ACQUIRE_ARG_RUN_ID] = lockdb_runid_of(scope),
	};

	util_u64str(ttl, a->ttl_ms + lockdb.step_ms);
	util_u64str(mark, a->mark_ms);
	util_u64str(watch, a->watch);
	util_u64str(least, a->least);
	lockdb_ticket(ticket, sizeof ticket, a->ticket);
	lockdb_send(LDB_ACQUIRE, &lockdb_lua_acquire, name, args, cb, arg);
}

/* ACQUIRE ... SHARED or LIMIT n: share.lua. */
static void
lockdb_acquire_shared(
    const char *name, const struct lockdb_ask *a, lockdb_cb *cb, void *arg)
{
	const int scope = lockdb_scope_of(name);
	char ttl[UTIL_U64_LEN], mark[UTIL_U64_LEN], n[UTIL_U64_LEN];
	char mode[UTIL_U64_LEN + 6], least[UTIL_U64_LEN];
	char ticket[sizeof lockdb.mine], *p = mode;
	const char *args[LUA_SHARE_NARGS] = {
		[LUA_SHARE_ARG_TOKEN] = a->token,
		[LUA_SHARE_ARG_TTL_MS] = ttl,
		[LUA_SHARE_ARG_MARK_MS] = mark,
		[LUA_SHARE_ARG_WHO_ENTRY] = a->info,
		[LUA_SHARE_ARG_SHARE_MODE] = mode,
		[LUA_SHARE_ARG_LIMIT_N] = n,
		[LUA_SHARE_ARG_CHANNEL] = lockdb.channel,
		[LUA_SHARE_ARG_LOCK_NAME] = name,
		[LUA_SHARE_ARG_INCARNATION] = lockdb_inc_of(scope),
		[LUA_SHARE_ARG_RUN_ID] = lockdb_runid_of(scope),
		[LUA_SHARE_ARG_TICKET] = ticket,
		[LUA_SHARE_ARG_LEAST_N] = least,
		[LUA_SHARE_ARG_LIVE_MS] = lockdb.live,
	};

	util_u64str(ttl, a->ttl_ms + lockdb.step_ms);
	util_u64str(mark, a->mark_ms);
	util_u64str(least, a->least);
	lockdb_ticket(ticket, sizeof ticket, a->ticket);
	if (a->mode == LDB_SHARED) {
		util_cat(&p, mode + sizeof mode, "SHARED");
	} else {
		util_cat(&p, mode + sizeof mode, "LIMIT=");
		util_cat_u64(&p, mode + sizeof mode, a->limit);
	}
	util_u64str(n,
	    a->mode == LDB_LIMIT && chaos_fault != CHAOS_NO_LIMIT ? a->limit
								  : 0);
	lockdb_send(LDB_ACQUIRE, &lockdb_lua_share, name, args, cb, arg);
}

void
lockdb_acquire(
    const char *name, const struct lockdb_ask *a, lockdb_cb *cb, void *arg)
{
	if (a->mode == LDB_EXCLUSIVE || a->mode == LDB_FILL)
		lockdb_acquire_exclusive(name, a, cb, arg);
	else
		lockdb_acquire_shared(name, a, cb, arg);
}

void
lockdb_release(const char *name, const char *token, uint64_t fence,
    enum lockdb_done done, uint64_t done_ms, lockdb_cb *cb, void *arg)
{
	const int scope = lockdb_scope_of(name);
	static const char *const marks[] = { "0", "1", "2" };
	char ms[UTIL_U64_LEN], f[UTIL_U64_LEN];
	const char *args[LUA_RELEASE_NARGS] = {
		[LUA_RELEASE_ARG_TOKEN] = token,
		[LUA_RELEASE_ARG_CHANNEL] = lockdb.channel,
		[LUA_RELEASE_ARG_LOCK_NAME] = name,
		[LUA_RELEASE_ARG_DONE_MODE] = marks[done],
		[LUA_RELEASE_ARG_DONE_KEEP_MS] = ms,
		[LUA_RELEASE_ARG_GRANT_FENCE] = f,
		[LUA_RELEASE_ARG_BROKER] = lockdb.broker,
		[LUA_RELEASE_ARG_HANDOFF_MS] = lockdb.handoff,
		[LUA_RELEASE_ARG_TO_PREFIX] = lockdb.to,
		[LUA_RELEASE_ARG_LIVE_MS] = lockdb.live,
		[LUA_RELEASE_ARG_INCARNATION] = lockdb_inc_of(scope),
		[LUA_RELEASE_ARG_RUN_ID] = lockdb_runid_of(scope),
	};

	util_u64str(ms, done_ms > 0 ? done_ms : 1);
	util_u64str(f, fence);
	lockdb_send(LDB_RELEASE,
	    chaos_fault == CHAOS_BLIND_RELEASE ? &lockdb_lua_blind_release
					       : &lockdb_lua_release,
	    name, args, cb, arg);
}

static void
lockdb_cancel_cb(const struct lockdb_reply *r, void *arg)
{
	/* Not queued (handed over: that grant is released by whoever hears
	 * of it), or Redis away: its broker's later tries make it dead. */
}

void
lockdb_cancel(const char *name, uint64_t ticket)
{
	char tk[sizeof lockdb.mine];
	const char *args[LUA_CANCEL_NARGS] = { [LUA_CANCEL_ARG_TICKET] = tk };

	snprintf(tk, sizeof tk, "%s#%" PRIu64, lockdb.broker, ticket);
	lockdb_send(
	    LDB_CANCEL, &lockdb_lua_cancel, name, args, lockdb_cancel_cb, NULL);
}

/* extend.lua with the lease in Redis as given (ms). */
static void
lockdb_pexpire(const char *name, const char *token, uint64_t fence, uint64_t ms,
    lockdb_cb *cb, void *arg)
{
	const int scope = lockdb_scope_of(name);
	char ttl[UTIL_U64_LEN], f[UTIL_U64_LEN];
	const char *args[LUA_EXTEND_NARGS] = {
		[LUA_EXTEND_ARG_TOKEN] = token,
		[LUA_EXTEND_ARG_TTL_MS] = ttl,
		[LUA_EXTEND_ARG_GRANT_FENCE] = f,
		[LUA_EXTEND_ARG_BROKER] = lockdb.broker,
		[LUA_EXTEND_ARG_CHANNEL] = lockdb.channel,
		[LUA_EXTEND_ARG_LOCK_NAME] = name,
		[LUA_EXTEND_ARG_INCARNATION] = lockdb_inc_of(scope),
		[LUA_EXTEND_ARG_RUN_ID] = lockdb_runid_of(scope),
	};

	util_u64str(ttl, ms);
	util_u64str(f, fence);
	lockdb_send(LDB_EXTEND, &lockdb_lua_extend, name, args, cb, arg);
}

void
lockdb_extend(const char *name, const char *token, uint64_t fence,
    uint64_t ttl_ms, lockdb_cb *cb, void *arg)
{
	lockdb_pexpire(name, token, fence, ttl_ms + lockdb.step_ms, cb, arg);
}

void
lockdb_keep(const char *name, const char *token, uint64_t fence,
    uint64_t keep_ms, lockdb_cb *cb, void *arg)
{
	lockdb_pexpire(name, token, fence, keep_ms, cb, arg);
}

void
lockdb_status(const char *name, uint64_t fence, const char *token,
    lockdb_cb *cb, void *arg)
{
	const int scope = lockdb_scope_of(name);
	char f[24];
	const char *args[LUA_STATUS_NARGS] = {
		[LUA_STATUS_ARG_GRANT_FENCE] = f,
		[LUA_STATUS_ARG_TOKEN] = token != NULL ? token : "",
		[LUA_STATUS_ARG_INCARNATION] = lockdb_inc_of(scope),
	};

	snprintf(f, sizeof f, "%" PRIu64, fence);
	lockdb_send(LDB_STATUS, &lockdb_lua_status, name, args, cb, arg);
}

void
lockdb_who(const char *name, lockdb_cb *cb, void *arg)
{
	lockdb_send(LDB_WHO, &lockdb_lua_who, name, NULL, cb, arg);
}

void
lockdb_check(const char *name, const char *token, uint64_t fence,
    uint64_t restore_ms, const char *info, lockdb_cb *cb, void *arg)
{
	const int scope = lockdb_scope_of(name);
	char f[24], ttl[24], value[PROTO_TOKEN_MAX + 200];
	const char *args[LUA_CHECK_NARGS] = {
		[LUA_CHECK_ARG_TOKEN] = token,
		[LUA_CHECK_ARG_GRANT_FENCE] = f,
		[LUA_CHECK_ARG_RESTORE_MS] = ttl,
		[LUA_CHECK_ARG_LOCK_VALUE] = value,
		[LUA_CHECK_ARG_INCARNATION] = lockdb_inc_of(scope),
		[LUA_CHECK_ARG_RUN_ID] = lockdb_runid_of(scope),
	};

	snprintf(f, sizeof f, "%" PRIu64, fence);
	snprintf(ttl, sizeof ttl, "%" PRIu64,
	    info != NULL && restore_ms > 0 ? restore_ms + lockdb.step_ms : 0);
	snprintf(value, sizeof value, "%s %s", token, info != NULL ? info : "");
	lockdb_send(LDB_CHECK, &lockdb_lua_check, name, args, cb, arg);
}

void
lockdb_revoke(const char *name, uint64_t keep_ms, lockdb_cb *cb, void *arg)
{
	char keep[24];
	const char *args[LUA_REVOKE_NARGS] = {
		[LUA_REVOKE_ARG_CHANNEL] = lockdb.channel,
		[LUA_REVOKE_ARG_LOCK_NAME] = name,
		[LUA_REVOKE_ARG_REVOKED_KEEP_MS] = keep,
	};

	snprintf(keep, sizeof keep, "%" PRIu64, keep_ms > 0 ? keep_ms : 1);
	lockdb_send(LDB_REVOKE, &lockdb_lua_revoke, name, args, cb, arg);
}

/* incarnation.lua for the beat (lockdb_inc.c): scope's marker, and its
 * arguments by name. */
void
lockdb_script_incarnation(int scope, redisc_cb *cb, void *arg)
{
	char key[LOCKDB_KEY_MAX];
	const char *argv[1 + LUA_INCARNATION_NARGS] = { key };
	const char **args = argv + 1;
	size_t lens[1 + LUA_INCARNATION_NARGS];

	_Static_assert(LUA_INCARNATION_NKEYS == 1, "the marker alone");
	lockdb_scope_key(
	    scope, lockdb_lua_incarnation.keys[0] + 1, key, sizeof key);
	args[LUA_INCARNATION_ARG_RUN_ID] = lockdb_runid_of(scope);
	args[LUA_INCARNATION_ARG_GRACE_MS] = lockdb_grace_of(scope);
	args[LUA_INCARNATION_ARG_READ_EVICTIONS] = lockdb.allow_eviction ||
		lockdb.quiet || chaos_fault == CHAOS_NO_EVICTION_CHECK
	    ? "0"
	    : "1";
	args[LUA_INCARNATION_ARG_SKEW_MS] = lockdb.skew;
	args[LUA_INCARNATION_ARG_KNOWN_ID] = lockdb_inc_of(scope);
	args[LUA_INCARNATION_ARG_EPOCH] = redisc_master_epoch();
	for (int i = 0; i < 1 + LUA_INCARNATION_NARGS; i++)
		lens[i] = strlen(argv[i]);
	redisc_eval(&lockdb_lua_incarnation.rs, 1, 1 + LUA_INCARNATION_NARGS,
	    argv, lens, cb, arg);
}

void
lockdb_script_markers(
    const char *runid, const int *slots, int n, redisc_cb *cb, void *arg)
{
	char key[LOCKDB_SEED_MAX][LOCKDB_KEY_MAX];
	const char *argv[1 + LOCKDB_SEED_MAX];
	size_t lens[1 + LOCKDB_SEED_MAX];

	_Static_assert(LUA_MARKERS_NKEYS == 0 && LUA_MARKERS_NARGS == 1,
	    "markers.lua takes the run_id, then the markers' keys");
	if (n < 1 || n > LOCKDB_SEED_MAX)
		fatalx("lockdb: %d markers in one call", n);
	argv[0] = runid;
	lens[0] = strlen(runid);
	for (int i = 0; i < n; i++) {
		lens[1 + i] = lockdb_scope_key(slots[i],
		    lockdb_lua_incarnation.keys[0] + 1, key[i], sizeof key[i]);
		argv[1 + i] = key[i];
	}
	redisc_eval_slot(
	    slots[0], &lockdb_lua_markers.rs, 1 + n, argv, lens, cb, arg);
}

void
lockdb_wait(const char *name, int replicas, uint64_t timeout_ms, lockdb_cb *cb,
    void *arg)
{
	char n[16], t[24];
	const char *argv[3] = { "WAIT", n, t };
	size_t lens[3];

	snprintf(n, sizeof n, "%d", replicas);
	snprintf(t, sizeof t, "%" PRIu64, timeout_ms);
	for (int i = 0; i < 3; i++)
		lens[i] = strlen(argv[i]);
	/* Where the write went (its slot's node), right after it. */
	redisc_command_slot(lockdb_scope_of(name), 3, argv, lens,
	    lockdb_reply_cb, lockdb_req_new(LDB_WAIT, NULL, name, cb, arg));
}

/*
 * CHAOS_NO_CLOCK_FENCE: the scripts that take a fence (lib/fence.lua's
 * next_fence) get a copy of their text that never raises the counter to
 * Redis's clock (nor to the incarnation's id, which is that clock too), so
 * a counter Redis forgot starts again at 1.
 */
static void
lockdb_chaos_no_clock(struct lockdb_script *s)
{
	/* Each test becomes "false", padded to its length: the lines keep
	 * their numbers and columns. */
	static const char *const raise[] = { "if f < now then",
		"if t[3] and f < t[3] then" };
	char *body = xstrdup(s->rs.body);

	for (size_t i = 0; i < sizeof raise / sizeof raise[0]; i++) {
		char *at = strstr(body, raise[i]);
		size_t n = strlen(raise[i]);

		if (at == NULL)
			fatalx("chaos: %s has no '%s'", s->rs.name, raise[i]);
		memset(at + 3, ' ', n - 3 - 5); /* between "if " and " then" */
		memcpy(at + 3, "false", 5);
	}
	s->rs.body = body;
}

/* Calls of s go in batches, as script number op of batch.lua (its
 * "-- wrap" lines' order), each batch with s's flags. */
static void
lockdb_batched(struct lockdb_script *s, struct lockdb_script *batch, int op)
{
	s->rs.batch = &batch->rs;
	s->rs.batch_op = op;
	redisc_script_add(&batch->rs);
}

/* Each script added to redisc, which loads it at every connect. */
/* body with every "from" written as "to" (a new allocation). */
static char *
lockdb_chaos_replace(const char *body, const char *from, const char *to)
{
	size_t nf = strlen(from), nt = strlen(to), n = 0;
	const char *p;
	char *out, *o;

	for (p = strstr(body, from); p != NULL; p = strstr(p + nf, from))
		n++;
	out = o = xmalloc(strlen(body) + n * nt + 1);
	for (p = body; (p = strstr(body, from)) != NULL; body = p + nf) {
		memcpy(o, body, (size_t)(p - body));
		o += p - body;
		memcpy(o, to, nt);
		o += nt;
	}
	strcpy(o, body);
	return out;
}

/*
 * CHAOS_LOCK_KEY_ONLY: a script is passed only the lock key and the key
 * of no name (the marker), and names the name's other keys as the lock
 * key and their suffix, (KEYS[1] .. ':fence'), as the scripts once did:
 * on a cluster, a script then meets a slot's migration half way through
 * ("non local key") instead of before it runs.
 */
static void
lockdb_chaos_lock_key_only(struct lockdb_script *s)
{
	char *body = xstrdup(s->rs.body), *next, from[16], to[64];
	int kept = 1;

	for (int i = s->nkeys; i >= 2; i--) {
		const char *suffix = s->keys[i - 1];

		snprintf(from, sizeof from, "KEYS[%d]", i);
		if (suffix[0] == '/') /* KEYS[2] once the others are done */
			snprintf(to, sizeof to, "KEYS[@]");
		else
			snprintf(to, sizeof to, "(KEYS[1] .. '%s')", suffix);
		next = lockdb_chaos_replace(body, from, to);
		free(body);
		body = next;
	}
	next = lockdb_chaos_replace(body, "KEYS[@]", "KEYS[2]");
	free(body);
	body = next;
	for (int i = 1; i < s->nkeys; i++)
		if (s->keys[i][0] == '/')
			s->keys[kept++] = s->keys[i];
	s->nkeys = kept;
	s->rs.body = body;
}

void
lockdb_scripts_init(void)
{
	if (chaos_fault == CHAOS_LOCK_KEY_ONLY) {
		struct lockdb_script *all[] = { &lockdb_lua_acquire,
			&lockdb_lua_share, &lockdb_lua_release,
			&lockdb_lua_cancel, &lockdb_lua_extend,
			&lockdb_lua_status, &lockdb_lua_who, &lockdb_lua_revoke,
			&lockdb_lua_check };

		for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
			lockdb_chaos_lock_key_only(all[i]);
	}
	if (chaos_fault == CHAOS_NO_CLOCK_FENCE) {
		lockdb_chaos_no_clock(&lockdb_lua_acquire);
		lockdb_chaos_no_clock(&lockdb_lua_share);
		lockdb_chaos_no_clock(&lockdb_lua_release);
	}
	/* A chaos fault breaks the scripts a call names; batch runs them
	 * unbroken, so no batch then. */
	if (chaos_fault == CHAOS_NONE) {
		lockdb_batched(
		    &lockdb_lua_acquire, &lockdb_lua_batch_acquire, 1);
		lockdb_batched(
		    &lockdb_lua_release, &lockdb_lua_batch_release, 2);
		lockdb_batched(&lockdb_lua_check, &lockdb_lua_batch_check, 3);
	}
	redisc_script_add(&lockdb_lua_acquire.rs);
	redisc_script_add(&lockdb_lua_share.rs);
	redisc_script_add(&lockdb_lua_release.rs);
	redisc_script_add(&lockdb_lua_cancel.rs);
	if (chaos_fault == CHAOS_BLIND_RELEASE)
		redisc_script_add(&lockdb_lua_blind_release.rs);
	redisc_script_add(&lockdb_lua_extend.rs);
	redisc_script_add(&lockdb_lua_status.rs);
	redisc_script_add(&lockdb_lua_who.rs);
	redisc_script_add(&lockdb_lua_revoke.rs);
	redisc_script_add(&lockdb_lua_check.rs);
	redisc_script_add(&lockdb_lua_incarnation.rs);
	redisc_script_add(&lockdb_lua_markers.rs);
}

/*
 * fake_lockdb: lockdb.h's functions for the engine's unit tests. Each call
 * is recorded and answered only when the test says (see fake_lockdb.h).
 */
#include <sys/queue.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_lockdb.h"
#include "lockdb.h"

static struct {
	TAILQ_HEAD(, fake_call) calls;
	bool ready;
	lockdb_news_fn *news;
	void (*connect)(void *);
	void *connect_arg;
	bool up;
	char broker[128];
	uint64_t handoff_ms;
	lockdb_inc_fn *inc_fn;
	unsigned inc_asks;
	unsigned scope_asks[4]; /* lockdb_incarnation_of, per scope below 4 */
	bool scope_down[4];	/* lockdb_up_for false for a scope's names */
	bool scoped;
	unsigned quiet; /* lockdb_quiet calls */
} fake = { .up = true };

static void
fake_init_once(void)
{
	if (fake.ready)
		return;
	TAILQ_INIT(&fake.calls);
	fake.ready = true;
}

/* A new pending call of op on name, last in the list. */
static struct fake_call *
fake_call_new(enum fake_op op, const char *name, lockdb_cb *cb, void *arg)
{
	struct fake_call *c = calloc(1, sizeof *c);

	if (c == NULL)
		abort();
	fake_init_once();
	c->op = op;
	snprintf(c->name, sizeof c->name, "%s", name);
	c->cb = cb;
	c->arg = arg;
	TAILQ_INSERT_TAIL(&fake.calls, c, entry);
	return c;
}

/* The ask's strings live only during the call: keep copies. */
static void
fake_keep_ask(struct fake_call *c, const struct lockdb_ask *a)
{
	c->ask = *a;
	snprintf(c->ask_token, sizeof c->ask_token, "%s", a->token);
	snprintf(c->ask_info, sizeof c->ask_info, "%s",
	    a->info != NULL ? a->info : "");
	c->ask.token = c->ask_token;
	c->ask.info = c->ask_info;
}

static void
fake_set_token(struct fake_call *c, const char *token)
{
	c->has_token = token != NULL;
	snprintf(c->token, sizeof c->token, "%s", token != NULL ? token : "");
}

void
lockdb_subscribe(lockdb_news_fn *fn)
{
	fake.news = fn;
}

void
lockdb_on_connect(void (*fn)(void *), void *arg)
{
	fake.connect = fn;
	fake.connect_arg = arg;
}

bool
lockdb_up(void)
{
	return fake.up;
}

bool
lockdb_up_for(const char *name)
{
	int scope = lockdb_scope_of(name);

	return fake.up && !(scope < 4 && fake.scope_down[scope]);
}

const char *
lockdb_refusal(void)
{
	return NULL;
}

void
lockdb_set_trust(uint64_t trust_ms)
{
}

void
lockdb_allow_eviction(bool allow)
{
}

void
lockdb_init(const char *prefix, const char *broker, uint64_t handoff_ms,
    uint64_t live_ms, uint64_t grace_ms, uint64_t step_ms)
{
	fake_init_once();
	snprintf(fake.broker, sizeof fake.broker, "%s", broker);
	fake.handoff_ms = handoff_ms;
}

void
lockdb_acquire(
    const char *name, const struct lockdb_ask *a, lockdb_cb *cb, void *arg)
{
	fake_keep_ask(fake_call_new(FAKE_ACQUIRE, name, cb, arg), a);
}

void
lockdb_release(const char *name, const char *token, uint64_t fence,
    enum lockdb_done done, uint64_t done_ms, lockdb_cb *cb, void *arg)
{
	struct fake_call *c = fake_call_new(FAKE_RELEASE, name, cb, arg);

	fake_set_token(c, token);
	c->fence = fence;
	c->done = done;
	c->done_ms = done_ms;
}

void
lockdb_cancel(const char *name, uint64_t ticket)
{
	fake_call_new(FAKE_CANCEL, name, NULL, NULL)->ticket = ticket;
}

void
lockdb_extend(const char *name, const char *token, uint64_t fence,
    uint64_t ttl_ms, lockdb_cb *cb, void *arg)
{
	struct fake_call *c = fake_call_new(FAKE_EXTEND, name, cb, arg);

	fake_set_token(c, token);
	c->fence = fence;
	c->ttl_ms = ttl_ms;
}

void
lockdb_keep(const char *name, const char *token, uint64_t fence,
    uint64_t keep_ms, lockdb_cb *cb, void *arg)
{
	lockdb_extend(name, token, fence, keep_ms, cb, arg);
}

void
lockdb_status(const char *name, uint64_t fence, const char *token,
    lockdb_cb *cb, void *arg)
{
	struct fake_call *c = fake_call_new(FAKE_STATUS, name, cb, arg);

	fake_set_token(c, token);
	c->fence = fence;
}

void
lockdb_who(const char *name, lockdb_cb *cb, void *arg)
{
	fake_call_new(FAKE_WHO, name, cb, arg);
}

void
lockdb_revoke(const char *name, uint64_t keep_ms, lockdb_cb *cb, void *arg)
{
	fake_call_new(FAKE_REVOKE, name, cb, arg)->keep_ms = keep_ms;
}

void
lockdb_check(const char *name, const char *token, uint64_t fence,
    uint64_t restore_ms, const char *info, lockdb_cb *cb, void *arg)
{
	struct fake_call *c = fake_call_new(FAKE_CHECK, name, cb, arg);

	fake_set_token(c, token);
	c->fence = fence;
	c->ttl_ms = info != NULL ? restore_ms : 0;
	snprintf(
	    c->ask_info, sizeof c->ask_info, "%s", info != NULL ? info : "");
}

void
lockdb_on_incarnation(lockdb_inc_fn *fn)
{
	fake.inc_fn = fn;
}

void
lockdb_incarnation(void)
{
	fake.inc_asks++;
}

void
lockdb_incarnation_of(int scope)
{
	fake.inc_asks++;
	if (scope >= 0 && scope < 4)
		fake.scope_asks[scope]++;
}

/* Scripted: a name "s<digit>:..." is in scope <digit>, any other in 0
 * (as on one Redis). */
int
lockdb_scope_of(const char *name)
{
	if (name[0] == 's' && name[1] >= '0' && name[1] <= '9' &&
	    name[2] == ':')
		return name[1] - '0';
	return 0;
}

bool
lockdb_scoped(void)
{
	return fake.scoped;
}

void
lockdb_quiet(bool quiet)
{
	fake.quiet += quiet;
}

unsigned
fake_quiet(void)
{
	return fake.quiet;
}

void
lockdb_wait(const char *name, int replicas, uint64_t timeout_ms, lockdb_cb *cb,
    void *arg)
{
	struct fake_call *c = fake_call_new(FAKE_WAIT, name, cb, arg);

	c->replicas = replicas;
	c->timeout_ms = timeout_ms;
}

/* The test's side. */

unsigned
fake_drop(void)
{
	struct fake_call *c;
	unsigned n = 0;

	fake_init_once();
	while ((c = TAILQ_FIRST(&fake.calls)) != NULL) {
		TAILQ_REMOVE(&fake.calls, c, entry);
		free(c);
		n++;
	}
	return n;
}

void
fake_reset(void)
{
	fake_drop();
	fake.news = NULL;
	fake.connect = NULL;
	fake.connect_arg = NULL;
	fake.up = true;
	fake.inc_fn = NULL;
	fake.inc_asks = 0;
	memset(fake.scope_asks, 0, sizeof fake.scope_asks);
	memset(fake.scope_down, 0, sizeof fake.scope_down);
	fake.scoped = false;
	fake.quiet = 0;
}

unsigned
fake_count(void)
{
	struct fake_call *c;
	unsigned n = 0;

	fake_init_once();
	TAILQ_FOREACH (c, &fake.calls, entry)
		n++;
	return n;
}

struct fake_call *
fake_pending(unsigned i)
{
	struct fake_call *c;

	fake_init_once();
	TAILQ_FOREACH (c, &fake.calls, entry)
		if (i-- == 0)
			return c;
	return NULL;
}

struct fake_call *
fake_next(void)
{
	return fake_pending(0);
}

struct fake_call *
fake_find(enum fake_op op, const char *name)
{
	struct fake_call *c;

	fake_init_once();
	TAILQ_FOREACH (c, &fake.calls, entry)
		if (c->op == op && strcmp(c->name, name) == 0)
			return c;
	return NULL;
}

/* The call leaves the list before its callback runs: the callback may
 * make new calls. */
void
fake_answer(struct fake_call *c, const struct lockdb_reply *r)
{
	lockdb_cb *cb = c->cb;
	void *arg = c->arg;

	TAILQ_REMOVE(&fake.calls, c, entry);
	free(c);
	if (cb != NULL)
		cb(r, arg);
}

void
fake_reply(struct fake_call *c, enum lockdb_status status)
{
	struct lockdb_reply r = { .status = status };

	/* A check found it held: with no end said, it trusts what it had. */
	if (c->op == FAKE_CHECK && status == LDB_OK)
		r.pttl = UINT64_MAX;
	fake_answer(c, &r);
}

void
fake_grant(struct fake_call *c, uint64_t fence)
{
	struct lockdb_reply r = { .status = LDB_OK, .fence = fence };

	fake_answer(c, &r);
}

void
fake_refuse(struct fake_call *c, uint64_t pttl, uint64_t fence)
{
	struct lockdb_reply r = {
		.status = LDB_NO, .pttl = pttl, .fence = fence
	};

	fake_answer(c, &r);
}

/* Refused with no lease to wait for: the queue's first ticket is this
 * broker's ticket head. */
void
fake_reply_head(struct fake_call *c, uint64_t head)
{
	struct lockdb_reply r = {
		.status = LDB_NO, .pttl = UINT64_MAX, .head = head
	};

	fake_answer(c, &r);
}

/* Bounded: an engine that asked again forever would hang the test. */
unsigned
fake_drain(enum lockdb_status status)
{
	struct fake_call *c;
	unsigned n = 0;

	fake_init_once();
	while ((c = TAILQ_FIRST(&fake.calls)) != NULL && n < 10000) {
		fake_reply(c, status);
		n++;
	}
	return n;
}

void
fake_news(enum lockdb_news_kind kind, const char *name, uint64_t fence)
{
	struct lockdb_news n = { .kind = kind, .name = name, .fence = fence };

	if (fake.news != NULL)
		fake.news(&n);
}

void
fake_handed(const char *name, uint64_t ticket, uint64_t fence,
    const char *token, uint64_t ttl_ms)
{
	struct lockdb_news n = { .kind = LDB_NEWS_HANDED,
		.name = name,
		.fence = fence,
		.ticket = ticket,
		.token = token,
		.ttl_ms = ttl_ms };

	if (fake.news != NULL)
		fake.news(&n);
}

void
fake_connect(void)
{
	if (fake.connect != NULL)
		fake.connect(fake.connect_arg);
}

void
fake_incarnation(bool first, bool changed, uint64_t grace_ms, uint64_t sent_ms)
{
	struct lockdb_inc inc = { first, changed, grace_ms, sent_ms };

	if (fake.inc_fn != NULL)
		fake.inc_fn(&inc);
}

void
fake_incarnation_at(bool changed, uint64_t sent_ms, uint64_t redis_ms)
{
	struct lockdb_inc inc = { false, changed, 0, sent_ms, redis_ms };

	if (fake.inc_fn != NULL)
		fake.inc_fn(&inc);
}

void
fake_incarnation_in(
    int scope, bool first, bool changed, uint64_t grace_ms, uint64_t sent_ms)
{
	struct lockdb_inc inc = { first, changed, grace_ms, sent_ms, 0, scope };

	if (fake.inc_fn != NULL)
		fake.inc_fn(&inc);
}

unsigned
fake_scope_asks(int scope)
{
	return fake.scope_asks[scope];
}

void
fake_set_scope_down(int scope, bool down)
{
	fake.scope_down[scope] = down;
}

void
fake_set_scoped(bool scoped)
{
	fake.scoped = scoped;
}

unsigned
fake_incarnation_asks(void)
{
	return fake.inc_asks;
}

void
fake_set_up(bool up)
{
	fake.up = up;
}

const char *
fake_op_name(enum fake_op op)
{
	static const char *const names[] = { "ACQUIRE", "RELEASE", "EXTEND",
		"STATUS", "WHO", "REVOKE", "CHECK", "WAIT", "CANCEL" };

	return names[op];
}

const char *
fake_broker(void)
{
	return fake.broker;
}

uint64_t
fake_handoff_ms(void)
{
	return fake.handoff_ms;
}

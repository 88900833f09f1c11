/*
 * redisc_batch: the calls of a batched script made in one turn of the
 * loop are held (redisc_eval) and sent at its end as calls of the batch
 * script, each still answered from its own element of the reply; calls
 * on one key keep their order. Calls redisc.c's requests only.
 */
#include <sys/queue.h>

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "log.h"
#include "redisc.h"
#include "redisc_int.h"
#include "stats.h"
#include "util.h"
#include "xmalloc.h"

/* The calls one batch carries, answered from its one reply. */
struct redisc_batch {
	int n;
	struct redisc_req *call[];
};

/* A batch's reply: each call gets its own element (or the batch's error,
 * or NULL). */
static void
redisc_batch_cb(const redisReply *reply, void *arg)
{
	struct redisc_batch *b = arg;
	bool each = reply != NULL && reply->type == REDIS_REPLY_ARRAY &&
	    reply->elements == (size_t)b->n;

	if (reply != NULL && reply->type != REDIS_REPLY_ERROR && !each)
		log_warnx(
		    "redis: a batch of %d calls had a malformed reply", b->n);
	for (int i = 0; i < b->n; i++) {
		struct redisc_req *call = b->call[i];
		const redisReply *r = each ? reply->element[i] : NULL;

		if (reply != NULL && reply->type == REDIS_REPLY_ERROR)
			r = reply;
		call->answered = true;
		call->cb(r, call->arg);
		redisc_req_free(call);
	}
	free(b);
}

/*
 * n calls of one script as one call of its batch: KEYS are every call's
 * keys, one call's after another's; ARGV n, then for each call its
 * script's number in the batch, how many keys it has, how many
 * arguments, and those.
 */
static void
redisc_batch_send(struct redisc_req **call, int n)
{
	static const char *argv[REDISC_BATCH_ARGS];
	static size_t lens[REDISC_BATCH_ARGS];
	static char num[REDISC_BATCH_MAX * 3 + 2][UTIL_U64_LEN];
	struct redisc_script *batch = call[0]->script->batch;
	int nkeys = 0, argc = 1, k = 0;
	struct redisc_batch *b;
	struct redisc_req *req;

	for (int i = 0; i < n; i++)
		for (int j = 3; j < 3 + call[i]->nkeys; j++) {
			lens[argc] = call[i]->lens[j];
			argv[argc++] = call[i]->argv[j];
			nkeys++;
		}
	lens[0] = util_u64str(num[k], (uint64_t)nkeys);
	argv[0] = num[k++];
	lens[argc] = util_u64str(num[k], (uint64_t)n);
	argv[argc++] = num[k++];
	for (int i = 0; i < n; i++) {
		struct redisc_req *c = call[i];
		int first = 3 + c->nkeys;
		uint64_t count[3] = { (uint64_t)c->script->batch_op,
			(uint64_t)c->nkeys, (uint64_t)(c->argc - first) };

		for (int j = 0; j < 3; j++) {
			lens[argc] = util_u64str(num[k], count[j]);
			argv[argc++] = num[k++];
		}
		for (int j = first; j < c->argc; j++) {
			lens[argc] = c->lens[j];
			argv[argc++] = c->argv[j];
		}
		TAILQ_REMOVE(&rc.inflight, c, entry);
	}
	stats[STAT_redis_batched_total] += n;
	b = xmalloc(sizeof *b + (size_t)n * sizeof b->call[0]);
	b->n = n;
	memcpy(b->call, call, (size_t)n * sizeof b->call[0]);
	req = redisc_req_new(argc, argv, lens, redisc_batch_cb, b);
	req->script = batch;
	req->nkeys = nkeys;
	redisc_submit(req);
}

/* Whether call c may go in one batch with first: the same script (a
 * batch has its script's flags), each call with its own keys. */
static bool
redisc_batch_fits(const struct redisc_req *first, const struct redisc_req *c)
{
	return c->script == first->script;
}

/* Calls of one script: a run of calls that fit in one batch as one
 * call, a call alone as itself. */
static void
redisc_send_runs(struct redisc_req **call, int n)
{
	int from = 0;

	while (from < n) {
		int to = from + 1;

		while (to < n && redisc_batch_fits(call[from], call[to]))
			to++;
		if (to - from == 1)
			redisc_send_tracked(call[from]);
		else
			redisc_batch_send(call + from, to - from);
		from = to;
	}
}

/* Whether calls a and b name the same first key (a lock). */
static bool
redisc_same_key(const struct redisc_req *a, const struct redisc_req *b)
{
	return a->lens[3] == b->lens[3] &&
	    memcmp(a->argv[3], b->argv[3], a->lens[3]) == 0;
}

/*
 * Calls that commute (no two of different scripts name one key): each
 * script's in batches of their own, the scripts in the order of their
 * first call.
 */
static void
redisc_send_phase(struct redisc_req **call, int n)
{
	struct redisc_req *group[REDISC_BATCH_MAX];

	for (int i = 0; i < n; i++) {
		const struct redisc_script *script;
		int g = 0;

		if (call[i] == NULL)
			continue;
		script = call[i]->script;
		for (int j = i; j < n; j++)
			if (call[j] != NULL && call[j]->script == script) {
				group[g++] = call[j];
				call[j] = NULL;
			}
		redisc_send_runs(group, g);
	}
}

/* Where the run of calls that commute, from call[from] on, ends: at
 * the first call on the key of an earlier one of another script. */
static int
redisc_phase_end(struct redisc_req **call, int from, int n)
{
	for (int to = from + 1; to < n; to++)
		for (int k = from; k < to; k++)
			if (call[k]->script != call[to]->script &&
			    redisc_same_key(call[k], call[to]))
				return to;
	return n;
}

/*
 * Send this turn's calls of batched scripts. A batch holds one script's
 * calls and has that script's flags (batch.lua): a batch of acquires is
 * refused whole by a Redis above maxmemory, as each would be alone, and
 * a batch of releases (allow-oom) still runs there. Calls of different
 * scripts on different keys commute, so each script's go together; a
 * call on the key of an earlier call of another script sends everything
 * before it first, so calls on one key keep their order.
 */
void
redisc_flush(void)
{
	struct redisc_req *call[REDISC_BATCH_MAX];
	int n = 0, from = 0;

	for (int i = 0; i < rc.nbatch; i++) {
		if (rc.batch[i]->answered)
			redisc_req_free(rc.batch[i]);
		else
			call[n++] = rc.batch[i];
	}
	rc.nbatch = 0;
	while (from < n) {
		int to = redisc_phase_end(call, from, n);

		redisc_send_phase(call + from, to - from);
		from = to;
	}
}

void
redisc_batch_ev_cb(evutil_socket_t fd, short what, void *arg)
{
	redisc_flush();
}

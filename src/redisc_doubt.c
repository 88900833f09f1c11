/*
 * redisc_doubt: a cluster's master heard from again after a silence longer
 * than its cluster-node-timeout may have been replaced meanwhile. Stopped
 * (SIGSTOP, a VM paused) or cut off, it was failed over; resumed, it runs
 * the commands waiting in its sockets before it hears that it was, and
 * answers them as the master it no longer is: a grant there would stand
 * beside its successor's. So from such a node's first reply on, the
 * replies to requests for a slot are held, in order, until a map asked
 * of another node after that reply says whether the node still serves
 * their slots: those it does are answered as they came, the others as
 * unknown (they may have run, on data its successor does not have),
 * while a redirect is followed as usual. A map the node itself answers
 * vouches for nothing: it may be as stale as the node. The same
 * knowledge of who answers picks the node any map is asked of
 * (redisc_map_pick): a node stopped with its socket open takes requests
 * and answers none. Calls redisc_cluster.c (the map) and redisc.c
 * (answering).
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "log.h"
#include "redisc.h"
#include "redisc_int.h"
#include "stats.h"
#include "util.h"
#include "xmalloc.h"

/* One reply held, with its request. */
struct redisc_held {
	struct redisc_req *req;
	redisReply *reply;
	struct redisc_held *next;
};

/* A copy of r that freeReplyObject frees (hiredis frees r itself once
 * its callback returns). */
static redisReply *
redisc_reply_copy(const redisReply *r)
{
	redisReply *c = xcalloc(1, sizeof *c);

	c->type = r->type;
	c->integer = r->integer;
	if (r->str != NULL) {
		c->len = r->len;
		c->str = xmalloc(r->len + 1);
		memcpy(c->str, r->str, r->len);
		c->str[r->len] = '\0';
	}
	if (r->element != NULL) {
		c->elements = r->elements;
		c->element = xcalloc(r->elements, sizeof *c->element);
		for (size_t i = 0; i < r->elements; i++)
			c->element[i] = redisc_reply_copy(r->element[i]);
	}
	return c;
}

void
redisc_node_quiet(int node, uint64_t ms)
{
	if (node >= 0 && node < rc.nnodes)
		rc.node[node].quiet_ms = ms;
}

/*
 * Whether node a is a better one to ask for the map than b (-1: none): a
 * map that did not answer lately (a node stopped with its socket open:
 * the kernel still takes connections and requests for it), then one in
 * doubt or out of the map, count against a node; then the one heard from
 * last.
 */
static bool
redisc_map_better(int a, int b, uint64_t now)
{
	const struct redisc_node *x = &rc.node[a], *y;
	bool xf, yf, xd, yd;

	if (b < 0)
		return true;
	y = &rc.node[b];
	xf = now < x->map_failed_ms + REDISC_MAP_AVOID_MS;
	yf = now < y->map_failed_ms + REDISC_MAP_AVOID_MS;
	if (xf != yf)
		return yf;
	xd = x->doubt_ms != 0 || !x->in_map;
	yd = y->doubt_ms != 0 || !y->in_map;
	if (xd != yd)
		return yd;
	return x->heard_ms > y->heard_ms;
}

int
redisc_map_pick(int avoid)
{
	uint64_t now = mono_ms();
	int best = -1;

	for (int i = 0; i < rc.nnodes; i++)
		if (i != avoid && rc.node[i].conn.up &&
		    redisc_map_better(i, best, now))
			best = i;
	return best;
}

/* The node to ask for a map that vouches for node: another that answers
 * (redisc_map_pick); -1: none is up. */
int
redisc_doubt_asker(int node)
{
	return redisc_map_pick(node);
}

/* The node has not been heard for longer than its quiet_ms: in doubt,
 * and a map asked of another node. A map asked of it already would
 * vouch for itself: forgotten. */
static void
redisc_doubt_begin(struct redisc_node *n, uint64_t now)
{
	char name[300];

	n->doubt_ms = now;
	STAT_INC(redis_doubts_total);
	log_debug(
	    "redis cluster: %s answered after %" PRIu64
	    " ms without a reply (cluster-node-timeout %" PRIu64
	    " ms): its replies wait for another master's map to say it still serves their slots",
	    redisc_node_name(n->conn.node, name, sizeof name),
	    now - n->heard_ms, n->quiet_ms);
	redisc_map_forget(n->conn.node);
	redisc_map_ask_other(n->conn.node);
}

bool
redisc_doubt_heard(
    int node, struct redisc_req *req, const redisReply *r, uint64_t now)
{
	struct redisc_node *n;
	struct redisc_held *h;

	if (!rc.cluster || node < 0 || node >= rc.nnodes)
		return false;
	n = &rc.node[node];
	if (n->quiet_ms > 0 && n->heard_ms != 0 && n->doubt_ms == 0 &&
	    now - n->heard_ms > n->quiet_ms && redisc_masters() > 1)
		redisc_doubt_begin(n, now);
	n->heard_ms = now;
	if (n->doubt_ms == 0 || req->slot < 0 || req->answered)
		return false;
	h = xmalloc(sizeof *h);
	h->req = req;
	h->reply = redisc_reply_copy(r);
	h->next = NULL;
	*n->held_tail = h;
	n->held_tail = &h->next;
	return true;
}

/* A held reply: answered as it came if its node still serves its slot
 * (or it redirects), else as unknown. */
static bool
redisc_doubt_settle(struct redisc_held *h)
{
	struct redisc_req *req = h->req;
	const redisReply *r = h->reply;
	bool redirect = redisc_cluster_word(r);
	bool deposed = false;

	if (req->answered) {
		redisc_req_free(req);
	} else if (redirect || redisc_route(req) == req->node) {
		redisc_reply_use(req, r);
	} else {
		STAT_INC(redis_deposed_total);
		rc.deposed = true;
		redisc_reply_use(req, NULL);
		rc.deposed = false;
		deposed = true;
	}
	freeReplyObject(h->reply);
	free(h);
	return deposed;
}

/* The node's held replies settled by the map in use. */
static void
redisc_doubt_end(struct redisc_node *n)
{
	struct redisc_held *h = n->held, *next;
	char name[300];
	unsigned deposed = 0;
	bool serves = n->in_map;

	n->held = NULL;
	n->held_tail = &n->held;
	n->doubt_ms = 0;
	for (; h != NULL; h = next) {
		next = h->next;
		deposed += redisc_doubt_settle(h);
	}
	if (deposed > 0 || !serves)
		log_warnx(
		    "redis cluster: %s answered after a silence but the map no longer names it for their slots (replaced, failing or moved): %u of its replies given up as unknown",
		    redisc_node_name(n->conn.node, name, sizeof name), deposed);
	/* A map that no longer names it came while it was in doubt, which
	 * kept its connection (redisc_node_park): closed now. */
	redisc_node_park(n->conn.node);
}

void
redisc_doubt_mapped(int asked, uint64_t asked_ms)
{
	bool left = false;

	for (int i = 0; i < rc.nnodes; i++) {
		struct redisc_node *n = &rc.node[i];

		if (n->doubt_ms == 0)
			continue;
		if (i != asked && n->doubt_ms <= asked_ms)
			redisc_doubt_end(n);
		else
			left = true;
	}
	if (!left)
		return;
	for (int i = 0; i < rc.nnodes; i++)
		if (rc.node[i].doubt_ms != 0) {
			redisc_map_ask_other(i);
			return;
		}
}

bool
redisc_deposed(void)
{
	return rc.deposed;
}

bool
redisc_doubted(int node)
{
	return node >= 0 && node < rc.nnodes && rc.node[node].doubt_ms != 0;
}

void
redisc_doubt_init(struct redisc_node *n)
{
	n->held = NULL;
	n->held_tail = &n->held;
}

/* At stop: what was held is answered as unknown. */
void
redisc_doubt_stop(void)
{
	for (int i = 0; i < rc.nnodes; i++) {
		struct redisc_node *n = &rc.node[i];
		struct redisc_held *h = n->held, *next;

		n->held = NULL;
		n->held_tail = &n->held;
		for (; h != NULL; h = next) {
			next = h->next;
			if (!h->req->answered)
				redisc_reply_use(h->req, NULL);
			else
				redisc_req_free(h->req);
			freeReplyObject(h->reply);
			free(h);
		}
	}
}

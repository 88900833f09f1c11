/*
 * metrics: one evhttp server. /metrics renders the stats table in the
 * Prometheus text format (counters end in _total, latencies are histograms
 * in seconds); /healthz answers 200 only while Redis is reachable (both
 * connections, its incarnation known), so a
 * load balancer or kubelet takes a broker without Redis out of service.
 */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "config.h"
#include "identity.h"
#include "lb_build.h"
#include "lock.h"
#include "lockdb.h"
#include "listener.h"
#include "log.h"
#include "metrics.h"
#include "redisc.h"
#include "stats.h"
#include "util.h"

static struct evhttp *metrics_http;
static uint64_t metrics_start_mono_ms, metrics_start_wall_ms;

/* The five EVENT LOST counters are one family with a reason label. */
static bool
metrics_is_lost(int i)
{
	return i >= STAT_lost_expired_total && i <= STAT_lost_revoked_total;
}

static void
metrics_lost(struct evbuffer *out)
{
	evbuffer_add_printf(out,
	    "# HELP lockbroker_lost_total EVENT LOST sent to holders, by reason\n"
	    "# TYPE lockbroker_lost_total counter\n");
	for (int i = STAT_lost_expired_total; i <= STAT_lost_revoked_total;
	     i++) {
		const char *name = stats_name((enum stats_id)i);
		int len =
		    (int)(strlen(name) - strlen("lost_") - strlen("_total"));

		evbuffer_add_printf(out,
		    "lockbroker_lost_total{reason=\"%.*s\"} %" PRId64 "\n", len,
		    name + strlen("lost_"), stats[i]);
	}
}

/* Open descriptors and resident memory, from /proc (Linux). */
static void
metrics_process(struct evbuffer *out)
{
	long fds = -1, size = 0, pages = 0, rss = -1;
	DIR *d = opendir("/proc/self/fd");
	FILE *f = fopen("/proc/self/statm", "r");
	struct dirent *e;

	if (d != NULL) {
		fds = 0;
		while ((e = readdir(d)) != NULL)
			fds += e->d_name[0] != '.';
		fds--; /* the directory's own descriptor */
		closedir(d);
	}
	if (f != NULL) {
		if (fscanf(f, "%ld %ld", &size, &pages) == 2)
			rss = pages * sysconf(_SC_PAGESIZE);
		fclose(f);
	}
	evbuffer_add_printf(out,
	    "# HELP lockbroker_build_info the daemon's version\n"
	    "# TYPE lockbroker_build_info gauge\n"
	    "lockbroker_build_info{version=\"%s\"} 1\n"
	    "# HELP lockbroker_uptime_seconds seconds since the daemon started\n"
	    "# TYPE lockbroker_uptime_seconds gauge\n"
	    "lockbroker_uptime_seconds %.3f\n"
	    "# HELP process_start_time_seconds start time, seconds since the epoch\n"
	    "# TYPE process_start_time_seconds gauge\n"
	    "process_start_time_seconds %.3f\n",
	    LB_VERSION, (double)(mono_ms() - metrics_start_mono_ms) / 1e3,
	    (double)metrics_start_wall_ms / 1e3);
	evbuffer_add_printf(out,
	    "# HELP lockbroker_oldest_hold_seconds how long the longest-held lock of this broker's clients has been held (0: none)\n"
	    "# TYPE lockbroker_oldest_hold_seconds gauge\n"
	    "lockbroker_oldest_hold_seconds %.3f\n",
	    (double)lock_oldest_hold_ms() / 1e3);
	if (fds >= 0)
		evbuffer_add_printf(out,
		    "# HELP process_open_fds open file descriptors\n"
		    "# TYPE process_open_fds gauge\nprocess_open_fds %ld\n",
		    fds);
	if (rss >= 0)
		evbuffer_add_printf(out,
		    "# HELP process_resident_memory_bytes resident memory\n"
		    "# TYPE process_resident_memory_bytes gauge\n"
		    "process_resident_memory_bytes %ld\n",
		    rss);
}

static void
metrics_counters(struct evbuffer *out)
{
	for (int i = 0; i < STAT__COUNT; i++) {
		const char *name = stats_name((enum stats_id)i);
		const char *type =
		    stats_is_counter((enum stats_id)i) ? "counter" : "gauge";

		if (metrics_is_lost(i)) {
			if (i == STAT_lost_expired_total)
				metrics_lost(out);
			continue;
		}

		evbuffer_add_printf(out,
		    "# HELP lockbroker_%s %s\n# TYPE lockbroker_%s %s\n"
		    "lockbroker_%s %" PRId64 "\n",
		    name, stats_help((enum stats_id)i), name, type, name,
		    stats[i]);
	}
}

/* Buckets are cumulative in the exposition; we keep them per bucket. */
static void
metrics_histograms(struct evbuffer *out)
{
	for (int i = 0; i < HIST__COUNT; i++) {
		const struct stats_hist *h = &stats_hists[i];
		const char *name = stats_hist_name((enum stats_hist_id)i);
		uint64_t cum = 0;

		evbuffer_add_printf(out,
		    "# HELP lockbroker_%s %s\n# TYPE lockbroker_%s histogram\n",
		    name, stats_hist_help((enum stats_hist_id)i), name);
		for (int b = 0; b < STATS_NBUCKETS; b++) {
			cum += h->buckets[b];
			evbuffer_add_printf(out,
			    "lockbroker_%s_bucket{le=\"%g\"} %" PRIu64 "\n",
			    name, (double)stats_bucket_us[b] / 1e6, cum);
		}
		evbuffer_add_printf(out,
		    "lockbroker_%s_bucket{le=\"+Inf\"} %" PRIu64 "\n"
		    "lockbroker_%s_sum %.6f\nlockbroker_%s_count %" PRIu64 "\n",
		    name, h->count, name, (double)h->sum_us / 1e6, name,
		    h->count);
	}
}

/* Each Redis node's figures, as metrics_node_each passes them. */
struct metrics_node {
	struct redisc_node_stats st;
	uint64_t incarnations;
	uint64_t grace_ms;
};

/* fn(node's figures, arg) for each master in a cluster's map (none on
 * one Redis, whose figures are the plain redis_* ones). */
static void
metrics_node_each(void (*fn)(const struct metrics_node *, void *), void *arg)
{
	struct metrics_node m;

	if (!redisc_cluster())
		return;
	for (int i = 0; i < redisc_nodes(); i++) {
		if (!redisc_node_stats(i, &m.st))
			continue;
		lockdb_node_stats(i, &m.incarnations, &m.grace_ms);
		fn(&m, arg);
	}
}

/* One node's series, each labelled with its address. */
static void
metrics_node_series(const struct metrics_node *m, void *arg)
{
	struct evbuffer *out = arg;
	const char *a = m->st.addr;

	evbuffer_add_printf(out,
	    "lockbroker_redis_node_up{node=\"%s\"} %d\n"
	    "lockbroker_redis_node_requests_total{node=\"%s\"} %" PRIu64 "\n"
	    "lockbroker_redis_node_timeouts_total{node=\"%s\"} %" PRIu64 "\n"
	    "lockbroker_redis_node_redirects_total{node=\"%s\"} %" PRIu64 "\n"
	    "lockbroker_redis_node_incarnations_total{node=\"%s\"} %" PRIu64
	    "\n"
	    "lockbroker_redis_node_grace_seconds{node=\"%s\"} %.3f\n",
	    a, m->st.up, a, m->st.requests, a, m->st.timeouts, a,
	    m->st.redirects, a, m->incarnations, a, (double)m->grace_ms / 1e3);
}

/* A cluster's masters, each on its own (none on one Redis). */
static void
metrics_nodes(struct evbuffer *out)
{
	if (!redisc_cluster())
		return;
	evbuffer_add_printf(out,
	    "# HELP lockbroker_redis_node_up 1 while the broker's connection to this cluster master is up\n"
	    "# TYPE lockbroker_redis_node_up gauge\n"
	    "# HELP lockbroker_redis_node_requests_total requests sent to this master\n"
	    "# TYPE lockbroker_redis_node_requests_total counter\n"
	    "# HELP lockbroker_redis_node_timeouts_total requests this master did not answer in time\n"
	    "# TYPE lockbroker_redis_node_timeouts_total counter\n"
	    "# HELP lockbroker_redis_node_redirects_total replies MOVED, ASK, TRYAGAIN or CLUSTERDOWN from this master\n"
	    "# TYPE lockbroker_redis_node_redirects_total counter\n"
	    "# HELP lockbroker_redis_node_incarnations_total new incarnations of this master's slots learned (a failover, a slot moved, a slot's first use)\n"
	    "# TYPE lockbroker_redis_node_incarnations_total counter\n"
	    "# HELP lockbroker_redis_node_grace_seconds how long a grace period of this master's slots has left\n"
	    "# TYPE lockbroker_redis_node_grace_seconds gauge\n");
	metrics_node_each(metrics_node_series, out);
}

/* Where INFO's node lines go, and the next one's number. */
struct metrics_info {
	struct evbuffer *out;
	unsigned i;
};

/* One node as INFO shows it: STAT redis_node<i> addr=...,up=... */
static void
metrics_node_info(const struct metrics_node *m, void *arg)
{
	struct metrics_info *mi = arg;

	evbuffer_add_printf(mi->out,
	    "STAT redis_node%u addr=%s,up=%d,requests=%" PRIu64
	    ",timeouts=%" PRIu64 ",redirects=%" PRIu64 ",incarnations=%" PRIu64
	    ",grace_ms=%" PRIu64 "\n",
	    mi->i++, m->st.addr, m->st.up, m->st.requests, m->st.timeouts,
	    m->st.redirects, m->incarnations, m->grace_ms);
}

void
metrics_info_nodes(struct evbuffer *out)
{
	struct metrics_info mi = { out, 0 };

	metrics_node_each(metrics_node_info, &mi);
}

/* One series of each identity's counter (value: its requests or denied). */
static void
metrics_ident_series(
    struct evbuffer *out, const char *name, const char *help, bool denied)
{
	const struct ident *id;

	evbuffer_add_printf(out,
	    "# HELP lockbroker_%s %s\n# TYPE lockbroker_%s counter\n", name,
	    help, name);
	for (int i = 0; i < ident_table_size(); i++) {
		id = ident_table_at(i);
		if (ident_usable(id))
			evbuffer_add_printf(out,
			    "lockbroker_%s{identity=\"%s\"} %" PRIu64 "\n",
			    name, id->name, denied ? id->denied : id->requests);
	}
}

/*
 * Per identity: the label's values come from the configuration only
 * (names of 1-64 bytes that need no escaping), so the series are as many
 * as its identities, whatever clients send.
 */
static void
metrics_identities(struct evbuffer *out)
{
	if (!ident_any())
		return;
	metrics_ident_series(out, "identity_requests_total",
	    "commands each identity sent after AUTH", false);
	metrics_ident_series(out, "identity_denied_total",
	    "commands refused with ERR DENIED, per identity", true);
}

void
metrics_render(struct evbuffer *out)
{
	metrics_counters(out);
	metrics_identities(out);
	metrics_histograms(out);
	metrics_nodes(out);
	metrics_process(out);
}

static void
metrics_page(struct evhttp_request *req, void *arg)
{
	struct evbuffer *out = evbuffer_new();

	if (out == NULL) {
		evhttp_send_error(req, HTTP_INTERNAL, NULL);
		return;
	}
	metrics_render(out);
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	evhttp_send_reply(req, HTTP_OK, "OK", out);
	evbuffer_free(out);
}

static void
metrics_healthz(struct evhttp_request *req, void *arg)
{
	struct evbuffer *out = evbuffer_new();
	const char *refusal = lockdb_refusal();
	bool sub = redisc_sub_up();
	bool up = lockdb_up() && sub && refusal == NULL;

	if (out == NULL) {
		evhttp_send_error(req, HTTP_INTERNAL, NULL);
		return;
	}
	/* The subscriber brings the news of other brokers' releases and of
	 * REVOKEs: without it holders here may not be told in time. */
	evbuffer_add_printf(out, "%s\n",
	    up			  ? "ok"
		: refusal != NULL ? refusal
		: !lockdb_up()	  ? "redis unavailable"
				  : "redis subscriber unavailable");
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "text/plain; charset=utf-8");
	evhttp_send_reply(
	    req, up ? HTTP_OK : 503, up ? "OK" : "Service Unavailable", out);
	evbuffer_free(out);
}

int
metrics_init(struct event_base *base, const struct config *cf)
{
	const struct config_metrics *m = &cf->metrics;
	int fd;

	metrics_start_mono_ms = mono_ms();
	metrics_start_wall_ms = wall_ms();
	/* A metrics socket systemd passed is served whatever the file says,
	 * as passed client sockets replace listen.*. */
	if (!m->enabled && listener_metrics_fd() < 0)
		return 0;
	if ((metrics_http = evhttp_new(base)) == NULL)
		fatalx("metrics: evhttp_new failed");
	evhttp_set_allowed_methods(
	    metrics_http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
	evhttp_set_max_headers_size(metrics_http, 8192);
	evhttp_set_max_body_size(metrics_http, 0);
	evhttp_set_timeout(metrics_http, 10);
	evhttp_set_cb(metrics_http, "/metrics", metrics_page, NULL);
	evhttp_set_cb(metrics_http, "/healthz", metrics_healthz, NULL);
	if ((fd = listener_metrics_fd()) >= 0) {
		evutil_make_socket_nonblocking(fd);
		if (evhttp_accept_socket(metrics_http, fd) != 0) {
			log_warn("metrics: socket %d from systemd", fd);
			return -1;
		}
		log_info("metrics on socket %d from systemd", fd);
		return 0;
	}
	if (evhttp_bind_socket_with_handle(
		metrics_http, m->address, (ev_uint16_t)m->port) == NULL) {
		log_warn("metrics: cannot listen on %s port %d", m->address,
		    m->port);
		return -1;
	}
	log_info("metrics on http://%s:%d/metrics", m->address, m->port);
	return 0;
}

void
metrics_shutdown(void)
{
	if (metrics_http != NULL)
		evhttp_free(metrics_http);
	metrics_http = NULL;
}

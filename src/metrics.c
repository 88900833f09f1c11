/*
 * metrics: one evhttp server. /metrics renders the stats table in the
 * Prometheus text format (counters end in _total, latencies are histograms
 * in seconds); /healthz answers 200 only while Redis is reachable, so a
 * load balancer or kubelet takes a broker without Redis out of service.
 */
#include <inttypes.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "config.h"
#include "lockdb.h"
#include "log.h"
#include "metrics.h"
#include "redisc.h"
#include "stats.h"

static struct evhttp *metrics_http;

static void
metrics_counters(struct evbuffer *out)
{
	for (int i = 0; i < STAT__COUNT; i++) {
		const char *name = stats_name((enum stats_id)i);
		const char *type =
		    stats_is_counter((enum stats_id)i) ? "counter" : "gauge";

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

void
metrics_render(struct evbuffer *out)
{
	metrics_counters(out);
	metrics_histograms(out);
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

	if (!m->enabled)
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

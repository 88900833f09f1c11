/*
 * metrics: Prometheus text at /metrics and a health check at /healthz, on
 * libevent's evhttp, when metrics.enabled. Everything shown comes from the
 * stats table, as INFO does.
 */
#ifndef LB_METRICS_H
#define LB_METRICS_H

struct event_base;
struct config;
struct evbuffer;

/* Returns -1 (and logs why) when the port cannot be bound. */
int metrics_init(struct event_base *base, const struct config *cf);
void metrics_shutdown(void);
/* The Prometheus exposition of every stat, appended to out. */
void metrics_render(struct evbuffer *out);
/* INFO's lines for each master of a cluster (none on one Redis). */
void metrics_info_nodes(struct evbuffer *out);

#endif

/* listener: the TCP and Unix sockets clients connect to. */
#ifndef LB_LISTENER_H
#define LB_LISTENER_H

struct event_base;
struct config;

/* Bind every configured socket; on failure logs why and returns -1. */
int listener_init(struct event_base *base, const struct config *cf);
/* The socket systemd passed named "metrics" (after listener_init), or
 * -1: metrics_init serves on it instead of metrics.address:port. */
int listener_metrics_fd(void);
/* Reload: the TLS listener's certificates read again (the running ones
 * kept, and the reason logged, if the new ones are bad). */
void listener_reload(void);
/* Stop accepting (graceful stop) and free the listeners. */
void listener_close(void);

#endif

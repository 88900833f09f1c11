/*
 * redisc_ev: hiredis on libevent, with fewer system calls than the adapter
 * hiredis ships: a persistent read event, and writes made once per loop
 * turn, after every callback of that turn has queued its commands.
 */
#ifndef LB_REDISC_EV_H
#define LB_REDISC_EV_H

struct event_base;
struct redisAsyncContext;

/* Drive ac from base (instead of redisLibeventAttach); -1 if it has
 * events already. */
int redisc_ev_attach(struct redisAsyncContext *ac, struct event_base *base);

#endif

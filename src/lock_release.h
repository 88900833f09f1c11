/*
 * lock_release: releases nobody waits for. A lock whose holder went away, a
 * grant nobody wants any more, a lease given up on: released in Redis (or,
 * for a holder that vanished, kept for locks.lock_delay_ms), and when Redis
 * does not hear of it, remembered and done when Redis is back. It calls
 * nothing of the engine above it: a release that went through is reported
 * through the callback given to lockrel_init.
 */
#ifndef LB_LOCK_RELEASE_H
#define LB_LOCK_RELEASE_H

#include <stdbool.h>
#include <stdint.h>

#include "lockdb.h"

struct event_base;
struct config;

/* name was released in Redis by a release sent at sent_ms (r says whether
 * it was handed to a queued waiter): its waiters here may try. */
struct lockdb_reply;
typedef void lockrel_released_fn(
    const char *name, const struct lockdb_reply *r, uint64_t sent_ms);

void lockrel_init(struct event_base *base, const struct config *cf,
    lockrel_released_fn *released);
/* Release name's grant under token with fence (0: whichever grant the
 * token has; only for a token nobody else knows); vanished: apply the
 * lock delay instead. lease_end_ms (monotonic, 0 if unknown) bounds how
 * long it is worth retrying if Redis does not answer. */
void lockrel_release(const char *name, const char *token, uint64_t fence,
    bool vanished, uint64_t lease_end_ms);
/* Redis did not hear of a release: do it when Redis is back (unless
 * stopping: then its lease ends it). It is done with its fence, so it
 * can never delete a later grant to the same token. */
void lockrel_remember(const char *name, const char *token, uint64_t fence,
    uint64_t lease_end_ms, enum lockdb_done done);
/* token asks for name again: releases of it owed are dropped, and those
 * in Redis now are not redone. */
void lockrel_forget(const char *name, const char *token);
/* A graceful stop: a release Redis does not hear of from now on is left
 * to its lease (one already owed is still tried while the loop runs). */
void lockrel_stop(void);
/* Forget what is still owed, saying so. */
void lockrel_shutdown(void);

#endif

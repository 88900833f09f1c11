/*
 * lock_news: what the subscriber connection hears (lockdb parses it into
 * struct lockdb_news): a release (the name's waiters here may go), a
 * hand-over to a ticket of ours, a REVOKE or another broker's release or
 * shortening of a grant (holds of it here are lost), or a new
 * subscription (news may have been missed: every hold is checked and
 * every waiter retakes its place). It owns struct lock_name's revoked and
 * heard. Built on lock_name, lock_hold, lock_queue and lock_handover; lock
 * starts it.
 */
#include "chaos.h"
#include "lockdb.h"
#include "lock_handover.h"
#include "lock_check.h"
#include "lock_hold.h"
#include "lock_name.h"
#include "lock_news.h"
#include "lock_queue.h"

/* After a (re)subscription, for each name: its waiters and holds may have
 * missed news. */
static void
locknews_missed(struct lock_name *ln, void *arg)
{
	lockhand_retake(ln, arg);
	lockcheck_recheck(ln);
}

/* (Re)subscribed: releases and revokes may have been missed meanwhile. */
static void
locknews_resubscribed(void)
{
	lockq_sub_epoch_next();
	lockname_foreach(locknews_missed, NULL);
}

/*
 * News on the release channel (lockdb parses it): a name was released, so
 * its waiters here may go; an admin revoked it (holds here with that fence
 * or an older one are lost); another broker released or shortened a grant
 * whose holds may be here too (they are lost); or the subscription was
 * made again, and news may have been missed.
 */
static void
locknews_cb(const struct lockdb_news *news)
{
	struct lock_name *ln;

	if (news->kind == LDB_NEWS_MISSED) {
		locknews_resubscribed();
		return;
	}
	if (news->kind == LDB_NEWS_HANDED) {
		lockhand_handed(news->name, news->ticket, news->fence,
		    news->token, 0, news->ttl_ms);
		return;
	}
	if ((ln = lockname_find(news->name)) == NULL)
		return;
	lockname_pin(ln);
	if (news->kind == LDB_NEWS_REVOKED) {
		if (news->fence > ln->revoked)
			ln->revoked = news->fence;
		lockhold_revoked(ln, news->fence);
	} else if (news->kind == LDB_NEWS_GONE &&
	    chaos_fault != CHAOS_NO_FOREIGN_NOTICE) {
		/* Its grant's answer may still be on its way here. */
		ln->heard[ln->nheard++ % 4] = news->fence;
		lockhold_released(ln, news->fence);
	}
	lockq_kick(ln);
	lockname_unref(ln);
}

void
locknews_init(void)
{
	lockdb_subscribe(locknews_cb);
}

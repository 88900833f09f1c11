/*
 * lock_news: the release channel's news, for the holds and waiters here.
 * Built on lock_name, lock_hold, lock_queue and lock_handover; lock
 * starts it.
 */
#ifndef LB_LOCK_NEWS_H
#define LB_LOCK_NEWS_H

/* Subscribe (lockdb) to the news. */
void locknews_init(void);

#endif

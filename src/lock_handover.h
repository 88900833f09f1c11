/*
 * lock_handover: takes (the tries of waiters behind the trier), their
 * answers and those of hand-over confirmations (side answers), the
 * hand-over across brokers, and retaking places. Built on lock_name,
 * lock_req, lock_hold, lock_release, lock_queue, lock_fill and
 * lock_grant; lock_try, lock_news and lock call it.
 */
#ifndef LB_LOCK_HANDOVER_H
#define LB_LOCK_HANDOVER_H

#include <stddef.h>
#include <stdint.h>

struct config;
struct lock_name;
struct lock_req;
struct lockdb_ask;
struct lockdb_reply;

void lockhand_init(const struct config *cf);
/* The scripts' view of req's try, with its ticket: the try takes its
 * place (info: LOCKREQ_INFO bytes). */
void lockhand_ask(
    struct lock_req *req, struct lockdb_ask *a, char *info, size_t len);
/* A waiter behind the trier takes its ticket's place (its one try). */
void lockhand_take(struct lock_req *req);
/* Redis says the queue's first ticket is head, ours and not the trier's:
 * its waiter asks now. */
void lockhand_ask_head(
    struct lock_name *ln, const struct lock_req *trier, uint64_t head);
/* The waiters behind the trier whose places may be gone take them
 * again, now that the trier's try is on its way. */
void lockhand_retake_rest(struct lock_name *ln);
/* req confirms the hand-over it was handed (lockreq_handed). */
void lockhand_confirm(struct lock_req *req);
/* The answer to a try that is not the trier's (a take, a confirmation,
 * or its wait for replicas). */
void lockhand_answer_cb(const struct lockdb_reply *r, void *arg);
/* A release handed name to this broker's ticket n, as fence under token:
 * sent_ms is when this broker sent that release, or 0 when another broker
 * made it, for ttl_ms (0: not said; the grant is confirmed first). */
void lockhand_handed(const char *name, uint64_t ticket, uint64_t fence,
    const char *token, uint64_t sent_ms, uint64_t ttl_ms);
/* Each waiter of ln takes its place again (arg unused: for
 * lockname_foreach). */
void lockhand_retake(struct lock_name *ln, void *arg);
/* Redis forgot its lock data: every waiter takes its place again. */
void lockhand_forgot(int scope);

#endif

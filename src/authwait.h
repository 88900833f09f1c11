/*
 * authwait: the back-off after wrong AUTH secrets, per peer address. Each
 * peer's AUTHs are judged one slot at a time, slots spaced by a delay that
 * doubles with its consecutive failures, so a peer gets only a few tries a
 * second however many connections it opens. Pure: the caller reads the
 * clock and keeps the timers. Depends on nothing else.
 */
#ifndef LB_AUTHWAIT_H
#define LB_AUTHWAIT_H

#include <stdint.h>

/* The first delay after a failure and its cap, in ms; a peer quiet for
 * AUTHWAIT_FORGET_MS starts afresh. */
#define AUTHWAIT_MIN_MS 50
#define AUTHWAIT_MAX_MS 2000
#define AUTHWAIT_FORGET_MS 600000

/* When an AUTH from peer ("ip:port", "[ip6]:port" or "unix") may be
 * judged (>= now_ms); the slot is taken. */
uint64_t authwait_slot(const char *peer, uint64_t now_ms);
/* An AUTH from peer was right at now_ms: it starts afresh. (A wrong one
 * needs no word: its slot already pushed the next one out.) */
void authwait_passed(const char *peer, uint64_t now_ms);
/* Forget every peer (tests). */
void authwait_reset(void);

#endif

/*
 * resp: a command as Redis's wire format (RESP) wants it, formatted into a
 * caller's buffer without allocating. Pure, so the unit tests cover it.
 */
#ifndef LB_RESP_H
#define LB_RESP_H

#include <stddef.h>

/* The RESP array of argc arguments (argv[i] of lens[i] bytes, any bytes)
 * in buf; returns its length, or 0 when it does not fit in len bytes. */
size_t resp_format(
    char *buf, size_t len, int argc, char *const *argv, const size_t *lens);

#endif

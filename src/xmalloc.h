/* xmalloc: allocation that cannot fail silently (aborts with a message). */
#ifndef LB_XMALLOC_H
#define LB_XMALLOC_H

#include <stddef.h>

void *xmalloc(size_t size);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* Wipe a secret string with explicit_bzero, then free it. NULL is fine. */
void freezero_str(char *s);

#endif

/* xmalloc: out of memory is not a condition a lock broker can serve through. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

static void __attribute__((noreturn)) xmalloc_die(size_t n, size_t size)
{
	fprintf(stderr,
	    "lockbrokerd: out of memory allocating %zu x %zu bytes\n", n, size);
	abort();
}

void *
xmalloc(size_t size)
{
	void *p;

	if ((p = malloc(size == 0 ? 1 : size)) == NULL)
		xmalloc_die(1, size);
	return p;
}

void *
xcalloc(size_t n, size_t size)
{
	void *p;

	if ((p = calloc(n == 0 ? 1 : n, size == 0 ? 1 : size)) == NULL)
		xmalloc_die(n, size);
	return p;
}

/* reallocarray semantics: the multiplication is checked, not trusted. */
void *
xrealloc(void *p, size_t n, size_t size)
{
	void *q;

	if (size != 0 && n > SIZE_MAX / size)
		xmalloc_die(n, size);
	if ((q = realloc(p, n * size == 0 ? 1 : n * size)) == NULL)
		xmalloc_die(n, size);
	return q;
}

char *
xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

char *
xstrndup(const char *s, size_t n)
{
	char *p;

	p = xmalloc(n + 1);
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

void
freezero_str(char *s)
{
	if (s == NULL)
		return;
	explicit_bzero(s, strlen(s));
	free(s);
}

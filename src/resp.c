/*
 * resp: formatting a command as RESP. hiredis would build the same bytes
 * with an allocation and a printf-style call per argument; a request here
 * is formatted once into a buffer that is reused.
 */
#include <string.h>

#include "resp.h"

/* Room for "$<20 digits>\r\n" plus the trailing "\r\n". */
#define RESP_HEADER_MAX 32

/* Append v in decimal; returns the new end. */
static char *
resp_utoa(char *p, size_t v)
{
	char tmp[24];
	int n = 0;

	do
		tmp[n++] = (char)('0' + v % 10);
	while ((v /= 10) > 0);
	while (n > 0)
		*p++ = tmp[--n];
	return p;
}

size_t
resp_format(
    char *buf, size_t len, int argc, char *const *argv, const size_t *lens)
{
	char *p = buf, *end = buf + len;

	if (argc < 0 || len < RESP_HEADER_MAX)
		return 0;
	*p++ = '*';
	p = resp_utoa(p, (size_t)argc);
	*p++ = '\r';
	*p++ = '\n';
	for (int i = 0; i < argc; i++) {
		if ((size_t)(end - p) < RESP_HEADER_MAX ||
		    (size_t)(end - p) - RESP_HEADER_MAX < lens[i])
			return 0;
		*p++ = '$';
		p = resp_utoa(p, lens[i]);
		*p++ = '\r';
		*p++ = '\n';
		memcpy(p, argv[i], lens[i]);
		p += lens[i];
		*p++ = '\r';
		*p++ = '\n';
	}
	return (size_t)(p - buf);
}

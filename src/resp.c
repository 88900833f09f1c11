/*
 * resp: formatting a command as RESP. hiredis would build the same bytes
 * with an allocation and a printf-style call per argument; a request here
 * is formatted once into a buffer that is reused.
 */
#include <string.h>

#include "resp.h"
#include "util.h"

/* Room for "$<20 digits>\r\n" plus the trailing "\r\n" (and the NUL
 * util_u64str writes, overwritten). */
#define RESP_HEADER_MAX 32

size_t
resp_format(
    char *buf, size_t len, int argc, char *const *argv, const size_t *lens)
{
	char *p = buf, *end = buf + len;

	if (argc < 0 || len < RESP_HEADER_MAX)
		return 0;
	*p++ = '*';
	p += util_u64str(p, (uint64_t)argc);
	*p++ = '\r';
	*p++ = '\n';
	for (int i = 0; i < argc; i++) {
		if ((size_t)(end - p) < RESP_HEADER_MAX ||
		    (size_t)(end - p) - RESP_HEADER_MAX < lens[i])
			return 0;
		*p++ = '$';
		p += util_u64str(p, lens[i]);
		*p++ = '\r';
		*p++ = '\n';
		memcpy(p, argv[i], lens[i]);
		p += lens[i];
		*p++ = '\r';
		*p++ = '\n';
	}
	return (size_t)(p - buf);
}

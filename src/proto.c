/*
 * proto: tokenizer and validators for protocol v1. Everything here is pure so
 * the Check tests can cover it byte by byte.
 */
#include <strings.h>

#include "proto.h"

static const char *const proto_err_names[] = {
	[PERR_PROTO] = "PROTO",
	[PERR_UNKNOWN] = "UNKNOWN",
	[PERR_ARGS] = "ARGS",
	[PERR_NAME] = "NAME",
	[PERR_HELD] = "HELD",
	[PERR_NOTHELD] = "NOTHELD",
	[PERR_LIMIT] = "LIMIT",
	[PERR_NOAUTH] = "NOAUTH",
	[PERR_AUTH] = "AUTH",
	[PERR_DENIED] = "DENIED",
	[PERR_UNAVAILABLE] = "UNAVAILABLE",
	[PERR_SHUTDOWN] = "SHUTDOWN",
	[PERR_INTERNAL] = "INTERNAL",
};

const char *
proto_err_name(enum proto_err err)
{
	return proto_err_names[err];
}

/* A byte that may not appear in a line at all: C0 controls but tab, DEL. */
static bool
proto_bad_byte(unsigned char ch)
{
	return (ch < 0x20 && ch != '\t') || ch == 0x7f;
}

int
proto_split(char *line, size_t len, char **argv, int max)
{
	int argc = 0;
	size_t i = 0;

	for (size_t j = 0; j < len; j++)
		if (proto_bad_byte((unsigned char)line[j]))
			return PROTO_SPLIT_BADBYTE;
	while (i < len) {
		while (i < len && (line[i] == ' ' || line[i] == '\t'))
			line[i++] = '\0';
		if (i == len)
			break;
		if (argc == max)
			return PROTO_SPLIT_TOOMANY;
		argv[argc++] = &line[i];
		while (i < len && line[i] != ' ' && line[i] != '\t')
			i++;
	}
	line[len] = '\0';
	return argc;
}

int
proto_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (*s == '\0')
		return -1;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		uint64_t d = (uint64_t)(*s - '0');

		/* Checked before the multiply, so 2^64 and up never wrap. */
		if (d > max || v > (max - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

bool
proto_valid_name(const char *s)
{
	size_t n = 0;

	for (; *s != '\0'; s++, n++) {
		unsigned char ch = (unsigned char)*s;

		if (n == PROTO_NAME_MAX || ch <= 0x20 || ch == 0x7f)
			return false;
	}
	return n > 0;
}

bool
proto_valid_token(const char *s)
{
	size_t n = 0;

	for (; *s != '\0'; s++, n++) {
		char ch = *s;
		bool ok = (ch >= 'a' && ch <= 'z') ||
		    (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		    ch == '_' || ch == '.' || ch == '-';

		if (n == PROTO_TOKEN_MAX || !ok)
			return false;
	}
	return n > 0;
}

bool
proto_keyword(const char *s, const char *kw)
{
	return strcasecmp(s, kw) == 0;
}

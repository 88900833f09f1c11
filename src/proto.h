/*
 * proto: the pure parts of protocol v1 — splitting a line into tokens, and
 * checking integers, lock names and tokens. No sockets, no state.
 */
#ifndef LB_PROTO_H
#define LB_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROTO_MAX_ARGS 16
#define PROTO_NAME_MAX 200
#define PROTO_TOKEN_MAX 64

/* The error codes of docs/protocol.md §6, in one place. */
enum proto_err {
	PERR_PROTO,
	PERR_UNKNOWN,
	PERR_ARGS,
	PERR_NAME,
	PERR_HELD,
	PERR_NOTHELD,
	PERR_LIMIT,
	PERR_NOAUTH,
	PERR_AUTH,
	PERR_DENIED,
	PERR_UNAVAILABLE,
	PERR_SHUTDOWN,
	PERR_INTERNAL,
};

const char *proto_err_name(enum proto_err err);

/*
 * Split line[0..len) in place into at most max tokens separated by spaces or
 * tabs; each token is NUL-terminated (line must have room for line[len]). Returns the number of tokens, or:
 */
#define PROTO_SPLIT_BADBYTE (-1) /* a control byte other than tab, or DEL */
#define PROTO_SPLIT_TOOMANY (-2) /* more than max tokens */
int proto_split(char *line, size_t len, char **argv, int max);

/*
 * Parse plain decimal (no sign, no spaces, at least one digit) into *out.
 * Returns 0, or -1 if it is not a number or is greater than max.
 */
int proto_parse_u64(const char *s, uint64_t max, uint64_t *out);

/* Lock names: 1..200 bytes, each in 0x21..0x7E or 0x80..0xFF. */
bool proto_valid_name(const char *s);

/* Client tokens: 1..64 of [A-Za-z0-9_.-]. */
bool proto_valid_token(const char *s);

/* Case-insensitive keyword match (verbs and keywords). */
bool proto_keyword(const char *s, const char *kw);

#endif

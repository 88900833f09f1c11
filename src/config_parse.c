/*
 * config_parse: the file's text into libconfig's tree, refusing what
 * libconfig 1.5 would read differently from us (@include, an integer too
 * large for atoi) after a scan shaped like its lexer. Calls only
 * config.c's error helper.
 */
#include <ctype.h>
#include <stdbool.h>
#include <errno.h>
#include <inttypes.h>
#include <libconfig.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_int.h"

/* Skip a comment or string starting at p, counting lines; NULL if none. */
static const char *
config_lex_skip(const char *p, unsigned *line)
{
	const char *end;

	if (*p == '#' || (p[0] == '/' && p[1] == '/'))
		end = p + strcspn(p, "\n");
	else if (p[0] == '/' && p[1] == '*') {
		if ((end = strstr(p + 2, "*/")) != NULL)
			end += 2;
		else
			end = p + strlen(p);
	} else if (*p == '"') {
		for (end = p + 1; *end != '\0' && *end != '"'; end++) {
			if (*end == '\\' && end[1] != '\0')
				end++;
		}
		if (*end == '"')
			end++;
	} else
		return NULL;
	for (; p < end; p++)
		*line += (*p == '\n');
	return end;
}

/* What the text scan found that libconfig 1.5 would get silently wrong. */
struct config_lex {
	unsigned include_line; /* first @include; 0 if none */
	unsigned big_line;     /* first integer atoi() would truncate */
	char big[32];	       /* that integer as written */
};

/* Names may hold digits ("x5000000000"): they are not numbers. */
static const char *
config_lex_name(const char *p)
{
	while (
	    isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '*')
		p++;
	return p;
}

/*
 * libconfig 1.5 reads an integer without an L suffix with atoi(), so
 * 5000000000 silently becomes 705032704 and would pass a range check. Note
 * the first such literal; floats and L-suffixed integers are fine.
 */
static const char *
config_lex_number(
    const char *buf, const char *p, unsigned line, struct config_lex *lx)
{
	const char *start = (p > buf && p[-1] == '-') ? p - 1 : p;
	int hex = (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'));
	long long v;

	p += hex ? 2 : 0;
	while (hex ? isxdigit((unsigned char)*p) : isdigit((unsigned char)*p))
		p++;
	if (*p == 'L' || *p == '.' || *p == 'e' || *p == 'E') {
		while (isalnum((unsigned char)*p) || *p == '.' || *p == '+' ||
		    *p == '-')
			p++;
		return p;
	}
	errno = 0;
	v = strtoll(start, NULL, hex ? 16 : 10);
	if (lx->big_line == 0 &&
	    (errno == ERANGE || v > INT_MAX || v < INT_MIN)) {
		lx->big_line = line;
		snprintf(
		    lx->big, sizeof lx->big, "%.*s", (int)(p - start), start);
	}
	return p;
}

/* A scan shaped like libconfig's lexer: comments, strings, names, numbers. */
static void
config_lex(const char *buf, struct config_lex *lx)
{
	const char *p = buf, *next;
	unsigned line = 1;

	memset(lx, 0, sizeof *lx);
	while (*p != '\0') {
		if ((next = config_lex_skip(p, &line)) != NULL)
			p = next;
		else if (isalpha((unsigned char)*p) || *p == '*')
			p = config_lex_name(p);
		else if (isdigit((unsigned char)*p) ||
		    (*p == '.' && isdigit((unsigned char)p[1])))
			p = config_lex_number(buf, p, line, lx);
		else {
			if (*p == '@' && lx->include_line == 0)
				lx->include_line = line;
			line += (*p++ == '\n');
		}
	}
}

/* libconfig keeps no pointer from text to setting: find one by its line. */
static void
config_name_at(
    const config_setting_t *root, unsigned line, char *name, size_t len)
{
	const config_setting_t *g, *s;
	int i, j;

	name[0] = '\0';
	for (i = 0; i < config_setting_length(root); i++) {
		g = config_setting_get_elem(root, i);
		if (config_setting_source_line(g) == line)
			snprintf(name, len, "%s", config_setting_name(g));
		if (!config_setting_is_group(g))
			continue;
		for (j = 0; j < config_setting_length(g); j++) {
			s = config_setting_get_elem(g, j);
			if (config_setting_source_line(s) == line)
				snprintf(name, len, "%s.%s",
				    config_setting_name(g),
				    config_setting_name(s));
		}
	}
}

/* Where a setting of a group was first seen: its dotted key and line. */
struct config_seen {
	char key[128];
	unsigned line;
};

#define CONFIG_SEEN_MAX 512
#define CONFIG_DEPTH_MAX 16

/* The scan's place: the groups it is in ("" for a list's element, whose
 * names are its own), and the settings seen in them. */
struct config_dup {
	char path[CONFIG_DEPTH_MAX][128];
	int depth;
	char pending[64]; /* the last setting's name, for a '{' to open */
	struct config_seen seen[CONFIG_SEEN_MAX];
	int nseen;
	int in_list; /* the depth of '(' and '[' open */
};

/* A setting named at line: its key, and the line it was first seen at if
 * it was (0 if not); it is remembered if it is new. */
static unsigned
config_dup_note(struct config_dup *d, const char *name, unsigned line,
    char *key, size_t len)
{
	const char *in = d->depth > 0 ? d->path[d->depth - 1] : "";

	if (d->depth > 0 && in[0] == '\0')
		return 0; /* in a list's element */
	snprintf(key, len, "%s%s%s", in, in[0] != '\0' ? "." : "", name);
	for (int i = 0; i < d->nseen; i++)
		if (strcmp(d->seen[i].key, key) == 0)
			return d->seen[i].line;
	if (d->nseen < CONFIG_SEEN_MAX) {
		snprintf(
		    d->seen[d->nseen].key, sizeof d->seen[0].key, "%s", key);
		d->seen[d->nseen++].line = line;
	}
	return 0;
}

/* A '{' opens the pending setting's group, or a list's element. */
static void
config_dup_open(struct config_dup *d)
{
	const char *in = d->depth > 0 ? d->path[d->depth - 1] : "";

	if (d->depth == CONFIG_DEPTH_MAX)
		return;
	if (d->in_list > 0 || d->pending[0] == '\0' ||
	    (d->depth > 0 && in[0] == '\0'))
		d->path[d->depth][0] = '\0';
	else
		snprintf(d->path[d->depth], sizeof d->path[0], "%s%s%s", in,
		    in[0] != '\0' ? "." : "", d->pending);
	d->depth++;
	d->pending[0] = '\0';
}

/*
 * libconfig says "duplicate setting name" and the line, not which: a scan
 * like config_lex's, keeping the group each setting is in, finds the key
 * named at that line that was named before, and where. False if none.
 */
static bool
config_dup_find(
    const char *buf, unsigned at, char *key, size_t len, unsigned *first)
{
	struct config_dup *d = calloc(1, sizeof *d);
	const char *p = buf, *next, *end;
	unsigned line = 1;
	bool found = false;

	if (d == NULL)
		return false;
	while (*p != '\0' && !found && line <= at) {
		if ((next = config_lex_skip(p, &line)) != NULL) {
			p = next;
		} else if (isalpha((unsigned char)*p) || *p == '*') {
			end = config_lex_name(p);
			next = end + strspn(end, " \t\r\n");
			if (*next == '=' || *next == ':') {
				snprintf(d->pending, sizeof d->pending, "%.*s",
				    (int)(end - p), p);
				*first = config_dup_note(
				    d, d->pending, line, key, len);
				found = *first != 0 && line == at;
			}
			p = end;
		} else {
			if (*p == '{')
				config_dup_open(d);
			else if (*p == '}' && d->depth > 0)
				d->depth--;
			else if (*p == '(' || *p == '[')
				d->in_list++;
			else if ((*p == ')' || *p == ']') && d->in_list > 0)
				d->in_list--;
			line += (*p++ == '\n');
		}
	}
	free(d);
	return found;
}

/* libconfig's own error, with the key and its first line for a
 * duplicate. */
static int
config_parse_error(struct config_load *ld, config_t *lc, const char *text)
{
	unsigned line = (unsigned)config_error_line(lc), first = 0;
	const char *why = config_error_text(lc);
	char key[128];

	if (strcmp(why, "duplicate setting name") == 0 &&
	    config_dup_find(text, line, key, sizeof key, &first))
		return config_at(
		    ld, line, key, "%s (first at line %u)", why, first);
	return config_at(ld, line, NULL, "%s", why);
}

/* Parse, refusing what libconfig 1.5 would read differently from us. */
int
config_parse(struct config_load *ld, config_t *lc, const char *text)
{
	struct config_lex lx;
	char name[128];

	config_lex(text, &lx);
	if (lx.include_line != 0)
		return config_at(
		    ld, lx.include_line, NULL, "@include is not supported");
	if (config_read_string(lc, text) != CONFIG_TRUE)
		return config_parse_error(ld, lc, text);
	if (lx.big_line == 0)
		return 0;
	config_name_at(config_root_setting(lc), lx.big_line, name, sizeof name);
	return config_at(ld, lx.big_line, name[0] != '\0' ? name : NULL,
	    "%s is too large for a plain integer; write %sL", lx.big, lx.big);
}

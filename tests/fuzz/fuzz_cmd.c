/*
 * fuzz_cmd: libFuzzer over what the network can reach first — the line
 * framing rules, the tokenizer, the command table and every handler's
 * parsing. Input is a stream of lines, as a client would send. Redis is
 * not connected, so requests that get that far are answered UNAVAILABLE
 * from the loop, which runs after each one.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "cmd.h"
#include "config.h"
#include "lock.h"
#include "log.h"
#include "proto.h"
#include "redisc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct config cf;
static struct event_base *base;
static bool resumed;

static void
fuzz_resume(struct session *s)
{
	resumed = true;
}

/* An identity that may lock and read team/ only, so the rights check and
 * re-AUTH are reached too (corpus/identity). */
static void
fuzz_identity(void)
{
	struct config_identity *id = calloc(1, sizeof *id);

	id->name = strdup("team");
	id->secret = strdup("fuzz-team");
	id->secret_file = strdup("");
	id->names[id->nnames++] = strdup("team/");
	id->rights = CONFIG_RIGHT_LOCK | CONFIG_RIGHT_READ;
	cf.auth.identities.v = id;
	cf.auth.identities.n = 1;
}

static void
fuzz_init(void)
{
	log_init(LOG_LVL_ERROR, false);
	config_defaults(&cf);
	free(cf.auth.secret);
	cf.auth.secret = strdup("fuzz-secret");
	fuzz_identity();
	cf.limits.max_waiters = 100; /* bounds the releases kept for Redis */
	base = event_base_new();
	redisc_init(base, &cf.redis);
	lock_init(base, &cf);
	cmd_init(&cf, NULL);
}

/*
 * One request: an async one is answered from the loop before the next.
 * Only an ACQUIRE or a FILL may stay unanswered (they wait); the session
 * then ends, which must cancel it cleanly.
 */
static enum cmd_result
fuzz_line(struct session *s, char *line, size_t len)
{
	size_t skip = strspn(line, " \t");
	bool acquire = strncasecmp(line + skip, "ACQUIRE", 7) == 0 ||
	    strncasecmp(line + skip, "FILL", 4) == 0;
	enum cmd_result r;

	resumed = false;
	r = cmd_execute(s, line, len);
	for (int i = 0; r == CMD_ASYNC && !resumed && i < 100; i++)
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	if (r == CMD_ASYNC && !resumed) {
		if (!acquire)
			abort(); /* a request never answered is a bug */
		return CMD_CLOSE;
	}
	return r;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	struct evbuffer *out;
	struct session s;
	char line[1024];
	size_t i = 0;

	if (!ready) {
		fuzz_init();
		ready = true;
	}
	out = evbuffer_new();
	cmd_session_init(&s, 1, NULL, out, fuzz_resume, NULL);
	/* The first byte decides whether this session has AUTHed. */
	s.authed = size > 0 && (data[0] & 1);
	while (i < size) {
		const uint8_t *nl = memchr(data + i, '\n', size - i);
		size_t len = nl != NULL ? (size_t)(nl - (data + i)) : size - i;

		/* Framing as client.c does it: CR dropped, long lines out. */
		if (len > 0 && data[i + len - 1] == '\r')
			len--;
		if (len < sizeof line) {
			memcpy(line, data + i, len);
			line[len] = '\0';
			if (fuzz_line(&s, line, len) == CMD_CLOSE)
				break;
		}
		i += (nl != NULL ? (size_t)(nl - (data + i)) + 1 : size - i);
	}
	cmd_session_end(&s, false);
	event_base_loop(base, EVLOOP_NONBLOCK);
	evbuffer_free(out);
	return 0;
}

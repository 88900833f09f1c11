/*
 * cmd_auth: AUTH and the secrets it compares with. A wrong secret is
 * logged at most once a second and closes the connection; a peer that
 * sent wrong ones lately waits for its slot (authwait). The secrets are
 * read at start and on reload, and wiped at shutdown. Calls authwait,
 * util and log.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "authwait.h"
#include "cmd.h"
#include "cmd_int.h"
#include "config.h"
#include "log.h"
#include "xmalloc.h"

/* The connection's address, for the AUTH back-off. */
static const char *
cmd_peer(const struct session *s)
{
	return s->owner.peer != NULL ? s->owner.peer : "-";
}

/* At most one "AUTH failed" line a second: a guesser must not flood the
 * log. */
static void
cmd_auth_log(const struct session *s)
{
	uint64_t now = mono_ms();

	if (now - cmds.auth_logged_ms < 1000 && cmds.auth_logged_ms != 0) {
		cmds.auth_unlogged++;
		return;
	}
	if (cmds.auth_unlogged > 0)
		log_info(
		    "client %" PRIu64
		    " [%s]: AUTH failed (and %u more since the last such line)",
		    s->id, cmd_peer(s), cmds.auth_unlogged);
	else
		log_info(
		    "client %" PRIu64 " [%s]: AUTH failed", s->id, cmd_peer(s));
	cmds.auth_logged_ms = now;
	cmds.auth_unlogged = 0;
}

/* Right secret: OK; wrong: ERR AUTH, and the connection closes. The
 * admin secret authenticates too, and allows REVOKE. */
static enum cmd_result
cmd_auth_judge(struct session *s, const char *secret)
{
	bool admin =
	    cmds.admin[0] != '\0' && util_secret_equal(secret, cmds.admin);
	bool user =
	    cmds.secret[0] != '\0' && util_secret_equal(secret, cmds.secret);

	if (admin || user) {
		authwait_passed(cmd_peer(s), mono_ms());
		s->authed = true;
		s->admin = s->admin || admin;
		evbuffer_add(s->out, "OK\n", 3);
		return CMD_DONE;
	}
	cmd_auth_log(s);
	cmd_error(s, PERR_AUTH, "wrong secret");
	return CMD_CLOSE;
}

/* The slot of an AUTH held back came. */
static void
cmd_auth_later_cb(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;

	s->quit = cmd_auth_judge(s, s->auth_secret) == CMD_CLOSE;
	freezero_str(s->auth_secret);
	s->auth_secret = NULL;
	s->resume(s);
}

/*
 * A wrong secret closes the connection: no guessing on one socket; and a
 * peer that sent wrong ones lately has its next AUTH judged only in its
 * slot (authwait), however many connections it opens. Without either
 * secret, AUTH is a no-op that says OK.
 */
enum cmd_result
cmd_auth(struct session *s, int argc, char **argv)
{
	uint64_t now = mono_ms(), slot;
	struct timeval tv;

	if (cmds.secret[0] == '\0' && cmds.admin[0] == '\0') {
		s->authed = true;
		evbuffer_add(s->out, "OK\n", 3);
		return CMD_DONE;
	}
	slot = authwait_slot(cmd_peer(s), now);
	if (slot <= now || cmds.base == NULL)
		return cmd_auth_judge(s, argv[1]);
	/* Its peer sent wrong secrets lately: judged in its slot. */
	s->auth_secret = xstrdup(argv[1]);
	if (s->auth_ev == NULL &&
	    (s->auth_ev = evtimer_new(cmds.base, cmd_auth_later_cb, s)) == NULL)
		fatalx("cmd: evtimer_new failed");
	tv = util_timeval(slot - now);
	evtimer_add(s->auth_ev, &tv);
	return CMD_ASYNC;
}

/* A secret in force: its file wins over its inline value. */
static char *
cmd_secret(const char *inline_value, const char *file, const char *key)
{
	char *secret;

	if (file[0] == '\0')
		return xstrdup(inline_value);
	if ((secret = util_read_secret(file)) == NULL)
		log_warn("%s %s", key, file);
	return secret;
}

/* Both secrets, or neither (and *secret, *admin untouched). */
bool
cmd_secrets(const struct config *cf, char **secret, char **admin)
{
	char *s, *a;

	if ((s = cmd_secret(cf->auth.secret, cf->auth.secret_file,
		 "auth.secret_file")) == NULL)
		return false;
	if ((a = cmd_secret(cf->auth.admin_secret, cf->auth.admin_secret_file,
		 "auth.admin_secret_file")) == NULL) {
		freezero_str(s);
		return false;
	}
	if (a[0] != '\0' && strcmp(a, s) == 0) {
		log_warnx("auth.admin_secret must differ from auth.secret");
		freezero_str(s);
		freezero_str(a);
		return false;
	}
	*secret = s;
	*admin = a;
	return true;
}

/* New secrets apply to AUTHs from now on. */
void
cmd_reload(void)
{
	char *secret, *admin;

	if (!cmd_secrets(cmds.cf, &secret, &admin)) {
		log_warnx("reload: keeping the old AUTH secrets");
		return;
	}
	freezero_str(cmds.secret);
	freezero_str(cmds.admin);
	cmds.secret = secret;
	cmds.admin = admin;
}

void
cmd_shutdown(void)
{
	freezero_str(cmds.secret);
	freezero_str(cmds.admin);
	cmds.secret = NULL;
	cmds.admin = NULL;
}

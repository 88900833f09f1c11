/*
 * cmd_auth: AUTH, which identity a secret names, and ERR DENIED. A wrong
 * secret is logged at most once a second and closes the connection; a
 * peer that sent wrong ones lately waits for its slot (authwait). The
 * identities and their secrets are the identity module's, read at start
 * and on reload. Calls authwait, identity, util and log.
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
#include "identity.h"
#include "tls.h"
#include "lock.h"
#include "log.h"
#include "stats.h"
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

/*
 * A connection may change identity by AUTH again only while it holds
 * nothing: a hold must stay with the identity that took it (WHO shows
 * it, and its rights were checked for it). From no identity (AUTH was
 * not needed) to one is fine, as before.
 */
static bool
cmd_auth_switch_ok(const struct session *s, const struct ident *id)
{
	return s->ident == NULL || s->ident == id || s->owner.nholds == 0;
}

/* Let id in: the session holds a reference to it, and WHO shows it. */
static void
cmd_let_in(struct session *s, struct ident *id)
{
	ident_unref(s->ident);
	s->ident = ident_ref(id);
	s->authed = true;
	lockreq_owner_ident(&s->owner, id->name);
}

static void
cmd_auth_as(struct session *s, struct ident *id)
{
	cmd_let_in(s, id);
	log_info("client %" PRIu64 " [%s]: AUTH as %s", s->id, cmd_peer(s),
	    id->name);
}

/* A name of the certificate that an identity's certificate is. */
static bool
cmd_cert_names(const char *name, void *arg)
{
	struct ident **id = arg;

	return (*id = ident_by_certificate(name)) != NULL;
}

/*
 * A client certificate that its handshake verified and that an identity
 * names lets the connection in as that identity, without AUTH. One that
 * no identity names (or none at all) leaves it to AUTH: a certificate
 * alone grants nothing.
 */
bool
cmd_session_certified(struct session *s, const struct tls_conn *tc)
{
	struct ident *id = NULL;

	if (!tls_peer_names(tc, cmd_cert_names, &id))
		return false;
	cmd_let_in(s, id);
	return true;
}

/* Right secret: OK; wrong: ERR AUTH, and the connection closes. The
 * secret names the identity (auth.admin_secret's may REVOKE). */
static enum cmd_result
cmd_auth_judge(struct session *s, const char *secret)
{
	struct ident *id = ident_by_secret(secret);

	if (id == NULL) {
		cmd_auth_log(s);
		cmd_error(s, PERR_AUTH, "wrong secret");
		return CMD_CLOSE;
	}
	authwait_passed(cmd_peer(s), mono_ms());
	if (!cmd_auth_switch_ok(s, id)) {
		cmd_error(s, PERR_HELD,
		    "AUTH as another identity only while holding nothing "
		    "(%s holds %u)",
		    s->ident->name, s->owner.nholds);
		return CMD_DONE;
	}
	cmd_auth_as(s, id);
	evbuffer_add(s->out, "OK\n", 3);
	return CMD_DONE;
}

/* "ERR DENIED <identity> may not <right> <name>": what it asked is out of
 * its rights, and nothing was done. */
void
cmd_denied(struct session *s, int right, const char *name)
{
	ident_count(s->ident, true);
	cmd_error(s, PERR_DENIED, "%s may not %s %s",
	    s->ident != NULL ? s->ident->name : "-", config_right_name(right),
	    name);
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
 * slot (authwait), however many connections it opens. Without any
 * secret, AUTH is a no-op that says OK.
 */
enum cmd_result
cmd_auth(struct session *s, int argc, char **argv)
{
	uint64_t now = mono_ms(), slot;
	struct timeval tv;

	if (!ident_any()) {
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

/* New secrets and rights apply at once; a dropped identity's connections
 * are closed by the client module (cmd_session_gone). */
void
cmd_reload(void)
{
	if (!ident_load(cmds.cf))
		log_warnx("reload: keeping the old AUTH secrets");
}

void
cmd_shutdown(void)
{
	ident_shutdown();
}

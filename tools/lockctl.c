/*
 * lockctl: take, release and inspect lockbroker locks from the shell, and run
 * a command while holding one. The command line is parsed in full before
 * anything is sent, so a usage error never touches the broker. Exit codes:
 * lockctl.h and lockctl(1).
 */
#include <ctype.h>
#include <err.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lb_build.h"
#include "lockctl.h"
#include "util.h"
#include "xmalloc.h"

#define CTL_DEFAULT_ADDR "127.0.0.1:7878"
#define CTL_DEFAULT_GRACE_MS 5000
/* Room for an AUTH line under the broker's 128-byte limit before AUTH. */
#define CTL_SECRET_MAX 122
/* LIMIT <n>: the protocol's range, so a bad n is a usage error here. */
#define CTL_LIMIT_MAX 10000
/* The longest duration taken, in ms: room to add to it without overflow. */
#define CTL_MS_MAX ((uint64_t)INT64_MAX / 4)
/* A bare --wait this long or longer was likely meant as milliseconds. */
#define CTL_WAIT_WARN_S 1000

/* The options a subcommand may take, as bits. */
enum {
	OPT_TTL = 1 << 0,
	OPT_WAIT = 1 << 1,
	OPT_TRY = 1 << 2,
	OPT_KEEP = 1 << 3,
	OPT_TOKEN = 1 << 4,
	OPT_GRACE = 1 << 5,
	OPT_SHARED = 1 << 6,
	OPT_LIMIT = 1 << 7,
	OPT_EXIT = 1 << 8,
	OPT_QUIET = 1 << 9,
};

/* The lock modes beyond exclusive, for acquire and run. */
#define OPT_MODES (OPT_SHARED | OPT_LIMIT)
/* How long to wait, and what to say and exit with when the lock is busy. */
#define OPT_BUSY (OPT_WAIT | OPT_TRY | OPT_EXIT | OPT_QUIET)

/* Everything any subcommand parsed from its arguments. */
struct ctl_args {
	unsigned seen; /* OPT_* given */
	struct run_opts run;
	int busy_exit; /* the exit code when the lock is busy (-E) */
};

struct ctl_cmd {
	const char *name;
	bool lock_name; /* takes NAME */
	bool command;	/* takes COMMAND [ARGS...] after NAME */
	unsigned opts;	/* allowed */
	unsigned need;	/* required */
	int (*fn)(struct conn *, struct ctl_args *);
};

static int ctl_cmd_acquire(struct conn *, struct ctl_args *);
static int ctl_cmd_release(struct conn *, struct ctl_args *);
static int ctl_cmd_status(struct conn *, struct ctl_args *);
static int ctl_cmd_info(struct conn *, struct ctl_args *);
static int ctl_cmd_ping(struct conn *, struct ctl_args *);
static int ctl_cmd_run(struct conn *, struct ctl_args *);
static int ctl_cmd_fill(struct conn *, struct ctl_args *);
static int ctl_cmd_who(struct conn *, struct ctl_args *);
static int ctl_cmd_revoke(struct conn *, struct ctl_args *);

/* The one table of subcommands; ctl_parse checks arity and options. */
static const struct ctl_cmd ctl_cmds[] = {
	{ "acquire", true, false,
	    OPT_TTL | OPT_BUSY | OPT_KEEP | OPT_TOKEN | OPT_MODES, OPT_TTL,
	    ctl_cmd_acquire },
	{ "release", true, false, OPT_TOKEN, OPT_TOKEN, ctl_cmd_release },
	{ "status", true, false, 0, 0, ctl_cmd_status },
	{ "who", true, false, 0, 0, ctl_cmd_who },
	{ "revoke", true, false, 0, 0, ctl_cmd_revoke },
	{ "info", false, false, 0, 0, ctl_cmd_info },
	{ "ping", false, false, 0, 0, ctl_cmd_ping },
	{ "run", true, true, OPT_TTL | OPT_BUSY | OPT_GRACE | OPT_MODES, 0,
	    ctl_cmd_run },
	{ "fill", true, true, OPT_TTL | OPT_BUSY | OPT_GRACE, 0, ctl_cmd_fill },
};

/* The subcommands' options; the short ones are flock(1)'s letters. */
static const struct ctl_opt {
	const char *name;
	char letter; /* the short form, or 0 */
	unsigned bit;
	bool value;
} ctl_opts[] = {
	{ "--ttl", 0, OPT_TTL, true },
	{ "--wait", 'w', OPT_WAIT, true },
	{ "--try", 'n', OPT_TRY, false },
	{ "--conflict-exit-code", 'E', OPT_EXIT, true },
	{ "--quiet", 'q', OPT_QUIET, false },
	{ "--keep", 0, OPT_KEEP, false },
	{ "--token", 0, OPT_TOKEN, true },
	{ "--grace", 0, OPT_GRACE, true },
	{ "--shared", 0, OPT_SHARED, false },
	{ "--limit", 0, OPT_LIMIT, true },
};

/* Units of a duration; a bare number is in the option's own unit. */
static const struct ctl_unit {
	const char *name;
	uint64_t ms;
} ctl_units[] = {
	{ "ms", 1 },
	{ "s", 1000 },
	{ "m", 60000 },
	{ "h", 3600000 },
};

static char ctl_secret[CTL_SECRET_MAX + 2];

static void __attribute__((noreturn)) ctl_usage(int code)
{
	FILE *f = code == 0 ? stdout : stderr;

	fprintf(f,
	    "usage: lockctl [-s HOST:PORT | -u PATH] [-a SECRET_FILE]\n"
	    "               [-T CAFILE [-C CERTFILE -K KEYFILE]] "
	    "SUBCOMMAND ...\n"
	    "  run [-w WAIT | -n] [-E N] [-q] [--ttl TTL] [--grace TIME]\n"
	    "      [--shared | --limit N] NAME -- COMMAND [ARG...]\n"
	    "  fill [-w WAIT | -n] [-E N] [-q] [--ttl TTL] [--grace TIME] "
	    "NAME --\n"
	    "      COMMAND [ARG...]\n"
	    "  acquire NAME --ttl TTL [-w WAIT | -n] [-E N] [-q] [--keep] "
	    "[--token T]\n"
	    "      [--shared | --limit N]\n"
	    "  release NAME --token T\n"
	    "  status NAME\n"
	    "  who NAME\n"
	    "  revoke NAME   (-a FILE must hold auth.admin_secret)\n"
	    "  info\n"
	    "  ping\n"
	    "  -w, --wait WAIT   give up after WAIT (-w 0: try once); "
	    "default: forever\n"
	    "  -n, --try         try once\n"
	    "  -E, --conflict-exit-code N  exit N when the lock is busy "
	    "(default 75)\n"
	    "  -q, --quiet       no 'lock busy' line on stderr\n"
	    "  -h, --help        this text; -V, --version: the version\n"
	    "Durations: a number with a unit, ms, s, m or h (1500ms, 1.5s, "
	    "2m);\n"
	    "  a bare number is seconds for -w (as flock -w), milliseconds "
	    "for\n"
	    "  --ttl and --grace.\n"
	    "Broker: -s/-u, else $LOCKBROKER_ADDR, else %s.\n"
	    "Secret: -a FILE (its first line), else $LOCKBROKER_SECRET.\n"
	    "TLS: -T CAFILE (else $LOCKBROKER_CA): the broker's certificate "
	    "must be\n"
	    "  signed by it and name the host; -C CERTFILE -K KEYFILE (else\n"
	    "  $LOCKBROKER_CERT, $LOCKBROKER_KEY): a client certificate.\n"
	    "Exit status:\n"
	    "  0        done; run, fill: COMMAND's, 128+N if signal N "
	    "killed it;\n"
	    "           fill: also when another caller did the work (DONE)\n"
	    "  64       usage error\n"
	    "  66       run, fill: lock lost while COMMAND ran; its group was "
	    "stopped\n"
	    "  67       release: the token does not hold the lock\n"
	    "  69       broker or Redis unavailable (also when a wait ran "
	    "out then)\n"
	    "  70       any other error from the broker\n"
	    "  71       local error (secret file, fork, stdout)\n"
	    "  75       lock busy: not obtained within -w, or -n (-E N "
	    "changes it)\n"
	    "  77       AUTH refused, or needed and no secret given\n"
	    "  126/127  run, fill: COMMAND not executable / not found\n",
	    CTL_DEFAULT_ADDR);
	exit(code);
}

static void __attribute__((noreturn, format(printf, 1, 2)))
ctl_usage_err(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vwarnx(fmt, ap);
	va_end(ap);
	fprintf(stderr, "Try 'lockctl -h' for help.\n");
	exit(LC_EXIT_USAGE);
}

/* The unit a duration ends with; NULL when the word is none. */
static const struct ctl_unit *
ctl_find_unit(const char *s)
{
	for (size_t i = 0; i < sizeof(ctl_units) / sizeof(ctl_units[0]); i++)
		if (strcmp(ctl_units[i].name, s) == 0)
			return &ctl_units[i];
	return NULL;
}

/*
 * "1.5s", "1500ms", "2m", or a bare "1.5" in bare_ms units, into ms;
 * rounded up, so a wait above 0 never becomes a try-once. -1 if bad.
 */
static int
ctl_duration(const char *s, uint64_t bare_ms, uint64_t *ms, bool *bare)
{
	uint64_t whole = 0, frac = 0, den = 1, unit = bare_ms;
	const struct ctl_unit *u;
	const char *p = s;
	int digits = 0;

	for (; isdigit((unsigned char)*p); p++, digits++) {
		if (whole > CTL_MS_MAX / 10)
			return -1;
		whole = whole * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '.')
		for (p++; isdigit((unsigned char)*p); p++, digits++) {
			if (den == 1000000000) /* finer than we can count */
				return -1;
			frac = frac * 10 + (uint64_t)(*p - '0');
			den *= 10;
		}
	if (digits == 0)
		return -1;
	if (!(*bare = *p == '\0')) {
		if ((u = ctl_find_unit(p)) == NULL)
			return -1;
		unit = u->ms;
	}
	if (whole > CTL_MS_MAX / unit)
		return -1;
	*ms = whole * unit + (frac * unit + den - 1) / den;
	return *ms > CTL_MS_MAX ? -1 : 0;
}

/* A duration option's value; bare numbers are in bare_ms units. */
static uint64_t
ctl_parse_time(const char *opt, const char *s, uint64_t bare_ms, uint64_t min)
{
	uint64_t v;
	bool bare;

	if (ctl_duration(s, bare_ms, &v, &bare) != 0 || v < min)
		ctl_usage_err("%s wants a duration%s: a number and ms, s, m or "
			      "h (1500ms, 1.5s, 2m); a bare number is %s",
		    opt, min > 0 ? " above 0" : "",
		    bare_ms == 1 ? "milliseconds" : "seconds");
	/* A bare --wait was milliseconds before (lockctl(1), HISTORY). */
	if (bare && bare_ms == 1000 && v >= CTL_WAIT_WARN_S * 1000)
		warnx("%s %s means %s seconds (a bare number used to be "
		      "milliseconds): write %sms for milliseconds, %ss to "
		      "silence this",
		    opt, s, s, s, s);
	return v;
}

/* Store one option's value; "--opt VALUE" and "--opt=VALUE" both work. */
static void
ctl_set_opt(struct ctl_args *a, const struct ctl_opt *o, const char *v)
{
	struct acquire_req *r = &a->run.req;
	uint64_t n;

	if (a->seen & o->bit)
		ctl_usage_err("%s given twice", o->name);
	a->seen |= o->bit;
	switch (o->bit) {
	case OPT_TTL:
		r->ttl_ms = ctl_parse_time(o->name, v, 1, 1);
		break;
	case OPT_WAIT:
		r->wait_ms = (int64_t)ctl_parse_time(o->name, v, 1000, 0);
		break;
	case OPT_TRY:
		r->wait_ms = 0;
		break;
	case OPT_KEEP:
		r->keep = true;
		break;
	case OPT_TOKEN:
		if (!proto_valid_token(v))
			ctl_usage_err("a token is 1-64 of A-Z a-z 0-9 _ . -");
		r->token = v;
		break;
	case OPT_GRACE:
		a->run.grace_ms = ctl_parse_time(o->name, v, 1, 0);
		break;
	case OPT_EXIT:
		if (proto_parse_u64(v, 255, &n) != 0)
			ctl_usage_err("%s wants an exit code, 0-255", o->name);
		a->busy_exit = (int)n;
		break;
	case OPT_QUIET:
		r->quiet = true;
		break;
	case OPT_SHARED:
		r->shared = true;
		break;
	case OPT_LIMIT:
		if (proto_parse_u64(v, CTL_LIMIT_MAX, &r->limit) != 0 ||
		    r->limit == 0)
			ctl_usage_err("--limit wants a number of holders, 1-%d",
			    CTL_LIMIT_MAX);
		break;
	}
}

/* "--name" or "--name=VALUE": the option, and in *v the inline value. */
static const struct ctl_opt *
ctl_long_opt(const char *arg, const char **v)
{
	const char *eq = strchr(arg, '=');
	size_t n = eq != NULL ? (size_t)(eq - arg) : strlen(arg);

	*v = eq != NULL ? eq + 1 : NULL;
	for (size_t k = 0; k < sizeof(ctl_opts) / sizeof(ctl_opts[0]); k++)
		if (strlen(ctl_opts[k].name) == n &&
		    strncmp(ctl_opts[k].name, arg, n) == 0)
			return &ctl_opts[k];
	return NULL;
}

/* "-L" or "-LVALUE", as getopt(3) takes them: *v is the rest, if any. */
static const struct ctl_opt *
ctl_short_opt(const char *arg, const char **v)
{
	*v = arg[2] != '\0' ? arg + 2 : NULL;
	for (size_t k = 0; k < sizeof(ctl_opts) / sizeof(ctl_opts[0]); k++)
		if (ctl_opts[k].letter != 0 && ctl_opts[k].letter == arg[1])
			return &ctl_opts[k];
	return NULL;
}

/* Parse the option at argv[*i]; a value may be the next word. */
static void
ctl_parse_opt(const struct ctl_cmd *cmd, struct ctl_args *a, int argc,
    char **argv, int *i)
{
	const char *arg = argv[*i], *v;
	bool is_long = arg[1] == '-';
	const struct ctl_opt *o =
	    is_long ? ctl_long_opt(arg, &v) : ctl_short_opt(arg, &v);

	if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
		ctl_usage(0);
	if (o == NULL || !(cmd->opts & o->bit))
		ctl_usage_err("%s: unknown option '%s'", cmd->name, arg);
	if (!o->value && v != NULL && is_long)
		ctl_usage_err("%s takes no value", o->name);
	if (!o->value && v != NULL)
		ctl_usage_err("'%s': one short option per word", arg);
	if (o->value && v == NULL && *i + 1 == argc)
		ctl_usage_err("%s wants a value", o->name);
	if (o->value && v == NULL)
		v = argv[++*i];
	ctl_set_opt(a, o, v);
}

/* Cross-option checks, once everything is parsed. */
static void
ctl_check(const struct ctl_cmd *cmd, struct ctl_args *a)
{
	if ((a->seen & OPT_WAIT) && (a->seen & OPT_TRY))
		ctl_usage_err("--wait and --try exclude each other");
	if ((a->seen & OPT_SHARED) && (a->seen & OPT_LIMIT))
		ctl_usage_err("--shared and --limit exclude each other");
	if ((cmd->need & OPT_TTL) && !(a->seen & OPT_TTL))
		ctl_usage_err(
		    "acquire needs --ttl MS: without a TTL the lock would be a session lock, released when lockctl exits; use 'lockctl run NAME -- COMMAND' to hold a lock while a command runs");
	if ((cmd->need & OPT_TOKEN) && !(a->seen & OPT_TOKEN))
		ctl_usage_err("%s needs --token T", cmd->name);
	if (cmd->lock_name && a->run.req.name == NULL)
		ctl_usage_err("%s needs a lock NAME", cmd->name);
	if (cmd->lock_name && !proto_valid_name(a->run.req.name))
		ctl_usage_err(
		    "a lock name is 1-200 bytes of 0x21-0x7E or 0x80-0xFF");
	if (cmd->command && (a->run.argv == NULL || a->run.argv[0] == NULL))
		ctl_usage_err(
		    "%s needs a COMMAND after NAME (and --)", cmd->name);
}

/*
 * A subcommand's arguments: options anywhere before COMMAND, NAME, then
 * for run and fill COMMAND after "--" or at the next word that is not an
 * option.
 */
static void
ctl_parse(const struct ctl_cmd *cmd, struct ctl_args *a, int argc, char **argv)
{
	a->run.req.wait_ms = -1;
	a->run.grace_ms = CTL_DEFAULT_GRACE_MS;
	a->busy_exit = LC_EXIT_BUSY;
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];

		if (strcmp(arg, "--") == 0 && cmd->command) {
			a->run.argv = argv + i + 1;
			break;
		} else if (arg[0] == '-' && arg[1] != '\0') {
			ctl_parse_opt(cmd, a, argc, argv, &i);
		} else if (cmd->lock_name && a->run.req.name == NULL) {
			a->run.req.name = arg;
		} else if (cmd->command) {
			a->run.argv = argv + i;
			break;
		} else
			ctl_usage_err(
			    "%s: unexpected argument '%s'", cmd->name, arg);
	}
	ctl_check(cmd, a);
}

/*
 * -u PATH (any path), -s HOST:PORT, else $LOCKBROKER_ADDR (a path if it
 * starts with '/'), else the broker's default address.
 */
static void
ctl_addr(const char *s_opt, const char *u_opt, struct conn_addr *addr)
{
	const char *s = s_opt;

	memset(addr, 0, sizeof(*addr));
	if (u_opt != NULL) {
		if (*u_opt == '\0' || strlen(u_opt) >= sizeof(addr->path))
			ctl_usage_err("-u: bad socket path");
		strcpy(addr->path, u_opt);
		return;
	}
	if (s != NULL && s[0] == '/')
		ctl_usage_err("-s wants HOST:PORT; -u is for a socket path");
	if (s == NULL && (s = getenv("LOCKBROKER_ADDR")) != NULL && *s == '\0')
		s = NULL;
	if (s == NULL)
		s = CTL_DEFAULT_ADDR;
	if (conn_parse_addr(s, addr) != 0)
		ctl_usage_err(
		    "bad broker address '%s' (HOST:PORT, [V6]:PORT or /PATH)",
		    s);
}

/* An option, else its variable if set and not empty, else NULL. */
static const char *
ctl_opt_env(const char *opt, const char *var)
{
	const char *v = opt != NULL ? opt : getenv(var);

	return v != NULL && v[0] != '\0' ? v : NULL;
}

/* TLS when a CA is given; a client certificate and its key go together,
 * and only with TLS over TCP. */
static void
ctl_tls(const char *opt[3], struct conn_addr *addr)
{
	addr->ca = ctl_opt_env(opt[0], "LOCKBROKER_CA");
	addr->cert = ctl_opt_env(opt[1], "LOCKBROKER_CERT");
	addr->key = ctl_opt_env(opt[2], "LOCKBROKER_KEY");
	if ((addr->cert == NULL) != (addr->key == NULL))
		ctl_usage_err("a client certificate (-C) needs its key (-K), "
			      "and a key its certificate");
	if (addr->cert != NULL && addr->ca == NULL)
		ctl_usage_err("-C and -K need TLS: -T CAFILE");
	if (addr->ca != NULL && addr->path[0] != '\0')
		ctl_usage_err("TLS (-T) is over TCP: -s HOST:PORT, not -u");
}

/* The first line of the file, or $LOCKBROKER_SECRET; "" when neither. */
static void
ctl_read_secret(const char *path)
{
	const char *env = getenv("LOCKBROKER_SECRET");
	char *s;

	if (path == NULL) {
		if (env != NULL && strlen(env) > CTL_SECRET_MAX)
			ctl_usage_err("$LOCKBROKER_SECRET is too long");
		snprintf(ctl_secret, sizeof(ctl_secret), "%s", env ? env : "");
	} else {
		/* Read as the daemon reads its secret files. */
		if ((s = util_read_secret(path)) == NULL && errno == ENODATA)
			ctl_usage_err("%s: no secret on the first line", path);
		if (s == NULL)
			err(LC_EXIT_OSERR, "%s", path);
		if (strlen(s) > CTL_SECRET_MAX) {
			freezero_str(s);
			ctl_usage_err("%s: the secret is longer than %d bytes",
			    path, CTL_SECRET_MAX);
		}
		snprintf(ctl_secret, sizeof(ctl_secret), "%s", s);
		freezero_str(s);
	}
	ask_have_secret = ctl_secret[0] != '\0';
	for (const char *p = ctl_secret; *p != '\0'; p++)
		if ((unsigned char)*p <= 0x20 || *p == 0x7f)
			ctl_usage_err("the secret must be one word");
}

/* AUTH first when there is a secret; the secret is wiped once sent. */
static int
ctl_auth(struct conn *c)
{
	char *line;
	int rc;

	if (!ask_have_secret)
		return 0;
	rc = conn_send(c, "AUTH %s", ctl_secret);
	explicit_bzero(ctl_secret, sizeof(ctl_secret));
	if (rc != 0)
		return LC_EXIT_UNAVAILABLE;
	if ((rc = ask_reply(c, LC_IO_TIMEOUT_MS, &line)) != 0)
		return rc;
	return strcmp(line, "OK") == 0 ? 0 : ask_err_exit(line);
}

/*
 * Only a kept lock outlives this command, so acquire always asks for KEEP
 * (--keep only says so). If the grant cannot be printed (stdout full, or
 * a closed pipe) its token would be lost with it, so the lock is released
 * again.
 */
static int
ctl_cmd_acquire(struct conn *c, struct ctl_args *a)
{
	struct grant g;
	char *line;
	int rc;

	a->run.req.keep = true;
	if ((rc = ask_acquire(c, &a->run.req, &g)) != 0)
		return rc;
	signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill us here */
	printf("%" PRIu64 " %" PRIu64 " %s\n", g.fence, g.ttl_ms, g.token);
	if (fflush(stdout) == 0 && !ferror(stdout))
		return 0;
	warn("stdout");
	if (conn_send(c, "RELEASE %s TOKEN %s", a->run.req.name, g.token) == 0)
		ask_reply(c, LC_IO_TIMEOUT_MS, &line);
	return LC_EXIT_OSERR;
}

static int
ctl_cmd_release(struct conn *c, struct ctl_args *a)
{
	char *line;
	int rc;

	if (conn_send(c, "RELEASE %s TOKEN %s", a->run.req.name,
		a->run.req.token) != 0)
		return LC_EXIT_UNAVAILABLE;
	if ((rc = ask_reply(c, LC_IO_TIMEOUT_MS, &line)) != 0)
		return rc;
	return strcmp(line, "OK") == 0 ? 0 : ask_err_exit(line);
}

/* Prints "FREE" or "HELD <ttl_ms> <fence>"; both exit 0. */
static int
ctl_cmd_status(struct conn *c, struct ctl_args *a)
{
	char *line;
	int rc;

	if (conn_send(c, "STATUS %s", a->run.req.name) != 0)
		return LC_EXIT_UNAVAILABLE;
	if ((rc = ask_reply(c, LC_IO_TIMEOUT_MS, &line)) != 0)
		return rc;
	if (strcmp(line, "OK FREE") != 0 && strncmp(line, "OK HELD ", 8) != 0)
		return ask_err_exit(line);
	printf("%s\n", line + 3);
	return 0;
}

/*
 * Prints "<fence> <ttl_ms> <mode> <broker> <client> <since>" per HOLDER
 * line, nothing for a free name; both exit 0, as status does for FREE.
 */
static int
ctl_cmd_who(struct conn *c, struct ctl_args *a)
{
	char *line;
	int rc;

	if (conn_send(c, "WHO %s", a->run.req.name) != 0)
		return LC_EXIT_UNAVAILABLE;
	while ((rc = ask_reply(c, LC_IO_TIMEOUT_MS, &line)) == 0) {
		if (strcmp(line, "END") == 0)
			return 0;
		if (strncmp(line, "HOLDER ", 7) != 0)
			return ask_err_exit(line);
		printf("%s\n", line + 7);
	}
	return rc;
}

/*
 * Prints how many holders were removed (0 when the name was free). Only an
 * AUTH with auth.admin_secret may REVOKE: ERR NOAUTH says so.
 */
static int
ctl_cmd_revoke(struct conn *c, struct ctl_args *a)
{
	char *line;
	uint64_t n;
	int rc;

	if (conn_send(c, "REVOKE %s", a->run.req.name) != 0)
		return LC_EXIT_UNAVAILABLE;
	if ((rc = ask_reply(c, LC_IO_TIMEOUT_MS, &line)) != 0)
		return rc;
	if (strncmp(line, "ERR NOAUTH ", 11) == 0) {
		warnx("broker: %s", line);
		warnx(
		    "revoke needs the broker's auth.admin_secret: -a FILE or $LOCKBROKER_SECRET");
		return LC_EXIT_AUTH;
	}
	if (strncmp(line, "OK ", 3) != 0 ||
	    proto_parse_u64(line + 3, UINT64_MAX, &n) != 0)
		return ask_err_exit(line);
	printf("%" PRIu64 "\n", n);
	return 0;
}

/* Prints "<key> <value>" per STAT line. */
static int
ctl_cmd_info(struct conn *c, struct ctl_args *a)
{
	char *line;
	int rc;

	(void)a;
	if (conn_send(c, "INFO") != 0)
		return LC_EXIT_UNAVAILABLE;
	while ((rc = ask_reply(c, LC_IO_TIMEOUT_MS, &line)) == 0) {
		if (strcmp(line, "END") == 0)
			return 0;
		if (strncmp(line, "STAT ", 5) != 0)
			return ask_err_exit(line);
		printf("%s\n", line + 5);
	}
	return rc;
}

static int
ctl_cmd_ping(struct conn *c, struct ctl_args *a)
{
	char *line;
	int rc;

	(void)a;
	if (conn_send(c, "PING") != 0)
		return LC_EXIT_UNAVAILABLE;
	if ((rc = ask_reply(c, LC_IO_TIMEOUT_MS, &line)) != 0)
		return rc;
	if (strcmp(line, "PONG") != 0)
		return ask_err_exit(line);
	printf("PONG\n");
	return 0;
}

static int
ctl_cmd_run(struct conn *c, struct ctl_args *a)
{
	return run_main(c, &a->run);
}

/*
 * Single-flight: the leader runs COMMAND as run does (run.c leaves without
 * RELEASE when COMMAND fails, so a waiter takes over); a caller answered
 * DONE runs nothing and exits 0, the work being done.
 */
static int
ctl_cmd_fill(struct conn *c, struct ctl_args *a)
{
	int rc;

	a->run.req.fill = true;
	rc = run_main(c, &a->run);
	return rc == LC_FILL_DONE ? 0 : rc;
}

static const struct ctl_cmd *
ctl_find(const char *name)
{
	for (size_t i = 0; i < sizeof(ctl_cmds) / sizeof(ctl_cmds[0]); i++)
		if (strcmp(ctl_cmds[i].name, name) == 0)
			return &ctl_cmds[i];
	ctl_usage_err("unknown subcommand '%s'", name);
}

/*
 * --help and --version, the GNU spellings of -h and -V, wherever they
 * come before the subcommand: getopt(3) reads "--help" as option '-'.
 */
static void
ctl_long_global(int argc, char **argv)
{
	for (int i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "--help") == 0)
			ctl_usage(0);
		if (strcmp(argv[i], "--version") == 0) {
			printf("lockctl %s\n", LB_VERSION);
			exit(0);
		}
		if (strcmp(argv[i], "--") == 0)
			return;
		if (strchr("suaTCK", argv[i][1]) != NULL &&
		    argv[i][1] != '\0' && argv[i][2] == '\0')
			i++; /* its value */
	}
}

int
main(int argc, char **argv)
{
	const char *s_opt = NULL, *u_opt = NULL, *a_opt = NULL;
	const char *tls_opt[3] = { NULL, NULL, NULL }; /* -T, -C, -K */
	const struct ctl_cmd *cmd;
	struct ctl_args args = { 0 };
	struct conn_addr addr;
	struct conn c;
	int ch, rc;

	ctl_long_global(argc, argv);
	while ((ch = getopt(argc, argv, "+:s:u:a:T:C:K:hV")) != -1) {
		switch (ch) {
		case 'T':
		case 'C':
		case 'K':
			tls_opt[ch == 'T' ? 0 : ch == 'C' ? 1 : 2] = optarg;
			break;
		case 's':
			s_opt = optarg;
			break;
		case 'u':
			u_opt = optarg;
			break;
		case 'a':
			a_opt = optarg;
			break;
		case 'h':
			ctl_usage(0);
		case 'V':
			printf("lockctl %s\n", LB_VERSION);
			return 0;
		case ':':
			ctl_usage_err("-%c wants a value", optopt);
		default:
			ctl_usage_err("unknown option -%c", optopt);
		}
	}
	if (optind == argc)
		ctl_usage_err("no subcommand");
	if (s_opt != NULL && u_opt != NULL)
		ctl_usage_err("-s and -u exclude each other");
	cmd = ctl_find(argv[optind]);
	ctl_parse(cmd, &args, argc - optind, argv + optind);
	ctl_addr(s_opt, u_opt, &addr);
	ctl_tls(tls_opt, &addr);
	ctl_read_secret(a_opt);
	if (conn_open(&c, &addr) != 0)
		return LC_EXIT_UNAVAILABLE;
	if ((rc = ctl_auth(&c)) == 0)
		rc = cmd->fn(&c, &args);
	conn_quit(&c, LC_IO_TIMEOUT_MS);
	if (rc == LC_BUSY)
		return args.busy_exit;
	if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout))) {
		warn("stdout");
		return LC_EXIT_OSERR;
	}
	return rc;
}

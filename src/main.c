/*
 * lockbrokerd: options, configuration, signals and the one event loop.
 * It runs in the foreground; systemd (or the terminal) supervises it.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "lb_build.h"

/* Where this build installs the configuration: /etc/lockbroker in the
 * Debian package, prefix/etc/lockbroker from meson install. */
#define CONFIG_DEFAULT_PATH LB_SYSCONFDIR "/lockbroker/lockbroker.conf"
#if HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "client.h"
#include "cmd.h"
#include "chaos.h"
#include "config.h"
#include "listener.h"
#include "lock.h"
#include "lockdb.h"
#include "log.h"
#include "metrics.h"
#include "redisc.h"
#include "stats.h"
#include "util.h"

#define MAIN_DRAIN_TICK_MS 10

static struct {
	struct event_base *base;
	struct config cf;
	struct event *sig_term, *sig_int, *sig_hup;
	struct event *drain_ev;
	struct event *watchdog_ev; /* NULL unless systemd asks for pings */
	struct event *status_ev;   /* NULL unless systemd listens */
	char status[256];	   /* the STATUS= last said */
	uint64_t drain_deadline_ms;
	bool stopping;
	const char *path; /* the configuration file, read again on HUP */
	bool must_exist;  /* it was named with -c */
} m;

static void __attribute__((noreturn)) usage(int code)
{
	fprintf(code == 0 ? stdout : stderr,
	    "usage: lockbrokerd [-htV] [-c file]\n"
	    "  -c, --config file  configuration file (default %s)\n"
	    "  -t, --test         check the configuration and exit\n"
	    "  -V, --version      print the version and exit\n"
	    "  -h, --help         this help\n",
	    CONFIG_DEFAULT_PATH);
	exit(code);
}

static void
main_notify(const char *state)
{
#if HAVE_LIBSYSTEMD
	sd_notify(0, state);
#else
	(void)state;
#endif
}

/*
 * systemd's watchdog (WatchdogSec=): a ping from a timer on the loop, at
 * half the interval, says the loop still turns. A loop stuck for the
 * whole interval gets the daemon killed and restarted, so its clients
 * see their connections close (and so their locks gone) instead of a
 * broker that neither renews nor tells them anything.
 */
static void
main_watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	main_notify("WATCHDOG=1");
}

static void
main_watchdog(void)
{
#if HAVE_LIBSYSTEMD
	uint64_t usec, ms;
	struct timeval tv;

	if (sd_watchdog_enabled(0, &usec) <= 0)
		return;
	ms = usec / 2000 > 0 ? usec / 2000 : 1;
	m.watchdog_ev =
	    event_new(m.base, -1, EV_PERSIST, main_watchdog_cb, NULL);
	if (m.watchdog_ev == NULL)
		fatalx("cannot set up the watchdog event");
	tv = util_timeval(ms);
	evtimer_add(m.watchdog_ev, &tv);
	log_info(
	    "systemd watchdog: a ping every %llu ms", (unsigned long long)ms);
#endif
}

/*
 * What `systemctl status` shows (STATUS=), said when it changes, looked
 * at every second: whether Redis serves (or why not), and how many locks
 * are held and waited for here.
 */
static void
main_status_cb(evutil_socket_t fd, short what, void *arg)
{
	char now[sizeof m.status];
	const char *refusal = lockdb_refusal();
	long long held = (long long)stats[STAT_locks_held];

	snprintf(now, sizeof now,
	    "STATUS=Redis %s%s; %lld lock%s held, %lld waiting",
	    !lockdb_up()	  ? "not connected"
		: refusal != NULL ? "connected, refusing grants: "
				  : "connected",
	    lockdb_up() && refusal != NULL ? refusal : "", held,
	    held == 1 ? "" : "s", (long long)stats[STAT_waiters]);
	if (strcmp(now, m.status) == 0)
		return;
	memcpy(m.status, now, sizeof now);
	main_notify(m.status);
}

static void
main_status(void)
{
	struct timeval tv = { 1, 0 };

	if (getenv("NOTIFY_SOCKET") == NULL)
		return;
	m.status_ev = event_new(m.base, -1, EV_PERSIST, main_status_cb, NULL);
	if (m.status_ev == NULL)
		fatalx("cannot set up the status event");
	evtimer_add(m.status_ev, &tv);
	main_status_cb(-1, 0, NULL);
}

/* Stop once every client is gone and every release we sent has an
 * answer, or when Redis has had command_timeout_ms to give them. */
static void
main_drain_cb(evutil_socket_t fd, short what, void *arg)
{
	struct timeval tv = { 0, MAIN_DRAIN_TICK_MS * 1000 };

	if ((client_count() == 0 && redisc_idle()) ||
	    mono_ms() >= m.drain_deadline_ms) {
		event_base_loopexit(m.base, NULL);
		return;
	}
	evtimer_add(m.drain_ev, &tv);
}

/*
 * SIGTERM/SIGINT: stop accepting, tell waiters ERR SHUTDOWN, let replies
 * drain, release in Redis what our clients hold, then exit.
 */
static void
main_stop_cb(evutil_socket_t sig, short what, void *arg)
{
	if (m.stopping)
		return;
	m.stopping = true;
	log_info("signal %d: stopping", (int)sig);
	main_notify("STOPPING=1");
	listener_close();
	lock_stop();
	client_close_all();
	m.drain_deadline_ms = mono_ms() +
	    (uint64_t)m.cf.redis.command_timeout_ms + MAIN_DRAIN_TICK_MS;
	main_drain_cb(-1, 0, NULL);
}

static void
main_diff_cb(const char *key, bool reloadable, void *arg)
{
	unsigned *counts = arg;

	if (reloadable)
		log_info("reload: %s changed", key);
	else
		log_warnx(
		    "reload: %s changed but needs a restart; the old value stays",
		    key);
	counts[reloadable ? 0 : 1]++;
}

/* SIGHUP: read the file again; apply what can change, keep the rest. */
static void
main_hup_cb(evutil_socket_t sig, short what, void *arg)
{
	struct config fresh;
	unsigned counts[2] = { 0, 0 };
	char err[1024];

	if (config_load(&fresh, m.path, m.must_exist, err, sizeof err) != 0) {
		log_warnx("reload: %s; keeping the running configuration", err);
		return;
	}
	main_notify("RELOADING=1");
	config_diff(&m.cf, &fresh, main_diff_cb, counts);
	config_apply_reloadable(&m.cf, &fresh);
	config_free(&fresh);
	log_set_level((enum log_level)log_level_parse(m.cf.log.level));
	cmd_reload();
	client_reload();
	listener_reload();
	log_info("reload: %u change(s) applied, %u need a restart", counts[0],
	    counts[1]);
	main_notify("READY=1");
}

static void
main_signals(void)
{
	signal(SIGPIPE, SIG_IGN);
	m.sig_term = evsignal_new(m.base, SIGTERM, main_stop_cb, NULL);
	m.sig_int = evsignal_new(m.base, SIGINT, main_stop_cb, NULL);
	m.sig_hup = evsignal_new(m.base, SIGHUP, main_hup_cb, NULL);
	m.drain_ev = evtimer_new(m.base, main_drain_cb, NULL);
	if (m.sig_term == NULL || m.sig_int == NULL || m.sig_hup == NULL ||
	    m.drain_ev == NULL)
		fatalx("cannot set up signal events");
	evsignal_add(m.sig_term, NULL);
	evsignal_add(m.sig_int, NULL);
	evsignal_add(m.sig_hup, NULL);
}

static void
main_load_config(const char *path, bool must_exist)
{
	char err[1024];

	m.path = path;
	m.must_exist = must_exist;
	if (config_load(&m.cf, path, must_exist, err, sizeof err) != 0)
		fatal_config("%s", err);
}

/*
 * Leases and deadlines are promises in milliseconds: libevent's default
 * coarse monotonic clock can fire a timer up to a tick (4 ms) early.
 */
static struct event_base *
main_event_base(void)
{
	struct event_config *ec = event_config_new();
	struct event_base *base;

	if (ec == NULL)
		return NULL;
	event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
	base = event_base_new_with_config(ec);
	event_config_free(ec);
	return base;
}

/* Everything is freed so that valgrind sees no leak at exit. A stop
 * signal meanwhile (a second SIGTERM) stays blocked: freeing the signal
 * events gives SIGTERM its default action back, and the daemon would die
 * by it instead of exiting 0. */
static void
main_teardown(void)
{
	sigset_t stop;

	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGHUP);
	sigprocmask(SIG_BLOCK, &stop, NULL);
	listener_close();
	metrics_shutdown();
	client_shutdown();
	redisc_stop();
	/* Requests failed during the stop are answered from the loop. */
	event_base_loop(m.base, EVLOOP_NONBLOCK);
	lock_shutdown();
	cmd_shutdown();
	event_free(m.sig_term);
	event_free(m.sig_int);
	event_free(m.sig_hup);
	event_free(m.drain_ev);
	if (m.watchdog_ev != NULL)
		event_free(m.watchdog_ev);
	if (m.status_ev != NULL)
		event_free(m.status_ev);
	event_base_free(m.base);
	config_free(&m.cf);
}

int
main(int argc, char **argv)
{
	const char *path = CONFIG_DEFAULT_PATH;
	bool explicit_path = false, test_only = false;
	const char *fault;
	int ch;

	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ "test", no_argument, NULL, 't' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};

	while ((ch = getopt_long(argc, argv, "c:htV", longopts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			path = optarg;
			explicit_path = true;
			break;
		case 't':
			test_only = true;
			break;
		case 'V':
			printf("lockbrokerd %s\n", LB_VERSION);
			return 0;
		case 'h':
			usage(0);
		default:
			usage(2); /* a usage error, not a configuration one */
		}
	}
	if (optind != argc)
		usage(2);
	log_early();
	main_load_config(path, explicit_path);
	if (test_only) {
		/* The secret files are read (and compared) as a start would. */
		cmd_init(&m.cf, NULL);
		cmd_shutdown();
		printf("%s: configuration OK\n",
		    m.cf.path != NULL ? m.cf.path : "(defaults)");
		config_free(&m.cf);
		return 0;
	}
	log_init(
	    (enum log_level)log_level_parse(m.cf.log.level), m.cf.log.syslog);
	if ((fault = chaos_init()) != NULL)
		log_warnx(
		    "BROKEN ON PURPOSE (LOCKBROKER_CHAOS_FAULT=%s): for the chaos self-test only; locks are not safe",
		    fault);
	if ((m.base = main_event_base()) == NULL)
		fatalx("event_base_new failed");
	main_signals();
	redisc_init(m.base, &m.cf.redis);
	lock_init(m.base, &m.cf);
	cmd_init(&m.cf, m.base);
	client_init(m.base, &m.cf);
	if (listener_init(m.base, &m.cf) != 0)
		fatalx("cannot listen; exiting");
	if (metrics_init(m.base, &m.cf) != 0)
		fatalx("cannot serve metrics; exiting");
	redisc_connect();
	log_info("lockbrokerd %s started", LB_VERSION);
	main_notify("READY=1");
	main_watchdog();
	main_status();
	event_base_dispatch(m.base);
	main_teardown();
	log_info("stopped");
	return 0;
}

/*
 * log: one line per event. Under systemd (JOURNAL_STREAM names our stderr)
 * or to syslog no timestamp is added: the journal and syslogd add their
 * own; and a line to the journal starts with its priority ("<4>warning:
 * ..."), which the journal takes off and keeps (journalctl -p warning).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>

#include "log.h"

static enum log_level log_level = LOG_LVL_INFO;
static bool log_syslog;
static bool log_stamp = true;
static bool log_journal; /* stderr is the journal's stream */

static const char *const log_names[] = { "error", "warning", "info", "debug" };
static const int log_prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };

/* JOURNAL_STREAM is "<device>:<inode>" of the stream systemd connected
 * (systemd.exec(5)); it may have been inherited by a process whose stderr
 * goes elsewhere, so it counts only if it is stderr. */
static bool
log_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (js == NULL || sscanf(js, "%llu:%llu", &dev, &ino) != 2 ||
	    fstat(2, &st) != 0)
		return false;
	return (unsigned long long)st.st_dev == dev &&
	    (unsigned long long)st.st_ino == ino;
}

void
log_early(void)
{
	log_journal = log_is_journal();
	log_stamp = !log_journal;
}

void
log_init(enum log_level level, bool use_syslog)
{
	log_level = level;
	log_syslog = use_syslog;
	log_journal = !use_syslog && log_is_journal();
	log_stamp = !use_syslog && !log_journal;
	if (use_syslog)
		openlog("lockbrokerd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

void
log_set_level(enum log_level level)
{
	log_level = level;
}

int
log_level_parse(const char *name)
{
	for (size_t i = 0; i < sizeof(log_names) / sizeof(log_names[0]); i++)
		if (strcasecmp(name, log_names[i]) == 0)
			return (int)i;
	return -1;
}

void
log_emit(enum log_level level, const char *fmt, va_list ap)
{
	char ts[32];
	struct timespec now;
	struct tm tm;

	if (level > log_level)
		return;
	if (log_syslog) {
		vsyslog(log_prio[level], fmt, ap);
		return;
	}
	if (log_stamp) {
		clock_gettime(CLOCK_REALTIME, &now);
		gmtime_r(&now.tv_sec, &tm);
		strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
		fprintf(stderr, "%s.%03ldZ ", ts, now.tv_nsec / 1000000);
	}
	/* The journal keeps the priority: the text need not say it. */
	if (log_journal)
		fprintf(stderr, "<%d>", log_prio[level]);
	else
		fprintf(stderr, "%s: ", log_names[level]);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

static void log_line(enum log_level level, const char *fmt, ...)
    LB_PRINTF(2, 3);

static void
log_line(enum log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emit(level, fmt, ap);
	va_end(ap);
}

/* Append ": strerror(errno)" the way OpenBSD's log_warn does. */
static void log_errno(enum log_level level, const char *fmt, va_list ap)
    LB_PRINTF(2, 0);

static void
log_errno(enum log_level level, const char *fmt, va_list ap)
{
	char buf[1024];
	int saved = errno;

	vsnprintf(buf, sizeof buf, fmt, ap);
	log_line(level, "%s: %s", buf, strerror(saved));
}

void
log_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_errno(LOG_LVL_WARNING, fmt, ap);
	va_end(ap);
}

void
log_warnx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emit(LOG_LVL_WARNING, fmt, ap);
	va_end(ap);
}

void
log_info(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emit(LOG_LVL_INFO, fmt, ap);
	va_end(ap);
}

void
log_debug(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emit(LOG_LVL_DEBUG, fmt, ap);
	va_end(ap);
}

void
fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_errno(LOG_LVL_ERROR, fmt, ap);
	va_end(ap);
	exit(1);
}

/* Before logging is set up and on a terminal alike (lockbrokerd -t): the
 * program's name, not a time and a level. */
void
fatal_config(const char *fmt, ...)
{
	va_list ap;

	if (log_journal)
		fprintf(stderr, "<%d>", LOG_ERR);
	fputs("lockbrokerd: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(LOG_EXIT_CONFIG);
}

void
fatalx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emit(LOG_LVL_ERROR, fmt, ap);
	va_end(ap);
	exit(1);
}

/*
 * log: OpenBSD-style leveled logging to stderr or syslog. Depends on nothing
 * else in lockbroker. log_warn/fatal append strerror(errno).
 */
#ifndef LB_LOG_H
#define LB_LOG_H

#include <stdarg.h>
#include <stdbool.h>

enum log_level { LOG_LVL_ERROR, LOG_LVL_WARNING, LOG_LVL_INFO, LOG_LVL_DEBUG };

#define LB_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* A configuration error's exit status (sysexits.h's EX_CONFIG), which the
 * unit keeps systemd from restarting on (RestartPreventExitStatus=). */
#define LOG_EXIT_CONFIG 78

/* Before the configuration is read: the journal (JOURNAL_STREAM) gets
 * each line's priority from the first. */
void log_early(void);
void log_init(enum log_level level, bool use_syslog);
void log_set_level(enum log_level level);
/* "debug", "info", "warning", "error" -> level; -1 if unknown. */
int log_level_parse(const char *name);

void log_warn(const char *fmt, ...) LB_PRINTF(1, 2);
void log_warnx(const char *fmt, ...) LB_PRINTF(1, 2);
void log_info(const char *fmt, ...) LB_PRINTF(1, 2);
void log_debug(const char *fmt, ...) LB_PRINTF(1, 2);
void fatal(const char *fmt, ...) LB_PRINTF(1, 2) __attribute__((noreturn));
void fatalx(const char *fmt, ...) LB_PRINTF(1, 2) __attribute__((noreturn));
/* "lockbrokerd: <why>" at error, then exit LOG_EXIT_CONFIG. */
void fatal_config(const char *fmt, ...) LB_PRINTF(1, 2)
    __attribute__((noreturn));
void log_emit(enum log_level level, const char *fmt, va_list ap)
    LB_PRINTF(2, 0);

#endif

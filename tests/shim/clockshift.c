/*
 * clockshift: an LD_PRELOAD shim that moves a process's wall clock
 * (CLOCK_REALTIME, gettimeofday, time) by an offset the test changes while
 * the process runs, leaving CLOCK_MONOTONIC alone, as a real clock step
 * (ntpdate, chrony's makestep) does. Redis's key expiry and its TIME both
 * read the wall clock, so a test can step them forward under live leases.
 * libfaketime cannot start Debian's redis-server (jemalloc calls into it
 * before it is ready), hence this small one.
 *
 * LB_CLOCKSHIFT_FILE names a file whose first 8 bytes are the offset in
 * milliseconds (a native int64); it is mapped once, so a write to it is
 * seen at the next clock read. Without the variable nothing moves.
 */
#include <sys/mman.h>
#include <sys/time.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile const int64_t *shift_ms;
static int (*real_clock_gettime)(clockid_t, struct timespec *);

__attribute__((constructor)) static void
shift_init(void)
{
	const char *path = getenv("LB_CLOCKSHIFT_FILE");
	void *p;
	int fd;

	real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(
	    RTLD_NEXT, "clock_gettime");
	if (path == NULL || (fd = open(path, O_RDONLY)) == -1)
		return;
	p = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p != MAP_FAILED)
		shift_ms = p;
}

static void
shift(struct timespec *ts)
{
	int64_t ns;

	if (shift_ms == NULL)
		return;
	ns = (int64_t)ts->tv_nsec + (*shift_ms % 1000) * 1000000;
	ts->tv_sec += *shift_ms / 1000 + ns / 1000000000;
	ns %= 1000000000;
	if (ns < 0) {
		ns += 1000000000;
		ts->tv_sec--;
	}
	ts->tv_nsec = ns;
}

int
clock_gettime(clockid_t id, struct timespec *ts)
{
	int rc;

	if (real_clock_gettime == NULL)
		real_clock_gettime = (int (*)(clockid_t,
		    struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
	rc = real_clock_gettime(id, ts);
	if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
		shift(ts);
	return rc;
}

int
gettimeofday(struct timeval *tv, void *tz)
{
	struct timespec ts;

	(void)tz;
	clock_gettime(CLOCK_REALTIME, &ts);
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t
time(time_t *t)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (t != NULL)
		*t = ts.tv_sec;
	return ts.tv_sec;
}

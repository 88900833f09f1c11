/*
 * lockbench: a load generator for lockbrokerd and, as the baseline, for the
 * canonical direct-Redis lock (SET key token NX PX, release by a Lua
 * compare-and-delete, waiting by polling). One libevent loop, N connections,
 * one request in flight per connection, so every figure is a round trip as
 * a client library would see it.
 *
 * Scenarios, and what an op and the latency percentiles are in each:
 *
 *   uncontended  -c connections loop a try-once ACQUIRE of one of -k names
 *                and RELEASE. An op is a cycle; latency is the cycle's time
 *                (a taken name counts as busy and the cycle restarts).
 *   contended    -c connections compete for one name, each holding it for
 *                --hold-us. An op is a grant; latency is its wait.
 *   handoff      two connections pass one name back and forth: the holder
 *                releases as soon as its hold (--hold-us, default 0) is over
 *                and the other has an acquire outstanding (broker: sent and
 *                not answered; Redis: polling, not yet granted), and asks
 *                again once its RELEASE is answered. An op is a handoff;
 *                latency is the handoff's.
 *   scale        --idle connections connect and sit, --scale-names holders
 *                keep one name each for the whole run and --waiters wait on
 *                those names, while -c probes loop a try-once ACQUIRE of a
 *                name of their own and RELEASE. Ops and latency are the
 *                probes' cycles. The clock starts once all are connected,
 *                the holders hold and the waiters' requests are written.
 *                Redis waiters poll every --poll-ms (default 100 here), the
 *                first time after a random part of it.
 *
 * A wait runs from an acquire's first try to its grant; waits still pending
 * when the run ends count with their age, so a starved client shows. A
 * handoff is a grant to a connection that was already waiting when the
 * previous holder's release was sent; its latency is the grant's arrival
 * minus that release's sending. Each release makes at most one handoff,
 * and a holder that takes the lock back after its own release (the direct
 * client can) makes none. Fairness is max/min grants per competing
 * connection (contended, handoff), null when some connection got none.
 * A broker wait answered TIMEOUT (a configured locks.default_wait_ms ran
 * out) asks again at once; wait_timeouts counts those.
 * timer_lag_p99_ms is how late hold and poll timers fired: when it reaches
 * milliseconds this one loop could not keep up (e.g. with 100k polls a
 * second) and the figures include lockbench's own delay.
 *
 * Several brokers: --broker given more than once (up to MAX_BROKERS), each
 * an address of a broker sharing one Redis. Connection i goes to broker
 * i mod the number given (round-robin; in scale the holders, waiters and
 * idle are spread the same way), and the JSON line lists the brokers and,
 * in contended and handoff, the grants per broker and per connection. A
 * handoff whose release went to another broker than the grant came from
 * crossed brokers: those are also reported on their own (cross_handoff_*,
 * null with one broker).
 *
 * --csv FILE writes FILE with rows percentile,latency_ms[,wait_ms] at 0.1 %
 * steps, then 99.99 and 100 (the maximum); wait_ms is there when the
 * scenario has waits. FILE less a ".csv" suffix, plus ".gp", is a gnuplot
 * script drawing the columns against the percentile (log y) into the same
 * stem plus ".png"; it is run when gnuplot is on PATH.
 */
#include <sys/types.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/ssl.h>
#include <event2/event.h>

/* The release script; its SHA1 is sent first, the body only after NOSCRIPT,
 * as redis-py's register_script does. */
#define RELEASE_LUA                                                            \
	"if redis.call('get', KEYS[1]) == ARGV[1] then "                       \
	"return redis.call('del', KEYS[1]) else return 0 end"
#define RELEASE_SHA "e9f69f2beb755be68b5e456ee2ce9aadfbc4ebf4"

#define MAX_ERRORS_SHOWN 5
#define CONNECT_BATCH 500 /* connects in flight: stay under the backlog */
#define SPARE_FILES 64	  /* descriptors beyond the sockets: stdio, epoll */
#define MAX_BROKERS 1024  /* --broker given this many times at most */

extern char **environ;

enum target { TARGET_BROKER, TARGET_REDIS };
enum scenario { SCEN_UNCONTENDED, SCEN_CONTENDED, SCEN_HANDOFF, SCEN_SCALE };
enum role { ROLE_CYCLE, ROLE_COMPETE, ROLE_HOLDER, ROLE_WAITER, ROLE_IDLE };
enum phase { PH_CONNECT, PH_SETUP, PH_RUN, PH_DONE };
enum cstate { CS_IDLE, CS_ACQUIRING, CS_HOLDING, CS_RELEASING, CS_POLLING };
enum reply { R_GRANT, R_BUSY, R_RELEASED, R_NOSCRIPT, R_SKIP, R_ERR };

static const char *const scenario_names[] = { "uncontended", "contended",
	"handoff", "scale" };

struct samples {
	uint64_t *v; /* nanoseconds */
	size_t n, cap;
};

struct opts {
	enum target target;
	enum scenario scenario;
	const char *addr; /* the first address: the only one for --redis */
	const char *addrs[MAX_BROKERS];
	unsigned naddrs;
	long conns; /* these three: -1 until given, then the scenario picks */
	long hold_us;
	long poll_ms;
	unsigned names;
	double duration_s;
	long ttl_ms;
	unsigned idle;
	unsigned waiters;
	unsigned scale_names;
	long pid; /* 0: none */
	const char *csv;
	const char *tls_ca; /* --tls: the broker's TLS listener, this CA */
};

struct bench;

struct bconn {
	struct bench *b;
	unsigned id;
	enum role role;
	unsigned broker; /* index in o.addrs: id mod naddrs */
	struct bufferevent *bev;
	struct event *timer; /* hold or poll */
	enum cstate state;
	uint64_t cycle_start; /* ns: the first try of this acquire */
	uint64_t grants;
	uint64_t due;  /* ns: when the timer should fire */
	int hold_done; /* the hold is over; handoff waits for the peer too */
	int sent;      /* a scale waiter's first request has been written */
	int phased;    /* a scale waiter's first poll had its random delay */
	int use_eval;  /* NOSCRIPT seen: send the script body next time */
	char name[96];
	char token[40];
};

struct bench {
	struct opts o;
	struct event_base *base;
	struct sockaddr_storage sa[MAX_BROKERS];
	socklen_t salen[MAX_BROKERS];
	struct bconn *conns;
	SSL_CTX *tls;	 /* --tls: every connection's client context */
	unsigned nconns; /* workers, then holders, waiters, idle (scale) */
	unsigned opened, connected, held, sent;
	enum phase phase;
	uint64_t t_start, t_end;
	struct event *stop_ev;
	struct samples lat;    /* cycles, or completed waits (contended) */
	struct samples wait;   /* completed and pending waits */
	struct samples hand;   /* handoff latencies */
	struct samples xhand;  /* those of handoffs that crossed brokers */
	struct samples lag;    /* how late hold and poll timers fired */
	uint64_t last_release; /* ns: last RELEASE sent; 0 once granted after */
	unsigned last_release_broker; /* where that RELEASE went */
	uint64_t ops, busy, errors, pending, handoffs, xhandoffs;
	uint64_t wait_timeouts; /* TIMEOUT to a broker wait: it asks again */
	long rss_kib, hwm_kib;
	char prefix[32];
	uint64_t rng;
};

/* The figures of one run; NAN where one does not apply or has no data. */
struct figures {
	double secs, ops_s;
	double p50, p99, p999;
	double wp50, wp99, wp999, pending;
	double handoffs, handoffs_s, hp50, hp99, hmax;
	double xhandoffs, xhp50, xhp99; /* handoffs across brokers */
	double gmin, gmax, fairness;
	double busy, rss, hwm, lag99;
};

static void conn_next(struct bconn *);
static void conn_release(struct bconn *);
static void bench_start(struct bench *);

/* Fatal error: a benchmark with a broken connection measures nothing. */
static void __attribute__((format(printf, 1, 2), noreturn))
fatalx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("lockbench: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

/* Allocation that cannot fail silently. */
static void *
xcalloc(size_t n, size_t size)
{
	void *p = calloc(n, size);

	if (p == NULL)
		fatalx("out of memory");
	return p;
}

/* The monotonic clock in ns; every interval here is measured on it. */
static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: fast and good enough for names and tokens. */
static uint64_t
rng_next(struct bench *b)
{
	b->rng ^= b->rng >> 12;
	b->rng ^= b->rng << 25;
	b->rng ^= b->rng >> 27;
	return b->rng * 2685821657736338717ull;
}

/* Append one sample; the arrays grow by doubling. */
static void
samples_add(struct samples *s, uint64_t v)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 65536;
		s->v = realloc(s->v, s->cap * sizeof *s->v);
		if (s->v == NULL)
			fatalx("out of memory");
	}
	s->v[s->n++] = v;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Percentiles need the samples in order; sorted once, after the run. */
static void
samples_sort(struct samples *s)
{
	if (s->n > 0)
		qsort(s->v, s->n, sizeof *s->v, cmp_u64);
}

/* Nearest-rank percentile in ms of sorted samples; NAN when there are
 * none, so an empty set prints as null rather than as a fast 0. */
static double
samples_pct(const struct samples *s, double p)
{
	size_t i;

	if (s->n == 0)
		return NAN;
	i = (size_t)(p * (double)s->n + 0.999999);
	if (i > 0)
		i--;
	if (i >= s->n)
		i = s->n - 1;
	return (double)s->v[i] / 1e6;
}

/* Parse a decimal option within [min, max], or die naming the option. */
static long
parse_long(const char *opt, const char *s, long min, long max)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
		fatalx("%s: want an integer in [%ld, %ld], got '%s'", opt, min,
		    max, s);
	return v;
}

/* A path (with a '/') is a Unix socket: the sidecar's way to the broker. */
static void
parse_unix_addr(struct sockaddr_storage *sa, socklen_t *salen, const char *path)
{
	struct sockaddr_un *sun = (struct sockaddr_un *)sa;

	if (strlen(path) >= sizeof sun->sun_path)
		fatalx("address '%s': path too long", path);
	memset(sun, 0, sizeof *sun);
	sun->sun_family = AF_UNIX;
	strcpy(sun->sun_path, path);
	*salen = sizeof *sun;
}

/* HOST:PORT (or [V6]:PORT, or a Unix socket's path) to a socket address,
 * resolved once up front. */
static void
parse_addr(struct sockaddr_storage *sa, socklen_t *salen, const char *arg)
{
	struct addrinfo hints, *res;
	char host[256];
	const char *colon = strrchr(arg, ':');
	size_t hl;
	int rc;

	if (strchr(arg, '/') != NULL) {
		parse_unix_addr(sa, salen, arg);
		return;
	}
	if (colon == NULL || colon == arg || colon[1] == '\0')
		fatalx("address '%s': want HOST:PORT", arg);
	hl = (size_t)(colon - arg);
	if (arg[0] == '[' && hl >= 2 && arg[hl - 1] == ']') {
		arg++;
		hl -= 2;
	}
	if (hl >= sizeof host)
		fatalx("address '%s': host too long", arg);
	memcpy(host, arg, hl);
	host[hl] = '\0';
	memset(&hints, 0, sizeof hints);
	hints.ai_socktype = SOCK_STREAM;
	rc = getaddrinfo(host, colon + 1, &hints, &res);
	if (rc != 0)
		fatalx("address '%s': %s", arg, gai_strerror(rc));
	if (res->ai_addrlen > sizeof *sa)
		fatalx("address '%s': too long", arg);
	memcpy(sa, res->ai_addr, res->ai_addrlen);
	*salen = res->ai_addrlen;
	freeaddrinfo(res);
}

/* Thousands of sockets need as many descriptors: take the hard limit, and
 * say plainly what to raise when even that is too low. */
static void
raise_nofile(unsigned nconns)
{
	struct rlimit rl;
	rlim_t need = (rlim_t)nconns + SPARE_FILES;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		fatalx("getrlimit: %s", strerror(errno));
	if (rl.rlim_cur < rl.rlim_max && rl.rlim_cur < need) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0 &&
		    getrlimit(RLIMIT_NOFILE, &rl) != 0)
			fatalx("getrlimit: %s", strerror(errno));
	}
	if (rl.rlim_cur < need)
		fatalx("%u connections need %ju open files, but RLIMIT_NOFILE "
		       "is %ju (hard %ju): raise it, e.g. ulimit -n %ju",
		    nconns, (uintmax_t)need, (uintmax_t)rl.rlim_cur,
		    (uintmax_t)rl.rlim_max, (uintmax_t)need);
}

/* VmRSS and VmHWM in KiB from /proc/PID/status; -1 for what is missing. */
static void
proc_mem(long pid, long *rss, long *hwm)
{
	char path[64], line[256];
	FILE *f;

	*rss = *hwm = -1;
	snprintf(path, sizeof path, "/proc/%ld/status", pid);
	if ((f = fopen(path, "r")) == NULL)
		return;
	while (fgets(line, sizeof line, f) != NULL) {
		if (strncmp(line, "VmRSS:", 6) == 0)
			*rss = strtol(line + 6, NULL, 10);
		else if (strncmp(line, "VmHWM:", 6) == 0)
			*hwm = strtol(line + 6, NULL, 10);
	}
	fclose(f);
}

/* Send one RESP command array; arguments are C strings. */
static void
resp_send(struct bconn *c, int argc, const char **argv)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	int i;

	evbuffer_add_printf(out, "*%d\r\n", argc);
	for (i = 0; i < argc; i++)
		evbuffer_add_printf(
		    out, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
}

/* The other one of the two handoff connections. */
static struct bconn *
conn_peer(struct bconn *c)
{
	return &c->b->conns[c->id ^ 1];
}

/* An acquire is under way: sent and unanswered, or between polls. */
static int
conn_waiting(const struct bconn *c)
{
	return c->state == CS_ACQUIRING || c->state == CS_POLLING;
}

/* Arm the connection's hold or poll timer. */
static void
conn_timer_us(struct bconn *c, long us)
{
	struct timeval tv;

	c->due = now_ns() + (uint64_t)us * 1000;
	tv.tv_sec = us / 1000000;
	tv.tv_usec = us % 1000000;
	evtimer_add(c->timer, &tv);
}

/* Pick the name for this cycle: one of -k (uncontended), the one contended
 * name, a probe's own (scale), or a held name (scale holders, waiters). */
static void
conn_pick_name(struct bconn *c)
{
	struct bench *b = c->b;
	char base[64];

	if (c->role == ROLE_CYCLE && b->o.scenario == SCEN_SCALE)
		snprintf(base, sizeof base, "%s-p%u", b->prefix, c->id);
	else if (c->role == ROLE_CYCLE)
		snprintf(base, sizeof base, "%s-%u", b->prefix,
		    (unsigned)(rng_next(b) % b->o.names));
	else if (c->role == ROLE_COMPETE)
		snprintf(base, sizeof base, "%s-0", b->prefix);
	else
		snprintf(base, sizeof base, "%s-s%u", b->prefix,
		    (c->id - (unsigned)b->o.conns) % b->o.scale_names);
	if (b->o.target == TARGET_REDIS)
		snprintf(c->name, sizeof c->name, "lockbench:{%s}", base);
	else
		snprintf(c->name, sizeof c->name, "%s", base);
}

/* Broker: probes try once under a TTL; everyone else waits, unbounded, for
 * a session lock (the broker renews it, so a holder keeps it all run). */
static void
broker_acquire(struct bconn *c)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);

	if (c->role == ROLE_CYCLE)
		evbuffer_add_printf(out, "ACQUIRE %s TTL %ld WAIT 0\n", c->name,
		    c->b->o.ttl_ms);
	else
		evbuffer_add_printf(out, "ACQUIRE %s\n", c->name);
}

/* Redis: SET NX PX; a scale holder's lease outlives the run by a minute,
 * since nothing renews it. */
static void
redis_acquire(struct bconn *c)
{
	struct bench *b = c->b;
	char ttl[24];
	long ms = b->o.ttl_ms;

	if (c->role == ROLE_HOLDER)
		ms = (long)(b->o.duration_s * 1000) + 60000;
	snprintf(ttl, sizeof ttl, "%ld", ms);
	resp_send(c, 6,
	    (const char *[]){ "SET", c->name, c->token, "NX", "PX", ttl });
}

/* Send one try of the acquire; cycle_start stays at the first try. */
static void
conn_try(struct bconn *c)
{
	c->state = CS_ACQUIRING;
	if (c->b->o.target == TARGET_BROKER)
		broker_acquire(c);
	else
		redis_acquire(c);
}

/* A holder lets go once its hold is over and, in handoff, once the other
 * connection has an acquire outstanding. */
static void
holder_check(struct bconn *c)
{
	if (c->state != CS_HOLDING || !c->hold_done)
		return;
	if (c->b->o.scenario == SCEN_HANDOFF && !conn_waiting(conn_peer(c)))
		return;
	conn_release(c);
}

/* Start a new acquire: fresh name (uncontended), fresh token, clock. In
 * handoff this is what the holder waits for. */
static void
conn_next(struct bconn *c)
{
	struct bench *b = c->b;

	conn_pick_name(c);
	snprintf(c->token, sizeof c->token, "%016" PRIx64 "%016" PRIx64,
	    rng_next(b), rng_next(b));
	c->cycle_start = now_ns();
	conn_try(c);
	if (b->o.scenario == SCEN_HANDOFF)
		holder_check(conn_peer(c));
}

/* Release by name (broker) or by compare-and-delete on the token; a
 * competitor's release is the start of the next handoff. */
static void
conn_release(struct bconn *c)
{
	c->state = CS_RELEASING;
	if (c->role == ROLE_COMPETE) {
		c->b->last_release = now_ns();
		c->b->last_release_broker = c->broker;
	}
	if (c->b->o.target == TARGET_BROKER) {
		evbuffer_add_printf(
		    bufferevent_get_output(c->bev), "RELEASE %s\n", c->name);
		return;
	}
	if (c->use_eval) {
		/* Once: EVAL caches the script, so EVALSHA works again after
		 * it (as redis-py's register_script does). */
		c->use_eval = 0;
		resp_send(c, 5,
		    (const char *[]){
			"EVAL", RELEASE_LUA, "1", c->name, c->token });
	} else
		resp_send(c, 5,
		    (const char *[]){
			"EVALSHA", RELEASE_SHA, "1", c->name, c->token });
}

/* Hold ended, or the poll interval passed: release, or try again. How
 * late it fired tells whether this one loop kept up with its load. */
static void
conn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct bconn *c = arg;
	uint64_t now = now_ns();

	(void)fd;
	(void)what;
	if (c->b->phase == PH_DONE)
		return;
	if (c->b->phase == PH_RUN)
		samples_add(&c->b->lag, now > c->due ? now - c->due : 0);
	if (c->state == CS_HOLDING) {
		c->hold_done = 1;
		holder_check(c);
	} else if (c->state == CS_POLLING)
		conn_try(c);
}

/* Classify a broker reply line by what this connection is waiting for. */
static enum reply
classify_broker(const struct bconn *c, const char *line)
{
	if (strncmp(line, "EVENT ", 6) == 0)
		return R_SKIP;
	if (c->state == CS_ACQUIRING) {
		if (strncmp(line, "OK ", 3) == 0)
			return R_GRANT;
		if (strcmp(line, "TIMEOUT") == 0)
			return R_BUSY;
	} else if (c->state == CS_RELEASING && strcmp(line, "OK") == 0)
		return R_RELEASED;
	return R_ERR;
}

/* Classify a RESP reply line; every reply used here is a single line. */
static enum reply
classify_redis(const struct bconn *c, const char *line)
{
	if (c->state == CS_ACQUIRING) {
		if (strcmp(line, "+OK") == 0)
			return R_GRANT;
		if (strcmp(line, "$-1") == 0)
			return R_BUSY;
	} else if (c->state == CS_RELEASING) {
		if (strcmp(line, ":1") == 0)
			return R_RELEASED;
		if (strncmp(line, "-NOSCRIPT", 9) == 0)
			return R_NOSCRIPT;
	}
	return R_ERR;
}

/* A grant to a connection that was waiting when the last release was sent
 * is a handoff. Any grant uses that release up: the next handoff needs a
 * new one. */
static int
handoff_count(struct bconn *c, uint64_t now)
{
	struct bench *b = c->b;
	uint64_t rel = b->last_release;

	b->last_release = 0;
	if (rel == 0 || c->cycle_start >= rel)
		return 0;
	b->handoffs++;
	samples_add(&b->hand, now - rel);
	if (c->broker != b->last_release_broker) {
		b->xhandoffs++;
		samples_add(&b->xhand, now - rel);
	}
	return 1;
}

/* Granted the contended name: count the wait and any handoff, then hold
 * (contended: hold_us, then release; handoff: see holder_check). */
static void
compete_granted(struct bconn *c, uint64_t now)
{
	struct bench *b = c->b;
	int handoff = handoff_count(c, now);

	c->grants++;
	samples_add(&b->wait, now - c->cycle_start);
	if (b->o.scenario == SCEN_CONTENDED) {
		samples_add(&b->lat, now - c->cycle_start);
		b->ops++;
	} else if (handoff)
		b->ops++;
	c->state = CS_HOLDING;
	c->hold_done = b->o.hold_us == 0;
	if (!c->hold_done)
		conn_timer_us(c, b->o.hold_us);
	holder_check(c);
}

/* Every waiter asks now that every name is held; the clock starts when
 * the last request is written (conn_write_cb). */
static void
scale_send_waiters(struct bench *b)
{
	unsigned i, first = (unsigned)b->o.conns + b->o.scale_names;

	if (b->o.waiters == 0) {
		bench_start(b);
		return;
	}
	for (i = first; i < first + b->o.waiters; i++)
		conn_next(&b->conns[i]);
}

/* Granted: probes release at once, competitors hold, scale holders keep
 * the name; a scale waiter is granted only if a holder lost its lock. */
static void
conn_granted(struct bconn *c, uint64_t now)
{
	struct bench *b = c->b;

	switch (c->role) {
	case ROLE_CYCLE:
		conn_release(c);
		break;
	case ROLE_COMPETE:
		compete_granted(c, now);
		break;
	case ROLE_HOLDER:
		c->state = CS_HOLDING;
		if (++b->held == b->o.scale_names)
			scale_send_waiters(b);
		break;
	case ROLE_WAITER:
		c->grants++;
		samples_add(&b->wait, now - c->cycle_start);
		c->state = CS_HOLDING;
		break;
	case ROLE_IDLE:
		break;
	}
}

/* Busy: a try-once counts a collision and moves on; a broker wait that
 * ran out (a configured default_wait_ms) asks again; Redis polls. A scale
 * waiter's first poll comes after a random part of the interval, as for
 * clients that began waiting at different times: all in step, they would
 * hit Redis in bursts no real fleet makes. */
static void
conn_busy(struct bconn *c)
{
	struct bench *b = c->b;
	long us = b->o.poll_ms * 1000;

	if (c->role == ROLE_CYCLE) {
		b->busy++;
		conn_next(c);
	} else if (b->o.target == TARGET_BROKER) {
		b->wait_timeouts++;
		conn_try(c);
	} else {
		if (c->role == ROLE_WAITER && !c->phased && us > 0)
			us = (long)(rng_next(b) % (uint64_t)us);
		c->phased = 1;
		c->state = CS_POLLING;
		conn_timer_us(c, us);
	}
}

/* A cycle or a release is over: probes count it, then everyone asks again. */
static void
conn_released(struct bconn *c, uint64_t now)
{
	struct bench *b = c->b;

	if (c->role == ROLE_CYCLE) {
		samples_add(&b->lat, now - c->cycle_start);
		b->ops++;
	}
	conn_next(c);
}

/* Act on one reply line; the cycle restarts after anything unexpected. */
static void
conn_reply(struct bconn *c, const char *line)
{
	struct bench *b = c->b;
	enum reply r;
	uint64_t now = now_ns();

	if (b->o.target == TARGET_BROKER)
		r = classify_broker(c, line);
	else
		r = classify_redis(c, line);
	switch (r) {
	case R_SKIP:
		break;
	case R_GRANT:
		conn_granted(c, now);
		break;
	case R_BUSY:
		conn_busy(c);
		break;
	case R_RELEASED:
		conn_released(c, now);
		break;
	case R_NOSCRIPT:
		c->use_eval = 1;
		conn_release(c);
		break;
	case R_ERR:
		if (b->errors++ < MAX_ERRORS_SHOWN)
			fprintf(stderr, "lockbench: conn %u: unexpected '%s'\n",
			    c->id, line);
		conn_next(c);
		break;
	}
}

/* Read every complete line. A line to a connection that asked nothing is
 * the server turning it away (too many clients): fatal. */
static void
conn_read_cb(struct bufferevent *bev, void *arg)
{
	struct bconn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	char *line;
	size_t len;

	while ((line = evbuffer_readln(in, &len, EVBUFFER_EOL_CRLF)) != NULL) {
		if (c->state == CS_IDLE)
			fatalx("conn %u: unasked-for '%s'", c->id, line);
		if (c->b->phase != PH_DONE)
			conn_reply(c, line);
		free(line);
	}
	if (evbuffer_get_length(in) > 4096)
		fatalx("conn %u: reply line too long", c->id);
}

/* Scale's clock waits until every waiter's request has left this process. */
static void
conn_write_cb(struct bufferevent *bev, void *arg)
{
	struct bconn *c = arg;
	struct bench *b = c->b;

	(void)bev;
	if (c->role != ROLE_WAITER || c->sent || b->phase != PH_SETUP)
		return;
	c->sent = 1;
	if (++b->sent == b->o.waiters)
		bench_start(b);
}

/* Start the clock and the measuring connections together. */
static void
bench_start(struct bench *b)
{
	struct timeval tv;
	unsigned i;

	b->phase = PH_RUN;
	b->t_start = now_ns();
	for (i = 0; i < (unsigned)b->o.conns; i++)
		conn_next(&b->conns[i]);
	tv.tv_sec = (time_t)b->o.duration_s;
	tv.tv_usec = (suseconds_t)((b->o.duration_s - (double)tv.tv_sec) * 1e6);
	evtimer_add(b->stop_ev, &tv);
}

/* Everyone is connected: scale has its names taken first, the others
 * start at once. */
static void
bench_setup(struct bench *b)
{
	unsigned i, first = (unsigned)b->o.conns;

	b->phase = PH_SETUP;
	if (b->o.scenario != SCEN_SCALE) {
		bench_start(b);
		return;
	}
	for (i = first; i < first + b->o.scale_names; i++)
		conn_next(&b->conns[i]);
}

static void conn_open(struct bench *, unsigned);

/* Keep at most CONNECT_BATCH connects in flight, so the server's listen
 * backlog never overflows (a dropped SYN costs a second's retry). */
static void
bench_open_more(struct bench *b)
{
	while (
	    b->opened < b->nconns && b->opened - b->connected < CONNECT_BATCH)
		conn_open(b, b->opened++);
}

/* Connected: no Nagle (one small request per round trip); else fatal. */
static void
conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct bconn *c = arg;
	struct bench *b = c->b;
	int one = 1;

	if (what & BEV_EVENT_CONNECTED) {
		if (b->sa[c->broker].ss_family != AF_UNIX)
			setsockopt(bufferevent_getfd(bev), IPPROTO_TCP,
			    TCP_NODELAY, &one, sizeof one);
		if (++b->connected == b->nconns)
			bench_setup(b);
		else
			bench_open_more(b);
		return;
	}
	if (what & BEV_EVENT_EOF)
		fatalx("conn %u: closed by the server", c->id);
	fatalx("conn %u: %s", c->id,
	    evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
}

/* Roles by index: the -c measuring connections, then (scale) the holders,
 * the waiters and the idle. */
static enum role
bench_role(const struct bench *b, unsigned i)
{
	unsigned n = (unsigned)b->o.conns;

	if (i < n && b->o.scenario != SCEN_CONTENDED &&
	    b->o.scenario != SCEN_HANDOFF)
		return ROLE_CYCLE;
	if (i < n)
		return ROLE_COMPETE;
	if (i < n + b->o.scale_names)
		return ROLE_HOLDER;
	if (i < n + b->o.scale_names + b->o.waiters)
		return ROLE_WAITER;
	return ROLE_IDLE;
}

/* Open connection i; the setup starts when the last one is up. */
static void
conn_open(struct bench *b, unsigned i)
{
	struct bconn *c = &b->conns[i];

	c->b = b;
	c->id = i;
	c->role = bench_role(b, i);
	c->broker = i % b->o.naddrs;
	c->bev = b->tls == NULL
	    ? bufferevent_socket_new(b->base, -1, BEV_OPT_CLOSE_ON_FREE)
	    : bufferevent_openssl_socket_new(b->base, -1, SSL_new(b->tls),
		  BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
	c->timer = evtimer_new(b->base, conn_timer_cb, c);
	if (c->bev == NULL || c->timer == NULL)
		fatalx("out of memory");
	bufferevent_setcb(
	    c->bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	if (bufferevent_socket_connect(c->bev,
		(struct sockaddr *)&b->sa[c->broker],
		(int)b->salen[c->broker]) != 0)
		fatalx("conn %u: connect failed", i);
}

/* Waits still pending at the end count with their age so far, so a
 * starved client shows in the percentiles. */
static void
bench_pending_waits(struct bench *b)
{
	unsigned i;

	for (i = 0; i < b->nconns; i++) {
		struct bconn *c = &b->conns[i];

		if (c->role != ROLE_COMPETE && c->role != ROLE_WAITER)
			continue;
		if (conn_waiting(c)) {
			samples_add(&b->wait, b->t_end - c->cycle_start);
			b->pending++;
		}
	}
}

/* The samples behind ops and p50/p99/p999: handoffs in handoff. */
static struct samples *
bench_main_samples(struct bench *b)
{
	return b->o.scenario == SCEN_HANDOFF ? &b->hand : &b->lat;
}

/* Grants per competing connection: min, max and their ratio. */
static void
figures_grants(struct bench *b, struct figures *f)
{
	uint64_t gmin = UINT64_MAX, gmax = 0;
	unsigned i;

	for (i = 0; i < b->nconns; i++) {
		if (b->conns[i].role != ROLE_COMPETE)
			continue;
		if (b->conns[i].grants < gmin)
			gmin = b->conns[i].grants;
		if (b->conns[i].grants > gmax)
			gmax = b->conns[i].grants;
	}
	f->gmin = (double)gmin;
	f->gmax = (double)gmax;
	f->fairness = gmin > 0 ? (double)gmax / (double)gmin : NAN;
}

/* Work out every figure of the run once, for the table and the JSON. */
static void
bench_figures(struct bench *b, struct figures *f)
{
	enum scenario s = b->o.scenario;
	struct samples *lat = bench_main_samples(b);
	int waits = s != SCEN_UNCONTENDED;
	int compete = s == SCEN_CONTENDED || s == SCEN_HANDOFF;

	samples_sort(&b->lat);
	samples_sort(&b->wait);
	samples_sort(&b->hand);
	samples_sort(&b->xhand);
	samples_sort(&b->lag);
	*f = (struct figures){ .gmin = NAN,
		.gmax = NAN,
		.fairness = NAN,
		.xhandoffs = NAN,
		.xhp50 = NAN,
		.xhp99 = NAN };
	f->secs = (double)(b->t_end - b->t_start) / 1e9;
	f->ops_s = (double)b->ops / f->secs;
	f->p50 = samples_pct(lat, 0.5);
	f->p99 = samples_pct(lat, 0.99);
	f->p999 = samples_pct(lat, 0.999);
	f->wp50 = samples_pct(&b->wait, 0.5);
	f->wp99 = samples_pct(&b->wait, 0.99);
	f->wp999 = samples_pct(&b->wait, 0.999);
	f->pending = waits ? (double)b->pending : NAN;
	f->handoffs = compete ? (double)b->handoffs : NAN;
	f->handoffs_s = compete ? (double)b->handoffs / f->secs : NAN;
	f->hp50 = samples_pct(&b->hand, 0.5);
	f->hp99 = samples_pct(&b->hand, 0.99);
	f->hmax = samples_pct(&b->hand, 1.0);
	if (compete && b->o.naddrs > 1) {
		f->xhandoffs = (double)b->xhandoffs;
		f->xhp50 = samples_pct(&b->xhand, 0.5);
		f->xhp99 = samples_pct(&b->xhand, 0.99);
	}
	if (compete)
		figures_grants(b, f);
	f->busy =
	    s == SCEN_UNCONTENDED || s == SCEN_SCALE ? (double)b->busy : NAN;
	f->rss = b->rss_kib >= 0 ? (double)b->rss_kib : NAN;
	f->hwm = b->hwm_kib >= 0 ? (double)b->hwm_kib : NAN;
	f->lag99 = samples_pct(&b->lag, 0.99);
}

/* A figure for the table: "-" when it does not apply. */
static const char *
fmt_num(char *buf, size_t size, double v, int prec)
{
	if (isnan(v))
		return "-";
	snprintf(buf, size, "%.*f", prec, v);
	return buf;
}

/* Grants per broker of the competing connections, into g[naddrs]. */
static void
grants_per_broker(const struct bench *b, uint64_t *g)
{
	unsigned i;

	memset(g, 0, b->o.naddrs * sizeof *g);
	for (i = 0; i < b->nconns; i++)
		if (b->conns[i].role == ROLE_COMPETE)
			g[b->conns[i].broker] += b->conns[i].grants;
}

/* The table's lines for several brokers: grants per broker, crossings. */
static void
report_table_brokers(const struct bench *b, const struct figures *f)
{
	uint64_t g[MAX_BROKERS];
	char x[2][32];
	unsigned i;

	if (b->o.naddrs < 2 || isnan(f->gmin))
		return;
	grants_per_broker(b, g);
	printf("  grants per broker:");
	for (i = 0; i < b->o.naddrs; i++)
		printf(" %" PRIu64, g[i]);
	printf("\n  handoffs across brokers %.0f: p50 %s  p99 %s ms\n",
	    f->xhandoffs, fmt_num(x[0], sizeof x[0], f->xhp50, 3),
	    fmt_num(x[1], sizeof x[1], f->xhp99, 3));
}

/* The human table: one row of the main figures, then a line per extra. */
static void
report_table(struct bench *b, const struct figures *f)
{
	char x[3][32];

	printf("%-12s %-7s %6s %6s %11s %9s %9s %9s\n", "scenario", "target",
	    "conns", "secs", "ops/s", "p50_ms", "p99_ms", "p999_ms");
	printf("%-12s %-7s %6ld %6.2f %11.1f %9s %9s %9s\n",
	    scenario_names[b->o.scenario],
	    b->o.target == TARGET_BROKER ? "broker" : "redis", b->o.conns,
	    f->secs, f->ops_s, fmt_num(x[0], sizeof x[0], f->p50, 3),
	    fmt_num(x[1], sizeof x[1], f->p99, 3),
	    fmt_num(x[2], sizeof x[2], f->p999, 3));
	if (!isnan(f->pending))
		printf(
		    "  waits incl. %.0f pending: p50 %s  p99 %s  p999 %s ms\n",
		    f->pending, fmt_num(x[0], sizeof x[0], f->wp50, 3),
		    fmt_num(x[1], sizeof x[1], f->wp99, 3),
		    fmt_num(x[2], sizeof x[2], f->wp999, 3));
	if (!isnan(f->handoffs))
		printf("  handoffs %.0f (%.1f/s): p50 %s  p99 %s ms\n",
		    f->handoffs, f->handoffs_s,
		    fmt_num(x[0], sizeof x[0], f->hp50, 3),
		    fmt_num(x[1], sizeof x[1], f->hp99, 3));
	if (!isnan(f->gmin))
		printf("  grants per client: min %.0f  max %.0f  fairness %s\n",
		    f->gmin, f->gmax,
		    fmt_num(x[0], sizeof x[0], f->fairness, 3));
	report_table_brokers(b, f);
	if (b->o.scenario == SCEN_SCALE)
		printf("  %u idle, %u waiters on %u held names\n", b->o.idle,
		    b->o.waiters, b->o.scale_names);
	if (!isnan(f->busy))
		printf("  busy (name taken, retried) %.0f\n", f->busy);
	if (b->o.pid != 0)
		printf("  pid %ld: rss %s KiB, peak (hwm) %s KiB\n", b->o.pid,
		    fmt_num(x[0], sizeof x[0], f->rss, 0),
		    fmt_num(x[1], sizeof x[1], f->hwm, 0));
	if (f->lag99 >= 1)
		printf("  lockbench overloaded: its timers fired %.3f ms late "
		       "(p99)\n",
		    f->lag99);
	if (b->errors > 0)
		printf("  errors %" PRIu64 "\n", b->errors);
	if (b->wait_timeouts > 0)
		printf("  waits answered TIMEOUT (asked again) %" PRIu64 "\n",
		    b->wait_timeouts);
}

/* One JSON member; NAN is null, so what does not apply says so. */
static void
json_num(const char *key, double v, int prec)
{
	if (isnan(v))
		printf(",\"%s\":null", key);
	else
		printf(",\"%s\":%.*f", key, prec, v);
}

/* The scenario's parameters; null where the scenario has no use for one. */
static void
report_json_params(const struct bench *b)
{
	enum scenario s = b->o.scenario;
	int compete = s == SCEN_CONTENDED || s == SCEN_HANDOFF;
	int broker = b->o.target == TARGET_BROKER;

	json_num("names", s == SCEN_UNCONTENDED ? b->o.names : NAN, 0);
	json_num("hold_us", compete ? (double)b->o.hold_us : NAN, 0);
	json_num("poll_ms",
	    !broker && s != SCEN_UNCONTENDED ? (double)b->o.poll_ms : NAN, 0);
	json_num("ttl_ms", broker && compete ? NAN : (double)b->o.ttl_ms, 0);
	json_num("idle", s == SCEN_SCALE ? b->o.idle : NAN, 0);
	json_num("waiters", s == SCEN_SCALE ? b->o.waiters : NAN, 0);
	json_num("scale_names", s == SCEN_SCALE ? b->o.scale_names : NAN, 0);
	json_num("pid", b->o.pid != 0 ? (double)b->o.pid : NAN, 0);
}

/* The brokers' addresses, and (contended, handoff) the grants per broker
 * and per competing connection; null where they do not apply. */
static void
report_json_brokers(const struct bench *b)
{
	int compete =
	    b->o.scenario == SCEN_CONTENDED || b->o.scenario == SCEN_HANDOFF;
	uint64_t g[MAX_BROKERS];
	unsigned i, n = 0;

	if (b->o.target != TARGET_BROKER) {
		printf(",\"brokers\":null");
	} else {
		printf(",\"brokers\":[");
		for (i = 0; i < b->o.naddrs; i++)
			printf("%s\"%s\"", i ? "," : "", b->o.addrs[i]);
		printf("]");
	}
	if (!compete) {
		printf(
		    ",\"grants_per_broker\":null,\"grants_per_client\":null");
		return;
	}
	grants_per_broker(b, g);
	printf(",\"grants_per_broker\":[");
	for (i = 0; i < b->o.naddrs; i++)
		printf("%s%" PRIu64, i ? "," : "", g[i]);
	printf("],\"grants_per_client\":[");
	for (i = 0; i < b->nconns; i++)
		if (b->conns[i].role == ROLE_COMPETE)
			printf(
			    "%s%" PRIu64, n++ ? "," : "", b->conns[i].grants);
	printf("]");
}

/* The JSON line: one object, every key always present. */
static void
report_json(const struct bench *b, const struct figures *f)
{
	printf("{\"scenario\":\"%s\",\"target\":\"%s\",\"address\":\"%s\"",
	    scenario_names[b->o.scenario],
	    b->o.target == TARGET_BROKER ? "broker" : "redis", b->o.addr);
	json_num("connections", (double)b->o.conns, 0);
	json_num("total_connections", b->nconns, 0);
	json_num("duration_s", f->secs, 3);
	json_num("ops", (double)b->ops, 0);
	json_num("ops_per_s", f->ops_s, 1);
	json_num("p50_ms", f->p50, 3);
	json_num("p99_ms", f->p99, 3);
	json_num("p999_ms", f->p999, 3);
	json_num("wait_p50_ms", f->wp50, 3);
	json_num("wait_p99_ms", f->wp99, 3);
	json_num("wait_p999_ms", f->wp999, 3);
	json_num("pending_waits", f->pending, 0);
	json_num("handoffs", f->handoffs, 0);
	json_num("handoffs_per_s", f->handoffs_s, 1);
	json_num("handoff_p50_ms", f->hp50, 3);
	json_num("handoff_p99_ms", f->hp99, 3);
	json_num("handoff_max_ms", f->hmax, 3);
	json_num("cross_handoffs", f->xhandoffs, 0);
	json_num("cross_handoff_p50_ms", f->xhp50, 3);
	json_num("cross_handoff_p99_ms", f->xhp99, 3);
	json_num("min_grants", f->gmin, 0);
	json_num("max_grants", f->gmax, 0);
	json_num("fairness", f->fairness, 3);
	json_num("busy", f->busy, 0);
	json_num("rss_kib", f->rss, 0);
	json_num("hwm_kib", f->hwm, 0);
	json_num("errors", (double)b->errors, 0);
	json_num("wait_timeouts",
	    b->o.target == TARGET_BROKER && b->o.scenario != SCEN_UNCONTENDED
		? (double)b->wait_timeouts
		: NAN,
	    0);
	json_num("timer_lag_p99_ms", f->lag99, 3);
	json_num("timer_lag_max_ms", samples_pct(&b->lag, 1.0), 3);
	report_json_params(b);
	report_json_brokers(b);
	printf("}\n");
}

/* The path of a file next to the CSV: its name less ".csv", plus suffix. */
static void
csv_sibling(char *buf, size_t size, const char *csv, const char *suffix)
{
	size_t n = strlen(csv);

	if (n > 4 && strcmp(csv + n - 4, ".csv") == 0)
		n -= 4;
	if ((size_t)snprintf(buf, size, "%.*s%s", (int)n, csv, suffix) >= size)
		fatalx("--csv: path too long");
}

/* The distribution at 0.1 % steps, then p99.99 and the maximum; waits in
 * a third column when there are any. */
static void
csv_write(
    const char *path, const struct samples *lat, const struct samples *wait)
{
	FILE *f = fopen(path, "w");
	double p;
	int k;

	if (f == NULL)
		fatalx("%s: %s", path, strerror(errno));
	fprintf(f, "percentile,latency_ms%s\n", wait->n ? ",wait_ms" : "");
	for (k = 1; k <= 1001; k++) {
		p = k < 1000 ? k / 1000.0 : k == 1000 ? 0.9999 : 1.0;
		fprintf(f, "%g,%.6f", p * 100, samples_pct(lat, p));
		if (wait->n > 0)
			fprintf(f, ",%.6f", samples_pct(wait, p));
		fputc('\n', f);
	}
	if (fclose(f) != 0)
		fatalx("%s: %s", path, strerror(errno));
}

/* A gnuplot script that draws the CSV's columns, log y, into png; it picks
 * pngcairo when that terminal was built in. */
static void
gp_write(const struct bench *b, const char *gp, const char *png, int waits)
{
	FILE *f = fopen(gp, "w");

	if (f == NULL)
		fatalx("%s: %s", gp, strerror(errno));
	fprintf(f,
	    "# lockbench latency distribution: gnuplot %s makes %s\n"
	    "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
	    "\tset terminal pngcairo size 960,600\n"
	    "} else {\n"
	    "\tset terminal png size 960,600\n"
	    "}\n"
	    "set termoption noenhanced\n"
	    "set output '%s'\n"
	    "set datafile separator ','\n"
	    "set key top left autotitle columnhead\n"
	    "set title 'lockbench %s, %s %s, %ld connections'\n"
	    "set xlabel 'percentile'\n"
	    "set ylabel 'ms'\n"
	    "set xrange [0:100]\n"
	    "set logscale y\n"
	    "set grid\n"
	    "plot '%s' using 1:2 with lines lw 2%s\n",
	    gp, png, png, scenario_names[b->o.scenario],
	    b->o.target == TARGET_BROKER ? "broker" : "redis", b->o.addr,
	    b->o.conns, b->o.csv,
	    waits ? ", '' using 1:3 with lines lw 2" : "");
	if (fclose(f) != 0)
		fatalx("%s: %s", gp, strerror(errno));
}

/* gnuplot's path if it is on PATH: looked up here, since a failed exec
 * in posix_spawnp may only show as exit status 127. */
static int
gp_find(char *buf, size_t size)
{
	const char *path = getenv("PATH"), *end;
	size_t n;

	for (; path != NULL && *path != '\0'; path = *end ? end + 1 : end) {
		end = strchrnul(path, ':');
		n = (size_t)(end - path);
		if (n == 0 || n + sizeof "/gnuplot" > size)
			continue;
		snprintf(buf, size, "%.*s/gnuplot", (int)n, path);
		if (access(buf, X_OK) == 0)
			return 1;
	}
	return 0;
}

/* Render the plot when gnuplot is on PATH; without it the script waits. */
static void
gp_run(const char *gp, const char *png)
{
	char exe[4096];
	char *argv[] = { (char *)"gnuplot", (char *)gp, NULL };
	pid_t pid;
	int rc, st;

	if (!gp_find(exe, sizeof exe))
		return;
	rc = posix_spawn(&pid, exe, NULL, NULL, argv, environ);
	if (rc != 0) {
		fprintf(stderr, "lockbench: %s: %s\n", exe, strerror(rc));
		return;
	}
	if (waitpid(pid, &st, 0) == -1 || !WIFEXITED(st) ||
	    WEXITSTATUS(st) != 0)
		fprintf(stderr, "lockbench: gnuplot %s failed\n", gp);
	else
		fprintf(stderr, "lockbench: wrote %s\n", png);
}

/* --csv: the distribution, its gnuplot script and, if possible, the png. */
static void
bench_csv(struct bench *b)
{
	char gp[4096], png[4096];
	struct samples *lat = bench_main_samples(b);

	if (lat->n == 0) {
		fprintf(stderr, "lockbench: no samples, no %s\n", b->o.csv);
		return;
	}
	csv_sibling(gp, sizeof gp, b->o.csv, ".gp");
	csv_sibling(png, sizeof png, b->o.csv, ".png");
	csv_write(b->o.csv, lat, &b->wait);
	gp_write(b, gp, png, b->wait.n > 0);
	fprintf(stderr, "lockbench: wrote %s and %s\n", b->o.csv, gp);
	gp_run(gp, png);
}

/* The duration is over: snapshot what is pending and the server's memory,
 * then leave the loop; main reports. */
static void
bench_stop_cb(evutil_socket_t fd, short what, void *arg)
{
	struct bench *b = arg;

	(void)fd;
	(void)what;
	b->t_end = now_ns();
	b->phase = PH_DONE;
	bench_pending_waits(b);
	if (b->o.pid != 0)
		proc_mem(b->o.pid, &b->rss_kib, &b->hwm_kib);
	event_base_loopbreak(b->base);
}

/* The usage text, on stdout for --help and on stderr for a mistake. */
static void __attribute__((noreturn)) usage(int status)
{
	fprintf(status == 0 ? stdout : stderr,
	    "usage: lockbench (--broker HOST:PORT [--broker HOST:PORT ...] |\n"
	    "                  --redis HOST:PORT) [options]\n"
	    "  --broker HOST:PORT  measure lockbrokerd (its line protocol);\n"
	    "                      a path with a '/' is a Unix socket. Give it\n"
	    "                      again for more brokers on one Redis: the\n"
	    "                      connections are spread round-robin over them\n"
	    "  --redis HOST:PORT   measure the direct-Redis client (SET NX "
	    "PX, Lua release)\n"
	    "  -s, --scenario S    uncontended | contended | handoff | scale\n"
	    "                      (default uncontended)\n"
	    "  -c, --conns N       measuring connections (64; handoff 2; "
	    "scale probes 8)\n"
	    "  -k, --names K       names uncontended picks from (10000)\n"
	    "  -d, --duration S    seconds measured (5)\n"
	    "  --hold-us US        a holder keeps the lock US microseconds\n"
	    "                      (contended 1000, handoff 0)\n"
	    "  --poll-ms MS        direct-Redis waiters retry every MS ms\n"
	    "                      (1; scale 100)\n"
	    "  --ttl-ms MS         lease of TTL locks and Redis keys (10000)\n"
	    "  --idle N            scale: idle connections (10000)\n"
	    "  --waiters N         scale: waiting connections (10000)\n"
	    "  --scale-names M     scale: names held all run, waited on "
	    "(100)\n"
	    "  --pid PID           report VmRSS and VmHWM of PID (the broker "
	    "or Redis)\n"
	    "  --tls CAFILE        broker: its TLS listener, trusting CAFILE\n"
	    "  --csv FILE          write the latency distribution to FILE, "
	    "a gnuplot\n"
	    "                      script to FILE.gp, a plot to FILE.png "
	    "(less .csv)\n"
	    "  -h, --help          this text\n");
	exit(status);
}

/* The scenario name to its enum, or die listing the choices. */
static enum scenario
parse_scenario(const char *s)
{
	size_t i;

	for (i = 0; i < sizeof scenario_names / sizeof *scenario_names; i++)
		if (strcmp(s, scenario_names[i]) == 0)
			return (enum scenario)i;
	fatalx("unknown scenario '%s' (uncontended, contended, handoff, "
	       "scale)",
	    s);
}

/* Seconds > 0, as a decimal fraction. */
static double
parse_secs(const char *s)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end != '\0' || !(v > 0) || v > 86400)
		fatalx("-d: want seconds in (0, 86400], got '%s'", s);
	return v;
}

/* One option into o; anything unknown is a usage error. */
static void
parse_one(struct opts *o, int ch, const char *arg)
{
	switch (ch) {
	case 'B':
	case 'R':
		if (o->naddrs > 0 && (ch == 'R' || o->target == TARGET_REDIS))
			fatalx("give one --redis, or --broker (once or more)");
		if (o->naddrs == MAX_BROKERS)
			fatalx("at most %d --broker", MAX_BROKERS);
		o->target = ch == 'B' ? TARGET_BROKER : TARGET_REDIS;
		o->addrs[o->naddrs++] = arg;
		o->addr = o->addrs[0];
		break;
	case 's':
		o->scenario = parse_scenario(arg);
		break;
	case 'c':
		o->conns = parse_long("-c", arg, 1, 100000);
		break;
	case 'k':
		o->names = (unsigned)parse_long("-k", arg, 1, 1000000000);
		break;
	case 'd':
		o->duration_s = parse_secs(arg);
		break;
	case 'H':
		o->hold_us = parse_long("--hold-us", arg, 0, 60000000);
		break;
	case 'P':
		o->poll_ms = parse_long("--poll-ms", arg, 0, 60000);
		break;
	case 'T':
		o->ttl_ms = parse_long("--ttl-ms", arg, 10, 86400000);
		break;
	case 'I':
		o->idle = (unsigned)parse_long("--idle", arg, 0, 1000000);
		break;
	case 'W':
		o->waiters = (unsigned)parse_long("--waiters", arg, 0, 1000000);
		break;
	case 'N':
		o->scale_names =
		    (unsigned)parse_long("--scale-names", arg, 1, 1000000);
		break;
	case 'p':
		o->pid = parse_long("--pid", arg, 1, 0x7fffffff);
		break;
	case 'C':
		if (strpbrk(arg, "'\n") != NULL)
			fatalx("--csv: no quotes or newlines in the file name");
		o->csv = arg;
		break;
	case 'S':
		o->tls_ca = arg;
		break;
	case 'h':
		usage(0);
	default:
		usage(2);
	}
}

/* Defaults that depend on the scenario, and the checks across options. */
static void
opts_resolve(struct opts *o)
{
	if (o->addr == NULL)
		usage(2);
	if (o->conns < 0 && o->scenario == SCEN_SCALE)
		o->conns = 8;
	else if (o->conns < 0 && o->scenario == SCEN_HANDOFF)
		o->conns = 2;
	else if (o->conns < 0)
		o->conns = 64;
	if (o->scenario == SCEN_HANDOFF && o->conns != 2)
		fatalx("handoff runs two connections, not %ld", o->conns);
	if (o->hold_us < 0)
		o->hold_us = o->scenario == SCEN_HANDOFF ? 0 : 1000;
	if (o->poll_ms < 0)
		o->poll_ms = o->scenario == SCEN_SCALE ? 100 : 1;
}

/* Command line to options, with the defaults of the standard runs. */
static void
parse_opts(struct bench *b, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "broker", required_argument, NULL, 'B' },
		{ "redis", required_argument, NULL, 'R' },
		{ "scenario", required_argument, NULL, 's' },
		{ "conns", required_argument, NULL, 'c' },
		{ "names", required_argument, NULL, 'k' },
		{ "duration", required_argument, NULL, 'd' },
		{ "hold-us", required_argument, NULL, 'H' },
		{ "poll-ms", required_argument, NULL, 'P' },
		{ "ttl-ms", required_argument, NULL, 'T' },
		{ "idle", required_argument, NULL, 'I' },
		{ "waiters", required_argument, NULL, 'W' },
		{ "scale-names", required_argument, NULL, 'N' },
		{ "pid", required_argument, NULL, 'p' },
		{ "csv", required_argument, NULL, 'C' },
		{ "tls", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	b->o = (struct opts){ .conns = -1,
		.hold_us = -1,
		.poll_ms = -1,
		.names = 10000,
		.duration_s = 5,
		.ttl_ms = 10000,
		.idle = 10000,
		.waiters = 10000,
		.scale_names = 100 };
	while ((ch = getopt_long(argc, argv, "s:c:k:d:h", lo, NULL)) != -1)
		parse_one(&b->o, ch, optarg);
	if (optind != argc)
		usage(2);
	opts_resolve(&b->o);
}

/* The event loop. Holds and polls are around 1 ms: epoll_wait's
 * millisecond timeout would round them up, so timers use timerfd, and
 * are set from the clock, not from the start of a loop turn that may have
 * spent milliseconds on thousands of callbacks. */
static void
bench_loop_new(struct bench *b)
{
	struct event_config *cfg = event_config_new();

	if (cfg == NULL)
		fatalx("cannot set up libevent");
	event_config_set_flag(
	    cfg, EVENT_BASE_FLAG_PRECISE_TIMER | EVENT_BASE_FLAG_NO_CACHE_TIME);
	b->base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	if (b->base == NULL)
		fatalx("cannot set up libevent");
	b->stop_ev = evtimer_new(b->base, bench_stop_cb, b);
	if (b->stop_ev == NULL)
		fatalx("cannot set up libevent");
}

/* Everything the run needs before the loop: address, limits, names. */
static void
bench_init(struct bench *b)
{
	unsigned i;

	for (i = 0; i < b->o.naddrs; i++)
		parse_addr(&b->sa[i], &b->salen[i], b->o.addrs[i]);
	b->nconns = (unsigned)b->o.conns;
	if (b->o.scenario == SCEN_SCALE)
		b->nconns += b->o.scale_names + b->o.waiters + b->o.idle;
	raise_nofile(b->nconns);
	if (b->o.pid != 0) {
		proc_mem(b->o.pid, &b->rss_kib, &b->hwm_kib);
		if (b->rss_kib < 0)
			fatalx("--pid %ld: no VmRSS in /proc/%ld/status",
			    b->o.pid, b->o.pid);
	}
	b->rss_kib = b->hwm_kib = -1;
	b->rng = now_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
	/* A fresh prefix per run: locks a previous run left in Redis (the
	 * direct client's PX leases) cannot get in the way. */
	snprintf(b->prefix, sizeof b->prefix, "lb%08" PRIx64,
	    rng_next(b) & 0xffffffffu);
	bench_loop_new(b);
	b->conns = xcalloc(b->nconns, sizeof *b->conns);
}

/* Free everything, so valgrind sees no leak. */
static void
bench_free(struct bench *b)
{
	unsigned i;

	for (i = 0; i < b->opened; i++) {
		bufferevent_free(b->conns[i].bev);
		event_free(b->conns[i].timer);
	}
	free(b->conns);
	free(b->lat.v);
	free(b->wait.v);
	free(b->hand.v);
	free(b->xhand.v);
	free(b->lag.v);
	event_free(b->stop_ev);
	event_base_free(b->base);
	libevent_global_shutdown();
}

/* --tls: one client context for every connection, trusting the CA (the
 * broker's certificate chain is verified; its name is not, a bench talks
 * to the address it was given). */
static void
bench_tls(struct bench *b)
{
	if (b->o.tls_ca == NULL)
		return;
	if (b->o.target != TARGET_BROKER)
		fatalx("--tls is for --broker");
	if ((b->tls = SSL_CTX_new(TLS_client_method())) == NULL ||
	    SSL_CTX_load_verify_locations(b->tls, b->o.tls_ca, NULL) != 1)
		fatalx("--tls %s: cannot load the CA", b->o.tls_ca);
	SSL_CTX_set_verify(b->tls, SSL_VERIFY_PEER, NULL);
}

int
main(int argc, char **argv)
{
	struct bench b;
	struct figures f;

	memset(&b, 0, sizeof b);
	/* A server that goes away must end the run with a message, not
	 * with SIGPIPE. */
	signal(SIGPIPE, SIG_IGN);
	parse_opts(&b, argc, argv);
	bench_tls(&b);
	bench_init(&b);
	bench_open_more(&b);
	event_base_dispatch(b.base);
	bench_figures(&b, &f);
	report_table(&b, &f);
	report_json(&b, &f);
	fflush(stdout);
	if (b.o.csv != NULL)
		bench_csv(&b);
	bench_free(&b);
	return b.ops > 0 ? 0 : 1;
}

/*
 * lockbench: a load generator for lockbrokerd and, as the baseline, for the
 * canonical direct-Redis lock (SET key token NX PX, release by a Lua
 * compare-and-delete, waiting by polling). One libevent loop, N connections,
 * one request in flight per connection, so every figure is a round trip as
 * a client library would see it.
 */
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

/* The release script; its SHA1 is sent first, the body only after NOSCRIPT,
 * as redis-py's register_script does. */
#define RELEASE_LUA                                                            \
	"if redis.call('get', KEYS[1]) == ARGV[1] then "                       \
	"return redis.call('del', KEYS[1]) else return 0 end"
#define RELEASE_SHA "e9f69f2beb755be68b5e456ee2ce9aadfbc4ebf4"

#define MAX_ERRORS_SHOWN 5

enum target { TARGET_BROKER, TARGET_REDIS };
enum scenario { SCEN_UNCONTENDED, SCEN_CONTENDED };
enum cstate { CS_IDLE, CS_ACQUIRING, CS_HOLDING, CS_RELEASING, CS_POLLING };
enum reply { R_GRANT, R_BUSY, R_RELEASED, R_NOSCRIPT, R_SKIP, R_ERR };

struct samples {
	uint64_t *v; /* nanoseconds */
	size_t n, cap;
};

struct opts {
	enum target target;
	enum scenario scenario;
	const char *addr;
	unsigned conns;
	unsigned names;
	double duration_s;
	long hold_us;
	long poll_ms;
	long ttl_ms;
};

struct bench;

struct bconn {
	struct bench *b;
	unsigned id;
	struct bufferevent *bev;
	struct event *timer; /* hold (contended) or poll (Redis waiting) */
	enum cstate state;
	uint64_t cycle_start; /* ns: the first try of this acquire */
	uint64_t grants;
	int use_eval; /* NOSCRIPT seen: send the script body from now on */
	char name[96];
	char token[40];
};

struct bench {
	struct opts o;
	struct event_base *base;
	struct sockaddr_storage sa;
	socklen_t salen;
	struct bconn *conns;
	unsigned connected;
	int running;
	uint64_t t_start, t_end;
	struct event *stop_ev;
	struct samples lat;  /* cycles (uncontended) or completed waits */
	struct samples wait; /* completed and pending waits (contended) */
	uint64_t ops, busy, errors, pending;
	char prefix[32];
	uint64_t rng;
};

static void conn_next(struct bconn *);
static void conn_release(struct bconn *);

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

/* Nearest-rank percentile in ms of sorted samples; 0 when there are none. */
static double
samples_pct(const struct samples *s, double p)
{
	size_t i;

	if (s->n == 0)
		return 0;
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

/* HOST:PORT (or [V6]:PORT) to a socket address, resolved once up front. */
static void
parse_addr(struct bench *b, const char *arg)
{
	struct addrinfo hints, *res;
	char host[256];
	const char *colon = strrchr(arg, ':');
	size_t hl;
	int rc;

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
	memcpy(&b->sa, res->ai_addr, res->ai_addrlen);
	b->salen = res->ai_addrlen;
	freeaddrinfo(res);
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

/* Pick the name for this cycle: one of K (uncontended) or the one name. */
static void
conn_pick_name(struct bconn *c)
{
	struct bench *b = c->b;
	unsigned n = 0;

	if (b->o.scenario == SCEN_UNCONTENDED)
		n = (unsigned)(rng_next(b) % b->o.names);
	if (b->o.target == TARGET_REDIS)
		snprintf(
		    c->name, sizeof c->name, "lockbench:{%s-%u}", b->prefix, n);
	else
		snprintf(c->name, sizeof c->name, "%s-%u", b->prefix, n);
}

/* Send one try of the acquire; cycle_start stays at the first try. */
static void
conn_try(struct bconn *c)
{
	struct bench *b = c->b;
	char ttl[24];

	c->state = CS_ACQUIRING;
	if (b->o.target == TARGET_BROKER) {
		if (b->o.scenario == SCEN_UNCONTENDED)
			evbuffer_add_printf(bufferevent_get_output(c->bev),
			    "ACQUIRE %s TTL %ld WAIT 0\n", c->name,
			    b->o.ttl_ms);
		else
			evbuffer_add_printf(bufferevent_get_output(c->bev),
			    "ACQUIRE %s\n", c->name);
		return;
	}
	snprintf(ttl, sizeof ttl, "%ld", b->o.ttl_ms);
	resp_send(c, 6,
	    (const char *[]){ "SET", c->name, c->token, "NX", "PX", ttl });
}

/* Start a new acquire: fresh name (uncontended), fresh token, clock. */
static void
conn_next(struct bconn *c)
{
	struct bench *b = c->b;

	conn_pick_name(c);
	snprintf(c->token, sizeof c->token, "%016" PRIx64 "%016" PRIx64,
	    rng_next(b), rng_next(b));
	c->cycle_start = now_ns();
	conn_try(c);
}

/* Release by name (broker) or by compare-and-delete on the token. */
static void
conn_release(struct bconn *c)
{
	c->state = CS_RELEASING;
	if (c->b->o.target == TARGET_BROKER) {
		evbuffer_add_printf(
		    bufferevent_get_output(c->bev), "RELEASE %s\n", c->name);
		return;
	}
	if (c->use_eval)
		resp_send(c, 5,
		    (const char *[]){
			"EVAL", RELEASE_LUA, "1", c->name, c->token });
	else
		resp_send(c, 5,
		    (const char *[]){
			"EVALSHA", RELEASE_SHA, "1", c->name, c->token });
}

/* Hold ended, or the poll interval passed: release, or try again. */
static void
conn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct bconn *c = arg;

	(void)fd;
	(void)what;
	if (!c->b->running)
		return;
	if (c->state == CS_HOLDING)
		conn_release(c);
	else if (c->state == CS_POLLING)
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

/* Granted: uncontended releases at once, contended holds for hold_us. */
static void
conn_granted(struct bconn *c, uint64_t now)
{
	struct bench *b = c->b;
	struct timeval tv;

	c->grants++;
	if (b->o.scenario == SCEN_UNCONTENDED) {
		conn_release(c);
		return;
	}
	samples_add(&b->lat, now - c->cycle_start);
	samples_add(&b->wait, now - c->cycle_start);
	b->ops++;
	if (b->o.hold_us == 0) {
		conn_release(c);
		return;
	}
	c->state = CS_HOLDING;
	tv.tv_sec = b->o.hold_us / 1000000;
	tv.tv_usec = b->o.hold_us % 1000000;
	evtimer_add(c->timer, &tv);
}

/* Busy: a try-once counts a collision and moves on; a waiter polls. */
static void
conn_busy(struct bconn *c)
{
	struct bench *b = c->b;
	struct timeval tv;

	if (b->o.scenario == SCEN_UNCONTENDED) {
		b->busy++;
		conn_next(c);
		return;
	}
	c->state = CS_POLLING;
	tv.tv_sec = b->o.poll_ms / 1000;
	tv.tv_usec = (b->o.poll_ms % 1000) * 1000;
	evtimer_add(c->timer, &tv);
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
		if (b->o.scenario == SCEN_UNCONTENDED) {
			samples_add(&b->lat, now - c->cycle_start);
			b->ops++;
		}
		conn_next(c);
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

/* Read every complete line; a reply is only acted on while running. */
static void
conn_read_cb(struct bufferevent *bev, void *arg)
{
	struct bconn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	char *line;
	size_t len;

	while ((line = evbuffer_readln(in, &len, EVBUFFER_EOL_CRLF)) != NULL) {
		if (c->b->running)
			conn_reply(c, line);
		free(line);
	}
	if (evbuffer_get_length(in) > 4096)
		fatalx("conn %u: reply line too long", c->id);
}

/* Start the clock once every connection is up, so all start together. */
static void
bench_start(struct bench *b)
{
	struct timeval tv;
	unsigned i;

	b->running = 1;
	b->t_start = now_ns();
	for (i = 0; i < b->o.conns; i++)
		conn_next(&b->conns[i]);
	tv.tv_sec = (time_t)b->o.duration_s;
	tv.tv_usec = (suseconds_t)((b->o.duration_s - (double)tv.tv_sec) * 1e6);
	evtimer_add(b->stop_ev, &tv);
}

/* Connected: no Nagle (one small request per round trip); else fatal. */
static void
conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct bconn *c = arg;
	int one = 1;

	if (what & BEV_EVENT_CONNECTED) {
		setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY,
		    &one, sizeof one);
		if (++c->b->connected == c->b->o.conns)
			bench_start(c->b);
		return;
	}
	if (what & BEV_EVENT_EOF)
		fatalx("conn %u: closed by the server", c->id);
	fatalx("conn %u: %s", c->id,
	    evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
}

/* Open connection i; the run starts when the last one is up. */
static void
conn_open(struct bench *b, unsigned i)
{
	struct bconn *c = &b->conns[i];

	c->b = b;
	c->id = i;
	c->bev = bufferevent_socket_new(b->base, -1, BEV_OPT_CLOSE_ON_FREE);
	c->timer = evtimer_new(b->base, conn_timer_cb, c);
	if (c->bev == NULL || c->timer == NULL)
		fatalx("out of memory");
	bufferevent_setcb(c->bev, conn_read_cb, NULL, conn_event_cb, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	if (bufferevent_socket_connect(
		c->bev, (struct sockaddr *)&b->sa, (int)b->salen) != 0)
		fatalx("conn %u: connect failed", i);
}

/* Waits still pending at the end count with their age so far, so a
 * starved client shows in the percentiles. */
static void
bench_pending_waits(struct bench *b)
{
	unsigned i;

	for (i = 0; i < b->o.conns; i++) {
		struct bconn *c = &b->conns[i];

		if (c->state == CS_ACQUIRING || c->state == CS_POLLING) {
			samples_add(&b->wait, b->t_end - c->cycle_start);
			b->pending++;
		}
	}
}

/* Print the human table and the JSON line of one run. */
static void
bench_report(struct bench *b)
{
	double secs = (double)(b->t_end - b->t_start) / 1e9;
	double ops_s = (double)b->ops / secs;
	const char *scen =
	    b->o.scenario == SCEN_UNCONTENDED ? "uncontended" : "contended";
	const char *tgt = b->o.target == TARGET_BROKER ? "broker" : "redis";
	uint64_t gmin = UINT64_MAX, gmax = 0;
	unsigned i;

	qsort(b->lat.v, b->lat.n, sizeof *b->lat.v, cmp_u64);
	qsort(b->wait.v, b->wait.n, sizeof *b->wait.v, cmp_u64);
	for (i = 0; i < b->o.conns; i++) {
		if (b->conns[i].grants < gmin)
			gmin = b->conns[i].grants;
		if (b->conns[i].grants > gmax)
			gmax = b->conns[i].grants;
	}
	printf("%-12s %-7s %6s %6s %11s %9s %9s %9s\n", "scenario", "target",
	    "conns", "secs", "ops/s", "p50_ms", "p99_ms", "p999_ms");
	printf("%-12s %-7s %6u %6.2f %11.1f %9.3f %9.3f %9.3f\n", scen, tgt,
	    b->o.conns, secs, ops_s, samples_pct(&b->lat, 0.5),
	    samples_pct(&b->lat, 0.99), samples_pct(&b->lat, 0.999));
	if (b->o.scenario == SCEN_CONTENDED)
		printf(
		    "  waits incl. %" PRIu64 " pending: p50 %.3f ms, p99 %.3f "
		    "ms; grants per client min %" PRIu64 " max %" PRIu64 "\n",
		    b->pending, samples_pct(&b->wait, 0.5),
		    samples_pct(&b->wait, 0.99), gmin, gmax);
	else
		printf("  busy (name taken, retried) %" PRIu64 "\n", b->busy);
	if (b->errors > 0)
		printf("  errors %" PRIu64 "\n", b->errors);

	printf("{\"scenario\":\"%s\",\"target\":\"%s\",\"address\":\"%s\","
	       "\"connections\":%u,\"duration_s\":%.3f,\"ops\":%" PRIu64
	       ",\"ops_per_s\":%.1f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,"
	       "\"p999_ms\":%.3f,\"errors\":%" PRIu64,
	    scen, tgt, b->o.addr, b->o.conns, secs, b->ops, ops_s,
	    samples_pct(&b->lat, 0.5), samples_pct(&b->lat, 0.99),
	    samples_pct(&b->lat, 0.999), b->errors);
	if (b->o.scenario == SCEN_UNCONTENDED) {
		printf(",\"names\":%u,\"busy\":%" PRIu64 "}\n", b->o.names,
		    b->busy);
		return;
	}
	printf(",\"hold_us\":%ld", b->o.hold_us);
	if (b->o.target == TARGET_REDIS)
		printf(",\"poll_ms\":%ld", b->o.poll_ms);
	printf(",\"wait_p50_ms\":%.3f,\"wait_p99_ms\":%.3f,\"pending_waits\":"
	       "%" PRIu64 ",\"min_grants\":%" PRIu64 ",\"max_grants\":%" PRIu64,
	    samples_pct(&b->wait, 0.5), samples_pct(&b->wait, 0.99), b->pending,
	    gmin, gmax);
	if (gmin > 0)
		printf(",\"fairness\":%.3f}\n", (double)gmax / (double)gmin);
	else
		printf(",\"fairness\":null}\n");
}

/* The duration is over: snapshot, report, leave the loop. */
static void
bench_stop_cb(evutil_socket_t fd, short what, void *arg)
{
	struct bench *b = arg;

	(void)fd;
	(void)what;
	b->t_end = now_ns();
	b->running = 0;
	if (b->o.scenario == SCEN_CONTENDED)
		bench_pending_waits(b);
	bench_report(b);
	fflush(stdout);
	event_base_loopbreak(b->base);
}

static void __attribute__((noreturn)) usage(void)
{
	fprintf(stderr,
	    "usage: lockbench (--broker | --redis) HOST:PORT\n"
	    "                 [--scenario uncontended|contended] [-c conns]\n"
	    "                 [-k names] [-d seconds] [--hold-us us]\n"
	    "                 [--poll-ms ms] [--ttl-ms ms]\n");
	exit(2);
}

/* Command line to options, with the defaults of the standard runs. */
static void
parse_opts(struct bench *b, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "broker", required_argument, NULL, 'B' },
		{ "redis", required_argument, NULL, 'R' },
		{ "scenario", required_argument, NULL, 's' },
		{ "hold-us", required_argument, NULL, 'H' },
		{ "poll-ms", required_argument, NULL, 'P' },
		{ "ttl-ms", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts *o = &b->o;
	char *end;
	int ch;

	*o = (struct opts){ .conns = 64,
		.names = 10000,
		.duration_s = 5,
		.hold_us = 1000,
		.poll_ms = 1,
		.ttl_ms = 10000 };
	while ((ch = getopt_long(argc, argv, "c:k:d:h", lo, NULL)) != -1) {
		switch (ch) {
		case 'B':
		case 'R':
			if (o->addr != NULL)
				fatalx("give one of --broker and --redis");
			o->target = ch == 'B' ? TARGET_BROKER : TARGET_REDIS;
			o->addr = optarg;
			break;
		case 's':
			if (strcmp(optarg, "uncontended") == 0)
				o->scenario = SCEN_UNCONTENDED;
			else if (strcmp(optarg, "contended") == 0)
				o->scenario = SCEN_CONTENDED;
			else
				fatalx("unknown scenario '%s'", optarg);
			break;
		case 'c':
			o->conns =
			    (unsigned)parse_long("-c", optarg, 1, 100000);
			break;
		case 'k':
			o->names =
			    (unsigned)parse_long("-k", optarg, 1, 1000000000);
			break;
		case 'd':
			o->duration_s = strtod(optarg, &end);
			if (*end != '\0' || !(o->duration_s > 0) ||
			    o->duration_s > 86400)
				fatalx(
				    "-d: want seconds > 0, got '%s'", optarg);
			break;
		case 'H':
			o->hold_us =
			    parse_long("--hold-us", optarg, 0, 60000000);
			break;
		case 'P':
			o->poll_ms = parse_long("--poll-ms", optarg, 0, 60000);
			break;
		case 'T':
			o->ttl_ms = parse_long("--ttl-ms", optarg, 1, 86400000);
			break;
		default:
			usage();
		}
	}
	if (optind != argc || o->addr == NULL)
		usage();
}

int
main(int argc, char **argv)
{
	struct event_config *cfg;
	struct bench b;

	memset(&b, 0, sizeof b);
	parse_opts(&b, argc, argv);
	parse_addr(&b, b.o.addr);
	b.rng = now_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
	/* A fresh prefix per run: locks a previous run left in Redis (the
	 * direct client's PX leases) cannot get in the way. */
	snprintf(b.prefix, sizeof b.prefix, "lb%08" PRIx64,
	    rng_next(&b) & 0xffffffffu);
	/* Holds and polls are around 1 ms: epoll_wait's millisecond timeout
	 * would round them up, so ask for timerfd precision. */
	cfg = event_config_new();
	if (cfg == NULL)
		fatalx("cannot set up libevent");
	event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
	b.base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	b.stop_ev = evtimer_new(b.base, bench_stop_cb, &b);
	if (b.base == NULL || b.stop_ev == NULL)
		fatalx("cannot set up libevent");
	b.conns = xcalloc(b.o.conns, sizeof *b.conns);
	for (unsigned i = 0; i < b.o.conns; i++)
		conn_open(&b, i);
	event_base_dispatch(b.base);
	for (unsigned i = 0; i < b.o.conns; i++) {
		bufferevent_free(b.conns[i].bev);
		event_free(b.conns[i].timer);
	}
	free(b.conns);
	free(b.lat.v);
	free(b.wait.v);
	event_free(b.stop_ev);
	event_base_free(b.base);
	return b.errors > 0 && b.ops == 0;
}

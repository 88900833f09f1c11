/*
 * conn: lockctl's one connection to the broker. Blocking writes of short
 * lines, reads through poll() with deadlines on the monotonic clock, and a
 * bounded line buffer: a reply line longer than CONN_LINE_MAX is an error,
 * never a reallocation. Inside TLS, conn_tls.c sends and reads.
 */
#include <err.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "lockctl.h"
#include "util.h"

#define CONN_DEFAULT_PORT "7878"

/* "[v6]:port", "host:port" or "host"; the port must be 1..65535. */
static int
conn_parse_tcp(const char *s, struct conn_addr *a)
{
	const char *host = s, *colon, *port = CONN_DEFAULT_PORT;
	size_t hlen;
	uint64_t n;

	if (*s == '[') {
		const char *end = strchr(s, ']');

		if (end == NULL || (end[1] != '\0' && end[1] != ':'))
			return -1;
		host = s + 1;
		hlen = (size_t)(end - host);
		if (end[1] == ':')
			port = end + 2;
	} else if ((colon = strrchr(s, ':')) != NULL) {
		hlen = (size_t)(colon - s);
		port = colon + 1;
	} else
		hlen = strlen(s);
	if (hlen == 0 || hlen >= sizeof(a->host) ||
	    proto_parse_u64(port, 65535, &n) != 0 || n == 0)
		return -1;
	memcpy(a->host, host, hlen);
	a->host[hlen] = '\0';
	snprintf(a->port, sizeof(a->port), "%u", (unsigned)n);
	return 0;
}

/* A path starting with '/' is a Unix socket, anything else TCP. */
int
conn_parse_addr(const char *s, struct conn_addr *a)
{
	memset(a, 0, sizeof(*a));
	if (*s != '/')
		return conn_parse_tcp(s, a);
	if (strlen(s) >= sizeof(a->path))
		return -1;
	strcpy(a->path, s);
	return 0;
}

/* Milliseconds left until deadline (UINT64_MAX: none), for poll(). */
static int
conn_left(uint64_t deadline)
{
	uint64_t now = mono_ms();

	if (deadline == UINT64_MAX)
		return -1;
	if (deadline <= now)
		return 0;
	return deadline - now > INT32_MAX ? INT32_MAX : (int)(deadline - now);
}

/* Wait for fd to be ready for events, at most until deadline. */
static int
conn_wait(int fd, short events, uint64_t deadline)
{
	struct pollfd pfd = { .fd = fd, .events = events };
	int n;

	do
		n = poll(&pfd, 1, conn_left(deadline));
	while (n < 0 && errno == EINTR);
	if (n == 0)
		errno = ETIMEDOUT;
	return n > 0 ? 0 : -1;
}

/* A non-blocking connect, so a black-holed address cannot hang us. */
static int
conn_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	int soerr = 0;
	socklen_t sl = sizeof(soerr);
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -1;
	if (connect(fd, sa, len) < 0) {
		if (errno != EINPROGRESS && errno != EINTR)
			return -1;
		if (conn_wait(fd, POLLOUT, mono_ms() + LC_IO_TIMEOUT_MS) < 0)
			return -1;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			return -1;
		if (soerr != 0) {
			errno = soerr;
			return -1;
		}
	}
	return fcntl(fd, F_SETFL, fl);
}

/*
 * Keepalive probes notice a broker host that vanished while we wait in a
 * long ACQUIRE, when no PING can be sent (the broker answers in order).
 */
static void
conn_tcp_opts(int fd)
{
	int one = 1, idle = 10, intvl = 5, cnt = 3;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

static int
conn_open_unix(struct conn *c, const struct conn_addr *a)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };

	memcpy(sun.sun_path, a->path, sizeof(a->path));
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0 ||
	    conn_connect(c->fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		warn("connect %s", a->path);
		conn_close(c);
		return -1;
	}
	return 0;
}

/* Every address the name resolves to, in order, until one connects. */
static int
conn_open_tcp(struct conn *c, const struct conn_addr *a)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res, *ai;
	int rc;

	if ((rc = getaddrinfo(a->host, a->port, &hints, &res)) != 0) {
		warnx("%s: %s", a->host, gai_strerror(rc));
		return -1;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		c->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
		    ai->ai_protocol);
		if (c->fd >= 0 &&
		    conn_connect(c->fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		warn("connect %s port %s", a->host, a->port);
		conn_close(c);
	}
	freeaddrinfo(res);
	if (c->fd < 0)
		return -1;
	conn_tcp_opts(c->fd);
	if (a->ca != NULL && conn_tls_open(c, a) != 0) {
		conn_close(c);
		return -1;
	}
	return 0;
}

int
conn_open(struct conn *c, const struct conn_addr *a)
{
	c->fd = -1;
	c->len = 0;
	c->ssl = NULL;
	c->tls = NULL;
	return a->path[0] != '\0' ? conn_open_unix(c, a) : conn_open_tcp(c, a);
}

/* One request line; the LF is added here. */
int
conn_send(struct conn *c, const char *fmt, ...)
{
	char out[CONN_LINE_MAX + 2];
	va_list ap;
	size_t len, off = 0;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(out, sizeof(out) - 1, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(out) - 1) {
		warnx("request too long");
		return -1;
	}
	len = (size_t)n;
	out[len++] = '\n';
	if (c->ssl != NULL) {
		n = conn_tls_send(c, out, len);
		explicit_bzero(out, sizeof(out));
		return n;
	}
	while (off < len) {
		ssize_t w = send(c->fd, out + off, len - off, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			warn("send to broker");
			explicit_bzero(out, sizeof(out));
			return -1;
		}
		off += (size_t)w;
	}
	/* It may have been an AUTH line. */
	explicit_bzero(out, sizeof(out));
	return 0;
}

/* One read() into the buffer, after poll() said there is something. */
enum conn_status
conn_fill(struct conn *c)
{
	ssize_t n;

	if (c->len == CONN_LINE_MAX) {
		warnx("reply line from the broker too long");
		return CONN_ERROR;
	}
	if (c->ssl != NULL)
		return conn_tls_fill(c);
	n = read(c->fd, c->buf + c->len, CONN_LINE_MAX - c->len);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return CONN_OK;
	if (n < 0) {
		warn("read from broker");
		return CONN_ERROR;
	}
	if (n == 0)
		return CONN_EOF;
	c->len += (size_t)n;
	return CONN_OK;
}

/* Take one complete line out of the buffer, without its LF (and CR). */
bool
conn_take(struct conn *c, char **line)
{
	char *lf = memchr(c->buf, '\n', c->len);
	size_t n;

	if (lf == NULL)
		return false;
	n = (size_t)(lf - c->buf);
	memcpy(c->line, c->buf, n);
	if (n > 0 && c->line[n - 1] == '\r')
		n--;
	c->line[n] = '\0';
	c->len -= (size_t)(lf + 1 - c->buf);
	memmove(c->buf, lf + 1, c->len);
	*line = c->line;
	return true;
}

/* The next line, waiting at most timeout_ms (-1: as long as it takes). */
enum conn_status
conn_readline(struct conn *c, int64_t timeout_ms, char **line)
{
	uint64_t deadline =
	    timeout_ms < 0 ? UINT64_MAX : mono_ms() + (uint64_t)timeout_ms;
	enum conn_status st;

	while (!conn_take(c, line)) {
		if (!conn_tls_pending(c) &&
		    conn_wait(c->fd, POLLIN, deadline) < 0)
			return errno == ETIMEDOUT ? CONN_TIMEOUT : CONN_ERROR;
		if ((st = conn_fill(c)) != CONN_OK)
			return st;
	}
	return CONN_OK;
}

/*
 * QUIT and read until the broker closes: closing with its reply unread
 * would reset the connection, and a reset may drop the QUIT itself.
 */
void
conn_quit(struct conn *c, int timeout_ms)
{
	uint64_t deadline = mono_ms() + (uint64_t)timeout_ms;

	if (c->fd < 0)
		return;
	if (conn_send(c, "QUIT") == 0) {
		/* Inside TLS, close_notify first; what comes after is
		 * drained unread. */
		conn_tls_close(c, true);
		shutdown(c->fd, SHUT_WR);
		c->len = 0;
		while (conn_wait(c->fd, POLLIN, deadline) == 0 &&
		    conn_fill(c) == CONN_OK)
			c->len = 0;
	}
	conn_close(c);
}

void
conn_close(struct conn *c)
{
	conn_tls_close(c, false);
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->len = 0;
}

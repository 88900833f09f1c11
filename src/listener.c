/*
 * listener: TCP and Unix stream sockets, handed to the client module on
 * accept, and the TLS listener with its certificates (read again on
 * reload; the running ones kept if the new ones are bad). When accept
 * fails for want of descriptors (EMFILE, ENFILE) the listener pauses
 * briefly instead of spinning on a socket it cannot serve.
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <grp.h>
#include <stdbool.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "lb_build.h"
#if HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "client.h"
#include "config.h"
#include "listener.h"
#include "log.h"
#include "tls.h"

#define LISTENER_MAX 8
#define LISTENER_BACKOFF_MS 100

static struct {
	struct event_base *base;
	const struct config *cf;
	struct evconnlistener *l[LISTENER_MAX];
	int n;
	struct event *resume_ev;
	char *unix_path;	/* removed again at close */
	int metrics_fd;		/* passed by systemd for metrics, or -1 */
	struct tls_server *tls; /* the TLS listener's certificates, or NULL */
} ls;

static void
listener_accept_cb(struct evconnlistener *l, evutil_socket_t fd,
    struct sockaddr *sa, int salen, void *arg)
{
	client_accept(fd, sa, salen, NULL);
}

/* A TLS listener's client: its handshake under the certificates read
 * last (a reload's new ones for connections made after it). */
static void
listener_tls_accept_cb(struct evconnlistener *l, evutil_socket_t fd,
    struct sockaddr *sa, int salen, void *arg)
{
	client_accept(fd, sa, salen, ls.tls);
}

/* tls.* read into a server context; NULL (err says why) if they are bad. */
static struct tls_server *
listener_tls_read(char *err, size_t len)
{
	const struct config_tls *t = &ls.cf->tls;
	const char *v = t->client_certificates;
	struct tls_settings ts = { .certificate = t->certificate,
		.key = t->key,
		.ca = t->ca,
		.min_version = t->min_version,
		.verify = strcmp(v, "require") == 0 ? TLS_VERIFY_REQUIRE
		    : strcmp(v, "optional") == 0    ? TLS_VERIFY_OPTIONAL
						    : TLS_VERIFY_NONE };

	return tls_server_new(&ts, err, len);
}

static void
listener_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	for (int i = 0; i < ls.n; i++)
		evconnlistener_enable(ls.l[i]);
}

/* Out of descriptors: stop accepting for a moment rather than spin. */
static void
listener_error_cb(struct evconnlistener *l, void *arg)
{
	struct timeval tv = { 0, LISTENER_BACKOFF_MS * 1000 };
	int err = EVUTIL_SOCKET_ERROR();

	log_warnx("accept: %s; pausing %d ms",
	    evutil_socket_error_to_string(err), LISTENER_BACKOFF_MS);
	for (int i = 0; i < ls.n; i++)
		evconnlistener_disable(ls.l[i]);
	evtimer_add(ls.resume_ev, &tv);
}

static void
listener_add(struct evconnlistener *l)
{
	evconnlistener_set_error_cb(l, listener_error_cb);
	ls.l[ls.n++] = l;
}

/* Whether a peer's or a listening address reaches only this host. */
static bool
listener_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return config_addr_loopback(AF_INET,
		    &((const struct sockaddr_in *)(const void *)sa)->sin_addr);
	return config_addr_loopback(sa->sa_family,
	    &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr);
}

/*
 * Anyone who can connect can take and hold any lock: beyond loopback that
 * needs auth.secret, or an explicit listen.insecure (Redis's protected mode).
 */
static bool
listener_allowed(const struct sockaddr *sa, const char *address)
{
	const struct config *cf = ls.cf;

	if (listener_loopback(sa) || cf->listen.insecure ||
	    cf->auth.secret[0] != '\0' || cf->auth.secret_file[0] != '\0' ||
	    cf->auth.identities.n > 0)
		return true;
	log_warnx(
	    "refusing to listen on %s without auth.secret (set listen.insecure = true to do it anyway)",
	    address);
	return false;
}

/* One TCP listener on address:port (key names them in errors), its
 * clients to cb. */
static int
listener_tcp(
    const char *key, const char *address, int port, evconnlistener_cb cb)
{
	struct addrinfo hints, *res;
	struct evconnlistener *l;
	char service[8];
	int rc;

	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	snprintf(service, sizeof service, "%d", port);
	if ((rc = getaddrinfo(address, service, &hints, &res)) != 0) {
		log_warnx("%s %s: %s", key, address, gai_strerror(rc));
		return -1;
	}
	if (!listener_allowed(res->ai_addr, address)) {
		freeaddrinfo(res);
		return -1;
	}
	l = evconnlistener_new_bind(ls.base, cb, NULL,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
	    ls.cf->listen.backlog, res->ai_addr, (int)res->ai_addrlen);
	freeaddrinfo(res);
	if (l == NULL) {
		log_warn("listen on %s port %d", address, port);
		return -1;
	}
	listener_add(l);
	log_info("listening on %s port %d%s", address, port,
	    cb == listener_tls_accept_cb ? " (TLS)" : "");
	return 0;
}

/* The TLS listener's certificates, read at start: bad ones stop it. */
static int
listener_tls_load(void)
{
	char err[320];

	if ((ls.tls = listener_tls_read(err, sizeof err)) == NULL) {
		log_warnx("tls: %s", err);
		return -1;
	}
	return 0;
}

/* A stale socket from a previous run is removed; any other file is not. */
static int
listener_unlink_stale(const char *path)
{
	struct stat st;

	if (lstat(path, &st) != 0)
		return errno == ENOENT ? 0 : -1;
	if (!S_ISSOCK(st.st_mode)) {
		errno = EEXIST;
		return -1;
	}
	return unlink(path);
}

/* The socket to group ("" = leave it the daemon's). One made with it
 * already (the daemon runs with that group, as under the unit with
 * Group=) is left alone: the unit's sandbox refuses chown(2). */
static int
listener_chgrp(const char *path, const char *group)
{
	struct group *gr;
	struct stat st;

	if (group[0] == '\0')
		return 0;
	if ((gr = getgrnam(group)) == NULL) {
		errno = ENOENT;
		return -1;
	}
	if (stat(path, &st) == 0 && st.st_gid == gr->gr_gid)
		return 0;
	return chown(path, (uid_t)-1, gr->gr_gid);
}

static int
listener_unix(void)
{
	const struct config_listen *cf = &ls.cf->listen;
	struct sockaddr_un sun;
	struct evconnlistener *l;
	int fd;

	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (strlen(cf->unix_path) >= sizeof sun.sun_path) {
		log_warnx("listen.unix %s: path too long", cf->unix_path);
		return -1;
	}
	strcpy(sun.sun_path, cf->unix_path);
	if (listener_unlink_stale(cf->unix_path) != 0) {
		log_warn("listen.unix %s", cf->unix_path);
		return -1;
	}
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
		 0)) == -1 ||
	    bind(fd, (struct sockaddr *)&sun, sizeof sun) != 0 ||
	    chmod(cf->unix_path, (mode_t)cf->unix_mode) != 0 ||
	    listener_chgrp(cf->unix_path, cf->unix_group) != 0 ||
	    listen(fd, cf->backlog) != 0) {
		log_warn("listen.unix %s", cf->unix_path);
		if (fd != -1)
			close(fd);
		return -1;
	}
	/* Backlog 0: it listens already (-1 would listen(2) again with 128). */
	l = evconnlistener_new(
	    ls.base, listener_accept_cb, NULL, LEV_OPT_CLOSE_ON_FREE, 0, fd);
	if (l == NULL) {
		close(fd);
		return -1;
	}
	listener_add(l);
	ls.unix_path = strdup(cf->unix_path);
	log_info("listening on %s", cf->unix_path);
	return 0;
}

#if HAVE_LIBSYSTEMD
/* A passed socket for clients: 0, or -1 if it must not be served. */
static int
listener_systemd_fd(int fd, bool tls)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	struct evconnlistener *l;

	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0 ||
	    (ss.ss_family != AF_UNIX &&
		!listener_allowed((struct sockaddr *)&ss, "a passed socket")))
		return -1;
	if (tls && ls.tls == NULL && listener_tls_load() != 0)
		return -1;
	evutil_make_socket_nonblocking(fd);
	/* Backlog 0: systemd's listen(2) stays (-1 would make it 128). */
	l = evconnlistener_new(ls.base,
	    tls ? listener_tls_accept_cb : listener_accept_cb, NULL,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
	if (l == NULL || ls.n == LISTENER_MAX)
		return -1;
	listener_add(l);
	log_info(
	    "listening on socket %d from systemd%s", fd, tls ? " (TLS)" : "");
	return 0;
}
#endif

/*
 * Sockets passed by systemd (lockbroker.socket): they replace listen.*.
 * One named "metrics" (lockbroker-metrics.socket's FileDescriptorName=)
 * is kept for metrics_init (listener_metrics_fd). Returns how many were
 * taken for clients, or -1 on a socket we must not serve.
 */
static int
listener_systemd(void)
{
#if HAVE_LIBSYSTEMD
	char **names = NULL;
	int n = sd_listen_fds_with_names(1, &names), taken = 0;

	for (int i = 0; i < n && taken >= 0; i++) {
		if (names != NULL && strcmp(names[i], "metrics") == 0)
			ls.metrics_fd = SD_LISTEN_FDS_START + i;
		else if (listener_systemd_fd(SD_LISTEN_FDS_START + i,
			     names != NULL && strcmp(names[i], "tls") == 0) ==
		    0)
			taken++;
		else
			taken = -1;
	}
	for (int i = 0; names != NULL && i < n; i++)
		free(names[i]);
	free(names);
	return taken;
#else
	return 0;
#endif
}

int
listener_metrics_fd(void)
{
	return ls.metrics_fd;
}

int
listener_init(struct event_base *base, const struct config *cf)
{
	int n;

	ls.base = base;
	ls.cf = cf;
	ls.metrics_fd = -1;
	ls.resume_ev = evtimer_new(base, listener_resume_cb, NULL);
	if ((n = listener_systemd()) != 0) {
		if (n > 0)
			log_info("listen.* ignored: sockets come from systemd");
		return n > 0 ? 0 : -1;
	}
	if (cf->listen.address[0] != '\0' &&
	    listener_tcp("listen.address", cf->listen.address, cf->listen.port,
		listener_accept_cb) != 0)
		return -1;
	if (cf->tls.port > 0 &&
	    (listener_tls_load() != 0 ||
		listener_tcp("tls.address", cf->tls.address, cf->tls.port,
		    listener_tls_accept_cb) != 0))
		return -1;
	if (cf->listen.unix_path[0] != '\0' && listener_unix() != 0)
		return -1;
	if (ls.n == 0) {
		log_warnx("nothing to listen on: set listen.address, "
			  "listen.unix or tls.port");
		return -1;
	}
	return 0;
}

/* Certificates read again: new connections get them, those made before
 * keep theirs; bad ones leave the running ones in place. */
void
listener_reload(void)
{
	struct tls_server *fresh;
	char err[320];

	if (ls.tls == NULL)
		return;
	if ((fresh = listener_tls_read(err, sizeof err)) == NULL) {
		log_warnx(
		    "reload: tls: %s; keeping the running certificates", err);
		return;
	}
	tls_server_free(ls.tls);
	ls.tls = fresh;
	log_info("reload: TLS certificates read again");
}

void
listener_close(void)
{
	for (int i = 0; i < ls.n; i++)
		evconnlistener_free(ls.l[i]);
	ls.n = 0;
	if (ls.unix_path != NULL) {
		unlink(ls.unix_path);
		free(ls.unix_path);
		ls.unix_path = NULL;
	}
	if (ls.resume_ev != NULL) {
		event_free(ls.resume_ev);
		ls.resume_ev = NULL;
	}
	tls_server_free(ls.tls);
	ls.tls = NULL;
}

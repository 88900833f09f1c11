/*
 * run: hold a lock while a command runs. COMMAND gets its own process group
 * so that losing the lock can stop everything it started: on EVENT LOST, a
 * broken connection or a broker that stops answering PING, the group gets
 * SIGTERM and, --grace ms later, SIGKILL. One poll() loop watches the broker
 * socket and a self-pipe fed by the signal handlers; timers are deadlines on
 * the monotonic clock.
 */
#include <err.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "lockctl.h"
#include "util.h"

/* PING at most this far apart, so an idle_timeout_s of 2 s is never hit. */
#define RUN_PING_MAX_MS 1000
/* How often to look whether the group is gone, once COMMAND is reaped. */
#define RUN_GROUP_POLL_MS 20
/* After SIGKILL, how long to wait for the group to be gone at most. */
#define RUN_KILL_WAIT_MS 1000
/* How long a QUIT may take once the lock is lost. */
#define RUN_QUIT_LOST_MS 1000

struct run {
	const struct run_opts *o;
	struct conn *c;
	struct grant g;
	pid_t pid;	  /* COMMAND, and the id of its process group */
	bool alive;	  /* COMMAND not reaped yet */
	int status;	  /* its wait status once reaped */
	int tty;	  /* the terminal COMMAND has as foreground, or -1 */
	bool conn_up;	  /* the broker connection still works */
	bool lost;	  /* the lock is gone */
	bool stopping;	  /* so SIGTERM went to the group while COMMAND ran */
	bool killed;	  /* SIGKILL sent */
	uint64_t kill_at; /* when to send SIGKILL, once lost */
	uint64_t ping_every, pong_wait;
	uint64_t next_ping; /* when to send the next PING */
	uint64_t ping_sent; /* when the PING in flight went, if ping_out */
	bool ping_out;
};

/* Handled while COMMAND runs: forwarded to its group, or SIGCHLD. */
static const int run_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1,
	SIGUSR2, SIGCHLD };
#define RUN_NSIGNALS (sizeof(run_signals) / sizeof(run_signals[0]))

/* The self-pipe: handlers write the signal number, the loop reads it. */
static int run_sigpipe[2] = { -1, -1 };

static void
run_onsignal(int sig)
{
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	ssize_t n = write(run_sigpipe[1], &b, 1);

	(void)n; /* a full pipe has enough wake-ups in it already */
	errno = saved;
}

/*
 * Install the handlers, blocked (with SIGTTOU) until the child has reset
 * them; *old is the mask to go back to.
 */
static int
run_signals_setup(sigset_t *old)
{
	struct sigaction sa = { .sa_handler = run_onsignal };
	sigset_t block;

	if (pipe2(run_sigpipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -1;
	sigemptyset(&block);
	sigaddset(&block, SIGTTOU);
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < RUN_NSIGNALS; i++) {
		sigaddset(&block, run_signals[i]);
		if (sigaction(run_signals[i], &sa, NULL) < 0)
			return -1;
	}
	return sigprocmask(SIG_BLOCK, &block, old);
}

/*
 * Give the terminal's foreground to pgrp. SIGTTOU stays blocked around it:
 * a background process asking would be stopped otherwise.
 */
static void
run_tty_set(int tty, pid_t pgrp)
{
	sigset_t block, old;

	sigemptyset(&block);
	sigaddset(&block, SIGTTOU);
	sigprocmask(SIG_BLOCK, &block, &old);
	tcsetpgrp(tty, pgrp);
	sigprocmask(SIG_SETMASK, &old, NULL);
}

/*
 * Take the terminal back from COMMAND's group, only if it has it: after a
 * "bg" the shell has it, and must keep it.
 */
static void
run_tty_back(const struct run *r)
{
	if (r->tty >= 0 && tcgetpgrp(r->tty) == r->pid)
		run_tty_set(r->tty, getpgrp());
}

/*
 * In the child: its own group (and the terminal, when lockctl had it, so
 * COMMAND can read it and gets ^C itself), default signals, the lock in the
 * environment, then exec. An exec error goes to the parent through errfd.
 */
static void __attribute__((noreturn))
run_child(const struct run *r, const sigset_t *old, pid_t parent, int errfd)
{
	char fence[24];
	int e;

	setpgid(0, 0);
	if (r->tty >= 0)
		tcsetpgrp(r->tty, getpid());
	/* If lockctl dies unseen, its lock goes: so should COMMAND. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(LC_EXIT_LOST);
	for (size_t i = 0; i < RUN_NSIGNALS; i++)
		signal(run_signals[i], SIG_DFL);
	sigprocmask(SIG_SETMASK, old, NULL);
	snprintf(fence, sizeof(fence), "%" PRIu64, r->g.fence);
	if (setenv("LOCK_NAME", r->o->req.name, 1) < 0 ||
	    setenv("LOCK_FENCE", fence, 1) < 0 ||
	    setenv("LOCK_TOKEN", r->g.token, 1) < 0)
		e = errno;
	else {
		execvp(r->o->argv[0], r->o->argv);
		e = errno;
	}
	if (write(errfd, &e, sizeof(e)) < 0)
		_exit(127);
	_exit(e == ENOENT ? 127 : 126);
}

/* Fork and exec COMMAND; 0, or an exit code if there is no child. */
static int
run_spawn(struct run *r)
{
	int errpipe[2], e;
	sigset_t old;
	pid_t parent = getpid();
	ssize_t n;

	if (isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp())
		r->tty = STDIN_FILENO;
#ifdef PR_SET_CHILD_SUBREAPER
	/* Orphans of COMMAND come to us, so we can tell when the group is
	 * gone: init may never reap them in a container. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
#endif
	if (run_signals_setup(&old) < 0 || pipe2(errpipe, O_CLOEXEC) < 0) {
		warn("run");
		return LC_EXIT_OSERR;
	}
	if ((r->pid = fork()) < 0) {
		warn("fork");
		return LC_EXIT_OSERR;
	}
	if (r->pid == 0)
		run_child(r, &old, parent, errpipe[1]);
	r->alive = true;
	/* Both sides set the group and terminal, so neither races the other. */
	setpgid(r->pid, r->pid);
	if (r->tty >= 0)
		tcsetpgrp(r->tty, r->pid);
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(errpipe[1]);
	do
		n = read(errpipe[0], &e, sizeof(e));
	while (n < 0 && errno == EINTR);
	close(errpipe[0]);
	if (n == sizeof(e)) {
		errno = e;
		warn("%s", r->o->argv[0]);
	}
	return 0;
}

static bool
run_group_alive(const struct run *r)
{
	return killpg(r->pid, 0) == 0 || errno == EPERM;
}

static void
run_signal_group(const struct run *r, int sig)
{
	if (killpg(r->pid, sig) < 0 && errno != ESRCH)
		warn("kill %d", -(int)r->pid);
}

/*
 * The lock is gone: while COMMAND runs, stop its group, SIGKILL after the
 * grace period. Found after COMMAND ended, it only changes the exit code.
 */
static void __attribute__((format(printf, 2, 3)))
run_lose(struct run *r, const char *fmt, ...)
{
	va_list ap;

	if (r->lost)
		return;
	r->lost = true;
	va_start(ap, fmt);
	vwarnx(fmt, ap);
	va_end(ap);
	if (!r->alive)
		return;
	r->stopping = true;
	warnx("lock %s lost: stopping COMMAND (process group %d)",
	    r->o->req.name, (int)r->pid);
	run_signal_group(r, SIGTERM);
	run_signal_group(r, SIGCONT); /* a stopped process must see it */
	r->kill_at = mono_ms() + r->o->grace_ms;
}

/*
 * COMMAND stopped (^Z at the terminal it has): stop our own group as ^Z
 * would have without the hand-over, so the shell sees the job stop, and
 * pass the SIGCONT on when the shell sends it.
 */
static void
run_stopped(struct run *r)
{
	run_tty_back(r);
	killpg(getpgrp(), SIGTSTP);
	if (tcgetpgrp(r->tty) == getpgrp())
		run_tty_set(r->tty, r->pid);
	run_signal_group(r, SIGCONT);
}

/* Reap COMMAND and any orphan of it that came to us. */
static void
run_reap(struct run *r)
{
	int st, flags = WNOHANG | (r->tty >= 0 ? WUNTRACED : 0);
	pid_t p;

	while ((p = waitpid(-1, &st, flags)) > 0) {
		if (p != r->pid)
			continue;
		if (WIFSTOPPED(st)) {
			run_stopped(r);
		} else {
			r->status = st;
			r->alive = false;
		}
	}
}

/* Signals the handlers saw: SIGCHLD reaps, the others go to the group. */
static void
run_drain_signals(struct run *r)
{
	unsigned char b[64];
	ssize_t n;

	while ((n = read(run_sigpipe[0], b, sizeof(b))) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			if (b[i] == SIGCHLD)
				run_reap(r);
			else if (r->alive || run_group_alive(r))
				run_signal_group(r, b[i]);
		}
	}
}

/* "EVENT LOST <name> <fence> <reason>" for our lock; *reason points in it. */
static bool
run_is_lost(const struct run *r, char *line, const char **reason)
{
	char *argv[5];
	uint64_t fence;

	if (strncmp(line, "EVENT LOST ", 11) != 0 ||
	    proto_split(line, strlen(line), argv, 5) != 5 ||
	    strcmp(argv[2], r->o->req.name) != 0 ||
	    proto_parse_u64(argv[3], UINT64_MAX, &fence) != 0 ||
	    fence != r->g.fence)
		return false;
	*reason = argv[4];
	return true;
}

/* A line from the broker while COMMAND runs: PONG, or an event. */
static void
run_on_line(struct run *r, char *line)
{
	const char *reason;

	if (strcmp(line, "PONG") == 0) {
		r->ping_out = false;
		r->next_ping = mono_ms() + r->ping_every;
	} else if (run_is_lost(r, line, &reason))
		run_lose(r, "broker: EVENT LOST %s %" PRIu64 " %s",
		    r->o->req.name, r->g.fence, reason);
	else
		warnx("broker: %s", line);
}

static void
run_read(struct run *r)
{
	enum conn_status st = conn_fill(r->c);
	char *line;

	while (conn_take(r->c, &line))
		run_on_line(r, line);
	if (st == CONN_OK)
		return;
	r->conn_up = false;
	conn_close(r->c);
	run_lose(r, "the connection to the broker %s",
	    st == CONN_EOF ? "was closed" : "failed");
}

/* PING every ping_every ms; a PING unanswered for pong_wait loses. */
static void
run_ping(struct run *r, uint64_t now)
{
	if (!r->conn_up || r->lost)
		return;
	if (r->ping_out && now >= r->ping_sent + r->pong_wait) {
		run_lose(r, "the broker did not answer PING in %" PRIu64 " ms",
		    r->pong_wait);
	} else if (!r->ping_out && now >= r->next_ping) {
		if (conn_send(r->c, "PING") != 0) {
			r->conn_up = false;
			conn_close(r->c);
			run_lose(r, "the connection to the broker failed");
			return;
		}
		r->ping_out = true;
		r->ping_sent = now;
	}
}

/* Once lost: SIGKILL when the grace period ends and anything is left. */
static void
run_kill(struct run *r, uint64_t now)
{
	if (!r->stopping || r->killed || now < r->kill_at)
		return;
	if (!r->alive && !run_group_alive(r))
		return;
	warnx("COMMAND still running %" PRIu64 " ms after SIGTERM: SIGKILL",
	    r->o->grace_ms);
	run_signal_group(r, SIGKILL);
	r->killed = true;
}

/* The poll() timeout: the nearest of the deadlines that apply now. */
static int
run_timeout(const struct run *r, uint64_t now)
{
	uint64_t at = UINT64_MAX;

	if (r->conn_up && !r->lost)
		at = r->ping_out ? r->ping_sent + r->pong_wait : r->next_ping;
	if (r->stopping && !r->killed && r->kill_at < at)
		at = r->kill_at;
	if (r->stopping && !r->alive && now + RUN_GROUP_POLL_MS < at)
		at = now + RUN_GROUP_POLL_MS;
	if (at == UINT64_MAX)
		return -1;
	if (at <= now)
		return 0;
	return at - now > INT32_MAX ? INT32_MAX : (int)(at - now);
}

/*
 * Done when COMMAND is reaped; once its group was told to stop, only when
 * the whole group is gone too (or SIGKILL had RUN_KILL_WAIT_MS to work).
 */
static bool
run_done(const struct run *r, uint64_t now)
{
	if (r->alive)
		return false;
	if (!r->stopping)
		return true;
	if (!run_group_alive(r))
		return true;
	return r->killed && now >= r->kill_at + RUN_KILL_WAIT_MS;
}

static void
run_loop(struct run *r)
{
	struct pollfd pfd[2];
	uint64_t now;

	while (!run_done(r, (now = mono_ms()))) {
		pfd[0].fd = run_sigpipe[0];
		pfd[1].fd = r->conn_up ? r->c->fd : -1;
		pfd[0].events = pfd[1].events = POLLIN;
		pfd[0].revents = pfd[1].revents = 0; /* poll() may fail */
		/* Input TLS already read off the socket: no POLLIN for it. */
		if (r->conn_up && conn_tls_pending(r->c))
			pfd[1].revents = POLLIN;
		else if (poll(pfd, 2, run_timeout(r, now)) < 0 &&
		    errno != EINTR)
			err(LC_EXIT_OSERR, "poll");
		run_drain_signals(r);
		/* Input first: a PONG read late must not count as missing. */
		if (r->conn_up &&
		    (pfd[1].revents & (POLLIN | POLLHUP | POLLERR)))
			run_read(r);
		now = mono_ms();
		run_ping(r, now);
		run_kill(r, now);
	}
}

/*
 * COMMAND is done with the lock: RELEASE, whose reply also tells whether
 * the lock was still ours (ERR NOTHELD, or an EVENT LOST before it: the
 * lease ran out unseen while COMMAND ran). Then QUIT. A FILL leader whose
 * COMMAND failed only QUITs: a RELEASE would tell the waiters DONE, while
 * a QUIT makes one of them the leader, to try the work again.
 */
static void
run_release(struct run *r)
{
	const char *reason;
	char *line;

	if (!r->conn_up)
		return;
	if (r->lost) {
		conn_quit(r->c, RUN_QUIT_LOST_MS);
		return;
	}
	if (r->o->req.fill &&
	    !(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0)) {
		conn_quit(r->c, LC_IO_TIMEOUT_MS);
		return;
	}
	if (conn_send(r->c, "RELEASE %s", r->o->req.name) != 0)
		return;
	while (conn_readline(r->c, LC_IO_TIMEOUT_MS, &line) == CONN_OK) {
		if (strcmp(line, "PONG") == 0)
			continue;
		if (run_is_lost(r, line, &reason)) {
			run_lose(r, "broker: EVENT LOST %s %" PRIu64 " %s",
			    r->o->req.name, r->g.fence, reason);
			continue;
		}
		if (strcmp(line, "OK") == 0)
			break;
		if (strncmp(line, "ERR NOTHELD ", 12) == 0)
			run_lose(r, "broker: %s", line);
		else
			warnx("release: broker: %s", line);
		break;
	}
	conn_quit(r->c, LC_IO_TIMEOUT_MS);
}

/* Like a shell: COMMAND's status, 128+N if signal N killed it. */
static int
run_exit_code(const struct run *r)
{
	if (r->lost)
		return LC_EXIT_LOST;
	if (WIFSIGNALED(r->status))
		return 128 + WTERMSIG(r->status);
	return WEXITSTATUS(r->status);
}

int
run_main(struct conn *c, const struct run_opts *o)
{
	struct run r = { .o = o, .c = c, .tty = -1, .conn_up = true };
	int rc;

	if ((rc = ask_acquire(c, &o->req, &r.g)) != 0)
		return rc;
	/* A quarter of the lease between PINGs; half of it unanswered and
	 * the broker is taken as gone (its renewals would be failing). */
	r.ping_every = r.g.ttl_ms / 4;
	if (r.ping_every > RUN_PING_MAX_MS)
		r.ping_every = RUN_PING_MAX_MS;
	if (r.ping_every < 1)
		r.ping_every = 1;
	r.pong_wait = r.g.ttl_ms / 2 > 1 ? r.g.ttl_ms / 2 : 1;
	r.next_ping = mono_ms() + r.ping_every;
	if ((rc = run_spawn(&r)) != 0) {
		conn_quit(c, LC_IO_TIMEOUT_MS);
		return rc;
	}
	run_loop(&r);
	run_tty_back(&r);
	run_release(&r);
	return run_exit_code(&r);
}

#!/usr/bin/env bash
# with-lock.sh: run a command while holding a lockbroker lock.
#
#   with-lock.sh [-t TTL_MS] [-w WAIT_MS] NAME COMMAND [ARG...]
#
# Connects to lockbrokerd with bash's /dev/tcp (no nc needed), sends
# ACQUIRE NAME [TTL ms] [WAIT ms], runs COMMAND while the lock is held, then
# RELEASE and QUIT. Without -t the lock is a session lock: the broker renews
# it for as long as this script's connection is open, however long COMMAND
# runs. With -t it is a fixed lease that ends after TTL_MS even if COMMAND is
# still running. Without -w it waits as the broker's locks.default_wait_ms
# says (by default, until granted); -w 0 tries once.
#
# COMMAND gets LOCK_NAME, LOCK_FENCE, LOCK_TTL_MS and LOCK_TOKEN in its
# environment; pass LOCK_FENCE to the resource you protect (fencing). It
# does not inherit the connection.
#
# Environment: LOCKBROKER_HOST (127.0.0.1), LOCKBROKER_PORT (7878),
# LOCKBROKER_SECRET (sent with AUTH first when set). /dev/tcp cannot reach a
# Unix socket; use the TCP listener.
#
# Exit status:
#   COMMAND's status  the lock was held from before COMMAND started until
#                     after it ended
#   64                usage error
#   69                broker unreachable, connection closed, or ERR to AUTH
#                     or ACQUIRE (the ERR line is printed on stderr)
#   70                the lock was lost while COMMAND ran (EVENT LOST,
#                     RELEASE found it not held, or the broker closed the
#                     connection); COMMAND's status is printed
#   75                TIMEOUT: not granted within the wait; COMMAND not run
#
# If this script is killed, its connection closes and the broker releases
# the lock (after locks.lock_delay_ms, when that is set).

set -u

prog=${0##*/}
host=${LOCKBROKER_HOST:-127.0.0.1}
port=${LOCKBROKER_PORT:-7878}
ttl='' wait=''

usage() {
	echo "usage: $prog [-t TTL_MS] [-w WAIT_MS] NAME COMMAND [ARG...]" >&2
	exit 64
}

while getopts t:w: opt; do
	case $opt in
	t) ttl=$OPTARG ;;
	w) wait=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 2 ] || usage
name=$1
shift
# One word of printable bytes: anything else could smuggle in a second
# request line. The broker checks the rest (length, ranges).
case $name in
'' | *[[:space:][:cntrl:]]*) echo "$prog: bad lock name" >&2; exit 64 ;;
esac
case $ttl in *[!0-9]*) usage ;; esac
case $wait in *[!0-9]*) usage ;; esac

if ! { exec {lb}<>"/dev/tcp/$host/$port"; } 2>/dev/null; then
	echo "$prog: cannot connect to $host:$port" >&2
	exit 69
fi

lost=0

# reply: read the next reply line into $reply. EVENT LOST lines may come
# before any reply; note ours and skip them all. Returns 1 at end of input.
reply() {
	local w1 w2 w3
	while IFS= read -r reply <&"$lb"; do
		reply=${reply%$'\r'}
		read -r w1 w2 w3 _ <<<"$reply"
		if [ "$w1 $w2" = "EVENT LOST" ]; then
			if [ "$w3" = "$name" ]; then
				lost=1
				echo "$prog: $reply" >&2
			fi
			continue
		fi
		return 0
	done
	reply=
	return 1
}

# request LINE: send one line, read its reply (after any EVENT LOST).
# SIGPIPE is ignored only for the write, so COMMAND does not inherit that.
request() {
	local rc
	trap '' PIPE
	printf '%s\n' "$1" 1>&"$lb" 2>/dev/null
	rc=$?
	trap - PIPE
	[ "$rc" = 0 ] && reply
}

if [ -n "${LOCKBROKER_SECRET:-}" ]; then
	case $LOCKBROKER_SECRET in
	*[[:space:][:cntrl:]]*) echo "$prog: bad secret" >&2; exit 64 ;;
	esac
	if ! request "AUTH $LOCKBROKER_SECRET" || [ "$reply" != OK ]; then
		echo "$prog: AUTH: ${reply:-connection closed}" >&2
		exit 69
	fi
fi

line="ACQUIRE $name${ttl:+ TTL $ttl}${wait:+ WAIT $wait}"
if ! request "$line"; then
	echo "$prog: broker closed the connection" >&2
	exit 69
fi
case $reply in
"OK "*)
	read -r _ LOCK_FENCE LOCK_TTL_MS LOCK_TOKEN <<<"$reply"
	;;
TIMEOUT)
	echo "$prog: $name: TIMEOUT" >&2
	exit 75
	;;
*)
	echo "$prog: $name: $reply" >&2
	exit 69
	;;
esac
LOCK_NAME=$name
export LOCK_NAME LOCK_FENCE LOCK_TTL_MS LOCK_TOKEN

"$@" {lb}>&-
status=$?

if ! request "RELEASE $name"; then
	# The broker releases what a closed connection held.
	echo "$prog: broker closed the connection before RELEASE" >&2
	lost=1
else
	case $reply in
	OK) ;;
	# The broker forgot the lock and releases it once Redis answers.
	"ERR UNAVAILABLE"*) echo "$prog: RELEASE $name: $reply" >&2 ;;
	# NOTHELD, or an unasked ERR LIMIT (idle) before the broker closed.
	*) echo "$prog: RELEASE $name: $reply" >&2; lost=1 ;;
	esac
	request QUIT >/dev/null
fi
exec {lb}>&-

if [ "$lost" = 1 ]; then
	echo "$prog: $name: lock lost while the command ran (its status: $status)" >&2
	exit 70
fi
exit "$status"

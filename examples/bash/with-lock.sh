#!/usr/bin/env bash
# with-lock.sh: run a command while holding a lockbroker lock.
#
#   with-lock.sh [-s HOST:PORT] [-a SECRET_FILE] [-w WAIT | -n] [-E N] [-q]
#                [--ttl TTL] NAME COMMAND [ARG...]
#
# Connects to lockbrokerd with bash's /dev/tcp (no nc needed), sends
# ACQUIRE NAME [TTL ms] [WAIT ms], runs COMMAND while the lock is held, then
# RELEASE and QUIT. Options and exit codes are lockctl's (docs/clients.md):
#
#   -s HOST:PORT  the broker; else $LOCKBROKER_ADDR, else 127.0.0.1:7878.
#                 /dev/tcp cannot reach a Unix socket: use the TCP listener
#                 (or lockctl, which can).
#   -a FILE       AUTH with the first line of FILE; else $LOCKBROKER_SECRET
#   -w WAIT       give up after WAIT: 1.5 (seconds, as flock -w), 1.5s,
#                 1500ms, 2m, 1h; -w 0 tries once. Without -w it waits as
#                 the broker's locks.default_wait_ms says (by default, until
#                 granted).
#   -n, --try     try once (-w 0)
#   -E N          exit N, not 75, when the lock is busy (as flock -E)
#   -q            no "lock busy" line on stderr
#   --ttl TTL     a fixed lease (a bare number is milliseconds; 30s, 5m):
#                 it ends after TTL even if COMMAND still runs. Without it
#                 the lock is a session lock, renewed by the broker for as
#                 long as this script's connection is open. (-t TTL, the
#                 old spelling, still works.)
#
# COMMAND gets LOCK_NAME, LOCK_FENCE, LOCK_TTL_MS and LOCK_TOKEN in its
# environment; pass LOCK_FENCE to the resource you protect (fencing). It
# does not inherit the connection.
#
# Exit status (the table of docs/clients.md):
#   COMMAND's status  the lock was held from before COMMAND started until
#                     after it ended
#   64                usage error
#   66                the lock was lost while COMMAND ran (EVENT LOST,
#                     RELEASE found it not held, or the broker closed the
#                     connection); COMMAND's status is printed
#   69                unavailable: broker unreachable or closed the
#                     connection, ERR UNAVAILABLE or ERR SHUTDOWN, or the
#                     wait ran out while the broker could not reach Redis
#   70                any other ERR (printed on stderr)
#   75                lock busy: not granted within the wait (-E N changes
#                     it); COMMAND not run
#   77                AUTH refused, or needed and no secret given
#
# If this script is killed, its connection closes and the broker releases
# the lock (after locks.lock_delay_ms, when that is set).

set -u

prog=${0##*/}
addr='' secret_file='' ttl='' wait='' busy_exit=75 quiet=0

usage() {
	[ $# -gt 0 ] && echo "$prog: $*" >&2
	echo "usage: $prog [-s HOST:PORT] [-a SECRET_FILE] [-w WAIT | -n] [-E N] [-q]" >&2
	echo "       [--ttl TTL] NAME COMMAND [ARG...]" >&2
	exit 64
}

# to_ms VALUE BARE_MS: a duration (1.5s, 1500ms, 2m, 1h; a bare number in
# units of BARE_MS ms) into $ms, whole ms rounded up. Fails if malformed.
to_ms() {
	local num=$1 unit=$2 whole frac='' den
	case $num in
	*ms) unit=1 num=${num%ms} ;;
	*s) unit=1000 num=${num%s} ;;
	*m) unit=60000 num=${num%m} ;;
	*h) unit=3600000 num=${num%h} ;;
	esac
	case $num in
	'' | . | *[!0-9.]* | *.*.*) return 1 ;;
	esac
	whole=${num%%.*}
	[[ $num == *.* ]] && frac=${num#*.}
	[ ${#whole} -le 12 ] && [ ${#frac} -le 9 ] || return 1
	den=$((10 ** ${#frac}))
	ms=$((10#${whole:-0} * unit + (10#${frac:-0} * unit + den - 1) / den))
}

# secs MS: "1.5 s", as lockctl prints a wait.
secs() {
	local s
	s=$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))
	s=${s%%0}; s=${s%%0}; s=${s%%0}; s=${s%.}
	echo "$s s"
}

# value OPTION "$@": the option's value, from "--opt=V", "-oV" or the next
# word; $shift says how many words it took.
value() {
	local opt=$1
	shift
	case $opt in
	--*=*) val=${opt#*=} shift=1 ;;
	--* | -?) [ $# -ge 1 ] || usage "$opt wants a value"; val=$1 shift=2 ;;
	*) val=${opt#-?} shift=1 ;;
	esac
}

while [ $# -gt 0 ]; do
	case $1 in
	--) shift; break ;;
	-s | -s?*) value "$@"; addr=$val ;;
	-a | -a?*) value "$@"; secret_file=$val ;;
	-w | -w?* | --wait | --wait=*) value "$@"; wait=$val ;;
	-E | -E?* | --conflict-exit-code | --conflict-exit-code=*)
		value "$@"; busy_exit=$val ;;
	-t | -t?* | --ttl | --ttl=*) value "$@"; ttl=$val ;;
	-n | --try) wait=0 shift=1 ;;
	-q | --quiet) quiet=1 shift=1 ;;
	-?*) usage "unknown option '$1'" ;;
	*) break ;;
	esac
	shift "$shift"
done
[ $# -ge 2 ] || usage
name=$1
shift
# One word of printable bytes: anything else could smuggle in a second
# request line. The broker checks the rest (length, ranges).
case $name in
'' | *[[:space:][:cntrl:]]*) usage "bad lock name" ;;
esac
if [ -n "$wait" ]; then
	to_ms "$wait" 1000 || usage "-w wants a duration (1.5, 1.5s, 1500ms, 2m)"
	wait=$ms
fi
if [ -n "$ttl" ]; then
	to_ms "$ttl" 1 && [ "$ms" -gt 0 ] || usage "--ttl wants a duration (5000, 5s, 2m)"
	ttl=$ms
fi
case $busy_exit in
'' | *[!0-9]*) usage "-E wants an exit code, 0-255" ;;
esac
[ ${#busy_exit} -le 3 ] && [ "$busy_exit" -le 255 ] || usage "-E wants an exit code, 0-255"

# The address: -s, else $LOCKBROKER_ADDR (HOST:PORT, [V6]:PORT or HOST).
if [ -z "$addr" ]; then
	if [ -z "${LOCKBROKER_ADDR:-}" ] &&
	    [ -n "${LOCKBROKER_HOST:-}${LOCKBROKER_PORT:-}${LOCKBROKER_UNIX:-}" ]; then
		usage "LOCKBROKER_HOST, LOCKBROKER_PORT: gone; set LOCKBROKER_ADDR=HOST:PORT"
	fi
	addr=${LOCKBROKER_ADDR:-127.0.0.1:7878}
fi
case $addr in
/*) usage "$addr: /dev/tcp cannot reach a Unix socket; give the broker's HOST:PORT" ;;
\[*\]:*) host=${addr%]:*} host=${host#[} port=${addr##*]:} ;;
\[*\]) host=${addr#[} host=${host%]} port=7878 ;;
*:*) host=${addr%:*} port=${addr##*:} ;;
*) host=$addr port=7878 ;;
esac
case $port in
'' | *[!0-9]* | ??????*) port=0 ;;
esac
[ -n "$host" ] && [ "$((10#$port))" -ge 1 ] && [ "$((10#$port))" -le 65535 ] ||
	usage "bad broker address '$addr' (HOST:PORT)"

secret=${LOCKBROKER_SECRET:-}
if [ -n "$secret_file" ]; then
	if ! IFS= read -r secret <"$secret_file"; then
		[ -r "$secret_file" ] || { echo "$prog: cannot read $secret_file" >&2; exit 71; }
	fi
	[ -n "$secret" ] || usage "$secret_file: no secret on the first line"
fi
case $secret in
*[[:space:][:cntrl:]]*) usage "the secret must be one word" ;;
esac

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

# fail WHAT: an ERR reply (or none) to WHAT: say so, exit with its code.
fail() {
	echo "$prog: $1: ${reply:-the broker closed the connection}" >&2
	case $reply in
	'' | "ERR UNAVAILABLE"* | "ERR SHUTDOWN"*) exit 69 ;;
	"ERR AUTH"* | "ERR NOAUTH"*) exit 77 ;;
	*) exit 70 ;;
	esac
}

if [ -n "$secret" ]; then
	request "AUTH $secret" && [ "$reply" = OK ] || fail AUTH
fi

line="ACQUIRE $name${ttl:+ TTL $ttl}${wait:+ WAIT $wait}"
request "$line" || fail "$name"
case $reply in
"OK "*)
	read -r _ LOCK_FENCE LOCK_TTL_MS LOCK_TOKEN <<<"$reply"
	;;
TIMEOUT)
	# The broker says TIMEOUT too when the wait ran out while it could
	# not reach Redis: STATUS tells an outage from a busy lock.
	request "STATUS $name" || fail "$name"
	case $reply in
	"ERR UNAVAILABLE"* | "ERR SHUTDOWN"*)
		echo "$prog: $name: lock not obtained: the broker cannot reach Redis" >&2
		fail "$name" ;;
	esac
	if [ "$quiet" = 0 ]; then
		if [ "$wait" = 0 ]; then
			echo "$prog: $name: lock busy (tried once)" >&2
		elif [ -n "$wait" ]; then
			echo "$prog: $name: lock busy (waited $(secs "$wait"))" >&2
		else
			echo "$prog: $name: lock busy" >&2
		fi
	fi
	exit "$busy_exit"
	;;
*)
	fail "$name"
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
	exit 66
fi
exit "$status"

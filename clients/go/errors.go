package lockbroker

import (
	"errors"
	"strconv"
	"strings"
)

// Sentinel errors. Every error this package returns matches one of them
// with errors.Is, so callers branch on the kind, never on the text.
var (
	// ErrBusy: the lock was not granted within the wait (TIMEOUT), or at
	// once for a try-once (Wait(0)).
	ErrBusy = errors.New("lockbroker: lock busy")
	// ErrUnavailable: the broker cannot serve now (ERR UNAVAILABLE, ERR
	// SHUTDOWN: Redis down or slow, a grace period), or the connection to
	// it could not be made or broke.
	ErrUnavailable = errors.New("lockbroker: unavailable")
	// ErrNotHeld: RELEASE or EXTEND of a grant the token no longer holds
	// (ERR NOTHELD), or of a lease already lost or released.
	ErrNotHeld = errors.New("lockbroker: not held")
	// ErrAuth: the secret was refused (ERR AUTH) or is needed (ERR NOAUTH).
	ErrAuth = errors.New("lockbroker: authentication refused")
	// ErrProtocol: a reply this client does not understand (garbage, a
	// line over 64 KiB, a connection closed mid-reply), or ERR PROTO and
	// ERR UNKNOWN from the broker. The connection is closed.
	ErrProtocol = errors.New("lockbroker: protocol error")
	// ErrCancelled: the caller's context ended a wait; the error also
	// wraps ctx.Err(), so errors.Is(err, context.Canceled) holds.
	ErrCancelled = errors.New("lockbroker: wait cancelled")
	// ErrTimeout: no reply within Options.Timeout (beyond the request's
	// own wait); the connection is closed, its leases are lost.
	ErrTimeout = errors.New("lockbroker: request timed out")
	// ErrLost: the lease was lost; the error is a *LostError with Reason.
	ErrLost = errors.New("lockbroker: lease lost")
	// ErrLimit: ERR LIMIT (too many locks on a connection, waiters, clients).
	ErrLimit = errors.New("lockbroker: broker limit")
	// ErrInvalid: a bad name, token or option (checked here or ERR ARGS,
	// ERR NAME, ERR HELD from the broker).
	ErrInvalid = errors.New("lockbroker: invalid request")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("lockbroker: client closed")
)

// ServerError is an ERR reply: Code is the word after ERR (UNAVAILABLE,
// NOTHELD, ...), Text the rest, for humans.
type ServerError struct {
	Code, Text string
}

func (e *ServerError) Error() string { return "lockbroker: ERR " + e.Code + " " + e.Text }

// Is maps each code onto its sentinel, as docs/protocol.md §6 groups them.
func (e *ServerError) Is(target error) bool {
	switch e.Code {
	case "UNAVAILABLE", "SHUTDOWN":
		return target == ErrUnavailable
	case "NOTHELD":
		return target == ErrNotHeld
	case "AUTH", "NOAUTH":
		return target == ErrAuth
	case "PROTO", "UNKNOWN":
		return target == ErrProtocol
	case "LIMIT":
		return target == ErrLimit
	case "ARGS", "NAME", "HELD":
		return target == ErrInvalid
	}
	return false
}

// LostError says why a lease ended without its Release: the reason of
// EVENT LOST (expired, stolen, unavailable, maxhold, revoked), or
// "disconnected" when the connection that held it broke, or "closed"
// after Client.Close. It matches ErrLost and ErrNotHeld.
type LostError struct {
	Name   string
	Fence  uint64
	Reason string
}

func (e *LostError) Error() string {
	return "lockbroker: lease of " + e.Name + " lost: " + e.Reason
}

func (e *LostError) Is(target error) bool { return target == ErrLost || target == ErrNotHeld }

// cancelError is what a wait ended by its context returns: ErrCancelled
// for this package's callers, ctx.Err() for the context's.
type cancelError struct{ cause error }

func (e *cancelError) Error() string        { return "lockbroker: wait cancelled: " + e.cause.Error() }
func (e *cancelError) Unwrap() error        { return e.cause }
func (e *cancelError) Is(target error) bool { return target == ErrCancelled }

// brokenError is a connection that failed under a request: the request's
// outcome is unknown, so it may be retried (with its token) on another.
type brokenError struct{ cause error }

func (e *brokenError) Error() string { return "lockbroker: connection broken: " + e.cause.Error() }
func (e *brokenError) Unwrap() error { return e.cause }

// Is: a broken connection is unavailability, unless the reply that broke
// it was not understood (then it is a protocol error, which it wraps).
func (e *brokenError) Is(target error) bool {
	return target == ErrUnavailable && !errors.Is(e.cause, ErrProtocol) && !errors.Is(e.cause, ErrTimeout)
}

type protoError string

func (e protoError) Error() string        { return "lockbroker: protocol error: " + string(e) }
func (e protoError) Is(target error) bool { return target == ErrProtocol }

// replyError turns a reply line that is not the success the caller wanted
// into an error: ERR lines into *ServerError, anything else a protocol
// error.
func replyError(line string) error {
	if strings.HasPrefix(line, "ERR ") {
		code, text, _ := strings.Cut(line[4:], " ")
		if code != "" {
			return &ServerError{Code: code, Text: text}
		}
	}
	return protoError("unexpected reply " + quote(line))
}

// quote shows at most 80 bytes of a reply, escaped, for error texts.
func quote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return strconv.Quote(s)
}

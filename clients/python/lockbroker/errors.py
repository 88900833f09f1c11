"""The exceptions a caller catches. Every one is a LockbrokerError; each
ERR <CODE> of the protocol maps to one class, with `code` and `text` kept
(docs/protocol.md §6)."""


class LockbrokerError(Exception):
    """Base class. `code` is the protocol's ERR code (or a word of ours for
    client-side failures); `text` is for humans."""

    def __init__(self, text="", code=None):
        super().__init__("%s: %s" % (code, text) if code else text)
        self.code = code
        self.text = text


class Busy(LockbrokerError):
    """Not granted: TIMEOUT (the wait ran out, or a try-once found it held)."""


class Unavailable(LockbrokerError):
    """The broker cannot serve now: ERR UNAVAILABLE (Redis down, slow or in
    its grace period), ERR SHUTDOWN, or no connection to the broker."""


class Lost(LockbrokerError):
    """A lease was lost while it was used; `reason` is the broker's word
    (expired, stolen, revoked, unavailable, maxhold) or 'disconnected'."""

    def __init__(self, reason, text=""):
        super().__init__(text or "lock lost: %s" % reason, "LOST")
        self.reason = reason


class NotHeld(LockbrokerError):
    """ERR NOTHELD: the token (or this lease) does not hold the lock."""


class AuthError(LockbrokerError):
    """ERR AUTH (wrong secret) or ERR NOAUTH (a secret is needed)."""


class ProtocolError(LockbrokerError):
    """A reply we cannot trust: garbage, a line over the bound, EOF in the
    middle of a reply, ERR PROTO or ERR UNKNOWN. The connection is closed."""


class Cancelled(LockbrokerError):
    """A wait was cancelled (sync API; asyncio raises CancelledError)."""


class Timeout(LockbrokerError, TimeoutError):
    """No reply within the client's own request timeout; that connection is
    closed (its reply could otherwise be read as the next request's)."""


class ArgsError(LockbrokerError, ValueError):
    """ERR ARGS or ERR NAME: the broker refused the arguments."""


class Held(LockbrokerError):
    """ERR HELD: this connection holds the name already (without its token)."""


class LimitError(LockbrokerError):
    """ERR LIMIT: too many locks on a connection, waiters, or clients."""


class InternalError(LockbrokerError):
    """ERR INTERNAL: Redis answered something the broker did not expect."""


_BY_CODE = {
    "ARGS": ArgsError, "NAME": ArgsError, "HELD": Held, "NOTHELD": NotHeld,
    "LIMIT": LimitError, "NOAUTH": AuthError, "AUTH": AuthError,
    "UNAVAILABLE": Unavailable, "SHUTDOWN": Unavailable,
    "INTERNAL": InternalError, "PROTO": ProtocolError, "UNKNOWN": ProtocolError,
}


def from_reply(line):
    """The exception for an `ERR <CODE> <text>` line."""
    code, _, text = line[4:].partition(" ")
    return _BY_CODE.get(code, LockbrokerError)(text, code)

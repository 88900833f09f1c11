"""lockbroker: a client of lockbrokerd (docs/protocol.md), standard
library only, blocking (Client) and asyncio (AsyncClient).

    import lockbroker
    client = lockbroker.Client()          # $LOCKBROKER_ADDR, $LOCKBROKER_SECRET
    with client.lock("reports", wait=5.0) as lease:
        write(fence=lease.fence)
"""

from .aio import AsyncClient, LockRequest as AsyncLockRequest, parse_addr
from .aio import Lease as AsyncLease
from .errors import (ArgsError, AuthError, Busy, Cancelled, Held,
                     InternalError, LimitError, LockbrokerError, Lost,
                     NotHeld, ProtocolError, Timeout, Unavailable)
from .sync import Client, Lease, LockRequest

__version__ = "0.1.0"
__all__ = [
    "Client", "AsyncClient", "Lease", "AsyncLease", "LockRequest",
    "AsyncLockRequest", "parse_addr", "LockbrokerError", "Busy",
    "Unavailable", "Lost", "NotHeld", "AuthError", "ProtocolError",
    "Cancelled", "Timeout", "ArgsError", "Held", "LimitError",
    "InternalError",
]

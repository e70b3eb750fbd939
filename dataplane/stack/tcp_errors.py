"""Why a TCP connection failed, or why a call on it was refused.

Each error carries the errno a socket would report, so callers can log or map it the same
way as a kernel-socket failure.
"""

from __future__ import annotations

import errno as _errno

from dataplane.errors import DataplaneError


class TcpError(DataplaneError):
    """Base of every TCP connection error."""

    default_errno = 0

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message, self.default_errno if errno is None else errno)


class TcpRefusedError(TcpError):
    """The peer answered our SYN with a reset: nothing listens on that port."""

    default_errno = _errno.ECONNREFUSED


class TcpResetError(TcpError):
    """The peer reset an established (or half-open) connection."""

    default_errno = _errno.ECONNRESET


class TcpTimeoutError(TcpError):
    """Retransmissions, zero-window probes or keep-alive probes went unanswered."""

    default_errno = _errno.ETIMEDOUT


class TcpStateError(TcpError):
    """The call is not allowed in the connection's current state (send after close, ...)."""

    default_errno = _errno.ENOTCONN

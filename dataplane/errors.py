"""The dataplane's exception family.

Every error carries a message that names the cause and, where the C side or DPDK reported
one, the errno. Callers catch `DataplaneError` for all of them; `TransportError` is the
retryable part: every way a connection to a peer fails or ends, with its `FailureKind`.
"""

from __future__ import annotations

import errno as _errno
import os as _os
import socket
from enum import StrEnum


class DataplaneError(Exception):
    """Base of every error the dataplane raises on purpose."""

    def __init__(self, message: str, errno: int = 0) -> None:
        super().__init__(message)
        self.errno = errno

    @property
    def errno_name(self) -> str:
        return _errno.errorcode.get(self.errno, str(self.errno)) if self.errno else ""


class ShimError(DataplaneError):
    """The C shim could not be loaded or is not the one this Python code was written for."""


class ShimMissingError(ShimError):
    """No shim library at the expected path: the package was not built."""


class ShimVersionError(ShimError):
    """The library's ABI version differs from the loader's declarations."""


class ShimStaleError(ShimError):
    """The library was built from other sources (C files, ctypes mirrors) than those beside it."""


class DpdkUnavailableError(DataplaneError):
    """The shim was built without DPDK, so ports cannot be opened."""


class EalError(DataplaneError):
    """The DPDK environment (EAL) failed to initialise."""


class EalAlreadyInitialisedError(EalError):
    """DPDK allows one EAL per process; this process already has one (or had one)."""


class HugepagesError(EalError):
    """The configuration asks for more hugepage memory than the host has free."""


class PortError(DataplaneError):
    """A DPDK port could not be opened, configured, started or used."""


class DeviceNotFoundError(PortError):
    """The PCI device, vdev driver or network interface named does not exist."""


class UnsafeInterfaceError(PortError):
    """Opening the port would put the stack's traffic on an interface the host uses."""


class FailureKind(StrEnum):
    """Why a connection to an upstream did not open, or ended, in the words an operator
    alerts on. Each kind is a retryable condition of the network or the peer."""

    REFUSED = "refused"  # RST to our SYN: nothing listens (an exchange restarting)
    RESET = "reset"  # the peer reset the connection (before or after it opened)
    TIMEOUT = "timeout"  # no answer in time: SYN, TLS, upgrade; or a feed gone silent
    UNREACHABLE = "unreachable"  # no route, no ARP reply, ICMP unreachable
    DNS = "dns"  # the host name did not resolve
    TLS = "tls"  # the TLS handshake or a TLS record failed
    CERTIFICATE = "certificate"  # the server's certificate did not verify
    HANDSHAKE = "handshake"  # the HTTP upgrade was refused or broke RFC 6455 section 4.1
    PROTOCOL = "protocol"  # a WebSocket protocol violation (close 1002, 1007, 1009, ...)
    EOF = "eof"  # the peer ended TCP without a closing handshake (1006)
    LOCAL = "local"  # out of local ports, descriptors or buffers: frees up with time
    CLOSED = "closed"  # the peer closed with a close frame (1000, 1001, 1012, ...)


# The leaves are OSErrors too (the built-in one that fits), as a kernel socket's errors
# are: code that catches OSError or TimeoutError around a connect keeps working.
class TransportError(DataplaneError):
    """A connection could not be opened, or an open one was lost, for a reason outside this
    process: worth another try. Both transports raise this family (the kernel's OSErrors
    and wsgw's own stack's TcpErrors are mapped by errno in `transport_error`, the original
    chained as `__cause__`), so callers decide by `kind`, never by transport."""

    kind: FailureKind = FailureKind.RESET


class RefusedError(TransportError, ConnectionRefusedError):  # type: ignore[misc]  # errno: int, never None
    """The peer answered the SYN with a reset: nothing listens on that port (ECONNREFUSED)."""

    kind = FailureKind.REFUSED


class ResetError(TransportError, ConnectionResetError):  # type: ignore[misc]  # errno: int, never None
    """The peer reset the connection (ECONNRESET, EPIPE, ECONNABORTED)."""

    kind = FailureKind.RESET


class TransportTimeoutError(TransportError, TimeoutError):  # type: ignore[misc]  # errno: int, never None
    """No answer in time: SYN retransmissions, or the whole open past its timeout."""

    kind = FailureKind.TIMEOUT


class UnreachableError(TransportError, OSError):  # type: ignore[misc]  # errno: int, never None
    """No way to the peer: no route, no ARP reply, an ICMP unreachable."""

    kind = FailureKind.UNREACHABLE


class ResolveError(TransportError, OSError):  # type: ignore[misc]  # errno: int, never None
    """The host name did not resolve (to an address the transport can use)."""

    kind = FailureKind.DNS


class LocalResourceError(TransportError, OSError):  # type: ignore[misc]  # errno: int, never None
    """Out of something local: ephemeral ports (EADDRNOTAVAIL), descriptors, buffers."""

    kind = FailureKind.LOCAL


_KIND_BY_ERRNO: dict[int, type[TransportError]] = {
    _errno.ECONNREFUSED: RefusedError,
    _errno.ECONNRESET: ResetError,
    _errno.ECONNABORTED: ResetError,
    _errno.EPIPE: ResetError,
    _errno.ETIMEDOUT: TransportTimeoutError,
    _errno.EHOSTUNREACH: UnreachableError,
    _errno.ENETUNREACH: UnreachableError,
    _errno.EHOSTDOWN: UnreachableError,
    _errno.ENETDOWN: UnreachableError,
    _errno.EADDRNOTAVAIL: LocalResourceError,
    _errno.EADDRINUSE: LocalResourceError,
    _errno.EMFILE: LocalResourceError,
    _errno.ENFILE: LocalResourceError,
    _errno.ENOBUFS: LocalResourceError,
    _errno.ENOMEM: LocalResourceError,
}


def transport_error(exc: BaseException, context: str) -> TransportError:
    """exc as a member of the TransportError family, `context` (what was being done, to
    whom) leading its message and exc chained as its cause.

    Classified by errno, which the kernel's OSErrors and wsgw's stack's TcpErrors both
    carry (a TcpRefusedError's is ECONNREFUSED, as a socket's would be): one mapping for
    both transports. A TransportError is returned as it is; a resolver failure
    (socket.gaierror) is DNS; an errno the table does not know is a reset (the connection
    is gone, the reason is in the cause)."""
    if isinstance(exc, TransportError):
        return exc
    if isinstance(exc, socket.gaierror):
        family: type[TransportError] = ResolveError
        detail = exc.strerror or str(exc)
    elif isinstance(exc, TimeoutError) and not getattr(exc, "errno", None):
        family, detail = TransportTimeoutError, str(exc) or "timed out"
    else:
        code = getattr(exc, "errno", None) or 0
        family = _KIND_BY_ERRNO.get(code, ResetError)
        if isinstance(exc, OSError) and code:  # asyncio's own text hides the reason
            detail = _os.strerror(code)
        else:
            detail = str(exc) or type(exc).__name__
    error = family(f"{context}: {detail}", getattr(exc, "errno", None) or 0)
    error.__cause__ = exc
    return error

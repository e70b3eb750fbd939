"""The WebSocket layer's exceptions, h11-style: Local (our misuse) versus Remote (the peer).

A peer's protocol violation never raises out of `WsClient.receive_data`: it becomes a
`Closed(failure=True)` event and a close frame to send (RFC 6455 section 7.1.7). These
exceptions are for local misuse, for TLS (which cannot be turned into a close frame) and
for the asyncio transports that present the events as awaitables.

Handshake and TLS failures are `TransportError`s too (retryable, with a `FailureKind`);
`LocalProtocolError` is not: the same request fails the same way every time.
"""

from __future__ import annotations

from dataplane.errors import DataplaneError, FailureKind, TransportError, transport_error


class WsError(DataplaneError):
    """Base of every WebSocket-layer error."""


class LocalProtocolError(WsError):
    """This side asked for something the protocol or the connection's state forbids
    (sending on a closed connection, a reserved close code, a control payload > 125 B)."""


class HandshakeError(WsError, TransportError):
    """The opening handshake did not produce a WebSocket connection."""

    kind = FailureKind.HANDSHAKE


class HandshakeRejected(HandshakeError):
    """The server answered the upgrade request with something other than a valid 101.

    `status` is the HTTP status (0 when the response was not HTTP at all), `body` the first
    bytes of the response body: often the server's own explanation (403, 429, ...).
    `reason` says what was wrong; kind EOF when the server closed before it answered."""

    def __init__(
        self,
        message: str,
        status: int,
        headers: tuple[tuple[bytes, bytes], ...] = (),
        body: bytes = b"",
        *,
        reason: str = "",
        closed: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers
        self.body = body
        self.reason = reason or message
        if closed:
            self.kind = FailureKind.EOF


class TlsError(WsError, TransportError):
    """TLS failed after the handshake (bad record, unexpected message, ...)."""

    kind = FailureKind.TLS


class TlsHandshakeError(TlsError):
    """The TLS handshake failed (no shared cipher or version, alert from the server, ...)."""


class TlsCertificateError(TlsHandshakeError):
    """The server's certificate did not verify (unknown CA, wrong host name, expired)."""

    kind = FailureKind.CERTIFICATE

    def __init__(self, message: str, verify_code: int = 0, verify_message: str = "") -> None:
        super().__init__(message)
        self.verify_code = verify_code
        self.verify_message = verify_message


class ConnectionClosed(WsError):
    """The WebSocket connection is closed; `code`/`reason` are RFC 6455 section 7.1.5/7.1.6's
    connection close code and reason (1006 when it ended without a closing handshake)."""

    def __init__(self, code: int, reason: str = "", *, clean: bool = False) -> None:
        text = f"WebSocket closed with code {code}" + (f" ({reason})" if reason else "")
        super().__init__(text)
        self.code = code
        self.reason = reason
        self.clean = clean


class ConnectionClosedOK(ConnectionClosed):
    """Closed cleanly with 1000 (normal), 1001 (going away) or no status code (1005)."""


class ConnectionClosedError(ConnectionClosed):
    """Closed with an error code, by a protocol failure, or without a closing handshake."""


def closed_error(code: int, reason: str, clean: bool) -> ConnectionClosed:
    """The ConnectionClosed subclass that fits the close code."""
    if clean and code in (1000, 1001, 1005):
        return ConnectionClosedOK(code, reason, clean=clean)
    return ConnectionClosedError(code, reason, clean=clean)


#: Close codes (RFC 6455 section 7.4.1) that say a peer broke the protocol.
_PROTOCOL_CODES = frozenset({1002, 1003, 1007, 1009, 1010})
CLOSE_TLS_FAILED = 1015  # section 7.4.1: reserved for a TLS handshake failure


def failure_kind(exc: BaseException) -> FailureKind:
    """The kind of failure exc is, whichever transport raised it.

    A connection that was open and ended (ConnectionClosed): 1006 (no closing handshake)
    is the kind of the transport error under it (a reset, a timeout), or EOF when TCP just
    ended; a protocol close code (RFC 6455 section 7.4.1) is PROTOCOL, 1015 TLS; any other
    code (1000, 1001 going away, 1011, 1012 service restart, 1013 try again later, 4xxx)
    is the peer closing: CLOSED. Anything else is mapped as `transport_error` maps it."""
    if isinstance(exc, ConnectionClosed):
        code = exc.code
        if code == 1006:
            cause = exc.__cause__
            return failure_kind(cause) if cause is not None else FailureKind.EOF
        if code == CLOSE_TLS_FAILED:
            return FailureKind.TLS
        return FailureKind.PROTOCOL if code in _PROTOCOL_CODES else FailureKind.CLOSED
    if isinstance(exc, TransportError):
        return exc.kind
    if isinstance(exc, OSError | DataplaneError):
        return transport_error(exc, "").kind
    return FailureKind.EOF

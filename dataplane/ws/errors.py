"""The WebSocket layer's exceptions, h11-style: Local (our misuse) versus Remote (the peer).

A peer's protocol violation never raises out of `WsClient.receive_data`: it becomes a
`Closed(failure=True)` event and a close frame to send (RFC 6455 section 7.1.7). These
exceptions are for local misuse, for TLS (which cannot be turned into a close frame) and
for the asyncio transports that present the events as awaitables.
"""

from __future__ import annotations

from dataplane.errors import DataplaneError


class WsError(DataplaneError):
    """Base of every WebSocket-layer error."""


class LocalProtocolError(WsError):
    """This side asked for something the protocol or the connection's state forbids
    (sending on a closed connection, a reserved close code, a control payload > 125 B)."""


class HandshakeError(WsError):
    """The opening handshake did not produce a WebSocket connection."""


class HandshakeRejected(HandshakeError):
    """The server answered the upgrade request with something other than a valid 101.

    `status` is the HTTP status (0 when the response was not HTTP at all), `body` the first
    bytes of the response body: often the server's own explanation (403, 429, ...)."""

    def __init__(
        self,
        message: str,
        status: int,
        headers: tuple[tuple[bytes, bytes], ...] = (),
        body: bytes = b"",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers
        self.body = body


class TlsError(WsError):
    """TLS failed after the handshake (bad record, unexpected message, ...)."""


class TlsHandshakeError(TlsError):
    """The TLS handshake failed (no shared cipher or version, alert from the server, ...)."""


class TlsCertificateError(TlsHandshakeError):
    """The server's certificate did not verify (unknown CA, wrong host name, expired)."""

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

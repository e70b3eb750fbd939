"""The WebSocket client protocol (RFC 6455, RFC 7692) as sans-IO code, and sans-IO TLS.

`WsClient` turns bytes into typed events and method calls into bytes; `TlsClient` does the
same for TLS. Neither touches a socket: `dataplane.transports` runs them over OS sockets
(kernel) or the user-space TCP stack (dpdk). Frame scanning and masking run in the C shim
when it is built (`dataplane.ws.scan`).
"""

from dataplane.ws.client import ConnectionState, WsClient, is_valid_close_code
from dataplane.ws.deflate import DeflateOptions, DeflateParams
from dataplane.ws.errors import (
    ConnectionClosed,
    ConnectionClosedError,
    ConnectionClosedOK,
    HandshakeError,
    HandshakeRejected,
    LocalProtocolError,
    TlsCertificateError,
    TlsError,
    TlsHandshakeError,
    WsError,
)
from dataplane.ws.events import (
    Closed,
    CloseReceived,
    Handshake,
    Message,
    MessageBatch,
    Ping,
    Pong,
    RejectedHandshake,
    WsEvent,
)
from dataplane.ws.tls import TlsClient, client_context

__all__ = [
    "CloseReceived",
    "Closed",
    "ConnectionClosed",
    "ConnectionClosedError",
    "ConnectionClosedOK",
    "ConnectionState",
    "DeflateOptions",
    "DeflateParams",
    "Handshake",
    "HandshakeError",
    "HandshakeRejected",
    "LocalProtocolError",
    "Message",
    "MessageBatch",
    "Ping",
    "Pong",
    "RejectedHandshake",
    "TlsCertificateError",
    "TlsClient",
    "TlsError",
    "TlsHandshakeError",
    "WsClient",
    "WsError",
    "WsEvent",
    "client_context",
    "is_valid_close_code",
]

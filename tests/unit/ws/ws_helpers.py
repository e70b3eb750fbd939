"""Shared helpers for tests/unit/ws (no test_ prefix: imported by the tests beside it).

`server_frame` builds frames by hand, independently of the client's encoder; `accepted`
opens a client against wsproto's server side (the oracle); `raw_accept` hand-writes a 101.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request
from wsproto.extensions import Extension

from dataplane.ws.client import WsClient
from dataplane.ws.events import Handshake, WsEvent
from dataplane.ws.handshake import accept_token
from dataplane.ws.scan import BackendName, mask_py, resolve

BACKENDS: list[BackendName] = ["c", "python"] if resolve("auto") == "c" else ["python"]


def server_frame(
    opcode: int,
    payload: bytes = b"",
    *,
    fin: bool = True,
    rsv: int = 0,
    mask: bytes | None = None,
    length: int | None = None,
    long_form: int | None = None,
) -> bytes:
    """One frame as RFC 6455 section 5.2 lays it out. rsv: the 3 bits (4 = RSV1). length
    overrides the declared payload length; long_form=126|127 forces a longer encoding."""
    size = len(payload) if length is None else length
    first = (0x80 if fin else 0) | (rsv & 7) << 4 | opcode
    mask_bit = 0x80 if mask is not None else 0
    if long_form == 127 or size > 0xFFFF:
        header = struct.pack("!BBQ", first, mask_bit | 127, size)
    elif long_form == 126 or size > 125:
        header = struct.pack("!BBH", first, mask_bit | 126, size)
    else:
        header = struct.pack("!BB", first, mask_bit | size)
    if mask is not None:
        return header + mask + mask_py(payload, mask)
    return header + payload


def head_101(token: bytes, *extra: str) -> bytes:
    """A hand-written 101 carrying the accept token, with extra header lines."""
    lines = [
        "HTTP/1.1 101 Switching Protocols",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Accept: {token.decode()}",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def raw_accept(client: WsClient, *extra: str, accept: bytes | None = None) -> bytes:
    """A hand-written 101 for client's request, with extra header lines."""
    return head_101(accept_token(client._handshake.key) if accept is None else accept, *extra)


def open_raw(*extra: str, backend: BackendName = "auto", **kwargs: Any) -> WsClient:
    """A client that has received a hand-written 101 (no deflate unless asked)."""
    kwargs.setdefault("deflate", None)
    client = WsClient("example.com", "/feed", scan_backend=backend, **kwargs)
    client.initiate()
    client.receive_data(raw_accept(client, *extra))
    events = list(client.events())
    assert len(events) == 1 and isinstance(events[0], Handshake), events
    return client


def accepted(
    *,
    extensions: Sequence[Extension] = (),
    subprotocol: str | None = None,
    backend: BackendName = "auto",
    **kwargs: Any,
) -> tuple[WsClient, WSConnection, Handshake]:
    """A client whose upgrade request wsproto's server accepted."""
    client = WsClient("example.com", "/feed", scan_backend=backend, **kwargs)
    server = WSConnection(ConnectionType.SERVER)
    server.receive_data(client.initiate())
    request = next(server.events())
    assert isinstance(request, Request)
    client.receive_data(
        server.send(AcceptConnection(subprotocol=subprotocol, extensions=list(extensions)))
    )
    events = list(client.events())
    assert len(events) == 1 and isinstance(events[0], Handshake), events
    return client, server, events[0]


def feed(client: WsClient, data: bytes, *, step: int = 0) -> list[WsEvent]:
    """Feed data whole (step 0) or step bytes at a time; return every event."""
    if step <= 0:
        client.receive_data(data)
        return list(client.events())
    events: list[WsEvent] = []
    for i in range(0, len(data), step):
        client.receive_data(data[i : i + step])
        events.extend(client.events())
    return events

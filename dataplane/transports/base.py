"""What every transport shares: the ws:// / wss:// URL and the connection interface the
gateway's sessions program against, whichever network carries the bytes."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from dataplane.ws.client import ConnectionState
from dataplane.ws.errors import LocalProtocolError
from dataplane.ws.events import Message


@dataclass(frozen=True)
class WsUrl:
    """A WebSocket URI split as RFC 6455 section 3 defines it."""

    host: str
    port: int
    resource: str  # path and query: the request target
    secure: bool

    @property
    def default_port(self) -> bool:
        return self.port == (443 if self.secure else 80)


@functools.lru_cache(maxsize=256)
def parse_ws_url(url: str) -> WsUrl:
    """Parse ws://host[:port]/path?query or wss://...; fragments and user info are refused
    (section 3: "Fragment identifiers ... MUST NOT be used"). Remembered per URL (a WsUrl
    is immutable): a client reopens the same few URLs, and urlsplit costs microseconds
    on every open; a refused URL is not remembered (it raises)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("ws", "wss"):
        raise LocalProtocolError(f"{url!r} is not a ws:// or wss:// URL")
    if parts.fragment or "#" in url:
        raise LocalProtocolError(f"{url!r} has a fragment, which WebSocket URIs forbid")
    if parts.username is not None or parts.password is not None:
        raise LocalProtocolError(f"{url!r} carries user info, which wsgw does not send")
    if not parts.hostname:
        raise LocalProtocolError(f"{url!r} has no host")
    secure = scheme == "wss"
    try:
        port = parts.port
    except ValueError as exc:
        raise LocalProtocolError(f"{url!r}: {exc}") from exc
    resource = parts.path or "/"
    if parts.query:
        resource += "?" + parts.query
    return WsUrl(parts.hostname, port or (443 if secure else 80), resource, secure)


class WebSocketConnection(Protocol):
    """An open client WebSocket; `connection.WsClientConnection` implements it."""

    @property
    def state(self) -> ConnectionState: ...

    @property
    def subprotocol(self) -> str | None: ...

    async def recv(self) -> Message: ...

    async def send(self, data: str | bytes, *, text: bool | None = None) -> None: ...

    def ping(self, payload: bytes | None = None) -> asyncio.Future[float]: ...

    async def close(self, code: int = 1000, reason: str = "") -> None: ...

    async def wait_closed(self) -> None: ...

    def __aiter__(self) -> AsyncIterator[Message]: ...

"""Transports that carry the sans-IO WebSocket client (`dataplane.ws`) over a network:
`kernel` (OS sockets through asyncio) and `dpdk` (the user-space stack). Both open the
same connection class (`connection.WsClientConnection`, with the opener contract in that
module's docstring), which implements the `WebSocketConnection` interface (`base`)."""

from dataplane.transports.base import WebSocketConnection, WsUrl, parse_ws_url

__all__ = ["WebSocketConnection", "WsUrl", "parse_ws_url"]

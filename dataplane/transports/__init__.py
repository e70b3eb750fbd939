"""Transports that carry the sans-IO WebSocket client (`dataplane.ws`) over a network:
`kernel` (OS sockets through asyncio) here, `dpdk` (the user-space stack) beside it. Both
present the same `WebSocketConnection` interface (`base`)."""

from dataplane.transports.base import WebSocketConnection, WsUrl, parse_ws_url

__all__ = ["WebSocketConnection", "WsUrl", "parse_ws_url"]

"""The kernel transport: the sans-IO WebSocket client over an OS TCP socket, on asyncio.

    async with connect_kernel("wss://feed.example/v1", subprotocols=["v1"]) as ws:
        await ws.send('{"op": "subscribe", "args": ["trades"]}')
        async for message in ws:      # Message(data: bytes, text: bool)
            handle(message.data)

Every read of the socket goes whole into `WsClient.receive_data` (through `TlsClient` for
wss://, the same sans-IO TLS the DPDK transport uses), so one scan covers all the frames
of a read. TCP_NODELAY is on: frames are small and latency matters more than segments.
The connection itself (`WsClientConnection`) is the one both transports share
(`dataplane.transports.connection`); this module only opens it over asyncio's sockets.
"""

from __future__ import annotations

import asyncio
from typing import Unpack

from dataplane.errors import TransportError, TransportTimeoutError, transport_error
from dataplane.transports.connection import (
    ConnectionProtocol,
    ConnectOptions,
    PendingConnection,
    WsClientConnection,
    prepare_connection,
)


def connect_kernel(url: str, **options: Unpack[ConnectOptions]) -> PendingConnection:
    """Open a client WebSocket to url (ws:// or wss://) over an OS TCP socket, with the
    `ConnectOptions` (TLS, subprotocols, deflate, limits, timeouts, where to connect)."""
    return PendingConnection(url, options, _open)


async def _open(url: str, **options: Unpack[ConnectOptions]) -> WsClientConnection:
    connection, target, open_timeout = prepare_connection(url, **options)
    connect_host = options.get("connect_host")
    connect_port = options.get("connect_port")
    loop = asyncio.get_running_loop()
    transport: asyncio.Transport | None = None
    try:
        async with asyncio.timeout(open_timeout):
            transport, _ = await loop.create_connection(
                lambda: ConnectionProtocol(connection),
                connect_host or target.host,
                connect_port or target.port,
            )
            connection.start_opening()
            connection.prepare_receive()
            # Not through asyncio.shield (one loop iteration more before the open returns):
            # the future is this opener's alone, and a timeout or a cancel cancelling it
            # only drops a connection that is aborted right below.
            await connection.wait_open()
    except TimeoutError as exc:
        if transport is not None:
            transport.abort()
        if isinstance(exc, TransportError):
            raise
        raise TransportTimeoutError(
            f"opening handshake with {url} timed out after {open_timeout} s"
        ) from None
    except OSError as exc:  # refused, unreachable, reset: one family for both transports
        if transport is not None:
            transport.abort()
        if isinstance(exc, TransportError):
            raise
        where = f"{connect_host or target.host}:{connect_port or target.port}"
        raise transport_error(exc, where) from exc
    except BaseException:
        if transport is not None:
            transport.abort()
        raise
    return connection

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
import os
import ssl
from collections.abc import Sequence

from dataplane.errors import TransportError, TransportTimeoutError, transport_error
from dataplane.transports.connection import (
    ConnectionProtocol,
    PendingConnection,
    WsClientConnection,
    prepare_connection,
)
from dataplane.ws.client import DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_MESSAGE_SIZE
from dataplane.ws.deflate import DeflateOptions
from dataplane.ws.handshake import HeaderPairs
from dataplane.ws.scan import BackendName


def connect_kernel(
    url: str,
    *,
    subprotocols: Sequence[str] = (),
    extra_headers: HeaderPairs = (),
    origin: str | None = None,
    deflate: bool | DeflateOptions | None = True,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ssl_context: ssl.SSLContext | None = None,
    ca_file: str | os.PathLike[str] | None = None,
    server_hostname: str | None = None,
    connect_host: str | None = None,
    connect_port: int | None = None,
    open_timeout: float = 10.0,
    close_timeout: float = 10.0,
    max_queue: int = 4096,
    scan_backend: BackendName = "auto",
    batch_receive: bool = True,
) -> PendingConnection:
    """Open a client WebSocket to url (ws:// or wss://) over an OS TCP socket.

    ssl_context / ca_file: how the server's certificate is verified (default: the system's
    CAs; verification is never off unless the context says so). server_hostname: the name
    for SNI and certificate checks (default: the URL's host). connect_host/connect_port:
    where to connect, when it is not the URL's host and port (a local tunnel, a test).
    max_queue: messages held for recv() before the socket stops being read.
    batch_receive: runs of plain data frames from one read are queued as one
    `MessageBatch` (`recv_frames()` hands them out whole; `recv()` splits them).
    """
    return PendingConnection(
        url,
        {
            "subprotocols": subprotocols,
            "extra_headers": extra_headers,
            "origin": origin,
            "deflate": deflate,
            "max_message_size": max_message_size,
            "max_frame_size": max_frame_size,
            "ssl_context": ssl_context,
            "ca_file": ca_file,
            "server_hostname": server_hostname,
            "connect_host": connect_host,
            "connect_port": connect_port,
            "open_timeout": open_timeout,
            "close_timeout": close_timeout,
            "max_queue": max_queue,
            "scan_backend": scan_backend,
            "batch_receive": batch_receive,
        },
        _open,
    )


async def _open(
    url: str,
    *,
    subprotocols: Sequence[str],
    extra_headers: HeaderPairs,
    origin: str | None,
    deflate: bool | DeflateOptions | None,
    max_message_size: int,
    max_frame_size: int,
    ssl_context: ssl.SSLContext | None,
    ca_file: str | os.PathLike[str] | None,
    server_hostname: str | None,
    connect_host: str | None,
    connect_port: int | None,
    open_timeout: float,
    close_timeout: float,
    max_queue: int,
    scan_backend: BackendName,
    batch_receive: bool,
) -> WsClientConnection:
    connection, target, _ = prepare_connection(
        url,
        subprotocols=subprotocols,
        extra_headers=extra_headers,
        origin=origin,
        deflate=deflate,
        max_message_size=max_message_size,
        max_frame_size=max_frame_size,
        ssl_context=ssl_context,
        ca_file=ca_file,
        server_hostname=server_hostname,
        open_timeout=open_timeout,
        close_timeout=close_timeout,
        max_queue=max_queue,
        scan_backend=scan_backend,
        batch_receive=batch_receive,
    )
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

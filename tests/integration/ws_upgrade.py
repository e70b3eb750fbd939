"""The server side of a WebSocket opening handshake, for the hand-written test servers that
then send exactly the bytes a test needs."""

from __future__ import annotations

import asyncio

from dataplane.ws.handshake import accept_token


async def upgrade_response(reader: asyncio.StreamReader) -> bytes:
    """Read the client's opening handshake and return our 101 answer to it (RFC 6455 4.2.2)."""
    request = await reader.readuntil(b"\r\n\r\n")
    key = next(
        line.split(b":", 1)[1].strip()
        for line in request.split(b"\r\n")
        if line.lower().startswith(b"sec-websocket-key:")
    )
    return (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept_token(key) + b"\r\n\r\n"
    )

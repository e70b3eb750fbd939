"""The kernel transport's batch receive (`recv_frames`) against a real server on loopback,
plain and over TLS: a hand-written asyncio server writes a flood of frames in big writes,
with pings, a fragmented message and text in between, so the reads hold long runs of
frames; every message arrives once, in order, whichever receive API takes it."""

from __future__ import annotations

import asyncio
import itertools
import ssl
import struct
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trustme

from dataplane.transports.connection import WsClientConnection
from dataplane.transports.kernel import connect_kernel
from dataplane.ws.errors import ConnectionClosedOK
from dataplane.ws.events import Message, MessageBatch
from tests.integration.ws_upgrade import upgrade_response

COUNT = 20_000
TIMEOUT = 30.0


def frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    first = (0x80 if fin else 0) | opcode
    size = len(payload)
    if size < 126:
        return bytes((first, size)) + payload
    if size < 65536:
        return struct.pack("!BBH", first, 126, size) + payload
    return struct.pack("!BBQ", first, 127, size) + payload


def script() -> tuple[bytes, list[Message]]:
    """The server's frames and the messages the client must see, in order."""
    wire: list[bytes] = []
    expected: list[Message] = []
    for i in range(COUNT):
        if i % 5000 == 2500:
            wire.append(frame(9, b"hb"))
        if i % 7000 == 3000:
            wire += [frame(1, b"frag", fin=False), frame(9, b"x"), frame(0, "\u00e9".encode())]
            expected.append(Message("frag\u00e9".encode(), True))
        if i % 1000 == 999:
            text = f'{{"seq":{i},"p":"\u20ac"}}'.encode()
            wire.append(frame(1, text))
            expected.append(Message(text, True))
        payload = i.to_bytes(8, "big") + b"p" * (92 if i % 3 else 300)
        wire.append(frame(2, payload))
        expected.append(Message(payload, False))
    return b"".join(wire), expected


@asynccontextmanager
async def flood_server(context: ssl.SSLContext | None, wire: bytes) -> AsyncIterator[int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(await upgrade_response(reader))
            for at in range(0, len(wire), 1 << 18):
                writer.write(wire[at : at + (1 << 18)])
                await writer.drain()
            writer.write(frame(8, (1000).to_bytes(2, "big") + b"done"))
            await writer.drain()
            await reader.read()  # the client's pongs and close reply, until it is done
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    async with server:
        yield server.sockets[0].getsockname()[1]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, Path]:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(server)
    path = tmp_path_factory.mktemp("ws-ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return server, path


def run(coro: Coroutine[Any, Any, None]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(TIMEOUT):
            await coro

    asyncio.run(bounded())


async def take(ws: WsClientConnection, how: str, sizes: list[int]) -> list[Message]:
    """Every message until the clean close, through one receive API (or all three)."""
    got: list[Message] = []
    turn = 0
    while True:
        turn += 1
        try:
            if how == "frames" or (how == "mixed" and turn % 3 == 0):
                batch = await ws.recv_frames()
                assert isinstance(batch, MessageBatch) and len(batch) > 0
                sizes.append(len(batch))
                got += batch.messages()
            elif how == "batch" or (how == "mixed" and turn % 3 == 1):
                got += await ws.recv_batch(37)
            else:
                got.append(await ws.recv())
        except ConnectionClosedOK:
            return got


@pytest.mark.parametrize("secure", [False, True], ids=["ws", "wss"])
@pytest.mark.parametrize("how", ["frames", "batch", "recv", "mixed"])
@pytest.mark.parametrize("batch_receive", [True, False], ids=["batch-on", "batch-off"])
def test_every_message_arrives_once_in_order(
    tls: tuple[ssl.SSLContext, Path], secure: bool, how: str, batch_receive: bool
) -> None:
    wire, expected = script()

    async def main() -> None:
        context, ca_file = tls
        async with flood_server(context if secure else None, wire) as port:
            scheme = "wss" if secure else "ws"
            ws = await connect_kernel(
                f"{scheme}://localhost:{port}/",
                ca_file=ca_file if secure else None,
                connect_host="127.0.0.1",
                deflate=False,
                close_timeout=2.0,
                max_queue=3000,
                batch_receive=batch_receive,
            )
            sizes: list[int] = []
            await asyncio.sleep(0.05)  # let reads pile up, so batches hold many messages
            got = await take(ws, how, sizes)
            await ws.wait_closed()
            assert ws.close_code == 1000 and ws.close_reason == "done"
            assert len(got) == len(expected)
            assert got == expected
            assert ws.pings_received == 4 + 3
            assert ws.messages_received == len(expected)
            if how == "frames" and batch_receive:
                assert max(sizes) > 100, sizes  # runs of frames came out whole

    run(main())


def test_on_queued_tells_when_a_read_queued_messages_and_when_all_were_taken() -> None:
    """A feed group's kernel leg counts messages its connection read and queued as unread
    input (its socket no longer shows them): `on_queued(True)` when a read queues messages,
    `on_queued(False)` once recv_frames finds the queue empty again, alternately."""
    wire, expected = script()

    async def main() -> None:
        async with flood_server(None, wire) as port:
            ws = await connect_kernel(
                f"ws://localhost:{port}/", connect_host="127.0.0.1", close_timeout=2.0
            )
            told: list[tuple[bool, int]] = []
            ws.on_queued = lambda queued: told.append((queued, len(ws._messages)))
            await asyncio.sleep(0.05)  # reads pile up in the queue, the socket drained
            got = await take(ws, "frames", [])
            await ws.wait_closed()
            assert got == expected
            assert told and told[0][0] is True
            assert all(a[0] != b[0] for a, b in itertools.pairwise(told))
            assert all(n > 0 for queued, n in told if queued)  # told with messages held
            assert all(n == 0 for queued, n in told if not queued)

    run(main())

"""The kernel transport against real servers on loopback: `websockets` and `aiohttp`
echo servers started in the test, plain and over TLS (a CA minted by trustme)."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiohttp import WSMsgType, web
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, TextMessage
from wsproto.events import Request as WsprotoRequest

from dataplane.transports.connection import WsClientConnection
from dataplane.transports.kernel import connect_kernel
from dataplane.ws.client import ConnectionState
from dataplane.ws.errors import (
    ConnectionClosedError,
    ConnectionClosedOK,
    HandshakeRejected,
    TlsCertificateError,
)
from dataplane.ws.events import Message
from tests.integration.ws_upgrade import upgrade_response

SIZES = [1, 125, 126, 64 * 1024, 1 << 20]
TIMEOUT = 20.0


def run(coro: Coroutine[Any, Any, None]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(TIMEOUT):
            await coro

    asyncio.run(bounded())


@dataclass(frozen=True)
class Tls:
    server: ssl.SSLContext
    ca_file: Path


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(server)
    path = tmp_path_factory.mktemp("ws-ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return Tls(server, path)


# ---- servers ---------------------------------------------------------------------------------
async def websockets_handler(conn: ServerConnection) -> None:
    """Echo, plus a few scripted paths."""
    path = conn.request.path if conn.request else "/"
    if path == "/fragments":
        await conn.send(["frag", "ment", "é" * 3000, "ed"])  # one text message, 4 frames
        await conn.send([b"\x00" * 70000, b"\x01", b"\x02" * 10])
    elif path.startswith("/close/"):
        code = int(path.rsplit("/", 1)[1])
        await conn.close(code, "server says bye")
        return
    elif path == "/ping":
        latency = await (await conn.ping(b"srv"))
        await conn.send(f"pong after {latency:.6f}")
    elif path == "/abort":
        await conn.send("about to vanish")
        conn.transport.abort()
        return
    elif path == "/burst":
        for i in range(2000):
            await conn.send(f'{{"seq":{i}}}')
    elif path == "/subprotocol":
        await conn.send(conn.subprotocol or "none")
    async for message in conn:
        await conn.send(message)


def reject_forbidden(conn: ServerConnection, request: Request) -> Response | None:
    if request.path == "/forbidden":
        return Response(403, "Forbidden", Headers([("Content-Type", "text/plain")]), b"no entry")
    return None


@asynccontextmanager
async def websockets_server(
    tls: Tls | None, compression: bool
) -> AsyncIterator[tuple[str, list[int]]]:
    closes: list[int] = []

    async def handler(conn: ServerConnection) -> None:
        try:
            await websockets_handler(conn)
        finally:
            await conn.wait_closed()
            if conn.close_code is not None:
                closes.append(conn.close_code)

    async with serve(
        handler,
        "127.0.0.1",
        0,
        ssl=tls.server if tls else None,
        compression="deflate" if compression else None,
        max_size=None,
        subprotocols=["v1"],  # type: ignore[list-item]
        select_subprotocol=lambda conn, offered: "v1" if "v1" in offered else None,  # type: ignore[arg-type,return-value]
        process_request=reject_forbidden,
    ) as server:
        port = server.sockets[0].getsockname()[1]
        yield f"{'wss' if tls else 'ws'}://localhost:{port}", closes


@asynccontextmanager
async def aiohttp_server(
    tls: Tls | None, compression: bool
) -> AsyncIterator[tuple[str, list[int]]]:
    closes: list[int] = []

    async def echo(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(compress=compression, max_msg_size=0)
        await ws.prepare(request)
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                await ws.send_str(msg.data)
            elif msg.type == WSMsgType.BINARY:
                await ws.send_bytes(msg.data)
        closes.append(ws.close_code or 0)
        return ws

    app = web.Application()
    app.router.add_get("/", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.server if tls else None)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"{'wss' if tls else 'ws'}://localhost:{port}", closes
    finally:
        await runner.cleanup()


SERVERS: dict[str, Callable[[Tls | None, bool], Any]] = {
    "websockets": websockets_server,
    "aiohttp": aiohttp_server,
}


def connect(base: str, tls: Tls | None, path: str = "/", **kwargs: Any) -> Any:
    return connect_kernel(
        base + path,
        ca_file=tls.ca_file if tls else None,
        connect_host="127.0.0.1",
        close_timeout=2.0,
        **kwargs,
    )


async def echo_all(ws: WsClientConnection) -> None:
    for size in SIZES:
        text = ("{é}" * size)[:size]
        await ws.send(text)
        assert await ws.recv() == Message(text.encode(), True)
        data = os.urandom(size)
        await ws.send(data)
        assert await ws.recv() == Message(data, False)


# ---- echo over both servers, plain and TLS, compressed or not ----------------------------------
@pytest.mark.parametrize("server", list(SERVERS))
@pytest.mark.parametrize("secure", [False, True], ids=["ws", "wss"])
@pytest.mark.parametrize("compression", [False, True], ids=["plain", "deflate"])
def test_echo_sizes(tls: Tls, server: str, secure: bool, compression: bool) -> None:
    material = tls if secure else None

    async def main() -> None:
        async with SERVERS[server](material, compression) as (base, closes):
            async with connect(base, material) as ws:
                assert (ws.deflate is not None) is compression
                assert (ws.tls is not None) is secure
                sock = ws.get_extra_info("socket")
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
                await echo_all(ws)
                assert await ws.ping() >= 0.0
            assert ws.state is ConnectionState.CLOSED
            assert ws.closed is not None and ws.closed.clean and ws.close_code == 1000
            for _ in range(100):
                if closes:
                    break
                await asyncio.sleep(0.01)
            assert closes == [1000]

    run(main())


# ---- behaviour against the websockets server ----------------------------------------------------
SECURE = pytest.mark.parametrize("secure", [False, True], ids=["ws", "wss"])


@SECURE
@pytest.mark.parametrize("compression", [False, True], ids=["plain", "deflate"])
def test_fragmented_messages_from_the_server(tls: Tls, secure: bool, compression: bool) -> None:
    material = tls if secure else None

    async def main() -> None:
        async with (
            websockets_server(material, compression) as (base, _),
            connect(base, material, "/fragments") as ws,
        ):
            assert await ws.recv() == Message(("fragment" + "é" * 3000 + "ed").encode(), True)
            assert await ws.recv() == Message(b"\x00" * 70000 + b"\x01" + b"\x02" * 10, False)

    run(main())


@SECURE
def test_server_ping_is_answered_and_client_ping_measures_rtt(tls: Tls, secure: bool) -> None:
    material = tls if secure else None

    async def main() -> None:
        async with (
            websockets_server(material, False) as (base, _),
            connect(base, material, "/ping") as ws,
        ):
            reply = await ws.recv()
            assert reply.as_text().startswith("pong after")
            assert ws.pings_received == 1
            rtts = await asyncio.gather(ws.ping(), ws.ping(b"mine"))
            assert all(0 <= rtt < 5 for rtt in rtts)

    run(main())


@SECURE
@pytest.mark.parametrize(
    ("code", "error"), [(1000, ConnectionClosedOK), (4001, ConnectionClosedError)]
)
def test_close_initiated_by_the_server(
    tls: Tls, secure: bool, code: int, error: type[Exception]
) -> None:
    material = tls if secure else None

    async def main() -> None:
        async with websockets_server(material, False) as (base, _):
            ws = await connect(base, material, f"/close/{code}")
            with pytest.raises(error) as info:
                await ws.recv()
            assert info.value.code == code  # type: ignore[attr-defined]
            assert info.value.reason == "server says bye"  # type: ignore[attr-defined]
            await ws.wait_closed()
            assert ws.closed is not None and ws.closed.clean
            assert ws.state is ConnectionState.CLOSED
            with pytest.raises(error):
                await ws.send("too late")
            received = [m async for m in ws] if code == 1000 else []
            assert received == []
            await ws.close()  # idempotent once closed

    run(main())


@SECURE
def test_close_initiated_by_the_client_with_a_code(tls: Tls, secure: bool) -> None:
    material = tls if secure else None

    async def main() -> None:
        async with websockets_server(material, False) as (base, closes):
            ws = await connect(base, material)
            await ws.send("hi")
            await ws.close(4002, "client done")
            assert ws.state is ConnectionState.CLOSED
            assert ws.closed is not None and ws.closed.clean
            assert ws.close_code == 4002
            assert ws.messages_received <= 1
            for _ in range(100):
                if closes:
                    break
                await asyncio.sleep(0.01)
            assert closes == [4002]

    run(main())


def test_abrupt_disconnect_is_1006_after_the_queued_messages() -> None:
    async def main() -> None:
        async with websockets_server(None, False) as (base, _), connect(base, None, "/abort") as ws:
            assert (await ws.recv()).as_text() == "about to vanish"
            with pytest.raises(ConnectionClosedError) as info:
                await ws.recv()
            assert info.value.code == 1006

    run(main())


def test_subprotocol_negotiation() -> None:
    async def main() -> None:
        async with (
            websockets_server(None, False) as (base, _),
            connect(base, None, "/subprotocol", subprotocols=["v2", "v1"]) as ws,
        ):
            assert ws.subprotocol == "v1"
            assert (await ws.recv()).as_text() == "v1"

    run(main())


def test_rejected_handshake_is_typed_with_status_and_body() -> None:
    async def main() -> None:
        async with websockets_server(None, False) as (base, _):
            with pytest.raises(HandshakeRejected) as info:
                await connect(base, None, "/forbidden")
            assert info.value.status == 403 and info.value.body == b"no entry"

    run(main())


def test_an_unknown_option_is_refused_at_the_call() -> None:
    """A misspelt option is a TypeError where it is written, not a default silently used."""
    with pytest.raises(TypeError, match=r"unknown connect option.*open_timout"):
        connect_kernel("ws://127.0.0.1:9/", open_timout=1.0)  # type: ignore[call-arg]


def test_slow_reader_gets_every_message_in_order_with_backpressure() -> None:
    async def main() -> None:
        async with (
            websockets_server(None, False) as (base, _),
            connect(base, None, "/burst", max_queue=16) as ws,
        ):
            for i in range(2000):
                if i % 500 == 0:
                    await asyncio.sleep(0.05)  # let the queue fill and reading pause
                assert (await ws.recv()).data == b'{"seq":%d}' % i

    run(main())


# ---- TLS failures ---------------------------------------------------------------------------
def test_unknown_ca_and_wrong_host_fail_the_tls_handshake(tls: Tls) -> None:
    async def main() -> None:
        async with websockets_server(tls, False) as (base, _):
            with pytest.raises(TlsCertificateError):
                await connect_kernel(base + "/", connect_host="127.0.0.1")  # system CAs only
            with pytest.raises(TlsCertificateError, match="other"):
                await connect(base, tls, "/", server_hostname="other.example")

    run(main())


# ---- frames that share the segment of the 101 ----------------------------------------------------
def test_frames_in_the_same_segment_as_the_101_reach_the_application() -> None:
    """Regression for the old C client: everything is written in one send() here."""

    async def main() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(
                await upgrade_response(reader) + b'\x81\x0a{"snap":1}\x82\x01\x07\x88\x02\x03\xe8'
            )
            await writer.drain()
            await reader.read(1024)  # the client's close reply
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            ws = await connect_kernel(f"ws://127.0.0.1:{port}/", close_timeout=2.0)
            assert [m async for m in ws] == [Message(b'{"snap":1}', True), Message(b"\x07", False)]
            assert ws.close_code == 1000

    run(main())


def test_open_timeout_is_a_timeout_error() -> None:
    async def main() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(65536)
            await asyncio.sleep(5)

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            with pytest.raises(TimeoutError, match="opening handshake"):
                await connect_kernel(f"ws://127.0.0.1:{port}/", open_timeout=0.3)

    run(main())


# ---- a violation after messages of the same read (RFC 6455 section 7.1.7) ------------------------
FRAMES_THEN_A_VIOLATION = [b"\x81\x05hello", b"\x81\x05world", b"\xa1\x05hello", b"\x89\x00"]


@pytest.mark.parametrize("reads", ["one read", "a read per frame"])
def test_messages_before_a_violation_are_answered_before_the_failure_close(reads: str) -> None:
    """One write: two messages, a frame with RSV2 (no extension gives it a meaning) and a
    ping. The application's echoes of the messages go out, then the 1002 close, and no
    pong: wsproto, on the server side, reads what the client sent (Autobahn's case 3.2).
    "a read per frame" hands each frame to the connection in its own data_received, in one
    loop turn, as the DPDK transport does with one TCP segment per frame (Autobahn's 4.1.3
    graded NON-STRICT there: the close went out before the earlier reads' echoes)."""
    received: list[object] = []

    async def main() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            conn = WSConnection(ConnectionType.SERVER)
            conn.receive_data(await reader.readuntil(b"\r\n\r\n"))
            assert isinstance(next(conn.events()), WsprotoRequest)
            writer.write(conn.send(AcceptConnection()))
            await writer.drain()
            await asyncio.sleep(0.05)  # the frames in a read of their own
            writer.write(b"".join(FRAMES_THEN_A_VIOLATION))
            while data := await reader.read(65536):
                conn.receive_data(data)
                received.extend(conn.events())
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            ws = await connect_kernel(f"ws://127.0.0.1:{port}/", close_timeout=2.0)
            if reads == "a read per frame":
                protocol = ws._transport.get_protocol()  # type: ignore[union-attr]
                whole = protocol.data_received

                def per_frame(data: bytes) -> None:
                    if data != b"".join(FRAMES_THEN_A_VIOLATION):
                        whole(data)
                        return
                    for frame in FRAMES_THEN_A_VIOLATION:
                        whole(frame)

                protocol.data_received = per_frame

            async def echo() -> None:
                async for message in ws:
                    await ws.send(message.data, text=message.text)

            with pytest.raises(ConnectionClosedError) as closed:
                await echo()
            assert closed.value.code == 1002
            await ws.wait_closed()

    run(main())
    assert received[:3] == [
        TextMessage("hello"),
        TextMessage("world"),
        CloseConnection(1002, received[2].reason),  # type: ignore[attr-defined]
    ], received
    assert len(received) == 3, received

"""The message handler of `WsClientConnection` (`set_message_handler`, `send_nowait`) against
real servers: the `websockets`/`aiohttp` echo servers of test_ws_kernel_loopback on the
kernel's loopback, and a `websockets` server in the lab namespace for the DPDK transport
on the engine's own loop. Each message goes to the handler inside the read that brought
it, in order, whole; recv() is refused meanwhile; a handler that raises closes with 1011
and leaves the rest of the read to recv()."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import uvloop
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed as ServerSideClosed

from dataplane.engine import Engine
from dataplane.transports.connection import WsClientConnection
from dataplane.transports.dpdk import connect_dpdk
from dataplane.ws.errors import ConnectionClosed, ConnectionClosedError, LocalProtocolError
from dataplane.ws.events import Message
from gateway.lab import Lab
from tests.conftest import requires_dpdk, run_in_loop
from tests.integration import test_ws_kernel_loopback as loopback

Tls = loopback.Tls
tls = loopback.tls  # the module's TLS fixture (a CA minted by trustme)
connect = loopback.connect
SERVERS = loopback.SERVERS
SIZES = [1, 125, 126, 65535, 65536, 1 << 20]
WS_SERVERS = str(Path(__file__).parents[1] / "utils" / "ws_servers.py")
TIMEOUT = 20.0
FAILED_CLOSE = (1011, "message handler failed")


def run(coro: Coroutine[Any, Any, None], *, use_uvloop: bool = False) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(TIMEOUT):
            await coro

    factory = uvloop.new_event_loop if use_uvloop else None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(bounded())


def seq_message(i: int) -> Message:
    return Message(f'{{"seq":{i}}}'.encode(), True)


def script() -> list[Message]:
    """What the echo tests send: every size as text and as binary, then small ones."""
    out: list[Message] = []
    for size in SIZES:
        out.append(Message(("{\u00e9}" * size)[:size].encode(), True))
        out.append(Message(os.urandom(size), False))
    out += [Message(b"%d" % i, i % 2 == 0) for i in range(300)]
    return out


def send_nowait(ws: WsClientConnection, message: Message) -> None:
    if message.text:
        ws.send_nowait(message.as_text())
    else:
        ws.send_nowait(message.data)


async def wait_for(predicate: Callable[[], bool], seconds: float = 5.0) -> None:
    async with asyncio.timeout(seconds):
        while not predicate():
            await asyncio.sleep(0.005)


class Collector:
    """A handler that keeps what it gets, with where it ran; raises at message `fail_at`."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.got: list[Message] = []
        self.in_task: list[bool] = []  # an asyncio task was running (else: the read itself)
        self.fail_at = fail_at
        self.raised: Exception | None = None

    def __call__(self, message: Message) -> None:
        self.got.append(message)
        self.in_task.append(asyncio.current_task() is not None)
        if self.fail_at is not None and len(self.got) == self.fail_at + 1:
            self.raised = RuntimeError(f"handler fails at message {self.fail_at}")
            raise self.raised


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of each run of messages handed over together (a MessageBatch of one
    scan, or the queue being drained); recorded, behaviour unchanged."""
    seen: list[int] = []
    original = WsClientConnection._hand_over

    def spy(self: WsClientConnection, run: list[Message]) -> list[Message]:
        seen.append(len(run))
        return original(self, run)

    monkeypatch.setattr(WsClientConnection, "_hand_over", spy)
    return seen


# ---- a websockets server: the loopback module's paths, plus bursts on demand ---------------------
@asynccontextmanager
async def server(compression: bool = False) -> AsyncIterator[tuple[str, list[tuple[int, str]]]]:
    """ws://localhost:PORT and the (code, reason) of each close the server received.
    Path "/trigger": each message "COUNT" makes the server send COUNT small text messages
    in a row (same process, same loop: they pile up in the socket and the client reads
    many frames at once); any other path is `websockets_handler`'s."""
    closes: list[tuple[int, str]] = []

    async def handler(conn: ServerConnection) -> None:
        try:
            if conn.request is not None and conn.request.path == "/trigger":
                async for message in conn:
                    for i in range(int(message)):
                        await conn.send(seq_message(i).as_text())
            else:
                await loopback.websockets_handler(conn)
        except ServerSideClosed:
            pass  # our 1011: the server's loop ends with it
        finally:
            await conn.wait_closed()
            if conn.close_code is not None:
                closes.append((conn.close_code, conn.close_reason))

    async with serve(
        handler,
        "127.0.0.1",
        0,
        compression="deflate" if compression else None,
        max_size=None,
    ) as srv:
        yield f"ws://localhost:{srv.sockets[0].getsockname()[1]}", closes


# ---- echo through the handler --------------------------------------------------------------------
async def echo_through_handler(ws: WsClientConnection) -> Collector:
    """Ping-pong: the handler answers each echo with the next message (send_nowait), then
    a pipelined run: 500 messages sent at once, the echoes collected in order."""
    expected = script()
    done = asyncio.get_running_loop().create_future()
    got: list[Message] = []
    in_task: list[bool] = []

    def answer(message: Message) -> None:
        got.append(message)
        in_task.append(asyncio.current_task() is not None)
        if len(got) < len(expected):
            send_nowait(ws, expected[len(got)])
        elif not done.done():
            done.set_result(None)

    ws.set_message_handler(answer)
    send_nowait(ws, expected[0])
    await done
    assert len(got) == len(expected)
    for i, (have, want) in enumerate(zip(got, expected, strict=True)):
        assert have == want, f"message {i}: {len(have.data)} B text={have.text}"
    collector = Collector()
    ws.set_message_handler(collector)
    burst = [Message(b"p%d" % i, i % 3 == 0) for i in range(500)]
    for message in burst:
        send_nowait(ws, message)
    await wait_for(lambda: len(collector.got) >= len(burst))
    assert collector.got == burst
    collector.in_task = in_task + collector.in_task
    return collector


@pytest.mark.parametrize("server_kind", list(SERVERS))
@pytest.mark.parametrize("secure", [False, True], ids=["ws", "wss"])
@pytest.mark.parametrize("compression", [False, True], ids=["plain", "deflate"])
def test_echo_through_the_handler(
    tls: Tls, server_kind: str, secure: bool, compression: bool
) -> None:
    material = tls if secure else None

    async def main() -> None:
        async with SERVERS[server_kind](material, compression) as (base, closes):
            async with connect(base, material) as ws:
                assert (ws.deflate is not None) is compression
                collector = await echo_through_handler(ws)
                # handed over inside the reads (asyncio's callbacks), no task woken up
                assert not any(collector.in_task)
                assert not ws._messages and ws._queued == 0
                ws.set_message_handler(None)
            assert ws.close_code == 1000 and ws.error is None
            await wait_for(lambda: bool(closes))
            assert closes == [1000]

    run(main())


# ---- messages queued before the handler ----------------------------------------------------------
@pytest.mark.parametrize("max_queue", [16, 4096])
def test_queued_messages_go_to_the_handler_first_in_order(max_queue: int) -> None:
    """/burst: 2000 messages on connect. Some are taken with recv(), the rest wait in the
    queue (with max_queue=16 reading is paused on a full queue); the handler gets what
    is queued first, then what is read after, all in order."""

    async def main() -> None:
        async with server() as (base, _), connect(base, None, "/burst", max_queue=max_queue) as ws:
            for i in range(3):
                assert await ws.recv() == seq_message(i)
            await wait_for(lambda: ws._queued >= min(max_queue, 1997))
            assert ws._reading_paused is (max_queue == 16)
            queued = ws._queued
            collector = Collector()
            ws.set_message_handler(collector)
            assert ws._queued == 0 and not ws._reading_paused
            await wait_for(lambda: len(collector.got) >= 1997)
            assert collector.got == [seq_message(i) for i in range(3, 2000)]
            # the queue drained inside set_message_handler (in the test's task), the rest
            # came with the reads (asyncio's callbacks)
            assert collector.in_task == [True] * queued + [False] * (1997 - queued)
            assert ws.messages_received == 2000

    run(main())


def test_none_goes_back_to_recv() -> None:
    async def main() -> None:
        async with server() as (base, _), connect(base, None) as ws:
            collector = Collector()
            ws.set_message_handler(collector)
            ws.send_nowait("one")
            await wait_for(lambda: len(collector.got) == 1)
            assert collector.got == [Message(b"one", True)]
            ws.set_message_handler(None)
            await ws.send(b"two")
            assert await ws.recv() == Message(b"two", False)
            # in flight when the handler goes: queued for recv(), in order
            ws.set_message_handler(collector)
            for i in range(200):
                ws.send_nowait(b"%d" % i)
            ws.set_message_handler(None)
            assert [(await ws.recv()).data for _ in range(200)] == [b"%d" % i for i in range(200)]
            assert len(collector.got) == 1
            # and back to the handler again
            ws.set_message_handler(collector)
            ws.send_nowait("three")
            await wait_for(lambda: len(collector.got) == 2)
            assert collector.got[-1] == Message(b"three", True)

    run(main())


def test_recv_is_refused_while_a_handler_is_set() -> None:
    async def main() -> None:
        async with server() as (base, _), connect(base, None) as ws:
            waiting = asyncio.ensure_future(ws.recv())
            await asyncio.sleep(0.05)
            assert not waiting.done()  # a recv() waiting for a message...
            collector = Collector()
            ws.set_message_handler(collector)
            with pytest.raises(LocalProtocolError, match="handler"):
                await waiting  # ...raises once the handler is set
            with pytest.raises(LocalProtocolError):
                await ws.recv()
            with pytest.raises(LocalProtocolError):
                await ws.recv_batch(10)
            with pytest.raises(LocalProtocolError):
                await ws.recv_frames()
            with pytest.raises(LocalProtocolError):
                async for _ in ws:
                    pass
            ws.send_nowait("after")  # nothing lost: the message goes to the handler
            await wait_for(lambda: len(collector.got) == 1)
            assert collector.got == [Message(b"after", True)]
            ws.set_message_handler(None)
            await ws.send("again")
            assert await ws.recv() == Message(b"again", True)
            assert ws.close_code is None

    run(main())


# ---- a handler that raises -----------------------------------------------------------------------
async def rest_then_closed(ws: WsClientConnection) -> tuple[list[Message], ConnectionClosed]:
    """Every message recv() still gives, then the ConnectionClosed it ends with."""
    rest: list[Message] = []
    while True:
        try:
            rest.append(await ws.recv())
        except ConnectionClosed as exc:
            return rest, exc


def test_a_raising_handler_closes_with_1011_and_leaves_the_read_to_recv(
    runs: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    """The server sends 500 messages at once; the handler raises at the 57th: it gets no
    more, the rest (of that read and the next ones) is read with recv(), the connection
    closes with 1011 and the last recv() raises with the handler's exception as cause."""

    async def main() -> None:
        async with server() as (base, closes), connect(base, None, "/trigger") as ws:
            collector = Collector(fail_at=57)
            ws.set_message_handler(collector)
            with caplog.at_level(logging.ERROR, logger="dataplane.transports.kernel"):
                await ws.send("500")
                await wait_for(lambda: ws.error is not None)
            assert ws.error is collector.raised
            assert collector.got == [seq_message(i) for i in range(58)]
            assert max(runs) > 1  # batches of messages were handed over
            with pytest.raises(ConnectionClosed):
                ws.send_nowait("too late")  # our close is sent
            rest, closed = await rest_then_closed(ws)
            assert rest == [seq_message(i) for i in range(58, 500)]
            assert isinstance(closed, ConnectionClosedError)
            assert closed.code == 1011
            assert closed.__cause__ is collector.raised
            assert len(collector.got) == 58  # not handed anything after it raised
            await wait_for(lambda: bool(closes))
            assert closes == [FAILED_CLOSE]
            assert ws.close_code == 1011 and ws.closed is not None and ws.closed.clean
            assert any("message handler" in r.getMessage() for r in caplog.records)

    run(main())


def test_a_handler_raising_on_a_fragmented_message() -> None:
    """/fragments: two fragmented messages (each one `Message` event, not a batch); the
    handler raises on the first, the second is left to recv()."""

    async def main() -> None:
        async with server() as (base, closes), connect(base, None, "/fragments") as ws:
            collector = Collector(fail_at=0)
            ws.set_message_handler(collector)
            await wait_for(lambda: ws.error is not None)
            assert collector.got == [Message(("fragment" + "\u00e9" * 3000 + "ed").encode(), True)]
            assert await ws.recv() == Message(b"\x00" * 70000 + b"\x01" + b"\x02" * 10, False)
            with pytest.raises(ConnectionClosedError) as info:
                await ws.recv()
            assert info.value.code == 1011 and info.value.__cause__ is collector.raised
            await wait_for(lambda: bool(closes))
            assert closes == [FAILED_CLOSE]

    run(main())


@pytest.mark.parametrize("secure", [False, True], ids=["ws", "wss"])
def test_a_handler_raising_while_the_queue_drains(tls: Tls, secure: bool) -> None:
    """The handler set on a full queue raises at its 100th message: set_message_handler
    returns, the messages after it stay queued for recv(), in order; over TLS too (the
    close frame goes through the TLS layer). The loopback module's own server."""
    material = tls if secure else None

    async def main() -> None:
        async with (
            loopback.websockets_server(material, False) as (base, closes),
            connect(base, material, "/burst") as ws,
        ):
            await wait_for(lambda: ws.messages_received == 2000)
            collector = Collector(fail_at=99)
            ws.set_message_handler(collector)  # does not raise
            assert ws.error is collector.raised
            assert collector.got == [seq_message(i) for i in range(100)]
            rest, closed = await rest_then_closed(ws)
            assert rest == [seq_message(i) for i in range(100, 2000)]
            assert closed.code == 1011 and closed.__cause__ is collector.raised
            await wait_for(lambda: bool(closes))
            assert closes == [1011]  # (this server keeps codes only)

    run(main())


# ---- whole messages, and runs of them ------------------------------------------------------------
@pytest.mark.parametrize("compression", [False, True], ids=["plain", "deflate"])
def test_fragmented_messages_arrive_whole(compression: bool) -> None:
    async def main() -> None:
        async with server(compression) as (base, _), connect(base, None, "/fragments") as ws:
            collector = Collector()
            ws.set_message_handler(collector)
            await wait_for(lambda: len(collector.got) == 2)
            assert collector.got == [
                Message(("fragment" + "\u00e9" * 3000 + "ed").encode(), True),
                Message(b"\x00" * 70000 + b"\x01" + b"\x02" * 10, False),
            ]

    run(main())


@pytest.mark.parametrize("use_uvloop", [False, True], ids=["asyncio", "uvloop"])
def test_a_burst_in_one_read_goes_message_by_message(runs: list[int], use_uvloop: bool) -> None:
    """The server sends 3000 small messages at once: reads of many frames (one scan, a
    MessageBatch), handed over one message at a time, in order, inside the reads."""

    async def main() -> None:
        async with server() as (base, _), connect(base, None, "/trigger") as ws:
            collector = Collector()
            ws.set_message_handler(collector)
            await ws.send("3000")
            await wait_for(lambda: len(collector.got) >= 3000)
            assert collector.got == [seq_message(i) for i in range(3000)]
            # reads of many frames came as MessageBatches (a run of one, or a frame cut
            # by the read, comes as a Message of its own)
            assert max(runs) > 1
            assert not any(collector.in_task)
            assert not ws._messages and ws._queued == 0

    run(main(), use_uvloop=use_uvloop)


# ---- a handler that changes the handler ----------------------------------------------------------
async def hand_over_burst(
    ws: WsClientConnection, handler: Callable[[Message], None], queued: bool, total: int
) -> None:
    """Set handler once a burst of `total` messages is queued (queued), or set it first and
    then ask the server for the burst (it comes with the reads)."""
    if queued:
        await wait_for(lambda: ws.messages_received == total)
        ws.set_message_handler(handler)
    else:
        ws.set_message_handler(handler)
        await ws.send(str(total))


@pytest.mark.parametrize(
    ("compression", "queued"),
    [(False, False), (True, False), (False, True), (True, True)],
    ids=["read-batch", "read-one-by-one", "queue-batch", "queue-one-by-one"],
)
def test_handler_set_to_none_from_inside_takes_effect_at_once(
    compression: bool, queued: bool
) -> None:
    """A handler that calls set_message_handler(None) at its 5th message gets no more:
    the rest goes to recv(), in order ("None goes back to queueing"). The messages come
    with the reads (a burst asked for after the handler is set) or wait in the queue
    (/burst, all read before the handler is set). With deflate each message is its own
    `Message` event; without, a run of them is one `MessageBatch`."""
    total = 2000 if queued else 300

    async def main() -> None:
        path = "/burst" if queued else "/trigger"
        async with server(compression) as (base, _), connect(base, None, path) as ws:
            assert (ws.deflate is not None) is compression
            got: list[Message] = []

            def five_then_recv(message: Message) -> None:
                got.append(message)
                if len(got) == 5:
                    ws.set_message_handler(None)

            await hand_over_burst(ws, five_then_recv, queued, total)
            await wait_for(lambda: len(got) >= 5)
            rest = [await ws.recv() for _ in range(total - len(got))]
            assert got == [seq_message(i) for i in range(5)]
            assert rest == [seq_message(i) for i in range(5, total)]

    run(main())


@pytest.mark.parametrize(
    ("compression", "queued"),
    [(False, False), (True, False), (False, True), (True, True)],
    ids=["read-batch", "read-one-by-one", "queue-batch", "queue-one-by-one"],
)
def test_handler_replaced_from_inside_takes_effect_at_once(compression: bool, queued: bool) -> None:
    """A handler that sets another one at its 5th message: the new one gets the rest."""
    total = 2000 if queued else 300

    async def main() -> None:
        path = "/burst" if queued else "/trigger"
        async with server(compression) as (base, _), connect(base, None, path) as ws:
            first: list[Message] = []
            second = Collector()

            def five_then_switch(message: Message) -> None:
                first.append(message)
                if len(first) == 5:
                    ws.set_message_handler(second)

            await hand_over_burst(ws, five_then_switch, queued, total)
            await wait_for(lambda: len(first) + len(second.got) >= total)
            assert first == [seq_message(i) for i in range(5)]
            assert second.got == [seq_message(i) for i in range(5, total)]

    run(main())


# ---- the DPDK transport on the engine's own loop -------------------------------------------------
RECORDING_SERVER = """
import asyncio, sys
import websockets

async def main(host, port, out):
    async def echo(conn):
        try:
            async for message in conn:
                if message.startswith("burst:"):  # in a row: all sent before our close
                    for i in range(int(message[6:])):
                        await conn.send(f"{i}")
                else:
                    await conn.send(message)
        except websockets.ConnectionClosed:
            pass
        await conn.wait_closed()
        with open(out, "a") as f:
            f.write(f"{conn.close_code} {conn.close_reason}\\n")

    async with websockets.serve(echo, host, port, max_size=None, compression=None):
        print("ready", flush=True)
        await asyncio.Future()

asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
"""


@requires_dpdk
@pytest.mark.dpdk
def test_echo_through_the_handler_on_the_engine_loop(
    loop_engine: tuple[Engine, Lab], lab_spawn: Callable[[list[str]], None]
) -> None:
    engine, lab = loop_engine
    lab_spawn([WS_SERVERS, "websockets", lab.peer_ip, "8210", "--no-deflate"])

    async def main() -> None:
        async with asyncio.timeout(TIMEOUT):
            async with connect_dpdk(f"ws://{lab.peer_ip}:8210/", engine=engine) as ws:
                assert ws._transport.direct  # type: ignore[attr-defined]
                collector = await echo_through_handler(ws)
                assert not any(collector.in_task)  # inside the engine's reads
                assert engine.native_id == threading.get_native_id()
                ws.set_message_handler(None)
                await ws.send(b"by recv")
                assert await ws.recv() == Message(b"by recv", False)
            assert ws.close_code == 1000 and ws.error is None

    run_in_loop(engine, main)


@requires_dpdk
@pytest.mark.dpdk
def test_a_raising_handler_on_the_engine_loop(
    loop_engine: tuple[Engine, Lab], lab_spawn: Callable[[list[str]], None], tmp_path: Path
) -> None:
    """The server sends 200 messages in a row; the handler raises at the 10th: the server
    sees 1011, the other 190 are read with recv(). (Not with echoes: websockets answers
    our close at once, and the echoes it has not sent yet are never sent.)"""
    engine, lab = loop_engine
    record = tmp_path / "closes"
    lab_spawn(["-c", RECORDING_SERVER, lab.peer_ip, "8211", str(record)])

    async def main() -> None:
        async with asyncio.timeout(TIMEOUT):
            ws = await connect_dpdk(f"ws://{lab.peer_ip}:8211/", engine=engine)
            try:
                collector = Collector(fail_at=9)
                ws.set_message_handler(collector)
                ws.send_nowait("burst:200")
                await wait_for(lambda: ws.error is not None)
                assert ws.error is collector.raised
                assert collector.got == [Message(b"%d" % i, True) for i in range(10)]
                rest, closed = await rest_then_closed(ws)
                assert rest == [Message(b"%d" % i, True) for i in range(10, 200)]
                assert closed.code == 1011 and closed.__cause__ is collector.raised
                assert ws.close_code == 1011
            finally:
                await ws.close()
            await wait_for(lambda: record.exists() and record.read_text() != "")
            assert record.read_text() == "1011 message handler failed\n"

    run_in_loop(engine, main)

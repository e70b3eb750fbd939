"""The simulator writes what it sends at one time in one write per connection, in order, and
every fault still lands on its message: a plain `websockets` client, the simulator's own
transport's writes recorded."""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode

from gateway.simulator import Fault, SimConfig, Simulator, wait_until
from gateway.simulator.server import text_frame_header
from tests.integration.test_simulator_helpers import client, run, sim_seq

TOPICS = ("btcusdt@trade", "ethusdt@trade", "solusdt@trade")


async def subscribed(sim: Simulator, topics: tuple[str, ...], **kwargs: Any) -> ClientConnection:
    ws: ClientConnection = await client(sim.url("binance", "/stream"), **kwargs)
    await ws.send(json.dumps({"method": "SUBSCRIBE", "params": list(topics), "id": 1}))
    assert json.loads(await ws.recv()) == {"result": None, "id": 1}
    await wait_until(lambda: len(sim.connections) == 1)
    return ws


def record_writes(sim: Simulator) -> list[bytes]:
    """What the simulator writes to its one connection's transport from now on."""
    (conn,) = sim.connections.values()
    transport = conn.ws.transport
    write = transport.write
    writes: list[bytes] = []

    def recording(data: Any) -> None:
        writes.append(bytes(data))
        write(data)

    transport.write = recording  # type: ignore[method-assign]
    return writes


def text_frames(data: bytes) -> list[bytes]:
    """The payloads of a run of unmasked server text frames."""
    payloads = []
    at = 0
    while at < len(data):
        assert data[at] == 0x81, data[at : at + 2]
        size, at = data[at + 1], at + 2
        if size == 126:
            (size,), at = struct.unpack_from("!H", data, at), at + 2
        elif size == 127:
            (size,), at = struct.unpack_from("!Q", data, at), at + 8
        payloads.append(data[at : at + size])
        at += size
    return payloads


def data_writes(writes: list[bytes]) -> list[bytes]:
    return [w for w in writes if b'"sim_seq"' in w]


async def recv_data(ws: ClientConnection, count: int) -> list[bytes]:
    got: list[bytes] = []
    async with asyncio.timeout(10):
        while len(got) < count:
            message = await ws.recv(decode=False)
            if b'"sim_seq"' in message:
                got.append(message)
    return got


def test_messages_sent_together_go_out_in_one_write_in_order() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=0.0)) as sim:
            ws = await subscribed(sim, TOPICS)
            writes = record_writes(sim)
            for topic in TOPICS:
                sim.emit("binance", topic, count=20)
            got = await recv_data(ws, 60)
            assert [json.loads(m)["stream"] for m in got] == [t for t in TOPICS for _ in range(20)]
            assert [sim_seq(m) for m in got] == list(range(1, 21)) * 3
            (written,) = data_writes(writes)
            assert text_frames(written) == got  # the frames as the client read them
            await ws.close()

    run(scenario())


def test_the_pump_writes_a_round_in_few_writes() -> None:
    """At 2 x 2000 msg/s with a 50 ms tick, a round holds about 200 messages (~44 KB): a
    write when ROUND_WRITE bytes are made, and one at the round's end."""

    async def scenario() -> None:
        async with Simulator(SimConfig(rate=0.0, pump_tick=0.05)) as sim:
            ws = await subscribed(sim, TOPICS[:2])
            writes = record_writes(sim)
            sim.set_rate(rate=2000.0)
            got = await recv_data(ws, 1000)
            sim.set_rate(rate=0.0)
            for topic in TOPICS[:2]:
                seqs = [sim_seq(m) for m in got if json.loads(m)["stream"] == topic]
                assert seqs == list(range(1, len(seqs) + 1))
            frames = [f for w in data_writes(writes) for f in text_frames(w)]
            assert frames[: len(got)] == got
            assert len(data_writes(writes)) * 10 <= len(frames)
            for write in data_writes(writes):  # ROUND_WRITE (4 KiB) and one message at most
                assert sum(len(f) for f in text_frames(write)) < 8192
            await ws.close()

    run(scenario())


def test_a_backlog_drains_in_few_writes() -> None:
    """Held back by a stall, 300 messages go out after it in order, 64 KiB a write."""

    async def scenario() -> None:
        async with Simulator(SimConfig(rate=0.0)) as sim:
            ws = await subscribed(sim, TOPICS[:1])
            writes = record_writes(sim)
            sim.inject(Fault("stall", seconds=0.1))
            sim.emit("binance", TOPICS[0], count=300)
            got = await recv_data(ws, 300)
            assert [sim_seq(m) for m in got] == list(range(1, 301))
            assert [f for w in data_writes(writes) for f in text_frames(w)] == got
            assert len(data_writes(writes)) <= 3  # 300 x ~200 bytes
            await ws.close()

    run(scenario())


async def until_closed(ws: ClientConnection) -> tuple[list[int], ConnectionClosed | None]:
    """sim_seq of the data messages until the connection closes, or until none came for 1 s
    (a fault that leaves it open)."""
    seqs: list[int] = []
    try:
        while True:
            async with asyncio.timeout(1.0):
                message = await ws.recv(decode=False)
            if b'"sim_seq"' in message:
                seqs.append(sim_seq(message))
    except ConnectionClosed as exc:
        return seqs, exc
    except TimeoutError:
        return seqs, None


FIRST_TEN = list(range(1, 11))


@pytest.mark.parametrize(
    ("fault", "seqs", "closed"),
    [
        (Fault("drop", after=10), FIRST_TEN, "no close frame"),
        (Fault("reset", after=10), FIRST_TEN, "no close frame"),
        (Fault("close", after=10, code=4000), FIRST_TEN, "received 4000"),
        (Fault("malformed", after=10), FIRST_TEN, "sent 1002"),
        (Fault("opcode", after=10), FIRST_TEN, "sent 1002"),
        (Fault("oversized", after=10, size=100_000), FIRST_TEN, "sent 1009"),
        (Fault("skip", after=10, count=3), [*FIRST_TEN, *range(14, 31)], "open"),
        (Fault("reorder", after=10), [*FIRST_TEN, 12, 11, *range(13, 31)], "open"),
        (Fault("stall", after=10, seconds=0.2), list(range(1, 31)), "open"),
        (Fault("delay", after=10, seconds=0.2), list(range(1, 31)), "open"),
    ],
    ids=lambda v: v.kind if isinstance(v, Fault) else None,
)
def test_a_fault_lands_on_its_message_within_one_write(
    fault: Fault, seqs: list[int], closed: str
) -> None:
    """30 messages sent at once, the fault due after the 10th: the 10 before it go out before
    it, whatever it does to the connection."""

    async def scenario() -> None:
        async with Simulator(SimConfig(rate=0.0)) as sim:
            ws = await subscribed(sim, TOPICS[:1], max_size=64 * 1024)
            assert sim.inject(fault) == 1
            sim.emit("binance", TOPICS[0], count=30)
            got, exc = await until_closed(ws)
            assert got == seqs
            if closed == "open":
                assert exc is None
                await ws.close()
            elif closed == "no close frame":
                assert exc is not None and exc.rcvd is None and exc.sent is None
            else:
                assert exc is not None
                side, code = closed.split()
                frame = exc.rcvd if side == "received" else exc.sent
                assert frame is not None and frame.code == int(code), exc

    run(scenario())


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 70000])
def test_text_frame_header_is_websockets_framing(size: int) -> None:
    payload = b"x" * size
    expected = Frame(Opcode.TEXT, payload).serialize(mask=False)
    assert text_frame_header(size) + payload == expected

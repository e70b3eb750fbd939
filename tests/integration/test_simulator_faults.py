"""Every scripted fault is observable by a plain `websockets` client."""

from __future__ import annotations

import asyncio
import itertools
import json
import urllib.request

import pytest
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, ConnectionClosedError

from gateway.dialects import RECONNECT, Other, make_dialect
from gateway.simulator import Fault, SimConfig, Simulator, wait_until
from tests.integration.test_simulator_helpers import client, contiguous, receive, run, sim_seq

TOPIC = "btcusdt@trade"


async def subscribed(sim: Simulator, **kwargs: object) -> ClientConnection:
    """A Binance connection with TOPIC subscribed and its ack read."""
    dialect = make_dialect("binance")
    ws: ClientConnection = await client(sim.url("binance", "/stream"), **kwargs)
    for m in dialect.subscribe_messages([TOPIC]):
        await ws.send(m)
    await receive(ws, dialect, lambda g: bool(g.acks))
    return ws


async def data_until_closed(ws: ClientConnection) -> tuple[list[int], ConnectionClosed]:
    seqs: list[int] = []
    try:
        async with asyncio.timeout(10):
            while True:
                seqs.append(sim_seq(await ws.recv()))
    except ConnectionClosed as exc:
        return seqs, exc


def test_drop_after_n() -> None:
    async def scenario() -> None:
        config = SimConfig(rate=500.0, faults=(Fault("drop", after=25),))
        async with Simulator(config) as sim:
            ws = await subscribed(sim)
            seqs, exc = await data_until_closed(ws)
            assert len(seqs) == 25 and contiguous(seqs)
            assert isinstance(exc, ConnectionClosedError)
            assert exc.rcvd is None  # no close frame: the TCP connection just went
            assert sim.counters.faults_fired["drop"] == 1

    run(scenario())


def test_clean_close() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=500.0)) as sim:
            ws = await subscribed(sim)
            sim.inject(Fault("close", after=3, code=4000, reason="maintenance"))
            seqs, exc = await data_until_closed(ws)
            assert len(seqs) >= 3
            assert exc.rcvd is not None and exc.rcvd.code == 4000
            assert exc.rcvd.reason == "maintenance"

    run(scenario())


def test_stall_holds_then_resumes() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=200.0)) as sim:
            ws = await subscribed(sim)
            loop = asyncio.get_running_loop()
            sim.inject(Fault("stall", after=10, seconds=1.0))
            arrivals: list[tuple[float, int]] = []
            async with asyncio.timeout(10):
                while len(arrivals) < 60:
                    arrivals.append((loop.time(), sim_seq(await ws.recv())))
            gaps = [b[0] - a[0] for a, b in itertools.pairwise(arrivals)]
            assert max(gaps) >= 0.9  # no data for the stall
            assert contiguous([s for _, s in arrivals])  # held back, not lost
            await ws.close()

    run(scenario())


@pytest.mark.parametrize(
    ("variant", "code"), [("rsv", 1002), ("utf8", 1007), ("mask", 1002), ("control", 1002)]
)
def test_malformed_frame_is_a_protocol_error(variant: str, code: int) -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=300.0)) as sim:
            ws = await subscribed(sim)
            sim.inject(Fault("malformed", after=5, variant=variant))
            seqs, exc = await data_until_closed(ws)
            assert len(seqs) >= 5
            assert isinstance(exc, ConnectionClosedError)
            assert exc.sent is not None and exc.sent.code == code, exc  # the client failed it

    run(scenario())


def test_unknown_opcode() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=300.0)) as sim:
            ws = await subscribed(sim)
            sim.inject(Fault("opcode", after=2, opcode=0xB))
            _, exc = await data_until_closed(ws)
            assert exc.sent is not None and exc.sent.code == 1002
            assert "opcode" in str(exc.__cause__)

    run(scenario())


def test_oversized_message() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=300.0)) as sim:
            ws = await subscribed(sim, max_size=64 * 1024)
            sim.inject(Fault("oversized", after=4, size=100_000))
            seqs, exc = await data_until_closed(ws)
            assert len(seqs) == 4
            assert exc.sent is not None and exc.sent.code == 1009  # message too big

    run(scenario())


def test_reconnect_notice() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=0.0)) as sim:
            for name in ("okx", "bitstamp", "binance"):
                dialect = make_dialect(name)
                async with client(sim.url(name, dialect.path)) as ws:
                    await wait_until(lambda: sim.counters.connections_open == 1)
                    assert sim.inject(Fault("notice"), target=f"dialect:{name}") == 1
                    got = await receive(ws, dialect, lambda g: bool(g.other), timeout=3)
                    assert got.other[0].kind == RECONNECT, (name, got.other)
                await wait_until(lambda: sim.counters.connections_open == 0)

    run(scenario())


def test_in_band_fault_topic() -> None:
    """Subscribing to `_sim:<fault>` arms it on that connection only."""

    async def scenario() -> None:
        async with Simulator(SimConfig(rate=500.0)) as sim:
            calm = await subscribed(sim)
            ws = await client(sim.url("binance", "/stream"))
            await ws.send(
                json.dumps({"method": "SUBSCRIBE", "params": ["_sim:drop,after=7", TOPIC], "id": 1})
            )
            assert json.loads(await ws.recv()) == {"result": None, "id": 1}
            seqs, _ = await data_until_closed(ws)
            assert len(seqs) == 7
            assert sim.counters.connections_open == 1
            assert isinstance(make_dialect("binance").classify(await calm.recv()), object)
            await calm.close()

    run(scenario())


def test_http_control_on_the_websocket_port() -> None:
    async def scenario() -> None:
        # No paced feed: what was sent before the fault was armed would count in seqs (under
        # load the HTTP command took long enough for one message to go first; CI, session 16).
        async with Simulator(SimConfig(rate=0.0)) as sim:
            ws = await subscribed(sim)
            base = sim.url().replace("ws://", "http://")

            def get(path: str) -> dict[str, object]:
                with urllib.request.urlopen(base + path, timeout=5) as response:
                    return json.loads(response.read())  # type: ignore[no-any-return]

            answer = await asyncio.to_thread(get, "/_sim/command?cmd=fault&kind=drop&after=4")
            assert answer == {"ok": True, "armed": 1, "fault": "drop:after=4"}
            sim.emit("binance", TOPIC, 10)
            seqs, _ = await data_until_closed(ws)
            assert len(seqs) == 4
            stats = await asyncio.to_thread(get, "/_sim/stats")
            assert stats["counters"]["faults_fired"] == {"drop": 1}  # type: ignore[index]
            with pytest.raises(urllib.error.HTTPError):
                await asyncio.to_thread(get, "/_sim/command?cmd=fault&kind=nonsense")

    run(scenario())


def test_next_and_every_targets() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=500.0)) as sim:
            sim.inject(Fault("drop", after=3), target="next")
            first = await subscribed(sim)
            second = await subscribed(sim)
            assert len((await data_until_closed(first))[0]) == 3
            assert sim.counters.connections_open == 1
            sim.inject(Fault("drop", after=2), target="every")
            third = await subscribed(sim)
            assert len((await data_until_closed(third))[0]) == 2
            sim.clear_faults()
            await second.close()

    run(scenario())


def test_fault_text_form() -> None:
    assert Fault.parse("stall:after=10,seconds=2.5") == Fault("stall", after=10, seconds=2.5)
    assert Fault.parse("MALFORMED,variant=UTF8") == Fault("malformed", variant="utf8")
    assert Fault.parse("drop").after == 0
    for bad in ("explode", "drop:after", "drop:after=x", "opcode:opcode=1", "stall:after=-1"):
        with pytest.raises(ValueError):
            Fault.parse(bad)
    assert isinstance(Other("x"), Other)

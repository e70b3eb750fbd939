"""Feed groups (#19): every connection of a group gets the group's one stream, byte for
byte, and a fault on one leg leaves the other legs' streams complete and in order."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from websockets.exceptions import ConnectionClosed, ConnectionClosedError

from gateway.dialects import Data, make_dialect
from gateway.dialects.identity import Identity, identity_for
from gateway.simulator import DEFAULT_GROUP, Fault, SimConfig, Simulator, wait_until, with_group
from gateway.simulator.process import start_simulator
from tests.integration.test_simulator_helpers import (
    SYMBOLS,
    TOPICS,
    client,
    contiguous,
    receive,
    run,
    sim_seq,
)
from wsgw_bench.servers import stop_process

TOPIC = "btcusdt@trade"
PATH = f"/stream?streams={TOPIC}"
GROUP = "g"


@dataclass
class Leg:
    """A Binance connection of the group, subscribed by URL, read into `frames`."""

    name: str
    ws: Any
    frames: list[bytes] = field(default_factory=list)
    closed: ConnectionClosed | None = None
    task: asyncio.Task[None] | None = None

    @property
    def seqs(self) -> list[int]:
        return [sim_seq(f) for f in self.frames]

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                self.frames.append(message.encode() if isinstance(message, str) else message)
        except ConnectionClosed as exc:
            self.closed = exc
        else:
            self.closed = None

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self.task, 5)


async def open_leg(sim: Simulator, name: str, group: str = GROUP) -> Leg:
    ws = await client(sim.url("binance", PATH, group=group, leg=name))
    leg = Leg(name, ws)
    leg.task = asyncio.get_running_loop().create_task(leg._read())
    return leg


def subscribers(sim: Simulator, group: str = GROUP, topic: str = TOPIC) -> int:
    publisher = sim.group(group).publishers.get(("binance", topic))
    return len(publisher.subscribers) if publisher else 0


async def grows(leg: Leg, more: int, timeout: float = 10.0) -> None:
    target = len(leg.frames) + more
    await wait_until(lambda: len(leg.frames) >= target, timeout)


def by_seq(leg: Leg) -> dict[int, bytes]:
    return {sim_seq(f): f for f in leg.frames}


def assert_same_stream(one: Leg, other: Leg) -> None:
    """Where both have a message, it is the same bytes (one stream, one send stamp)."""
    mine, theirs = by_seq(one), by_seq(other)
    common = sorted(set(mine) & set(theirs))
    assert common
    assert all(mine[s] == theirs[s] for s in common)


# ---- one stream per group -----------------------------------------------------------------
@pytest.mark.parametrize("name", list(TOPICS))
def test_two_connections_of_a_group_get_identical_messages_and_identities(name: str) -> None:
    """Each dialect: same bytes, same order, same identities (never 'no identity')."""
    topics = TOPICS[name]
    per_topic = 20
    identity = identity_for(name)

    async def scenario() -> None:
        config = SimConfig(rate=0.0, heartbeat_interval=0.0, symbols=SYMBOLS)
        async with Simulator(config) as sim:
            legs = []
            for leg in ("A", "B"):
                dialect = make_dialect(name)
                ws = await client(sim.url(name, dialect.connect_path(), group=GROUP, leg=leg))
                for message in dialect.subscribe_messages(topics):
                    await ws.send(message)
                legs.append((ws, dialect))
            await wait_until(
                lambda: all(
                    len(sim.group(GROUP).publishers[(name, t)].subscribers) == 2 for t in topics
                )
            )
            for _ in range(per_topic):  # interleaved, so order across topics is tested too
                for topic in topics:
                    sim.emit(name, topic, 1, group=GROUP)
            streams = []
            for ws, dialect in legs:
                got = await receive(
                    ws, dialect, lambda g: sum(len(s) for s in g.seqs.values()) >= 3 * per_topic
                )
                pairs = zip(got.raw, got.classified, strict=True)
                streams.append([raw for raw, kind in pairs if isinstance(kind, Data)])
                await ws.close()
            a, b = streams
            assert len(a) == len(b) == 3 * per_topic
            assert a == b
            ids_a = [identity(f) for f in a]
            assert ids_a == [identity(f) for f in b]
            assert all(isinstance(i, Identity) for i in ids_a), ids_a
            # Per topic, the exchange ids go up (hash kinds: all distinct).
            for topic_key in {i.topic for i in ids_a if isinstance(i, Identity)}:
                ids = [i.id for i in ids_a if isinstance(i, Identity) and i.topic == topic_key]
                assert len(ids) == per_topic and len(set(ids)) == per_topic
            assert sim.sent(name, topics[0], GROUP) == per_topic
            assert sim.sent(name, topics[0]) == 0  # the default group is another stream

    run(scenario())


def test_groups_are_separate_streams_and_legs_are_named() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=0.0, heartbeat_interval=0.0)) as sim:
            a = await open_leg(sim, "A")
            b = await open_leg(sim, "B")
            other = await open_leg(sim, "A", group="other")
            plain = await client(sim.url("binance", PATH))  # the default group, leg "1"
            await wait_until(lambda: subscribers(sim) == 2 and subscribers(sim, "other") == 1)
            await wait_until(lambda: subscribers(sim, DEFAULT_GROUP) == 1)
            sim.emit("binance", TOPIC, 5, group=GROUP)
            sim.emit("binance", TOPIC, 2, group="other")
            await wait_until(lambda: len(a.frames) == len(b.frames) == 5 and len(other.frames) == 2)
            assert a.frames == b.frames and a.seqs == [1, 2, 3, 4, 5]
            assert other.seqs == [1, 2]
            stats = sim.stats()
            assert stats["groups"][GROUP] == ["A", "B"]
            assert stats["groups"]["other"] == ["A"]
            assert stats["groups"][DEFAULT_GROUP] == ["1"]
            assert stats["sent_per_topic"][f"{GROUP}/binance:{TOPIC}"] == 5
            # leg:A without a group hits both legs named A; with one, only that group's.
            assert len(sim.targets("leg:A")) == 2
            assert [c.group.name for c in sim.targets("leg:other/A")] == ["other"]
            assert len(sim.targets(f"group:{GROUP}")) == 2
            await plain.close()
            for leg in (a, b, other):
                await leg.stop()

    run(scenario())


def test_with_group_adds_query_parameters() -> None:
    assert with_group("/stream", "g", "A") == "/stream?group=g&leg=A"
    assert with_group(PATH, "g") == f"{PATH}&group=g"
    assert with_group("", None, "B") == "/?leg=B"
    assert with_group("/ws", None, None) == "/ws"


# ---- a fault on one leg -------------------------------------------------------------------
def test_reset_one_leg_the_other_streams_on_and_a_reconnect_joins_at_the_current_point() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=300.0, heartbeat_interval=0.0)) as sim:
            a = await open_leg(sim, "A")
            b = await open_leg(sim, "B")
            await wait_until(lambda: subscribers(sim) == 2)
            await grows(b, 20)
            assert sim.inject(Fault("reset"), f"leg:{GROUP}/A") == 1
            assert a.task is not None
            await asyncio.wait_for(asyncio.shield(a.task), 10)
            assert isinstance(a.closed, ConnectionClosedError)
            assert a.closed.rcvd is None  # no close frame: the connection was reset
            assert sim.counters.faults_fired["reset"] == 1
            await grows(b, 30)  # B streams on while A is gone
            again = await open_leg(sim, "A")
            await grows(again, 30)
            await b.stop()
            await again.stop()

            assert contiguous(b.seqs)  # complete and in order through A's reset
            assert contiguous(a.seqs) and contiguous(again.seqs)
            assert a.seqs[-1] < again.seqs[0]  # it rejoins at the current point...
            assert again.seqs[0] > b.seqs[0] + 50 - 1  # ...not at the start
            assert_same_stream(a, b)
            assert_same_stream(again, b)

    run(scenario())


def test_stall_one_leg_the_other_streams_on_and_the_stalled_leg_catches_up() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=300.0, heartbeat_interval=0.0)) as sim:
            a = await open_leg(sim, "A")
            b = await open_leg(sim, "B")
            await wait_until(lambda: subscribers(sim) == 2)
            await grows(b, 10)
            sim.inject(Fault("stall", seconds=2.0), "leg:A")
            a_before, b_before = len(a.frames), len(b.frames)
            await grows(b, 60)
            assert len(a.frames) - a_before < len(b.frames) - b_before  # A is held back
            target = b.seqs[-1]
            await wait_until(lambda: bool(a.frames) and a.seqs[-1] >= target, 10)
            await a.stop()
            await b.stop()
            assert contiguous(a.seqs) and contiguous(b.seqs)  # held, not lost
            assert_same_stream(a, b)

    run(scenario())


def test_skip_one_message_on_one_leg() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=300.0, heartbeat_interval=0.0)) as sim:
            a = await open_leg(sim, "A")
            b = await open_leg(sim, "B")
            await wait_until(lambda: subscribers(sim) == 2)
            await grows(b, 5)
            missing = sim.sent("binance", TOPIC, GROUP) + 20
            sim.inject(Fault("skip", seq=missing), "leg:A")
            await wait_until(lambda: bool(b.frames) and b.seqs[-1] >= missing + 20)
            await wait_until(lambda: bool(a.frames) and a.seqs[-1] >= missing + 20)
            await a.stop()
            await b.stop()
            assert missing in b.seqs and missing not in a.seqs
            assert contiguous(b.seqs)
            gap = a.seqs.index(missing - 1)
            assert a.seqs[gap + 1] == missing + 1  # exactly that one
            assert contiguous(a.seqs[: gap + 1]) and contiguous(a.seqs[gap + 1 :])
            assert sim.counters.skipped_messages == 1
            assert_same_stream(a, b)

    run(scenario())


def test_skip_a_fraction_and_delay_on_one_leg() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=400.0, heartbeat_interval=0.0)) as sim:
            a = await open_leg(sim, "A")
            b = await open_leg(sim, "B")
            c = await open_leg(sim, "C")
            await wait_until(lambda: subscribers(sim) == 3)
            await grows(b, 5)
            sim.inject(Fault.parse("skip:fraction=0.5"), "leg:A")
            sim.inject(Fault.parse("delay:ms=100"), "leg:C")
            await grows(b, 150)
            sim.clear_faults()
            target = b.seqs[-1] + 20
            for leg in (a, b, c):
                await wait_until(lambda leg=leg: bool(leg.frames) and leg.seqs[-1] >= target)
                await leg.stop()
            assert contiguous(b.seqs) and contiguous(c.seqs)  # the delayed leg loses nothing
            assert_same_stream(c, b)
            window = [s for s in b.seqs if s > a.seqs[0]]
            lost = set(window) - set(a.seqs)
            assert 20 < len(lost) < len(window) - 20  # about half of ~150
            assert a.seqs == sorted(a.seqs)  # what A gets is in order
            assert {x for x in a.seqs if x >= b.seqs[0]} <= set(b.seqs)
            assert_same_stream(a, b)

    run(scenario())


# ---- the simulator process ----------------------------------------------------------------
def test_process_http_fault_on_one_leg() -> None:
    """`python -m gateway.simulator`: a reset armed over HTTP on leg A of a group."""
    proc = start_simulator(None, 0, 300.0)
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        port = int(info["port"])

        def command(**query: str) -> dict[str, Any]:
            url = f"http://127.0.0.1:{port}/_sim/command?" + "&".join(
                f"{k}={v}" for k, v in query.items()
            )
            with urllib.request.urlopen(url, timeout=5) as response:
                result: dict[str, Any] = orjson.loads(response.read())
            return result

        async def scenario() -> None:
            base = f"ws://127.0.0.1:{port}/binance{PATH}"
            a = Leg("A", await client(with_group(base, GROUP, "A")))
            b = Leg("B", await client(with_group(base, GROUP, "B")))
            loop = asyncio.get_running_loop()
            for leg in (a, b):
                leg.task = loop.create_task(leg._read())
            await grows(b, 20)
            await grows(a, 1)
            answer = await asyncio.to_thread(
                command, cmd="fault", kind="reset", target=f"leg:{GROUP}/A"
            )
            assert answer == {"ok": True, "armed": 1, "fault": "reset:after=0"}
            assert a.task is not None
            await asyncio.wait_for(asyncio.shield(a.task), 10)
            assert isinstance(a.closed, ConnectionClosedError)
            await grows(b, 30)
            await b.stop()
            assert contiguous(b.seqs)
            assert_same_stream(a, b)

        run(scenario())
        stats = command(cmd="stats")
        assert stats["counters"]["faults_fired"] == {"reset": 1}
    finally:
        stop_process(proc, 10)

"""Feed groups end to end (issue #19), two kernel legs of the real simulator's feed group:
the control plane configures the group, a LiveRuntime runs both legs through the group's C
arbiter into a real hub ring, and a ring reader of the group's topics checks what consumers
get. (DPDK legs: not in this slice.)

- one leg reset, stalled, or skipping a message, repeatedly: every message exactly once and
  in order (the simulator's per-topic sim_seq steps by one), no gap record;
- a message both legs drop: one gap record of the group, lost = 1, and nothing else missing.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from websockets.asyncio.client import connect

from api.app import create_app
from dataplane.ring import RingReader, RingWriter
from gateway.control import ControlPlane
from gateway.groups.feed import group_hub_id
from gateway.hub import Hub
from gateway.hub.names import RING_GAP_TOPIC
from gateway.runtime import SessionSpec
from gateway.runtime.live import LiveRuntime
from gateway.sessions import SessionConfig
from gateway.simulator import Fault, SimConfig, Simulator
from tests.integration.test_groups_helpers import create_group, group_reader
from tests.integration.test_sessions_helpers import (
    fast_config,
    local_settings,
    run,
    sim_seq,
    until,
)
from tests.utils.ring_records import records_of
from wsgw_bench.servers import ServerThread

TOPIC = "btcusdt@trade"
GROUP = "g"


def leg_config(spec: SessionSpec) -> SessionConfig:
    return fast_config(spec.url, spec.dialect)


@dataclass
class Gateway:
    hub: Hub
    runtime: LiveRuntime
    control: ControlPlane
    reader: RingReader | None = None
    group_id: int = 0
    legs: tuple[int, ...] = ()

    @property
    def hub_id(self) -> int:
        return group_hub_id(self.group_id)


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    ring = RingWriter.create(None, 1 << 24)
    hub = Hub(ring=ring)
    runtime = LiveRuntime(hub, hub=hub, session_config=leg_config)
    control = ControlPlane(local_settings(tmp_path), runtime)
    control.start()
    gw = Gateway(hub, runtime, control)
    try:
        yield gw
    finally:
        if gw.reader is not None:
            gw.reader.close()
        control.shutdown()  # closes the runtime, and the hub with it
        ring.close()


async def open_group(gw: Gateway, sim: Simulator) -> None:
    """Two kernel legs (A and B of the simulator's group) and the gateway's group of them."""
    legs = {
        name: {
            "url": sim.url("binance", "/stream", group=GROUP, leg=name),
            "dialect": "binance",
            "transport": "kernel",
        }
        for name in ("A", "B")
    }
    assert gw.hub.ring is not None
    gw.group_id, ids = await asyncio.to_thread(
        create_group, gw.control, legs, TOPIC, name="btc", hold_ms=20
    )
    gw.legs = tuple(ids.values())
    gw.reader = group_reader(gw.hub.ring, gw.group_id, start="oldest")
    await until(lambda: subscribers(sim) == 2)


def subscribers(sim: Simulator) -> int:
    publisher = sim.group(GROUP).publishers.get(("binance", TOPIC))
    return len(publisher.subscribers) if publisher else 0


class Seen:
    """What the group's ring consumer read: sim_seqs of messages, gap records (JSON)."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.seqs: list[int] = []
        self.gaps: list[dict[str, object]] = []

    def pull(self) -> None:
        assert self.gw.reader is not None
        for event in records_of(self.gw.reader, self.gw.hub_id):
            if event.topic == RING_GAP_TOPIC:
                self.gaps.append(orjson.loads(bytes(event.payload)))
            else:
                assert event.topic == f"{self.gw.hub_id}:{TOPIC}"
                self.seqs.append(int(orjson.loads(bytes(event.payload))["sim_seq"]))

    async def reach(self, seq: int, timeout: float = 15.0) -> None:
        def there() -> bool:
            self.pull()
            return bool(self.seqs) and self.seqs[-1] >= seq

        await until(there, timeout)


async def current(gw: Gateway, sim: Simulator, timeout: float = 15.0) -> None:
    """Stream on until every leg brought the newest message: a fault on one leg is over
    (a leg faulted while another is still behind would make a loss of both)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        last = await stream(sim, 10)
        await asyncio.sleep(0.02)
        figures = gw.control.groups.figures(gw.group_id)
        assert figures is not None
        if all(leg["newest_id"] == last for leg in figures["legs"]):
            return
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"a leg did not catch up: {figures['legs']}")


async def stream(sim: Simulator, count: int, per_tick: int = 5) -> int:
    """count messages on the group's topic, a few every 5 ms; the last sim_seq."""
    last = 0
    for _ in range(count // per_tick):
        last = sim.emit("binance", TOPIC, per_tick, group=GROUP)
        await asyncio.sleep(0.005)
    return last


@asynccontextmanager
async def group_streaming(gw: Gateway) -> AsyncIterator[tuple[Simulator, Seen]]:
    """A quiet simulator, the gateway's group open on it and its first 50 messages read."""
    async with Simulator(SimConfig(rate=0.0, heartbeat_interval=0.0)) as sim:
        await open_group(gw, sim)
        seen = Seen(gw)
        await seen.reach(await stream(sim, 50))
        yield sim, seen


def test_one_leg_reset_stalled_or_skipping_loses_nothing_and_repeats_nothing(
    gateway: Gateway,
) -> None:
    gw = gateway

    async def scenario() -> None:
        async with group_streaming(gw) as (sim, seen):
            for leg in ("A", "B", "A", "B"):
                other_sid = gw.legs[1] if leg == "A" else gw.legs[0]
                assert sim.inject(Fault("reset"), f"leg:{GROUP}/{leg}") == 1
                await seen.reach(await stream(sim, 100))
                await current(gw, sim)  # the reset leg is back
                sim.inject(Fault("stall", seconds=0.5), f"leg:{GROUP}/{leg}")
                await seen.reach(await stream(sim, 100))
                await current(gw, sim)
                missing = sim.sent("binance", TOPIC, GROUP) + 10
                sim.inject(Fault("skip", seq=missing), f"leg:{GROUP}/{leg}")
                await seen.reach(await stream(sim, 50))
                await current(gw, sim)
                figures = gw.control.groups.figures(gw.group_id)
                assert figures is not None
                won = {leg["session_id"]: leg["won"] for leg in figures["legs"]}
                assert won[other_sid] > 0
            last = await stream(sim, 50)
            await seen.reach(last)
            seen.pull()

            assert seen.gaps == [], [g["reason"] for g in seen.gaps]
            first = seen.seqs[0]
            assert seen.seqs == list(range(first, last + 1))  # once each, in order
            figures = gw.control.groups.figures(gw.group_id)
            assert figures is not None
            assert figures["gaps"] == 0 and figures["lost"] == 0
            assert figures["duplicates"] > 0  # both legs brought most messages
            assert sum(leg["won"] for leg in figures["legs"]) == len(seen.seqs)
            text = "\n".join(f"{m.name} {m.labels} {m.value}" for m in gw.runtime.metrics().metrics)
            assert "group_leg_won" in text and "group_leg_lag_seconds" in text

    run(scenario(), timeout=120)


def test_a_message_both_legs_drop_is_one_gap_with_its_count(gateway: Gateway) -> None:
    gw = gateway

    async def scenario() -> None:
        async with group_streaming(gw) as (sim, seen):
            missing = sim.sent("binance", TOPIC, GROUP) + 10
            assert sim.inject(Fault("skip", seq=missing), f"group:{GROUP}") == 2
            last = await stream(sim, 50)
            await seen.reach(last)
            await until(lambda: (seen.pull(), bool(seen.gaps))[1])

            first = seen.seqs[0]
            assert seen.seqs == [s for s in range(first, last + 1) if s != missing]
            (gap,) = seen.gaps
            assert gap["lost"] == 1
            assert gap["session"] == gw.hub_id
            figures = gw.control.groups.figures(gw.group_id)
            assert figures is not None
            assert figures["gaps"] == 1 and figures["lost"] == 1

    run(scenario(), timeout=60)


def test_both_legs_reset_at_once_is_a_gap_of_the_group(gateway: Gateway) -> None:
    """Every leg's connection lost at once: the group's consumers get a gap (lost unknown)
    before the messages after it, whatever the topic links (it was told only by the
    arbiter's holes, so a topic whose ids do not link lost silently)."""
    gw = gateway

    async def scenario() -> None:
        async with group_streaming(gw) as (sim, seen):
            before = len(seen.seqs)
            assert sim.inject(Fault("reset"), f"group:{GROUP}") == 2
            await until(lambda: subscribers(sim) == 2)  # both back
            last = await stream(sim, 50)
            await seen.reach(last)
            seen.pull()
            down = [g for g in seen.gaps if str(g["reason"]).startswith("every leg down")]
            assert len(down) == 1, seen.gaps
            assert down[0]["session"] == gw.hub_id and down[0]["lost"] is None
            assert seen.seqs[before:] == list(range(seen.seqs[before], last + 1))

    run(scenario(), timeout=60)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        text: str = response.read().decode()
    return text


def test_a_stream_consumer_of_the_group_sees_one_stream_through_a_reset(tmp_path: Path) -> None:
    """/v1/stream?group=ID on the real server: every message once, in order, while one leg
    is reset."""
    ring = RingWriter.create(None, 1 << 22)
    hub = Hub(ring=ring)
    runtime = LiveRuntime(hub, hub=hub, session_config=leg_config)
    server = ServerThread(create_app(local_settings(tmp_path), runtime, hub=hub)).start()
    gw = Gateway(hub, runtime, server.config.app.state.control)

    async def scenario() -> None:
        async with Simulator(SimConfig(rate=0.0, heartbeat_interval=0.0)) as sim:
            await open_group(gw, sim)
            url = f"{server.ws_url}/v1/stream?group={gw.group_id}&topics={TOPIC}&envelope=1"
            async with connect(url) as ws:
                hello = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
                assert hello["type"] == "subscribed" and hello["session"] == gw.hub_id
                first = await stream(sim, 20)
                await current(gw, sim)
                sim.inject(Fault("reset"), f"leg:{GROUP}/A")
                await stream(sim, 100)
                await current(gw, sim)
                last = await stream(sim, 20)
                got: list[int] = []
                while not got or got[-1] < last:
                    frame = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
                    assert frame["type"] != "gap", frame
                    got.append(sim_seq(frame["payload"].encode()))
            assert got == list(range(got[0], last + 1))
            assert got[0] <= first
            metrics = await asyncio.to_thread(scrape, f"{server.url}/metrics")
            for leg in gw.legs:
                labels = f'group="{gw.group_id}",session="{leg}"'
                for name in ("won", "late", "live"):
                    assert f"wsgw_dataplane_group_leg_{name}" in metrics
                assert f"wsgw_dataplane_group_leg_state{{{labels}" in metrics

    try:
        run(scenario(), timeout=60)
    finally:
        if gw.reader is not None:
            gw.reader.close()
        server.stop()
        ring.close()

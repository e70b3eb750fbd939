"""The stream sink with a real kernel-transport session: the simulator (Binance dialect,
diff depth with update ids U/u) feeds a LiveRuntime's session, whose publisher (the hub's
`publish_batch`, in the session's thread) sends the /v1/stream frames through the sink; the
connection drops once, so a gap record comes while the stream is armed. The same scenario
with the sink on and off must give the stream the same frames in the same order: update
ids, payloads and gap notices."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect

from api.app import create_app
from gateway.hub import Hub
from gateway.runtime import SessionState
from gateway.runtime.live import LiveRuntime
from gateway.simulator import Fault, SimConfig, Simulator
from tests.integration.test_sessions_helpers import local_settings, run, until
from tests.integration.test_stream_sequence_gap import sequenced
from wsgw_bench.servers import ServerThread

TOPICS = ["ethusdt@depth", "btcusdt@depth"]


def scenario_frames(tmp_path: Path, sink: bool) -> tuple[list[Any], int]:
    """What the stream got (update ids and gap notices), and how often the sink was armed."""
    hub = Hub()
    runtime = LiveRuntime(hub, hub=hub, session_config=sequenced)
    app = create_app(local_settings(tmp_path), runtime, hub=hub)
    app.state.stream_sink = sink
    server = ServerThread(app).start()
    service = app.state.control
    got: list[Any] = []
    arms = 0

    async def frames(ws: ClientConnection, n: int) -> None:
        for _ in range(n):
            body = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
            if body.get("type") == "gap":
                got.append(("gap", body["lost"], body["reason"].split(":")[0]))
            else:
                got.append((body["stream"], body["data"]["U"], body["data"]["u"]))

    async def scenario() -> None:
        nonlocal arms
        async with Simulator(SimConfig(rate=0.0)) as sim:
            values = {"name": "bn", "url": sim.url("binance", "/stream"), "dialect": "binance"}
            sid = service.sessions.create({**values, "transport": "kernel"}).id
            service.subscriptions.create({"session_id": sid, "topics": TOPICS, "consumer": "c"})
            await asyncio.to_thread(service.sessions.start, sid)

            def subscribed() -> bool:
                return any(set(TOPICS) <= conn.topics for conn in sim.connections.values())

            await until(subscribed)
            for topic in TOPICS:  # the topics get their ring ids (a running feed's have them)
                sim.emit("binance", topic, 1)
            await until(lambda: hub.known_topic_id(sid, TOPICS[1]) is not None)
            url = f"{server.ws_url}/v1/stream?session={sid}&topics={','.join(TOPICS)}"
            async with connect(url) as ws:
                await until(lambda: len(hub.consumers()) == 1)
                consumer = hub.consumers()[0]
                if sink:
                    await until(lambda: consumer.sink_armed)
                for i in range(40):
                    sim.emit("binance", TOPICS[i % 2], 1 + i % 3)
                    if i % 8 == 0:
                        await asyncio.sleep(0.01)
                await frames(ws, sum(1 + i % 3 for i in range(40)))
                sim.inject(Fault("drop"))  # a reconnect: a gap record, maybe while armed
                await until(lambda: runtime.session_status(sid).state is SessionState.RECONNECTING)
                sim.emit("binance", TOPICS[0], 4)  # missed: the next update tells how many
                await until(subscribed)
                sim.emit("binance", TOPICS[0], 3)
                await frames(ws, 2 + 3)
                arms = consumer.sink_arms

    try:
        run(scenario(), timeout=60)
    finally:
        server.stop()
        runtime.close()
        hub.close()
    return got, arms


def test_the_stream_gets_the_same_frames_with_the_sink_on_and_off(tmp_path: Path) -> None:
    on, arms_on = scenario_frames(tmp_path / "on", sink=True)
    off, arms_off = scenario_frames(tmp_path / "off", sink=False)
    assert arms_on >= 1 and arms_off == 0
    assert on == off
    data = [f for f in on if f[0] != "gap"]
    for topic in TOPICS:  # every update of each topic once, in order
        ids = [f[2] for f in data if f[0] == topic]
        assert ids == sorted(set(ids))
    assert [f[0] for f in on[-5:]].count("gap") == 2

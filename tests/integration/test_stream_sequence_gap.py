"""A gap the exchange's own sequence numbers can count reaches a /v1/stream consumer with
`lost` = the count: the simulator (Binance dialect, diff depth with update ids U/u) feeds a
session of a LiveRuntime over the kernel, the connection drops, messages are published
while it is down, and the real uvicorn server's stream tells its websockets client exactly
how many it missed, in the run's epoch."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect

from api.app import create_app
from gateway.hub import Hub
from gateway.runtime import SessionSpec, SessionState
from gateway.runtime.live import LiveRuntime
from gateway.sessions import HeartbeatConfig, ReconnectPolicy, SessionConfig
from gateway.simulator import Fault, SimConfig, Simulator
from tests.integration.test_sessions_helpers import local_settings, run, until
from wsgw_bench.servers import ServerThread

TOPIC = "ethusdt@depth"


def sequenced(spec: SessionSpec) -> SessionConfig:
    """Sequence check on; a reconnect waits 1.5 s, so the test publishes while it is down."""
    return SessionConfig.from_spec(
        spec,
        reconnect=ReconnectPolicy(initial_delay_s=1.5, max_delay_s=1.5, jitter=0.0),
        heartbeat=HeartbeatConfig(ping_interval_s=5.0, ping_timeout_s=10.0),
        close_timeout_s=1.0,
        sequence_check=True,
    )


def test_a_sequence_gap_reaches_the_stream_with_the_count_skipped(tmp_path: Path) -> None:
    hub = Hub()
    runtime = LiveRuntime(hub, hub=hub, session_config=sequenced)
    settings = local_settings(tmp_path)
    server = ServerThread(create_app(settings, runtime, hub=hub)).start()
    service = server.config.app.state.control

    async def frames(ws: ClientConnection, n: int) -> list[dict[str, Any]]:
        return [orjson.loads(await asyncio.wait_for(ws.recv(), 10)) for _ in range(n)]

    async def scenario() -> None:
        async with Simulator(SimConfig(rate=0.0)) as sim:
            values = {"name": "bn", "url": sim.url("binance", "/stream"), "dialect": "binance"}
            sid = service.sessions.create({**values, "transport": "kernel"}).id
            service.subscriptions.create({"session_id": sid, "topics": [TOPIC], "consumer": "c"})
            await asyncio.to_thread(service.sessions.start, sid)

            def subscribed() -> bool:
                return any(TOPIC in conn.topics for conn in sim.connections.values())

            url = f"{server.ws_url}/v1/stream?session={sid}&topics={TOPIC}&envelope=1"
            async with connect(url) as ws:
                (hello,) = await frames(ws, 1)
                assert hello["type"] == "subscribed"
                assert hello["epoch"] == hub.epoch_hex and len(hello["epoch"]) == 16
                await until(subscribed)
                sim.emit("binance", TOPIC, 3)
                before = await frames(ws, 3)
                assert [f["upstream_seq"] for f in before] == [1, 2, 3]

                sim.inject(Fault("drop"))
                await until(lambda: runtime.session_status(sid).state is SessionState.RECONNECTING)
                sim.emit("binance", TOPIC, 5)  # nobody is subscribed: 4..8 are missed
                await until(subscribed)
                sim.emit("binance", TOPIC, 2)
                after = await frames(ws, 4)

            reconnect, counted = after[0], after[1]
            assert reconnect["type"] == "gap" and reconnect["lost"] is None  # cannot tell yet
            assert reconnect["reason"].startswith("reconnect")
            assert counted == {
                "type": "gap",
                "seq": counted["seq"],
                "session": sid,
                "lost": 5,
                "reason": f"{TOPIC}: update 9 follows 3",
                "epoch": hub.epoch_hex,
            }
            assert [f["upstream_seq"] for f in after[2:]] == [9, 10]
            events = service.sessions.events(sid, 0, 100).items
            assert [e.details["lost"] for e in events if e.kind == "gap"] == [
                5,
                None,
            ]  # newest first

    try:
        run(scenario(), timeout=60)
    finally:
        server.stop()

"""LiveRuntime end to end through the Runtime methods the control plane calls: sessions on
the runtime's own thread, the simulator on the test's loop, every call returning at once."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from gateway.runtime import RuntimeEvent, SessionSpec, SessionState
from gateway.runtime.live import STOPPED_GAP_REASON, LiveRuntime
from gateway.sessions import GapMark, HeartbeatConfig, ReconnectPolicy, RecordingSink, SessionConfig
from gateway.simulator import Fault, SimConfig, Simulator
from tests.integration.test_sessions_helpers import check_order, run, until

TOPICS = ["btcusdt@trade", "ethusdt@depth"]
T = TypeVar("T")


def quick(spec: SessionSpec) -> SessionConfig:
    return SessionConfig.from_spec(
        spec,
        reconnect=ReconnectPolicy(initial_delay_s=0.02, max_delay_s=0.1),
        heartbeat=HeartbeatConfig(ping_interval_s=0.2, ping_timeout_s=3.0),
        close_timeout_s=1.0,
    )


def counter(runtime: LiveRuntime, name: str, session: int = 1) -> float:
    for metric in runtime.metrics().metrics:
        if metric.name == f"session_{name}" and metric.labels.get("session") == str(session):
            return metric.value
    return 0.0


def timed(call: Callable[..., T], *args: object) -> T:
    """Run a Runtime call and check it came back at once (no waiting on the network)."""
    start = time.perf_counter()
    result = call(*args)
    assert time.perf_counter() - start < 0.05, call
    return result


def binance_spec(sim: Simulator) -> SessionSpec:
    """Session 1 on the simulator's Binance stream, kernel transport."""
    return SessionSpec(
        id=1,
        name="bn",
        url=sim.url("binance", "/stream"),
        dialect="binance",
        transport="kernel",
        port_id=None,
    )


def test_live_runtime_end_to_end() -> None:
    async def scenario() -> None:
        sink = RecordingSink()
        events: list[RuntimeEvent] = []
        runtime = LiveRuntime(sink, session_config=quick)
        runtime.set_event_sink(events.append)
        try:
            async with Simulator(SimConfig(rate=200.0)) as sim:
                spec = binance_spec(sim)
                status = timed(runtime.start_session, spec)
                assert status.state is SessionState.CONNECTING
                timed(runtime.subscribe, 1, TOPICS)

                def streaming() -> bool:
                    s = runtime.session_status(1)
                    return s.state is SessionState.CONNECTED and (s.reason or "").startswith(
                        "streaming"
                    )

                await until(streaming)
                assert runtime.session_status(1).topics == tuple(TOPICS)
                first = counter(runtime, "messages")
                await until(lambda: counter(runtime, "messages") > first + 50)
                assert counter(runtime, "bytes") > 0
                per_topic = {
                    m.labels["topic"]: m.value
                    for m in runtime.metrics().metrics
                    if m.name == "session_topic_messages"
                }
                assert set(per_topic) == set(TOPICS)
                assert runtime.sessions_snapshot()[1]["state"] == "streaming"

                # Starting it again is a no-op; the session survives a drop.
                assert timed(runtime.start_session, spec) == runtime.session_status(1)
                sim.inject(Fault("drop", after=5))
                await until(lambda: counter(runtime, "reconnects") == 1)
                await until(streaming)
                timed(runtime.unsubscribe, 1, TOPICS[:1])
                (conn,) = sim.connections.values()
                await until(lambda: conn.topics == set(TOPICS[1:]))

                # Stopped while the feed flows: what the exchange sends until the restart
                # is missed, and the restart's first connection says so with a gap mark.
                status = timed(runtime.stop_session, 1)
                assert status.state is SessionState.STOPPING
                await until(lambda: runtime.session_status(1).state is SessionState.STOPPED)
                assert runtime.session_status(1).topics == tuple(TOPICS[1:])  # wanted, kept
                await until(lambda: not sim.connections)
                assert counter(runtime, "messages") == 0.0  # gone from the live set
                assert len(sink.gaps()) == 1  # the stop alone publishes nothing
                stopped_at = len(sink.entries())

                # A restart picks the held topics up again, behind a gap mark.
                timed(runtime.start_session, replace(spec))
                await until(streaming)
                (conn,) = sim.connections.values()
                assert conn.topics == set(TOPICS[1:])
                await until(lambda: len(sink.entries()) > stopped_at + 5)
                restarted = sink.entries()[stopped_at:]
                assert isinstance(restarted[0], GapMark), restarted[:2]
                assert restarted[0].reason == STOPPED_GAP_REASON
                assert restarted[0].session_id == 1 and restarted[0].lost is None
                await asyncio.to_thread(runtime.close)  # before the simulator goes away
                await until(lambda: not sim.connections)
        finally:
            await asyncio.to_thread(runtime.close)
        assert not [t for t in threading.enumerate() if t.name == "wsgw-sessions" and t.is_alive()]
        assert check_order(sink, TOPICS) == 2  # the reconnect's gap, the restart's
        states = [e.details["state"] for e in events if e.kind == "state"]
        assert states[:3] == ["connecting", "subscribing", "streaming"]
        assert states.count("stopped") == 2  # the stop, and the shutdown
        assert all(e.session_id == 1 and e.reason for e in events)
        assert [e.kind for e in events].count("gap") == 2
        assert all("session_state" in e.details and "connection" in e.details for e in events)

    run(scenario())


def test_a_resume_gap_outlives_a_session_object_that_never_connected() -> None:
    """Stopped after it streamed, the session's next start owes a gap. That start never
    connects (the exchange is unreachable) and is stopped again: the gap is still owed, and
    the start after, which connects, publishes it before its first message."""

    async def scenario() -> None:
        sink = RecordingSink()
        runtime = LiveRuntime(sink, session_config=quick)
        try:
            async with Simulator(SimConfig(rate=200.0)) as sim:
                spec = binance_spec(sim)
                runtime.start_session(spec)
                runtime.subscribe(1, TOPICS)
                await until(lambda: len(sink.entries()) > 5)
                runtime.stop_session(1)
                await until(lambda: runtime.session_status(1).state is SessionState.STOPPED)
                await until(lambda: not sim.connections)

                # Started where nothing answers (port 1 refuses): it never connects.
                events: list[RuntimeEvent] = []
                runtime.set_event_sink(events.append)
                runtime.start_session(replace(spec, url="ws://127.0.0.1:1/stream"))
                await until(lambda: any(e.details.get("state") == "backoff" for e in events))
                runtime.stop_session(1)
                await until(lambda: runtime.session_status(1).state is SessionState.STOPPED)
                stopped_at = len(sink.entries())

                runtime.start_session(spec)
                await until(lambda: len(sink.entries()) > stopped_at + 5)
                restarted = sink.entries()[stopped_at:]
                assert isinstance(restarted[0], GapMark), restarted[:2]
                assert restarted[0].reason == STOPPED_GAP_REASON
                await asyncio.to_thread(runtime.close)
                await until(lambda: not sim.connections)
        finally:
            await asyncio.to_thread(runtime.close)

    run(scenario())

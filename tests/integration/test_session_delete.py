"""Deleting a session through the control plane with a LiveRuntime and a real hub: the session
stops first, the runtime and the hub forget it, its stream consumers end with 4410, and
the next session neither reuses its id nor inherits its status, events or gaps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from gateway.control import ControlPlane
from gateway.hub import Hub
from gateway.hub.protocol import CLOSE_SESSION_DELETED
from gateway.runtime import RuntimeRefusedError, SessionSpec, SessionState
from gateway.runtime.live import LiveRuntime
from gateway.sessions import HeartbeatConfig, ReconnectPolicy, SessionConfig
from gateway.simulator import SimConfig, Simulator
from gateway.store.models import SessionRow
from tests.api.conftest import make_settings
from tests.integration.test_sessions_helpers import run, until
from tests.integration.ws_upgrade import upgrade_response

TOPIC = "btcusdt@trade"


def quick(close_timeout_s: float) -> Callable[[SessionSpec], SessionConfig]:
    def make(spec: SessionSpec) -> SessionConfig:
        return SessionConfig.from_spec(
            spec,
            reconnect=ReconnectPolicy(initial_delay_s=0.02, max_delay_s=0.1),
            heartbeat=HeartbeatConfig(ping_interval_s=5.0, ping_timeout_s=10.0),
            close_timeout_s=close_timeout_s,
        )

    return make


@asynccontextmanager
async def gateway(
    tmp_path: Path, *, stop_timeout_s: float = 5.0, close_timeout_s: float = 1.0
) -> AsyncIterator[tuple[ControlPlane, LiveRuntime, Hub]]:
    hub = Hub()
    runtime = LiveRuntime(
        hub, hub=hub, session_config=quick(close_timeout_s), stop_timeout_s=stop_timeout_s
    )
    control = ControlPlane(
        make_settings(tmp_path, f"sqlite:///{tmp_path / 'state' / 'wsgw.db'}"), runtime=runtime
    )
    await asyncio.to_thread(control.start)
    try:
        yield control, runtime, hub
    finally:
        await asyncio.to_thread(control.shutdown)


@asynccontextmanager
async def simulated_gateway(
    tmp_path: Path,
) -> AsyncIterator[tuple[Simulator, ControlPlane, LiveRuntime, Hub]]:
    """The exchange simulator (100 messages/s) and a gateway to run sessions against it."""
    async with (
        Simulator(SimConfig(rate=100.0)) as sim,
        gateway(tmp_path) as (control, runtime, hub),
    ):
        yield sim, control, runtime, hub


def session_values(url: str, name: str, dialect: str = "binance") -> dict[str, Any]:
    return {"name": name, "url": url, "dialect": dialect, "transport": "kernel"}


def streaming(runtime: LiveRuntime, sid: int) -> Callable[[], bool]:
    def check() -> bool:
        status = runtime.session_status(sid)
        return status.state is SessionState.CONNECTED and (status.reason or "").startswith(
            "streaming"
        )

    return check


async def start_streaming(
    control: ControlPlane, runtime: LiveRuntime, url: str, name: str
) -> SessionRow:
    """A session on `url` subscribed to TOPIC, started, and streaming."""
    row = control.sessions.create(session_values(url, name))
    control.subscriptions.create({"session_id": row.id, "topics": [TOPIC], "consumer": "c"})
    await asyncio.to_thread(control.sessions.start, row.id)
    await until(streaming(runtime, row.id))
    return row


def test_deleting_a_running_session_stops_it_and_leaves_nothing_behind(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with simulated_gateway(tmp_path) as (sim, control, runtime, hub):
            url = sim.url("binance", "/stream")
            old = await start_streaming(control, runtime, url, "old")
            hub.publish_gap(old.id, 3, "reconnect: test")  # the hub now holds a last gap
            consumer = hub.subscribe(old.id, [TOPIC])
            await until(lambda: sim.sent("binance", TOPIC) > 0)

            await asyncio.to_thread(control.sessions.delete, old.id)  # running: stops first

            closed = await asyncio.wait_for(consumer.ended, 5)
            assert (closed.code, closed.kind) == (CLOSE_SESSION_DELETED, "deleted")
            assert closed.reason == f"session {old.id} was deleted"
            await until(lambda: not sim.connections)  # the upstream connection is gone
            assert hub.last_gap(old.id) is None
            assert old.id not in runtime.sessions_snapshot()
            status = runtime.session_status(old.id)
            assert (status.state, status.reason, status.topics) == (
                SessionState.STOPPED,
                "not started",
                (),
            )

            new = control.sessions.create(session_values(url, "new"))
            assert new.id > old.id
            assert runtime.session_status(new.id).reason == "not started"
            late = hub.subscribe(new.id)
            assert not late.queue  # no past gap of the deleted session
            events = control.sessions.events(new.id, 0, 100).items
            assert [e.kind for e in events] == ["created"]
            late.close()

    run(scenario())


async def _silent_ws_server() -> tuple[asyncio.Server, int]:
    """A WebSocket server that opens (RFC 6455 4.2.2) and then reads and ignores every
    frame: it never answers a close, so a client's closing handshake has to time out."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await upgrade_response(reader))
        try:
            while await reader.read(65536):
                pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_a_session_that_does_not_stop_in_time_is_not_deleted(tmp_path: Path) -> None:
    async def scenario() -> None:
        server, port = await _silent_ws_server()
        try:
            async with gateway(tmp_path, stop_timeout_s=0.3, close_timeout_s=2.0) as (
                control,
                runtime,
                _,
            ):
                row = control.sessions.create(
                    session_values(f"ws://127.0.0.1:{port}/", "stuck", "generic")
                )
                await asyncio.to_thread(control.sessions.start, row.id)
                await until(lambda: runtime.session_status(row.id).state is SessionState.CONNECTED)

                with pytest.raises(RuntimeRefusedError, match=r"did not stop within 0\.3 s"):
                    await asyncio.to_thread(control.sessions.delete, row.id)
                kept = control.sessions.get(row.id)  # the row stays, stopped
                assert kept.desired_state == "stopped"
                await until(lambda: runtime.session_status(row.id).state is SessionState.STOPPED)
                await asyncio.to_thread(control.sessions.delete, row.id)  # stopped: goes now
                assert runtime.session_status(row.id).reason == "not started"
        finally:
            server.close()

    run(scenario())


def test_a_session_whose_delete_failed_in_the_database_works_when_started_again(
    tmp_path: Path,
) -> None:
    """The runtime forgot the session, the row delete failed (a trigger refuses it: the
    database's own error, as a disk or a lock would give). The row is there, stopped.
    Started again, it subscribes its topics upstream, its messages reach the hub, its
    events reach the store and its streams are served, as for any session."""

    async def scenario() -> None:
        async with simulated_gateway(tmp_path) as (sim, control, runtime, hub):
            url = sim.url("binance", "/stream")
            row = await start_streaming(control, runtime, url, "survivor")
            with control.db.session() as s:
                s.execute(
                    text(
                        "CREATE TRIGGER refuse_delete BEFORE DELETE ON sessions "
                        "BEGIN SELECT RAISE(ABORT, 'the disk is on fire'); END"
                    )
                )
            with pytest.raises(Exception, match="the disk is on fire"):
                await asyncio.to_thread(control.sessions.delete, row.id)
            with control.db.session() as s:
                s.execute(text("DROP TRIGGER refuse_delete"))
            assert control.sessions.get(row.id).desired_state == "stopped"

            def states() -> int:  # the runtime's events, as the store records them
                items = control.sessions.events(row.id, 0, 1000).items
                return sum(e.kind == "state" for e in items)

            seen = states()
            await asyncio.to_thread(control.sessions.start, row.id)
            await until(streaming(runtime, row.id))
            consumer = hub.subscribe(row.id, [TOPIC])  # not refused as deleted (4410)
            await until(lambda: states() > seen)  # forwarded, not dropped as deleted
            events = await asyncio.wait_for(consumer.get(), 10)  # its topic, upstream again
            assert any(getattr(e, "topic", None) == TOPIC for e in events), events
            consumer.close()

    run(scenario())

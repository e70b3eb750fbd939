"""LiveRuntime without a network: what it refuses, the engine hook, held topics, close."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from gateway.runtime import (
    EngineState,
    EngineStatus,
    PortSpec,
    PortState,
    PortStatus,
    Runtime,
    RuntimeRefusedError,
    SessionSpec,
    SessionState,
)
from gateway.runtime_live import NO_ENGINE, LiveRuntime

PORT = PortSpec(1, "p0", "net_tap0", "10.9.0.2", "255.255.255.0", None, 1500)


def spec(transport: str = "kernel", **overrides: object) -> SessionSpec:
    values: dict[str, object] = {
        "id": 4,
        "name": "s4",
        "url": "ws://127.0.0.1:9/",
        "dialect": "generic",
        "transport": transport,
        "port_id": 1 if transport == "dpdk" else None,
    }
    values.update(overrides)
    return SessionSpec(**values)  # type: ignore[arg-type]


@pytest.fixture
def runtime() -> Iterator[LiveRuntime]:
    rt = LiveRuntime()
    try:
        yield rt
    finally:
        rt.close()
        assert not rt._thread.is_alive()


def test_it_is_a_runtime(runtime: LiveRuntime) -> None:
    assert isinstance(runtime, Runtime)
    status = runtime.engine_status()
    assert status.state is EngineState.RUNNING
    assert status.healthy
    assert "okx" in runtime.dialects()


def test_ports_need_the_engine(runtime: LiveRuntime) -> None:
    with pytest.raises(RuntimeRefusedError, match=NO_ENGINE):
        runtime.port_up(PORT)
    assert runtime.port_status(1).state is PortState.DOWN
    runtime.port_down(1)  # nothing is up: nothing to do


def test_dpdk_sessions_need_the_engine(runtime: LiveRuntime) -> None:
    with pytest.raises(RuntimeRefusedError, match="dpdk sessions need the engine"):
        runtime.start_session(spec("dpdk"))
    assert runtime.session_status(4).state is SessionState.STOPPED


@pytest.mark.parametrize(
    ("overrides", "match"),
    [({"dialect": "nasdaq"}, "unknown dialect"), ({"url": "http://x/"}, "ws://")],
)
def test_bad_sessions_are_refused(
    runtime: LiveRuntime, overrides: dict[str, object], match: str
) -> None:
    with pytest.raises(RuntimeRefusedError, match=match):
        runtime.start_session(spec("kernel", **overrides))


def test_topics_are_held_for_a_session_not_started(runtime: LiveRuntime) -> None:
    runtime.subscribe(9, ["a", "b"])
    runtime.subscribe(9, ["b", "c"])
    runtime.unsubscribe(9, ["a"])
    status = runtime.session_status(9)
    assert status.topics == ("b", "c")
    assert status.state is SessionState.STOPPED
    assert runtime.stop_session(9).state is SessionState.STOPPED  # not running: no-op


def test_the_engine_hook_takes_ports_and_dpdk_sessions() -> None:
    calls: list[str] = []

    class Hook:
        def status(self) -> EngineStatus:
            return EngineStatus(EngineState.RUNNING, "lcore 2", {"ports": 1})

        def port_up(self, port: PortSpec) -> PortStatus:
            calls.append(f"up {port.id}")
            return PortStatus(port.id, PortState.UP)

        def port_down(self, port_id: int) -> None:
            calls.append(f"down {port_id}")

        def port_status(self, port_id: int) -> PortStatus:
            return PortStatus(port_id, PortState.UP)

        def engine_for(self, port_id: int | None) -> object:
            calls.append(f"engine for {port_id}")
            raise RuntimeRefusedError(f"port {port_id} is not up")

        def loop_for(self, port_id: int | None) -> None:
            return None

        def close(self) -> None:
            calls.append("close")

    rt = LiveRuntime(engine_factory=Hook)
    try:
        assert rt.port_up(PORT).state is PortState.UP
        assert rt.port_status(1).state is PortState.UP
        assert rt.engine_status().reason == "lcore 2"
        with pytest.raises(RuntimeRefusedError, match="port 1 is not up"):
            rt.start_session(spec("dpdk"))
        rt.port_down(1)
    finally:
        rt.close()
    assert calls == ["up 1", "engine for 1", "down 1", "close"]


def test_close_is_final_and_idempotent() -> None:
    rt = LiveRuntime()
    rt.close()
    rt.close()
    assert rt.engine_status().state is EngineState.DETACHED
    with pytest.raises(RuntimeRefusedError, match="closed"):
        rt.start_session(spec())
    assert not [t for t in threading.enumerate() if t.name == "wsgw-sessions" and t.is_alive()]


def test_dpdk_sessions_run_on_the_loop_the_engine_names() -> None:
    """An engine that runs an event loop on its thread (`EngineHook.loop_for`) gets its
    port's dpdk sessions: their events come from that thread. Started again with the
    kernel transport, the session stops there and runs on the runtime's own loop; close
    stops the sessions on every loop."""
    import asyncio

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fake-engine-loop", daemon=True)
    thread.start()

    class Hook:
        def status(self) -> EngineStatus:
            return EngineStatus(EngineState.RUNNING, "fake", {})

        def port_up(self, port: PortSpec) -> PortStatus:
            return PortStatus(port.id, PortState.UP)

        def port_down(self, port_id: int) -> None:
            pass

        def port_status(self, port_id: int) -> PortStatus:
            return PortStatus(port_id, PortState.UP)

        def engine_for(self, port_id: int | None) -> object:
            return object()  # no stack behind it: every connect fails, with an event

        def loop_for(self, port_id: int | None) -> asyncio.AbstractEventLoop:
            return loop

        def close(self) -> None:
            loop.call_soon_threadsafe(loop.stop)

    events: list[tuple[str, str]] = []
    seen = threading.Condition()

    def record(event: object) -> None:
        with seen:
            events.append((threading.current_thread().name, getattr(event, "kind", "")))
            seen.notify_all()

    def wait_for_thread(name: str) -> None:
        with seen:
            assert seen.wait_for(lambda: any(t == name for t, _ in events), 10), events

    rt = LiveRuntime(engine_factory=Hook)
    rt.set_event_sink(record)
    try:
        rt.port_up(PORT)
        rt.start_session(spec("dpdk"))
        wait_for_thread("fake-engine-loop")
        assert 4 in rt.sessions_snapshot()  # taken on the engine's loop
        rt.stop_session(4)
        with seen:
            events.clear()
        rt.start_session(spec("kernel"))
        wait_for_thread("wsgw-sessions")
        with seen:
            late = [t for t, kind in events if t == "fake-engine-loop" and kind != "state"]
        assert late == []  # nothing but its stopping reports came from the old loop
        assert 4 in rt.sessions_snapshot()
    finally:
        rt.close()
        thread.join(5)
        loop.close()
    assert rt.session_status(4).state is SessionState.STOPPED

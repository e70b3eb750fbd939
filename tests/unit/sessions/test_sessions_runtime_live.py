"""LiveRuntime without a network: what it refuses, the engine hook, held topics, close."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from dataplane.loop import EngineLoopThread
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
from gateway.runtime.live import NO_ENGINE, LiveRuntime

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


class FakeEngine:
    """What EngineLoopThread needs of an engine: a loop factory (a plain asyncio loop)."""

    loop_factory = staticmethod(asyncio.new_event_loop)


class LoopHook:
    """An engine hook whose port runs an event loop on a thread of its own ("fake-engine"),
    as DpdkEngines does in engine.mode "loop"; port_down ends that loop."""

    def __init__(self) -> None:
        self.runner = EngineLoopThread(FakeEngine(), name="fake-engine")  # type: ignore[arg-type]
        self.runner.start()

    def status(self) -> EngineStatus:
        return EngineStatus(EngineState.RUNNING, "fake", {})

    def port_up(self, port: PortSpec) -> PortStatus:
        return PortStatus(port.id, PortState.UP)

    def port_down(self, port_id: int) -> None:
        self.runner.stop()

    def port_status(self, port_id: int) -> PortStatus:
        return PortStatus(port_id, PortState.UP)

    def engine_for(self, port_id: int | None) -> object:
        return object()

    def loop_for(self, port_id: int | None) -> asyncio.AbstractEventLoop:
        if not self.runner.alive:
            raise RuntimeRefusedError("port 1 is not up")
        return self.runner.loop

    def close(self) -> None:
        self.runner.stop()


class Born:
    """Every UpstreamSession made, with the thread it was made on; connecting never ends
    (a closing handshake can take a while: a session's stop is slow here too)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from gateway.sessions import session as module

        self.sessions: list[tuple[str, Any]] = []
        original_init, original_stop = module.UpstreamSession.__init__, module.UpstreamSession.stop
        born = self.sessions

        def init(session: Any, *args: Any, **kwargs: Any) -> None:
            original_init(session, *args, **kwargs)
            born.append((threading.current_thread().name, session))

        async def stop(session: Any, reason: str = "stop requested") -> None:
            await asyncio.sleep(0.2)
            await original_stop(session, reason)

        async def never(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(3600)

        monkeypatch.setattr(module.UpstreamSession, "__init__", init)
        monkeypatch.setattr(module.UpstreamSession, "stop", stop)
        monkeypatch.setattr(module, "connector_for", lambda config, engine: never)


def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.02)


def live_sessions(rt: LiveRuntime) -> float:
    return next(m.value for m in rt.metrics().metrics if m.name == "sessions_live")


@dataclass
class Looped:
    rt: LiveRuntime
    hook: LoopHook
    born: Born


@pytest.fixture
def looped(monkeypatch: pytest.MonkeyPatch) -> Iterator[Looped]:
    """A runtime whose port 1 is up on a LoopHook, sessions recorded by Born; closed after
    the test (a test may close it itself first: close is idempotent)."""
    born = Born(monkeypatch)
    hook = LoopHook()
    rt = LiveRuntime(engine_factory=lambda: hook)
    try:
        rt.port_up(PORT)
        yield Looped(rt, hook, born)
    finally:
        rt.close()


def test_dpdk_sessions_run_on_the_engines_loop(looped: Looped) -> None:
    """A port whose engine runs an event loop (`EngineHook.loop_for`) gets its dpdk
    sessions there; started again with the kernel transport, the session stops there and
    runs on the runtime's own loop; snapshots and close reach both."""
    rt = looped.rt
    born = looped.born
    rt.start_session(spec("dpdk"))
    wait_until(lambda: len(born.sessions) == 1)
    assert born.sessions[0][0] == "fake-engine"
    assert 4 in rt.sessions_snapshot()  # taken on the engine's loop
    rt.stop_session(4)
    rt.start_session(spec("kernel"))
    wait_until(lambda: len(born.sessions) == 2 and live_sessions(rt) == 1)
    assert born.sessions[1][0] == "wsgw-sessions"
    assert born.sessions[0][1].snapshot()["state"] == "stopped"
    assert rt.sessions_snapshot()[4]["state"] != "stopped"
    rt.close()
    assert [s.snapshot()["state"] for _, s in born.sessions] == ["stopped", "stopped"]
    assert rt.session_status(4).state is SessionState.STOPPED


def test_commands_run_in_the_order_made_whatever_loop_a_session_is_on(looped: Looped) -> None:
    """start, stop, start, stop (kernel), start (dpdk), in a burst, with slow closing
    handshakes: every earlier session object ends stopped, on the loop it was made on, and
    exactly one runs, on the engine's loop (none is left running untracked)."""
    rt = looped.rt
    born = looped.born
    rt.start_session(spec("kernel"))
    rt.stop_session(4)
    rt.start_session(spec("kernel"))
    rt.stop_session(4)
    rt.start_session(spec("dpdk"))
    wait_until(lambda: born.sessions and born.sessions[-1][0] == "fake-engine")
    time.sleep(0.5)  # anything still queued has run
    states = [(thread, s.snapshot()["state"]) for thread, s in born.sessions]
    assert states[-1][0] == "fake-engine" and states[-1][1] != "stopped"
    assert all(state == "stopped" for _, state in states[:-1]), states
    assert live_sessions(rt) == 1
    rt.close()
    assert all(s.snapshot()["state"] == "stopped" for _, s in born.sessions)


def test_a_port_going_down_fails_the_sessions_on_its_loop(looped: Looped) -> None:
    """The runtime used directly (the control plane refuses this while sessions run):
    the port's loop goes, its session is failed with the reason and forgotten; it starts
    again on the kernel transport and stops as usual."""
    rt = looped.rt
    born = looped.born
    rt.start_session(spec("dpdk"))
    wait_until(lambda: live_sessions(rt) == 1)
    rt.port_down(1)
    status = rt.session_status(4)
    assert status.state is SessionState.FAILED and "engine loop" in status.reason
    assert live_sessions(rt) == 0
    with pytest.raises(RuntimeRefusedError, match="not up"):
        rt.start_session(spec("dpdk"))
    rt.start_session(spec("kernel"))
    wait_until(lambda: live_sessions(rt) == 1)
    assert born.sessions[-1][0] == "wsgw-sessions"
    rt.stop_session(4)
    wait_until(lambda: rt.session_status(4).state is SessionState.STOPPED)


def test_a_start_that_breaks_fails_the_session_with_the_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug below (the connector raising here) fails the session with the error, not
    'starting' for ever; it starts again once fixed."""
    from gateway.sessions import session as module

    def broken(config: Any, engine: Any) -> Any:
        raise RuntimeError("boom in the connector")

    monkeypatch.setattr(module, "connector_for", broken)
    rt = LiveRuntime()
    try:
        rt.start_session(spec())
        wait_until(lambda: rt.session_status(4).state is SessionState.FAILED)
        assert "boom in the connector" in rt.session_status(4).reason
        assert live_sessions(rt) == 0
        monkeypatch.undo()
        Born(monkeypatch)
        assert rt.start_session(spec()).state is SessionState.CONNECTING
        wait_until(lambda: live_sessions(rt) == 1)
    finally:
        rt.close()


def test_an_engine_loop_that_dies_fails_its_sessions(looped: Looped) -> None:
    """The engine loop's thread ends without port_down (an error): the next status read
    reports the session failed, and metrics stop counting it."""
    rt = looped.rt
    rt.start_session(spec("dpdk"))
    wait_until(lambda: live_sessions(rt) == 1)
    looped.hook.runner.stop()
    status = rt.session_status(4)
    assert status.state is SessionState.FAILED and "engine loop" in status.reason
    assert live_sessions(rt) == 0


def test_a_port_going_down_leaves_the_session_that_replaced_it_alone(looped: Looped) -> None:
    """stop (slow handshake on the engine loop), start on the kernel transport queued
    behind it, then the port goes down: the kernel session is the one running and stops
    on request."""
    rt = looped.rt
    born = looped.born
    rt.start_session(spec("dpdk"))
    wait_until(lambda: live_sessions(rt) == 1)
    rt.stop_session(4)
    rt.start_session(spec("kernel"))
    rt.port_down(1)
    wait_until(lambda: born.sessions[-1][0] == "wsgw-sessions")
    assert rt.session_status(4).state is SessionState.CONNECTING
    assert live_sessions(rt) == 1
    rt.stop_session(4)
    wait_until(lambda: rt.session_status(4).state is SessionState.STOPPED)
    assert born.sessions[-1][1].snapshot()["state"] == "stopped"


def test_after_close_nothing_starts_and_snapshots_are_empty() -> None:
    rt = LiveRuntime()
    rt.close()
    with pytest.raises(RuntimeRefusedError, match="closed"):
        rt.start_session(spec())
    assert rt.session_status(4).reason == "not started"
    assert rt.sessions_snapshot() == {}

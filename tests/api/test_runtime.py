"""DetachedRuntime: records what it is asked and reports it honestly, inventing nothing."""

from __future__ import annotations

from gateway.runtime import (
    NOT_ATTACHED,
    DetachedRuntime,
    EngineState,
    PortSpec,
    Runtime,
    RuntimeEvent,
    SessionSpec,
    SessionState,
)


def test_it_is_a_runtime() -> None:
    assert isinstance(DetachedRuntime(), Runtime)


def test_reports_configured_with_the_reason_and_no_metrics() -> None:
    runtime = DetachedRuntime()
    events: list[RuntimeEvent] = []
    runtime.set_event_sink(events.append)
    assert runtime.engine_status().state is EngineState.DETACHED
    assert runtime.engine_status().healthy
    port = PortSpec(1, "p", "net_tap0", "198.18.0.2", "255.255.255.0", None, 1500)
    assert runtime.port_up(port).reason == NOT_ATTACHED
    session = SessionSpec(3, "s", "wss://x.example/", "generic", "dpdk", 1)
    runtime.subscribe(3, ["a", "b"])
    status = runtime.start_session(session)
    assert (status.state, status.reason, status.topics) == (
        SessionState.CONFIGURED,
        NOT_ATTACHED,
        ("a", "b"),
    )
    assert events[0].session_id == 3 and events[0].reason == NOT_ATTACHED
    assert runtime.metrics().metrics == ()
    runtime.unsubscribe(3, ["a"])
    assert runtime.topics == {3: ["b"]}
    runtime.close()
    assert runtime.closed and not runtime.sessions and not runtime.ports
    assert runtime.calls[-2:] == [("close", None), ("stop_session", 3)]

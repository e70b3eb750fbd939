"""The restart guarantee: a new control plane on the same database hands the runtime everything
that was open (enabled ports, topics, sessions wanted running), and nothing else."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from api.app import create_app
from gateway.control import ControlPlane
from gateway.runtime import DetachedRuntime, PortSpec, SessionSpec
from tests.api.conftest import BASE_URL, make_settings
from tests.host.fakesys import FakeHost


def test_restart_restores_what_was_open(tmp_path: Path, db_url: str, fake_host: FakeHost) -> None:
    settings = make_settings(tmp_path, db_url)
    first = DetachedRuntime()
    app = create_app(settings, first, host=fake_host.manager())
    with TestClient(app, base_url=BASE_URL) as client:
        _, secret = app.state.control.tokens.create("t", ["admin", "consume"])
        h = {"Authorization": f"Bearer {secret}"}

        def post(path: str, body: object = None) -> dict[str, object]:
            r = client.post(path, json=body, headers=h)
            assert r.status_code in (200, 201), r.text
            result: dict[str, object] = r.json()
            return result

        port = {"netmask": "255.255.255.0", "device": "net_tap0,iface=t0"}
        p1 = post("/v1/ports", {**port, "name": "up", "ipv4": "198.18.1.2"})
        p2 = post(
            "/v1/ports",
            {**port, "name": "off", "ipv4": "198.18.2.2", "device": "net_tap1", "enabled": False},
        )
        base = {"url": "wss://a.example/ws", "dialect": "generic"}
        running = post(
            "/v1/sessions", {**base, "name": "run", "transport": "dpdk", "port_id": p1["id"]}
        )
        kernel = post("/v1/sessions", {**base, "name": "krn", "transport": "kernel"})
        stopped = post("/v1/sessions", {**base, "name": "idle", "transport": "kernel"})
        was_stopped = post("/v1/sessions", {**base, "name": "was", "transport": "kernel"})
        for s in (running, kernel, was_stopped):
            post(f"/v1/sessions/{s['id']}/start")
        post(f"/v1/sessions/{was_stopped['id']}/stop")
        sub = {"consumer": "c"}
        post("/v1/subscriptions", {**sub, "session_id": running["id"], "topics": ["a", "b"]})
        post("/v1/subscriptions", {**sub, "session_id": running["id"], "topics": ["b", "c"]})
        post("/v1/subscriptions", {**sub, "session_id": stopped["id"], "topics": ["z"]})
    # Graceful shutdown: the runtime stopped the sessions, the wanted state stayed.
    assert first.closed
    assert not first.sessions

    second = DetachedRuntime()
    control = ControlPlane(settings, second)
    report = control.start()
    try:
        assert report.failures == []
        assert report.ports == [p1["id"]]
        assert sorted(report.sessions) == sorted([running["id"], kernel["id"]])
        assert [c[0] for c in second.calls] == [
            "port_up",
            "subscribe",
            "subscribe",
            "start_session",
            "start_session",
        ]
        assert isinstance(second.calls[0][1], PortSpec)
        assert second.calls[0][1].name == "up"
        assert p2["id"] not in second.ports
        assert second.topics == {running["id"]: ["a", "b", "c"], stopped["id"]: ["z"]}
        spec = second.sessions[running["id"]]
        assert isinstance(spec, SessionSpec)
        assert (spec.transport, spec.port_id, spec.url) == ("dpdk", p1["id"], "wss://a.example/ws")
        assert set(second.sessions) == {running["id"], kernel["id"]}
        control.events.flush()
        page = control.sessions.events(running["id"], 0, 1)
        assert page.items[0].kind in ("restored", "state")
    finally:
        control.shutdown()


def test_a_refusal_on_restore_is_recorded_and_the_rest_restores(
    tmp_path: Path, sqlite_url: str
) -> None:
    from gateway.runtime import RuntimeRefusedError, SessionStatus

    settings = make_settings(tmp_path, sqlite_url)
    control = ControlPlane(settings, DetachedRuntime())
    control.start()
    a = control.sessions.create(
        {"name": "a", "url": "ws://x.example", "dialect": "generic", "transport": "kernel"}
    )
    b = control.sessions.create(
        {"name": "b", "url": "ws://y.example", "dialect": "generic", "transport": "kernel"}
    )
    control.sessions.start(a.id)
    control.sessions.start(b.id)
    control.shutdown()

    class Picky(DetachedRuntime):
        def start_session(self, session: SessionSpec) -> SessionStatus:
            if session.name == "a":
                raise RuntimeRefusedError("no free lcore for session a")
            return super().start_session(session)

    runtime = Picky()
    control = ControlPlane(settings, runtime)
    report = control.start()
    try:
        assert report.sessions == [b.id]
        assert report.failures == [f"session {a.id}: no free lcore for session a"]
        events = control.sessions.events(a.id, 0, 10).items
        assert (events[0].kind, events[0].reason) == (
            "restore_failed",
            "no free lcore for session a",
        )
        assert control.sessions.get(a.id).desired_state == "running"  # still wanted
    finally:
        control.shutdown()

"""/v1/sessions: CRUD, validation, start/stop, the event log, what the runtime is asked."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trustme

from gateway.runtime import RuntimeRefusedError, SessionSpec
from tests.api.conftest import Api, messages

VALID = {
    "name": "binance-spot",
    "url": "wss://stream.example.com:9443/ws",
    "dialect": "binance",
    "transport": "kernel",
}


def test_crud(api: Api, make_port: Callable[..., dict[str, Any]]) -> None:
    port = make_port()
    body = {**VALID, "transport": "dpdk", "port_id": port["id"], "tls_server_name": "x.example"}
    r = api.client.post("/v1/sessions", json=body, headers=api.admin)
    assert r.status_code == 201, r.text
    session = r.json()
    assert session["desired_state"] == "stopped"
    assert session["status"]["state"] == "configured"
    assert session["status"]["reason"] == "dataplane not attached"
    assert session["heartbeat_interval_s"] == 15.0
    assert session["reconnect_max_attempts"] is None

    sid = session["id"]
    assert api.client.get(f"/v1/sessions/{sid}", headers=api.admin).json()["name"] == "binance-spot"
    listing = api.client.get("/v1/sessions", headers=api.admin).json()
    assert listing["count"] == 1

    r = api.client.patch(
        f"/v1/sessions/{sid}",
        json={"heartbeat_interval_s": 5, "heartbeat_timeout_s": 12, "reconnect_max_attempts": 3},
        headers=api.admin,
    )
    assert r.status_code == 200, r.text
    assert (r.json()["heartbeat_interval_s"], r.json()["reconnect_max_attempts"]) == (5.0, 3)

    assert api.client.delete(f"/v1/sessions/{sid}", headers=api.admin).status_code == 204
    r = api.client.get(f"/v1/sessions/{sid}", headers=api.admin)
    assert r.status_code == 404
    assert r.json() == {"detail": f"session {sid} not found"}


@pytest.mark.parametrize(
    ("changes", "status", "expected"),
    [
        ({"url": "http://stream.example.com/ws"}, 422, "must start with ws:// or wss://"),
        ({"url": "stream.example.com"}, 422, "must start with ws:// or wss://"),
        ({"url": "wss:///ws"}, 422, "has no host"),
        ({"dialect": "nasdaq-itch"}, 422, "unknown dialect 'nasdaq-itch'; known dialects: "),
        ({"transport": "udp"}, 422, "Input should be 'dpdk' or 'kernel'"),
        ({"transport": "dpdk"}, 422, "transport 'dpdk' needs port_id"),
        ({"port_id": 1}, 422, "transport 'kernel' uses the host's own sockets"),
        ({"transport": "dpdk", "port_id": 7}, 404, "port 7 not found"),
        ({"url": "ws://feed.example.com", "tls_ca_file": "/etc/ssl/ca.pem"}, 422, "only to wss://"),
        ({"tls_ca_file": "/nonexistent/ca.pem"}, 422, "is not a readable file"),
        ({"heartbeat_interval_s": 30, "heartbeat_timeout_s": 10}, 422, "must exceed"),
        ({"reconnect_initial_delay_s": 10, "reconnect_max_delay_s": 1}, 422, "is below"),
        ({"reconnect_jitter": 2}, 422, "less than or equal to 1"),
    ],
)
def test_validation(api: Api, changes: dict[str, Any], status: int, expected: str) -> None:
    r = api.client.post("/v1/sessions", json={**VALID, **changes}, headers=api.admin)
    assert r.status_code == status, r.text
    text = r.json()["detail"] if status == 404 else messages(r)
    assert expected in text, text


def test_tls_ca_file_that_exists_is_accepted(api: Api, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(ca))
    r = api.client.post("/v1/sessions", json={**VALID, "tls_ca_file": str(ca)}, headers=api.admin)
    assert r.status_code == 201, r.text


def test_tls_ca_file_that_does_not_load_is_refused(api: Api, tmp_path: Path) -> None:
    """A file that exists but is no PEM bundle would fail every connect: refused now."""
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    r = api.client.post("/v1/sessions", json={**VALID, "tls_ca_file": str(ca)}, headers=api.admin)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "tls_ca_file"]
    assert "TLS set-up failed" in r.json()["detail"][0]["msg"]


def test_start_stop_and_events(api: Api, make_session: Callable[..., dict[str, Any]]) -> None:
    sid = make_session()["id"]
    r = api.client.post(f"/v1/sessions/{sid}/start", headers=api.admin)
    assert r.status_code == 200, r.text
    assert r.json()["desired_state"] == "running"
    assert r.json()["status"]["state"] == "configured"
    assert r.json()["status"]["reason"] == "dataplane not attached"
    assert isinstance(api.runtime.sessions[sid], SessionSpec)

    r = api.client.post(f"/v1/sessions/{sid}/stop", headers=api.admin)
    assert r.json()["desired_state"] == "stopped"
    assert sid not in api.runtime.sessions

    events = api.client.get(f"/v1/sessions/{sid}/events", headers=api.admin).json()
    kinds = [e["kind"] for e in events["data"]]
    # Newest first; the runtime's own reports ("state") sit beside the operator's requests.
    assert kinds[0] in ("state", "stop_requested")
    assert kinds[-1] == "created"
    assert {"created", "start_requested", "stop_requested", "state"} <= set(kinds)
    assert events["count"] == len(kinds)
    page = api.client.get(f"/v1/sessions/{sid}/events?limit=1&offset=1", headers=api.admin)
    assert page.json()["data"][0]["id"] == events["data"][1]["id"]

    r = api.client.get("/v1/sessions/999/events", headers=api.admin)
    assert r.status_code == 404
    assert r.json() == {"detail": "session 999 not found"}


def test_running_session_rules(
    api: Api,
    make_port: Callable[..., dict[str, Any]],
    make_session: Callable[..., dict[str, Any]],
) -> None:
    port = make_port(enabled=False)
    sid = make_session(transport="dpdk", port_id=port["id"])["id"]
    r = api.client.post(f"/v1/sessions/{sid}/start", headers=api.admin)
    assert r.status_code == 409
    assert f"port {port['id']} ({port['name']}) is disabled" in r.json()["detail"]

    api.client.patch(f"/v1/ports/{port['id']}", json={"enabled": True}, headers=api.admin)
    assert api.client.post(f"/v1/sessions/{sid}/start", headers=api.admin).status_code == 200
    r = api.client.patch(
        f"/v1/sessions/{sid}", json={"url": "wss://other.example.com/"}, headers=api.admin
    )
    assert r.status_code == 409
    assert r.json()["detail"] == (
        f"session {sid} is running: stop it (POST /v1/sessions/{sid}/stop) before changing url"
    )
    r = api.client.patch(f"/v1/sessions/{sid}", json={"name": "renamed"}, headers=api.admin)
    assert r.status_code == 200


def test_deleting_a_running_session_stops_it_first_and_its_id_is_never_reused(
    api: Api, make_session: Callable[..., dict[str, Any]]
) -> None:
    sid = make_session(name="old")["id"]
    r = api.client.post(
        "/v1/subscriptions",
        json={"session_id": sid, "topics": ["a"], "consumer": "c"},
        headers=api.both,
    )
    assert r.status_code == 201, r.text
    assert api.client.post(f"/v1/sessions/{sid}/start", headers=api.admin).status_code == 200
    del api.runtime.calls[:]

    assert api.client.delete(f"/v1/sessions/{sid}", headers=api.admin).status_code == 204
    assert api.runtime.calls == [("stop_session", sid), ("remove_session", sid)]
    assert sid not in api.runtime.topics
    assert api.client.get(f"/v1/sessions/{sid}", headers=api.admin).status_code == 404
    listing = api.client.get(f"/v1/subscriptions?session_id={sid}", headers=api.both).json()
    assert listing["count"] == 0

    new = make_session(name="old")  # the same name is free again, the id is not
    assert new["id"] > sid
    events = api.client.get(f"/v1/sessions/{new['id']}/events", headers=api.admin).json()
    assert [e["kind"] for e in events["data"]] == ["created"]


def test_a_delete_the_runtime_cannot_finish_in_time_is_a_409_and_keeps_the_row(
    api: Api, make_session: Callable[..., dict[str, Any]]
) -> None:
    sid = make_session()["id"]
    assert api.client.post(f"/v1/sessions/{sid}/start", headers=api.admin).status_code == 200

    def slow(session_id: int) -> None:
        raise RuntimeRefusedError(f"session {session_id} did not stop within 5 s")

    api.runtime.remove_session = slow  # type: ignore[method-assign]
    r = api.client.delete(f"/v1/sessions/{sid}", headers=api.admin)
    assert r.status_code == 409
    assert r.json()["detail"] == f"the dataplane refused: session {sid} did not stop within 5 s"
    row = api.client.get(f"/v1/sessions/{sid}", headers=api.admin).json()
    assert row["desired_state"] == "stopped"  # asked to stop, still there


def test_names_are_unique(api: Api, make_session: Callable[..., dict[str, Any]]) -> None:
    first = make_session(name="feed")
    r = api.client.post("/v1/sessions", json={**VALID, "name": "feed"}, headers=api.admin)
    assert r.status_code == 409
    assert r.json()["detail"] == f"session name 'feed' is taken by session {first['id']}"


def test_dialects(api: Api) -> None:
    r = api.client.get("/v1/sessions/dialects", headers=api.admin)
    assert "generic" in r.json()["data"]


def test_a_consume_token_lists_the_sessions_it_may_subscribe_to(
    api: Api, make_session: Callable[..., dict[str, object]]
) -> None:
    made = make_session()
    r = api.client.get("/v1/sessions", headers=api.consume)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["count"] == 1
    assert body["data"] == [
        {
            "id": made["id"],
            "name": made["name"],
            "dialect": "generic",
            "state": "configured",
            "topics": [],
        }
    ]
    # an admin still gets the whole session; one session's detail stays admin-only
    full = api.client.get("/v1/sessions", headers=api.admin).json()["data"][0]
    assert full["url"] == made["url"] and "transport" in full
    assert api.client.get(f"/v1/sessions/{made['id']}", headers=api.consume).status_code == 403

"""/v1/groups (issue #19): validation at the door (422 naming the field), persistence, and the
restart guarantee (a new control plane runs the stored groups again)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from dataplane.arbiter import MAX_LEGS
from gateway.control.groups import MAX_LEGS as CONTROL_MAX_LEGS
from gateway.groups.feed import group_hub_id
from gateway.runtime.live import LiveRuntime
from gateway.sessions.sink import RecordingSink
from tests.api.conftest import BASE_URL, Api, make_settings
from tests.host.fakesys import FakeHost

MakeSession = Callable[..., dict[str, object]]


def test_the_control_plane_s_leg_limit_is_the_arbiter_s() -> None:
    assert CONTROL_MAX_LEGS == MAX_LEGS


def test_create_get_list_patch_delete(api: Api, make_session: MakeSession) -> None:
    a, b, c = make_session(), make_session(), make_session()
    r = api.client.post(
        "/v1/groups", json={"name": "btc", "legs": [a["id"], b["id"]]}, headers=api.admin
    )
    assert r.status_code == 201, r.text
    group = r.json()
    assert group["legs"] == [a["id"], b["id"]]
    assert group["hold_ms"] == 20
    assert group["hub_id"] == group_hub_id(group["id"])
    assert group["figures"] is None  # a DetachedRuntime runs no groups
    got = api.client.get(f"/v1/groups/{group['id']}", headers=api.admin).json()
    assert got["name"] == "btc"
    listed = api.client.get("/v1/groups", headers=api.admin).json()
    assert listed["count"] == 1 and listed["data"][0]["id"] == group["id"]

    r = api.client.patch(
        f"/v1/groups/{group['id']}",
        json={"legs": [c["id"], a["id"]], "hold_ms": 5},
        headers=api.admin,
    )
    assert r.status_code == 200, r.text
    assert r.json()["legs"] == [c["id"], a["id"]] and r.json()["hold_ms"] == 5
    # b left the group: another group may take it now.
    d = make_session()
    r = api.client.post(
        "/v1/groups", json={"name": "eth", "legs": [b["id"], d["id"]]}, headers=api.admin
    )
    assert r.status_code == 201, r.text

    assert api.client.delete(f"/v1/groups/{group['id']}", headers=api.admin).status_code == 204
    assert api.client.get(f"/v1/groups/{group['id']}", headers=api.admin).status_code == 404


@pytest.mark.parametrize(
    ("legs", "says"),
    [
        (lambda ids: [ids[0]], "at least 2"),
        (lambda ids: [ids[0], ids[0]], "once"),
        (lambda ids: [ids[0], 999_999], "session 999999 not found"),
        (lambda ids: [ids[0], ids[2]], "one dialect"),
        (lambda ids: [ids[1], ids[3]], "is a leg of group"),
    ],
)
def test_legs_are_checked_at_the_door(
    api: Api,
    make_session: MakeSession,
    legs: Callable[[list[int]], list[int]],
    says: str,
) -> None:
    ids = [
        int(make_session()["id"]),  # type: ignore[call-overload]
        int(make_session()["id"]),  # type: ignore[call-overload]
        int(make_session(dialect="binance")["id"]),  # type: ignore[call-overload]
        int(make_session()["id"]),  # type: ignore[call-overload]
    ]
    taken = {"name": "first", "legs": [ids[0], ids[1]]}
    assert api.client.post("/v1/groups", json=taken, headers=api.admin).status_code == 201
    if says != "is a leg of group":  # free the first two again
        first = api.client.get("/v1/groups", headers=api.admin).json()["data"][0]["id"]
        api.client.delete(f"/v1/groups/{first}", headers=api.admin)
    r = api.client.post("/v1/groups", json={"name": "g", "legs": legs(ids)}, headers=api.admin)
    assert r.status_code == 422, r.text
    body = r.json()
    assert says in str(body)
    assert "legs" in str(body)


def test_a_name_is_taken_once_and_patch_checks_too(api: Api, make_session: MakeSession) -> None:
    a, b, c = make_session(), make_session(), make_session(dialect="binance")
    body = {"name": "same", "legs": [a["id"], b["id"]]}
    created = api.client.post("/v1/groups", json=body, headers=api.admin).json()
    assert api.client.post("/v1/groups", json=body, headers=api.admin).status_code == 409
    r = api.client.patch(
        f"/v1/groups/{created['id']}", json={"legs": [a["id"], c["id"]]}, headers=api.admin
    )
    assert r.status_code == 422 and "dialect" in r.text
    r = api.client.patch(f"/v1/groups/{created['id']}", json={"hold_ms": -1}, headers=api.admin)
    assert r.status_code == 422


def test_a_deleted_session_leaves_its_group(api: Api, make_session: MakeSession) -> None:
    a, b, c = make_session(), make_session(), make_session()
    body = {"name": "g", "legs": [a["id"], b["id"], c["id"]]}
    group = api.client.post("/v1/groups", json=body, headers=api.admin).json()
    assert api.client.delete(f"/v1/sessions/{c['id']}", headers=api.admin).status_code == 204
    got = api.client.get(f"/v1/groups/{group['id']}", headers=api.admin).json()
    assert got["legs"] == [a["id"], b["id"]]


def test_groups_are_restored_at_start(tmp_path: Path, db_url: str, fake_host: FakeHost) -> None:
    """A restart of the control plane: the stored group runs again in the new runtime, with
    its figures in GET /v1/groups/{id}."""
    settings = make_settings(tmp_path, db_url)

    def client_of(runtime: LiveRuntime) -> TestClient:
        app = create_app(settings, runtime, host=fake_host.manager())
        return TestClient(app, base_url=BASE_URL)

    first = LiveRuntime(RecordingSink())
    with client_of(first) as client:
        _, secret = client.app.state.control.tokens.create("t", ["admin"])  # type: ignore[attr-defined]
        h = {"Authorization": f"Bearer {secret}"}
        legs = []
        for name in ("a", "b"):
            body = {"name": name, "url": "ws://127.0.0.1:9/ws", "dialect": "binance"}
            r = client.post("/v1/sessions", json={**body, "transport": "kernel"}, headers=h)
            legs.append(r.json()["id"])
        r = client.post("/v1/groups", json={"name": "g", "legs": legs}, headers=h)
        assert r.status_code == 201, r.text
        group = r.json()
        assert group["figures"]["legs"][0]["session_id"] == legs[0]
    second = LiveRuntime(RecordingSink())
    with client_of(second) as client:
        _, secret = client.app.state.control.tokens.create("t2", ["admin"])  # type: ignore[attr-defined]
        h = {"Authorization": f"Bearer {secret}"}
        got = client.get(f"/v1/groups/{group['id']}", headers=h).json()
        assert got["legs"] == legs
        figures = got["figures"]
        assert figures is not None, "the restored group runs in the new runtime"
        assert [leg["session_id"] for leg in figures["legs"]] == legs
        assert figures["hub_id"] == group_hub_id(group["id"])

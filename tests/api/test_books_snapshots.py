"""PUT/GET/DELETE /v1/books/{session}/snapshots (issue #21): a session's periodic book
snapshots, validated (a 422 names the field out of range), admin-scoped, kept by the
gateway's BookManager. What the snapshots carry is tested against the real simulator in
tests/integration/test_books_snapshots.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from api.app import create_app
from gateway.books.manager import SnapshotPolicy
from gateway.runtime import DetachedRuntime
from tests.api.conftest import BASE_URL, Api, make_settings
from tests.host.fakesys import FakeHost


def path(session_id: object) -> str:
    return f"/v1/books/{session_id}/snapshots"


def test_set_read_and_stop(api: Api, make_session: Callable[..., dict[str, Any]]) -> None:
    sid = make_session(dialect="binance")["id"]
    r = api.client.get(path(sid), headers=api.admin)
    assert r.status_code == 200, r.text
    assert (r.json()["interval_ms"], r.json()["depth"]) == (None, None)

    r = api.client.put(path(sid), json={"interval_ms": 500, "depth": 100}, headers=api.admin)
    assert r.status_code == 200, r.text
    assert (r.json()["interval_ms"], r.json()["depth"]) == (500, 100)
    assert api.control.books.snapshot_policy(sid) == SnapshotPolicy(0.5, 100)
    r = api.client.put(path(sid), json={"interval_ms": 1000}, headers=api.admin)
    assert (r.json()["interval_ms"], r.json()["depth"]) == (1000, None)  # the whole book

    assert api.client.delete(path(sid), headers=api.admin).status_code == 204
    assert api.control.books.snapshot_policy(sid) is None
    assert api.client.get(path(sid), headers=api.admin).json()["interval_ms"] is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"interval_ms": 99}, "interval_ms"),
        ({"interval_ms": 3_600_001}, "interval_ms"),
        ({"interval_ms": 0}, "interval_ms"),
        ({"interval_ms": True}, "interval_ms"),
        ({"interval_ms": 1000, "depth": 0}, "depth"),
        ({"interval_ms": 1000, "depth": 5001}, "depth"),
        ({"depth": 10}, "interval_ms"),  # required
        ({"interval_ms": 1000, "every": 1}, "every"),  # unknown fields are errors
    ],
)
def test_out_of_range_is_a_422_naming_the_field(
    api: Api, make_session: Callable[..., dict[str, Any]], body: dict[str, Any], field: str
) -> None:
    sid = make_session(dialect="binance")["id"]
    r = api.client.put(path(sid), json=body, headers=api.admin)
    assert r.status_code == 422, r.text
    assert [e["loc"] for e in r.json()["detail"]] == [["body", field]]
    assert api.control.books.snapshot_policy(sid) is None


def test_unknown_session_and_scope(api: Api, make_session: Callable[..., dict[str, Any]]) -> None:
    r = api.client.put(path(999), json={"interval_ms": 1000}, headers=api.admin)
    assert r.status_code == 404
    sid = make_session(dialect="okx")["id"]
    # It changes what every consumer of the session gets: a consume token may not set it.
    r = api.client.put(path(sid), json={"interval_ms": 1000}, headers=api.consume)
    assert r.status_code == 403
    # ... and "snapshots" is not taken for a symbol by the book route.
    assert api.client.get(f"/v1/books/{sid}/BTC-USDT", headers=api.consume).status_code == 404


def test_a_deleted_sessions_setting_goes(
    api: Api, make_session: Callable[..., dict[str, Any]]
) -> None:
    sid = make_session(dialect="okx")["id"]
    api.client.put(path(sid), json={"interval_ms": 1000}, headers=api.admin)
    assert api.client.delete(f"/v1/sessions/{sid}", headers=api.admin).status_code == 204
    assert api.control.books.snapshot_policy(sid) is None


def test_the_gateways_default_and_a_sessions_own(
    tmp_path: Path, sqlite_url: str, fake_host: FakeHost
) -> None:
    """books.periodic_interval_ms / periodic_depth: every session's, unless set for one;
    DELETE goes back to it."""
    settings = make_settings(
        tmp_path, sqlite_url, books={"periodic_interval_ms": 2000, "periodic_depth": 50}
    )
    app = create_app(settings, DetachedRuntime(), host=fake_host.manager())
    with TestClient(app, client=("127.0.0.1", 50000), base_url=BASE_URL) as client:
        _, secret = app.state.control.tokens.create("admin", ["admin"])
        admin = {"Authorization": f"Bearer {secret}"}
        body = {"name": "s", "url": "wss://x.example/", "dialect": "okx", "transport": "kernel"}
        sid = client.post("/v1/sessions", json=body, headers=admin).json()["id"]

        def got() -> tuple[Any, Any, Any]:
            answer = client.get(path(sid), headers=admin).json()
            return answer["interval_ms"], answer["depth"], answer["default"]

        assert got() == (2000, 50, True)
        client.put(path(sid), json={"interval_ms": 300}, headers=admin)
        assert got() == (300, None, False)
        assert client.delete(path(sid), headers=admin).status_code == 204
        assert got() == (2000, 50, True)


@pytest.mark.parametrize(
    ("books", "field"),
    [
        ({"periodic_interval_ms": 99}, "periodic_interval_ms"),
        ({"periodic_depth": 0}, "periodic_depth"),
    ],
)
def test_a_bad_default_stops_the_start_naming_it(
    tmp_path: Path, books: dict[str, int], field: str
) -> None:
    with pytest.raises(ValidationError, match=field):
        make_settings(tmp_path, "sqlite://", books=books)


def test_a_sessions_setting_survives_a_restart(
    tmp_path: Path, db_url: str, fake_host: FakeHost
) -> None:
    """The control plane restarted on the same database (SQLite file, PostgreSQL) hands the
    stored settings back to its books; a DELETE and a deleted session remove them for good."""
    settings = make_settings(tmp_path, db_url)
    body = {"name": "s", "url": "wss://x.example/", "dialect": "okx", "transport": "kernel"}

    def started() -> tuple[TestClient, dict[str, str]]:
        app = create_app(settings, DetachedRuntime(), host=fake_host.manager())
        client = TestClient(app, client=("127.0.0.1", 50000), base_url=BASE_URL)
        client.__enter__()
        _, secret = app.state.control.tokens.create("admin", ["admin"])
        return client, {"Authorization": f"Bearer {secret}"}

    client, admin = started()
    with client:
        kept, cleared, deleted = (
            client.post("/v1/sessions", json={**body, "name": n}, headers=admin).json()["id"]
            for n in ("kept", "cleared", "deleted")
        )
        for sid in (kept, cleared, deleted):
            r = client.put(path(sid), json={"interval_ms": 500, "depth": 20}, headers=admin)
            assert r.status_code == 200, r.text
        client.put(path(kept), json={"interval_ms": 750, "depth": 40}, headers=admin)  # changed
        assert client.delete(path(cleared), headers=admin).status_code == 204
        assert client.delete(f"/v1/sessions/{deleted}", headers=admin).status_code == 204

    client, admin = started()
    with client:
        books = client.app.state.control.books  # type: ignore[attr-defined]
        assert books.snapshot_policy(kept) == SnapshotPolicy(0.75, 40)
        assert books.snapshot_policy(cleared) is None
        assert books.snapshot_policy(deleted) is None
        answer = client.get(path(kept), headers=admin).json()
        assert (answer["interval_ms"], answer["depth"], answer["default"]) == (750, 40, False)
        assert client.get(path(cleared), headers=admin).json()["default"] is True

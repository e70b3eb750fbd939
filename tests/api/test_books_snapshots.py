"""PUT/GET/DELETE /v1/books/{session}/snapshots (issue #21): a session's periodic book
snapshots, validated (a 422 names the field out of range), admin-scoped, kept by the
gateway's BookManager. What the snapshots carry is tested against the real simulator in
tests/integration/test_books_snapshots.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gateway.books.manager import SnapshotPolicy
from tests.api.conftest import Api


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

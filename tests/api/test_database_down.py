"""A database that cannot answer is 503 with a clear message on every endpoint that needs
it, never 500: PostgreSQL really stopped under the app, a SQLite file locked by another
writer. The app serves again once the database is back (SQLite); /metrics answers through
the outage with wsgw_database_up 0."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from gateway.runtime import DetachedRuntime
from tests.api.conftest import BASE_URL, PgServer, make_settings, pg_cluster
from tests.host.fakesys import FakeHost

PORT = {"name": "p", "device": "net_tap0", "ipv4": "198.18.0.2", "netmask": "255.255.255.0"}
SESSION = {"name": "s", "url": "ws://a.example/", "dialect": "generic", "transport": "kernel"}
#: Every route that reads or writes the database, with a body the schema accepts.
ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/v1/ports", None),
    ("GET", "/v1/ports/1", None),
    ("POST", "/v1/ports", {**PORT, "name": "q", "device": "net_tap1"}),
    ("PATCH", "/v1/ports/1", {"mtu": 1400}),
    ("DELETE", "/v1/ports/1", None),
    ("GET", "/v1/sessions", None),
    ("GET", "/v1/sessions/1", None),
    ("POST", "/v1/sessions", {**SESSION, "name": "t"}),
    ("PATCH", "/v1/sessions/1", {"heartbeat_interval_s": 5}),
    ("DELETE", "/v1/sessions/1", None),
    ("POST", "/v1/sessions/1/start", None),
    ("POST", "/v1/sessions/1/stop", None),
    ("GET", "/v1/sessions/1/events", None),
    ("GET", "/v1/subscriptions", None),
    ("GET", "/v1/subscriptions/1", None),
    ("POST", "/v1/subscriptions", {"session_id": 1, "topics": ["u"], "consumer": "c"}),
    ("PATCH", "/v1/subscriptions/1", {"topics": ["v"]}),
    ("DELETE", "/v1/subscriptions/1", None),
    ("GET", "/v1/tokens", None),
    ("GET", "/v1/tokens/1", None),
    ("POST", "/v1/tokens", {"name": "n", "scopes": ["admin"]}),
    ("DELETE", "/v1/tokens/1", None),
]


@pytest.fixture
def own_pg() -> Iterator[PgServer]:
    """A cluster of this test's own: it is stopped mid-test, the shared one must not be."""
    with pg_cluster() as server:
        yield server


def _client(tmp_path: Path, url: str, auth: str) -> TestClient:
    settings = make_settings(tmp_path / auth, url, auth={"mode": auth})
    host = FakeHost(tmp_path / auth / "host")
    app = create_app(settings, DetachedRuntime(), host=host.manager())
    return TestClient(app, client=("127.0.0.1", 50000), base_url=BASE_URL)


def _populate(client: TestClient, headers: dict[str, str]) -> None:
    for path, body in [
        ("/v1/ports", PORT),
        ("/v1/sessions", SESSION),
        ("/v1/subscriptions", {"session_id": 1, "topics": ["t"], "consumer": "c"}),
    ]:
        r = client.post(path, json=body, headers=headers)
        assert r.status_code == 201, r.text


def _assert_unavailable(r: Any, what: str) -> None:
    assert r.status_code == 503, f"{what}: {r.status_code} {r.text}"
    assert "database is unavailable: retry later" in r.json()["detail"], what


def test_postgresql_stopped_is_503_everywhere(own_pg: PgServer, tmp_path: Path) -> None:
    own_pg.execute("CREATE DATABASE wsgw")
    url = own_pg.url("wsgw")
    # auth none: each request reaches its route; auth token: the token check needs the
    # database first, and an outage must not pass for a bad token (401).
    with _client(tmp_path, url, "none") as open_client, _client(tmp_path, url, "token") as client:
        _, secret = client.app.state.control.tokens.create("t", ["admin", "consume"])  # type: ignore[attr-defined]
        bearer = {"Authorization": f"Bearer {secret}"}
        _populate(open_client, {})
        own_pg.stop()
        for method, path, body in ROUTES:
            _assert_unavailable(open_client.request(method, path, json=body), f"{method} {path}")
        r = client.get("/v1/ports", headers=bearer)
        _assert_unavailable(r, "token check")
        # The scrape still shows the dataplane, and the outage as a sample.
        r = open_client.get("/metrics")
        assert r.status_code == 200, r.text
        assert "wsgw_database_up 0.0" in r.text
        assert "wsgw_engine_state" in r.text


def test_sqlite_locked_by_another_writer_is_503_then_serves(tmp_path: Path) -> None:
    """busy_timeout (5 s) runs out while another process holds the write lock: 503 says
    so; reads go on (WAL), and writes work again once the lock is released."""
    path = tmp_path / "state" / "wsgw.db"
    with _client(tmp_path, f"sqlite:///{path}", "none") as client:
        _populate(client, {})
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN EXCLUSIVE")
            r = client.post("/v1/ports", json={**PORT, "name": "q", "device": "net_tap1"})
            assert r.status_code == 503, r.text
            assert "database is busy (locked by another writer): retry later" in r.text
            assert client.get("/v1/ports").json()["count"] == 1
        finally:
            other.rollback()
            other.close()
        r = client.post("/v1/ports", json={**PORT, "name": "q", "device": "net_tap1"})
        assert r.status_code == 201, r.text

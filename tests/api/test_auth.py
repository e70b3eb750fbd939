"""Scopes on every route, read from the app itself: no token -> 401, wrong scope -> 403.

The expected scope comes from this table, not from the code under test, so a route added
without a guard (or with the wrong one) fails here.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.app import create_app
from api.auth import UnsafeSettingsError
from gateway.runtime import DetachedRuntime
from tests.api.conftest import BASE_URL, Api, make_settings
from tests.host.fakesys import FakeHost

PUBLIC = {"/healthz", "/readyz", "/metrics"}
#: Operations either scope may call, each answering with what that scope may see.
EITHER_SCOPE = {("GET", "/v1/sessions")}
SCOPE_BY_PREFIX = [
    ("/v1/books/{session_id}/snapshots", "admin"),  # before /v1/books: first match wins
    ("/v1/books", "consume"),
    ("/v1/consumers", "admin"),
    ("/v1/engine", "admin"),
    ("/v1/fleet", "admin"),
    ("/v1/history", "admin"),
    ("/v1/host", "admin"),
    ("/v1/groups", "admin"),
    ("/v1/ports", "admin"),
    ("/v1/sessions", "admin"),
    ("/v1/tokens", "admin"),
    ("/v1/subscriptions", "consume"),
]


def expected_scope(path: str) -> str:
    for prefix, scope in SCOPE_BY_PREFIX:
        if path.startswith(prefix):
            return scope
    raise AssertionError(f"route {path} is in no scope table: add it to SCOPE_BY_PREFIX")


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", lambda m: "0000:03:00.0" if m.group(0) == "{pci}" else "1", path)


def http_routes(app: FastAPI) -> list[tuple[str, str]]:
    """Every HTTP operation of the app, from the app's own OpenAPI document (which FastAPI
    builds from all routes, those of included routers too)."""
    paths = app.openapi()["paths"]
    return [(method.upper(), path) for path, ops in paths.items() for method in ops]


def test_every_route_is_public_or_scoped(api: Api) -> None:
    routes = http_routes(api.app)
    assert len(routes) > 25
    wrong = {"admin": api.consume, "consume": api.admin}
    checked = 0
    for method, path in routes:
        if path in PUBLIC:
            continue
        scope = expected_scope(path)
        url = concrete(path)
        r = api.client.request(method, url)
        assert r.status_code == 401, f"{method} {path} without a token: {r.status_code}"
        assert r.headers.get("www-authenticate") == "Bearer"
        if (method, path) in EITHER_SCOPE:
            assert api.client.request(method, url, headers=api.consume).status_code == 200
            checked += 1
            continue
        r = api.client.request(method, url, headers=wrong[scope])
        assert r.status_code == 403, f"{method} {path} with the wrong scope: {r.status_code}"
        assert f"needs the '{scope}' scope" in r.json()["detail"]
        checked += 1
    assert checked == len([r for r in routes if r[1] not in PUBLIC])


def test_public_routes_need_no_token(api: Api) -> None:
    assert api.client.get("/healthz").status_code == 200
    assert api.client.get("/readyz").status_code == 200
    assert api.client.get("/metrics").status_code == 200


def test_metrics_can_require_admin(tmp_path: Path, sqlite_url: str, fake_host: FakeHost) -> None:
    settings = make_settings(tmp_path, sqlite_url, auth={"public_metrics": False})
    with TestClient(create_app(settings, host=fake_host.manager()), base_url=BASE_URL) as client:
        assert client.get("/metrics").status_code == 401


def test_no_auth_mode_serves_loopback_only(
    tmp_path: Path, sqlite_url: str, fake_host: FakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(tmp_path, sqlite_url, auth={"mode": "none"})
    with caplog.at_level(logging.WARNING, "wsgw.api.auth"):
        app = create_app(settings, DetachedRuntime(), host=fake_host.manager())
    assert "AUTHENTICATION IS OFF" in caplog.text
    with TestClient(app, client=("127.0.0.1", 4000), base_url=BASE_URL) as client:
        assert client.get("/v1/ports").status_code == 200
        assert client.get("/v1/subscriptions").status_code == 200
    with TestClient(app, client=("192.0.2.9", 4000), base_url=BASE_URL) as client:
        r = client.get("/v1/ports")
        assert r.status_code == 403
        assert "only loopback clients" in r.json()["detail"]


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.2", "::"])
def test_no_auth_mode_refuses_a_non_loopback_bind(
    tmp_path: Path, sqlite_url: str, host: str
) -> None:
    settings = make_settings(tmp_path, sqlite_url, auth={"mode": "none"}, api={"host": host})
    with pytest.raises(UnsafeSettingsError, match="may only bind to a loopback address"):
        create_app(settings)


def test_cors(tmp_path: Path, sqlite_url: str, fake_host: FakeHost) -> None:
    settings = make_settings(tmp_path, sqlite_url, api={"cors_origins": ["https://ops.example"]})
    with TestClient(create_app(settings, host=fake_host.manager()), base_url=BASE_URL) as client:
        r = client.options(
            "/v1/ports",
            headers={"Origin": "https://ops.example", "Access-Control-Request-Method": "GET"},
        )
        assert r.headers["access-control-allow-origin"] == "https://ops.example"
        r = client.get("/healthz", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in r.headers


def test_wildcard_cors_with_credentials_is_refused(tmp_path: Path, sqlite_url: str) -> None:
    with pytest.raises(ValueError, match="list the origins instead"):
        make_settings(
            tmp_path, sqlite_url, api={"cors_origins": ["*"], "cors_allow_credentials": True}
        )

"""The dashboard's routes without a browser: files, types, CSP, refusals, config, whoami."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from api.routes import dashboard
from gateway.runtime import DetachedRuntime
from tests.api.conftest import BASE_URL
from tests.browser.conftest import build_app, dashboard_settings, make_fake_host
from wsgw_bench.servers import free_port, stop_process

STATIC = Path(dashboard.__file__).resolve().parent.parent / "static"


def _client(tmp_path: Path, auth: str = "token") -> Iterator[TestClient]:
    host = make_fake_host(tmp_path / "host")
    settings = dashboard_settings(tmp_path, host, auth)
    app = build_app(settings, DetachedRuntime(), host)
    with TestClient(app, client=("127.0.0.1", 50000), base_url=BASE_URL) as client:
        yield client


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    yield from _client(tmp_path)


def test_index_is_served_with_a_strict_csp(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "style-src 'self'" in csp
    assert "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert '<script type="module" src="/ui/js/main.js">' in r.text


def test_no_inline_script_or_style_in_any_file() -> None:
    """What a strict CSP would block: inline <script>, style attributes, on* handlers."""
    for path in STATIC.rglob("*.html"):
        text = path.read_text()
        assert "<script>" not in text and "<style" not in text, path
        assert " style=" not in text and " onclick=" not in text, path
    for path in STATIC.rglob("*.js"):
        text = path.read_text()
        assert ".innerHTML" not in text, f"{path}: build nodes with dom.h, not innerHTML"
        assert "eval(" not in text and "new Function" not in text, path


def test_assets_have_their_types_and_validators(client: TestClient) -> None:
    r = client.get("/ui/js/main.js")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/javascript")
    assert client.get("/ui/css/app.css").headers["content-type"].startswith("text/css")
    assert client.get("/ui/favicon.svg").headers["content-type"] == "image/svg+xml"
    etag = r.headers["etag"]
    again = client.get("/ui/js/main.js", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert client.head("/ui/js/main.js").status_code == 200


@pytest.mark.parametrize(
    "path",
    [
        "/ui/",
        "/ui/js",
        "/ui/../routes/dashboard.py",
        "/ui/%2e%2e/routes/dashboard.py",
        "/ui/js/../../routes/dashboard.py",
        "/ui/.hidden",
        "/ui/nope.js",
        "/ui/package.json",
    ],
)
def test_nothing_outside_the_static_files(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert r.status_code == 404, (path, r.status_code)
    assert "dashboard" not in r.text or "not a file of the dashboard" in r.text


def test_dashboard_routes_stay_out_of_the_openapi_document(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p == "/" or p.startswith("/ui")]


def test_config_says_whether_auth_is_on(client: TestClient, tmp_path: Path) -> None:
    body = client.get("/ui/config").json()
    assert body["auth"] == "token"
    assert body["public_metrics"] is True
    assert body["stream_path"] == "/v1/stream"
    for other in _client(tmp_path / "noauth", auth="none"):
        assert other.get("/ui/config").json()["auth"] == "none"
        me = other.get("/ui/whoami").json()
        assert me["scopes"] == ["admin", "consume"]
        assert me["auth"] == "none"


def test_whoami_names_the_token_and_its_scopes(client: TestClient) -> None:
    assert client.get("/ui/whoami").status_code == 401
    bad = client.get("/ui/whoami", headers={"Authorization": "Bearer wsgw_nope"})
    assert bad.status_code == 401
    assert bad.json()["detail"] == "invalid or revoked token"
    service = client.app.state.control  # type: ignore[attr-defined]
    _, secret = service.tokens.create("reader", ["consume"])
    me = client.get("/ui/whoami", headers={"Authorization": f"Bearer {secret}"}).json()
    assert me == {"name": "reader", "scopes": ["consume"], "auth": "token"}


HUB_NAMES = (
    "wsgw_hub_published",
    "wsgw_hub_batches",
    "wsgw_hub_publish_seconds",
    "wsgw_consumer_connected",
    "wsgw_consumer_lag",
    "wsgw_consumer_delivered",
    "wsgw_consumer_dropped",
    "wsgw_consumer_disconnects",
)
SESSION_COUNTERS = ("messages", "bytes", "gaps", "reconnects")


def test_metric_names_match_their_producers() -> None:
    """The names api/static/js/metrics.js reads are those the hub and LiveRuntime export
    (checked in their sources, while they are being written; skipped without them)."""
    root = STATIC.parent.parent
    js = (STATIC / "js" / "metrics.js").read_text()
    hub = root / "gateway" / "hub" / "metrics.py"
    live = root / "gateway" / "runtime" / "live.py"
    if not hub.is_file() and not live.is_file():
        pytest.skip("neither gateway/hub/metrics.py nor gateway/runtime/live.py exists yet")
    for name in HUB_NAMES:
        assert f'"{name}"' in js, name
        if hub.is_file():
            assert f'"{name}"' in hub.read_text(), f"the hub no longer exports {name}"
    for short in SESSION_COUNTERS:
        assert f"session_{short}`" in js, short
        if live.is_file():
            assert f'("{short}", "counter"' in live.read_text(), f"LiveRuntime: session_{short}"
    assert "session_rtt_seconds`" in js
    if live.is_file():
        assert '"session_rtt_seconds"' in live.read_text()


def test_wsgw_serve_serves_the_dashboard(tmp_path: Path) -> None:
    """The real command line: `wsgw serve` answers / with the page (once api/app.py
    includes the dashboard's router; skipped, saying so, until then)."""
    import inspect

    from api import app as app_module

    if "dashboard" not in inspect.getsource(app_module):
        pytest.skip("api/app.py does not include api.routes.dashboard.router yet")
    port = free_port()
    env = {
        **os.environ,
        "WSGW_STATE_DIR": str(tmp_path / "state"),
        "WSGW_DB__URL": f"sqlite:///{tmp_path / 'state' / 'wsgw.db'}",
    }
    wsgw = Path(sys.executable).parent / "wsgw"
    proc = subprocess.Popen(
        [str(wsgw), "serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "wsgw serve did not answer in 30 s"
            time.sleep(0.1)
        r = httpx.get(f"{url}/")
        assert r.status_code == 200
        assert "content-security-policy" in r.headers
        assert httpx.get(f"{url}/ui/js/main.js").status_code == 200
    finally:
        stop_process(proc, 15)

"""The latency profile as the API shows it: GET /v1/engine, the /metrics info series and the
/v1/stream hello (TestClient, real SQLite, a real hub)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from gateway.hub import Hub
from gateway.runtime import DetachedRuntime
from tests.api.conftest import BASE_URL, WS_BASE, make_settings
from tests.host.fakesys import FakeHost


class Gateway:
    def __init__(self, client: TestClient, hub: Hub) -> None:
        self.client, self.hub = client, hub
        control = client.app.state.control  # type: ignore[attr-defined]
        self.control = control
        self.admin = {"Authorization": f"Bearer {control.tokens.create('a', ['admin'])[1]}"}
        self.consume = {"Authorization": f"Bearer {control.tokens.create('c', ['consume'])[1]}"}


@pytest.fixture(params=["economical", "low-latency"])
def gw(request: pytest.FixtureRequest, tmp_path: Path, fake_host: FakeHost) -> Iterator[Gateway]:
    hub = Hub()
    settings = make_settings(
        tmp_path, f"sqlite:///{tmp_path / 'gw.db'}", latency_profile=request.param
    )
    app = create_app(settings, DetachedRuntime(), host=fake_host.manager(), hub=hub)
    try:
        with TestClient(app, client=("127.0.0.1", 50000), base_url=BASE_URL) as client:
            yield Gateway(client, hub)
    finally:
        hub.close()


EXPECTED = {
    "economical": {
        "poll_mode": "adaptive",
        "cpu": None,
        "budget_us": 20000,
        "reader_wait": "futex",
    },
    "low-latency": {
        "poll_mode": "busy",
        "cpu": "isolated",
        "budget_us": 2000,
        "reader_wait": "busy",
    },
}


def test_get_engine_shows_the_profile_and_what_it_set(gw: Gateway) -> None:
    profile = gw.control.settings.latency_profile
    r = gw.client.get("/v1/engine", headers=gw.admin)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["latency_profile"] == profile
    assert {k: body[k] for k in EXPECTED[profile]} == EXPECTED[profile]
    assert (body["state"], body["details"]) == ("detached", {})
    assert gw.client.get("/v1/engine").status_code == 401
    assert gw.client.get("/v1/engine", headers=gw.consume).status_code == 403
    # A start-up setting: nothing changes it through the API.
    assert gw.client.put("/v1/engine", json={}, headers=gw.admin).status_code == 405


def test_metrics_carry_the_profile_as_an_info_series(gw: Gateway) -> None:
    profile = gw.control.settings.latency_profile
    expected = EXPECTED[profile]
    text = gw.client.get("/metrics").text
    assert (
        f'wsgw_latency_profile_info{{poll_mode="{expected["poll_mode"]}",'
        f'profile="{profile}",reader_wait="{expected["reader_wait"]}"}} 1.0'
    ) in text


def test_stream_hello_names_the_profile(gw: Gateway) -> None:
    body = {"name": "s", "url": "wss://feed.example.com/ws", "dialect": "generic"}
    sid = gw.control.sessions.create(body | {"transport": "kernel"}).id
    url = f"{WS_BASE}/v1/stream?session={sid}&envelope=1"
    with gw.client.websocket_connect(url, headers=gw.consume) as ws:
        hello = orjson.loads(ws.receive_text())
        assert hello["type"] == "subscribed"
        assert hello["latency_profile"] == gw.control.settings.latency_profile
        deadline = time.monotonic() + 10
        while not gw.hub.consumers():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        gw.hub.forget_session(sid)  # the server ends the stream: no teardown race

"""/v1/history and the engines' load metrics: the in-memory ring of chart points
(api.history.History) and wsgw_engine_busy_ratio / wsgw_engine_cpu_ratio on /metrics,
against the browser tests' SimulatedRuntime (engine counters that grow with time)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.history import History, Reading, derive
from tests.api.conftest import BASE_URL, make_settings
from tests.browser.runtimes import SimulatedRuntime
from tests.host.fakesys import FakeHost


@pytest.fixture
def gw(tmp_path: Path, fake_host: FakeHost) -> Iterator[tuple[TestClient, dict[str, str]]]:
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'gw.db'}")
    app = create_app(settings, SimulatedRuntime(), host=fake_host.manager())
    with TestClient(app, client=("127.0.0.1", 50000), base_url=BASE_URL) as client:
        _, secret = app.state.control.tokens.create("ops", ["admin"])
        admin = {"Authorization": f"Bearer {secret}"}
        port = {
            "name": "lab0",
            "device": "net_af_packet0,iface=wsgw0",
            "ipv4": "198.18.9.2",
            "netmask": "255.255.255.0",
            "gateway": "198.18.9.1",
        }
        assert client.post("/v1/ports", json=port, headers=admin).status_code == 201
        yield client, admin


def test_history_keeps_chart_points_and_engine_load(
    gw: tuple[TestClient, dict[str, str]],
) -> None:
    client, admin = gw
    history: History = client.app.state.history  # type: ignore[attr-defined]
    history.sample()  # a reading to measure from (the background task may have one too)
    for _ in range(5):
        client.get("/healthz")
    time.sleep(0.3)
    point = history.sample()
    assert point is not None
    assert point["httpRate"] > 0
    (engine,) = point["engines"].values()
    assert engine["name"] == "lab0"
    # the simulated engine: 500 busy RX bursts/s against 45,000 empty ones, 0.42 s CPU/s
    assert engine["busy"] == pytest.approx(500 / 45_500, rel=0.05)
    assert engine["cpu"] == pytest.approx(0.42, rel=0.3)

    body = client.get("/v1/history", headers=admin).json()
    assert (body["source"], body["interval_s"], body["retention_s"]) == ("memory", 5.0, 3600.0)
    assert point in body["points"]
    later = client.get(f"/v1/history?since={point['t'] / 1000 + 1}", headers=admin).json()
    assert later["points"] == []
    r = client.get("/v1/history?since=nope", headers=admin)
    assert r.status_code == 422
    r = client.get("/v1/history?since=2000&until=1000", headers=admin)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["query", "since"]  # names the parameter to fix

    metrics = client.get("/metrics", headers=admin).text
    busy = next(line for line in metrics.splitlines() if line.startswith("wsgw_engine_busy_ratio{"))
    assert 'port="1"' in busy and 'name="lab0"' in busy
    assert float(busy.split()[-1]) == pytest.approx(engine["busy"])
    assert "wsgw_engine_cpu_ratio{" in metrics
    assert "wsgw_engine_rx_bursts_total{" in metrics


def test_a_point_is_the_rates_between_two_readings() -> None:
    def reading(at: float, http: float, buckets: dict[str, float]) -> Reading:
        samples = {
            "wsgw_http_requests_total": [({"route": "/a"}, http / 2), ({"route": "/b"}, http / 2)],
            "wsgw_http_request_duration_seconds_bucket": [
                ({"le": le}, n) for le, n in buckets.items()
            ],
            "wsgw_dataplane_message_latency_seconds": [
                ({"quantile": "0.5", "session": "1"}, 0.001),
                ({"quantile": "0.5", "session": "2"}, 0.003),
            ],
        }
        return Reading(at, samples)

    prev = reading(100.0, 10, {"0.01": 0, "0.1": 0, "+Inf": 0})
    cur = reading(105.0, 60, {"0.01": 50, "0.1": 100, "+Inf": 100})
    point = derive(prev, cur)
    assert point["t"] == 105_000
    assert point["httpRate"] == 10.0
    assert point["httpP50"] == pytest.approx(0.01)
    assert point["httpP99"] == pytest.approx(0.01 + 0.09 * 0.98)
    assert point["lat50"] == 0.003  # no gateway-wide figure: the worst session's
    assert "msgRate" not in point and point["engines"] == {}

"""/healthz, /readyz, /metrics and the downstream stream's placeholder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from starlette.websockets import WebSocketDisconnect

from gateway.runtime import Metric, MetricsSnapshot
from tests.api.conftest import BASE_URL, WS_BASE, Api, stream_close


def test_healthz(api: Api) -> None:
    assert api.client.get("/healthz").json() == {"status": "ok"}


def test_readyz_reports_database_and_engine(api: Api) -> None:
    r = api.client.get("/readyz", headers=api.admin)
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ready"
    assert body["ready"] is True
    assert body["database"] == "ok"
    assert body["engine"] == {
        "state": "detached",
        "reason": "dataplane not attached",
        "details": {},
    }


def test_readyz_is_503_when_the_database_is_gone(api: Api) -> None:
    def broken() -> None:
        raise ConnectionError("connection refused")

    api.control.db.ping = broken
    r = api.client.get("/readyz", headers=api.admin)
    assert r.status_code == 503
    assert r.json()["database"] == "unreachable"
    assert "connection refused" in r.json()["database_error"]


def test_metrics(api: Api, make_session: Callable[..., dict[str, Any]]) -> None:
    sid = make_session()["id"]
    make_session()
    api.client.post(f"/v1/sessions/{sid}/start", headers=api.admin)
    api.client.get("/v1/ports/12345", headers=api.admin)
    api.runtime.metrics = lambda: MetricsSnapshot(  # type: ignore[method-assign]
        0.0,
        (
            Metric("rx_packets", "counter", 42, "frames received", {"port": "1"}),
            Metric("flows", "gauge", 3),
        ),
    )
    text = api.client.get("/metrics").text
    assert 'wsgw_sessions{desired_state="running",state="configured"} 1.0' in text
    assert 'wsgw_sessions{desired_state="stopped",state="configured"} 1.0' in text
    assert 'wsgw_engine_state{state="detached"} 1.0' in text
    assert (
        'wsgw_http_requests_total{method="GET",route="/v1/ports/{port_id}",status="404"} 1.0'
        in text
    )
    assert (
        'wsgw_http_request_duration_seconds_bucket{le="0.001",method="POST",route="/v1/sessions/{session_id}/start"}'
        in text
    )
    assert 'wsgw_dataplane_rx_packets_total{port="1"} 42.0' in text
    assert "wsgw_dataplane_flows 3.0" in text
    assert "_created" not in text


def test_two_apps_have_their_own_registries(api: Api) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app

    other = create_app(api.app.state.settings, host=api.app.state.host)
    with TestClient(other, base_url=BASE_URL) as client:
        assert client.get("/metrics").status_code == 200


def test_stream_checks_token_and_subscription_then_says_no_hub(
    api: Api, make_session: Callable[..., dict[str, Any]]
) -> None:
    sid = make_session()["id"]
    body = {"session_id": sid, "topics": ["t"], "consumer": "c"}
    sub = api.client.post("/v1/subscriptions", json=body, headers=api.consume).json()
    url = sub["consume"]["stream_url"]
    cases = [
        ({}, 4401),
        (api.admin, 4403),
        (api.consume, 1013),
    ]
    for headers, code in cases:
        assert stream_close(api.client, url, headers)[0] == code
    with api.client.websocket_connect(
        f"{WS_BASE}/v1/stream?subscription=999", headers=api.consume
    ) as ws:
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
        assert (closed.value.code, closed.value.reason) == (4404, "subscription 999 not found")

"""GET /v1/engine/ports: each port's engine and NIC counters for the dashboard (admin). With
no engine a port answers null figures, never zeros; a runtime's own port_counters is used
as given. The DPDK runtime's answer is checked in the browser (test_real_gateway.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.api.conftest import Api


def test_ports_without_an_engine_answer_nulls(
    api: Api, make_port: Callable[..., dict[str, object]]
) -> None:
    port = make_port()
    before = time.monotonic()
    r = api.client.get("/v1/engine/ports", headers=api.admin)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["monotonic"] >= before
    [row] = body["data"]
    assert row["port_id"] == port["id"] and row["device"] == port["device"]
    assert row["state"] == "configured"
    for source in ("engine", "cpu_seconds", "nic", "link"):
        assert row[source] is None, (source, row)


def test_a_runtimes_port_counters_are_passed_on(
    api: Api, make_port: Callable[..., dict[str, object]], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = make_port()
    given: dict[str, Any] = {
        "engine": {"c_rx_frames": 12, "flows": 1},
        "cpu_seconds": 0.5,
        "nic": {"rx_packets": 12, "rx_bytes": 900},
        "link": {"speed_mbps": 10000, "up": 1, "full_duplex": 1},
    }
    asked: list[int] = []

    def port_counters(port_id: int) -> dict[str, Any]:
        asked.append(port_id)
        return given

    monkeypatch.setattr(api.runtime, "port_counters", port_counters, raising=False)
    [row] = api.client.get("/v1/engine/ports", headers=api.admin).json()["data"]
    assert asked == [port["id"]]
    assert {k: row[k] for k in given} == given


def test_only_an_admin_token_reads_them(api: Api) -> None:
    assert api.client.get("/v1/engine/ports", headers=api.consume).status_code == 403
    assert api.client.get("/v1/engine/ports").status_code == 401

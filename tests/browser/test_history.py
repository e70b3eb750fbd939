"""History beyond the live 2 minutes (GET /v1/history, the gateway's in-memory samples) on
the Charts page, and the engines' busy ratio (wsgw_engine_busy_ratio) on the engine card,
against SimulatedRuntime; a consume token gets the live range only."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest

from api.history import History
from tests.browser.conftest import Dashboard, Server, StartServer
from tests.browser.runtimes import SimulatedHubMetrics, SimulatedRuntime

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
expect = sync_api.expect


@pytest.fixture(scope="module")
def sampled(start_server: StartServer) -> tuple[Server, int]:
    """A gateway with a running port and a few history points (sampled now, not every 5 s)."""
    metrics = SimulatedHubMetrics(SimulatedRuntime())
    server = start_server(metrics.runtime, collectors=[metrics])
    with server.client() as api:
        port = api.post(
            "/v1/ports",
            json={
                "name": "lab7",
                "device": "net_af_packet7,iface=wsgw7",
                "ipv4": "198.18.7.2",
                "netmask": "255.255.255.0",
                "gateway": "198.18.7.1",
            },
        ).json()
    history: History = server.app.state.history
    for _ in range(4):
        history.sample()
        time.sleep(0.3)
    history.sample()
    return server, int(port["id"])


def test_charts_draw_the_gateways_history(
    sampled: tuple[Server, int], open_dashboard: Callable[..., Dashboard]
) -> None:
    server, _ = sampled
    d = open_dashboard(server)
    d.login()
    d.go("#/charts")
    page = d.page
    ranges = page.locator("#chart-ranges")
    expect(ranges.locator('[data-range="120"]')).to_have_attribute("aria-pressed", "true")
    ranges.get_by_role("button", name="15 min").click()
    expect(ranges.locator('[data-range="900"]')).to_have_attribute("aria-pressed", "true")
    info = page.locator("#charts-info")
    expect(info).to_contain_text("The gateway's history")
    expect(info).to_contain_text("a point every 5 s, kept 60 min")
    messages = page.locator('figure[data-chart="Messages/s"] svg')
    expect(messages.locator('path.line[data-series="hubRate"]')).to_have_count(1)
    assert int(messages.get_attribute("data-points") or 0) >= 4
    expect(messages.locator("text.axis").filter(has_text="-15 min")).to_have_count(1)
    requests = page.locator('figure[data-chart="API requests/s"] svg')
    expect(requests.locator("path.line")).to_have_count(1)
    d.screenshot("charts-history")

    ranges.get_by_role("button", name="2 min (live)").click()
    expect(info).to_contain_text("Polling /metrics every 1 s")
    expect(messages.locator("text.axis").filter(has_text="-120s")).to_have_count(1)
    assert d.errors == [], d.errors


def test_the_engine_card_shows_the_exported_busy_ratio(
    sampled: tuple[Server, int], open_dashboard: Callable[..., Dashboard]
) -> None:
    server, port_id = sampled
    with server.client() as api:
        metrics = api.get("/metrics").text
    line = next(
        x
        for x in metrics.splitlines()
        if x.startswith(f'wsgw_engine_busy_ratio{{name="lab7",port="{port_id}"}}')
    )
    exported = float(line.split()[-1])
    assert 0 < exported < 0.05  # 500 busy RX bursts/s against 45,000 empty ones
    d = open_dashboard(server)
    d.login()
    engine = d.page.locator(f'[data-engine="{port_id}"]')
    expect(engine.locator('[data-figure="lcore-busy"]')).to_have_text(re.compile(r"^1\.\d %$"))
    expect(engine.locator(".not-reported")).to_have_count(0)
    assert d.errors == [], d.errors


def test_a_consume_token_has_the_live_range_only(
    sampled: tuple[Server, int], open_dashboard: Callable[..., Dashboard]
) -> None:
    server, _ = sampled
    secret = server.create_token("history-reader", ["consume"])
    d = open_dashboard(server)
    d.login(secret)
    d.go("#/charts")
    ranges = d.page.locator("#chart-ranges")
    expect(ranges.locator('[data-range="120"]')).to_be_enabled()
    for seconds in ("900", "3600"):
        expect(ranges.locator(f'[data-range="{seconds}"]')).to_be_disabled()
    with server.client(secret) as api:
        assert api.get("/v1/history").status_code == 403
    assert [e for e in d.errors if "status of 403" not in e] == [], d.errors

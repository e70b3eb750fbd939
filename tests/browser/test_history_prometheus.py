"""History from a real Prometheus (Debian's `prometheus`): it scrapes a running gateway's
/metrics every second; with api.prometheus_url naming it, /v1/history answers from its
query_range over the range and step asked, and the Charts page draws it for 6 h or a custom
from/to. A Prometheus that does not answer leaves the gateway's memory answering, saying
why. Skipped, saying how to get it, only when the prometheus binary is missing."""

from __future__ import annotations

import itertools
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from api.history import History
from tests.browser.conftest import Dashboard, Server, StartServer
from tests.browser.runtimes import SimulatedHubMetrics, SimulatedRuntime
from tests.utils.prometheus import running_prometheus, wait_for_samples


def _use_prometheus(server: Server, url: str | None) -> None:
    """Point the running gateway's /v1/history at `url` (its settings, as wsgw.toml would)."""
    settings = server.app.state.settings
    api = settings.api.model_copy(
        update={"prometheus_url": url, "prometheus_selector": 'job="wsgw"'}
    )
    server.app.state.settings = settings.model_copy(update={"api": api})


@pytest.fixture(scope="module")
def scraped(start_server: StartServer) -> Iterator[tuple[Server, str]]:
    """A gateway whose hub publishes (SimulatedRuntime) and a Prometheus scraping it."""
    metrics = SimulatedHubMetrics(SimulatedRuntime())
    server = start_server(metrics.runtime, collectors=[metrics])
    with server.client() as api:  # a connected session: messages flow, the hub publishes
        session = api.post(
            "/v1/sessions",
            json={
                "name": "feed-p",
                "url": "wss://feed.example.com/ws",
                "dialect": "generic",
                "transport": "kernel",
            },
        ).json()
        assert api.post(f"/v1/sessions/{session['id']}/start").status_code == 200
    with running_prometheus([server.url.removeprefix("http://")]) as prometheus:
        wait_for_samples(prometheus, 'wsgw_hub_published_total{job="wsgw"}', 4)
        _use_prometheus(server, prometheus)
        try:
            yield server, prometheus
        finally:
            _use_prometheus(server, None)


def _history(server: Server, **params: float) -> dict[str, Any]:
    with server.client() as api:
        r = api.get("/v1/history", params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_history_comes_from_prometheus_over_the_range_and_step_asked(
    scraped: tuple[Server, str],
) -> None:
    server, _ = scraped
    now = time.time()
    body = _history(server, since=now - 300, until=now, step=2)
    assert (body["source"], body["interval_s"], body["retention_s"]) == ("prometheus", 2, None)
    points = body["points"]
    assert len(points) >= 2
    assert {b["t"] - a["t"] for a, b in itertools.pairwise(points)} == {2000}
    assert all(now - 300 <= p["t"] / 1000 <= now + 1 for p in points)
    assert max(p.get("hubRate", 0) for p in points) > 0  # the simulated hub publishes
    assert any("httpRate" in p for p in points)  # Prometheus's own scrapes are requests
    assert any("hubPublishMean" in p for p in points)

    # Days back, beyond the gateway's in-memory hour: Prometheus answers at a coarser step.
    week = _history(server, since=now - 7 * 86400, until=now)
    assert week["source"] == "prometheus"
    assert week["interval_s"] == 7 * 86400 / 360
    assert week["points"]


def test_a_prometheus_that_does_not_answer_leaves_the_memory_answering(
    scraped: tuple[Server, str],
) -> None:
    server, prometheus = scraped
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    history: History = server.app.state.history
    history.sample()
    time.sleep(0.2)
    history.sample()
    _use_prometheus(server, dead)
    try:
        body = _history(server)
    finally:
        _use_prometheus(server, prometheus)
    assert body["source"] == "memory"
    assert body["fallback"].startswith(f"Prometheus at {dead}")
    assert body["retention_s"] == 3600 and body["points"]
    with server.client() as api:
        assert api.get("/v1/history", params={"since": 200, "until": 100}).status_code == 422


def test_the_charts_page_draws_prometheus_history_for_6_hours_and_a_custom_range(
    scraped: tuple[Server, str], open_dashboard: Callable[..., Dashboard]
) -> None:
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="the playwright package is missing"
    )
    expect = sync_api.expect
    server, _ = scraped
    d = open_dashboard(server)
    d.login()
    d.go("#/charts")
    page = d.page
    page.locator("#chart-ranges").get_by_role("button", name="6 h").click()
    info = page.locator("#charts-info")
    expect(info).to_contain_text("The gateway's history from Prometheus")
    expect(info).to_contain_text("in the last 6 h")
    messages = page.locator('figure[data-chart="Messages/s"] svg')
    expect(messages.locator('path.line[data-series="hubRate"]')).to_have_count(1)
    expect(messages.locator("text.axis").filter(has_text="-6 h")).to_have_count(1)
    d.screenshot("charts-prometheus")

    # A custom range: the last 10 minutes up to a fixed end, labelled with clock times.
    end = time.time()
    fmt = "%Y-%m-%dT%H:%M"
    page.locator("#range-from").fill(time.strftime(fmt, time.localtime(end - 600)))
    page.locator("#range-to").fill(time.strftime(fmt, time.localtime(end + 60)))
    page.locator('#chart-custom-range button[type="submit"]').click()
    expect(info).to_contain_text("The gateway's history from Prometheus")
    expect(info).to_contain_text(" to ")
    expect(messages.locator('path.line[data-series="hubRate"]')).to_have_count(1)
    expect(messages.locator("text.axis").filter(has_text="now")).to_have_count(0)
    expect(page.locator('#chart-ranges [aria-pressed="true"]')).to_have_count(0)
    assert d.errors == [], d.errors

"""The dashboard against a runtime whose figures move (SimulatedRuntime): the charts and
tables must follow the values. Swap the runtime for the engine-backed one, with a feed
simulator upstream, to assert the same on real message counts."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from tests.browser.conftest import Dashboard, Server, StartServer
from tests.browser.runtimes import FAIL_REASON, SimulatedHubMetrics, SimulatedRuntime

if TYPE_CHECKING:
    from playwright.sync_api import Locator

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
expect = sync_api.expect


@pytest.fixture(scope="module")
def hub_metrics() -> SimulatedHubMetrics:
    return SimulatedHubMetrics(SimulatedRuntime())


@pytest.fixture(scope="module")
def live(start_server: StartServer, hub_metrics: SimulatedHubMetrics) -> Server:
    return start_server(hub_metrics.runtime, collectors=[hub_metrics])


@pytest.fixture(scope="module")
def streams(live: Server, hub_metrics: SimulatedHubMetrics) -> dict[str, Any]:
    """A port, a streaming session, a failing one and a consumer of the first."""
    runtime = live.runtime
    assert isinstance(runtime, SimulatedRuntime)
    with live.client() as api:
        port = api.post(
            "/v1/ports",
            json={
                "name": "lab0",
                "device": "net_af_packet0,iface=wsgw0",
                "ipv4": "198.18.9.2",
                "netmask": "255.255.255.0",
                "gateway": "198.18.9.1",
            },
        ).json()
        ok = api.post(
            "/v1/sessions",
            json={
                "name": "binance-spot",
                "url": "wss://stream.binance.com:9443/stream",
                "dialect": "binance",
                "transport": "dpdk",
                "port_id": port["id"],
            },
        ).json()
        bad = api.post(
            "/v1/sessions",
            json={
                "name": "okx-fail",
                "url": "wss://ws.okx.com:8443/ws/v5/public",
                "dialect": "okx",
                "transport": "kernel",
            },
        ).json()
        sub = api.post(
            "/v1/subscriptions",
            json={"session_id": ok["id"], "topics": ["btcusdt@trade"], "consumer": "pricer-1"},
        ).json()
        for s in (ok, bad):
            assert api.post(f"/v1/sessions/{s['id']}/start").status_code == 200
    hub_metrics.consumers.add(sub["consumer"])
    return {"port": port, "ok": ok, "bad": bad, "subscription": sub}


@pytest.fixture
def live_dash(live: Server, open_dashboard: Callable[..., Dashboard]) -> Dashboard:
    d = open_dashboard(live)
    d.login()
    return d


def _path(chart: Locator) -> str | None:
    return chart.locator("path.line").first.get_attribute("d")


def test_charts_move_with_the_metrics(streams: dict[str, Any], live_dash: Dashboard) -> None:
    page = live_dash.page
    live_dash.go("#/charts")
    messages = page.locator('figure[data-chart="Messages/s"] svg')
    latency = page.locator('figure[data-chart="Message latency"] svg')
    # received (sessions), published (hub), delivered (consumers)
    expect(messages.locator("path.line")).to_have_count(3)
    expect(latency.locator("path.line")).to_have_count(4)  # p50, p90, p99, hub hand-off
    before = (int(messages.get_attribute("data-points") or 0), _path(messages), _path(latency))
    page.wait_for_timeout(2300)  # two poll intervals
    after = (int(messages.get_attribute("data-points") or 0), _path(messages), _path(latency))
    assert after[0] >= before[0] + 2, (before[0], after[0])
    assert after[1] != before[1], "the messages/s line did not move"
    assert after[2] != before[2], "the latency lines did not move"
    legend = page.locator('figure[data-chart="Messages/s"] .legend strong')
    expect(legend).to_have_count(3)
    for i in range(3):
        expect(legend.nth(i)).to_have_text(re.compile(r"^\d"))
    expect(page.locator('figure[data-chart="Message latency"] .legend')).to_contain_text("µs")
    assert live_dash.errors == []


def test_sessions_show_rates_rtt_and_the_failure_reason(
    streams: dict[str, Any], live_dash: Dashboard
) -> None:
    page = live_dash.page
    live_dash.go("#/sessions")
    ok = page.locator(f'#sessions-table tr[data-session="{streams["ok"]["id"]}"]')
    expect(ok.locator("[data-state]")).to_have_text("connected")
    expect(ok.locator(".fig-rate")).to_have_text(re.compile(r"^[\d.,]+k?/s$"))
    expect(ok.locator(".fig-rtt")).to_have_text(re.compile(r"(ms|µs)$"))  # 0.7-1.5 ms
    expect(ok.locator(".fig-reconnects")).to_have_text("1")
    expect(ok.locator(".fig-gaps")).to_have_text("0")
    first = ok.locator(".fig-rate").text_content()
    expect(ok.locator(".fig-rate")).not_to_have_text(first or "", timeout=5000)  # it moves
    bad = page.locator(f'#sessions-table tr[data-session="{streams["bad"]["id"]}"]')
    expect(bad.locator("[data-state]")).to_have_text("failed")
    expect(bad.locator(".error-text")).to_have_text(FAIL_REASON)
    expect(page.locator(".notice")).to_be_hidden()  # the engine is running
    live_dash.screenshot("sessions-live")

    bad.get_by_role("link", name="okx-fail").click()
    status = page.locator("section.card", has=page.get_by_role("heading", name="Status"))
    expect(status.locator(".error-text")).to_have_text(FAIL_REASON)
    expect(page.locator('#events-table tr[data-kind="state"]').first).to_contain_text(
        "certificate verify failed"
    )
    assert live_dash.errors == []


def test_overview_shows_load_paths_and_port_counters(
    streams: dict[str, Any], live_dash: Dashboard
) -> None:
    page = live_dash.page
    expect(page.locator('[data-figure="lcores"] li')).to_have_count(2)
    expect(page.locator('[data-figure="path-split"]')).to_contain_text("fast")
    ports = page.locator("section.card", has=page.get_by_role("heading", name="Ports"))
    expect(ports.locator("[data-state]").first).to_have_text("up")
    expect(ports.locator(".not-reported")).to_have_count(0)
    expect(page.locator("#engine-pill [data-state]")).to_have_text("running")
    live_dash.screenshot("overview-live")
    assert live_dash.errors == []


# A figure with its unit: "42 %", "3.2 µs", "1.2k packets/s", "345.6 KiB/s", "12.3 MiB".
PERCENT = re.compile(r"^[\d.]+ %$")
DURATION = re.compile(r"^[\d.]+ (µs|ms|s)$")
PACKETS_PER_S = re.compile(r"[\d.,]+[kMG]? (pkt|packets)/s$")
BYTES_PER_S = re.compile(r"[\d.]+ (B|KiB|MiB|GiB)/s$")


def test_engine_and_port_figures_have_units_and_move(
    streams: dict[str, Any], live_dash: Dashboard
) -> None:
    """Every figure of the engine and the NIC under a running port (/v1/engine/ports), with
    its unit; none "not reported", no raw JSON; the rates change from one poll to the next."""
    page = live_dash.page
    port_id = streams["port"]["id"]
    engine = page.locator(f'[data-engine="{port_id}"]')
    expect(engine.locator('[data-figure="cpu"]')).to_have_text(PERCENT)
    expect(engine.locator('[data-figure="busy-polls"]')).to_have_text(PERCENT)
    expect(engine.locator('[data-figure="asleep"]')).to_have_text(PERCENT)
    expect(engine.locator('[data-figure="rx-to-ring-mean"]')).to_have_text(DURATION)
    expect(engine.locator('[data-figure="rx-to-ring-max"]')).to_have_text("48 µs")
    expect(engine.locator('[data-figure="burst-size"]')).to_have_text("4.0 frames")
    expect(engine.locator('[data-figure="engine-path-split"]')).to_contain_text("% fast")
    expect(engine.locator('[data-figure="c_rx_frames-rate"]')).to_have_text(
        re.compile(r"frames/s$")
    )
    expect(engine.locator('[data-figure="c_fast_bytes"]')).to_contain_text("MiB")
    expect(engine.locator('[data-figure="c_fast_bytes-rate"]')).to_have_text(BYTES_PER_S)
    expect(engine.locator('[data-figure="flows"]')).to_have_text("2")
    nic = page.locator(f'[data-nic="{port_id}"]')
    expect(nic.locator('[data-figure="link"]')).to_have_text("up · 10.0k Mb/s · full duplex")
    expect(nic.locator('[data-figure="nic-rx_packets"]')).to_contain_text("packets")
    expect(nic.locator('[data-figure="rx_packets-rate"]')).to_have_text(PACKETS_PER_S)
    expect(nic.locator('[data-figure="nic-rx_bytes"]')).to_contain_text("MiB")
    expect(nic.locator('[data-figure="nic-rx_missed"]')).to_contain_text("3 packets")
    row = page.locator(f'tr[data-port="{port_id}"]')
    expect(row.locator(".fig-rx-pps")).to_have_text(PACKETS_PER_S)
    expect(row.locator(".fig-tx-pps")).to_have_text(PACKETS_PER_S)
    expect(row.locator(".fig-rx-bps")).to_have_text(BYTES_PER_S)
    expect(row.locator(".fig-rx-dropped")).to_have_text("3 packets")
    for heading in ("Engine", "Ports"):
        card = page.locator(
            "section.card", has=page.get_by_role("heading", name=heading, exact=True)
        )
        expect(card.locator(".not-reported")).to_have_count(0)
        assert "{" not in (card.text_content() or ""), f"raw JSON in the {heading} card"
    # The figures move: the totals grow between two polls.
    total = nic.locator('[data-figure="nic-rx_bytes"]')
    before = total.text_content()
    expect(total).not_to_have_text(before or "", timeout=5000)
    live_dash.screenshot("overview-engine-live")
    assert live_dash.errors == []


def test_subscriptions_show_consumer_figures(streams: dict[str, Any], live_dash: Dashboard) -> None:
    page = live_dash.page
    live_dash.go("#/subscriptions")
    row = page.locator(f'#subs-table tr[data-subscription="{streams["subscription"]["id"]}"]')
    expect(row.locator(".fig-connected")).to_have_text("1")
    expect(row.locator(".fig-lag")).to_have_text(re.compile(r"^\d+$"))
    expect(row.locator(".fig-delivered")).to_have_text(re.compile(r"^[\d.,]+k?/s$"))
    expect(row.locator(".fig-dropped")).to_have_text("0")
    expect(row.locator(".fig-disconnects")).to_have_text("slow: 2")
    expect(row).to_contain_text("binance-spot")
    live_dash.screenshot("subscriptions-live")
    assert live_dash.errors == []


def test_topics_show_their_rate_and_subscribers(
    streams: dict[str, Any], live_dash: Dashboard
) -> None:
    """Per topic: messages/s and received (session_topic_messages), its subscriptions and
    the open streams of their consumers (the hub's wsgw_consumer_connected)."""
    page = live_dash.page
    live_dash.go("#/subscriptions")
    sub = streams["subscription"]
    for topic in sub["topics"]:
        row = page.locator(f'#topics-table tr[data-topic="{topic}"]')
        expect(row.locator(".fig-topic-rate")).to_have_text(re.compile(r"^[\d.,]+k?/s$"))
        expect(row.locator(".fig-topic-total")).to_have_text(re.compile(r"^[\d.,]+[kM]? msgs$"))
        expect(row.locator(".fig-topic-subs")).to_have_text("1")
        expect(row.locator(".fig-topic-streams")).to_have_text("1")
        expect(row).to_contain_text("binance-spot")
    total = page.locator(f'#topics-table tr[data-topic="{sub["topics"][0]}"] .fig-topic-total')
    before = total.text_content() or ""
    expect(total).not_to_have_text(before, timeout=5000)
    live_dash.screenshot("topics-live")
    assert live_dash.errors == []


@pytest.mark.parametrize("viewport", ["laptop", "phone"])
def test_live_pages_at_both_sizes(
    live: Server,
    streams: dict[str, Any],
    open_dashboard: Callable[..., Dashboard],
    viewport: str,
) -> None:
    d = open_dashboard(live, viewport)
    d.login()
    for name, route, marker in (
        ("overview", "#/overview", '[data-figure="lcores"]'),
        ("sessions", "#/sessions", "#sessions-table .fig-rate"),
        ("charts", "#/charts", 'figure[data-chart="Message latency"] path.line'),
    ):
        # the charts: a few points more on the lines
        d.check_page(f"{name}-live", route, marker, settle_ms=1500 if name == "charts" else 0)
    assert d.errors == []

"""The dashboard against the REAL gateway: the feed simulator in a lab namespace, the live
runtime (LiveRuntime + fan-out hub + DPDK engines, as `wsgw serve` builds it) with a DPDK
port on the lab's veth, uvicorn on loopback with auth off. From the browser: create a
Binance session pointing at the simulator, start it, subscribe to two topics, see it
connected with a message rate, tail its stream, watch the messages/s chart move, stop it.
Screenshots of the sessions page, the tail and the charts, at laptop and phone size, go to
tests/browser/artifacts/*-real-*.png. And the consumers and history of that gateway: a ring
reader of another process with its lag from the DPDK feed, closed from the Consumers page;
the Charts page's history from a real Prometheus scraping it.

Needs root, a shim built with DPDK, Chromium and playwright; skipped otherwise."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from api.app import create_app
from api.routes.stream import app_hub
from gateway.lab import Lab
from gateway.runtime import build_runtime
from gateway.settings import Settings
from gateway.simulator.process import start_simulator
from tests.browser.conftest import Dashboard, Server, UvicornThread
from tests.conftest import requires_dpdk
from tests.utils.consumers import IdleReader
from tests.utils.prometheus import running_prometheus, wait_for_samples

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
expect = sync_api.expect

pytestmark = [requires_dpdk, pytest.mark.dpdk]

SIM_PORT = 9700
SIM_RATE = 50  # messages/s per topic
TOPICS = ["btcusdt@trade", "ethusdt@trade"]
SESSION = "sim-binance"
CONSUMER = "browser-tail"
STREAMING_MS = 30_000  # connecting through the DPDK stack on a loaded 2-core machine
# A rate of more than nothing: "12/s", "0.5/s", "1.2k/s", never "0/s".
NONZERO_RATE = re.compile(r"^(?!0/s$)[\d.,]+[kMG]?/s$")
# Figures with their units: "42 %", "3.2 µs", "1.2k pkt/s", "345.6 KiB/s".
PERCENT = re.compile(r"^[\d.]+ %$")
DURATION = re.compile(r"^[\d.]+ (µs|ms|s)$")
PACKETS_PER_S = re.compile(r"^[\d.,]+[kMG]? pkt/s$")
BYTES_PER_S = re.compile(r"^[\d.]+ (B|KiB|MiB|GiB)/s$")


@dataclass
class RealGateway:
    server: Server
    lab: Lab
    port: dict[str, Any]

    @property
    def sim_url(self) -> str:
        return f"ws://{self.lab.peer_ip}:{SIM_PORT}/binance/stream"

    def api(self) -> httpx.Client:
        return self.server.client()


@pytest.fixture
def real_gateway(lab: Lab, tmp_path: Path) -> Iterator[RealGateway]:
    """The simulator in the lab, the real gateway in this process (auth off), a DPDK port
    on lab.vdev configured through the REST API. Everything is stopped afterwards; the lab
    fixture removes the namespace."""
    sim = start_simulator(lab, SIM_PORT, SIM_RATE)
    thread: UvicornThread | None = None
    try:
        settings = Settings(
            state_dir=tmp_path,
            db={"url": f"sqlite:///{tmp_path}/wsgw.db"},  # type: ignore[arg-type]
            auth={"mode": "none"},  # type: ignore[arg-type]
            api={"host": "127.0.0.1"},  # type: ignore[arg-type]
            hub={"gateway": f"brw{os.getpid()}"},  # type: ignore[arg-type]
            dpdk={"hugepages": "off"},  # type: ignore[arg-type]
        )
        runtime = build_runtime(settings)
        app = create_app(settings, runtime)
        thread = UvicornThread(app)
        thread.start()
        server = Server(f"http://127.0.0.1:{thread.port}", app, runtime, None, thread)
        with server.client() as api:
            response = api.post(
                "/v1/ports",
                json={
                    "name": "lab",
                    "device": lab.vdev,
                    "ipv4": lab.gw_ip,
                    "netmask": lab.netmask,
                },
            )
            assert response.status_code < 400, response.text
        yield RealGateway(server, lab, response.json())
    finally:
        if thread is not None:
            thread.stop()  # graceful: the lifespan closes the runtime (sessions, engines)
        sim.kill()
        sim.wait()


def _points(chart: Locator) -> int:
    return int(chart.get_attribute("data-points") or 0)


def _received_path(chart: Locator) -> str | None:
    line = chart.locator('path.line[data-series="msgRate"]')
    return line.get_attribute("d") if line.count() else None


def _create_session(page: Page, gw: RealGateway) -> Locator:
    """Fill the New session form: the Binance preset, the simulator's URL, the DPDK port."""
    # Loaded (no session yet: the page opens the form itself; clicking before would shut it).
    expect(page.get_by_text("No sessions yet")).to_be_visible()
    card = page.locator("#new-session")
    if card.get_attribute("open") is None:
        card.locator(":scope > summary").click()
    form = page.locator("#session-form")
    expect(form).to_be_visible()
    form.locator("select[name=dialect]").select_option("binance")
    expect(form.locator("input[name=url]")).to_have_value("wss://stream.binance.com:9443/stream")
    form.locator("input[name=name]").fill(SESSION)
    form.locator("input[name=url]").fill(gw.sim_url)
    form.locator("select[name=transport]").select_option("dpdk")
    expect(form.locator('[data-field="port_id"]')).to_be_visible()
    form.locator("select[name=port_id]").select_option(str(gw.port["id"]))
    form.get_by_role("button", name="Create session").click()
    expect(page.locator(".success")).to_contain_text(f"Session '{SESSION}' created")
    row = page.locator(f'#sessions-table tr[data-name="{SESSION}"]')
    expect(row).to_contain_text("binance · dpdk on lab")
    return row


def _subscribe(page: Page, session_id: int) -> None:
    # Loaded: the sessions are in the form's list (and the page has opened the form).
    form = page.locator("#subscription-form")
    expect(form.locator(f'select[name=session_id] option[value="{session_id}"]')).to_be_attached()
    card = page.locator("#new-subscription")
    if card.get_attribute("open") is None:
        card.locator(":scope > summary").click()
    form.locator("select[name=session_id]").select_option(str(session_id))
    form.locator("input[name=consumer]").fill(CONSUMER)
    form.locator("textarea[name=topics]").fill(" ".join(TOPICS))
    form.get_by_role("button", name="Subscribe").click()
    expect(page.locator(".success")).to_contain_text(f"Subscribed upstream: {', '.join(TOPICS)}")


def _tail_count(page: Page) -> int:
    text = page.locator(".tail-counters").text_content() or ""
    match = re.match(r"(\d+) messages", text)
    return int(match.group(1)) if match else 0


def test_drive_the_real_gateway_from_the_dashboard(
    real_gateway: RealGateway, open_dashboard: Callable[..., Dashboard]
) -> None:
    gw = real_gateway
    t0 = time.monotonic()
    d = open_dashboard(gw.server)
    page = d.page

    # Auth off: /ui/config says so and the dashboard goes straight to the overview.
    d.open()
    expect(page.locator("#nav")).to_be_visible()
    expect(page.locator("#who")).to_have_text("auth off (local)")
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()

    # Create the session from the form and start it from its row.
    d.go("#/sessions")
    row = _create_session(page, gw)
    with gw.api() as api:
        sessions = {s["name"]: s for s in api.get("/v1/sessions").json()["data"]}
    session = sessions[SESSION]
    assert session["url"] == gw.sim_url
    assert session["transport"] == "dpdk" and session["port_id"] == gw.port["id"]
    assert session["desired_state"] == "stopped"
    expect(row.locator("[data-desired]")).to_have_text("stopped")
    row.locator('button[data-action="start"]').click()
    expect(row.locator("[data-desired]")).to_have_text("running")
    expect(row.locator("[data-state]")).to_have_text("connected", timeout=STREAMING_MS)
    expect(page.locator("#engine-pill [data-state]")).to_have_text("running")

    # Two topics from the subscriptions page: the session subscribes upstream.
    d.go("#/subscriptions")
    _subscribe(page, session["id"])
    with gw.api() as api:
        subs = {s["consumer"]: s for s in api.get("/v1/subscriptions").json()["data"]}
    sub = subs[CONSUMER]
    assert sub["topics"] == TOPICS and sub["session_id"] == session["id"]
    expect(page.locator(f'#subs-table tr[data-subscription="{sub["id"]}"]')).to_contain_text(
        SESSION
    )

    # A phone-sized tab from now on: its charts gather the whole run.
    phone = open_dashboard(gw.server, "phone")
    phone.open("#/sessions")
    phone_row = phone.page.locator(f'#sessions-table tr[data-session="{session["id"]}"]')

    # Connected, with messages coming in.
    d.go("#/sessions")
    expect(row.locator("[data-state]")).to_have_text("connected")
    expect(row.locator(".fig-rate")).to_have_text(NONZERO_RATE, timeout=STREAMING_MS)
    expect(row.locator(".fig-rtt")).to_have_text(re.compile(r"(µs|ms|s)$"), timeout=STREAMING_MS)
    expect(row.locator(".fig-gaps")).to_have_text("0")
    d.screenshot("sessions-real")
    expect(phone_row.locator("[data-state]")).to_have_text("connected")
    expect(phone_row.locator(".fig-rate")).to_have_text(NONZERO_RATE)
    phone.screenshot("sessions-real")
    assert phone.horizontal_overflow() == 0, "sessions scrolls sideways on a phone"

    # The overview: every figure of the DPDK port's engine and NIC, with units, moving;
    # lab mode (af_packet) readiness; the NICs view names the interface behind the port.
    d.go("#/overview")
    pid = gw.port["id"]
    port_row = page.locator(f'tr[data-port="{pid}"]')
    expect(port_row.locator(".fig-rx-pps")).to_have_text(PACKETS_PER_S, timeout=STREAMING_MS)
    expect(port_row.locator(".fig-tx-pps")).to_have_text(PACKETS_PER_S)
    expect(port_row.locator(".fig-rx-bps")).to_have_text(BYTES_PER_S)
    expect(port_row.locator(".fig-rx-dropped")).to_have_text(re.compile(r"^[\d.,]+[kMG]? packets$"))
    engine = page.locator(f'[data-engine="{pid}"]')
    expect(engine.locator('[data-figure="cpu"]')).to_have_text(PERCENT)
    expect(engine.locator('[data-figure="busy-polls"]')).to_have_text(PERCENT)
    expect(engine.locator('[data-figure="rx-to-ring-mean"]')).to_have_text(DURATION)
    expect(engine.locator('[data-figure="engine-path-split"]')).to_contain_text("% fast")
    expect(engine.locator('[data-figure="c_fast_bytes-rate"]')).to_have_text(BYTES_PER_S)
    nic = page.locator(f'[data-nic="{pid}"]')
    expect(nic.locator('[data-figure="link"]')).to_contain_text("up")
    received = nic.locator('[data-figure="nic-rx_bytes"]')
    expect(received).to_have_text(re.compile(r"^[\d.]+ (B|KiB|MiB|GiB) · "))
    before = received.text_content() or ""
    expect(received).not_to_have_text(before, timeout=STREAMING_MS)  # it keeps counting
    for heading in ("Engine", "Ports", "Dataplane load"):
        card = page.locator(
            "section.card", has=page.get_by_role("heading", name=heading, exact=True)
        )
        expect(card.locator(".not-reported")).to_have_count(0)
        assert "{" not in (card.text_content() or ""), f"raw JSON in the {heading} card"
    expect(page.locator("[data-mode]")).to_have_attribute("data-mode", "lab")
    expect(page.locator('[data-check="NICs bound to DPDK"]')).to_have_class(
        re.compile("check-info")
    )
    backing = page.locator(f'tr[data-nic="{gw.lab.gw_if}"]')
    expect(backing).to_contain_text(f"interface {gw.lab.gw_if}")
    expect(backing.locator(f'[data-port-in-use="{pid}"]')).to_contain_text("lab")
    d.screenshot("overview-real")

    # The live tail: the subscription's stream from the hub, growing.
    d.go(f"#/tail?subscription={sub['id']}")
    status = page.locator("#tail-status")
    expect(status).to_have_attribute("data-state", "open")
    log = page.locator("#tail-log li")
    expect(log.nth(9)).to_be_attached(timeout=STREAMING_MS)
    first = _tail_count(page)
    page.wait_for_timeout(1500)
    later = _tail_count(page)
    assert later > first > 0, (first, later)
    expect(status).to_contain_text(f"Streaming subscription #{sub['id']}")
    newest = log.first.locator("code").text_content() or ""
    assert any(f'"stream":"{topic}"' in newest for topic in TOPICS), newest
    d.screenshot("tail-real")

    # The phone tails it too (and keeps doing so: a consumer for the figures below).
    phone.go(f"#/tail?subscription={sub['id']}")
    expect(phone.page.locator("#tail-log li").nth(9)).to_be_attached(timeout=STREAMING_MS)
    phone.screenshot("tail-real")

    # The consumer's figures, from the real hub: one stream open, delivering.
    d.go("#/subscriptions")  # the laptop's tail closes
    sub_row = page.locator(f'#subs-table tr[data-subscription="{sub["id"]}"]')
    expect(sub_row.locator(".fig-connected")).to_have_text("1", timeout=STREAMING_MS)
    expect(sub_row.locator(".fig-delivered")).to_have_text(NONZERO_RATE, timeout=STREAMING_MS)
    expect(sub_row.locator(".fig-dropped")).to_have_text("0")
    # Per topic: the upstream's rate (session_topic_messages) and its one subscriber.
    for topic in TOPICS:
        topic_row = page.locator(f'#topics-table tr[data-topic="{topic}"]')
        expect(topic_row.locator(".fig-topic-rate")).to_have_text(NONZERO_RATE)
        expect(topic_row.locator(".fig-topic-total")).to_have_text(re.compile(r" msgs$"))
        expect(topic_row.locator(".fig-topic-subs")).to_have_text("1")
        expect(topic_row.locator(".fig-topic-streams")).to_have_text("1")

    # The messages/s chart moves: received, published and delivered.
    d.go("#/charts")
    figure = page.locator('figure[data-chart="Messages/s"]')
    chart = figure.locator("svg")
    for series in ("msgRate", "hubRate", "deliveredRate"):
        expect(chart.locator(f'path.line[data-series="{series}"]')).to_be_visible()
    before = (_points(chart), _received_path(chart))
    page.wait_for_timeout(2300)  # two poll intervals
    after = (_points(chart), _received_path(chart))
    assert after[0] >= before[0] + 2, (before[0], after[0])
    assert after[1] != before[1], "the messages/s line did not move"
    legend = figure.locator(".legend strong")
    expect(legend).to_have_count(3)
    for i in range(3):  # the newest values: all above zero
        expect(legend.nth(i)).to_have_text(re.compile(r"^(?!0$)[\d.,]+[kMG]?$"))
    d.screenshot("charts-real")

    phone.go("#/charts")
    phone_chart = phone.page.locator('figure[data-chart="Messages/s"] svg')
    expect(phone_chart.locator('path.line[data-series="deliveredRate"]')).to_be_visible()
    phone.page.wait_for_timeout(1200)  # a drawing at the phone's width
    phone.screenshot("charts-real")
    assert phone.horizontal_overflow() == 0, "charts scrolls sideways on a phone"

    # Stop it from the sessions page: wanted stopped, the runtime stops, no more messages.
    d.go("#/sessions")
    row.locator('button[data-action="stop"]').click()
    expect(row.locator("[data-desired]")).to_have_text("stopped")
    expect(row.locator("[data-state]")).to_have_text("stopped", timeout=STREAMING_MS)
    expect(row.locator('button[data-action="start"]')).to_be_visible()
    expect(row.locator(".fig-rate")).not_to_have_text(NONZERO_RATE, timeout=5000)
    with gw.api() as api:
        got = api.get(f"/v1/sessions/{session['id']}").json()
    assert got["desired_state"] == "stopped"
    assert got["status"]["state"] == "stopped", got["status"]
    d.screenshot("sessions-real-stopped")
    phone.go("#/overview")  # the phone's tail closes
    assert d.errors == [], d.errors
    assert phone.errors == [], phone.errors
    print(f"dashboard on the real gateway: {time.monotonic() - t0:.1f} s")


def _wait_for(check: Callable[[], bool], what: str, timeout: float = STREAMING_MS / 1000) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


def test_ring_readers_and_prometheus_history_of_the_real_gateway(
    real_gateway: RealGateway, open_dashboard: Callable[..., Dashboard]
) -> None:
    """The DPDK engine feeds the ring: a reader in another process that reads nothing shows
    on the Consumers page with a growing lag, and is closed from there (its next read
    raises RingEvictedError); a real Prometheus scraping the gateway answers the Charts
    page's 15 min range with the messages the DPDK session received."""
    gw = real_gateway
    with gw.api() as api:
        session = api.post(
            "/v1/sessions",
            json={
                "name": SESSION,
                "url": gw.sim_url,
                "dialect": "binance",
                "transport": "dpdk",
                "port_id": gw.port["id"],
            },
        ).json()
        assert api.post(f"/v1/sessions/{session['id']}/start").status_code == 200
        r = api.post(
            "/v1/subscriptions",
            json={"session_id": session["id"], "topics": TOPICS, "consumer": CONSUMER},
        )
        assert r.status_code < 400, r.text

        def connected() -> bool:
            status = api.get(f"/v1/sessions/{session['id']}").json()["status"]
            return bool(status["state"] == "connected")

        _wait_for(connected, "the DPDK session to connect")
    hub = app_hub(gw.server.app)
    assert hub is not None and hub.ring is not None
    ring = str(hub.ring.path)
    with (
        IdleReader(ring, "lab-reader") as reader,
        running_prometheus([gw.server.url.removeprefix("http://")]) as prometheus,
    ):
        settings = gw.server.app.state.settings
        gw.server.app.state.settings = settings.model_copy(
            update={"api": settings.api.model_copy(update={"prometheus_url": prometheus})}
        )
        d = open_dashboard(gw.server)
        page = d.page
        d.open("#/consumers")
        row = page.locator(f'#ring-readers tr[data-pid="{reader.pid}"]')
        expect(row.locator('[data-label="Reader"]')).to_have_text("lab-reader")
        lag = row.locator('[data-label="Lag"]')
        expect(lag).to_have_text(re.compile(r"^[1-9][\d,]* msg$"), timeout=STREAMING_MS)
        first = lag.text_content()
        expect(lag).not_to_have_text(first or "", timeout=STREAMING_MS)  # the feed goes on
        expect(row.locator('[data-label="Dropped"]')).to_have_text("0 msg")
        d.screenshot("consumers-real")
        close = row.locator('button[data-action="close-reader"]')
        close.click()
        close.click()
        expect(row.locator("[data-closing]")).to_be_visible()
        assert reader.read_until_evicted().startswith("evicted: ")
        expect(row).to_have_count(0)

        # rate() needs two scrapes in its window: points 5 s apart, a few of them
        wait_for_samples(prometheus, "wsgw_dataplane_session_messages_total", 15)
        d.go("#/charts")
        page.locator("#chart-ranges").get_by_role("button", name="15 min").click()
        info = page.locator("#charts-info")
        expect(info).to_contain_text("The gateway's history from Prometheus")
        chart = page.locator('figure[data-chart="Messages/s"] svg')
        line = chart.locator('path.line[data-series="msgRate"]')
        expect(line).to_have_attribute("d", re.compile(r"^M[\d.,]+L"))  # a line, not a dot
        legend = page.locator('figure[data-chart="Messages/s"] .legend strong').first
        expect(legend).to_have_text(re.compile(r"^(?!0$)[\d.,]+[kMG]?$"), timeout=20_000)
        d.screenshot("charts-prometheus-real")
        assert d.errors == [], d.errors

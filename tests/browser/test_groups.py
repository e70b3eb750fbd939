"""The Groups page against a real feed group: the feed simulator as a process on loopback
(its feed group, legs A and B), a LiveRuntime with the hub and its ring, two kernel legs and
their group made through the REST API. From the browser: the group's card with both legs,
their states and figures (won, late, lag p50/p99, downs), the figures moving while the
stream flows, a leg's reset counted; the empty page; the page at phone size. Screenshots go
to tests/browser/artifacts/groups-*.png."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from dataplane.ring import RingWriter
from gateway.hub import Hub
from gateway.runtime import SessionSpec
from gateway.runtime.live import LiveRuntime
from gateway.sessions import SessionConfig
from gateway.sessions.config import ReconnectPolicy
from gateway.simulator import with_group
from gateway.simulator.process import start_simulator
from tests.browser.conftest import Dashboard, Server, StartServer
from wsgw_bench.servers import free_port

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
expect = sync_api.expect

GROUP = "g"
TOPIC = "btcusdt@trade"
RATE = 200.0  # messages/s
COUNT = re.compile(r"^[\d.,]+[kMG]?")
DURATION = re.compile(r"^[\d.]+ (µs|ms|s)$")


def leg_config(spec: SessionSpec) -> SessionConfig:
    return SessionConfig.from_spec(
        spec, reconnect=ReconnectPolicy(initial_delay_s=0.05, max_delay_s=0.5)
    )


@dataclass
class GroupGateway:
    server: Server
    sim: subprocess.Popen[str]
    group: dict[str, Any]

    def reset(self, leg: str) -> None:
        assert self.sim.stdin is not None
        self.sim.stdin.write(f"fault reset target=leg:{GROUP}/{leg}\n")
        self.sim.stdin.flush()


@pytest.fixture(scope="module")
def group_gateway(start_server: StartServer) -> Iterator[GroupGateway]:
    port = free_port()
    sim = start_simulator(None, port, RATE, stdin=True)
    ring = RingWriter.create(None, 1 << 22)
    hub = Hub(ring=ring)
    runtime = LiveRuntime(hub, hub=hub, session_config=leg_config)
    server = start_server(runtime)
    try:
        with server.client() as api:

            def post(path: str, body: dict[str, Any] | None = None) -> Any:
                response = api.post(path, json=body)
                assert response.status_code < 400, response.text
                return response.json()

            legs = []
            for leg in ("A", "B"):
                url = with_group(f"ws://127.0.0.1:{port}/binance/stream", GROUP, leg)
                body = {
                    "name": f"leg-{leg}",
                    "url": url,
                    "dialect": "binance",
                    "transport": "kernel",
                }
                legs.append(post("/v1/sessions", body)["id"])
            group = post("/v1/groups", {"name": "btc-ab", "legs": legs})
            for sid in legs:
                post("/v1/subscriptions", {"session_id": sid, "topics": [TOPIC], "consumer": "c"})
                post(f"/v1/sessions/{sid}/start")
        yield GroupGateway(server, sim, group)
    finally:
        server.stop()  # the lifespan closes the runtime (its sessions) and the hub
        ring.close()
        sim.kill()
        sim.wait()
        for pipe in (sim.stdin, sim.stdout):
            if pipe is not None:
                pipe.close()


def figure(dash: Dashboard, leg: int, name: str) -> str:
    cell = dash.page.locator(f'.group-legs tr[data-leg="{leg}"] [data-figure="{name}"]')
    return str(cell.inner_text()).strip()


def count(text: str) -> float:
    """'1.2k (48 %)' -> 1200."""
    match = COUNT.match(text)
    assert match, f"not a count: {text!r}"
    number = match.group(0)
    scale = {"k": 1e3, "M": 1e6, "G": 1e9}.get(number[-1], 1.0)
    return float(number.rstrip("kMG").replace(",", "")) * scale


def test_a_group_with_its_legs_and_figures_that_move(
    group_gateway: GroupGateway, open_dashboard: Callable[..., Dashboard]
) -> None:
    dash = open_dashboard(group_gateway.server)
    dash.login()
    group_id = group_gateway.group["id"]
    card = dash.page.locator(f"#group-{group_id}")
    dash.check_page("groups", "#/groups", f"#group-{group_id} .group-legs tbody tr")
    expect(card.locator("h2")).to_contain_text("btc-ab")
    rows = card.locator(".group-legs tbody tr")
    expect(rows).to_have_count(2)
    for leg, name in ((0, "leg-A"), (1, "leg-B")):
        row = card.locator(f'tr[data-leg="{leg}"]')
        expect(row).to_contain_text(name)
        expect(row.locator('[data-state="connected"]')).to_be_visible(timeout=30_000)
    # Both legs bring every message: each wins some, brings the rest late, and lags.
    for leg in (0, 1):
        expect(card.locator(f'tr[data-leg="{leg}"] [data-figure="lag-p99"]')).to_have_text(
            DURATION, timeout=30_000
        )

    def snapshot() -> list[float]:
        """Each leg's arrivals (won + late), then the group's deliveries."""
        legs = [
            count(figure(dash, leg, "won")) + count(figure(dash, leg, "late")) for leg in (0, 1)
        ]
        return [*legs, count(card.locator('[data-figure="delivered"]').inner_text())]

    first = snapshot()
    assert all(n > 0 for n in first)
    assert card.locator('[data-figure="gaps"]').inner_text() == "none"
    waited_ms = 0
    while not all(b > a for a, b in zip(first, snapshot(), strict=True)):
        assert waited_ms < 15_000, f"the figures did not move: {first} -> {snapshot()}"
        dash.page.wait_for_timeout(500)
        waited_ms += 500

    downs_cell = card.locator('tr[data-leg="0"] td[data-label="Downs"]')
    downs = int(downs_cell.inner_text())
    group_gateway.reset("A")
    expect(downs_cell).not_to_have_text(str(downs), timeout=15_000)
    expect(card.locator('tr[data-leg="0"] [data-state="connected"]')).to_be_visible(timeout=30_000)
    dash.screenshot("groups")
    assert dash.errors == []


def test_the_page_fits_a_phone(
    group_gateway: GroupGateway, open_dashboard: Callable[..., Dashboard]
) -> None:
    dash = open_dashboard(group_gateway.server, "phone")
    dash.login()
    group_id = group_gateway.group["id"]
    dash.check_page("groups", "#/groups", f"#group-{group_id} .group-legs tbody tr", 500)
    assert dash.errors == []


def test_no_group_says_how_to_make_one(
    start_server: StartServer, open_dashboard: Callable[..., Dashboard]
) -> None:
    server = start_server()
    dash = open_dashboard(server)
    dash.login()
    dash.go("#/groups")
    expect(dash.page.locator("#groups-empty")).to_be_visible()
    expect(dash.page.locator("#groups-empty")).to_contain_text("POST /v1/groups")
    expect(dash.page.locator("#nav a[data-page=groups]")).to_have_class(re.compile("active"))
    assert dash.errors == []

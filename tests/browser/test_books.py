"""The Books page against a real gateway: the feed simulator (a child process) -> a kernel
Kraken session with a normalized book subscription -> the BookManager on the hub ring.
The page shows the book's depth ladder (the simulator's own top levels, asks above bids),
the spread and an update rate; after a wrong checksum in the simulator, the resync by
reason. Also at phone width, without sideways scrolling."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from decimal import Decimal

import pytest

from dataplane.ring import RingWriter
from gateway.hub import Hub
from gateway.runtime.live import LiveRuntime
from tests.browser.conftest import Dashboard, Server, StartServer
from tests.integration.test_books_sim import VENUES, SimProcess, session_config, sim_book, start_sim

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
expect = sync_api.expect
KRAKEN = VENUES["kraken"]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    from tests.integration.test_books_sim import free_port

    with start_sim(None, free_port()) as proc:
        yield proc


@pytest.fixture(scope="module")
def gateway(start_server: StartServer) -> Iterator[Server]:
    ring = RingWriter.create(None, 1 << 22)
    hub = Hub(ring=ring)
    runtime = LiveRuntime(hub, hub=hub, session_config=session_config)
    server = start_server(runtime)
    try:
        yield server
    finally:
        server.stop()  # its lifespan shuts the control plane down: books, runtime, hub
        ring.close()


def until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_book_view_shows_the_ladder_spread_rate_and_resyncs(
    gateway: Server, sim: SimProcess, open_dashboard: Callable[..., Dashboard]
) -> None:
    sim.emit(KRAKEN, 50)
    with gateway.client() as api:
        session = api.post(
            "/v1/sessions",
            json={"name": "kr", "url": sim.url(KRAKEN), "dialect": "kraken",
                  "transport": "kernel"},
        ).json()  # fmt: skip
        sid = session["id"]
        r = api.post(
            "/v1/subscriptions",
            json={"session_id": sid, "topics": [KRAKEN.topic], "consumer": "ui",
                  "format": "normalized"},
        )  # fmt: skip
        assert r.status_code == 201, r.text
        assert api.post(f"/v1/sessions/{sid}/start").status_code < 300
        until(lambda: sim.subscribers(KRAKEN) > 0, "the subscription")
        seq = sim.emit(KRAKEN, 10)
        want_bids, want_asks = sim_book(KRAKEN, seq)

        def synced() -> bool:
            got = api.get(f"/v1/books/{sid}/{KRAKEN.symbol}")
            return got.status_code == 200 and got.json()["asks"] == want_asks

        until(synced, "the gateway's book")
        assert api.get(f"/v1/books/{sid}").json()["symbols"] == [KRAKEN.symbol]

        d = open_dashboard(gateway)
        d.login()
        d.page.locator("#nav").get_by_role("link", name="Books").click()
        page = d.page
        ladder = page.locator("#books-ladder")
        expect(ladder.locator("tr[data-side=ask]")).to_have_count(10)  # Kraken shows 10
        expect(ladder.locator("tr[data-side=bid]")).to_have_count(10)
        prices = ladder.locator("td.book-price").all_inner_texts()
        assert prices == [p for p, _ in reversed(want_asks)] + [p for p, _ in want_bids]
        spread = Decimal(want_asks[0][0]) - Decimal(want_bids[0][0])
        expect(page.locator("#books-spread")).to_contain_text(str(spread))
        expect(page.locator("#books-resyncs")).to_contain_text("None")

        # Updates flow: the rate is measured; a wrong checksum shows as a resync.
        sim.command(cmd="fault", kind="checksum")
        for _ in range(10):
            sim.emit(KRAKEN, 2)
            time.sleep(0.2)
        expect(page.locator("#books-rate")).to_contain_text("/s")
        expect(page.locator("#books-resyncs [data-reason=checksum]")).to_have_text("1")
        expect(page.locator("#books-resyncs")).to_contain_text("Last reset")
        d.check_page("books", "#/books", "#books-ladder tr[data-side=bid]")
        assert d.errors == []

        phone = open_dashboard(gateway, "phone")
        phone.login()
        phone.check_page("books", f"#/books?session={sid}&symbol=BTC/USD", "#books-ladder tr")
        assert phone.errors == []

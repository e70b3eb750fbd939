"""The Consumers page against a real hub on a named ring: an open /v1/stream consumer is
listed with its session and topics, the operator closes it from the page (the client sees
1008 naming the operator); a ring reader in another process shows in the reader table with
its name and lag, and the operator closes it from the page (its next read raises
RingEvictedError); a consume token gets neither the page nor the route."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import orjson
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from dataplane.ring import RingWriter, ring_path
from gateway.hub import Hub
from tests.browser.conftest import Dashboard, Server, StartServer
from tests.utils.consumers import IdleReader

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
expect = sync_api.expect


@pytest.fixture(scope="module")
def hubbed(start_server: StartServer) -> Iterator[tuple[Server, str]]:
    """A control plane with a hub attached (as an engine-backed runtime would have)."""
    ring = f"wsgw-browser-consumers-{os.getpid()}"
    hub = Hub(ring=RingWriter.create(ring, 1 << 20, replace=True))
    server = start_server()
    server.app.state.hub = hub
    try:
        yield server, ring
    finally:
        server.stop()
        hub.close()
        ring_path(ring).unlink(missing_ok=True)


def test_a_stream_is_listed_and_closed_from_the_page(
    hubbed: tuple[Server, str], open_dashboard: Callable[..., Dashboard]
) -> None:
    server, ring = hubbed
    with server.client() as api:
        session = api.post(
            "/v1/sessions",
            json={
                "name": "feed-a",
                "url": "wss://feed.example.com/ws",
                "dialect": "generic",
                "transport": "kernel",
            },
        ).json()
    ws_url = server.url.replace("http", "ws", 1)
    query = f"session={session['id']}&topics=t1,t2&consumer=pricer-9&envelope=1"
    d = open_dashboard(server)
    with (
        IdleReader(ring, "risk-7") as reader,
        connect(
            f"{ws_url}/v1/stream?{query}",
            additional_headers={"Authorization": f"Bearer {server.token}"},
        ) as ws,
    ):
        assert orjson.loads(ws.recv(timeout=10))["type"] == "subscribed"
        d.login()
        d.page.locator("#nav").get_by_role("link", name="Consumers").click()
        row = d.page.locator('#consumers-table tr[data-name="pricer-9"]')
        expect(row).to_contain_text("t1, t2")
        expect(row.locator('[data-label="Session"]')).to_contain_text(str(session["id"]))
        expect(row.locator('[data-label="Lag"]')).to_contain_text("0 / 4,096 msg")
        expect(d.page.locator("#consumers-ring")).to_contain_text(str(ring_path(ring)))
        expect(d.page.locator('#ring-followers tr[data-kind="stream"]')).to_have_count(1)
        hub_ring = server.app.state.hub.ring
        for i in range(7):
            hub_ring.write(1, 0, b"tick %d" % i)
        ring_row = d.page.locator(f'#ring-readers tr[data-pid="{reader.pid}"]')
        expect(ring_row.locator('[data-label="Reader"]')).to_have_text("risk-7")
        expect(ring_row.locator('[data-label="Lag"]')).to_have_text("7 msg")
        expect(ring_row.locator('[data-label="Dropped"]')).to_have_text("0 msg")
        expect(d.page.locator(f'#ring-processes tr[data-pid="{reader.pid}"]')).to_have_count(0)
        # the stream's follower: listed as the gateway's own, with no Close
        own = d.page.locator(f'#ring-readers tr[data-pid="{os.getpid()}"]')
        expect(own.first).to_contain_text("(gateway)")
        expect(own.locator('button[data-action="close-reader"]')).to_have_count(0)
        expect(d.page.locator("#consumers-nats")).to_contain_text("Not configured")
        d.screenshot("consumers")

        close = row.locator('button[data-action="close"]')
        close.click()
        expect(close).to_have_text("Confirm close")
        close.click()
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd is not None
        assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (
            1008,
            "closed by operator 'browser'",
        )
        expect(d.page.locator("#consumers-table tbody tr")).to_have_count(0)
        expect(d.page.locator("#consumers-empty")).to_have_text("No open stream.")

        close_reader = ring_row.locator('button[data-action="close-reader"]')
        close_reader.click()
        expect(close_reader).to_have_text("Confirm close")
        close_reader.click()
        expect(ring_row.locator("[data-closing]")).to_be_visible()
        assert reader.read_until_evicted().startswith("evicted: ")
        expect(ring_row).to_have_count(0)
    assert d.errors == [], d.errors

    phone = open_dashboard(server, "phone")
    phone.login()
    phone.go("#/consumers")
    expect(phone.page.locator("#consumers-ring")).to_contain_text("Capacity")
    assert phone.horizontal_overflow() == 0, "consumers scrolls sideways on a phone"
    assert phone.errors == [], phone.errors


def test_a_consume_token_gets_no_consumers_page(
    hubbed: tuple[Server, str], open_dashboard: Callable[..., Dashboard]
) -> None:
    server, _ = hubbed
    secret = server.create_token("reader-only", ["consume"])
    d = open_dashboard(server)
    d.login(secret)
    expect(d.page.locator("#nav").get_by_role("link", name="Consumers")).to_be_hidden()
    d.go("#/consumers")
    expect(d.page.locator("#view")).to_contain_text("needs the 'admin' scope")
    with server.client(secret) as api:
        assert api.get("/v1/consumers").status_code == 403
        assert api.delete("/v1/consumers/1").status_code == 403
    assert d.errors == [], d.errors

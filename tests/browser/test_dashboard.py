"""The dashboard against the control plane as it ships today (DetachedRuntime, token auth):
login, every page at laptop and phone size, the session form, start/stop, validation
errors, the live tail's close reason and the charts."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from gateway.runtime import DetachedRuntime
from tests.browser.conftest import Dashboard, Server, StartServer

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
expect = sync_api.expect

PRESET_URLS = {
    "binance": "wss://stream.binance.com:9443/stream",
    "coinbase": "wss://ws-feed.exchange.coinbase.com",
    "kraken": "wss://ws.kraken.com/v2",
    "okx": "wss://ws.okx.com:8443/ws/v5/public",
    "bybit": "wss://stream.bybit.com/v5/public/spot",
    "bitstamp": "wss://ws.bitstamp.net",
    "generic": "",
}
NO_HUB = "no fan-out hub is attached to this control plane yet"


@pytest.fixture(scope="module")
def seeded(server: Server) -> dict[str, Any]:
    """A port, a session on it and a subscription, so no page is empty."""
    with server.client() as api:
        port = api.post(
            "/v1/ports",
            json={
                "name": "lab0",
                "device": "net_af_packet0,iface=wsgw0",
                "ipv4": "198.18.7.2",
                "netmask": "255.255.255.0",
                "gateway": "198.18.7.1",
            },
        ).json()
        session = api.post(
            "/v1/sessions",
            json={
                "name": "seed-binance",
                "url": PRESET_URLS["binance"],
                "dialect": "binance",
                "transport": "dpdk",
                "port_id": port["id"],
            },
        ).json()
        sub = api.post(
            "/v1/subscriptions",
            json={
                "session_id": session["id"],
                "topics": ["btcusdt@trade", "ethusdt@trade"],
                "consumer": "pricer-1",
            },
        ).json()
    return {"port": port, "session": session, "subscription": sub}


def page_markers(seeded: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(name, hash route, a selector that shows the page has loaded its data)."""
    sid = seeded["session"]["id"]
    sub = seeded["subscription"]["id"]
    return [
        ("overview", "#/overview", '[data-check="Hugepages"]'),
        ("sessions", "#/sessions", f'#sessions-table tr[data-session="{sid}"]'),
        ("session", f"#/sessions/{sid}", "#events-table tbody tr"),
        ("subscriptions", "#/subscriptions", f'#subs-table tr[data-subscription="{sub}"]'),
        ("tail", f"#/tail?subscription={sub}", '#tail-status[data-state="reconnecting"]'),
        ("charts", "#/charts", 'figure[data-chart="API requests/s"] path.line'),
    ]


def test_login_refuses_a_bad_token_then_signs_in(
    server: Server, open_dashboard: Callable[..., Dashboard]
) -> None:
    d = open_dashboard(server)
    d.open()
    page = d.page
    expect(page.get_by_role("heading", name="Sign in to wsgw")).to_be_visible()
    expect(page.locator("#nav")).to_be_hidden()
    page.locator("input[name=token]").fill("wsgw_not-a-real-token")
    page.get_by_role("button", name="Sign in").click()
    error = page.locator('[data-error-for="token"]')
    expect(error).to_be_visible()
    expect(error).to_contain_text("invalid or revoked token")

    page.locator("input[name=token]").fill(server.token or "")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#nav")).to_be_visible()
    expect(page.locator("#who")).to_have_text("browser")
    assert page.evaluate("sessionStorage.getItem('wsgw.token')") == server.token
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    d.screenshot("login-done")

    page.reload()  # the token survives a reload of the tab
    expect(page.locator("#nav")).to_be_visible()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in to wsgw")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('wsgw.token')") is None


def test_login_page_screenshots(server: Server, open_dashboard: Callable[..., Dashboard]) -> None:
    for viewport in ("laptop", "phone"):
        d = open_dashboard(server, viewport)
        d.open()
        expect(d.page.locator("input[name=token]")).to_be_focused()
        assert d.horizontal_overflow() == 0
        d.screenshot("login")
        assert d.errors == []


@pytest.mark.parametrize("viewport", ["laptop", "phone"])
def test_every_page_loads_without_console_errors(
    server: Server,
    seeded: dict[str, Any],
    open_dashboard: Callable[..., Dashboard],
    viewport: str,
) -> None:
    d = open_dashboard(server, viewport)
    d.login()
    for name, route, marker in page_markers(seeded):
        d.check_page(name, route, marker)
    assert d.errors == [], d.errors


def test_overview_says_what_is_and_is_not_reported(
    server: Server, seeded: dict[str, Any], dash: Dashboard
) -> None:
    page = dash.page
    engine = page.locator("section.card", has=page.get_by_role("heading", name="Engine"))
    expect(engine.locator("[data-state]").first).to_have_text("detached")
    expect(engine).to_contain_text("dataplane not attached")
    load = page.locator("section.card", has=page.get_by_role("heading", name="Dataplane load"))
    expect(load.locator(".not-reported")).to_have_count(3)  # lcores, path split, msgs/s
    hugepages = page.locator('[data-check="Hugepages"]')
    expect(hugepages).to_contain_text("512 \u00d7 2.0 MiB (500 free)")  # x: multiplication sign
    expect(hugepages).to_have_class(re.compile("check-ok"))
    expect(page.locator('[data-check="Isolated CPUs"]')).to_contain_text("1 of 0-1")
    # The only port is an af_packet one: lab mode, where a DPDK-bound NIC is not needed.
    expect(page.locator("[data-mode]")).to_have_attribute("data-mode", "lab")
    bound = page.locator('[data-check="NICs bound to DPDK"]')
    expect(bound).to_have_class(re.compile("check-info"))
    expect(bound).to_contain_text("not needed: lab0 reads wsgw0 through the kernel")
    ports = page.locator("section.card", has=page.get_by_role("heading", name="Ports"))
    expect(ports).to_contain_text("lab0")
    expect(ports.locator("[data-state]").first).to_have_text("configured")
    expect(ports.locator(".not-reported").first).to_be_visible()  # no packet counters yet
    nics = page.locator("section.card", has=page.get_by_role("heading", name="NICs"))
    expect(nics).to_contain_text("the default route")
    # The port's interface is no PCI device: listed as a virtual NIC, with its port.
    veth = nics.locator('tr[data-nic="wsgw0"]')
    expect(veth).to_contain_text("interface wsgw0")
    expect(veth.locator(f'[data-port-in-use="{seeded["port"]["id"]}"]')).to_contain_text("lab0")


def test_readiness_of_a_production_host_names_what_is_missing(
    start_server: StartServer, open_dashboard: Callable[..., Dashboard]
) -> None:
    """A port on a PCI NIC: production mode, where the NIC must be bound to DPDK (the fake
    host's 0000:03:00.0 is not) and an IOMMU is needed; the NICs view shows which NIC backs
    the port."""
    server = start_server()
    with server.client() as api:
        port = api.post(
            "/v1/ports",
            json={
                "name": "wan0",
                "device": "03:00.0",
                "ipv4": "198.18.8.2",
                "netmask": "255.255.255.0",
            },
        ).json()
    d = open_dashboard(server)
    d.login()
    page = d.page
    expect(page.locator("[data-mode]")).to_have_attribute("data-mode", "production")
    expect(page.locator("[data-mode]")).to_contain_text("vfio-pci")
    bound = page.locator('[data-check="NICs bound to DPDK"]')
    expect(bound).to_have_class(re.compile("check-bad"))
    expect(bound).to_contain_text("1 bindable: 0000:03:00.0")
    expect(page.locator('[data-check="Hugepages"]')).to_have_class(re.compile("check-ok"))
    nic = page.locator('tr[data-nic="0000:03:00.0"]')
    expect(nic.locator(f'[data-port-in-use="{port["id"]}"]')).to_contain_text("wan0")
    expect(page.locator('tr[data-nic="0000:00:03.0"]')).to_contain_text("none")
    d.screenshot("overview-production")
    assert d.errors == [], d.errors


def test_host_cards_load_again_as_soon_as_the_api_answers(server: Server, dash: Dashboard) -> None:
    """/v1/host unreachable (aborted here, as a restarting API would be): the cards say so;
    the API answers again: they load at the next answered request, not 30 s later."""
    page = dash.page
    dash.go("#/charts")
    page.route(re.compile(r"/v1/host"), lambda route: route.abort())
    dash.go("#/overview")
    host = page.locator("section.card", has=page.get_by_role("heading", name="Host readiness"))
    expect(host.locator(".error-text")).to_contain_text("/v1/host")
    page.unroute(re.compile(r"/v1/host"))
    expect(page.locator('[data-check="Hugepages"]')).to_be_visible(timeout=10_000)
    expect(host.locator(".error-text")).to_have_count(0)


def _open_form(dash: Dashboard, route: str, table: str, card: str, form: str) -> Any:
    """The page at `route`, loaded (its `table` has rows), with the `card` form open."""
    dash.go(route)
    expect(dash.page.locator(f"{table} tbody tr").first).to_be_visible()
    return dash.open_card(card, form)


def _open_session_form(dash: Dashboard) -> Any:
    return _open_form(dash, "#/sessions", "#sessions-table", "#new-session", "#session-form")


def test_create_a_session_from_the_form(
    server: Server, seeded: dict[str, Any], dash: Dashboard
) -> None:
    page = dash.page
    form = _open_session_form(dash)
    dialects = form.locator("select[name=dialect] option").evaluate_all(
        "options => options.map(o => o.value)"
    )
    assert set(PRESET_URLS) <= set(dialects)
    for dialect, url in PRESET_URLS.items():  # each preset fills its exchange's endpoint
        form.locator("select[name=dialect]").select_option(dialect)
        expect(form.locator("input[name=url]")).to_have_value(url)
    form.locator("select[name=dialect]").select_option("okx")
    expect(form.locator("input[name=name]")).to_have_value("okx")
    form.locator("input[name=name]").fill("okx-from-form")
    form.locator("select[name=transport]").select_option("kernel")
    expect(form.locator('[data-field="port_id"]')).to_be_hidden()
    form.get_by_role("button", name="Create session").click()
    row = page.locator('#sessions-table tr[data-name="okx-from-form"]')
    expect(row).to_be_visible()
    expect(row).to_contain_text("okx · kernel")
    expect(page.locator(".success")).to_contain_text("Session 'okx-from-form' created")

    # dpdk: the port is picked from the configured ones.
    form.locator("select[name=dialect]").select_option("kraken")
    form.locator("input[name=name]").fill("kraken-dpdk")
    form.locator("select[name=transport]").select_option("dpdk")
    expect(form.locator('[data-field="port_id"]')).to_be_visible()
    form.locator("select[name=port_id]").select_option(str(seeded["port"]["id"]))
    form.get_by_role("button", name="Create session").click()
    expect(page.locator('#sessions-table tr[data-name="kraken-dpdk"]')).to_contain_text(
        "kraken · dpdk on lab0"
    )

    with server.client() as api:
        rows = {s["name"]: s for s in api.get("/v1/sessions").json()["data"]}
    assert rows["okx-from-form"]["url"] == PRESET_URLS["okx"]
    assert rows["okx-from-form"]["transport"] == "kernel"
    assert rows["okx-from-form"]["desired_state"] == "stopped"
    assert rows["kraken-dpdk"]["port_id"] == seeded["port"]["id"]
    assert rows["kraken-dpdk"]["url"] == PRESET_URLS["kraken"]
    dash.screenshot("sessions-created")
    assert dash.errors == []


def test_start_and_stop_buttons_change_the_wanted_state(server: Server, dash: Dashboard) -> None:
    with server.client() as api:
        session = api.post(
            "/v1/sessions",
            json={
                "name": "start-stop",
                "url": "wss://feed.example.com/ws",
                "dialect": "generic",
                "transport": "kernel",
            },
        ).json()
    page = dash.page
    dash.go("#/sessions")
    row = page.locator(f'#sessions-table tr[data-session="{session["id"]}"]')
    expect(row.locator("[data-desired]")).to_have_text("stopped")
    row.locator('button[data-action="start"]').click()
    expect(row.locator("[data-desired]")).to_have_text("running")
    with server.client() as api:
        assert api.get(f"/v1/sessions/{session['id']}").json()["desired_state"] == "running"
    expect(row.locator("[data-state]")).to_have_text("configured")  # nothing connects it
    expect(row).to_contain_text("dataplane not attached")
    expect(page.locator(".notice")).to_contain_text("Dataplane detached")

    row.locator('button[data-action="stop"]').click()
    expect(row.locator("[data-desired]")).to_have_text("stopped")
    with server.client() as api:
        assert api.get(f"/v1/sessions/{session['id']}").json()["desired_state"] == "stopped"
    assert isinstance(server.runtime, DetachedRuntime)
    kinds = [c[0] for c in server.runtime.calls if c[0] in ("start_session", "stop_session")]
    assert kinds[-2:] == ["start_session", "stop_session"]

    # The detail view shows the event log, newest first, and has the same buttons.
    row.get_by_role("link", name="start-stop").click()
    events = page.locator("#events-table tbody tr")
    expect(events.first).to_have_attribute("data-kind", re.compile("stop_requested|state"))
    expect(page.locator('#events-table tr[data-kind="start_requested"]')).to_have_count(1)
    page.locator('button[data-action="start"]').click()
    expect(page.locator('button[data-action="stop"]')).to_be_visible()
    expect(page.locator('#events-table tr[data-kind="start_requested"]')).to_have_count(2)
    dash.screenshot("session-detail")
    assert dash.errors == []


def test_validation_errors_are_shown_next_to_their_field(
    server: Server, seeded: dict[str, Any], dash: Dashboard
) -> None:
    form = _open_session_form(dash)
    form.locator("select[name=dialect]").select_option("generic")
    form.locator("input[name=name]").fill("bad name!")
    form.locator("input[name=url]").fill("http://feed.example.com/ws")
    form.get_by_role("button", name="Create session").click()
    url_error = form.locator('[data-error-for="url"]')
    expect(url_error).to_be_visible()
    expect(url_error).to_contain_text("must start with ws:// or wss://")
    expect(form.locator("input[name=url]")).to_have_attribute("aria-invalid", "true")
    expect(form.locator('[data-error-for="name"]')).to_contain_text("must be 1-64 letters")
    dash.screenshot("session-form-errors")

    # A check of the service (not the schema) lands on its field too.
    form.locator("input[name=name]").fill("generic-dpdk")
    form.locator("input[name=url]").fill("wss://feed.example.com/ws")
    form.locator("select[name=transport]").select_option("dpdk")
    form.get_by_role("button", name="Create session").click()
    expect(form.locator('[data-error-for="port_id"]')).to_contain_text("needs port_id")
    expect(url_error).to_be_hidden()

    # A field inside the folded "Advanced" part is unfolded to show its error.
    form.locator("select[name=transport]").select_option("kernel")
    advanced = form.locator("details.advanced > summary")
    advanced.click()
    form.locator("input[name=heartbeat_interval_s]").fill("20")
    form.locator("input[name=heartbeat_timeout_s]").fill("10")
    advanced.click()  # folded again
    expect(form.locator("input[name=heartbeat_timeout_s]")).to_be_hidden()
    form.get_by_role("button", name="Create session").click()
    timeout_error = form.locator('[data-error-for="heartbeat_timeout_s"]')
    expect(timeout_error).to_be_visible()
    expect(timeout_error).to_contain_text("must exceed heartbeat_interval_s")

    # A conflict (409) has no field: it is shown at the top of the form.
    form.locator("input[name=heartbeat_timeout_s]").fill("")
    form.locator("input[name=heartbeat_interval_s]").fill("")
    form.locator("input[name=name]").fill(seeded["session"]["name"])
    form.get_by_role("button", name="Create session").click()
    expect(form.locator(".form-error")).to_be_visible()
    expect(form.locator(".form-error")).to_contain_text("409")
    with server.client() as api:
        names = [s["name"] for s in api.get("/v1/sessions").json()["data"]]
    assert "generic-dpdk" not in names
    assert "bad name!" not in names


def test_subscribe_and_unsubscribe_from_the_page(
    server: Server, seeded: dict[str, Any], dash: Dashboard
) -> None:
    page = dash.page
    form = _open_form(
        dash, "#/subscriptions", "#subs-table", "#new-subscription", "#subscription-form"
    )
    form.locator("select[name=session_id]").select_option(str(seeded["session"]["id"]))
    expect(form.locator("textarea[name=topics]")).to_have_attribute(
        "placeholder", "btcusdt@trade ethusdt@trade"
    )  # the session's dialect suggests its topics
    form.locator("input[name=consumer]").fill("ui-consumer")
    form.locator("textarea[name=topics]").fill("solusdt@trade, solusdt@trade")
    form.get_by_role("button", name="Subscribe").click()
    expect(form.locator('[data-error-for="topics"]')).to_contain_text("listed twice")
    form.locator("textarea[name=topics]").fill("solusdt@trade\nadausdt@trade")
    form.get_by_role("button", name="Subscribe").click()
    expect(page.locator(".success")).to_contain_text("Subscribed upstream: solusdt@trade")
    with server.client() as api:
        subs = {s["consumer"]: s for s in api.get("/v1/subscriptions").json()["data"]}
    created = subs["ui-consumer"]
    assert created["topics"] == ["solusdt@trade", "adausdt@trade"]
    row = page.locator(f'#subs-table tr[data-subscription="{created["id"]}"]')
    expect(row).to_contain_text("ui-consumer")
    expect(row.locator(".fig-lag .not-reported")).to_be_visible()  # no hub: no figures

    delete = row.locator('button[data-action="delete"]')
    delete.click()
    expect(delete).to_have_text("Confirm delete")  # a second click deletes
    delete.click()
    expect(row).to_have_count(0)
    with server.client() as api:
        assert api.get(f"/v1/subscriptions/{created['id']}").status_code == 404


def retry_attempt(note: str) -> int:
    """The attempt number in the tail's "Reconnecting in 0.5 s (attempt 1)..." note."""
    found = re.search(r"\(attempt (\d+)\)", note)
    assert found is not None, note
    return int(found.group(1))


def test_live_tail_shows_the_close_code_and_reason(
    server: Server, seeded: dict[str, Any], dash: Dashboard
) -> None:
    page = dash.page
    sub = seeded["subscription"]["id"]
    dash.go(f"#/tail?subscription={sub}")
    status = page.locator("#tail-status")
    # 1013 (try again later): shown as sent, and tried again by itself, backing off.
    expect(status).to_have_attribute("data-state", "reconnecting")
    expect(status.locator(".close-code")).to_have_text("1013")
    expect(status.locator(".close-reason")).to_have_text(NO_HUB)
    expect(status).to_contain_text("try again later")
    # The first retry waits 0.5 s: on a loaded machine the checks above may outlast it, so
    # the note is read as it stands and must then count on by itself.
    note = status.locator(".retry-note")
    expect(note).to_contain_text(re.compile(r"\(attempt \d+\)"))
    first = retry_attempt(note.inner_text())
    dash.screenshot("tail-refused")
    expect(note).to_contain_text(f"(attempt {first + 1})", timeout=15_000)

    # Disconnect stops the retries.
    page.locator("#tail-disconnect").click()
    expect(status).to_have_attribute("data-state", "closed")
    page.wait_for_timeout(1500)  # longer than the next retry would have waited
    expect(status).to_have_attribute("data-state", "closed")
    expect(status).to_have_text("Disconnected.")

    # A subscription that does not exist: the server's 4404 and its reason.
    dash.go("#/tail?subscription=99999")
    expect(status.locator(".close-code")).to_have_text("4404")
    expect(status.locator(".close-reason")).to_contain_text("99999")
    assert dash.errors == []


def test_live_tail_shows_messages_as_they_arrive(
    server: Server, seeded: dict[str, Any], dash: Dashboard
) -> None:
    """Until the fan-out hub exists the stream is played by the browser's WebSocket
    routing: messages as the hub would send them, then a close with a reason."""
    page = dash.page
    streams: list[Any] = []
    page.route_web_socket(re.compile(r"/v1/stream\?"), lambda ws: streams.append(ws))
    sub = seeded["subscription"]["id"]
    dash.go(f"#/tail?subscription={sub}")
    status = page.locator("#tail-status")
    expect(status).to_have_attribute("data-state", "open")
    assert len(streams) == 1
    assert f"subscription={sub}" in streams[0].url
    assert f"token={server.token}" in streams[0].url  # browsers cannot send the header
    for price in ("42000.1", "42000.2", "42000.3"):
        streams[0].send(f'{{"stream":"btcusdt@trade","data":{{"p":"{price}"}}}}')
    streams[0].send(b'{"stream":"ethusdt@trade"}')
    log = page.locator("#tail-log li")
    expect(log).to_have_count(4)
    expect(log.first).to_contain_text("[binary]")  # newest on top
    expect(log.first.locator(".size")).to_have_text("26 B")
    expect(log.nth(1)).to_contain_text('"p":"42000.3"')
    expect(page.locator(".tail-counters")).to_contain_text("4 messages")
    dash.screenshot("tail-messages")
    # A restart (1012): the close as sent, then the same stream opens again by itself.
    streams[0].close(code=1012, reason="the gateway is restarting")
    expect(status).to_have_attribute("data-state", "reconnecting")
    expect(status.locator(".close-code")).to_have_text("1012")
    expect(status.locator(".close-reason")).to_have_text("the gateway is restarting")
    expect(log).to_have_count(4)  # what arrived stays on screen
    expect(status).to_have_attribute("data-state", "open")
    assert len(streams) == 2
    assert f"subscription={sub}" in streams[1].url
    streams[1].send('{"stream":"btcusdt@trade","data":{"p":"42000.4"}}')
    expect(log).to_have_count(5)
    expect(page.locator(".tail-counters")).to_contain_text("5 messages")  # counted on

    # A refusal (4xxx) waits for the operator.
    streams[1].close(code=4404, reason="no subscription 7")
    expect(status).to_have_attribute("data-state", "closed-error")
    page.wait_for_timeout(800)
    assert len(streams) == 2

    # With "Envelope" the stream is asked for seq/topic envelopes.
    page.locator("#tail-envelope").check()
    page.locator("#tail-connect").click()
    expect(status).to_have_attribute("data-state", "open")
    assert len(streams) == 3
    assert "envelope=1" in streams[2].url
    assert dash.errors == []


def test_charts_redraw_on_every_poll(server: Server, dash: Dashboard) -> None:
    """With no dataplane, the message charts say "not reported" while the API's own
    charts move: compare the drawing before and after two poll intervals."""
    page = dash.page
    dash.go("#/charts")
    api_chart = page.locator('figure[data-chart="API requests/s"] svg')
    expect(api_chart).to_have_attribute("data-points", re.compile(r"^[1-9]"))
    before_points = int(api_chart.get_attribute("data-points") or 0)
    before_draws = int(api_chart.get_attribute("data-draws") or 0)
    before_path = api_chart.locator("path").first.get_attribute("d")
    page.wait_for_timeout(2300)
    after_points = int(api_chart.get_attribute("data-points") or 0)
    assert after_points >= before_points + 2
    assert int(api_chart.get_attribute("data-draws") or 0) >= before_draws + 2
    assert api_chart.locator("path").first.get_attribute("d") != before_path
    messages = page.locator('figure[data-chart="Messages/s"]')
    expect(messages.locator("svg .chart-empty-mark")).to_have_text("not reported")
    expect(messages.locator(".chart-empty")).to_contain_text("no session_messages")
    expect(messages.locator(".chart-empty")).to_contain_text("dataplane not attached")
    assert messages.locator("svg").get_attribute("data-points") == "0"
    assert dash.errors == []

"""How the dashboard behaves around auth and failures: auth off, a revoked token, a token
without the admin scope, and an API that stops answering."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gateway.runtime import DetachedRuntime, EngineState, EngineStatus
from tests.browser.conftest import Dashboard, Server, StartServer

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
expect = sync_api.expect


def test_no_auth_mode_needs_no_login(
    start_server: StartServer, open_dashboard: Callable[..., Dashboard]
) -> None:
    server = start_server(auth="none")
    d = open_dashboard(server)
    d.open()
    expect(d.page.locator("#nav")).to_be_visible()
    expect(d.page.get_by_role("heading", name="Overview")).to_be_visible()
    expect(d.page.locator("#who")).to_have_text("auth off (local)")
    expect(d.page.get_by_role("button", name="Sign out")).to_be_hidden()
    expect(d.page.locator('[data-check="Hugepages"]')).to_be_visible()
    d.go("#/sessions")
    expect(d.page.locator("#session-form")).to_be_visible()  # no session yet: form open
    d.screenshot("no-auth-sessions")
    assert d.errors == []


def test_a_revoked_token_leads_back_to_the_login(
    server: Server, open_dashboard: Callable[..., Dashboard]
) -> None:
    token, secret = server.service.tokens.create("short-lived", ["admin", "consume"])
    d = open_dashboard(server)
    d.login(secret)
    expect(d.page.locator("#who")).to_have_text("short-lived")
    server.service.tokens.revoke(token.id)
    d.go("#/sessions")  # the next API call is refused
    expect(d.page.get_by_role("heading", name="Sign in to wsgw")).to_be_visible()
    notice = d.page.locator(".notice")
    expect(notice).to_contain_text("refused the token")
    expect(notice).to_contain_text("invalid or revoked token")
    d.screenshot("login-after-revoke")
    # Signing in again returns to the page that was asked for.
    d.page.locator("input[name=token]").fill(server.token or "")
    d.page.get_by_role("button", name="Sign in").click()
    expect(d.page.get_by_role("heading", name="Sessions")).to_be_visible()


def test_a_consume_only_token_sees_the_consumer_pages(
    server: Server, open_dashboard: Callable[..., Dashboard]
) -> None:
    secret = server.create_token("reader", ["consume"])
    d = open_dashboard(server)
    d.login(secret)
    nav = d.page.locator("#nav")
    expect(nav.get_by_role("link", name="Sessions")).to_be_hidden()
    expect(nav.get_by_role("link", name="Subscriptions")).to_be_visible()
    expect(d.page.locator(".card", has_text="Host readiness")).to_contain_text(
        "Needs the 'admin' scope"
    )
    d.go("#/subscriptions")
    expect(d.page.get_by_role("heading", name="Subscriptions")).to_be_visible()
    # The sessions it may subscribe to are listed for it too (GET /v1/sessions: no config).
    with server.client() as api:
        made = api.post(
            "/v1/sessions",
            json={
                "name": "for-readers",
                "url": "wss://feed.example.com/ws",
                "dialect": "generic",
                "transport": "kernel",
            },
        ).json()
    d.page.reload()
    option = d.page.locator(
        f'#subscription-form select[name=session_id] option[value="{made["id"]}"]'
    )
    expect(option).to_have_text("for-readers (generic)")
    with server.client(secret) as api:
        listed = api.get("/v1/sessions").json()["data"]
        assert {"id", "name", "dialect", "state", "topics"} == set(listed[0])
    d.go("#/sessions")
    expect(d.page.locator("#view")).to_contain_text("needs the 'admin' scope")
    assert d.errors == []


def test_an_unreachable_api_is_said_so(
    start_server: StartServer, open_dashboard: Callable[..., Dashboard]
) -> None:
    server = start_server()
    d = open_dashboard(server)
    d.login()
    expect(d.page.locator('[data-check="Hugepages"]')).to_be_visible()
    server.stop()
    banner = d.page.locator("#banner")
    expect(banner).to_be_visible(timeout=8000)
    expect(banner).to_contain_text("API unreachable")
    d.go("#/charts")
    expect(d.page.locator("#charts-info")).to_contain_text("unreachable")
    d.screenshot("api-unreachable")


class FailedEngineRuntime(DetachedRuntime):
    """An engine that could not start, and says why."""

    REASON = "EAL init failed: no hugepages free on NUMA node 0 (need 256 MB)"

    def engine_status(self) -> EngineStatus:
        return EngineStatus(EngineState.FAILED, self.REASON)


def test_a_failed_engine_shows_its_reason(
    start_server: StartServer, open_dashboard: Callable[..., Dashboard]
) -> None:
    server = start_server(FailedEngineRuntime())
    d = open_dashboard(server)
    d.login()
    page = d.page
    expect(page.locator("#engine-pill [data-state]")).to_have_text("failed")
    expect(page.locator("#engine-pill")).to_have_attribute(
        "title", f"engine failed: {FailedEngineRuntime.REASON}"
    )
    engine = page.locator("section.card", has=page.get_by_role("heading", name="Engine"))
    expect(engine.locator(".error-text").last).to_contain_text(FailedEngineRuntime.REASON)
    expect(engine).to_contain_text("Ready")
    d.go("#/sessions")
    expect(page.locator(".notice")).to_contain_text(
        f"Dataplane failed: {FailedEngineRuntime.REASON}"
    )
    d.screenshot("engine-failed")

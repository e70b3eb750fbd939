"""Token management from the dashboard (/v1/tokens): create shows the secret once, the new
token works against the API, revoke makes the API refuse it; a consume-only token sees
none of the admin controls, as the API refuses it the admin routes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.browser.conftest import Dashboard, Server

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
expect = sync_api.expect


def test_create_shows_the_secret_once_and_revoke_ends_it(
    server: Server, dash: Dashboard, open_dashboard: Callable[..., Dashboard]
) -> None:
    page = dash.page
    dash.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.locator("#nav").get_by_role("link", name="Tokens").click()
    expect(page.get_by_role("heading", name="Tokens", exact=True).first).to_be_visible()
    table = page.locator("#tokens-table")
    expect(table.locator('tr[data-name="browser"]')).to_contain_text("admin, consume")

    # A form error stays on its field: no scope ticked.
    form = page.locator("#token-form")
    form.locator("input[name=name]").fill("ui-reader")
    form.locator('input[name=scopes][value="consume"]').uncheck()
    form.get_by_role("button", name="Create token").click()
    expect(form.locator('[data-error-for="scopes"]')).to_be_visible()

    form.locator('input[name=scopes][value="consume"]').check()
    form.get_by_role("button", name="Create token").click()
    box = page.locator("#token-secret")
    expect(box).to_be_visible()
    expect(box).to_contain_text("shown this once")
    secret = page.locator("#token-secret-value").text_content() or ""
    assert secret.startswith("wsgw_"), secret
    page.locator("#token-copy").click()
    expect(box).to_contain_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == secret
    row = table.locator('tr[data-name="ui-reader"]')
    expect(row).to_contain_text("consume")
    expect(row.locator("[data-state]")).to_have_text("active")
    assert secret not in (table.text_content() or "")  # the list has the prefix only

    # The new token works: consume routes yes, admin routes no.
    with server.client(secret) as api:
        assert api.get("/v1/subscriptions").status_code == 200
        assert api.get("/v1/tokens").status_code == 403

    # Once saved, the secret leaves the page and is not shown again (not after a reload).
    box.get_by_role("button", name="I have saved it").click()
    expect(box).to_be_hidden()
    assert page.locator("#token-secret-value").count() == 0
    page.reload()
    expect(table.locator('tr[data-name="ui-reader"]')).to_be_visible()
    assert secret not in (page.locator("#view").text_content() or "")

    # Revoke asks twice, then the API refuses the token.
    revoke = table.locator('tr[data-name="ui-reader"] button[data-action="revoke"]')
    revoke.click()
    expect(revoke).to_have_text("Confirm revoke")
    revoke.click()
    revoked = table.locator('tr[data-name="ui-reader"]')
    expect(revoked.locator("[data-state]")).to_have_text("revoked")
    expect(revoked.locator('button[data-action="revoke"]')).to_have_count(0)
    with server.client(secret) as api:
        assert api.get("/v1/subscriptions").status_code == 401
    dash.screenshot("tokens")
    # Chromium logs every 4xx answer: the only one is the refused form above.
    assert [e for e in dash.errors if "status of 422" not in e] == [], dash.errors

    phone = open_dashboard(server, "phone")
    phone.login()
    phone.go("#/tokens")
    expect(phone.page.locator('#tokens-table tr[data-name="ui-reader"]')).to_be_visible()
    assert phone.horizontal_overflow() == 0, "tokens scrolls sideways on a phone"
    phone.screenshot("tokens")
    assert phone.errors == [], phone.errors


def test_a_consume_token_sees_no_admin_controls(
    server: Server, open_dashboard: Callable[..., Dashboard]
) -> None:
    """The same rule in the UI as in the API: no Tokens, Sessions or host controls."""
    secret = server.create_token("consumer-only", ["consume"])
    d = open_dashboard(server)
    d.login(secret)
    page = d.page
    nav = page.locator("#nav")
    for link in ("Tokens", "Sessions"):
        expect(nav.get_by_role("link", name=link)).to_be_hidden()
    expect(page.get_by_role("button", name="Refresh")).to_have_count(0)  # host readiness
    expect(page.locator('[data-action="revoke"], #token-form, #session-form')).to_have_count(0)
    d.go("#/tokens")
    expect(page.locator("#view")).to_contain_text("needs the 'admin' scope")
    expect(page.locator("#token-form")).to_have_count(0)
    with server.client(secret) as api:
        assert api.get("/v1/tokens").status_code == 403
        assert api.get("/v1/engine/ports").status_code == 403
        assert api.post("/v1/tokens", json={"name": "x", "scopes": ["admin"]}).status_code == 403
    assert d.errors == [], d.errors

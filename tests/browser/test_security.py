"""The dashboard's doors in a real browser (issue #17): a page of another origin cannot
drive the API (auth off: the case the issue names), and a token without the admin scope
sees whether the gateway is ready but not why."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.browser.conftest import Dashboard, Server, StartServer

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
expect = sync_api.expect

ATTACK = """<!doctype html><title>waiting</title><script>
const api = "%(api)s";
const done = [];
const finish = (what) => { done.push(what); if (done.length === 2) document.title = "sent"; };
// A CORS "simple" request: no preflight, the browser sends it and hides the answer.
fetch(api + "/v1/sessions/%(sid)d/stop", {
  method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: "{}",
}).then(() => finish("post"), () => finish("post"));
const ws = new WebSocket(api.replace("http", "ws") + "/v1/stream?session=%(sid)d");
ws.onopen = () => { window.streamOpened = true; };
ws.onclose = () => finish("stream");
</script>"""


@pytest.fixture
def elsewhere() -> Iterator[Callable[[str], str]]:
    """A web server on another loopback port (another origin) serving one page."""
    pages: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, b"")
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()

    def serve(html: str) -> str:
        pages["/page.html"] = html.encode()
        return f"http://127.0.0.1:{httpd.server_address[1]}/page.html"

    try:
        yield serve
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


def test_a_page_elsewhere_cannot_stop_a_session_or_stream(
    start_server: StartServer,
    open_dashboard: Callable[..., Dashboard],
    elsewhere: Callable[[str], str],
) -> None:
    server: Server = start_server(auth="none")
    api = server.client()
    body = {
        "name": "victim",
        "url": "wss://feed.example.com/ws",
        "dialect": "generic",
        "transport": "kernel",
    }
    sid = api.post("/v1/sessions", json=body).json()["id"]
    assert api.post(f"/v1/sessions/{sid}/start").status_code == 200
    d = open_dashboard(server)
    d.page.goto(elsewhere(ATTACK % {"api": server.url, "sid": sid}))
    expect(d.page).to_have_title("sent")
    assert d.page.evaluate("window.streamOpened === true") is False
    assert api.get(f"/v1/sessions/{sid}").json()["desired_state"] == "running"
    # The request did arrive, and the Origin check refused it.
    metrics = api.get("/metrics").text
    assert re.search(
        r'wsgw_http_requests_total\{method="POST",route="unmatched",status="403"\} 1\.0', metrics
    )


def test_a_token_without_admin_sees_ready_not_why(
    server: Server, open_dashboard: Callable[..., Dashboard]
) -> None:
    d = open_dashboard(server)
    d.open()
    d.login(server.create_token("reader", ["consume"]))
    pill = d.page.locator("#engine-pill")
    expect(pill).to_contain_text("gateway ready")
    d.page.get_by_role("button", name="Sign out").click()
    d.login(server.token)
    expect(pill).to_contain_text("engine detached")

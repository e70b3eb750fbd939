"""Browser tests of the dashboard: a real control plane on a loopback port, driven by
Debian's Chromium through Playwright (the PyPI package, without its own browser build).

`start_server(runtime=..., auth=...)` serves `create_app` with uvicorn in a thread, on a
free loopback port, with a temporary SQLite database, a fake host tree and a token made
through the store. Pass another runtime (the engine-backed one, once it exists) to run the
same pages against real sessions. `open_dashboard(server, viewport)` gives a page that
records console errors; screenshots go to tests/browser/artifacts/.

Skipped, with the reason, when /usr/bin/chromium (or WSGW_CHROMIUM) or playwright is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from prometheus_client.registry import Collector

from api.app import create_app
from api.routes import dashboard
from gateway.runtime import DetachedRuntime, Runtime
from gateway.settings import Settings
from tests.api.conftest import host_with_nics
from tests.host.fakesys import FakeHost

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, ViewportSize

CHROMIUM = Path(os.environ.get("WSGW_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).parent / "artifacts"
LAPTOP: ViewportSize = {"width": 1366, "height": 860}
PHONE: ViewportSize = {"width": 390, "height": 844}
TIMEOUT_MS = 10_000


# ---- the server ------------------------------------------------------------------------------


def build_app(settings: Settings, runtime: Runtime, host: FakeHost) -> FastAPI:
    """create_app, with the dashboard's router added if api/app.py does not include it yet."""
    app = create_app(settings, runtime, host=host.manager())
    if not any(getattr(route, "path", None) == "/" for route in app.routes):
        app.include_router(dashboard.router)
    return app


def make_fake_host(root: Path) -> FakeHost:
    """A host with something to show: 2 MB hugepages reserved and mounted, CPU 1 isolated,
    a spare NIC that DPDK can take and the management NIC that it must not."""
    host = host_with_nics(root)
    pool = host.sys / "kernel/mm/hugepages/hugepages-2048kB"
    (pool / "nr_hugepages").write_text("512\n")
    (pool / "free_hugepages").write_text("500\n")
    (host.sys / "devices/system/cpu/isolated").write_text("1\n")
    (host.proc / "mounts").write_text(
        "sysfs /sys sysfs rw 0 0\nhugetlbfs /dev/hugepages hugetlbfs rw,pagesize=2M 0 0\n"
    )
    return host


def dashboard_settings(root: Path, host: FakeHost, auth: str, **more: object) -> Settings:
    """Settings of a control plane in `root` (SQLite) on the fake `host`, auth mode `auth`."""
    return Settings(
        state_dir=root / "state",
        db={"url": f"sqlite:///{root / 'state' / 'wsgw.db'}"},  # type: ignore[arg-type]
        host={"sys_root": host.sys, "proc_root": host.proc},  # type: ignore[arg-type]
        auth={"mode": auth},  # type: ignore[arg-type]
        **more,  # type: ignore[arg-type]
    )


class UvicornThread:
    """uvicorn serving an app from a thread, on a socket bound before it starts (no race
    for the port); stop() shuts it down gracefully, as SIGTERM would."""

    def __init__(self, app: FastAPI) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        config = uvicorn.Config(
            app, log_config=None, log_level="warning", lifespan="on", timeout_graceful_shutdown=2
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True, name="uvicorn"
        )

    def start(self, timeout: float = 30.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the control plane did not start (see the log above)")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        self.sock.close()


@dataclass
class Server:
    """A running control plane: its URL, app, runtime and an admin+consume token."""

    url: str
    app: FastAPI
    runtime: Runtime
    token: str | None
    thread: UvicornThread
    stopped: bool = False

    @property
    def service(self) -> Any:
        return self.app.state.control

    def create_token(self, name: str, scopes: list[str]) -> str:
        _, secret = self.service.tokens.create(name, scopes)
        return str(secret)

    def client(self, token: str | None = None) -> httpx.Client:
        """An API client with the server's token (or another)."""
        secret = token or self.token
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10)

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.thread.stop()


StartServer = Callable[..., Server]


@pytest.fixture(scope="session")
def start_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartServer]:
    """Start control planes; each gets its own folder (database, fake host)."""
    servers: list[Server] = []

    def start(
        runtime: Runtime | None = None,
        *,
        auth: str = "token",
        collectors: Sequence[Collector] = (),
    ) -> Server:
        """collectors: more samples for /metrics (e.g. a hub's), registered on the app."""
        root = tmp_path_factory.mktemp("wsgw-browser")
        host = make_fake_host(root / "host")
        settings = dashboard_settings(root, host, auth, api={"host": "127.0.0.1"})
        runtime = runtime if runtime is not None else DetachedRuntime()
        app = build_app(settings, runtime, host)
        for collector in collectors:
            app.state.registry.register(collector)
        thread = UvicornThread(app)
        thread.start()
        server = Server(f"http://127.0.0.1:{thread.port}", app, runtime, None, thread)
        if auth == "token":
            server.token = server.create_token("browser", ["admin", "consume"])
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def server(start_server: StartServer) -> Server:
    """The control plane as it ships today: DetachedRuntime, token auth."""
    return start_server()


# ---- the browser -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium for one test module. Not for the whole session: Playwright's sync API keeps
    an event loop running in the main thread while it is open, and every later test that
    calls asyncio.run() would fail."""
    if not CHROMIUM.is_file():
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium (or set WSGW_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is missing: pip install playwright")
    ARTIFACTS.mkdir(exist_ok=True)
    # launch() starts Chromium on a fresh temporary profile (user-data dir) of its own;
    # HOME and XDG dirs point at a temporary folder too, so nothing of root's is read.
    home = tempfile.mkdtemp(prefix="wsgw-chromium-")
    env: dict[str, str | float | bool] = {
        **os.environ,
        "HOME": home,
        "XDG_CONFIG_HOME": home,
        "XDG_CACHE_HOME": home,
    }
    try:
        with sync_playwright() as pw:
            instance = pw.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS, env=env
            )
            yield instance
            instance.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)


@dataclass
class Dashboard:
    """A browser tab on a server's dashboard, recording console errors."""

    server: Server
    context: BrowserContext
    page: Page
    viewport: str
    errors: list[str] = field(default_factory=list)

    def open(self, route: str = "") -> None:
        self.page.goto(f"{self.server.url}/{route}")

    def login(self, token: str | None = None) -> None:
        """Sign in through the login form and wait for the overview."""
        self.open()
        self.page.locator("input[name=token]").fill(token or self.server.token or "")
        self.page.get_by_role("button", name="Sign in").click()
        self.page.locator("#nav").wait_for(state="visible")

    def go(self, route: str) -> None:
        """Go to a hash route (#/sessions) without reloading the page."""
        self.page.evaluate("route => { location.hash = route; }", route)

    def screenshot(self, name: str) -> Path:
        path = ARTIFACTS / f"{name}-{self.viewport}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def check_page(self, name: str, route: str, marker: str, settle_ms: int = 0) -> None:
        """Go to `route`, wait for `marker`, (let it settle), check it fits the viewport's
        width and take its screenshot as `name`."""
        from playwright.sync_api import expect

        self.go(route)
        expect(self.page.locator(marker).first).to_be_visible()
        if settle_ms:
            self.page.wait_for_timeout(settle_ms)
        assert self.horizontal_overflow() == 0, f"{name} scrolls sideways at {self.viewport} size"
        self.screenshot(name)

    def open_card(self, card: str, form: str) -> Any:
        """Open the collapsible `card` (a <details>) unless it is open: its `form`, visible."""
        from playwright.sync_api import expect

        details = self.page.locator(card)
        if details.get_attribute("open") is None:
            details.locator(":scope > summary").click()
        located = self.page.locator(form)
        expect(located).to_be_visible()
        return located

    def horizontal_overflow(self) -> int:
        """How many pixels the page is wider than the viewport (0: no horizontal scroll)."""
        return int(
            self.page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
        )


@pytest.fixture
def open_dashboard(browser: Browser) -> Iterator[Callable[..., Dashboard]]:
    """Open tabs: open_dashboard(server, "laptop" | "phone")."""
    contexts: list[BrowserContext] = []

    def open_(server: Server, viewport: str = "laptop") -> Dashboard:
        phone = viewport == "phone"
        context = browser.new_context(
            viewport=PHONE if phone else LAPTOP,
            is_mobile=phone,
            has_touch=phone,
            device_scale_factor=2 if phone else 1,
        )
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        dash = Dashboard(server, context, page, viewport)
        page.on(
            "console",
            lambda m: dash.errors.append(f"console: {m.text}") if m.type == "error" else None,
        )
        page.on("pageerror", lambda e: dash.errors.append(f"page error: {e}"))
        return dash

    yield open_
    for context in contexts:
        context.close()


@pytest.fixture
def dash(server: Server, open_dashboard: Callable[..., Dashboard]) -> Dashboard:
    """A signed-in laptop-sized tab on the default server."""
    d = open_dashboard(server)
    d.login()
    return d

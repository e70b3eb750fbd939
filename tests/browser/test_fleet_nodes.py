"""The Nodes page (issue #20) against a real fleet node: a control plane whose runtime is a
FleetRuntime on a throwaway PostgreSQL cluster, with two more nodes registered in the same
database (one alive holding a session it may run, one whose heartbeat is two minutes old).
The page lists each node with its labels, heartbeat age, sessions owned and draining, who
runs each session, and drains and undrains the node it is served by; a gateway that is not
in a fleet says so."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from sqlalchemy import func, update

from api.app import create_app
from gateway.fleet import LeaseStore
from gateway.fleet.node import FleetRuntime
from gateway.runtime import build_runtime
from gateway.settings import Settings
from gateway.store.models import NodeRow
from tests.browser.conftest import Dashboard, Server, UvicornThread, make_fake_host
from wsgw_bench.fleet import postgres_cluster, wait_for

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
expect = sync_api.expect

LEASE_S = 30.0  # long: the other nodes registered by hand stay alive through the test


@pytest.fixture(scope="module")
def fleet_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with contextlib.ExitStack() as stack:
        try:
            db_url = stack.enter_context(postgres_cluster())
        except RuntimeError as exc:
            pytest.skip(str(exc))
        root = tmp_path_factory.mktemp("wsgw-browser-fleet")
        host = make_fake_host(root / "host")
        settings = Settings(
            state_dir=root / "state",
            db={"url": db_url},  # type: ignore[arg-type]
            host={"sys_root": host.sys, "proc_root": host.proc},  # type: ignore[arg-type]
            auth={"mode": "token"},  # type: ignore[arg-type]
            api={"host": "127.0.0.1"},  # type: ignore[arg-type]
            hub={"gateway": "tbrowsefleet", "ring": False},  # type: ignore[arg-type]
            fleet={"enabled": True, "node": "n1", "labels": {"zone": "lab"}, "lease_s": LEASE_S},  # type: ignore[arg-type]
        )
        runtime = build_runtime(settings)
        assert isinstance(runtime, FleetRuntime)
        app = create_app(settings, runtime, host=host.manager())
        thread = UvicornThread(app)
        stack.callback(thread.stop)
        thread.start()
        server = Server(f"http://127.0.0.1:{thread.port}", app, runtime, None, thread)
        server.token = server.create_token("browser", ["admin", "consume"])
        yield server


def test_the_nodes_page_shows_the_fleet_and_drains_this_node(
    fleet_server: Server, open_dashboard: Callable[..., Dashboard]
) -> None:
    server = fleet_server
    node = server.runtime.fleet  # type: ignore[attr-defined]
    engine = node.leases.engine
    other = LeaseStore(engine, "n2", lease_s=LEASE_S)
    other.register({"zone": "lab", "venue": "okx"})
    gone = LeaseStore(engine, "n3", lease_s=LEASE_S)
    gone.register({"zone": "lab"})
    with engine.begin() as conn:  # n3 stopped heartbeating two minutes ago
        conn.execute(
            update(NodeRow)
            .where(NodeRow.name == "n3")
            .values(heartbeat_at=func.clock_timestamp() - timedelta(minutes=2))
        )
    with server.client() as api:
        session = api.post(
            "/v1/sessions",
            json={"name": "okx-feed", "url": "ws://127.0.0.1:9/ws", "dialect": "generic",
                  "transport": "kernel", "placement": {"venue": "okx"}},
        ).json()  # fmt: skip
        assert api.post(f"/v1/sessions/{session['id']}/start").status_code == 200
    assert other.acquire(session["id"]) is not None  # only n2 may run it

    d = open_dashboard(server)
    d.login()
    d.page.locator("#nav").get_by_role("link", name="Nodes").click()
    expect(d.page.locator("#nodes-summary")).to_contain_text("3 node(s), 2 alive")
    expect(d.page.locator("#nodes-summary")).to_contain_text("served by n1")
    n1 = d.page.locator('#nodes-table tr[data-node="n1"]')
    n2 = d.page.locator('#nodes-table tr[data-node="n2"]')
    n3 = d.page.locator('#nodes-table tr[data-node="n3"]')
    expect(n1).to_contain_text("(this node)")
    expect(n1.locator('[data-label="Labels"]')).to_have_text("zone=lab")
    expect(n2.locator('[data-label="Labels"]')).to_have_text("venue=okx zone=lab")
    expect(n1.locator('[data-label="Sessions"]')).to_have_text("0")
    expect(n2.locator('[data-label="Sessions"]')).to_have_text("1")
    expect(n1.locator('[data-label="Heartbeat"] [data-state="up"]')).to_be_visible()
    expect(n3.locator('[data-label="Heartbeat"] [data-state="down"]')).to_be_visible()
    expect(n3.locator('[data-label="Heartbeat"]')).to_contain_text("min ago")
    expect(n1.locator('[data-label="Draining"]')).to_have_text("no")
    lease = d.page.locator(f'#leases-table tr[data-session="{session["id"]}"]')
    expect(lease).to_have_attribute("data-node", "n2")
    expect(lease.locator('[data-label="Generation"]')).to_have_text("1")
    d.screenshot("fleet-nodes")

    drain = d.page.locator('#nodes-actions button[data-action="drain"]')
    drain.click()
    expect(drain).to_have_text("Confirm drain n1")
    drain.click()
    expect(n1).to_have_attribute("data-draining", "true")
    expect(n1.locator('[data-label="Draining"] [data-state="stopping"]')).to_be_visible()
    wait_for("n1 draining in the database", lambda: node.draining)
    d.page.locator('#nodes-actions button[data-action="undrain"]').click()
    expect(n1).to_have_attribute("data-draining", "false")
    assert node.draining is False
    assert d.errors == [], d.errors

    phone = open_dashboard(server, "phone")
    phone.login()
    phone.go("#/nodes")
    expect(phone.page.locator('#nodes-table tr[data-node="n2"]')).to_be_visible()
    assert phone.horizontal_overflow() == 0, "nodes scrolls sideways on a phone"
    assert phone.errors == [], phone.errors


def test_a_gateway_not_in_a_fleet_says_so(
    server: Server, open_dashboard: Callable[..., Dashboard]
) -> None:
    d = open_dashboard(server)
    d.login()
    d.go("#/nodes")
    expect(d.page.locator("#nodes-not-in-fleet")).to_contain_text("not in a fleet")
    expect(d.page.locator("#nodes-table tbody tr")).to_have_count(0)
    expect(d.page.locator(".page-error")).to_be_hidden()


def test_the_nodes_page_formatters(dash: Dashboard) -> None:
    got = dash.page.evaluate(
        """async () => {
          const n = await import("/ui/js/pages/nodes.js");
          return {
            ages: [0.04, 9.96, 12.4, 119, 600, 7300].map(n.fmtAge),
            labels: [n.fmtLabels({venue: "okx", dpdk: "true"}), n.fmtLabels({}), n.fmtLabels(null)],
          };
        }"""
    )
    assert got == {
        "ages": ["0.0 s", "10.0 s", "12 s", "119 s", "10 min", "2 h"],
        "labels": ["dpdk=true venue=okx", "—", "—"],
    }

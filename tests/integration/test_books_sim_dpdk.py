"""The books' resubscribe resync over DPDK (issue #21): the feed simulator in the lab's peer
namespace, the gateway's session on a real DPDK port (wsgw's own TCP/IP stack, the engine),
the BookManager on the hub ring; a wrong checksum (Kraken) and a dropped update (OKX) are
detected, reset, resynchronized, and GET /v1/books is the simulator's book again
(tests/integration/test_books_sim.py has the scenario and the other venues, on the kernel).

The REST resync paths (Binance) stay on the kernel tests: the manager fetches snapshots with
the host's kernel, which has no address on the lab's link. So here a normalized Binance
subscription on the DPDK session is refused at create, with a 422 that says why."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.lab import Lab
from gateway.runtime import EngineState
from gateway.runtime.engines import DpdkEngines
from gateway.settings import Settings
from tests.conftest import requires_dpdk
from tests.integration.test_books_gateway import Gateway
from tests.integration.test_books_sim import (
    VENUES,
    SimProcess,
    free_port,
    run_session,
    start_gateway,
    start_sim,
)

pytestmark = [requires_dpdk, pytest.mark.dpdk]
SIM_PORT = 9610


@pytest.fixture
def dpdk_sim(lab: Lab) -> Iterator[SimProcess]:
    sim = start_sim(lab, SIM_PORT)
    try:
        yield sim
    finally:
        sim.close()


@pytest.fixture
def dpdk_gateway(eal, tmp_path: Path, lab: Lab, dpdk_sim: SimProcess) -> Iterator[Gateway]:  # type: ignore[no-untyped-def]
    engines = Settings(engine={"mode": "loop"})  # type: ignore[arg-type]
    gw, stop = start_gateway(tmp_path, dpdk_sim, engine_factory=lambda: DpdkEngines(engines))
    try:
        yield gw
    finally:
        stop()


@pytest.mark.parametrize(("venue", "fault", "reason"), [("kraken", "checksum", "checksum"),
                                                         ("okx", "drop", "gap")])  # fmt: skip
def test_fault_over_dpdk_resets_resyncs_and_the_book_is_the_simulators(
    dpdk_gateway: Gateway, dpdk_sim: SimProcess, lab: Lab, venue: str, fault: str, reason: str
) -> None:
    control = dpdk_gateway.control
    port_id = lab_port(control, lab)
    chosen = VENUES[venue]
    dpdk_sim.emit(chosen, 100)
    sid = control.sessions.create(
        {"name": venue, "url": dpdk_sim.url(chosen), "dialect": chosen.dialect,
         "transport": "dpdk", "port_id": port_id}
    ).id  # fmt: skip
    run_session(dpdk_gateway, dpdk_sim, chosen, sid, fault, reason)
    engine = control.runtime.engine_status()  # the session's bytes came through the engine
    assert engine.state is EngineState.RUNNING
    assert engine.details[f"port{port_id}"]["c_rx_frames"] > 0, engine.details


def lab_port(control, lab: Lab) -> int:  # type: ignore[no-untyped-def]
    port = control.ports.create(
        {"name": "lab", "device": lab.vdev, "ipv4": lab.gw_ip, "netmask": lab.netmask,
         "gateway": None, "mtu": 1500}
    )  # fmt: skip
    return int(port.id)


def test_a_rest_venue_the_kernel_cannot_reach_is_refused_at_create(
    dpdk_gateway: Gateway, dpdk_sim: SimProcess, lab: Lab
) -> None:
    """The simulator (Binance's REST base too) is reachable only over the DPDK port."""
    gw = dpdk_gateway
    port_id = lab_port(gw.control, lab)
    binance, okx = VENUES["binance"], VENUES["okx"]
    sessions = {}
    for venue in (binance, okx):
        sessions[venue.dialect] = gw.control.sessions.create(
            {"name": venue.dialect, "url": dpdk_sim.url(venue), "dialect": venue.dialect,
             "transport": "dpdk", "port_id": port_id}
        ).id  # fmt: skip

    def subscribe(venue_name: str, topic: str, fmt: str):  # type: ignore[no-untyped-def]
        body = {"session_id": sessions[venue_name], "topics": [topic], "consumer": "c",
                "format": fmt}  # fmt: skip
        return gw.api.post("/v1/subscriptions", json=body)

    r = subscribe("binance", binance.topic, "normalized")
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "format"]
    assert "through the host's kernel, not over the session's DPDK port" in error["msg"]
    assert dpdk_sim.base in error["msg"]
    assert gw.control.books.symbols(sessions["binance"]) == []
    # Raw is fine, and so is a venue whose snapshot comes on the WebSocket.
    raw = subscribe("binance", binance.topic, "raw")
    assert raw.status_code == 201, raw.text
    assert subscribe("okx", okx.topic, "normalized").status_code == 201
    # ... and a PATCH to normalized is refused the same way.
    r = gw.api.patch(f"/v1/subscriptions/{raw.json()['id']}", json={"format": "normalized"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "format"]

    # A snapshot base the kernel reaches (a simulator on loopback): accepted.
    local = start_sim(None, free_port())
    try:
        books = gw.control.books
        books.config = replace(books.config, snapshot_urls={"binance": local.base})
        r = gw.api.patch(f"/v1/subscriptions/{raw.json()['id']}", json={"format": "normalized"})
        assert r.status_code == 200, r.text
    finally:
        local.close()

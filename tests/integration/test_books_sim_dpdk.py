"""The books' resync paths over DPDK (issue #21): the feed simulator in the lab's peer
namespace, the gateway's session on a real DPDK port (wsgw's own TCP/IP stack, the engine),
the BookManager on the hub ring; a wrong checksum (Kraken), a dropped update (OKX, Binance
spot and USD-M) and a stale REST snapshot (Binance) are detected, reset, resynchronized,
and GET /v1/books is the simulator's book again (tests/integration/test_books_sim.py has
the scenario and the other venues, on the kernel).

Binance's and Bitstamp's REST snapshots come over the session's DPDK port too
(dataplane.transports.http), and over https with the session's CA (a TLS simulator):
the host's kernel has no address on the lab's link, so a snapshot synced here came through
the engine. A snapshot server that is not there, answers 500, cuts its body short or resets
is retried until it answers (tests/integration/faulty_http.py); only a venue with no
snapshot base at all is refused at create (422)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.lab import Lab
from gateway.runtime import EngineState
from gateway.runtime.engines import DpdkEngines
from gateway.settings import Settings
from gateway.simulator.process import simulator_command
from tests.conftest import requires_dpdk
from tests.integration.test_books_gateway import Gateway
from tests.integration.test_books_sim import (
    VENUES,
    SimProcess,
    Venue,
    run_session,
    sim_book,
    sim_rest_book,
    start_gateway,
    start_sim,
    until,
)

pytestmark = [requires_dpdk, pytest.mark.dpdk]
SIM_PORT = 9610
REST_PORT = 9611
TLS_PORT = 9612
FAULTY_HTTP = str(Path(__file__).with_name("faulty_http.py"))


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


FAULTS = [("kraken", "checksum", "checksum"), ("okx", "drop", "gap"),
          ("binance", "drop", "gap"), ("binance", "stale", "stale_snapshot"),
          ("binance-futures", "drop", "gap")]  # fmt: skip
BITSTAMP = Venue("bitstamp", "diff_order_book_btcusd", "/", "btcusd")


@pytest.mark.parametrize(("venue", "fault", "reason"), FAULTS)
def test_fault_over_dpdk_resets_resyncs_and_the_book_is_the_simulators(
    dpdk_gateway: Gateway, dpdk_sim: SimProcess, lab: Lab, venue: str, fault: str, reason: str
) -> None:
    control = dpdk_gateway.control
    port_id = lab_port(control, lab)
    chosen = VENUES[venue]
    dpdk_sim.emit(chosen, 100)
    sid = dpdk_session(control, dpdk_sim, chosen, port_id)
    run_session(dpdk_gateway, dpdk_sim, chosen, sid, fault, reason)
    engine = control.runtime.engine_status()  # the session's bytes came through the engine
    assert engine.state is EngineState.RUNNING
    assert engine.details[f"port{port_id}"]["c_rx_frames"] > 0, engine.details
    if chosen.dialect == "binance":  # its snapshots: over the engine (the kernel has no way there)
        assert control.books.fetches[("binance", "ok")] >= 2, control.books.fetches
        assert control.books.fetches[("binance", "failed")] == 0, control.books.fetches


def dpdk_session(control, sim: SimProcess, venue: Venue, port_id: int) -> int:  # type: ignore[no-untyped-def]
    """A dpdk session to the simulator's venue on the lab's port; its id."""
    values = {"name": venue.dialect, "url": sim.url(venue), "dialect": venue.dialect,
              "transport": "dpdk", "port_id": port_id}  # fmt: skip
    return int(control.sessions.create(values).id)


def lab_port(control, lab: Lab) -> int:  # type: ignore[no-untyped-def]
    port = control.ports.create(
        {"name": "lab", "device": lab.vdev, "ipv4": lab.gw_ip, "netmask": lab.netmask,
         "gateway": None, "mtu": 1500}
    )  # fmt: skip
    return int(port.id)


def test_a_bitstamp_book_syncs_from_a_snapshot_over_dpdk(
    dpdk_gateway: Gateway, dpdk_sim: SimProcess, lab: Lab
) -> None:
    """Bitstamp's snapshot (/api/v2/order_book/btcusd/) over the session's DPDK port: the
    book is the simulator's, and stays so as updates come."""
    gw = dpdk_gateway
    books = gw.control.books
    urls = {**books.config.snapshot_urls, "bitstamp": dpdk_sim.base}
    books.config = replace(books.config, snapshot_urls=urls)
    dpdk_sim.emit(BITSTAMP, 100)
    sid = dpdk_session(gw.control, dpdk_sim, BITSTAMP, lab_port(gw.control, lab))
    gw.control.subscriptions.create(
        {"session_id": sid, "topics": [BITSTAMP.topic], "consumer": "c", "format": "normalized"}
    )
    gw.control.sessions.start(sid)
    until(lambda: dpdk_sim.subscribers(BITSTAMP) > 0, "the session's subscription")
    for count in (5, 20):
        seq = dpdk_sim.emit(BITSTAMP, count)

        def right(seq: int = seq) -> bool:
            got = gw.api.get(f"/v1/books/{sid}/{BITSTAMP.symbol}")
            return got.status_code == 200 and not got.json()["stale"] and (
                got.json()["bids"], got.json()["asks"]) == sim_book(BITSTAMP, seq)  # fmt: skip

        until(right, f"the book after {seq} updates")
    assert books.fetches[("bitstamp", "ok")] >= 1, books.fetches
    assert books.fetches[("bitstamp", "failed")] == 0, books.fetches


def start_snapshot_server(lab: Lab, port: int, upstream: str, modes: str) -> subprocess.Popen[str]:
    """tests/integration/faulty_http.py in the peer namespace, answering as modes say."""
    proc = lab.popen([sys.executable, FAULTY_HTTP, lab.peer_ip, str(port), upstream, modes],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_a_failing_snapshot_server_is_retried_until_the_book_syncs(
    dpdk_gateway: Gateway, dpdk_sim: SimProcess, lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing listens on the snapshot port at first (refused), then it answers 500, a
    body short of its Content-Length, a chunked body without its last chunk, a reset, and
    at last the simulator's snapshot, chunked: the book is not given up, it syncs."""
    monkeypatch.setattr("gateway.books.manager.RESYNC_BACKOFF_MAX", 1.0)  # retries sooner
    gw = dpdk_gateway
    books = gw.control.books
    books.config = replace(
        books.config, snapshot_urls={"binance": f"http://{lab.peer_ip}:{REST_PORT}"}
    )
    binance = VENUES["binance"]
    dpdk_sim.emit(binance, 100)
    sid = dpdk_session(gw.control, dpdk_sim, binance, lab_port(gw.control, lab))
    body = {"session_id": sid, "topics": [binance.topic], "consumer": "c", "format": "normalized"}
    r = gw.api.post("/v1/subscriptions", json=body)
    assert r.status_code == 201, r.text  # accepted: the snapshot comes over the session's port
    gw.control.sessions.start(sid)
    until(lambda: dpdk_sim.subscribers(binance) > 0, "the session's subscription")
    seq = dpdk_sim.emit(binance, 5)
    until(lambda: books.fetches[("binance", "failed")] >= 2, "refused fetches")
    assert books.fetches[("binance", "ok")] == 0
    view = books.view(sid, binance.symbol)
    assert view is None or view.stale
    upstream = f"{lab.peer_ip}:{SIM_PORT}"
    server = start_snapshot_server(
        lab, REST_PORT, upstream, "500,truncated,truncchunk,reset,chunked"
    )
    try:
        failed = books.fetches[("binance", "failed")]

        def synced() -> bool:
            got = gw.api.get(f"/v1/books/{sid}/{binance.symbol}")
            return got.status_code == 200 and not got.json()["stale"] and (
                got.json()["bids"], got.json()["asks"]) == sim_book(binance, seq)  # fmt: skip

        until(synced, "the book synced from the chunked snapshot", timeout=60)
        assert books.fetches[("binance", "failed")] >= failed + 4, books.fetches
        assert books.fetches[("binance", "ok")] >= 1
        seq = dpdk_sim.emit(binance, 10)
        until(lambda: gw.book(sid, binance.symbol)["seq"] == seq, "the updates after the sync")
        got = gw.book(sid, binance.symbol)
        assert (
            (got["bids"], got["asks"]) == sim_book(binance, seq) == sim_rest_book(dpdk_sim, binance)
        )
    finally:
        server.kill()
        server.wait()


def test_only_a_venue_without_a_snapshot_base_is_refused_at_create(
    dpdk_gateway: Gateway, dpdk_sim: SimProcess, lab: Lab
) -> None:
    gw = dpdk_gateway
    binance = VENUES["binance"]
    sid = dpdk_session(gw.control, dpdk_sim, binance, lab_port(gw.control, lab))
    body = {"session_id": sid, "topics": [binance.topic], "consumer": "c", "format": "raw"}
    raw = gw.api.post("/v1/subscriptions", json=body)
    assert raw.status_code == 201, raw.text
    books = gw.control.books
    books.config = replace(books.config, snapshot_urls={"bitstamp": dpdk_sim.base})
    r = gw.api.patch(f"/v1/subscriptions/{raw.json()['id']}", json={"format": "normalized"})
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "format"]
    assert "books.snapshot_urls has no binance base" in error["msg"]
    books.config = replace(books.config, snapshot_urls={"binance": dpdk_sim.base})
    r = gw.api.patch(f"/v1/subscriptions/{raw.json()['id']}", json={"format": "normalized"})
    assert r.status_code == 200, r.text


def test_a_wss_session_fetches_its_snapshots_over_https_with_its_ca(
    dpdk_gateway: Gateway, lab: Lab, tmp_path: Path
) -> None:
    """A TLS simulator (wss:// and https:// on one port, its own CA): the session's tls
    ca_file is what the snapshot's certificate is checked against too."""
    certs = tmp_path / "sim-certs"
    command = [*simulator_command(lab.peer_ip, TLS_PORT, 0, stdin=True), "--tls", "--cert-dir",
               str(certs)]  # fmt: skip
    proc = lab.popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    sim = SimProcess(proc, lab.peer_ip, TLS_PORT, lab)
    try:
        gw = dpdk_gateway
        books = gw.control.books
        base = f"https://{lab.peer_ip}:{TLS_PORT}"
        books.config = replace(books.config, snapshot_urls={"binance": base})
        binance = VENUES["binance"]
        seq = sim.emit(binance, 100)
        sid = gw.control.sessions.create(
            {"name": "binance", "url": f"wss://{lab.peer_ip}:{TLS_PORT}/binance/stream",
             "dialect": "binance", "transport": "dpdk", "port_id": lab_port(gw.control, lab),
             "tls_ca_file": str(certs / "ca.pem")}
        ).id  # fmt: skip
        gw.control.subscriptions.create(
            {"session_id": sid, "topics": [binance.topic], "consumer": "c", "format": "normalized"}
        )
        gw.control.sessions.start(sid)
        until(lambda: sim.subscribers(binance) > 0, "the session's subscription")
        seq = sim.emit(binance, 5)

        def synced() -> bool:
            got = gw.api.get(f"/v1/books/{sid}/{binance.symbol}")
            return got.status_code == 200 and not got.json()["stale"] and (
                got.json()["bids"], got.json()["asks"]) == sim_book(binance, seq)  # fmt: skip

        until(synced, "the book synced from the https snapshot")
        assert books.fetches[("binance", "ok")] >= 1, books.fetches
        assert books.fetches[("binance", "failed")] == 0, books.fetches
    finally:
        sim.close()

"""Every resync path of the gateway's local books, against the real feed simulator (issue #21).

The simulator runs as a child process (`python -m gateway.simulator`, rate 0: the test
emits every update through its stdin); a gateway (ControlPlane + LiveRuntime + hub ring +
BookManager, the API on a real server) holds one session to it with a normalized
subscription on a book topic. Each fault the venue lets a client detect is injected in the
simulator; the test asserts what the issue asks of it:

- a `reset` event (BookReset, with the reason) reached a ring consumer of the normalized
  topic;
- the resync is counted by reason in /metrics;
- GET /v1/books is afterwards the simulator's own book (0 books left wrong): the topic's
  SimBook replayed to the last update the simulator sent (its model is deterministic per
  topic), and for Binance also the live book its REST endpoint serves.

Faults: Binance spot and USD-M futures, a dropped update and a stale REST snapshot (REST
resync, /api/v3/depth and /fapi/v1/depth); Kraken and OKX, a wrong checksum; OKX and Bybit,
a dropped update (resubscribe resync: the venue's snapshot on subscribe); Bybit also on a
1-level topic, where levels leave the window without a delete (the book keeps to its depth).

Sessions here use the kernel transport; test_books_sim_dpdk.py runs Kraken and OKX over DPDK.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.app import create_app
from dataplane.ring import RingWriter
from gateway.control import ControlPlane
from gateway.hub import Hub
from gateway.hub.nats import NatsSink
from gateway.lab import Lab
from gateway.normalize import BookReset
from gateway.runtime import SessionSpec
from gateway.runtime.live import EngineFactory, LiveRuntime
from gateway.sessions import SessionConfig
from gateway.simulator.feeds import FEEDS, FUTURES
from gateway.simulator.process import start_simulator
from tests.integration.test_books_gateway import Gateway, metric
from tests.integration.test_sessions_helpers import fast_config, local_settings
from wsgw_bench.servers import ServerThread


@dataclass(frozen=True)
class Venue:
    dialect: str
    topic: str  # the session's topic
    path: str  # after ws://host:port/<dialect>
    symbol: str  # as GET /v1/books names it
    window: int | None = None  # levels a side the channel keeps to
    futures: bool = False  # Binance USD-M: the simulator keys the topic under FUTURES

    @property
    def sim_topic(self) -> str:
        return FUTURES + self.topic if self.futures else self.topic


VENUES = {
    "binance": Venue("binance", "btcusdt@depth@100ms", "/stream", "BTCUSDT"),
    "binance-futures": Venue(
        "binance", "btcusdt@depth@100ms", "/fstream/stream", "BTCUSDT", futures=True
    ),
    "kraken": Venue("kraken", "book:BTC/USD", "/v2", "BTC/USD", window=10),
    # A deeper subscription (`depth` 100): the book keeps to 100 levels, the checksum is of
    # the top 10 of them.
    "kraken-100": Venue("kraken", "book.100:BTC/USD", "/v2", "BTC/USD", window=100),
    "okx": Venue("okx", "books:BTC-USDT", "/ws/v5/public", "BTC-USDT"),
    "bybit": Venue("bybit", "orderbook.50.BTCUSDT", "/v5/public/spot", "BTCUSDT", window=50),
    # Levels leave a 1-level window all the time, and Bybit sends no delete for them: the
    # gateway's book must keep to the topic's depth itself.
    "bybit-1": Venue("bybit", "orderbook.1.BTCUSDT", "/v5/public/spot", "BTCUSDT", window=1),
}

#: (venue, fault, the reason the gateway must give)
FAULTS = [
    ("binance", "drop", "gap"),
    ("binance", "stale", "stale_snapshot"),
    ("binance-futures", "drop", "gap"),
    ("binance-futures", "stale", "stale_snapshot"),
    ("kraken", "checksum", "checksum"),
    ("kraken-100", "checksum", "checksum"),
    ("okx", "checksum", "checksum"),
    ("okx", "drop", "gap"),
    ("bybit", "drop", "gap"),
    ("bybit-1", "drop", "gap"),
]

HEAD_START = 100  # updates before the session subscribes (a stale snapshot can go back 50)


# ---- the simulator ----------------------------------------------------------------------------
class SimProcess:
    """The simulator child: commands on its stdin, one JSON answer a line on its stdout."""

    def __init__(
        self, proc: subprocess.Popen[str], host: str, port: int, lab: Lab | None = None
    ) -> None:
        self.proc = proc
        self.host = host
        self.port = port
        self.lab = lab  # it runs in the lab's peer namespace: reached from there only
        assert proc.stdout is not None
        json.loads(proc.stdout.readline())  # the server description after `ready`

    def command(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        answer: dict[str, Any] = json.loads(self.proc.stdout.readline())
        assert answer.get("ok"), answer
        return answer

    def emit(self, venue: Venue, count: int) -> int:
        """Publish count updates of the venue's topic; the last one's number."""
        return int(self.command(cmd="emit", dialect=venue.dialect, topic=venue.sim_topic,
                                count=count)["seq"])  # fmt: skip

    def subscribers(self, venue: Venue) -> int:
        key = f"{venue.dialect}:{venue.sim_topic}"
        found = self.command(cmd="stats")["subscribers"]
        return int(next((n for k, n in found.items() if k.endswith(key)), 0))

    def url(self, venue: Venue) -> str:
        return f"ws://{self.host}:{self.port}/{venue.dialect}{venue.path}"

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_sim(lab: Lab | None, port: int) -> SimProcess:
    proc = start_simulator(lab, port, 0, stdin=True)
    return SimProcess(proc, lab.peer_ip if lab is not None else "127.0.0.1", port, lab)


# ---- the gateway ------------------------------------------------------------------------------
def session_config(spec: SessionSpec) -> SessionConfig:
    return fast_config(spec.url, spec.dialect, transport=spec.transport, tls=spec.tls)


def start_gateway(
    tmp_path: Path,
    sim: SimProcess,
    engine_factory: EngineFactory | None = None,
    nats: NatsSink | None = None,
    *,
    groups_in_c: bool = True,
) -> tuple[Gateway, Callable[[], None]]:
    """A gateway whose REST snapshots come from the simulator (and whose hub publishes to
    `nats`, a started sink, when given); returns it and its stop. groups_in_c False: feed
    groups on the Python path (the reference)."""
    ring = RingWriter.create(None, 1 << 24)
    hub = Hub(ring=ring, nats=nats)
    runtime = LiveRuntime(
        hub,
        hub=hub,
        session_config=session_config,
        engine_factory=engine_factory,
        groups_in_c=groups_in_c,
    )
    settings = local_settings(
        tmp_path, books={"snapshot_urls": {"binance": sim.base, "binance_futures": sim.base}}
    )
    control = ControlPlane(settings, runtime)
    app = create_app(settings, runtime, control=control, hub=hub)
    server = ServerThread(app).start()
    api = httpx.Client(base_url=server.url, timeout=10)
    gw = Gateway(hub, control, server, api)

    def stop() -> None:
        for reader in gw.readers:
            reader.close()
        api.close()
        server.stop()  # shuts the control plane down: the books, the runtime, the hub
        ring.close()

    return gw, stop


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    with start_sim(None, free_port()) as proc:
        yield proc


@pytest.fixture
def gateway(tmp_path: Path, sim: SimProcess) -> Iterator[Gateway]:
    gw, stop = start_gateway(tmp_path, sim)
    try:
        yield gw
    finally:
        stop()


def until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# ---- the scenario -----------------------------------------------------------------------------
def sim_book(venue: Venue, seq: int) -> tuple[list[list[str]], list[list[str]]]:
    """The simulator's book of the topic after update seq, as far as the channel shows it."""
    book = FEEDS[venue.dialect]().book_state(venue.sim_topic)
    assert book is not None
    book.advance_to(seq, 0)
    bids, asks = book.top(venue.window)
    return [list(lv) for lv in bids], [list(lv) for lv in asks]


def sim_rest_book(sim: SimProcess, venue: Venue) -> tuple[list[list[str]], list[list[str]]]:
    """Binance: the live book the simulator serves by REST (its own, not a replay)."""
    path = "/fapi/v1/depth" if venue.futures else "/api/v3/depth"
    url = f"{sim.base}/binance{path}?symbol={venue.symbol}&limit=1000"
    if sim.lab is not None:  # read in the peer namespace, where the kernel reaches it
        get = "import sys, urllib.request as u; print(u.urlopen(sys.argv[1]).read().decode())"
        body = json.loads(sim.lab.exec([sys.executable, "-c", get, url]).stdout)
    else:
        with urllib.request.urlopen(url, timeout=5) as answer:
            body = json.loads(answer.read())
    return body["bids"], body["asks"]


def run_fault(gw: Gateway, sim: SimProcess, venue_name: str, fault: str, reason: str) -> int:
    """A session to the simulator for the venue, through run_session; its id."""
    venue = VENUES[venue_name]
    control = gw.control
    sim.emit(venue, HEAD_START)
    sid = control.sessions.create(
        {"name": venue_name, "url": sim.url(venue), "dialect": venue.dialect,
         "transport": "kernel"}
    ).id  # fmt: skip
    run_session(gw, sim, venue, sid, fault, reason)
    return sid


def run_session(gw: Gateway, sim: SimProcess, venue: Venue, sid: int, fault: str,
                reason: str) -> None:  # fmt: skip
    """Subscribe normalized, sync, inject the fault, and check the gateway's answer to it."""
    control = gw.control
    control.subscriptions.create(
        {"session_id": sid, "topics": [venue.topic], "consumer": "c", "format": "normalized"}
    )
    consumer = gw.consumer(sid, [f"norm:{venue.topic}"])
    resets: list[BookReset] = []

    def pull() -> None:
        for message in consumer.read(timeout=0):
            if isinstance(message.event, BookReset):  # type: ignore[union-attr]
                resets.append(message.event)  # type: ignore[union-attr]

    def book() -> dict[str, Any]:
        r = gw.api.get(f"/v1/books/{sid}/{venue.symbol}")
        return r.json() if r.status_code == 200 else {}  # type: ignore[no-any-return]

    def right(seq: int) -> Callable[[], bool]:
        want = sim_book(venue, seq)

        def check() -> bool:
            got = book()
            return bool(got) and not got["stale"] and (got["bids"], got["asks"]) == want

        return check

    control.sessions.start(sid)
    until(lambda: sim.subscribers(venue) > 0, "the session's subscription")
    if fault == "stale":  # the first REST snapshot is 50 updates old
        sim.command(cmd="fault", kind="stale", behind=50)
    seq = sim.emit(venue, 5)
    until(right(seq), "the book in sync")
    seq = sim.emit(venue, 20)
    until(right(seq), "the book after 20 updates")
    pull()
    if fault != "stale":  # the stale snapshot's reset came with the first sync
        assert resets == []

    if fault == "drop":
        sim.command(cmd="fault", kind="skip", seq=seq + 3)
    elif fault == "checksum":
        sim.command(cmd="fault", kind="checksum")
    if fault != "stale":
        for _ in range(6):  # the fault, then updates on top of the resync
            seq = sim.emit(venue, 5)
            time.sleep(0.1)
    seq = sim.emit(venue, 5)
    until(right(seq), f"the book right again after the {fault} fault")

    def reset_seen() -> bool:
        pull()
        return bool(resets)

    until(reset_seen, "a BookReset on the ring")
    assert [r.reason for r in resets] == [reason]
    got = book()
    assert got["resyncs"] == {reason: 1}
    assert got["last_reset_reason"] == reason
    assert (got["bids"], got["asks"]) == sim_book(venue, seq)
    if venue.dialect == "binance":
        assert got["seq"] == seq
        bids, asks = sim_rest_book(sim, venue)
        assert (got["bids"], got["asks"]) == (bids, asks)
    labels = f'reason="{reason}",session="{sid}",venue="{venue.dialect}"'
    assert metric(gw.api, f"wsgw_books_resyncs_total{{{labels}}}") == 1


@pytest.mark.parametrize(("venue", "fault", "reason"), FAULTS)
def test_fault_resets_resyncs_and_the_book_is_the_simulators(
    gateway: Gateway, sim: SimProcess, venue: str, fault: str, reason: str
) -> None:
    run_fault(gateway, sim, venue, fault, reason)


def test_a_deleted_sessions_books_and_counts_are_forgotten(
    gateway: Gateway, sim: SimProcess
) -> None:
    sid = run_fault(gateway, sim, "okx", "checksum", "checksum")
    gateway.control.sessions.delete(sid)
    assert gateway.control.books.symbols(sid) == []
    assert gateway.api.get(f"/v1/books/{sid}/BTC-USDT").status_code == 404
    assert "wsgw_books_resyncs_total{" not in gateway.api.get("/metrics").text

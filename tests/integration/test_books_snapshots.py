"""Periodic book snapshots (issue #21) against the real feed simulator: a consumer who joins
late rebuilds the gateway's book from a `snapshot` event and the deltas that follow it.

A gateway (tests.integration.test_books_sim's: ControlPlane + LiveRuntime + hub ring +
BookManager, the API on a real server) holds a kernel session to the simulator with a
normalized subscription on a book topic, and periodic snapshots set by PUT
/v1/books/{session}/snapshots. After the book has taken updates, a ring consumer and a
/v1/stream consumer attach. Each takes the first snapshot it reads as its book (a plain
dict of its own, no gateway code) and applies every delta after it; at each later snapshot
its book must equal the snapshot, and at the end both the simulator's book (its model
replayed) and GET /v1/books. The first delta after a snapshot continues the snapshot's
sequence by the venue's rules (Binance U <= seq+1 <= u, OKX prevSeqId == seq). A late
NATS subscriber (a real nats-server, the hub's sink) does the same from its subject.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import pytest

from gateway.client import Client
from gateway.hub.names import nats_subject
from gateway.hub.nats import NatsConfig, NatsSink
from gateway.normalize import BookDelta, BookReset, BookSnapshot, Level, decode
from tests.integration.nats_helpers import Subscriber
from tests.integration.test_books_gateway import Gateway
from tests.integration.test_books_sim import (
    VENUES,
    SimProcess,
    Venue,
    free_port,
    sim_book,
    start_gateway,
    start_sim,
    until,
)
from wsgw_bench.servers import NatsServer, nats_server_binary

NATS_PREFIX = "md"

Side = dict[str, str]  # price text -> size text


class ConsumerBook:
    """What a consumer keeps: the levels of the last snapshot, changed by the deltas after it."""

    def __init__(self, snapshot: BookSnapshot) -> None:
        self.seq = snapshot.seq
        self.bids: Side = {lv.price: lv.size for lv in snapshot.bids}
        self.asks: Side = {lv.price: lv.size for lv in snapshot.asks}
        self.deltas = 0
        self.checked = 0  # later snapshots found equal to this book

    def apply(self, delta: BookDelta) -> None:
        for side, levels in ((self.bids, delta.bids), (self.asks, delta.asks)):
            for lv in levels:
                if Decimal(lv.size) == 0:
                    side.pop(lv.price, None)
                else:
                    side[lv.price] = lv.size
        self.seq = delta.seq
        self.deltas += 1

    def levels(self, depth: int | None = None) -> tuple[list[list[str]], list[list[str]]]:
        bids = sorted(self.bids.items(), key=lambda kv: -Decimal(kv[0]))[:depth]
        asks = sorted(self.asks.items(), key=lambda kv: Decimal(kv[0]))[:depth]
        return [list(kv) for kv in bids], [list(kv) for kv in asks]


def as_lists(levels: list[Level]) -> list[list[str]]:
    return [[lv.price, lv.size] for lv in levels]


class LateJoiner:
    """A consumer of the normalized topic that starts from the first snapshot it reads;
    `events()` gives what arrived since the last call."""

    def __init__(self, events: Callable[[], list[object]], venue: Venue) -> None:
        self.events = events
        self.venue = venue
        self.book: ConsumerBook | None = None
        self.skipped = 0  # deltas read before the first snapshot

    def pull(self) -> None:
        for event in self.events():
            self.take(event)

    def take(self, event: object) -> None:
        if isinstance(event, BookReset):
            raise AssertionError(f"unexpected reset: {event}")
        if isinstance(event, BookSnapshot):
            self.take_snapshot(event)
        elif isinstance(event, BookDelta):
            if self.book is None:
                self.skipped += 1
                return
            if self.book.deltas == 0:
                self.check_continues(self.book.seq, event)
            self.book.apply(event)

    def take_snapshot(self, snap: BookSnapshot) -> None:
        if self.book is None:
            self.book = ConsumerBook(snap)
            return
        # A later snapshot: the book made from the first one and the deltas must equal it.
        assert snap.seq == self.book.seq
        depth = max(len(snap.bids), len(snap.asks))
        assert (as_lists(snap.bids), as_lists(snap.asks)) == self.book.levels(depth)
        self.book.checked += 1

    def check_continues(self, seq: int, delta: BookDelta) -> None:
        if self.venue.dialect == "binance":
            assert delta.first_seq <= seq + 1 <= delta.seq, (seq, delta)
        elif self.venue.dialect == "okx":
            assert delta.prev_seq == seq, (seq, delta)


@contextmanager
def simulated_gateway(
    tmp_path: Path, nats: NatsSink | None = None, *, groups_in_c: bool = True
) -> Iterator[tuple[Gateway, SimProcess]]:
    """The simulator and a gateway whose REST snapshots come from it (publishing to the
    started NATS sink too, when given; groups in C unless groups_in_c is False)."""
    sim = start_sim(None, free_port())
    try:
        gw, stop = start_gateway(tmp_path, sim, nats=nats, groups_in_c=groups_in_c)
        try:
            yield gw, sim
        finally:
            stop()
    finally:
        sim.close()


@pytest.mark.parametrize("venue_name", ["binance", "okx"])
def test_a_late_consumer_rebuilds_the_book_from_a_snapshot_and_the_deltas(
    tmp_path: Path, venue_name: str
) -> None:
    with simulated_gateway(tmp_path) as (gw, sim):
        late_consumers_rebuild_the_book(gw, sim, VENUES[venue_name])


@pytest.mark.skipif(nats_server_binary() is None, reason="nats-server is not installed")
def test_a_late_nats_subscriber_rebuilds_the_book_too(tmp_path: Path) -> None:
    with NatsServer() as server:
        sink = NatsSink(NatsConfig(servers=[server.url], subject_prefix=NATS_PREFIX)).start(10)
        with simulated_gateway(tmp_path, nats=sink) as (gw, sim):
            late_consumers_rebuild_the_book(gw, sim, VENUES["okx"], nats_url=server.url)


def client_events(client: Client) -> Callable[[], list[object]]:
    return lambda: [getattr(m, "event", None) for m in client.read(timeout=0)]


def nats_events(subscriber: Subscriber) -> Callable[[], list[object]]:
    seen = 0

    def events() -> list[object]:
        nonlocal seen
        got = subscriber.got[seen:]
        seen += len(got)
        return [decode(data, "json") for _, data, _ in got]

    return events


def late_consumers_rebuild_the_book(
    gw: Gateway, sim: SimProcess, venue: Venue, nats_url: str | None = None
) -> None:
    control = gw.control
    venue_name = venue.dialect
    sim.emit(venue, 100)
    sid = control.sessions.create(
        {"name": venue_name, "url": sim.url(venue), "dialect": venue.dialect,
         "transport": "kernel"}
    ).id  # fmt: skip
    sub = control.subscriptions.create(
        {"session_id": sid, "topics": [venue.topic], "consumer": "c", "format": "normalized"}
    ).subscription
    r = gw.api.put(f"/v1/books/{sid}/snapshots", json={"interval_ms": 200})
    assert r.status_code == 200, r.text
    control.sessions.start(sid)
    until(lambda: sim.subscribers(venue) > 0, "the session's subscription")
    seq = sim.emit(venue, 30)
    until(lambda: gw.api.get(f"/v1/books/{sid}/{venue.symbol}").status_code == 200, "a book")

    # They join late: the book has taken 30 updates and its first periodic snapshots.
    ring = gw.consumer(sid, [f"norm:{venue.topic}"])
    stream = gw.streamer(sub.id)
    joiners = [LateJoiner(client_events(ring), venue), LateJoiner(client_events(stream), venue)]
    subscriber = None
    if nats_url is not None:
        subject = nats_subject(NATS_PREFIX, sid, f"norm:{venue.topic}")
        subscriber = Subscriber(nats_url, [subject])
        joiners.append(LateJoiner(nats_events(subscriber), venue))
    try:
        deadline = time.monotonic() + 30
        while not all(j.book is not None and j.book.checked >= 2 for j in joiners):
            assert time.monotonic() < deadline, [(j.book and j.book.checked) for j in joiners]
            seq = sim.emit(venue, 3)
            time.sleep(0.05)
            for joiner in joiners:
                joiner.pull()

        want = sim_book(venue, seq)

        def caught_up() -> bool:
            for joiner in joiners:
                joiner.pull()
            return all(j.book is not None and j.book.levels() == want for j in joiners)

        until(caught_up, "the consumers' books at the simulator's last update")
        got = gw.book(sid, venue.symbol)
        assert (got["bids"], got["asks"]) == want
        for joiner in joiners:
            assert joiner.book is not None and joiner.book.deltas > 0
            assert joiner.book.seq == got["seq"]
        assert got["resyncs"] == {}

        # A depth-limited snapshot: the top 5 levels a side, the book's sequence.
        r = gw.api.put(f"/v1/books/{sid}/snapshots", json={"interval_ms": 200, "depth": 5})
        assert (r.json()["interval_ms"], r.json()["depth"]) == (200, 5)
        short: list[BookSnapshot] = []
        until(lambda: bool(short.extend(top_snapshots(ring)) or short), "a depth-5 one")
        assert (as_lists(short[0].bids), as_lists(short[0].asks)) == sim_book_top(want, 5)
        assert short[0].seq == got["seq"]
        assert gw.api.delete(f"/v1/books/{sid}/snapshots").status_code == 204
    finally:
        stream.close()
        if subscriber is not None:
            subscriber.close()


def top_snapshots(client: Client) -> list[BookSnapshot]:
    events = [getattr(m, "event", None) for m in client.read(timeout=0)]
    return [e for e in events if isinstance(e, BookSnapshot) and len(e.bids) <= 5]


def sim_book_top(
    book: tuple[list[list[str]], list[list[str]]], depth: int
) -> tuple[list[list[str]], list[list[str]]]:
    return book[0][:depth], book[1][:depth]

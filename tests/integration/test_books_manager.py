"""The BookManager over a real hub ring, this thread playing the sessions (publish_batch,
publish_gap): the resync paths the end-to-end test does not take, per venue.

- Bitstamp: REST snapshot + diff_order_book by microtimestamp; a diff older than the book
  -> `reset` (out_of_order) and a new REST snapshot.
- OKX: seqId/prevSeqId; a break -> `reset` (gap) and a resubscribe of the topic.
- A session's `$gap` (a reconnect) -> every book of it `reset` (upstream_gap); a REST book
  fetches again.
- A REST snapshot that fails (HTTP 500) is counted and asked for again.
- Non-book events (trades) are published as they are; a topic no normalized subscription
  wants any more loses its book.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from dataplane.ring import RingMessage, RingReader, RingWriter
from gateway.books.manager import BookManager, BooksConfig, SnapshotPolicy
from gateway.control import ControlPlane
from gateway.hub import Hub
from gateway.hub.names import ring_topics
from gateway.normalize import (
    BookDelta,
    BookReset,
    BookSnapshot,
    Level,
    Trade,
    decode_binary,
    decode_json,
)
from gateway.runtime import DetachedRuntime
from gateway.runtime.live import LiveRuntime
from tests.integration.test_sessions_helpers import local_settings
from tests.unit.books.messages import (
    RefBook,
    binance_depth,
    binance_rest,
    bitstamp_diff,
    bitstamp_rest,
    okx_book,
)
from wsgw_bench.books import REST_VENUES, SIM_STREAMS, sim_stream

SID = 7


class Rest:
    """A REST snapshot endpoint: answers `status` and `body` to every GET."""

    def __init__(self) -> None:
        self.body = b"{}"
        self.status = 200
        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.paths.append(self.path)
                self.send_response(owner.status)
                self.send_header("Content-Length", str(len(owner.body)))
                self.end_headers()
                self.wfile.write(owner.body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


class Books:
    """A hub over a ring, the manager following it, and a reader of what it publishes."""

    def __init__(self, rest: Rest) -> None:
        self.ring = RingWriter.create(None, 1 << 22)
        self.hub = Hub(ring=self.ring)
        self.runtime = DetachedRuntime()
        urls = {"binance": rest.url, "bitstamp": rest.url}
        self.manager = BookManager(self.hub, self.runtime, BooksConfig(snapshot_urls=urls))
        self.reader: RingReader | None = None
        self.events: list[Any] = []

    def want(self, venue: str, *topics: str) -> None:
        self.manager.set_session(SID, venue, {t: {"json"} for t in topics})
        if self.reader is None:
            normalized = [f"norm:{t}" for t in topics]
            self.reader = RingReader.attach_fd(
                self.ring.fd, topics=ring_topics(SID, normalized, gaps=False), copy=True
            )

    def publish(self, topic: str, *texts: str) -> None:
        now = time.time_ns()
        self.hub.publish_batch([(SID, topic, t.encode(), now, None) for t in texts])

    def pull(self) -> list[Any]:
        assert self.reader is not None
        for record in self.reader.poll():
            assert isinstance(record, RingMessage), record
            self.events.append(decode_json(bytes(record.payload)))
        return self.events

    def resets(self) -> list[str]:
        return [e.reason for e in self.pull() if isinstance(e, BookReset)]

    def close(self) -> None:
        self.manager.close()
        if self.reader is not None:
            self.reader.close()
        self.hub.close()


@pytest.fixture
def rest() -> Iterator[Rest]:
    server = Rest()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def books(rest: Rest) -> Iterator[Books]:
    b = Books(rest)
    try:
        yield b
    finally:
        b.close()


def until(predicate: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def levels(books: Books, symbol: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    view = books.manager.view(SID, symbol)
    assert view is not None
    return [(lv.price, lv.size) for lv in view.bids], [(lv.price, lv.size) for lv in view.asks]


def synced_at(books: Books, symbol: str, seq: int) -> bool:
    view = books.manager.view(SID, symbol)
    return view is not None and not view.stale and view.seq == seq


BIDS = [("100.0", "1"), ("99.5", "2")]
ASKS = [("100.5", "1"), ("101.0", "3")]


def test_bitstamp_rest_snapshot_and_an_out_of_order_diff(books: Books, rest: Rest) -> None:
    topic = "diff_order_book_btcusd"
    books.want("bitstamp", topic)
    rest.body = bitstamp_rest(1_000, BIDS, ASKS).encode()
    books.publish(topic, bitstamp_diff(900, [("100.0", "7")], []))  # older: dropped
    books.publish(topic, bitstamp_diff(1_100, [("99.0", "1")], []))
    until(lambda: synced_at(books, "btcusd", 1_100), "the book at 1100")
    assert rest.paths == ["/api/v2/order_book/btcusd/"]
    ref = RefBook()
    ref.apply([*BIDS, ("99.0", "1")], ASKS)
    assert levels(books, "btcusd") == (ref.sorted_bids(), ref.sorted_asks())

    rest.body = bitstamp_rest(2_000, [("98.0", "1")], [("102.0", "1")]).encode()
    books.publish(topic, bitstamp_diff(1_050, [("97.0", "1")], []))  # older than the book
    until(lambda: synced_at(books, "btcusd", 2_000), "the book after the resync")
    assert levels(books, "btcusd") == ([("98.0", "1")], [("102.0", "1")])
    until(lambda: books.resets() == ["out_of_order"], "the reset event")
    snapshots = [e for e in books.events if isinstance(e, BookSnapshot)]
    assert [s.seq for s in snapshots] == [1_100, 2_000]  # each as the book then was
    assert books.manager.resync_counts() == {(SID, "bitstamp", "out_of_order"): 1}


def test_okx_sequence_break_resubscribes(books: Books) -> None:
    topic = "books:BTC-USDT"
    books.want("okx", topic)
    ref = RefBook()
    ref.apply(BIDS, ASKS)
    books.publish(topic, okx_book("snapshot", 10, -1, BIDS, ASKS, ref.okx_checksum()))
    ref.apply([("100.0", "0")], [])
    books.publish(topic, okx_book("update", 11, 10, [("100.0", "0")], [], ref.okx_checksum()))
    until(lambda: synced_at(books, "BTC-USDT", 11), "the book at seqId 11")
    assert levels(books, "BTC-USDT") == (ref.sorted_bids(), ref.sorted_asks())

    books.publish(topic, okx_book("update", 14, 13, [("99.0", "1")], [], 0))  # 12, 13 lost
    until(lambda: books.resets() == ["gap"], "the reset event")
    resubscribe = [("unsubscribe", (SID, (topic,))), ("subscribe", (SID, (topic,)))]
    until(lambda: books.runtime.calls[-2:] == resubscribe, "the resubscribe")
    view = books.manager.view(SID, "BTC-USDT")
    assert view is not None and view.stale and view.bids == []
    ref = RefBook()
    ref.apply([("99.0", "1")], ASKS)
    books.publish(topic, okx_book("snapshot", 20, -1, [("99.0", "1")], ASKS, ref.okx_checksum()))
    until(lambda: synced_at(books, "BTC-USDT", 20), "the new snapshot")
    kinds = [type(e) for e in books.pull()]
    assert kinds == [BookSnapshot, BookDelta, BookReset, BookSnapshot]


def test_a_session_gap_resets_its_books_and_a_failed_snapshot_is_retried(
    books: Books, rest: Rest
) -> None:
    topic = "btcusdt@depth@100ms"
    books.want("binance", topic)
    rest.body = binance_rest(100, BIDS, ASKS).encode()
    books.publish(topic, binance_depth(101, 102, [("99.0", "1")], []))
    until(lambda: synced_at(books, "BTCUSDT", 102), "the book at u 102")

    rest.status, rest.body = 500, b'{"code": -1000}'
    books.hub.publish_gap(SID, None, "reconnect")
    until(lambda: books.resets() == ["upstream_gap"], "the reset event")
    until(lambda: books.manager.fetches[("binance", "failed")] >= 1, "a failed fetch")
    rest.status, rest.body = 200, binance_rest(200, [("98.0", "1")], ASKS).encode()
    until(lambda: synced_at(books, "BTCUSDT", 200), "the snapshot after the failure")
    assert books.manager.resync_counts() == {(SID, "binance", "upstream_gap"): 1}


def test_trades_pass_and_an_unwanted_topic_loses_its_book(books: Books, rest: Rest) -> None:
    trade = (
        '{"stream":"btcusdt@trade","data":{"e":"trade","E":1,"s":"BTCUSDT","t":5,'
        '"p":"100.10","q":"0.5","T":1700000000000,"m":true}}'
    )
    depth = "btcusdt@depth@100ms"
    books.want("binance", "btcusdt@trade", depth)
    rest.body = binance_rest(100, BIDS, ASKS).encode()
    books.publish("btcusdt@trade", trade)
    books.publish(depth, binance_depth(101, 101, [], []))
    until(lambda: synced_at(books, "BTCUSDT", 101), "the book")
    until(lambda: any(isinstance(e, Trade) for e in books.pull()), "the trade")
    (got,) = [e for e in books.events if isinstance(e, Trade)]
    assert (got.price, got.size, got.side, got.trade_id) == ("100.10", "0.5", "sell", "5")

    books.want("binance", "btcusdt@trade")
    assert books.manager.view(SID, "BTCUSDT") is None
    assert books.manager.symbols(SID) == []


def test_normalized_subscriptions_come_back_after_a_restart(tmp_path: Path) -> None:
    """The store keeps a subscription's format: a control plane started on it normalizes
    its topics again, with nothing asked of the API."""
    settings = local_settings(tmp_path)
    first = ControlPlane(settings, DetachedRuntime())
    first.start()
    sid = first.sessions.create(
        {"name": "bn", "url": "wss://stream.binance.com/stream", "dialect": "binance",
         "transport": "kernel"}
    ).id  # fmt: skip
    values = {"session_id": sid, "topics": ["btcusdt@trade"], "consumer": "c"}
    first.subscriptions.create({**values, "format": "normalized", "encoding": "binary"})
    first.shutdown()

    ring = RingWriter.create(None, 1 << 22)
    hub = Hub(ring=ring)
    control = ControlPlane(settings, LiveRuntime(hub, hub=hub))
    reader = RingReader.attach_fd(
        ring.fd, topics=ring_topics(sid, ["normbin:btcusdt@trade"], gaps=False), copy=True
    )
    try:
        control.start()
        trade = (
            '{"stream":"btcusdt@trade","data":{"e":"trade","E":1,"s":"BTCUSDT","t":9,'
            '"p":"100.10","q":"0.5","T":1700000000000,"m":false}}'
        )
        got: list[Any] = []

        def normalized() -> bool:
            hub.publish(sid, "btcusdt@trade", trade.encode(), time.time_ns())
            got.extend(decode_binary(bytes(r.payload)) for r in reader.read_batch(timeout=0.2))  # type: ignore[union-attr]
            return bool(got)

        until(normalized, "the normalized trade")
        assert isinstance(got[0], Trade) and got[0].side == "buy"
    finally:
        reader.close()
        control.shutdown()
        ring.close()


def test_periodic_snapshots_by_default_and_per_session(books: Books) -> None:
    """The default (books.periodic_*) publishes a `snapshot` of each synced book every
    interval, its top `depth` levels and the book's seqId; a session's own setting wins; a
    stale book publishes none (its resync's snapshot comes when it has one)."""
    topic = "books:BTC-USDT"
    books.manager.default_snapshots = SnapshotPolicy(0.1, 1)
    books.want("okx", topic)
    ref = RefBook()
    ref.apply(BIDS, ASKS)
    books.publish(topic, okx_book("snapshot", 10, -1, BIDS, ASKS, ref.okx_checksum()))

    def periodic() -> list[BookSnapshot]:
        events = books.pull()[1:]  # after the venue's own snapshot
        return [e for e in events if isinstance(e, BookSnapshot)]

    until(lambda: len(periodic()) >= 2, "two periodic snapshots")
    first = periodic()[0]
    assert (first.seq, first.bids, first.asks) == (10, [Level(*BIDS[0])], [Level(*ASKS[0])])
    books.manager.set_snapshots(SID, SnapshotPolicy(0.1, None))
    until(lambda: len(periodic()[-1].bids) == len(BIDS), "the whole book")

    books.publish(topic, okx_book("update", 14, 13, [("99.0", "1")], [], 0))  # 11-13 lost
    until(lambda: books.resets() == ["gap"], "the reset")
    after = len(books.pull())
    time.sleep(0.5)  # five periods
    assert not [e for e in books.pull()[after:] if isinstance(e, BookSnapshot)]


@pytest.mark.parametrize("name", ["binance", "okx", "bybit", "kraken", "coinbase", "bitstamp"])
def test_the_c_path_publishes_what_the_python_path_does(name: str, rest: Rest) -> None:
    """The same ring records (the simulator's stream, published in bursts of several sizes)
    through a manager on the C path and one on the Python path: the same events, byte for
    byte in both encodings (a REST snapshot's own receive stamp apart), and nearly every
    delta applied in C."""
    snap, updates = sim_stream(name, 300)
    c_events, c_applied = publish_through(name, snap, updates, rest, c_path=True)
    py_events, py_applied = publish_through(name, snap, updates, rest, c_path=False)
    assert c_events == py_events
    assert len(c_events) >= 2 * len(updates) - 2
    assert c_applied > len(updates) // 2
    assert py_applied == 0


def publish_through(
    name: str, snap: bytes, updates: list[bytes], rest: Rest, *, c_path: bool
) -> tuple[list[tuple[str, bytes]], int]:
    """What a manager publishes (topic, payload; both encodings) for the stream, and how
    many deltas it applied in C."""
    dialect, topic, symbol, _ = SIM_STREAMS[name]
    rest.body = snap
    ring = RingWriter.create(None, 1 << 22)
    hub = Hub(ring=ring)
    urls = {"binance": rest.url, "bitstamp": rest.url}
    manager = BookManager(hub, DetachedRuntime(), BooksConfig(snapshot_urls=urls, c_path=c_path))
    wanted = ring_topics(SID, [f"norm:{topic}", f"normbin:{topic}"], gaps=False)
    reader = RingReader.attach_fd(ring.fd, topics=wanted, copy=True)
    try:
        manager.set_session(SID, dialect, {topic: {"json", "binary"}})
        stream = updates if dialect in REST_VENUES else [snap, *updates]
        k = 2 if dialect in REST_VENUES else 1  # a REST book syncs on its first delta
        hub.publish_batch([(SID, topic, m, 1000 + i, None) for i, m in enumerate(stream[:k])])
        until(lambda: synced_at_any(manager, symbol), "the book synced")
        for size in (1, 7, 64, 3, 200, 1000):
            burst = stream[k : k + size]
            hub.publish_batch([(SID, topic, m, 1000 + k + i, None) for i, m in enumerate(burst)])
            k += len(burst)
        until(lambda: manager.published >= 2 * len(stream) - 2, "every event published")
        events = []
        for record in reader.poll():
            assert isinstance(record, RingMessage)
            payload = bytes(record.payload)
            binary = ":normbin:" in record.topic
            event = decode_binary(payload) if binary else decode_json(payload)
            if isinstance(event, BookSnapshot):
                payload = b"snapshot"  # stamped when its REST fetch came back
            events.append((record.topic, payload))
        return events, manager.c_applied
    finally:
        manager.close()
        reader.close()
        hub.close()


def synced_at_any(manager: BookManager, symbol: str) -> bool:
    view = manager.view(SID, symbol)
    return view is not None and not view.stale

"""Normalized subscriptions and local books end to end (issue #21), kernel transport: a
LiveRuntime's session reads a small venue server of this module (WebSocket, plus a REST
snapshot endpoint for Binance), the control plane's BookManager follows the hub ring, and
the test reads what consumers get: the normalized events over the ring (typed, by the SDK,
in JSON and binary), the book by GET /v1/books, the resyncs in /metrics.

- Binance: REST snapshot + diff depth by the U/u rules; a sequence gap -> a `reset` event,
  a new REST snapshot, the book right again.
- Kraken: snapshot on subscribe + updates with the CRC32 of the top 10; a wrong checksum ->
  a `reset`, a resubscribe, the venue's new snapshot, the book right again.

Main's simulator serves neither correct books nor a REST snapshot yet, so the venue server
here replays the messages of tests/unit/books/messages.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.server import ServerConnection, serve

from api.app import create_app
from dataplane.ring import RingReader, RingWriter
from gateway.client import Client, NormalizedMessage, RingSource
from gateway.control import ControlPlane
from gateway.hub import Hub
from gateway.hub.names import ring_topics
from gateway.normalize import BookDelta, BookReset, BookSnapshot
from gateway.runtime import SessionSpec
from gateway.runtime.live import LiveRuntime
from gateway.sessions import SessionConfig
from tests.integration.test_sessions_helpers import fast_config, local_settings
from tests.unit.books.messages import Change, RefBook, binance_depth, binance_rest, kraken_book
from wsgw_bench.servers import ServerThread

BINANCE_TOPIC = "btcusdt@depth@100ms"
KRAKEN_TOPIC = "book:BTC/USD"


# ---- the venue ------------------------------------------------------------------------------
class VenueServer:
    """A WebSocket server on its own thread: answers each request with `reply(request)`
    and sends what the test pushes to every open connection."""

    def __init__(self, reply: Callable[[dict[str, Any]], list[str]]) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.conns: set[ServerConnection] = set()
        self.errors: list[Exception] = []
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._stop: asyncio.Future[None] | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> VenueServer:
        self._thread.start()
        assert self._ready.wait(10), "the venue server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set_result, None)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())
        self.loop.close()

    async def _main(self) -> None:
        self._stop = self.loop.create_future()
        async with serve(self._handle, "127.0.0.1", 0) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            self._ready.set()
            await self._stop

    async def _handle(self, ws: ServerConnection) -> None:
        self.paths.append(ws.request.path if ws.request else "")
        self.conns.add(ws)
        try:
            async for text in ws:
                request = json.loads(text)
                self.requests.append(request)
                for answer in self.reply(request):
                    await ws.send(answer)
        except Exception as exc:  # a connection the client dropped
            self.errors.append(exc)
        finally:
            self.conns.discard(ws)

    def push(self, *texts: str) -> None:
        async def send() -> None:
            for ws in list(self.conns):
                for text in texts:
                    await ws.send(text)

        asyncio.run_coroutine_threadsafe(send(), self.loop).result(10)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"


class SnapshotServer:
    """GET /api/v3/depth?symbol=S&limit=N (Binance's REST snapshot): serves `body`."""

    def __init__(self) -> None:
        self.body = b"{}"
        self.requests: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests.append(self.path)
                body = owner.body
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> SnapshotServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


# ---- the gateway ----------------------------------------------------------------------------
@dataclass
class Gateway:
    hub: Hub
    control: ControlPlane
    server: ServerThread
    api: httpx.Client
    readers: list[RingReader] = field(default_factory=list)

    def consumer(self, session_id: int, topics: list[str]) -> Client:
        """A ring consumer of these (normalized) topics, decoding them (normalized=True)."""
        assert self.hub.ring is not None
        reader = RingReader.attach_fd(
            self.hub.ring.fd, topics=ring_topics(session_id, topics), copy=True
        )
        self.readers.append(reader)
        return Client(RingSource(reader), normalized=True)

    def streamer(self, subscription_id: int) -> Client:
        """A /v1/stream consumer of a subscription, decoding (normalized=True)."""
        url = f"{self.server.ws_url}/v1/stream?subscription={subscription_id}"
        return Client.connect(url, normalized=True)

    def book(self, session_id: int, symbol: str) -> dict[str, Any]:
        r = self.api.get(f"/v1/books/{session_id}/{symbol}")
        assert r.status_code == 200, r.text
        result: dict[str, Any] = r.json()
        return result


def session_config(spec: SessionSpec) -> SessionConfig:
    return fast_config(spec.url, spec.dialect)


@pytest.fixture
def snapshots() -> Iterator[SnapshotServer]:
    with SnapshotServer() as server:
        yield server


@pytest.fixture
def gateway(tmp_path: Path, snapshots: SnapshotServer) -> Iterator[Gateway]:
    ring = RingWriter.create(None, 1 << 24)
    hub = Hub(ring=ring)
    runtime = LiveRuntime(hub, hub=hub, session_config=session_config)
    settings = local_settings(tmp_path, books={"snapshot_urls": {"binance": snapshots.url}})
    control = ControlPlane(settings, runtime)
    app = create_app(settings, runtime, control=control, hub=hub)
    server = ServerThread(app).start()  # its lifespan starts the control plane
    api = httpx.Client(base_url=server.url, timeout=10)
    gw = Gateway(hub, control, server, api)
    try:
        yield gw
    finally:
        for reader in gw.readers:
            reader.close()
        api.close()
        server.stop()  # shuts the control plane down: the books, the runtime, the hub
        ring.close()


def until(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Rebuilt:
    """What a consumer makes of the normalized events: its own book, and the resets."""

    def __init__(self, client: Client, depth: int | None = None) -> None:
        self.client = client
        self.book = RefBook(depth=depth)
        self.events: list[Any] = []
        self.resets: list[str] = []

    def pull(self) -> None:
        for message in self.client.read(timeout=0):
            assert isinstance(message, NormalizedMessage), message
            event = message.event
            self.events.append(event)
            if isinstance(event, BookSnapshot | BookDelta):
                if isinstance(event, BookSnapshot):
                    self.book = RefBook(depth=self.book.depth)
                bids = [(lv.price, lv.size) for lv in event.bids]
                self.book.apply(bids, [(lv.price, lv.size) for lv in event.asks])
            elif isinstance(event, BookReset):
                self.resets.append(event.reason)

    def levels(self) -> tuple[list[list[str]], list[list[str]]]:
        return (
            [list(lv) for lv in self.book.sorted_bids()],
            [list(lv) for lv in self.book.sorted_asks()],
        )


def expected(ref: RefBook) -> tuple[list[list[str]], list[list[str]]]:
    return [list(lv) for lv in ref.sorted_bids()], [list(lv) for lv in ref.sorted_asks()]


def metric(api: httpx.Client, line_start: str) -> float:
    text = api.get("/metrics").text
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    books = [line for line in text.splitlines() if "books" in line]
    raise AssertionError(f"no {line_start} in /metrics: {books}")


# ---- Binance --------------------------------------------------------------------------------
def binance_reply(request: dict[str, Any]) -> list[str]:
    return [json.dumps({"result": None, "id": request.get("id")})]


BIDS: list[Change] = [("100.0", "1"), ("99.5", "2"), ("99.0", "5")]
ASKS: list[Change] = [("100.5", "1"), ("101.0", "3")]


def test_binance_rest_snapshot_diffs_and_a_gap_resync(
    gateway: Gateway, snapshots: SnapshotServer
) -> None:
    control = gateway.control
    with VenueServer(binance_reply) as venue:
        sid = control.sessions.create(
            {"name": "bn", "url": f"{venue.url}/stream", "dialect": "binance",
             "transport": "kernel"}
        ).id  # fmt: skip
        base = {"session_id": sid, "topics": [BINANCE_TOPIC], "consumer": "c"}
        sub = control.subscriptions.create({**base, "format": "normalized"}).subscription
        control.subscriptions.create({**base, "format": "normalized", "encoding": "binary"})
        as_json = Rebuilt(gateway.consumer(sid, [f"norm:{BINANCE_TOPIC}"]))
        as_binary = Rebuilt(gateway.consumer(sid, [f"normbin:{BINANCE_TOPIC}"]))
        streamed = Rebuilt(gateway.streamer(sub.id))
        ref = RefBook()
        ref.apply(BIDS, ASKS)
        snapshots.body = binance_rest(100, BIDS, ASKS).encode()
        control.sessions.start(sid)
        until(lambda: bool(venue.conns), "the session to connect")
        until(lambda: bool(venue.requests) or "depth" in "".join(venue.paths), "the subscription")

        # Older than the snapshot (dropped), straddling it, then the next one.
        steps: list[tuple[int, int, list[Change], list[Change]]] = [
            (96, 100, [("100.0", "9")], []),
            (101, 103, [("99.5", "0"), ("99.8", "4")], []),
            (104, 106, [], [("100.5", "2"), ("102.0", "1")]),
        ]
        for first, last, bids, asks in steps:
            venue.push(binance_depth(first, last, bids, asks))
            if last > 100:
                ref.apply(bids, asks)
        until(lambda: gateway.book(sid, "BTCUSDT")["seq"] == 106, "the book at u 106")
        book = gateway.book(sid, "BTCUSDT")
        assert not book["stale"]
        assert (book["bids"], book["asks"]) == expected(ref)
        assert gateway.api.get(f"/v1/books/{sid}/btcusdt?depth=1").json()["bids"] == [
            ["100.0", "1"]
        ]

        def rebuilt() -> bool:
            for consumer in (as_json, as_binary, streamed):
                consumer.pull()
            return all(c.levels() == expected(ref) for c in (as_json, as_binary, streamed))

        until(rebuilt, "the consumers' books")
        # The same events, in either encoding, over the ring and /v1/stream.
        assert as_json.events == as_binary.events == streamed.events
        assert isinstance(as_json.events[0], BookSnapshot)  # the REST snapshot comes first
        assert len(snapshots.requests) == 1
        assert "symbol=BTCUSDT" in snapshots.requests[0]

        # A lost update: U jumps. The book resets, fetches again, joins the new snapshot.
        ref = RefBook()
        ref.apply([("98.0", "1")], [("103.0", "1")])
        snapshots.body = binance_rest(112, [("98.0", "1")], [("103.0", "1")]).encode()
        venue.push(binance_depth(110, 112, [("97.0", "1")], []))
        venue.push(binance_depth(113, 115, [("98.5", "2")], []))
        ref.apply([("98.5", "2")], [])
        until(lambda: gateway.book(sid, "BTCUSDT")["seq"] == 115, "the resynced book")
        book = gateway.book(sid, "BTCUSDT")
        assert (book["bids"], book["asks"]) == expected(ref)
        assert book["resyncs"] == {"gap": 1}
        assert book["last_reset_reason"] == "gap"
        until(rebuilt, "the consumers' books after the resync")
        assert as_json.resets == streamed.resets == ["gap"]
        streamed.client.close()
        assert len(snapshots.requests) == 2
        labels = f'reason="gap",session="{sid}",venue="binance"'
        assert metric(gateway.api, f"wsgw_books_resyncs_total{{{labels}}}") == 1


# ---- Kraken ---------------------------------------------------------------------------------
class KrakenVenue:
    """Kraken v2's book channel over a reference book: a subscribe gets the ack and a
    snapshot of the book as it is; updates carry the book's checksum."""

    def __init__(self) -> None:
        self.book = RefBook(depth=10)
        self.book.apply(BIDS, ASKS)
        self.subscribes = 0
        self.unsubscribes = 0

    def reply(self, request: dict[str, Any]) -> list[str]:
        method = request.get("method")
        params = request.get("params") or {}
        out = []
        for symbol in params.get("symbol") or []:
            result = {"channel": params.get("channel"), "symbol": symbol, "snapshot": True}
            ack = {"method": method, "req_id": request.get("req_id"), "result": result}
            out.append(json.dumps({**ack, "success": True}))
        if method == "subscribe":
            self.subscribes += 1
            out.append(self.snapshot())
        elif method == "unsubscribe":
            self.unsubscribes += 1
        return out

    def snapshot(self) -> str:
        bids, asks = self.book.sorted_bids(), self.book.sorted_asks()
        return kraken_book("snapshot", bids, asks, self.book.kraken_checksum())

    def update(self, bids: list[Change], asks: list[Change], *, corrupt: bool = False) -> str:
        self.book.apply(bids, asks)
        checksum = self.book.kraken_checksum() ^ (1 if corrupt else 0)
        return kraken_book("update", bids, asks, checksum)


def test_kraken_checksum_mismatch_resubscribes_and_recovers(gateway: Gateway) -> None:
    control = gateway.control
    kraken = KrakenVenue()
    with VenueServer(kraken.reply) as venue:
        sid = control.sessions.create(
            {"name": "kr", "url": f"{venue.url}/v2", "dialect": "kraken", "transport": "kernel"}
        ).id
        control.subscriptions.create(
            {"session_id": sid, "topics": [KRAKEN_TOPIC], "consumer": "c", "format": "normalized"}
        )
        consumer = Rebuilt(gateway.consumer(sid, [f"norm:{KRAKEN_TOPIC}"]), depth=10)
        control.sessions.start(sid)
        until(lambda: kraken.subscribes == 1, "the subscription")
        until(lambda: not gateway.book(sid, "BTC/USD")["stale"], "the snapshot")

        venue.push(kraken.update([("100.0", "0"), ("99.7", "3")], []))
        venue.push(kraken.update([], [("100.2", "1.5")]))
        until(lambda: gateway.book(sid, "BTC/USD")["asks"][0] == ["100.2", "1.5"], "updates")
        book = gateway.book(sid, "BTC/USD")
        assert (book["bids"], book["asks"]) == expected(kraken.book)

        # The venue's checksum does not match the book: reset, resubscribe, new snapshot.
        venue.push(kraken.update([("99.9", "1")], [], corrupt=True))
        until(lambda: kraken.subscribes == 2, "the resubscribe")
        assert kraken.unsubscribes == 1
        until(lambda: not gateway.book(sid, "BTC/USD")["stale"], "the new snapshot")
        venue.push(kraken.update([], [("101.0", "0")]))
        until(
            lambda: gateway.book(sid, "BTC/USD")["asks"] == expected(kraken.book)[1],
            "the update after the resync",
        )
        book = gateway.book(sid, "BTC/USD")
        assert (book["bids"], book["asks"]) == expected(kraken.book)
        assert book["resyncs"] == {"checksum": 1}

        def rebuilt() -> bool:
            consumer.pull()
            return consumer.levels() == expected(kraken.book)

        until(rebuilt, "the consumer's book")
        assert consumer.resets == ["checksum"]
        labels = f'reason="checksum",session="{sid}",venue="kraken"'
        assert metric(gateway.api, f"wsgw_books_resyncs_total{{{labels}}}") == 1

"""The simulator's books through a plain WebSocket client into gateway.normalize and
gateway.books.BookSync, for every venue: the client's book is the simulator's own book
after every update; each injected fault (a dropped update, a wrong checksum, a stale REST
snapshot) is detected with its reason and, after a new snapshot, the book is right again.

The expected book at update n is the topic's SimBook replayed to n (the simulator's model
is deterministic per topic); at the end the client's book is also compared with the live
book the simulator published from. The simulator runs at rate 0 and the test emits, so
every step is seen.
"""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect

from gateway.books import Action, BookSync, Outcome, Reason, make_sync
from gateway.normalize import BookDelta, BookSnapshot, make_normalizer
from gateway.simulator import Fault, SimConfig, Simulator, wait_until
from gateway.simulator.books import SimBook
from gateway.simulator.feeds import FEEDS, FUTURES
from tests.integration.test_simulator_helpers import run


@dataclass(frozen=True)
class Venue:
    dialect: str
    topic: str  # as the simulator keys it
    path: str
    symbol: str
    subscribe: dict[str, Any] | None = None  # None: subscribed by the URL
    unsubscribe: dict[str, Any] | None = None
    rest: str | None = None  # REST snapshot path (Binance, Bitstamp)
    window: int | None = None  # levels a side the channel keeps to
    sync_options: dict[str, Any] = field(default_factory=dict)


VENUES = {
    "binance": Venue(
        "binance",
        "btcusdt@depth@100ms",
        "/stream?streams=btcusdt@depth@100ms",
        "BTCUSDT",
        rest="/binance/api/v3/depth?symbol=BTCUSDT&limit=1000",
    ),
    "binance-futures": Venue(
        "binance",
        FUTURES + "btcusdt@depth@100ms",
        "/fstream/stream?streams=btcusdt@depth@100ms",
        "BTCUSDT",
        rest="/binance/fapi/v1/depth?symbol=BTCUSDT&limit=1000",
    ),
    "bitstamp": Venue(
        "bitstamp",
        "diff_order_book_btcusd",
        "/",
        "btcusd",
        {"event": "bts:subscribe", "data": {"channel": "diff_order_book_btcusd"}},
        {"event": "bts:unsubscribe", "data": {"channel": "diff_order_book_btcusd"}},
        rest="/bitstamp/api/v2/order_book/btcusd/",
    ),
    "kraken": Venue(
        "kraken",
        "book:BTC/USD",
        "/v2",
        "BTC/USD",
        {"method": "subscribe", "params": {"channel": "book", "symbol": ["BTC/USD"]}},
        {"method": "unsubscribe", "params": {"channel": "book", "symbol": ["BTC/USD"]}},
        window=10,
        sync_options={"depth": 10},
    ),
    "okx": Venue(
        "okx",
        "books:BTC-USDT",
        "/ws/v5/public",
        "BTC-USDT",
        {"op": "subscribe", "args": [{"channel": "books", "instId": "BTC-USDT"}]},
        {"op": "unsubscribe", "args": [{"channel": "books", "instId": "BTC-USDT"}]},
    ),
    "bybit": Venue(
        "bybit",
        "orderbook.50.BTCUSDT",
        "/v5/public/spot",
        "BTCUSDT",
        {"op": "subscribe", "args": ["orderbook.50.BTCUSDT"]},
        {"op": "unsubscribe", "args": ["orderbook.50.BTCUSDT"]},
        window=50,
        sync_options={"depth": 50},
    ),
    "coinbase": Venue(
        "coinbase",
        "level2:BTC-USD",
        "/",
        "BTC-USD",
        {"type": "subscribe", "product_ids": ["BTC-USD"], "channels": ["level2"]},
        {"type": "unsubscribe", "product_ids": ["BTC-USD"], "channels": ["level2"]},
    ),
}

#: Updates published before the client connects (a stale snapshot can then be older
#: than the client's first update).
HEAD_START = 100
STEPS = 150


class Client:
    """One venue's book kept by a plain client: messages in order into the normalizer and
    the venue's BookSync, REST snapshots or resubscribes when the sync asks."""

    def __init__(self, sim: Simulator, venue: Venue) -> None:
        self.sim = sim
        self.venue = venue
        self.normalizer = make_normalizer(venue.dialect)
        self.sync: BookSync = make_sync(venue.dialect, venue.symbol, **venue.sync_options)
        self.expected: SimBook = FEEDS[venue.dialect]().book_state(venue.topic)  # type: ignore[assignment]
        self.ws: ClientConnection | None = None
        self.outcomes: list[tuple[int, Outcome]] = []
        self.checked = 0  # steps at which the book was compared
        self.last_seq = 0
        self.dropped: set[int] = set()  # updates the simulator was told to skip
        self.prev_seqs = 0  # deltas that named their predecessor (Binance futures pu, OKX)

    @property
    def publisher_subscribed(self) -> bool:
        found = self.sim.publishers.get((self.venue.dialect, self.venue.topic))
        return found is not None and bool(found.subscribers)

    async def open(self) -> None:
        self.ws = await connect(self.sim.url(self.venue.dialect, self.venue.path))
        if self.venue.subscribe is not None:
            await self.ws.send(orjson.dumps(self.venue.subscribe).decode())
        await wait_until(lambda: self.publisher_subscribed)

    async def resubscribe(self) -> None:
        assert self.ws is not None and self.venue.unsubscribe and self.venue.subscribe
        await self.ws.send(orjson.dumps(self.venue.unsubscribe).decode())
        await wait_until(lambda: not self.publisher_subscribed)
        await self.ws.send(orjson.dumps(self.venue.subscribe).decode())
        await wait_until(lambda: self.publisher_subscribed)

    async def rest_snapshot(self) -> Outcome:
        assert self.venue.rest is not None
        url = f"http://127.0.0.1:{self.sim.port}{self.venue.rest}"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())
        snap: BookSnapshot = self.normalizer.rest_snapshot(body, self.venue.symbol, 0)  # type: ignore[attr-defined]
        outcome = self.sync.on_snapshot(snap)
        self.outcomes.append((-1, outcome))
        return outcome

    async def recover(self) -> None:
        """What a gateway does on RESYNC: a new REST snapshot (again while it is refused)
        or a resubscribe, whose first message is the snapshot."""
        if self.venue.rest is not None:
            for _ in range(3):
                if (await self.rest_snapshot()).action is not Action.RESYNC:
                    self.check(self.sync.book.seq if self.venue.dialect == "binance" else None)
                    return
            raise AssertionError(f"no usable snapshot: {self.outcomes[-3:]}")
        await self.resubscribe()

    async def read_until(self, target: int) -> None:
        """Process data messages until the one numbered target (or a later one)."""
        assert self.ws is not None
        while target in self.dropped:
            target -= 1
        while self.last_seq < target:
            raw = await asyncio.wait_for(self.ws.recv(decode=False), 5)
            body = orjson.loads(raw)
            if "sim_seq" not in body:
                continue
            self.last_seq = seq = body["sim_seq"]
            for event in self.normalizer.normalize(raw, time.time_ns()):
                assert isinstance(event, BookSnapshot | BookDelta)
                if isinstance(event, BookDelta) and event.prev_seq:
                    self.prev_seqs += 1
                outcome = self.sync.on_event(event)
                self.outcomes.append((seq, outcome))
                if outcome.action is Action.RESYNC:
                    await self.recover()
                elif outcome.action is Action.BUFFERED and self.venue.rest:
                    if len(self.sync._buffer) == 3:  # a few buffered, as the venues advise
                        await self.recover()
                elif outcome.action is Action.APPLIED:
                    self.check(seq)

    def check(self, seq: int | None) -> None:
        """The book is the simulator's after update seq (None: nothing to compare yet)."""
        if seq is None or not self.sync.synced:
            return
        self.expected.advance_to(seq, 0)
        assert self.sync.book.snapshot() == self.expected.top(self.venue.window), seq
        self.checked += 1

    async def step(self, count: int) -> None:
        target = self.sim.emit(self.venue.dialect, self.venue.topic, count)
        await self.read_until(target)

    def resyncs(self) -> list[Reason | None]:
        return [o.reason for _, o in self.outcomes if o.action is Action.RESYNC]

    def final_check(self) -> None:
        """The client's book is the live book the simulator published from."""
        assert self.sync.synced
        live = self.sim.book(self.venue.dialect, self.venue.topic)
        assert live is not None
        assert self.sync.book.snapshot() == live.top(self.venue.window)


async def _session(venue_name: str, fault: str | None) -> Client:
    venue = VENUES[venue_name]
    async with Simulator(SimConfig(rate=0, heartbeat_interval=0.2)) as sim:
        sim.emit(venue.dialect, venue.topic, HEAD_START)
        client = Client(sim, venue)
        await client.open()
        if fault == "stale":
            sim.inject(Fault("stale", behind=50))
        for _ in range(10):
            await client.step(5)
        assert client.sync.synced and client.checked >= 40
        if fault == "drop":
            lost = _detectable_drop(venue, sim.sent(venue.dialect, venue.topic))
            client.dropped.add(lost)
            sim.inject(Fault("skip", seq=lost))
        elif fault == "checksum":
            sim.inject(Fault("checksum"))
        for _ in range(STEPS // 5):
            await client.step(5)
        client.final_check()
        assert client.ws is not None
        await client.ws.close()
    return client


def _detectable_drop(venue: Venue, after: int) -> int:
    """The first update past `after` whose loss the venue's rules see at once: any for a
    sequenced venue; for Kraken one whose loss changes the next checksum (a lost update
    that only touched levels outside the top 10 leaves the book right)."""
    if venue.dialect != "kraken":
        return after + 1
    feed = FEEDS["kraken"]()
    normalizer = make_normalizer("kraken")
    for lost in range(after + 1, after + 50):
        sync = make_sync("kraken", venue.symbol, depth=10)
        (snap,) = normalizer.normalize(feed.render_snapshot(venue.topic, lost - 1, 0) or b"", 0)
        assert isinstance(snap, BookSnapshot)
        sync.on_snapshot(snap)
        (delta,) = normalizer.normalize(feed.render(venue.topic, lost + 1, 0), 0)
        assert isinstance(delta, BookDelta)
        if sync.on_delta(delta).action is Action.RESYNC:
            return lost
    raise AssertionError("no detectable drop")


@pytest.mark.parametrize("venue", list(VENUES))
def test_client_book_is_the_simulators_at_every_step(venue: str) -> None:
    client = run(_session(venue, None))
    assert client.resyncs() == []
    assert client.checked >= 150
    # Binance USD-M futures deltas carry pu, spot ones do not: each sync rule is exercised.
    assert bool(client.prev_seqs) == (venue in ("binance-futures", "okx"))


FAULTS = [
    ("binance", "drop", Reason.GAP),
    ("binance-futures", "drop", Reason.GAP),
    ("okx", "drop", Reason.GAP),
    ("bybit", "drop", Reason.GAP),
    ("kraken", "drop", Reason.CHECKSUM),
    ("kraken", "checksum", Reason.CHECKSUM),
    ("okx", "checksum", Reason.CHECKSUM),
    ("binance", "stale", Reason.STALE_SNAPSHOT),
    ("binance-futures", "stale", Reason.STALE_SNAPSHOT),
]


@pytest.mark.parametrize(("venue", "fault", "reason"), FAULTS)
def test_fault_is_detected_and_the_book_is_right_again(
    venue: str, fault: str, reason: Reason
) -> None:
    client = run(_session(venue, fault))
    assert client.resyncs() == [reason]
    assert client.sync.resyncs == {reason: 1}
    assert client.sync.synced  # and final_check compared it with the simulator's
    assert client.checked >= 150


def _get(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, orjson.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, orjson.loads(exc.read())


def test_rest_snapshots_limits_symbols_groups_and_the_stale_fault() -> None:
    async def scenario() -> None:
        config = SimConfig(rate=0, symbols=("BTCUSDT", "btcusd"))
        async with Simulator(config) as sim:
            sim.emit("binance", "btcusdt@depth", 30)
            sim.emit("binance", "btcusdt@depth", 5, group="g")
            port = sim.port
            get = lambda path: asyncio.to_thread(_get, port, path)  # noqa: E731
            # No dialect prefix needed: the path is Binance's own; limit cuts each side.
            status, body = await get("/api/v3/depth?symbol=BTCUSDT&limit=5")
            live = sim.book("binance", "btcusdt@depth")
            assert live is not None
            assert status == 200 and body["lastUpdateId"] == 30
            bids, asks = live.top(5)
            assert body["bids"] == [list(lv) for lv in bids]
            assert body["asks"] == [list(lv) for lv in asks]
            # Another group has its own publisher, so its own book and sequence.
            status, body = await get("/binance/api/v3/depth?symbol=BTCUSDT&group=g")
            assert status == 200 and body["lastUpdateId"] == 5
            status, body = await get("/api/v3/depth?symbol=ETHUSDT")
            assert status == 400 and body["code"] == -1121
            # The stale fault, over the HTTP control: one snapshot 10 updates old, then fresh.
            status, _ = await get("/_sim/command?cmd=fault&kind=stale&behind=10")
            assert status == 200
            assert (await get("/api/v3/depth?symbol=BTCUSDT"))[1]["lastUpdateId"] == 20
            assert (await get("/api/v3/depth?symbol=BTCUSDT"))[1]["lastUpdateId"] == 30
            assert sim.stats()["counters"]["faults_fired"] == {"stale": 1}
            # Bitstamp: the microtimestamp of the last update is the snapshot's.
            sim.emit("bitstamp", "diff_order_book_btcusd", 3)
            status, body = await get("/api/v2/order_book/btcusd/")
            stamp = sim.book("bitstamp", "diff_order_book_btcusd")
            assert stamp is not None and status == 200
            assert int(body["microtimestamp"]) == stamp.ts_us and len(body["bids"]) >= 20
            # A WebSocket upgrade on the same port still works: REST paths are GETs only.
            async with connect(sim.url("binance", "/stream?streams=btcusdt@depth")) as ws:
                sim.emit("binance", "btcusdt@depth", 1)
                assert orjson.loads(await asyncio.wait_for(ws.recv(), 5))["data"]["u"] == 31

    run(scenario())

"""Differential tests against cryptofeed's book (the `order-book` C extension), fed the same
raw messages: the same levels after every message, and the same Kraken and OKX checksums.

The reference side does what cryptofeed's feeds do: parse the JSON with Decimal floats,
then for each level set the size or, for a zero size, delete the price if present."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from order_book import OrderBook as CryptofeedBook

from gateway.books import Action, BookSync, make_sync
from gateway.normalize import BookSnapshot, make_normalizer
from gateway.simulator.books import kraken_checksum as sim_kraken_checksum
from gateway.simulator.books import okx_checksum as sim_okx_checksum
from gateway.simulator.feeds import FEEDS, FUTURES, Feed
from tests.unit.books import messages
from tests.unit.books.test_checksums import (
    KRAKEN_DOC_ASKS,
    KRAKEN_DOC_BIDS,
    KRAKEN_DOC_CHECKSUM,
    OKX_DOC_1,
    OKX_DOC_1_CHECKSUM,
    OKX_DOC_2,
    OKX_DOC_2_CHECKSUM,
)

KRAKEN_DEPTH = 10
SIZES = ["0", "0.00000000", "1", "0.5", "2.50000000", "12.34", "0.00000001", "300"]


def cf_set(book: CryptofeedBook, side: str, price: Any, size: Any) -> None:
    levels = book.bids if side == "bid" else book.asks
    price, size = Decimal(str(price)), Decimal(str(size))
    if size == 0:
        if price in levels:
            del levels[price]
    else:
        levels[price] = size


def cf_apply(venue: str, book: CryptofeedBook, raw: str) -> None:
    """cryptofeed's handling of each venue's book message, reduced to the level updates."""
    msg = json.loads(raw, parse_float=Decimal)
    if venue == "binance":
        data = msg.get("data", msg)
        for key, side in (("b", "bid"), ("a", "ask"), ("bids", "bid"), ("asks", "ask")):
            for price, size in data.get(key, []):
                cf_set(book, side, price, size)
    elif venue == "kraken":
        for item in msg["data"]:
            for key, side in (("bids", "bid"), ("asks", "ask")):
                for level in item[key]:
                    cf_set(book, side, level["price"], level["qty"])
        # Kraken: truncate to the subscribed depth once the whole message is applied.
        # (order-book's max_depth_strict truncates at each insert instead, which drops a
        # level Kraken still shows when the same message also deletes one above it.)
        for levels in (book.bids, book.asks):
            while len(levels) > KRAKEN_DEPTH:
                del levels[levels.index(KRAKEN_DEPTH)[0]]
    elif venue == "okx":
        for item in msg["data"]:
            for key, side in (("bids", "bid"), ("asks", "ask")):
                for price, size, *_ in item[key]:
                    cf_set(book, side, price, size)
    elif venue == "bybit":
        for key, side in (("b", "bid"), ("a", "ask")):
            for price, size in msg["data"][key]:
                cf_set(book, side, price, size)
    elif venue == "coinbase":
        if msg["type"] == "snapshot":
            for key, side in (("bids", "bid"), ("asks", "ask")):
                for price, size in msg[key]:
                    cf_set(book, side, price, size)
        else:
            for side, price, size in msg["changes"]:
                cf_set(book, "bid" if side == "buy" else "ask", price, size)
    elif venue == "bitstamp":
        data = msg.get("data", msg)
        for key, side in (("bids", "bid"), ("asks", "ask")):
            for price, size in data[key]:
                cf_set(book, side, price, size)


def ours_as_decimals(sync: BookSync) -> dict[str, list[tuple[Decimal, Decimal]]]:
    bids, asks = sync.book.snapshot()
    return {
        "bid": [(Decimal(p), Decimal(s)) for p, s in bids],
        "ask": [(Decimal(p), Decimal(s)) for p, s in asks],
    }


def theirs(book: CryptofeedBook) -> dict[str, list[tuple[Decimal, Decimal]]]:
    as_dict = book.to_dict()
    return {"bid": list(as_dict["bid"].items()), "ask": list(as_dict["ask"].items())}


def unsigned(value: int) -> int:
    return value & 0xFFFFFFFF


# ---- message streams per venue -------------------------------------------------------------
def price_text(venue: str, n: int) -> str:
    # Each venue spells a price one way; Kraken v2 sends JSON numbers with the pair's
    # precision, so a whole price still has its ".0".
    return f"{n // 10}.{n % 10}" if venue == "kraken" else str(Decimal(n).scaleb(-2))


Stream = tuple[list[str], Callable[[], BookSnapshot] | None]


def build_stream(
    venue: str, snap: list[tuple[bool, int, str]], updates: list[list[tuple[bool, int, str]]]
) -> Stream:
    """Raw messages: the snapshot (or a REST snapshot maker) then the updates."""

    def split(
        change: list[tuple[bool, int, str]],
    ) -> tuple[list[messages.Change], list[messages.Change]]:
        bids = [(price_text(venue, n), s) for is_bid, n, s in change if is_bid]
        asks = [(price_text(venue, n + 500), s) for is_bid, n, s in change if not is_bid]
        return bids, asks

    snap_bids, snap_asks = split([c for c in snap if c[2].strip("0.")])
    ref = messages.RefBook(depth=10 if venue == "kraken" else None)
    ref.apply(snap_bids, snap_asks)
    raws: list[str] = []
    rest: Callable[[], BookSnapshot] | None = None
    normalizer = make_normalizer(venue)
    if venue == "binance":
        text = messages.binance_rest(1000, snap_bids, snap_asks)
        rest = lambda: normalizer.rest_snapshot(text, "BTCUSDT", 0)  # type: ignore[attr-defined]  # noqa: E731
        raws.append(text)
    elif venue == "bitstamp":
        text = messages.bitstamp_rest(1000, snap_bids, snap_asks)
        rest = lambda: normalizer.rest_snapshot(text, "btcusd", 0)  # type: ignore[attr-defined]  # noqa: E731
        raws.append(text)
    elif venue == "kraken":
        raws.append(messages.kraken_book("snapshot", snap_bids, snap_asks, ref.kraken_checksum()))
    elif venue == "okx":
        raws.append(
            messages.okx_book("snapshot", 1000, -1, snap_bids, snap_asks, ref.okx_checksum())
        )
    elif venue == "bybit":
        raws.append(messages.bybit_book("snapshot", 1000, snap_bids, snap_asks))
    else:
        raws.append(messages.coinbase_snapshot(snap_bids, snap_asks))
    for i, change in enumerate(updates, start=1001):
        bids, asks = split(change)
        ref.apply(bids, asks)
        if venue == "binance":
            raws.append(messages.binance_depth(i, i, bids, asks))
        elif venue == "bitstamp":
            raws.append(messages.bitstamp_diff(i, bids, asks))
        elif venue == "kraken":
            raws.append(messages.kraken_book("update", bids, asks, ref.kraken_checksum()))
        elif venue == "okx":
            raws.append(messages.okx_book("update", i, i - 1, bids, asks, ref.okx_checksum()))
        elif venue == "bybit":
            raws.append(messages.bybit_book("delta", i, bids, asks))
        else:
            raws.append(messages.coinbase_update(bids, asks))
    return raws, rest


level_changes = st.lists(
    st.tuples(st.booleans(), st.integers(1, 400), st.sampled_from(SIZES)), max_size=6
)


@settings(max_examples=60, deadline=None)
@given(
    venue=st.sampled_from(["binance", "kraken", "okx", "bybit", "coinbase", "bitstamp"]),
    snap=st.lists(
        st.tuples(st.booleans(), st.integers(1, 400), st.sampled_from(SIZES)),
        min_size=100,
        max_size=140,
    ),
    updates=st.lists(level_changes, min_size=1, max_size=40),
)
def test_same_books_as_cryptofeed_at_every_step(
    venue: str, snap: list[tuple[bool, int, str]], updates: list[list[tuple[bool, int, str]]]
) -> None:
    raws, rest = build_stream(venue, snap, updates)
    normalizer = make_normalizer(venue)
    sync = make_sync(venue, "X")
    checksum = {"kraken": "KRAKEN", "okx": "OKX"}.get(venue)
    reference = CryptofeedBook(checksum_format=checksum) if checksum else CryptofeedBook()
    if rest is not None:  # a REST snapshot first, the stream after it
        assert sync.on_snapshot(rest()).action is Action.APPLIED
        cf_apply(venue, reference, raws[0])
        raws = raws[1:]
    for raw in raws:
        for event in normalizer.normalize(raw.encode(), 0):
            outcome = sync.on_event(event)  # type: ignore[arg-type]
            assert outcome.action is Action.APPLIED, outcome
        cf_apply(venue, reference, raw)
        assert ours_as_decimals(sync) == theirs(reference)
        if checksum:
            assert unsigned(sync.checksum() or 0) == reference.checksum()


#: Simulator book topics: (dialect, topic, symbol, levels a side the channel keeps to).
SIM_TOPICS = [
    ("binance", "btcusdt@depth@100ms", "BTCUSDT", None),
    ("binance", FUTURES + "btcusdt@depth@100ms", "BTCUSDT", None),
    ("coinbase", "level2:BTC-USD", "BTC-USD", None),
    ("kraken", "book:BTC/USD", "BTC/USD", KRAKEN_DEPTH),
    ("okx", "books:BTC-USDT", "BTC-USDT", None),
    ("bybit", "orderbook.50.BTCUSDT", "BTCUSDT", 50),
    ("bitstamp", "diff_order_book_btcusd", "btcusd", None),
]


def sim_snapshot(feed: Feed, topic: str, symbol: str, seq: int) -> tuple[str, BookSnapshot]:
    """The simulator's snapshot after update seq: its REST body (Binance, Bitstamp) or the
    WebSocket snapshot a new subscriber gets; raw text and normalized."""
    normalizer = make_normalizer(feed.name)
    book = feed.book_state(topic)
    assert book is not None
    book.advance_to(seq, 1_700_000_000_000_000_000)
    if feed.name in ("binance", "bitstamp"):
        raw = feed.rest_body(book.seq, book.ts_us, *book.top())
        return raw, normalizer.rest_snapshot(raw, symbol, 0)  # type: ignore[attr-defined,no-any-return]
    raw_bytes = feed.render_snapshot(topic, seq, 1_700_000_000_000_000_000, book)
    assert raw_bytes is not None
    (snap,) = normalizer.normalize(raw_bytes, 0)
    assert isinstance(snap, BookSnapshot)
    return raw_bytes.decode(), snap


@pytest.mark.parametrize(("dialect", "topic", "symbol", "window"), SIM_TOPICS)
def test_simulator_streams_give_the_same_books_as_cryptofeed(
    dialect: str, topic: str, symbol: str, window: int | None
) -> None:
    """The simulator's own messages (gateway/simulator/feeds.py): its snapshot at update 20,
    then 600 updates, through gateway.normalize + BookSync and into cryptofeed's book;
    the same levels after every message, and for Kraken and OKX the same checksums as
    cryptofeed's and the simulator's."""
    feed = FEEDS[dialect]()
    normalizer = make_normalizer(dialect)
    sync = make_sync(dialect, symbol, **({"depth": window} if window else {}))
    checksum = {"kraken": "KRAKEN", "okx": "OKX"}.get(dialect)
    reference = CryptofeedBook(checksum_format=checksum) if checksum else CryptofeedBook()
    raw, snap = sim_snapshot(feed, topic, symbol, 20)
    assert sync.on_snapshot(snap).action is Action.APPLIED
    cf_apply(dialect, reference, raw)
    book = feed.book_state(topic)
    assert book is not None
    book.advance_to(20, 0)
    for seq in range(21, 621):
        message = feed.render(topic, seq, 1_700_000_000_000_000_000 + seq * 1000, book)
        (event,) = normalizer.normalize(message, 0)
        outcome = sync.on_event(event)  # type: ignore[arg-type]
        assert outcome.action is Action.APPLIED, (seq, outcome)
        cf_apply(dialect, reference, message.decode())
        if window is not None:  # a windowed channel: the client keeps to the window
            for levels in (reference.bids, reference.asks):
                while len(levels) > window:
                    del levels[levels.index(window)[0]]
        assert ours_as_decimals(sync) == theirs(reference), seq
        assert sync.book.snapshot() == book.top(window), seq
        if dialect == "kraken":
            assert sync.checksum() == reference.checksum() == book.kraken_checksum()
        elif dialect == "okx":
            assert unsigned(sync.checksum()) == reference.checksum()
            assert sync.checksum() == book.okx_checksum()
    assert len(sync.book.bids) >= 10 and len(sync.book.asks) >= 10


def test_the_simulator_and_cryptofeed_reproduce_the_published_checksums() -> None:
    """Kraken's v2 example (docs.kraken.com/api/docs/guides/spot-ws-book-v2: BTC/USD,
    3310070434) and OKX's two (www.okx.com/docs-v5/en/, WebSocket order book channel,
    "Checksum"), by the simulator's checksum and by cryptofeed's book."""
    assert sim_kraken_checksum(KRAKEN_DOC_BIDS, KRAKEN_DOC_ASKS) == KRAKEN_DOC_CHECKSUM
    kraken = CryptofeedBook(checksum_format="KRAKEN")
    for levels, pairs in ((kraken.bids, KRAKEN_DOC_BIDS), (kraken.asks, KRAKEN_DOC_ASKS)):
        for price, size in pairs:
            levels[Decimal(price)] = Decimal(size)
    assert kraken.checksum() == KRAKEN_DOC_CHECKSUM
    for (bids, asks), value in ((OKX_DOC_1, OKX_DOC_1_CHECKSUM), (OKX_DOC_2, OKX_DOC_2_CHECKSUM)):
        assert sim_okx_checksum(bids, asks) == value
        okx = CryptofeedBook(checksum_format="OKX")
        for levels, pairs in ((okx.bids, bids), (okx.asks, asks)):
            for price, size in pairs:
                levels[Decimal(price)] = Decimal(size)
        assert okx.checksum() == unsigned(value)

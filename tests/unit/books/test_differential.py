"""Differential tests against cryptofeed's book (the `order-book` C extension), fed the same
raw messages: the same levels after every message, and the same Kraken and OKX checksums.

The reference side does what cryptofeed's feeds do: parse the JSON with Decimal floats,
then for each level set the size or, for a zero size, delete the price if present."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from order_book import OrderBook as CryptofeedBook

from gateway.books import Action, BookSync, make_sync
from gateway.normalize import BookSnapshot, make_normalizer
from gateway.simulator.feeds import FEEDS
from tests.unit.books.messages import (
    Change,
    RefBook,
    binance_depth,
    binance_rest,
    bitstamp_diff,
    bitstamp_rest,
    bybit_book,
    coinbase_snapshot,
    coinbase_update,
    kraken_book,
    okx_book,
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

    def split(change: list[tuple[bool, int, str]]) -> tuple[list[Change], list[Change]]:
        bids = [(price_text(venue, n), s) for is_bid, n, s in change if is_bid]
        asks = [(price_text(venue, n + 500), s) for is_bid, n, s in change if not is_bid]
        return bids, asks

    snap_bids, snap_asks = split([c for c in snap if c[2].strip("0.")])
    ref = RefBook(depth=10 if venue == "kraken" else None)
    ref.apply(snap_bids, snap_asks)
    raws: list[str] = []
    rest: Callable[[], BookSnapshot] | None = None
    normalizer = make_normalizer(venue)
    if venue == "binance":
        text = binance_rest(1000, snap_bids, snap_asks)
        rest = lambda: normalizer.rest_snapshot(text, "BTCUSDT", 0)  # type: ignore[attr-defined]  # noqa: E731
        raws.append(text)
    elif venue == "bitstamp":
        text = bitstamp_rest(1000, snap_bids, snap_asks)
        rest = lambda: normalizer.rest_snapshot(text, "btcusd", 0)  # type: ignore[attr-defined]  # noqa: E731
        raws.append(text)
    elif venue == "kraken":
        raws.append(kraken_book("snapshot", snap_bids, snap_asks, ref.kraken_checksum()))
    elif venue == "okx":
        raws.append(okx_book("snapshot", 1000, -1, snap_bids, snap_asks, ref.okx_checksum()))
    elif venue == "bybit":
        raws.append(bybit_book("snapshot", 1000, snap_bids, snap_asks))
    else:
        raws.append(coinbase_snapshot(snap_bids, snap_asks))
    for i, change in enumerate(updates, start=1001):
        bids, asks = split(change)
        ref.apply(bids, asks)
        if venue == "binance":
            raws.append(binance_depth(i, i, bids, asks))
        elif venue == "bitstamp":
            raws.append(bitstamp_diff(i, bids, asks))
        elif venue == "kraken":
            raws.append(kraken_book("update", bids, asks, ref.kraken_checksum()))
        elif venue == "okx":
            raws.append(okx_book("update", i, i - 1, bids, asks, ref.okx_checksum()))
        elif venue == "bybit":
            raws.append(bybit_book("delta", i, bids, asks))
        else:
            raws.append(coinbase_update(bids, asks))
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


def test_simulator_streams_give_the_same_books_as_cryptofeed() -> None:
    """The simulator's own book messages (gateway/simulator/feeds.py), applied as deltas."""
    topics = {
        "binance": "btcusdt@depth@100ms",
        "coinbase": "level2:BTC-USD",
        "kraken": "book:BTC/USD",
        "okx": "books:BTC-USDT",
        "bybit": "orderbook.50.BTCUSDT",
        "bitstamp": "diff_order_book_btcusd",
    }
    for venue, topic in topics.items():
        feed = FEEDS[venue]()
        normalizer = make_normalizer(venue)
        sync = make_sync(venue, "X")
        sync.synced = True  # the simulator sends no snapshot: start from an empty book
        reference = CryptofeedBook()
        for seq in range(1, 300):
            raw = feed.render(topic, seq, 1_700_000_000_000_000_000 + seq * 1000)
            (event,) = normalizer.normalize(raw, 0)
            sync.book.apply(event.bids, event.asks)  # type: ignore[union-attr]
            if venue == "kraken":
                sync.book.truncate(KRAKEN_DEPTH)
            cf_apply(venue, reference, raw.decode())
            assert ours_as_decimals(sync) == theirs(reference), (venue, seq)
        assert len(sync.book.bids) >= 10, venue

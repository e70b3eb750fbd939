"""Property tests: the book against a plain dict book; the encodings round-trip; a feed with
lost and repeated updates never leaves a synced book that differs from the venue's."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.books import Action, make_sync
from gateway.books.book import OrderBook, double_key, kraken_checksum, okx_checksum
from gateway.normalize import (
    BookDelta,
    BookReset,
    BookSnapshot,
    Funding,
    Level,
    Ticker,
    TopOfBook,
    Trade,
    decode_binary,
    decode_json,
    encode_binary,
    encode_json,
    make_normalizer,
)
from tests.unit.books.messages import (
    RefBook,
    binance_depth,
    binance_rest,
    bybit_book,
    okx_book,
)

SIZES = ["0", "0.0", "0.00000000", "1", "0.5", "2.50", "12.34000000", "0.00000001", "7"]


def price_text(n: int, places: int) -> str:
    return str(Decimal(n).scaleb(-places)) if places else str(n)


ops = st.lists(
    st.tuples(st.sampled_from(["bid", "ask"]), st.integers(1, 60), st.sampled_from(SIZES)),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(ops=ops, places=st.integers(0, 9), depth=st.none() | st.integers(1, 12))
@pytest.mark.parametrize("key", ["double", "scaled", "decimal"])
def test_book_equals_dict_reference(
    key: str, ops: list[tuple[str, int, str]], places: int, depth: int | None
) -> None:
    book = OrderBook(key)
    ref = RefBook(depth=depth)
    for i, (side, n, size) in enumerate(ops):
        price = price_text(n, places)
        change = [(price, size)]
        if side == "bid":
            book.apply([Level(price, size)], [])
            ref.apply(change, [])
        else:
            book.apply([], [Level(price, size)])
            ref.apply([], change)
        if depth is not None:
            book.truncate(depth)
        bids, asks = book.snapshot()
        assert bids == ref.sorted_bids()
        assert asks == ref.sorted_asks()
        assert book.bids.best() == (bids[0] if bids else None)
        if i % 10 == 0:
            assert kraken_checksum(book) == ref.kraken_checksum()
            assert okx_checksum(book) == ref.okx_checksum()


decimal_texts = (
    st.decimals(
        min_value=Decimal("0.000000000001"),
        max_value=Decimal("999999999999999"),
        places=None,
        allow_nan=False,
        allow_infinity=False,
    )
    .map(lambda d: format(d, "f"))
    .filter(lambda t: len(t) < 40)
)


@settings(max_examples=1000, deadline=None)
@given(a=decimal_texts, b=decimal_texts)
def test_double_keys_order_and_identify_prices_exactly(a: str, b: str) -> None:
    ka, kb = double_key(a), double_key(b)
    da, db = Decimal(a), Decimal(b)
    assert (ka < kb) == (da < db)
    assert (ka == kb) == (da == db)
    assert (hash(ka) == hash(kb)) or da != db


@given(digits=st.integers(10**14, 10**15 - 1), places=st.integers(0, 15))
def test_double_keys_separate_neighbours_at_15_digits(digits: int, places: int) -> None:
    a = str(Decimal(digits).scaleb(-places))
    b = str(Decimal(digits + 1).scaleb(-places))
    assert len(a) < 16 or isinstance(double_key(a), Decimal)
    assert double_key(a) < double_key(b)


def test_scaled_keys_reject_more_places_than_the_scale() -> None:
    book = OrderBook("scaled", scale=4)
    book.apply([Level("1.2345", "1"), Level("1.23450000", "2")], [])
    assert book.bids.top() == [("1.23450000", "2")]  # same price, any spelling
    with pytest.raises(ValueError, match="decimal places"):
        book.apply([Level("1.23456", "1")], [])


texts = st.text(max_size=12)
ints = st.integers(0, 2**63 - 1)
level_lists = st.lists(st.builds(Level, texts, texts), max_size=5)
checksums = st.none() | st.integers(-(2**31), 2**32)
#: What a snapshot and a delta both start with: venue, symbol, bids, asks, seq, two times.
book_fields = (texts, texts, level_lists, level_lists, ints, ints, ints)
events = st.one_of(
    st.builds(Trade, texts, texts, texts, texts, texts, texts, ints, ints),
    st.builds(BookSnapshot, *book_fields, checksums),
    st.builds(BookDelta, *book_fields, ints, ints, checksums),
    st.builds(TopOfBook, texts, texts, texts, texts, texts, texts, ints, ints, ints),
    st.builds(Ticker, texts, texts, texts, texts, texts, texts, ints, ints),
    st.builds(Funding, texts, texts, texts, ints, ints, ints),
    st.builds(BookReset, texts, texts, texts, ints),
)


@settings(max_examples=300, deadline=None)
@given(event=events)
def test_encodings_round_trip(event: object) -> None:
    assert decode_json(encode_json(event)) == event  # type: ignore[arg-type]
    binary = encode_binary(event)  # type: ignore[arg-type]
    assert decode_binary(binary) == event
    assert len(binary) < len(encode_json(event))  # type: ignore[arg-type]


# ---- a lossy feed never leaves a wrong synced book -----------------------------------------
deliveries = st.lists(
    st.sampled_from(["send", "send", "send", "drop", "repeat", "swap"]), min_size=5, max_size=60
)
changes = st.lists(
    st.lists(
        st.tuples(st.booleans(), st.integers(1, 30), st.sampled_from(SIZES)), min_size=1, max_size=4
    ),
    min_size=60,
    max_size=60,
)


def split(
    change: list[tuple[bool, int, str]],
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    bids = [(price_text(n, 1), s) for is_bid, n, s in change if is_bid]
    asks = [(price_text(n + 30, 1), s) for is_bid, n, s in change if not is_bid]
    return bids, asks


@settings(max_examples=100, deadline=None)
@given(plan=deliveries, updates=changes, venue=st.sampled_from(["binance", "okx", "bybit"]))
def test_lossy_feed_detected(
    plan: list[str], updates: list[list[tuple[bool, int, str]]], venue: str
) -> None:
    """The venue's book after update k is known; the gateway sees the updates with some
    lost, repeated or swapped. After every event the sync is either stale (and asked for a
    resync) or holds exactly the venue's book at its sequence."""
    ref = RefBook()
    states: dict[int, tuple[list[tuple[str, str]], list[tuple[str, str]]]] = {}
    raws: list[str] = []
    seq = 100
    states[seq] = ([], [])
    for change in updates[: len(plan) + 1]:
        bids, asks = split(change)
        ref.apply(bids, asks)
        if venue == "binance":
            raws.append(binance_depth(seq + 1, seq + 1, bids, asks))
        elif venue == "okx":
            raws.append(okx_book("update", seq + 1, seq, bids, asks, ref.okx_checksum()))
        else:
            raws.append(bybit_book("delta", seq + 1, bids, asks))
        seq += 1
        states[seq] = (ref.sorted_bids(), ref.sorted_asks())

    normalizer = make_normalizer(venue)
    sync = make_sync(venue, "X")

    def snapshot_at(at: int) -> BookSnapshot:
        bids, asks = states[at]
        if venue == "binance":
            raw = binance_rest(at, bids, asks)
            return normalizer.rest_snapshot(raw, "X", 0)  # type: ignore[attr-defined,no-any-return]
        tmp = RefBook()
        tmp.apply(bids, asks)
        if venue == "okx":
            raw = okx_book("snapshot", at, -1, bids, asks, tmp.okx_checksum())
        else:
            raw = bybit_book("snapshot", at, bids, asks)
        (snap,) = normalizer.normalize(raw, 0)
        assert isinstance(snap, BookSnapshot)
        return snap

    sync.on_snapshot(snapshot_at(100))
    stream: list[int] = []
    i = 0
    for step in plan:
        if i >= len(raws) - 1:
            break
        if step == "drop":
            i += 1
        elif step == "repeat" and stream:
            stream.append(stream[-1])
            continue
        elif step == "swap":
            stream += [i + 1, i]
            i += 2
            continue
        stream.append(i)
        i += 1
    sent = 0
    for index in stream:
        (delta,) = normalizer.normalize(raws[index], 0)
        outcome = sync.on_event(delta)
        sent = max(sent, index)
        if outcome.action is Action.RESYNC:
            assert sync.stale
            sync.on_snapshot(snapshot_at(101 + sent))  # the venue's book now
        if sync.synced:
            assert sync.book.snapshot() == states[sync.book.seq]

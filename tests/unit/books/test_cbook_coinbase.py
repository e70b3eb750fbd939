"""Coinbase `level2` l2updates in C (book.c) against the Python path and cryptofeed, message
by message (tests/unit/books/test_cbook.py's Twins): the same outcomes, books and encoded
deltas; truncated or mutated messages either refused (nothing applied) or read as Python
reads them."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from order_book import OrderBook as CryptofeedBook

from dataplane.shim import BOOK_STATUS_NAMES, CBook
from gateway.books.book import OrderBook
from gateway.normalize import make_normalizer
from gateway.normalize.schema import BookDelta, Level, encode_binary, encode_json
from tests.unit.books.messages import Change, coinbase_snapshot, coinbase_update, mutated
from tests.unit.books.test_cbook import BOTH, SYMBOLS, Twins, odd_levels, sizes, texts
from tests.unit.books.test_differential import cf_apply, ours_as_decimals, theirs
from wsgw_bench.books import sim_stream

SYMBOLS.setdefault("coinbase", "BTC-USD")
COINBASE = make_normalizer("coinbase")


def test_simulator_stream_c_python_and_cryptofeed_agree() -> None:
    snap, updates = sim_stream("coinbase", 600)
    twins = Twins("coinbase")
    twins.snapshot(snap.decode())
    reference = CryptofeedBook()
    cf_apply("coinbase", reference, snap.decode())
    for raw in updates:
        twins.message(raw)
        cf_apply("coinbase", reference, raw.decode())
        assert ours_as_decimals(twins.c) == theirs(reference)
    assert twins.fast == len(updates)


@settings(max_examples=120, deadline=None)
@given(
    snap=st.lists(st.tuples(texts, sizes), max_size=30),
    stream=st.lists(
        st.tuples(
            st.sampled_from(["update"] * 12 + ["snapshot", "odd", "other_side"]),
            st.lists(st.tuples(texts, sizes), max_size=5),
            st.lists(st.tuples(texts, sizes), max_size=5),
            odd_levels,
        ),
        min_size=1,
        max_size=30,
    ),
)
def test_c_path_equals_python_path_at_every_step(
    snap: list[Change], stream: list[tuple[str, list[Change], list[Change], Change]]
) -> None:
    """Updates with odd texts (the book moves to Python until its next snapshot), a side
    that is neither buy nor sell (an ask, as the normalizer reads it), new snapshots."""
    twins = Twins("coinbase")
    good = [s for s in snap if s[1].strip("0.") and "e" not in s[1]]
    twins.snapshot(coinbase_snapshot(good, good[:3]))
    for kind, bids, asks, odd in stream:
        if kind == "snapshot":
            twins.snapshot(coinbase_snapshot([b for b in bids if b[1].strip("0.")], []))
            continue
        if kind == "odd":
            bids = [*bids, odd]
        raw = coinbase_update(bids, asks)
        if kind == "other_side":
            raw = raw.replace('"sell"', '"offer"')
        twins.message(raw.encode())


# ---- the parser ----------------------------------------------------------------------------
def joined_book() -> CBook:
    book = CBook("coinbase", "BTC-USD")
    book.update(0, msgspec.json.encode([("10.4", "2")]))
    book.set_joined(True)
    return book


def c_state(book: CBook) -> tuple[int, bytes, bytes]:
    return book.seq, book.top_json(0, 100), book.top_json(1, 100)


GOOD = coinbase_update([("10.5", "1"), ("10.4", "0")], [("11.25", "3.5")]).encode()


def test_every_prefix_is_refused_and_applies_nothing() -> None:
    book = joined_book()
    before = c_state(book)
    for end in range(len(GOOD)):
        status, as_json, _ = book.on_message(GOOD[:end], 0, BOTH)
        assert BOOK_STATUS_NAMES[status] in ("malformed", "unsupported"), GOOD[:end]
        assert as_json == b"" and c_state(book) == before
    status, as_json, as_binary = book.on_message(GOOD, 3, BOTH)
    assert BOOK_STATUS_NAMES[status] == "applied"
    (event,) = COINBASE.normalize(GOOD, 3)
    assert as_json == encode_json(event) and as_binary == encode_binary(event)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_mutated_messages_are_refused_or_read_as_python_reads_them(data: st.DataObject) -> None:
    raw = mutated(data, GOOD, b'"[]{},:0159.-eEZT\\ xu\x00\xff')
    book = joined_book()
    before = c_state(book)
    status, as_json, as_binary = book.on_message(raw, 3, BOTH)
    if BOOK_STATUS_NAMES[status] != "applied":
        assert c_state(book) == before
        return
    (event,) = COINBASE.normalize(raw, 3)
    assert isinstance(event, BookDelta)
    assert as_json == encode_json(event) and as_binary == encode_binary(event)
    python = OrderBook()
    python.apply([Level("10.4", "2")], [])
    python.apply(event.bids, event.asks)
    assert book.top_json(0, 100) == msgspec.json.encode(python.bids.levels(100))
    assert book.top_json(1, 100) == msgspec.json.encode(python.asks.levels(100))


UPDATE = coinbase_update([("1.5", "1")], [])


@pytest.mark.parametrize(
    "raw",
    [
        coinbase_snapshot([("1.5", "1")], []),
        UPDATE.replace('"l2update"', '"ticker"'),
        UPDATE.replace('"1"]]', '"1", "x"]]'),  # msgspec ignores the extra
        UPDATE.replace('"buy"', '"bu\\u0079"'),
        UPDATE.replace('"product_id"', '"product_id":"ETH-USD","product_id"'),
        UPDATE.replace("Z", "+00:00"),
        UPDATE.replace(".010758Z", ".0107589Z"),
        UPDATE.replace(',"time":"2022-08-04T15:25:05.010758Z"', ""),
        UPDATE.replace('"1.5"', "1.5"),
    ],
)
def test_what_c_declines_goes_by_the_python_path(raw: str) -> None:
    """Snapshots, other types, a change of another shape, escapes, repeated members,
    timestamps C does not read exactly, a missing time, a number for a text: nothing
    applied, the Python path decides."""
    book = CBook("coinbase", "BTC-USD")
    book.set_joined(True)
    status, as_json, _ = book.on_message(raw.encode(), 5, BOTH)
    assert BOOK_STATUS_NAMES[status] == "unsupported", raw
    assert as_json == b"" and book.count(0) == 0

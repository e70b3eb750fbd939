"""Coinbase `level2` l2updates in C (book.c) against the Python path and cryptofeed, message
by message (tests/unit/books/test_cbook.py's Twins): the same outcomes, books and encoded
deltas; what C declines. The simulator stream, truncated and mutated messages:
test_cbook.py, parametrized by venue."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from gateway.normalize import make_normalizer
from tests.unit.books.messages import Change, coinbase_snapshot, coinbase_update
from tests.unit.books.strategies import changes, message_streams, odd_levels, snapshots
from tests.unit.books.test_cbook import Twins, assert_declined, plain

COINBASE = make_normalizer("coinbase")


@settings(max_examples=120, deadline=None)
@given(
    snap=snapshots,
    stream=message_streams(
        ["update"] * 12 + ["snapshot", "odd", "other_side"], changes, changes, odd_levels
    ),
)
def test_c_path_equals_python_path_at_every_step(
    snap: list[Change], stream: list[tuple[str, list[Change], list[Change], Change]]
) -> None:
    """Updates with odd texts (the book moves to Python until its next snapshot), a side
    that is neither buy nor sell (an ask, as the normalizer reads it), new snapshots."""
    twins = Twins("coinbase")
    good = [s for s in snap if plain(s)]
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
    assert_declined("coinbase", raw)

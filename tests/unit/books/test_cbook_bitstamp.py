"""Bitstamp `diff_order_book` diffs in C (book.c) against the Python path and cryptofeed,
message by message (tests/unit/books/test_cbook.py's Twins): the same outcomes (buffered
before the REST snapshot, dropped when not newer than it, out of order when older than the
last applied), books and encoded deltas; what C declines. The simulator stream, truncated
and mutated messages: test_cbook.py, parametrized by venue."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.books.sync import Reason
from gateway.normalize import make_normalizer
from tests.unit.books.messages import Change, bitstamp_diff, bitstamp_rest
from tests.unit.books.strategies import changes, message_streams, odd_levels, snapshots
from tests.unit.books.test_cbook import Twins, assert_declined, plain

BITSTAMP = make_normalizer("bitstamp")


def test_an_older_diff_is_out_of_order_by_the_python_rule() -> None:
    twins = Twins("bitstamp")
    twins.message(bitstamp_diff(1_000, [("100.0", "7")], []).encode())  # buffered
    twins.snapshot(bitstamp_rest(2_000, [("100.0", "1")], [("101.0", "1")]))
    twins.message(bitstamp_diff(2_000, [("99.0", "1")], []).encode())  # not newer: dropped
    twins.message(bitstamp_diff(3_000, [("99.5", "1")], []).encode())  # joins (Python)
    twins.message(bitstamp_diff(3_000, [("99.6", "1")], []).encode())  # the same: applies (C)
    twins.message(bitstamp_diff(2_999, [("99.7", "1")], []).encode())  # older: resync
    assert twins.fast == 1  # C declines the older one (GAP): the Python rule resyncs
    assert twins.c.resyncs == {Reason.OUT_OF_ORDER: 1}


@settings(max_examples=120, deadline=None)
@given(
    snap=snapshots,
    stream=message_streams(
        ["diff"] * 12 + ["snapshot", "odd"],
        st.sampled_from([1, 1, 1, 5, 0, -1, -20]),  # microseconds after the last
        changes,
        changes,
        odd_levels,
    ),
)
def test_c_path_equals_python_path_at_every_step(
    snap: list[Change], stream: list[tuple[str, int, list[Change], list[Change], Change]]
) -> None:
    """Diffs in order, repeated and older microtimestamps, odd texts, REST snapshots older
    and newer than the buffered diffs."""
    twins = Twins("bitstamp")
    good = [s for s in snap if plain(s)]
    us = 1_000_000
    twins.message(bitstamp_diff(us, good[:2], []).encode())
    twins.snapshot(bitstamp_rest(us - 3, good, good[:3]))
    for kind, step, bids, asks, odd in stream:
        us += step
        if kind == "snapshot":
            twins.snapshot(bitstamp_rest(us - 2, [b for b in bids if b[1].strip("0.")], []))
            continue
        if kind == "odd":
            bids = [*bids, odd]
        twins.message(bitstamp_diff(us, bids, asks).encode())


GOOD = bitstamp_diff(1_659_626_705_010_758, [("10.5", "1"), ("10.4", "0")], [("11.25", "3.5")])


@pytest.mark.parametrize(
    "raw",
    [
        GOOD.replace('"diff_order_book_', '"order_book_'),
        GOOD.replace('"event":"data"', '"event":"bts:subscription_succeeded"'),
        GOOD.replace('"event":"data"', '"event":"data","event":"data"'),
        GOOD.replace('"microtimestamp":"1659626705010758"', '"microtimestamp":""'),
        GOOD.replace('"microtimestamp":"1659626705010758"', '"microtimestamp":1659626705010758'),
        GOOD.replace('"microtimestamp":"1659626705010758"', '"microtimestamp":"+1659626705010758"'),
        GOOD.replace(',"asks":[["11.25", "3.5"]]', ""),
    ],
)
def test_what_c_declines_goes_by_the_python_path(raw: str) -> None:
    """Snapshots, other events, repeated members, microtimestamps C does not read as int()
    does, a missing side: nothing applied, the Python path decides."""
    assert_declined("bitstamp", raw)

"""Kraken v2 `book` updates in C (book.c) against the Python path and cryptofeed, message
by message: the same outcomes, books, resets and encoded deltas (tests/unit/books/
test_cbook.py's Twins), Kraken's published checksum example, its depth truncation, and
what C declines. The simulator stream, truncated and mutated messages: test_cbook.py,
parametrized by venue.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.books.book import OrderBook, kraken_checksum
from gateway.books.sync import Reason
from gateway.normalize import make_normalizer
from gateway.normalize.schema import Level
from tests.unit.books.messages import Change, kraken_book
from tests.unit.books.strategies import message_streams, sizes, texts
from tests.unit.books.test_cbook import Twins, assert_declined, plain
from tests.unit.books.test_checksums import (
    KRAKEN_DOC_ASKS,
    KRAKEN_DOC_BIDS,
    KRAKEN_DOC_CHECKSUM,
    kraken_doc_message,
)

KRAKEN = make_normalizer("kraken")


def expected_checksum(twins: Twins, bids: list[Change], asks: list[Change]) -> int:
    """The checksum Kraken would send with this change: of the Python twin's book after it,
    cut to the subscribed depth."""
    book = OrderBook()
    book.load(twins.py.book.bids.levels(10_000), twins.py.book.asks.levels(10_000))
    book.apply([Level(*b) for b in bids], [Level(*a) for a in asks])
    book.truncate(twins.py.depth or 10_000)
    return kraken_checksum(book)


def test_documentation_checksum_in_c() -> None:
    """Kraken's documented book (checksum 3310070434) loaded by the snapshot; an update that
    takes it back to itself carries that checksum and C applies it; a wrong one resyncs as
    the Python rules do, with the same detail."""
    (snap,) = KRAKEN.normalize(kraken_doc_message(), 1)
    twins = Twins("kraken", depth=10)
    twins.snapshot(kraken_doc_message().decode())
    bid = KRAKEN_DOC_BIDS[0]
    twins.message(
        kraken_book("update", [(bid[0], "1")], [], 0)
        .replace('"checksum":0', f'"checksum":{expected_checksum(twins, [(bid[0], "1")], [])}')
        .encode()
    )
    twins.message(kraken_book("update", [bid], [], KRAKEN_DOC_CHECKSUM).encode())
    assert twins.c.book.snapshot() == (KRAKEN_DOC_BIDS, KRAKEN_DOC_ASKS)
    assert twins.fast == 2 and not twins.c.resyncs
    twins.message(kraken_book("update", [bid], [], KRAKEN_DOC_CHECKSUM + 1).encode())
    assert twins.c.resyncs == {Reason.CHECKSUM: 1} and twins.fast == 3
    assert snap.checksum == KRAKEN_DOC_CHECKSUM


#: JSON numbers only (Kraken v2 sends its levels as numbers): no "1." or ".5".
numbers = texts.filter(lambda t: not t.endswith("."))
amounts = sizes.filter(lambda t: not t.endswith("."))
kraken_changes = st.lists(st.tuples(numbers, amounts), max_size=5)
#: Numbers the C book cannot hold exactly (an exponent, past 18 digits): Python from there.
odd_levels = st.tuples(
    st.sampled_from(["1e2", "123456789012.1234567", "9" * 19, "100"]),
    st.sampled_from(["1", "0", "1e-8", "0.1234567890123456789"]),
)


@settings(max_examples=120, deadline=None)
@given(
    depth=st.sampled_from([3, 10, 25]),
    snap=st.lists(st.tuples(numbers, amounts), max_size=30),
    stream=message_streams(
        ["update"] * 12 + ["wrong", "odd", "nocrc"], kraken_changes, kraken_changes, odd_levels
    ),
)
def test_c_path_equals_python_path_at_every_step(
    depth: int,
    snap: list[Change],
    stream: list[tuple[str, list[Change], list[Change], Change]],
) -> None:
    """Updates with right and wrong checksums, none, odd numbers, depth truncation; after a
    resync the venue's next snapshot comes (a resubscribe)."""
    twins = Twins("kraken", depth=depth)
    good = [s for s in snap if plain(s)]

    def snapshot() -> None:
        book = OrderBook()
        book.load([Level(*g) for g in good], [Level(*g) for g in good[:3]])
        book.truncate(depth)
        twins.snapshot(kraken_book("snapshot", good, good[:3], kraken_checksum(book)))

    snapshot()
    for kind, bids, asks, odd in stream:
        if not twins.py.synced:
            snapshot()
            continue
        if kind == "odd":
            bids = [*bids, odd]
        raw = kraken_book("update", bids, asks, 0)
        if kind == "nocrc":
            raw = raw.replace('"checksum":0,', "")
        elif kind == "wrong":
            raw = raw.replace(
                '"checksum":0', f'"checksum":{expected_checksum(twins, bids, asks) ^ 1}'
            )
        elif kind != "odd":
            raw = raw.replace('"checksum":0', f'"checksum":{expected_checksum(twins, bids, asks)}')
        twins.message(raw.encode())


@pytest.mark.parametrize(
    "raw",
    [
        kraken_book("snapshot", [("1.5", "1")], [], 0),
        kraken_book("update", [("1.5", "1")], [], 0).replace('"book"', '"ticker"'),
        kraken_book("update", [("1.5", "1")], [], 0).replace("}]}", "},{}]}"),  # two elements
        kraken_book("update", [("1.5", "1")], [], 0).replace("Z", "+00:00"),
        kraken_book("update", [("1.5", "1")], [], 0).replace(".440295Z", ".440295123Z"),
        kraken_book("update", [("1.5", "1")], [], 0).replace("10-06", "02-30"),
        kraken_book("update", [("1.5", "1")], [], 0).replace('"price":1.5', '"price":"1.5"'),
        kraken_book("update", [("1.5", "1")], [], 0).replace('"qty":1', '"qty":1,"qty":2'),
        kraken_book("update", [("1.5", "1")], [], 0).replace('"checksum":0', '"checksum":-1'),
        kraken_book("update", [("1.5", "1e2")], [], 0),
    ],
)
def test_what_c_declines_goes_by_the_python_path(raw: str) -> None:
    """Snapshots, other channels, more than one book, timestamps C does not read exactly,
    fields of another type or repeated: nothing applied, the Python path decides."""
    assert_declined("kraken", raw)

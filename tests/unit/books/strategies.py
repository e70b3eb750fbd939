"""The books differential tests' hypothesis strategies: level texts the C book holds and
some it cannot, changes, snapshots, sequence offsets, and a venue's message streams."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import strategies as st


def price(n: int, places: int) -> str:
    return str(Decimal(n).scaleb(-places)) if places else str(n)


#: Texts the C book holds (widening its scale), and some it cannot: the book then moves
#: to Python and must go on identically.
texts = st.one_of(
    st.builds(price, st.integers(1, 4000), st.integers(0, 4)),
    st.sampled_from(["0", "0.000", "0.00000000", "1.", "1234567.891"]),
)
sizes = st.one_of(
    st.sampled_from(["0", "0.00000000", "1", "0.5", "2.50000000", "0.00000001", "300"]),
    texts,
)
#: A level the C book cannot hold exactly (not a plain decimal, past 18 digits): rare in a
#: stream, since the book then stays in Python until its next snapshot.
odd_levels = st.tuples(
    st.sampled_from([".5", "1e2", "00.5", "123456789012.1234567", "9" * 19, "100"]),
    st.sampled_from(["1", "0", "1e-8", "5.", "0.1234567890123456789"]),
)
changes = st.lists(st.tuples(texts, sizes), max_size=5)
snapshots = st.lists(st.tuples(texts, sizes), max_size=30)
#: Mostly in order; sometimes a break (+1, +2) or a repeat (-1, -3).
offsets = st.sampled_from([0] * 12 + [1, 2, -1, -3])


def message_streams(
    kinds: list[str], *parts: st.SearchStrategy[Any], max_size: int = 30
) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    """A venue's messages for the differential tests: 1 to max_size steps, each a kind drawn
    from kinds (a repeated kind is drawn more often) and then one of each of parts."""
    return st.lists(st.tuples(st.sampled_from(kinds), *parts), min_size=1, max_size=max_size)

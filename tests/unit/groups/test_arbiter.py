"""A/B arbitration (gateway.groups.arbiter): per-case tests of each rule, then a property:
for any drops and delays on any number of legs, the output is every message some leg brought,
once each and in order, and a loss exactly where every leg missed it."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.groups import Arbiter, Delivered, Lost, Output

MS = 1_000_000


def delivered(out: Iterable[Output]) -> list[int]:
    return [o.this for o in out if isinstance(o, Delivered)]


def losses(out: Iterable[Output]) -> list[tuple[int, int, int | None]]:
    return [(o.after, o.before, o.missing) for o in out if isinstance(o, Lost)]


def test_the_first_copy_wins_and_the_late_one_is_dropped_with_its_lag() -> None:
    arb: Arbiter[str] = Arbiter(2)
    out: list[Output] = []
    for i in range(1, 6):
        out += arb.offer(0, "btc", i, i - 1, f"a{i}", i * MS)
        out += arb.offer(1, "btc", i, i - 1, f"b{i}", i * MS + 300_000)
    assert delivered(out) == [1, 2, 3, 4, 5]
    assert {o.leg for o in out if isinstance(o, Delivered)} == {0}
    assert arb.stats[0].won == 5 and arb.stats[1].won == 0 and arb.stats[1].late == 5
    assert arb.stats[1].lag_percentile(50) == 300_000
    assert arb.duplicates == 5 and arb.lost_total == 0


def test_a_message_one_leg_missed_comes_from_the_other_leg_without_a_gap() -> None:
    arb: Arbiter[str] = Arbiter(2)
    out = arb.offer(0, "k", 1, 0, "a1", 1 * MS)
    out += arb.offer(0, "k", 3, 2, "a3", 3 * MS)  # leg 0 lost 2: held
    assert delivered(out) == [1] and arb.deadline == 3 * MS + arb.hold_ns
    out += arb.offer(1, "k", 1, 0, "b1", 4 * MS)
    out += arb.offer(1, "k", 2, 1, "b2", 5 * MS)  # fills the hole: 2 then the held 3
    assert delivered(out) == [1, 2, 3] and losses(out) == []
    assert [o.leg for o in out if isinstance(o, Delivered)] == [0, 1, 0]
    assert arb.deadline is None
    out += arb.offer(1, "k", 3, 2, "b3", 6 * MS)  # a copy
    assert delivered(out) == [1, 2, 3]


def test_a_message_every_leg_missed_is_a_gap_as_soon_as_every_leg_went_past_it() -> None:
    arb: Arbiter[str] = Arbiter(2)
    out = arb.offer(0, "k", 1, 0, "a1", 1 * MS) + arb.offer(1, "k", 1, 0, "b1", 1 * MS)
    out += arb.offer(0, "k", 4, 3, "a4", 2 * MS)  # 2 and 3 missing on leg 0
    assert delivered(out) == [1]
    out += arb.offer(1, "k", 4, 3, "b4", 2 * MS + 1)  # and on leg 1: no need to wait
    assert losses(out) == [(1, 4, 2)] and delivered(out) == [1, 4]
    assert arb.lost_total == 2 and arb.deadline is None


def test_a_hole_waits_at_most_the_hold_time_for_a_leg_that_is_silent() -> None:
    arb: Arbiter[str] = Arbiter(2, hold_ns=5 * MS)
    out = arb.offer(0, "k", 1, 0, "a1", 0) + arb.offer(0, "k", 3, 2, "a3", 1 * MS)
    out += arb.offer(0, "k", 4, 3, "a4", 2 * MS)
    assert delivered(out) == [1] and arb.deadline == 6 * MS
    assert arb.expire(5 * MS) == []
    late = arb.expire(6 * MS)
    assert losses(late) == [(1, 3, 1)] and delivered(late) == [3, 4]
    assert arb.deadline is None


def test_a_leg_going_down_is_not_waited_for() -> None:
    arb: Arbiter[str] = Arbiter(2)
    out = arb.offer(0, "k", 1, 0, "a1", 0) + arb.offer(0, "k", 3, 2, "a3", 1)
    assert delivered(out) == [1]
    out = arb.set_live(1, False, 2)
    assert losses(out) == [(1, 3, 1)] and delivered(out) == [3]


def test_topics_are_arbitrated_apart() -> None:
    arb: Arbiter[str] = Arbiter(2)
    out = arb.offer(0, "btc", 10, 9, "x", 0) + arb.offer(0, "eth", 10, 9, "y", 0)
    out += arb.offer(1, "btc", 10, 9, "x", 1) + arb.offer(1, "eth", 11, 10, "z", 1)
    assert [(o.key, o.this) for o in out if isinstance(o, Delivered)] == [
        ("btc", 10),
        ("eth", 10),
        ("eth", 11),
    ]


def test_ranges_link_by_their_first_id_as_binance_depth_updates() -> None:
    """A Binance diff-depth update covers update ids U..u: this = u, prev = U - 1."""
    arb: Arbiter[str] = Arbiter(2)
    out = arb.offer(0, "d", 105, 100, "u105", 0)  # the start
    out += arb.offer(0, "d", 120, 110, "u120", 1)  # leg 0 missed 106..110
    out += arb.offer(1, "d", 110, 105, "u110", 2)
    assert delivered(out) == [105, 110, 120] and losses(out) == []


def test_unlinked_ids_keep_order_and_drop_copies() -> None:
    arb: Arbiter[str] = Arbiter(2)
    out = arb.offer(0, "k", 5, None, "a", 0) + arb.offer(1, "k", 5, None, "b", 1)
    out += arb.offer(1, "k", 9, None, "c", 2) + arb.offer(0, "k", 7, None, "d", 3)
    assert delivered(out) == [5, 9] and losses(out) == []


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 3).flatmap(
        lambda legs: st.tuples(
            st.just(legs),
            st.integers(1, 80),
            st.lists(st.frozensets(st.integers(1, 80)), min_size=legs, max_size=legs),
            st.lists(st.integers(0, 4 * MS), min_size=legs, max_size=legs),
            st.lists(
                st.lists(st.integers(0, MS), min_size=80, max_size=80), min_size=legs, max_size=legs
            ),
        )
    )
)
def test_every_message_some_leg_brought_goes_out_once_in_order(case: tuple) -> None:  # type: ignore[type-arg]
    """Messages 1..n sent every ms; leg L drops drops[L], adds a base delay and a jitter per
    message (kept in order per leg, as TCP delivers). hold_ns is longer than any leg's delay
    behind another, so a message some leg brought is never given up."""
    legs, n, drops, base, jitter = case
    arrivals: list[tuple[int, int, int]] = []  # (time, leg, id)
    for leg in range(legs):
        at = 0
        for i in range(1, n + 1):
            at = max(at, i * MS + base[leg] + jitter[leg][i - 1])  # in order per leg
            if i not in drops[leg]:
                arrivals.append((at, leg, i))
    heapq.heapify(arrivals)
    arb: Arbiter[int] = Arbiter(legs, hold_ns=20 * MS)
    out: list[Output] = []
    first = None
    while arrivals:
        at, leg, i = heapq.heappop(arrivals)
        deadline = arb.deadline
        if deadline is not None and deadline <= at:
            out += arb.expire(deadline)
            heapq.heappush(arrivals, (at, leg, i))
            continue
        first = i if first is None else first
        out += arb.offer(leg, "k", i, i - 1, i, at)
    if arb.deadline is not None:
        out += arb.expire(arb.deadline)
    got = delivered(out)
    if first is None:
        assert got == []
        return
    brought = set().union(*({i for i in range(1, n + 1) if i not in d} for d in drops))
    # The stream starts at the first message to arrive; from there on, everything some leg
    # brought, once, in order.
    assert got == sorted(i for i in brought if i >= first)
    missing_after_first = [i for i in range(first, n + 1) if i not in brought]
    lost_ids = [i for after, before, _ in losses(out) for i in range(after + 1, before)]
    tail = [i for i in missing_after_first if i > max(got)]
    assert lost_ids == [i for i in missing_after_first if i not in tail]
    assert arb.lost_total == len(lost_ids)

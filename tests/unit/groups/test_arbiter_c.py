"""The C arbiter (dataplane.arbiter.CArbiter, dataplane/shim/arbiter.c) against the Python
reference (gateway.groups.arbiter.Arbiter): the reference's per-case tests again on C, the
arena's byte budget (C only), and a differential property: any arrival schedule (legs,
drops, delays and jitter in order per leg, duplicates, ranges, unlinked ids, legs going down
and up, expiries at the deadline and at other times, restarts of a key and snapshots, unlinked
messages with an id already delivered, issue #21) gives the same outputs, in the same order,
and the same figures on both."""

from __future__ import annotations

import ctypes
import random
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.arbiter import Arrival, CArbiter, Delivered, Lost, Output
from dataplane.shim import ARB_OUT_FORMAT, ArbOut
from gateway.groups import Arbiter

MS = 1_000_000


def delivered(out: Iterable[Output]) -> list[int]:
    return [o.this for o in out if isinstance(o, Delivered)]


def losses(out: Iterable[Output]) -> list[tuple[int, int, int | None]]:
    return [(o.after, o.before, o.missing) for o in out if isinstance(o, Lost)]


def norm(outputs: Iterable[Any]) -> list[tuple[Any, ...]]:
    """Either implementation's outputs as plain tuples (the tuple types differ by module)."""
    result: list[tuple[Any, ...]] = []
    for o in outputs:
        if type(o) is tuple:  # ("R", key, restarted): a restart's answer
            result.append(o)
        elif type(o).__name__ == "Delivered":
            result.append(("D", o.key, o.this, bytes(o.payload), o.leg, o.arrived_ns))
        else:
            assert type(o).__name__ == "Lost"
            result.append(("L", o.key, o.after, o.before, o.missing))
    return result


# ---- the reference's per-case tests, on C ---------------------------------------------------


def test_the_first_copy_wins_and_the_late_one_is_dropped_with_its_lag() -> None:
    arb = CArbiter(2)
    out: list[Output] = []
    for i in range(1, 6):
        out += arb.offer(0, 0, i, i - 1, b"a%d" % i, i * MS)
        out += arb.offer(1, 0, i, i - 1, b"b%d" % i, i * MS + 300_000)
    assert delivered(out) == [1, 2, 3, 4, 5]
    assert [o.payload for o in out if isinstance(o, Delivered)] == [
        b"a1",
        b"a2",
        b"a3",
        b"a4",
        b"a5",
    ]
    assert {o.leg for o in out if isinstance(o, Delivered)} == {0}
    assert arb.stats[0].won == 5 and arb.stats[1].won == 0 and arb.stats[1].late == 5
    assert arb.stats[1].lag_percentile(50) == 300_000 == arb.lag_percentile(1, 50)
    assert arb.lag_percentile(0, 50) is None
    assert arb.duplicates == 5 and arb.lost_total == 0


def test_a_message_one_leg_missed_comes_from_the_other_leg_without_a_gap() -> None:
    arb = CArbiter(2)
    out = arb.offer(0, 0, 1, 0, b"a1", 1 * MS)
    out += arb.offer(0, 0, 3, 2, b"a3", 3 * MS)  # leg 0 lost 2: held
    assert delivered(out) == [1] and arb.deadline == 3 * MS + arb.hold_ns and arb.held == 1
    out += arb.offer(1, 0, 1, 0, b"b1", 4 * MS)
    out += arb.offer(1, 0, 2, 1, b"b2", 5 * MS)  # fills the hole: 2 then the held 3
    assert delivered(out) == [1, 2, 3] and losses(out) == []
    assert [o.leg for o in out if isinstance(o, Delivered)] == [0, 1, 0]
    assert [o.payload for o in out if isinstance(o, Delivered)] == [b"a1", b"b2", b"a3"]
    assert arb.deadline is None and arb.held == 0
    out += arb.offer(1, 0, 3, 2, b"b3", 6 * MS)  # a copy
    assert delivered(out) == [1, 2, 3]


def test_a_message_every_leg_missed_is_a_gap_as_soon_as_every_leg_went_past_it() -> None:
    arb = CArbiter(2)
    out = arb.offer(0, 0, 1, 0, b"a1", 1 * MS) + arb.offer(1, 0, 1, 0, b"b1", 1 * MS)
    out += arb.offer(0, 0, 4, 3, b"a4", 2 * MS)  # 2 and 3 missing on leg 0
    assert delivered(out) == [1]
    out += arb.offer(1, 0, 4, 3, b"b4", 2 * MS + 1)  # and on leg 1: no need to wait
    assert losses(out) == [(1, 4, 2)] and delivered(out) == [1, 4]
    assert arb.lost_total == 2 and arb.deadline is None


def test_a_hole_waits_at_most_the_hold_time_for_a_leg_that_is_silent() -> None:
    arb = CArbiter(2, hold_ns=5 * MS)
    out = arb.offer(0, 0, 1, 0, b"a1", 0) + arb.offer(0, 0, 3, 2, b"a3", 1 * MS)
    out += arb.offer(0, 0, 4, 3, b"a4", 2 * MS)
    assert delivered(out) == [1] and arb.deadline == 6 * MS
    assert arb.expire(5 * MS) == []
    late = arb.expire(6 * MS)
    assert losses(late) == [(1, 3, 1)] and delivered(late) == [3, 4]
    assert [o.payload for o in late if isinstance(o, Delivered)] == [b"a3", b"a4"]
    assert arb.deadline is None


def test_a_leg_going_down_is_not_waited_for() -> None:
    arb = CArbiter(2)
    out = arb.offer(0, 0, 1, 0, b"a1", 0) + arb.offer(0, 0, 3, 2, b"a3", 1)
    assert delivered(out) == [1]
    out = arb.set_live(1, False, 2)
    assert losses(out) == [(1, 3, 1)] and delivered(out) == [3]
    assert arb.live == [True, False]


def test_topics_are_arbitrated_apart() -> None:
    arb = CArbiter(2)
    out = arb.offer(0, 0, 10, 9, b"x", 0) + arb.offer(0, 1, 10, 9, b"y", 0)
    out += arb.offer(1, 0, 10, 9, b"x", 1) + arb.offer(1, 1, 11, 10, b"z", 1)
    assert [(o.key, o.this) for o in out if isinstance(o, Delivered)] == [(0, 10), (1, 10), (1, 11)]


def test_ranges_link_by_their_first_id_as_binance_depth_updates() -> None:
    arb = CArbiter(2)
    out = arb.offer(0, 0, 105, 100, b"u105", 0)  # the start
    out += arb.offer(0, 0, 120, 110, b"u120", 1)  # leg 0 missed 106..110
    out += arb.offer(1, 0, 110, 105, b"u110", 2)
    assert delivered(out) == [105, 110, 120] and losses(out) == []


def test_unlinked_ids_keep_order_and_drop_copies() -> None:
    arb = CArbiter(2)
    out = arb.offer(0, 0, 5, None, b"a", 0) + arb.offer(1, 0, 5, None, b"b", 1)
    out += arb.offer(1, 0, 9, None, b"c", 2) + arb.offer(0, 0, 7, None, b"d", 3)
    assert delivered(out) == [5, 9] and losses(out) == []


def test_max_held_declares_the_oldest_hole_lost() -> None:
    out: list[Any] = []
    expected: list[Any] = []
    arb = CArbiter(2, max_held=2)
    ref: Arbiter[bytes] = Arbiter(2, max_held=2)
    for i in (1, 3, 5, 7):
        out += arb.offer(0, 0, i, i - 1, b"%d" % i, i)
        expected += ref.offer(0, 0, i, i - 1, b"%d" % i, i)
    assert (
        norm(out)
        == norm(expected)
        == [
            ("D", 0, 1, b"1", 0, 1),
            ("L", 0, 1, 3, 1),
            ("D", 0, 3, b"3", 0, 3),
        ]
    )
    assert arb.held == 2


def test_the_output_format_reads_the_output_struct_field_by_field() -> None:
    """ArbOut is checked against the compiler (tests/unit/test_shim_layout.py); the format
    the wrapper unpacks a batch with must match it field by field."""
    fmt = ARB_OUT_FORMAT.format
    assert ARB_OUT_FORMAT.size == ctypes.sizeof(ArbOut)
    codes = fmt[1:]
    assert len(codes) == len(ArbOut._fields_)
    for i, (name, *_) in enumerate(ArbOut._fields_):
        assert struct.calcsize(fmt[0] + codes[:i]) == getattr(ArbOut, name).offset, name


# ---- C only: batches, the arena, bad input ---------------------------------------------------


def test_a_batch_gives_what_single_offers_give_and_hands_back_the_callers_payloads() -> None:
    arrivals: list[Arrival] = []
    for i in range(1, 300):
        if i % 7:
            arrivals.append((0, 2, i, i - 1, b"a%d" % i, i * MS))
        arrivals.append((1, 2, i, i - 1, b"b%d" % i, i * MS + 5))
    single = CArbiter(2)
    one_by_one = [o for a in arrivals for o in single.offer(*a)]
    batched = CArbiter(2)
    out = batched.offer_many(arrivals[:100]) + batched.offer_many(arrivals[100:])
    assert norm(out) == norm(one_by_one) and delivered(out) == list(range(1, 300))
    by_object = {id(a[4]) for a in arrivals}
    assert all(id(o.payload) in by_object for o in out if isinstance(o, Delivered))
    assert batched.duplicates == single.duplicates == len(arrivals) - 299


def test_held_payloads_beyond_the_arena_declare_the_oldest_hole_of_any_topic_lost() -> None:
    arb = CArbiter(2, arena_bytes=5 * 128)  # 5 chunks of 128 bytes
    big, mid = b"A" * 300, b"B" * 200  # 3 chunks, 2 chunks
    out = arb.offer(0, 0, 1, 0, b"t0-1", 0) + arb.offer(0, 1, 1, 0, b"t1-1", 0)
    out += arb.offer(0, 0, 3, 2, big, 1 * MS)  # topic 0 holds 3 chunks
    out += arb.offer(0, 1, 3, 2, mid, 2 * MS)  # topic 1 holds 2: the arena is full
    assert delivered(out) == [1, 1] and arb.held == 2 and arb.totals().arena_free == 0
    out = arb.offer(0, 1, 5, 4, b"C" * 10, 3 * MS)  # 1 more chunk: topic 0's hole goes
    assert norm(out) == [("L", 0, 1, 3, 1), ("D", 0, 3, big, 0, 1 * MS)]
    assert arb.held == 2 and arb.lost_total == 1
    assert arb.deadline == 2 * MS + arb.hold_ns
    # larger than the whole arena: the hole it waits on is lost at once, itself delivered;
    # everything held goes first (oldest hole of any topic) to make room
    huge = b"H" * 1000
    out = arb.offer(0, 0, 9, 8, huge, 4 * MS)
    assert norm(out) == [
        ("L", 1, 1, 3, 1),
        ("D", 1, 3, mid, 0, 2 * MS),
        ("L", 1, 3, 5, 1),
        ("D", 1, 5, b"C" * 10, 0, 3 * MS),
        ("L", 0, 3, 9, 5),
        ("D", 0, 9, huge, 0, 4 * MS),
    ]
    assert arb.held == 0 and arb.totals().arena_free == 5 * 128 and arb.deadline is None
    # leg 1 brings the old ones late: copies, not deliveries
    assert arb.offer(1, 0, 3, 2, big, 5 * MS) == [] and arb.duplicates == 1


def test_an_eviction_that_fills_the_arrivals_own_hole_delivers_it_in_order() -> None:
    arb = CArbiter(2, arena_bytes=2 * 128)
    out = arb.offer(0, 0, 1, 0, b"1", 0)
    out += arb.offer(0, 0, 3, 2, b"x" * 256, 1)  # the whole arena
    out += arb.offer(0, 0, 4, 3, b"4", 2)  # no room: hole 2 lost, 3 out, then 4 follows it
    assert norm(out) == [
        ("D", 0, 1, b"1", 0, 0),
        ("L", 0, 1, 3, 1),
        ("D", 0, 3, b"x" * 256, 0, 1),
        ("D", 0, 4, b"4", 0, 2),
    ]


def test_bad_arrivals_are_refused_and_a_batch_is_taken_whole_or_not_at_all() -> None:
    arb = CArbiter(2, max_topics=4)
    with pytest.raises(ValueError):
        arb.offer(2, 0, 1, 0, b"", 0)
    with pytest.raises(ValueError):
        arb.offer(0, 4, 1, 0, b"", 0)
    with pytest.raises(ValueError):
        arb.offer_many([(0, 0, 1, 0, b"ok", 0), (5, 0, 2, 1, b"bad leg", 1)])
    assert arb.offer(0, 0, 1, 0, b"first", 2) == [Delivered(0, 1, b"first", 0, 2)]
    with pytest.raises(ValueError):
        CArbiter(9)
    arb.close()
    with pytest.raises(ValueError):
        arb.expire(0)


# ---- the differential property ---------------------------------------------------------------


@dataclass
class Schedule:
    legs: int
    hold_ns: int
    max_held: int
    won_window: int
    max_hold_ns: int
    # ("offer", Arrival) | ("live", leg, live, t) | ("tick", t) | ("restart", key, t)
    events: list[tuple[Any, ...]]
    batch_sizes: list[int]
    unread: list[list[bool]] | None  # per leg, the probe's answers in turn (then False)

    def probe(self) -> Probe | None:
        return None if self.unread is None else Probe(self.unread)


class Probe:
    """A leg's unread input as a scripted answer per question, each leg's in turn (so the
    two implementations must ask the same questions in the same order to agree)."""

    def __init__(self, answers: list[list[bool]]) -> None:
        self.answers = [iter(a) for a in answers]
        self.asked: list[int] = []

    def __call__(self, leg: int) -> bool:
        self.asked.append(leg)
        return next(self.answers[leg], False)


def make_pair(s: Schedule) -> tuple[dict[str, Any], Probe | None]:
    probe = s.probe()
    return {
        "hold_ns": s.hold_ns,
        "max_held": s.max_held,
        "won_window": s.won_window,
        "max_hold_ns": s.max_hold_ns,
        "unread": probe,
    }, probe


@st.composite
def schedules(draw: st.DrawFn) -> Schedule:
    legs = draw(st.integers(1, 3))
    rng: random.Random = draw(st.randoms(use_true_random=False))
    hold_ns = draw(st.sampled_from([0, 2 * MS, 5 * MS, 20 * MS]))
    max_held = draw(st.sampled_from([1, 3, 4096]))
    won_window = draw(st.sampled_from([0, 3, 8192]))
    max_hold_ns = draw(st.sampled_from([0, 8 * MS, 10**9]))  # raised to the hold at least
    timeline: list[tuple[int, int, tuple[Any, ...]]] = []  # (time, order, event)
    for topic in range(draw(st.integers(1, 2))):
        kind = draw(st.sampled_from(["linked", "ranges", "unlinked", "overlaps"]))
        n = draw(st.integers(1, 40))
        this = rng.randrange(0, 1000)
        messages: list[tuple[int, int | None]] = []
        for _ in range(n):
            prev: int | None = this
            this += 1 if kind == "linked" else rng.randint(1, 3)
            if kind == "unlinked":
                prev = None
            elif kind == "overlaps" and rng.random() < 0.2:
                prev = this - rng.randint(1, 6)  # a range reaching back before its predecessor
            messages.append((this, prev))
        for leg in range(legs):
            drop = rng.choice([0.0, 0.1, 0.4])
            base = rng.randrange(0, 4 * MS)
            at = 0
            for j, (this_id, prev_id) in enumerate(messages):
                at = max(at, (j + 1) * MS + base + rng.randrange(0, MS))  # in order per leg
                if rng.random() < drop:
                    continue
                copies = 2 if rng.random() < 0.05 else 1  # a leg repeating itself
                for copy in range(copies):
                    size = rng.choice([0, 5, 130, 300])
                    payload = (b"%d/%d/%d/%d:" % (topic, leg, this_id, copy)).ljust(size, b".")
                    timeline.append(
                        (at, len(timeline), ("offer", (leg, topic, this_id, prev_id, payload, at)))
                    )
        for _ in range(rng.randint(0, 3)):  # snapshots (a resubscribe's) of any id so far
            this_id = rng.choice(messages)[0]
            t = rng.randrange(0, (n + 5) * MS)
            snap = (rng.randrange(legs), topic, this_id, None, b"%d/snapshot/%d" % (topic, t), t)
            timeline.append((t, len(timeline), ("offer", snap)))
    end = max((t for t, _, _ in timeline), default=0)
    for _ in range(rng.randint(0, 3)):
        t = rng.randrange(0, end + 1)
        timeline.append((t, len(timeline), ("restart", rng.randrange(3), t)))  # key 2: none
    for _ in range(rng.randint(0, 3)):
        t = rng.randrange(0, end + 1)
        timeline.append((t, len(timeline), ("live", rng.randrange(legs), rng.random() < 0.4, t)))
    for _ in range(rng.randint(0, 3)):
        t = rng.randrange(0, end + 1)
        timeline.append((t, len(timeline), ("tick", t)))
    timeline.sort()
    events = [event for _, _, event in timeline]
    batch_sizes = [rng.randint(1, 64) for _ in events]
    unread = None
    if draw(st.booleans()):
        unread = [[rng.random() < 0.6 for _ in range(rng.randint(0, 12))] for _ in range(legs)]
    return Schedule(legs, hold_ns, max_held, won_window, max_hold_ns, events, batch_sizes, unread)


def run_reference(
    s: Schedule,
) -> tuple[Arbiter[bytes], list[tuple[Any, ...]], list[list[Any]], Probe | None]:
    """Feed the reference, calling expire whenever its deadline comes before the next event:
    the calls made (so C gets the very same), each call's outputs and the probe it asked."""
    kwargs, probe = make_pair(s)
    ref: Arbiter[bytes] = Arbiter(s.legs, **kwargs)
    calls: list[tuple[Any, ...]] = []
    outputs: list[list[Any]] = []
    for event in s.events:
        at = event[1][5] if event[0] == "offer" else event[-1]
        while (deadline := ref.deadline) is not None and deadline <= at:
            calls.append(("tick", deadline))
            outputs.append(ref.expire(deadline))
        calls.append(event)
        if event[0] == "offer":
            outputs.append(ref.offer(*event[1]))
        elif event[0] == "live":
            outputs.append(ref.set_live(event[1], event[2], event[3]))
        elif event[0] == "restart":
            outputs.append([("R", event[1], ref.restart(event[1]))])
        else:
            outputs.append(ref.expire(event[1]))
    while ref.deadline is not None:
        calls.append(("tick", ref.deadline))
        outputs.append(ref.expire(ref.deadline))
    return ref, calls, outputs, probe


def run_c_batched(
    s: Schedule, calls: Sequence[tuple[Any, ...]]
) -> tuple[CArbiter, list[Any], Probe | None]:
    """The same calls on C, consecutive offers in offer_many batches of drawn sizes."""
    kwargs, probe = make_pair(s)
    arb = CArbiter(s.legs, max_topics=3, **kwargs)
    out: list[Any] = []
    pending: list[Arrival] = []
    sizes = iter([*s.batch_sizes, *[64] * (len(calls) + 1)])
    limit = next(sizes)
    for call in calls:
        if call[0] == "offer":
            pending.append(call[1])
            if len(pending) >= limit:
                out += arb.offer_many(pending)
                pending, limit = [], next(sizes)
            continue
        out += arb.offer_many(pending)
        pending = []
        if call[0] == "live":
            out += arb.set_live(call[1], call[2], call[3])
        elif call[0] == "restart":
            out.append(("R", call[1], arb.restart(call[1])))
        else:
            out += arb.expire(call[1])
    out += arb.offer_many(pending)
    return arb, out, probe


def assert_same_figures(ref: Arbiter[bytes], arb: CArbiter) -> None:
    assert [(s.won, s.late, s.lag_ns) for s in ref.stats] == [
        (s.won, s.late, s.lag_ns) for s in arb.stats
    ]
    for leg, stats in enumerate(ref.stats):
        for q in (0, 50, 99, 100):
            assert arb.lag_percentile(leg, q) == stats.lag_percentile(q)
    assert (ref.duplicates, ref.lost_total, ref.live, ref.deadline) == (
        arb.duplicates,
        arb.lost_total,
        arb.live,
        arb.deadline,
    )


@settings(max_examples=250, deadline=None)
@given(schedules())
def test_c_and_the_reference_give_the_same_outputs_and_figures(s: Schedule) -> None:
    ref, calls, ref_outputs, ref_probe = run_reference(s)
    expected = norm(o for outs in ref_outputs for o in outs)

    # one call at a time: each call's outputs and the deadline after it
    kwargs, single_probe = make_pair(s)
    single = CArbiter(s.legs, max_topics=3, **kwargs)
    kwargs, _ = make_pair(s)
    replay: Arbiter[bytes] = Arbiter(s.legs, **kwargs)
    for call, ref_out in zip(calls, ref_outputs, strict=True):
        if call[0] == "offer":
            got = single.offer(*call[1])
            replay.offer(*call[1])
        elif call[0] == "live":
            got = single.set_live(call[1], call[2], call[3])
            replay.set_live(call[1], call[2], call[3])
        elif call[0] == "restart":
            got = [("R", call[1], single.restart(call[1]))]
            replay.restart(call[1])
        else:
            got = single.expire(call[1])
            replay.expire(call[1])
        assert norm(got) == norm(ref_out), call
        assert single.deadline == replay.deadline
    assert_same_figures(ref, single)
    if ref_probe is not None:
        assert single_probe is not None and single_probe.asked == ref_probe.asked

    batched, got_batched, batched_probe = run_c_batched(s, calls)
    assert norm(got_batched) == expected
    assert_same_figures(ref, batched)
    if ref_probe is not None:
        assert batched_probe is not None and batched_probe.asked == ref_probe.asked
    assert batched.held == 0 and batched.totals().arena_free == batched.arena_bytes // 128 * 128

"""Double faults of a feed group on the lab (issue #19): both legs fail in overlapping ways,
on the DPDK + kernel group of test_groups_mixed (the simulator's feed group, legs A and B).

- one leg reset while the other's link is cut, either way round;
- leg A reset while leg B is stalled (the simulator sends B nothing, then all it held);
- both legs down in turn (A's link cut, then B's, their connections reset behind the cuts,
  the links back in the other order): exactly one gap, its count what neither leg got.

What the group's ring consumer must see whatever the hold: every message at most once and in
order, each jump announced by one gap record with the jump's count, no other gap. With a hold
longer than the other leg's silence (3 s) the single faults within a double fault lose
nothing; with the default 20 ms hold a hole is given up on a leg silent for longer (the
arbiter cannot tell a cut link from a dead one), and that loss is announced with its count.
"""

from __future__ import annotations

import time

import pytest

from tests.conftest import requires_dpdk
from tests.integration.test_groups_mixed import Mixed, Seen
from tests.integration.test_groups_mixed import mixed as mixed  # noqa: PLC0414 (the fixture)
from wsgw_bench.failover import GROUP

pytestmark = [requires_dpdk, pytest.mark.dpdk]
HOLDS = pytest.mark.parametrize("hold_ms", [20, 3000], ids=["hold-20ms", "hold-3s"])


def accounted(seen: Seen) -> tuple[int, int]:
    """Every message once and in order, each jump announced by one gap record with its
    count, no gap without a jump: (gaps, messages they announced)."""
    last: int | None = None
    announced: int | None = None
    gaps = lost = 0
    for kind, value in seen.events:
        if kind == "gap":
            assert announced is None, "two gaps with no message between them"
            announced = int(seen.gaps[value - 1]["lost"])
            gaps += 1
            lost += announced
            continue
        if last is not None:
            jump = value - last - 1
            assert jump >= 0, f"sim_seq {value} after {last}: repeated or out of order"
            assert jump == (announced or 0), f"{jump} missing after {last}, {announced} announced"
        elif announced is not None:
            announced = None  # the consumer joined between a gap and its next message
        last, announced = value, None
    return gaps, lost


def hold(mixed: Mixed, hold_ms: int) -> None:
    """The group's hold (a change runs a fresh arbiter from where the old one left off)."""
    if hold_ms != 20:
        mixed.control.groups.update(mixed.group_id, {"hold_ms": hold_ms})
    mixed.caught_up()


def link(mixed: Mixed, leg: str, state: str) -> None:
    """Leg A's (the DPDK port's) or leg B's (the kernel twin's) peer-side veth up/down."""
    iface = mixed.lab.peer_if if leg == "A" else mixed.lab.peer_client_if
    mixed.lab.exec(["ip", "link", "set", iface, state])


def check(mixed: Mixed, hold_ms: int) -> None:
    mixed.caught_up()
    gaps, lost = accounted(mixed.ring_seen)
    assert len(mixed.ring_seen.seqs) > 500
    if hold_ms >= 3000:  # longer than the other leg's silence: its copies fill the hole
        assert gaps == 0, mixed.ring_seen.gaps
    else:  # given up on the silent leg: one hole, announced (its late copies dropped)
        assert gaps <= 1, mixed.ring_seen.gaps
    figures = mixed.control.groups.figures(mixed.group_id)
    assert figures is not None
    assert figures["gaps"] == gaps and figures["lost"] == lost


@HOLDS
@pytest.mark.parametrize("cut", ["B", "A"], ids=["B-cut-A-reset", "A-cut-B-reset"])
def test_a_reset_of_one_leg_while_the_others_link_is_cut(
    mixed: Mixed, hold_ms: int, cut: str
) -> None:
    hold(mixed, hold_ms)
    link(mixed, cut, "down")
    try:
        time.sleep(0.3)
        mixed.reset("A" if cut == "B" else "B")  # returns once the group saw it down
        time.sleep(0.5)
    finally:
        link(mixed, cut, "up")
    check(mixed, hold_ms)


@HOLDS
def test_a_reset_of_leg_a_while_leg_b_is_stalled(mixed: Mixed, hold_ms: int) -> None:
    hold(mixed, hold_ms)
    mixed.upstream.command(f"fault stall seconds=1 target=leg:{GROUP}/B")
    time.sleep(0.2)
    mixed.reset("A")
    check(mixed, hold_ms)


def test_both_legs_down_in_turn_is_one_gap_with_the_count_neither_leg_got(mixed: Mixed) -> None:
    mixed.caught_up()
    downs = [mixed.downs(leg) for leg in mixed.legs]
    link(mixed, "A", "down")
    try:
        time.sleep(0.3)  # B alone carries the stream
        link(mixed, "B", "down")
        time.sleep(0.3)  # neither leg: into their connections' buffers
        mixed.upstream.reset_group()  # the simulator forgets both with what it held
    finally:
        link(mixed, "B", "up")
        time.sleep(0.3)
        link(mixed, "A", "up")
    mixed.back_after_both_reset(downs)
    gaps, lost = accounted(mixed.ring_seen)
    assert gaps == 1 and lost > 0
    figures = mixed.control.groups.figures(mixed.group_id)
    assert figures is not None
    assert figures["gaps"] == 1 and figures["lost"] == lost and figures["duplicates"] > 0


def test_a_hole_waits_for_the_kernel_legs_unread_socket_while_its_loop_is_stalled(
    mixed: Mixed,
) -> None:
    """The failover bench's false losses (FAILOVER12): leg B's socket held the copies unread
    (its read loop, the session thread, waiting for a CPU) while leg A skipped them. With
    the default 20 ms hold the hole is due long before B reads; B's unread socket bytes must
    hold it (the unread rule), so B's copies fill it: no gap."""
    hold(mixed, 20)
    mixed.runtime._loop.call_soon_threadsafe(time.sleep, 0.8)  # the session thread stalls
    time.sleep(0.1)
    mixed.upstream.command(f"fault skip count=5 target=leg:{GROUP}/A")
    time.sleep(1.2)
    check(mixed, 3000)  # no gap although the hold is 20 ms: B's copies were at the door
    figures = mixed.control.groups.figures(mixed.group_id)
    assert figures is not None and figures["unread_waits"] >= 1

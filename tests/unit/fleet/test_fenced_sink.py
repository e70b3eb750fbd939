"""The fence (gateway.fleet.node.FencedSink): a batch of a session this node may publish for
passes whole; a refused session's messages are dropped and counted, in a batch of one
session or of several."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pytest

from gateway.fleet import node
from gateway.fleet.node import FencedSink, joining_holds
from gateway.groups.feed import GROUP_HUB_BASE
from gateway.sessions.sink import Published


class Recorder:
    def __init__(self) -> None:
        self.batches: list[list[Published]] = []

    def publish_batch(self, messages: Sequence[Published]) -> object:
        self.batches.append(list(messages))
        return None

    def publish_gap(self, session_id: int, lost: int | None, reason: str) -> object:
        return None


def batch(*sids: int) -> list[Published]:
    return [(sid, "t", b"x", i) for i, sid in enumerate(sids)]  # type: ignore[misc]


def test_the_fence_passes_held_sessions_and_drops_the_others() -> None:
    inner = Recorder()
    warm_told: list[set[int]] = []

    def warm(refused: set[int]) -> set[int]:
        warm_told.append(refused)
        return refused & {3}

    sink = FencedSink(inner, {1: 5}.get, warm)
    sink.publish_batch(batch(1, 1, 1))
    assert inner.batches == [batch(1, 1, 1)] and sink.fenced == 0
    sink.publish_batch(batch(2, 2))  # not held: dropped
    assert len(inner.batches) == 1 and sink.fenced == 2
    # Several sessions (no session's own batch: first and last differ): the held one's pass.
    sink.publish_batch(batch(1, 2, 2))
    assert inner.batches[-1] == batch(1) and sink.fenced == 4
    sink.publish_batch(batch(3))  # a successor's warm session: refused, reported
    assert warm_told[-1] == {3} and sink.fenced == 5


class Bus:
    """The hub behind the fence: batches and gaps, in the order they come."""

    def __init__(self) -> None:
        self.out: list[object] = []

    def publish_batch(self, messages: Sequence[Published]) -> object:
        self.out.append([m[3] for m in messages])
        return None

    def publish_gap(self, session_id: int, lost: int | None, reason: str) -> object:
        self.out.append(("gap", session_id, reason))
        return None


def numbered(sid: int, *numbers: int) -> list[Published]:
    return [(sid, "t", b"x", n, None) for n in numbers]


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_hold_keeps_an_id_s_first_messages_back_then_publishes_them_in_order() -> None:
    """A node joining a stream another node publishes (module doc of gateway.fleet.node):
    what passes the fence for the held id first waits the hold's time, gaps with it, in
    order; other ids pass meanwhile; after the hold the id passes straight on."""
    bus = Bus()
    sink = FencedSink(bus, {1: 5, 7: 0}.get)
    sink.hold(7, 0.3)
    sink.publish_batch(numbered(7, 10, 11))
    sink.publish_gap(7, 1, "why")
    sink.publish_batch(numbered(1, 1))  # not held
    sink.publish_batch(numbered(7, 12))
    sink.publish_batch(numbered(7, 13) + numbered(1, 2))  # two ids: sorted message by message
    assert bus.out == [[1], [2]]
    wait_for(lambda: len(bus.out) == 6)
    assert bus.out[2:] == [[10, 11], ("gap", 7, "why"), [12], [13]]
    sink.publish_batch(numbered(7, 14))
    assert bus.out[-1] == [14]
    assert sink.fenced == 0


def test_what_a_hold_kept_back_is_dropped_once_the_fence_closed_meanwhile() -> None:
    held = {7: 0}
    bus = Bus()
    sink = FencedSink(bus, held.get)
    sink.hold(7, 0.1)
    sink.publish_batch(numbered(7, 1, 2))
    del held[7]  # the lease was lost during the hold
    wait_for(lambda: sink.fenced == 2)
    assert bus.out == []
    sink.unhold(7)  # nothing held any more: nothing to end


def test_a_second_hold_of_an_id_keeps_what_the_first_holds() -> None:
    """Two sessions of a group joining one after the other both hold the group's id: what
    the first hold kept back is published, not dropped with it."""
    bus = Bus()
    sink = FencedSink(bus, {7: 0}.get)
    sink.hold(7, 0.2)
    sink.publish_batch(numbered(7, 1))
    sink.hold(7, 0.2)
    sink.publish_batch(numbered(7, 2))
    wait_for(lambda: len(bus.out) == 2)
    assert bus.out == [[1], [2]]


def test_what_comes_while_a_hold_is_released_goes_after_what_it_held() -> None:
    """The session's thread publishes while the hold's timer releases: its batch waits for
    the release (it must not pass the hold's last batches)."""
    released = threading.Event()
    resume = threading.Event()

    class SlowBus(Bus):
        def publish_batch(self, messages: Sequence[Published]) -> object:
            if messages[0][3] == 1:  # the first held batch: the release is under way
                released.set()
                assert resume.wait(5)
            return super().publish_batch(messages)

    bus = SlowBus()
    sink = FencedSink(bus, {7: 0}.get)
    sink.hold(7, 0.05)
    sink.publish_batch(numbered(7, 1))
    sink.publish_batch(numbered(7, 2))
    assert released.wait(5)
    late = threading.Thread(target=sink.publish_batch, args=(numbered(7, 3),))
    late.start()
    time.sleep(0.05)  # the late batch is at the hold (without the fix: already out)
    resume.set()
    late.join(5)
    wait_for(lambda: len(bus.out) == 3)
    assert bus.out == [[1], [2], [3]]


@pytest.mark.parametrize("ends", ["unhold", "in time"])
def test_a_hold_nothing_came_for_ends(ends: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A take-over that failed (unhold), or a leg's own id (its messages go out under its
    group's) or a session that never streamed (HOLD_ARMED_S): the hold ends, what comes
    later passes at once."""
    bus = Bus()
    sink = FencedSink(bus, {7: 0}.get)
    if ends == "unhold":
        sink.hold(7, 60.0)
        sink.unhold(7)
    else:
        monkeypatch.setattr(node, "HOLD_ARMED_S", 0.0)
        sink.hold(7, 60.0)
        time.sleep(0.01)
    sink.publish_batch(numbered(7, 1))
    assert bus.out == [[1]]


def holds(
    sid: int, running: set[int], owners: dict[int, str], alive: set[str], owner_alive: bool
) -> set[int]:
    """joining_holds on node n3, sessions 1 and 2 being the legs of group 4."""
    return joining_holds(
        sid,
        node="n3",
        running=running,
        owners=owners,
        alive=alive,
        apart={1: 4, 2: 4},
        owner_alive=owner_alive,
    )


def test_a_node_holds_back_what_another_live_node_publishes_too() -> None:
    """joining_holds: the group test's take-over (n3 starts the dead n1's leg 1 while n2
    runs leg 2 of the group) holds the group back; a hand-over from a live owner holds the
    session and its group; nothing is held where no other live node publishes the ids."""
    hub = GROUP_HUB_BASE + 4
    # The failover of leg 1 (n1 dead, its lease expired) while n2 runs leg 2.
    assert holds(1, set(), {2: "n2"}, {"n2", "n3"}, owner_alive=False) == {hub}
    # Leg 2's node is dead too: nobody else publishes the group.
    assert holds(1, set(), {2: "n2"}, {"n3"}, owner_alive=False) == set()
    # Another leg runs here: the group's stream goes on here, nothing joins.
    assert holds(1, {2}, {2: "n3"}, {"n3"}, owner_alive=False) == set()
    # A hand-over from a live owner (it publishes until it stops): the session and group.
    assert holds(1, {1}, {1: "n1", 2: "n2"}, {"n1", "n2", "n3"}, owner_alive=True) == {1, hub}
    # A single session: its owner's failover holds nothing, its hand-over holds it.
    assert holds(9, set(), {}, {"n3"}, owner_alive=False) == set()
    assert holds(9, {9}, {9: "n1"}, {"n1", "n3"}, owner_alive=True) == {9}

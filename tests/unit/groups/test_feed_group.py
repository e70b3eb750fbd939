"""FeedGroup (gateway.groups.feed): legs' batches through the C arbiter into a sink, with
real Binance trade frames (identity `t`, prev `t - 1`)."""

from __future__ import annotations

import asyncio
import os
import threading
import time

from dataplane.ring import RingWriter
from gateway.groups.feed import GroupRouter, GroupSpec, group_hub_id
from gateway.hub import Hub
from gateway.sessions.sink import GapMark, RecordingSink

TOPIC = "btcusdt@trade"
A, B = 11, 12  # the legs' session ids
HUB_ID = group_hub_id(1)


def trade(t: int) -> bytes:
    return (
        b'{"stream":"btcusdt@trade","data":{"e":"trade","E":1,"s":"BTCUSDT","t":%d,'
        b'"p":"1","q":"1"}}' % t
    )


def batch(
    sid: int, ids: list[int], ts: int | None = None
) -> list[tuple[int, str, bytes, int, None]]:
    stamp = ts if ts is not None else time.time_ns()
    return [(sid, TOPIC, trade(t), stamp, None) for t in ids]


def router(
    hold_ms: int = 20, loop: asyncio.AbstractEventLoop | None = None
) -> tuple[GroupRouter, RecordingSink]:
    sink = RecordingSink()
    groups = GroupRouter(sink, loop)
    groups.set_group(GroupSpec(1, "g", (A, B), "binance", hold_ms))
    return groups, sink


def ids(sink: RecordingSink) -> list[int | None]:
    return [m[4] for m in sink.messages()]


def test_first_copy_wins_and_duplicates_are_dropped() -> None:
    groups, sink = router()
    groups.publish_batch(batch(A, [1, 2, 3]))
    groups.publish_batch(batch(B, [1, 2, 3, 4]))
    groups.publish_batch(batch(A, [4, 5]))
    assert ids(sink) == [1, 2, 3, 4, 5]
    assert {m[0] for m in sink.messages()} == {HUB_ID}
    assert {m[1] for m in sink.messages()} == {TOPIC}
    figures = groups.groups[1].figures()
    assert [leg["won"] for leg in figures["legs"]] == [4, 1]
    assert figures["duplicates"] == 4 and figures["gaps"] == 0


def test_a_message_one_leg_missed_is_filled_by_the_other() -> None:
    groups, sink = router()
    groups.publish_batch(batch(A, [1, 2, 4, 5]))  # A skipped 3: 4 and 5 are held
    assert ids(sink) == [1, 2]
    groups.publish_batch(batch(B, [1, 2, 3]))
    assert ids(sink) == [1, 2, 3, 4, 5]
    assert sink.gaps() == []


def test_a_message_every_leg_missed_is_a_gap_with_its_count() -> None:
    groups, sink = router()
    groups.publish_batch(batch(A, [1, 2, 5]))
    groups.publish_batch(batch(B, [1, 2, 5, 6]))  # both passed 3 and 4
    entries = sink.entries()
    assert [e[4] for e in entries if not isinstance(e, GapMark)] == [1, 2, 5, 6]
    (gap,) = sink.gaps()
    assert gap.session_id == HUB_ID and gap.lost == 2
    assert isinstance(entries[2], GapMark)  # between 2 and 5


def test_a_leg_that_went_down_is_not_waited_for() -> None:
    groups, sink = router(hold_ms=10_000)
    groups.publish_batch(batch(A, [1]))
    groups.publish_batch(batch(B, [1]))
    groups.leg_down(B, "backoff: reconnecting")
    groups.publish_batch(batch(A, [3]))  # 2 is missing and only A is live: lost at once
    assert ids(sink) == [1, 3]
    assert [g.lost for g in sink.gaps()] == [1]
    groups.publish_batch(batch(B, [4]))  # B is back (live again on its batch)
    assert ids(sink) == [1, 3, 4]


def test_frames_without_an_exchange_id_pass_through_from_leg_0_only() -> None:
    groups, sink = router()
    status = b'{"result":null,"id":1}'
    groups.publish_batch([(A, TOPIC, status, 1, None)])
    groups.publish_batch([(B, TOPIC, status, 1, None)])
    assert [m[2] for m in sink.messages()] == [status]
    figures = groups.groups[1].figures()
    assert figures["passed_through"] == 1


def test_sessions_outside_groups_publish_as_before() -> None:
    groups, sink = router()
    groups.publish_batch(batch(99, [7]))
    groups.publish_gap(99, 3, "reconnect")
    assert sink.messages()[0][0] == 99 and sink.gaps()[0].session_id == 99


def test_a_hole_expires_on_the_loop_s_timer() -> None:
    """A hole no leg fills: the timer on the loop declares it lost after hold_ms."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        groups, sink = router(hold_ms=30, loop=loop)
        groups.publish_batch(batch(A, [1]))
        groups.publish_batch(batch(B, [1]))
        groups.publish_batch(batch(A, [3]))  # B has not passed 2: held
        assert ids(sink) == [1]
        deadline = time.monotonic() + 10
        while ids(sink) != [1, 3] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ids(sink) == [1, 3]
        assert [g.lost for g in sink.gaps()] == [1]
        groups.remove_group(1)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_a_change_of_the_group_delivers_nothing_twice() -> None:
    """PATCH runs a fresh arbiter: it starts where the old one left off."""
    groups, sink = router()
    groups.publish_batch(batch(A, [1, 2, 3, 4]))
    groups.publish_batch(batch(B, [1, 2]))  # B is behind
    groups.set_group(GroupSpec(1, "g", (A, B), "binance", 5))
    groups.publish_batch(batch(B, [3, 4, 5]))
    groups.publish_batch(batch(A, [5, 6]))
    assert ids(sink) == [1, 2, 3, 4, 5, 6]


def test_sessions_outside_groups_still_find_the_hub_s_ring_for_the_c_feed_path() -> None:
    """The router stands where the hub stood as the sessions' sink: a session that is no
    leg asks it for the ring and its topic ids (UpstreamSession._attach_feed), and must get
    the hub's, or it silently falls back to the Python read loop."""
    hub = Hub(ring=RingWriter.create(f"wsgw-test-{os.getpid()}-router", 1 << 20))
    try:
        router = GroupRouter(hub)
        assert router.ring is hub.ring
        assert router.ring_topic_id is not None
        assert router.ring_topic_id(5, "btcusdt@trade") == hub.ring_topic_id(5, "btcusdt@trade")
        plain = GroupRouter(RecordingSink())  # a sink with no ring: no C feed path offered
        assert plain.ring is None and plain.ring_topic_id is None
    finally:
        hub.close()

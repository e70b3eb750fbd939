"""After a loss on a key, the next unlinked message (a venue's snapshot, as a resubscribe
brings it) restarts the key even when its id was delivered already (issue #21: an OKX book
on a feed group recovers from a group-wide loss by resubscribing). Without a loss, a leg's
snapshot of what the group has delivered stays a copy (a killed leg that reconnects).
A book found wrong for another reason (a checksum mismatch, no loss first) has the group
`restart` the key before it resubscribes: the next snapshot then restarts it as after a
loss; only keys of linked messages (books), never trades'. The same cases on the Python
reference and on C, and on the groups (Python path and C, by the legs' topic name)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from dataplane.arbiter import CArbiter
from dataplane.ring import RingMessage, RingReader, RingWriter
from gateway.groups import Arbiter
from gateway.groups.feed import GroupRouter, GroupSpec, group_hub_id
from gateway.hub import Hub
from gateway.hub.names import RING_GAP_TOPIC, ring_topics

MS = 1_000_000
IMPLEMENTATIONS = pytest.mark.parametrize("make", [Arbiter, CArbiter], ids=["reference", "c"])


def kinds(out: list[Any]) -> list[tuple[str, int]]:
    return [
        (type(o).__name__, o.this if type(o).__name__ == "Delivered" else o.before) for o in out
    ]


def linked(arb: Any, leg: int, ids: range, at: int) -> list[Any]:
    out: list[Any] = []
    for i in ids:
        out += arb.offer(leg, 0, i, i - 1, b"u%d" % i, at)
    return out


@IMPLEMENTATIONS
def test_a_snapshot_after_a_loss_restarts_the_key(make: Any) -> None:
    arb = make(2, hold_ns=20 * MS)
    linked(arb, 0, range(1, 11), 0)
    linked(arb, 1, range(1, 11), 0)
    # Both legs lose 11: 12.. is held, then given up (a Lost), and the stream goes on.
    out = linked(arb, 0, range(12, 16), 1 * MS) + linked(arb, 1, range(12, 16), 1 * MS)
    out += arb.expire(100 * MS)
    assert ("Lost", 12) in kinds(out)
    # Leg 0 resubscribes: its snapshot is at 13 (< last 15), then the updates after it.
    out = arb.offer(0, 0, 13, None, b"snapshot", 200 * MS)
    assert kinds(out) == [("Delivered", 13)]
    out = linked(arb, 0, range(14, 18), 201 * MS)
    assert kinds(out) == [("Delivered", i) for i in range(14, 18)]  # linked to the snapshot
    out = linked(arb, 1, range(16, 18), 202 * MS)
    assert kinds(out) == []  # copies
    # Only the first snapshot after the loss restarts: the next one is a copy again.
    assert arb.offer(1, 0, 17, None, b"snapshot", 203 * MS) == []


@IMPLEMENTATIONS
def test_without_a_loss_a_legs_snapshot_is_a_copy(make: Any) -> None:
    arb = make(2, hold_ns=20 * MS)
    linked(arb, 0, range(1, 11), 0)
    linked(arb, 1, range(1, 11), 0)
    assert arb.offer(1, 0, 9, None, b"snapshot", 1 * MS) == []  # a reconnected leg's
    assert kinds(linked(arb, 0, range(11, 13), 2 * MS)) == [("Delivered", 11), ("Delivered", 12)]


@IMPLEMENTATIONS
def test_a_restarted_key_takes_the_next_snapshot_without_a_loss(make: Any) -> None:
    arb = make(2, hold_ns=20 * MS)
    linked(arb, 0, range(1, 11), 0)
    linked(arb, 1, range(1, 11), 0)
    assert arb.offer(0, 0, 10, None, b"snapshot", 1 * MS) == []  # a copy: not asked for
    assert arb.restart(0) is True
    # Leg 0 resubscribed: its snapshot is of what was delivered (10), news now.
    assert kinds(arb.offer(0, 0, 10, None, b"snapshot", 2 * MS)) == [("Delivered", 10)]
    assert kinds(linked(arb, 0, range(11, 13), 3 * MS)) == [("Delivered", 11), ("Delivered", 12)]
    assert linked(arb, 1, range(11, 13), 3 * MS) == []  # copies
    # The restart is used up: a later snapshot is a copy again.
    assert arb.offer(1, 0, 12, None, b"snapshot", 4 * MS) == []
    assert arb.lost_total == 0


@IMPLEMENTATIONS
def test_a_snapshot_behind_the_group_restarts_it_there_and_the_updates_follow(make: Any) -> None:
    arb = make(2, hold_ns=20 * MS)
    linked(arb, 0, range(1, 21), 0)
    linked(arb, 1, range(1, 21), 0)
    assert arb.restart(0)
    # The resubscribed leg is behind the other: its snapshot at 15, then 16.. again.
    out = arb.offer(0, 0, 15, None, b"snapshot", 1 * MS)
    out += linked(arb, 0, range(16, 23), 2 * MS)
    assert kinds(out) == [("Delivered", i) for i in range(15, 23)]
    assert linked(arb, 1, range(21, 23), 3 * MS) == []


@IMPLEMENTATIONS
def test_only_keys_of_linked_messages_restart(make: Any) -> None:
    arb = make(2, hold_ns=20 * MS)
    assert arb.restart(0) is False  # never arrived
    for i in range(1, 6):  # trades: ids without a link
        arb.offer(0, 1, i, None, b"t%d" % i, 0)
    assert arb.restart(1) is False
    assert arb.offer(1, 1, 5, None, b"t5", 1 * MS) == []  # still a copy: never twice
    linked(arb, 0, range(1, 4), 0)
    assert arb.restart(0) is True


# ---- the groups: restart by the legs' topic name, or leg 0 for frames with no id ---------------

A, B = 21, 22
GROUP_ID = 5
HUB_ID = group_hub_id(GROUP_ID)
BOOKS = "books:BTC-USDT"
TRADES = "trades:BTC-USDT"
TICKERS = "tickers:BTC-USDT"
OKX_TICKER = b'{"arg":{"channel":"tickers","instId":"BTC-USDT"},"data":[{"last":"1"}]}'


def okx_book(seq: int, prev: int) -> bytes:
    """An OKX books message (prev -1: a snapshot), as the identity reads it."""
    action = b"snapshot" if prev < 0 else b"update"
    return (
        b'{"arg":{"channel":"books","instId":"BTC-USDT"},"action":"%s","data":[{"asks":[],'
        b'"bids":[],"ts":"1","checksum":0,"seqId":%d,"prevSeqId":%d}]}' % (action, seq, prev)
    )


def okx_trade(trade_id: int) -> bytes:
    return (
        b'{"arg":{"channel":"trades","instId":"BTC-USDT"},"data":[{"instId":"BTC-USDT",'
        b'"tradeId":"%d","px":"1","sz":"1","side":"buy","ts":"1"}]}' % trade_id
    )


@pytest.mark.parametrize("c_path", [False, True], ids=["python", "c"])
def test_a_group_restarts_a_book_topic_for_the_resubscribe_snapshot(c_path: bool) -> None:
    ring = RingWriter.create(None, 1 << 22)
    hub = Hub(ring=ring)
    router = GroupRouter(hub, c_path=c_path)
    group = router.set_group(GroupSpec(GROUP_ID, "g", (A, B), "okx", 20))
    assert group.path == ("c" if c_path else "python")
    reader = RingReader.attach_fd(
        ring.fd, topics=ring_topics(HUB_ID, None), copy=True, start="oldest"
    )
    try:

        def offer(sid: int, topic: str, payloads: list[bytes]) -> None:
            router.publish_batch([(sid, topic, p, time.time_ns(), None) for p in payloads])

        for sid in (A, B):
            offer(sid, BOOKS, [okx_book(10, -1), *[okx_book(i, i - 1) for i in range(11, 16)]])
            offer(sid, TRADES, [okx_trade(i) for i in range(1, 4)])
        assert router.resync(99, BOOKS) == 99  # no leg: its own
        offer(A, BOOKS, [okx_book(15, -1)])  # a snapshot nobody asked for: a copy
        assert group.restart(TRADES) == 0  # trades never restart
        assert router.resync(A, BOOKS) == A  # the key restarted: A's own resubscribe
        offer(A, BOOKS, [okx_book(15, -1), okx_book(16, 15)])
        offer(B, BOOKS, [okx_book(16, 15)])
        offer(B, TRADES, [okx_trade(3)])
        # Frames with no exchange id pass through from leg 0 (A) only: a book of them on
        # leg B resyncs through A's resubscribe (B's snapshot would be dropped).
        for sid in (A, B):
            offer(sid, TICKERS, [OKX_TICKER])
        assert router.resync(B, TICKERS) == A and router.resync(A, TICKERS) == A
        records = []
        for event in reader.poll():
            assert type(event) is RingMessage and event.topic != RING_GAP_TOPIC
            records.append((event.topic.split(":", 1)[1], bytes(event.payload)))
        books = [p for t, p in records if t == BOOKS]
        assert books == [
            okx_book(10, -1),
            *[okx_book(i, i - 1) for i in range(11, 16)],
            okx_book(15, -1),
            okx_book(16, 15),
        ]
        assert [p for t, p in records if t == TRADES] == [okx_trade(i) for i in range(1, 4)]
        assert [p for t, p in records if t == TICKERS] == [OKX_TICKER]  # leg A's
    finally:
        router.remove_group(GROUP_ID)
        reader.close()
        hub.close()
        ring.close()

"""The session's last gap for consumers that subscribe after it: once, first, marked past
with its time; never twice when the subscription races the gap's hand-off; a newer gap
arrives live as usual; other sessions get nothing."""

from __future__ import annotations

import asyncio
import json
import time

from gateway.hub import Delivery, GapNotice, Hub

from .conftest import msg, settle


def test_a_late_consumer_gets_the_last_gap_once_marked_past() -> None:
    async def main() -> None:
        hub = Hub()
        early = hub.subscribe(1, ["a"])
        hub.publish_batch([msg(1, "a", 0)])
        before = time.time_ns()
        hub.publish_gap(1, None, "restart: first")
        gap = hub.publish_gap(1, 7, "reconnect")  # the last one is what a late consumer gets
        hub.publish_batch([msg(1, "a", 1)])
        await settle(hub)
        assert [type(e) for e in early.poll()] == [Delivery, GapNotice, GapNotice, Delivery]

        late = hub.subscribe(1, ["a"])
        other = hub.subscribe(2, ["a"])
        hub.publish_batch([msg(1, "a", 2)])
        await settle(hub)
        events = late.poll()
        past = events[0]
        assert isinstance(past, GapNotice)
        assert past[:4] == (1, 7, "reconnect", gap) and past.past
        assert past.ts_ns is not None and before <= past.ts_ns <= time.time_ns()
        assert hub.last_gap(1) is not None and hub.last_gap(1).ts_ns == past.ts_ns  # type: ignore[union-attr]
        assert [e.payload for e in events[1:] if isinstance(e, Delivery)] == [b"a#2"]
        assert len(events) == 2
        assert json.loads(past.json()) == {
            "type": "gap",
            "seq": gap,
            "session": 1,
            "lost": 7,
            "reason": "reconnect",
            "past": True,
            "ts_ns": past.ts_ns,
            "epoch": hub.epoch_hex,
        }
        assert other.poll() == []  # session 2 had no gap (and no message)

        # A newer gap reaches the late consumer live, and the past one is not repeated.
        newer = hub.publish_gap(1, 1, "reconnect")
        await settle(hub)
        assert late.poll() == [GapNotice(1, 1, "reconnect", newer, epoch=hub.epoch_hex)]
        (latest,) = hub.subscribe(1).poll()  # the next late consumer: the newer one, past
        assert isinstance(latest, GapNotice) and latest.past and latest.seq == newer

    asyncio.run(main())


def test_a_subscription_racing_the_gap_gets_it_once() -> None:
    """The gap was published (and remembered) but not yet handed to the consumers' loop
    when the consumer subscribed: it gets the gap once, as past, not a second live copy."""

    async def main() -> None:
        hub = Hub()
        early = hub.subscribe(1)  # the loop's router exists: the gap waits in its hand-off
        gap = hub.publish_gap(1, None, "restart: killed")
        racing = hub.subscribe(1)
        await settle(hub)
        assert early.poll() == [GapNotice(1, None, "restart: killed", gap, epoch=hub.epoch_hex)]
        (notice,) = racing.poll()
        assert isinstance(notice, GapNotice) and notice.past and notice.seq == gap

    asyncio.run(main())


def test_no_gap_no_past_notice() -> None:
    async def main() -> None:
        hub = Hub()
        hub.publish_batch([msg(1, "a", 0)])
        consumer = hub.subscribe(1)
        await settle(hub)
        assert consumer.poll() == [] and hub.last_gap(1) is None

    asyncio.run(main())

"""Per-consumer queues: the disconnect and drop_oldest policies, conflation, and what a
full hand-off (a consumer loop far behind) costs each consumer."""

from __future__ import annotations

import asyncio

import pytest

from gateway.hub import Delivery, DeliveryOptions, GapNotice, Hub
from gateway.hub.consumer import ConsumerClosed
from gateway.hub.events import OVERLOAD, QUEUE_FULL

from .conftest import msg, settle


def numbers(events: list[object]) -> list[int]:
    return [int(e.payload.split(b"#")[1]) for e in events if isinstance(e, Delivery)]


def test_disconnect_policy_cuts_the_slow_consumer_only() -> None:
    async def main() -> None:
        hub = Hub()
        slow = hub.subscribe(1, ["a"], DeliveryOptions(queue_size=10), name="slow")
        fast = hub.subscribe(1, ["a"], DeliveryOptions(queue_size=10), name="fast")
        waiting = asyncio.create_task(slow.get())
        await settle()
        waiting.cancel()
        got: list[object] = []
        for i in range(30):
            hub.publish_batch([msg(1, "a", i)])
            await settle()
            got += fast.poll()
        assert numbers(got) == list(range(30))
        assert slow.closed and slow.ended.done()
        closed = slow.ended.result()
        assert (closed.code, closed.reason, closed.kind) == (
            4008,
            "consumer too slow: queue of 10 messages full",
            "slow",
        )
        with pytest.raises(ConsumerClosed):
            slow.poll()
        assert slow.lag == 0  # its queue was discarded
        assert hub.consumers() == [fast]
        stats = {s.name: s for s in hub.consumer_stats()}
        assert stats["slow"].disconnects == {"slow": 1} and stats["slow"].connected == 0
        assert stats["fast"].delivered == 30

    asyncio.run(main())


def test_drop_oldest_reports_the_exact_loss_where_it_happened() -> None:
    async def main() -> None:
        hub = Hub()
        consumer = hub.subscribe(1, ["a"], DeliveryOptions(queue_size=5, overflow="drop_oldest"))
        hub.publish_batch([msg(1, "a", i) for i in range(3)])
        await settle()
        assert numbers(consumer.poll(2)) == [0, 1]
        hub.publish_batch([msg(1, "a", i) for i in range(3, 15)])  # queue: 2..14, holds 5
        await settle()
        events = consumer.poll()
        assert events[0] == GapNotice(1, 8, QUEUE_FULL)  # 2..9 dropped
        assert numbers(events[1:]) == [10, 11, 12, 13, 14]
        assert consumer.poll() == []
        hub.publish_batch([msg(1, "a", 15)])
        await settle()
        assert numbers(consumer.poll()) == [15]
        (stats,) = hub.consumer_stats()
        assert (stats.dropped, stats.delivered) == (8, 2 + 5 + 1)

    asyncio.run(main())


def test_drop_oldest_never_drops_a_session_gap_notice() -> None:
    async def main() -> None:
        hub = Hub()
        consumer = hub.subscribe(1, ["a"], DeliveryOptions(queue_size=3, overflow="drop_oldest"))
        hub.publish_batch([msg(1, "a", 0)])
        hub.publish_gap(1, 4, "reconnect")
        hub.publish_batch([msg(1, "a", i) for i in range(1, 8)])
        await settle()
        events = consumer.poll()
        assert events[0] == GapNotice(1, 4, "reconnect", 2, epoch=hub.epoch_hex)
        assert events[1] == GapNotice(1, 5, QUEUE_FULL)  # 0, then 1..4 dropped
        assert numbers(events[2:]) == [5, 6, 7]

    asyncio.run(main())


def test_a_waiting_reader_is_woken_and_a_cut_wakes_it_with_the_reason() -> None:
    async def main() -> None:
        hub = Hub()
        consumer = hub.subscribe(1, ["a"], DeliveryOptions(queue_size=1))
        reader = asyncio.create_task(consumer.get())
        await settle()
        hub.publish_batch([msg(1, "a", 0)])
        assert numbers(await asyncio.wait_for(reader, 1)) == [0]
        reader = asyncio.create_task(consumer.get())
        await settle()
        consumer.cut(4008, "test", "slow")
        with pytest.raises(ConsumerClosed, match="test"):
            await asyncio.wait_for(reader, 1)

    asyncio.run(main())


def test_conflation_sends_the_first_update_then_the_latest_per_interval() -> None:
    async def main() -> None:
        hub = Hub()
        consumer = hub.subscribe(1, ["a", "b"], DeliveryOptions(conflation_ms=50))
        hub.publish_batch([msg(1, "a", 0)])
        await settle()
        assert numbers(consumer.poll()) == [0]  # leading edge: at once
        hub.publish_batch([msg(1, "b", 1), msg(1, "a", 2), msg(1, "b", 3), msg(1, "a", 4)])
        hub.publish_gap(1, 2, "reconnect")  # gaps are never conflated nor delayed
        await settle()
        assert consumer.poll() == [GapNotice(1, 2, "reconnect", 6, epoch=hub.epoch_hex)]
        hub.publish_batch([msg(1, "b", 5)])
        await asyncio.sleep(0.12)
        events = consumer.poll()
        assert numbers(events) == [4, 5]  # the latest of each, in sequence order
        assert [e.seq for e in events] == [5, 7]
        (stats,) = hub.consumer_stats()
        assert stats.conflated == 3  # b#1, a#2, b#3 replaced
        await asyncio.sleep(0.12)  # the window closed: the next update goes at once again
        hub.publish_batch([msg(1, "a", 6)])
        await settle()
        assert numbers(consumer.poll()) == [6]
        consumer.close()

    asyncio.run(main())


def test_a_full_handoff_costs_each_consumer_exactly_what_it_lost() -> None:
    """The engine stops handing batches to a loop `handoff_limit` messages behind and counts
    them per topic; drop_oldest consumers get a gateway_overload gap with their own count,
    disconnect consumers are closed with 1013 and the count in the reason."""

    async def main() -> None:
        hub = Hub(handoff_limit=10)
        lossy = hub.subscribe(1, ["a"], DeliveryOptions(queue_size=100, overflow="drop_oldest"))
        strict = hub.subscribe(1, ["b"], DeliveryOptions(queue_size=100))
        untouched = hub.subscribe(1, ["c"], DeliveryOptions(queue_size=100))
        # No await in between: the loop cannot drain, as if it were stalled.
        hub.publish_batch([msg(1, "a", 0), msg(1, "b", 1)])  # 2 pending
        hub.publish_batch([msg(1, "a", i) for i in range(2, 10)])  # 10 pending: full
        hub.publish_batch([msg(1, "a", 10), msg(1, "a", 11), msg(1, "b", 12)])  # dropped
        hub.publish_batch([msg(1, "a", 13)])  # dropped
        (handoff,) = hub.handoffs()
        assert (handoff.pending, handoff.dropped) == (10, 4)
        await settle()
        hub.publish_batch([msg(1, "a", 14)])  # room again: the loss is reported first
        await settle()
        events = lossy.poll()
        assert numbers(events[:9]) == [0, *range(2, 10)]
        assert events[9] == GapNotice(1, 3, OVERLOAD)
        assert numbers(events[10:]) == [14]
        closed = strict.ended.result()
        assert (closed.code, closed.kind) == (1013, "overload")
        assert "1 messages of this stream dropped" in closed.reason
        assert numbers(untouched.poll()) == []
        assert not untouched.closed

    asyncio.run(main())


def test_delivery_options_are_checked() -> None:
    with pytest.raises(ValueError, match="queue_size"):
        DeliveryOptions(queue_size=0)
    with pytest.raises(ValueError, match="overflow"):
        DeliveryOptions(overflow="block")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="conflation_ms"):
        DeliveryOptions(conflation_ms=-1)

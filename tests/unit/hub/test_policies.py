"""Per-consumer queues: the disconnect and drop_oldest policies, conflation, and what a
loop that falls behind the ring costs its consumers."""

from __future__ import annotations

import asyncio

import pytest

from dataplane.ring import RingWriter
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
        await settle(hub)
        waiting.cancel()
        got: list[object] = []
        for i in range(30):
            hub.publish_batch([msg(1, "a", i)])
            await settle(hub)
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
        await settle(hub)
        assert numbers(consumer.poll(2)) == [0, 1]
        hub.publish_batch([msg(1, "a", i) for i in range(3, 15)])  # queue: 2..14, holds 5
        await settle(hub)
        events = consumer.poll()
        assert events[0] == GapNotice(1, 8, QUEUE_FULL)  # 2..9 dropped
        assert numbers(events[1:]) == [10, 11, 12, 13, 14]
        assert consumer.poll() == []
        hub.publish_batch([msg(1, "a", 15)])
        await settle(hub)
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
        await settle(hub)
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
        await settle(hub)
        hub.publish_batch([msg(1, "a", 0)])
        assert numbers(await asyncio.wait_for(reader, 1)) == [0]
        reader = asyncio.create_task(consumer.get())
        await settle(hub)
        consumer.cut(4008, "test", "slow")
        with pytest.raises(ConsumerClosed, match="test"):
            await asyncio.wait_for(reader, 1)

    asyncio.run(main())


def test_conflation_sends_the_first_update_then_the_latest_per_interval() -> None:
    async def main() -> None:
        hub = Hub()
        consumer = hub.subscribe(1, ["a", "b"], DeliveryOptions(conflation_ms=400))
        hub.publish_batch([msg(1, "a", 0)])
        await settle(hub)
        assert numbers(consumer.poll()) == [0]  # leading edge: at once
        hub.publish_batch([msg(1, "b", 1), msg(1, "a", 2), msg(1, "b", 3), msg(1, "a", 4)])
        hub.publish_gap(1, 2, "reconnect")  # gaps are never conflated nor delayed
        await settle(hub)
        assert consumer.poll() == [GapNotice(1, 2, "reconnect", 6, epoch=hub.epoch_hex)]
        hub.publish_batch([msg(1, "b", 5)])
        await asyncio.sleep(0.9)  # past the window (a loaded CI machine stalls for tens of ms)
        events = consumer.poll()
        assert numbers(events) == [4, 5]  # the latest of each, in sequence order
        assert [e.seq for e in events] == [5, 7]
        (stats,) = hub.consumer_stats()
        assert stats.conflated == 3  # b#1, a#2, b#3 replaced
        await asyncio.sleep(0.9)  # the window closed: the next update goes at once again
        hub.publish_batch([msg(1, "a", 6)])
        await settle(hub)
        assert numbers(consumer.poll()) == [6]
        consumer.close()

    asyncio.run(main())


def test_a_loop_that_falls_behind_the_ring_gives_its_consumers_a_gap_with_the_count() -> None:
    """A consumer loop more than `handoff_limit` messages behind the ring's writer skips to
    the newest record. The ring cannot say whose messages were skipped, so every consumer of
    the loop learns the whole count: drop_oldest consumers as a gateway_overload gap,
    disconnect consumers by a close with 1013 and the count in the reason. Never silence."""

    async def main() -> None:
        hub = Hub(handoff_limit=10)
        lossy = hub.subscribe(1, ["a"], DeliveryOptions(queue_size=100, overflow="drop_oldest"))
        strict = hub.subscribe(1, ["b"], DeliveryOptions(queue_size=100))
        # No await in between: the loop cannot read, as if it were stalled.
        hub.publish_batch([msg(1, "a", 0), msg(1, "b", 1)])
        hub.publish_batch([msg(1, "a", i) for i in range(2, 10)])
        hub.publish_batch([msg(1, "a", 10), msg(1, "a", 11), msg(1, "b", 12)])
        hub.publish_batch([msg(1, "a", 13)])  # 14 behind: more than 10
        await settle(hub)
        (follower,) = hub.followers()
        assert follower.dropped == 14
        hub.publish_batch([msg(1, "a", 14)])
        await settle(hub)
        events = lossy.poll()
        assert events[0] == GapNotice(1, 14, OVERLOAD)
        assert numbers(events[1:]) == [14]
        closed = strict.ended.result()
        assert (closed.code, closed.kind) == (1013, "overload")
        assert "14 messages behind" in closed.reason
        (stats,) = hub.consumer_stats()
        assert stats.overload == 28
        hub.close()

    asyncio.run(main())


def test_a_loop_lapped_by_the_ring_writer_gets_the_exact_count() -> None:
    """A loop stalled while the writer goes a whole ring round: the ring's own gap count
    (overwritten records) reaches the consumers, then what is still in the ring."""

    async def main() -> None:
        ring = RingWriter.create(None, 4096)
        hub = Hub(ring=ring)
        lossy = hub.subscribe(1, ["a"], DeliveryOptions(queue_size=1000, overflow="drop_oldest"))
        first = hub.publish_batch([msg(1, "a", i) for i in range(200)])  # ~48 B each
        assert ring.info().oldest_seq > first  # the oldest were overwritten
        await settle(hub)
        events = lossy.poll(1000)
        lost = ring.info().oldest_seq - first
        assert events[0] == GapNotice(1, lost, OVERLOAD)
        assert numbers(events[1:]) == list(range(lost, 200))
        hub.close()

    asyncio.run(main())


def test_delivery_options_are_checked() -> None:
    with pytest.raises(ValueError, match="queue_size"):
        DeliveryOptions(queue_size=0)
    with pytest.raises(ValueError, match="overflow"):
        DeliveryOptions(overflow="block")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="conflation_ms"):
        DeliveryOptions(conflation_ms=-1)


def test_a_read_the_router_fails_to_route_is_a_gap_for_its_sessions_consumers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug while a read is routed (injected: the first resolve raises) loses what it had
    not handed over: each consumer of a session in the read learns it as of an overrun (a
    gap of the read's count; a strict one is cut and resumes), others hear nothing, and the
    next read is routed (it was lost with a log line)."""
    from gateway.hub.core import _Router as Router

    real = Router._resolve
    broken = [RuntimeError("injected")]

    def resolve_once_broken(self: Router, sid: int, tid: int, name: str) -> object:
        if broken:
            raise broken.pop()
        return real(self, sid, tid, name)

    monkeypatch.setattr(Router, "_resolve", resolve_once_broken)

    async def main() -> None:
        hub = Hub(ring=RingWriter.create(None, 1 << 20))
        lossy = hub.subscribe(1, ["a"], DeliveryOptions(queue_size=100, overflow="drop_oldest"))
        strict = hub.subscribe(1, ["a"], DeliveryOptions(queue_size=100))
        other = hub.subscribe(2, ["a"], DeliveryOptions(queue_size=100, overflow="drop_oldest"))
        hub.publish_batch([msg(1, "a", i) for i in range(5)])
        await settle(hub)
        hub.publish_batch([msg(1, "a", 5), msg(2, "a", 0)])
        await settle(hub)
        events = lossy.poll()
        assert events[0] == GapNotice(1, 5, OVERLOAD)
        assert numbers(events[1:]) == [5]
        assert (strict.ended.result().code, strict.ended.result().kind) == (1013, "overload")
        assert numbers(other.poll()) == [0]
        hub.close()

    asyncio.run(main())

"""The router writes a waiting stream's events itself (no turn of the stream's task): in
order, nothing lost, one write per dispatch, and the task takes over whenever the reader
cannot take them now (paused, a backlog) or is busy."""

from __future__ import annotations

import asyncio

from gateway.hub import Delivery, DeliveryOptions, Hub
from gateway.hub.consumer import DIRECT_WRITE_MAX, Consumer
from gateway.hub.events import StreamEvent

from .conftest import msg, settle


class RecordingWriter:
    """A DirectWriter that keeps what it was given, batch by batch, and can be paused."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.paused = False

    def ready(self) -> bool:
        return not self.paused

    def write(self, events: list[StreamEvent]) -> None:
        self.batches.append(numbers(events))


def numbers(events: list[StreamEvent]) -> list[int]:
    return [int(e.payload.split(b"#")[1]) for e in events if isinstance(e, Delivery)]


async def reader(consumer: Consumer, got: list[int]) -> None:
    """The stream's task: what get() returns, in order."""
    while True:
        got += numbers(await consumer.get())


async def waiting_reader(hub: Hub) -> tuple[RecordingWriter, list[int], asyncio.Task[None]]:
    """One stream on topic "a" with a RecordingWriter, its task already waiting in get()."""
    consumer = hub.subscribe(1, ["a"], DeliveryOptions(queue_size=100_000))
    writer = RecordingWriter()
    consumer.direct_writer = writer
    from_task: list[int] = []
    task = asyncio.create_task(reader(consumer, from_task))
    await asyncio.sleep(0)  # the task waits in get()
    return writer, from_task, task


def test_a_waiting_reader_is_written_to_by_the_router_in_order() -> None:
    async def main() -> None:
        hub = Hub()
        writer, from_task, task = await waiting_reader(hub)
        for i in range(0, 50, 5):
            hub.publish_batch([msg(1, "a", j) for j in range(i, i + 5)])
            await settle(hub)
        assert from_task == []  # the task never had to run
        assert [n for batch in writer.batches for n in batch] == list(range(50))
        assert all(len(batch) == 5 for batch in writer.batches)  # one write per dispatch
        (stats,) = hub.consumer_stats()
        assert stats.delivered == 50
        task.cancel()
        hub.close()

    asyncio.run(main())


def test_the_task_takes_over_when_the_reader_is_paused_or_behind() -> None:
    async def main() -> None:
        hub = Hub()
        writer, from_task, task = await waiting_reader(hub)
        hub.publish_batch([msg(1, "a", 0)])
        await settle(hub)
        writer.paused = True  # the connection stopped taking writes
        hub.publish_batch([msg(1, "a", 1)])
        await settle(hub)
        writer.paused = False
        backlog = range(2, 2 + DIRECT_WRITE_MAX + 10)  # more than one direct write takes
        hub.publish_batch([msg(1, "a", i) for i in backlog])
        await settle(hub)
        hub.publish_batch([msg(1, "a", 5000)])
        await settle(hub)
        assert writer.batches[0] == [0] and writer.batches[-1] == [5000]
        assert from_task == [1, *backlog]
        assert len(writer.batches) == 2
        task.cancel()
        hub.close()

    asyncio.run(main())


def test_a_cut_reader_gets_no_direct_write() -> None:
    async def main() -> None:
        hub = Hub()
        slow = hub.subscribe(1, ["a"], DeliveryOptions(queue_size=3))
        fast = hub.subscribe(1, ["a"], DeliveryOptions(queue_size=100))
        writer = RecordingWriter()
        slow.direct_writer = writer
        slow_task = asyncio.create_task(slow.get())
        await asyncio.sleep(0)
        # 5 in one dispatch: its queue of 3 overflows before the router writes it
        hub.publish_batch([msg(1, "a", i) for i in range(5)])
        await settle(hub)
        assert slow.closed and writer.batches == []
        assert slow_task.done() and slow_task.exception() is not None
        assert numbers(fast.poll()) == list(range(5))
        hub.close()

    asyncio.run(main())

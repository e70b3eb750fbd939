"""RingFollower's two ways of being woken, side by side (differential): by the ring's writer
directly (no thread) and by the waiting thread. Whoever writes, from whichever thread, each
way delivers every record once, in order, and wakes its loop."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from dataplane.ring import Gap, RingEvent, RingMessage, RingWriter
from dataplane.shim import ring_notifier_is_direct
from gateway.hub.follower import RingFollower

MODES = [pytest.param(True, id="direct"), pytest.param(False, id="thread")]


class Collector:
    """A follower's on_wake as the hub's router does it: read, then rearm."""

    def __init__(self) -> None:
        self.follower: RingFollower | None = None
        self.seqs: list[int] = []
        self.payloads: list[bytes] = []
        self.gaps: list[Gap] = []
        self.arrived = asyncio.Event()

    def on_wake(self) -> None:
        assert self.follower is not None
        try:
            for event in self.follower.read():
                self._take(event)
        finally:
            self.follower.rearm()
        self.arrived.set()

    def _take(self, event: RingEvent) -> None:
        if isinstance(event, Gap):
            self.gaps.append(event)
            return
        assert isinstance(event, RingMessage)
        self.seqs.append(event.seq)
        self.payloads.append(bytes(event.payload))

    async def until(self, count: int, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while len(self.seqs) < count:
                self.arrived.clear()
                if len(self.seqs) >= count:
                    break
                await self.arrived.wait()


def follow(ring: RingWriter, direct: bool) -> tuple[RingFollower, Collector]:
    collector = Collector()
    follower = RingFollower(
        ring, asyncio.get_running_loop(), collector.on_wake, "test", limit=1 << 20, direct=direct
    )
    collector.follower = follower
    return follower, collector


@pytest.mark.parametrize("direct", MODES)
def test_each_way_says_what_it_is(ring: RingWriter, direct: bool) -> None:
    asyncio.run(_test_each_way_says_what_it_is(ring, direct))


async def _test_each_way_says_what_it_is(ring: RingWriter, direct: bool) -> None:
    follower, _ = follow(ring, direct)
    try:
        assert follower.direct is direct
        assert ring_notifier_is_direct(follower._notifier) is direct
    finally:
        follower.stop()


@pytest.mark.parametrize("direct", MODES)
def test_one_record_wakes_the_loop(ring: RingWriter, direct: bool) -> None:
    asyncio.run(_test_one_record_wakes_the_loop(ring, direct))


async def _test_one_record_wakes_the_loop(ring: RingWriter, direct: bool) -> None:
    """A lone record, long after the follower armed: the writer (or the thread) wakes it."""
    follower, got = follow(ring, direct)
    try:
        await asyncio.sleep(0.05)
        tid = ring.register_topic("1:t")
        seq = ring.write(1, tid, b"one")
        await got.until(1)
        assert got.seqs == [seq] and got.payloads == [b"one"]
        assert follower.wakeups >= 1
    finally:
        follower.stop()


def test_both_ways_deliver_the_same_records_from_a_writer_thread(ring: RingWriter) -> None:
    asyncio.run(_test_both_ways_deliver_the_same_records_from_a_writer_thread(ring))


async def _test_both_ways_deliver_the_same_records_from_a_writer_thread(ring: RingWriter) -> None:
    """The engine's case: a thread writes batches while the loop reads; the loop often rearms
    while records arrive (the rearm must see them itself). Both followers on one loop get
    every record once, in order, the same as each other."""
    direct, got_direct = follow(ring, True)
    thread, got_thread = follow(ring, False)
    tid = ring.register_topic("1:t")
    total, batch = 20_000, 7

    def write() -> None:
        for i in range(0, total, batch):
            n = min(batch, total - i)
            ring.write_columns(
                [1] * n, [tid] * n, [f"m{i + k}".encode() for k in range(n)], [0] * n
            )

    writer = threading.Thread(target=write)
    try:
        writer.start()
        await got_direct.until(total, 60)
        await got_thread.until(total, 60)
        woken = (direct.wakeups, thread.wakeups)
    finally:
        writer.join()
        direct.stop()
        thread.stop()
    expected = [f"m{i}".encode() for i in range(total)]
    assert got_direct.payloads == expected
    assert got_thread.payloads == expected
    assert got_direct.seqs == got_thread.seqs == list(range(got_direct.seqs[0], total + 1))
    assert got_direct.gaps == got_thread.gaps == []
    assert woken[0] >= 1 and woken[1] >= 1
    assert direct.dropped == thread.dropped == 0


@pytest.mark.parametrize("direct", MODES)
def test_records_written_before_the_rearm_wake_the_loop_again(
    ring: RingWriter, direct: bool
) -> None:
    asyncio.run(_test_records_written_before_the_rearm_wake_the_loop_again(ring, direct))


async def _test_records_written_before_the_rearm_wake_the_loop_again(
    ring: RingWriter, direct: bool
) -> None:
    """Records that come while the loop is reading (no notification then: one is pending)
    are found when it rearms."""
    tid = ring.register_topic("1:t")
    holder: dict[str, RingFollower] = {}
    reads: list[int] = []

    def on_wake() -> None:
        follower = holder["f"]
        events = follower.read()
        reads.extend(e.seq for e in events if isinstance(e, RingMessage))
        if len(reads) == 1:
            ring.write(1, tid, b"during the read")  # before the rearm
        follower.rearm()

    follower = RingFollower(
        ring, asyncio.get_running_loop(), on_wake, "t", limit=1000, direct=direct
    )
    holder["f"] = follower
    try:
        first = ring.write(1, tid, b"first")
        async with asyncio.timeout(10):
            while len(reads) < 2:
                await asyncio.sleep(0.001)
        assert reads == [first, first + 1]
    finally:
        follower.stop()


@pytest.mark.parametrize("direct", MODES)
def test_the_writers_close_wakes_the_loop_for_the_rest(ring_name: str, direct: bool) -> None:
    asyncio.run(_test_the_writers_close_wakes_the_loop_for_the_rest(ring_name, direct))


async def _test_the_writers_close_wakes_the_loop_for_the_rest(ring_name: str, direct: bool) -> None:
    """The writer closes right after its last records: the loop reads them all; a ring
    closed with nothing new wakes its loop too (it learns nothing more will come)."""
    ring = RingWriter.create(ring_name, 1 << 16)
    follower, got = follow(ring, direct)
    quiet = RingWriter.create(ring_name + "-quiet", 1 << 16)
    wakes: list[int] = []

    def on_quiet_wake() -> None:
        wakes.append(len(idle.read()))
        idle.rearm()

    idle = RingFollower(
        quiet, asyncio.get_running_loop(), on_quiet_wake, "t", limit=10, direct=direct
    )
    try:
        tid = ring.register_topic("1:t")
        ring.write_columns([1, 1], [tid, tid], [b"a", b"b"], [0, 0])
        ring.close()
        await got.until(2)
        assert got.payloads == [b"a", b"b"]
        await asyncio.sleep(0.02)
        quiet.close()
        async with asyncio.timeout(10):
            while not wakes:
                await asyncio.sleep(0.001)
        assert wakes[0] == 0
    finally:
        follower.stop()
        idle.stop()
        ring.close()
        quiet.close()


def test_a_stopped_direct_follower_is_not_written_to(ring: RingWriter) -> None:
    asyncio.run(_test_a_stopped_direct_follower_is_not_written_to(ring))


async def _test_a_stopped_direct_follower_is_not_written_to(ring: RingWriter) -> None:
    """After stop, the writer's writes touch neither the follower nor its (closed) eventfd."""
    follower, got = follow(ring, True)
    tid = ring.register_topic("1:t")
    ring.write(1, tid, b"x")
    await got.until(1)
    sent = follower.wakeups
    follower.stop()
    for _ in range(100):
        ring.write(1, tid, b"y")
    assert follower.wakeups == 0  # stopped: reports none
    assert sent >= 1


def test_direct_followers_come_and_go_while_a_thread_writes(ring: RingWriter) -> None:
    """Followers start and stop (registering and unregistering with the writer) while
    another thread writes all the time: no write touches a stopped follower (its eventfd is
    closed and its number soon reused), every live one gets what was written while it
    lived, in order."""
    asyncio.run(_come_and_go(ring))


async def _come_and_go(ring: RingWriter) -> None:
    tid = ring.register_topic("1:t")
    stop = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            while not stop.is_set():
                ring.write_columns([1, 1], [tid, tid], [b"x", b"y"], [0, 0])
        except BaseException as exc:  # reported below
            failures.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(100):
            follower, got = follow(ring, True)
            await got.until(4, 10)
            follower.stop()
            os.close(os.eventfd(0))  # the closed eventfd's number, taken and freed again
            seqs = got.seqs
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    finally:
        stop.set()
        writer.join()
    assert failures == []

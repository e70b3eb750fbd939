"""The engine never waits for a consumer: checked by what publish_batch calls, not by time.

The consumers' loop is stalled for real (its thread blocks inside a callback) while a
publisher thread runs publish_batch under a profiler that records every call. The test
then asserts that no call could wait: no lock, condition, event, queue, semaphore, sleep,
select or join, and socket writes only on non-blocking sockets (the loop's self-pipe
wake-up); and that the consumers' queues were not touched by the publisher at all. The
one lock allowed is the publishers' own (`Hub._publish_lock`: sessions on several loops
publish one at a time), which no consumer code takes: checked too.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
import threading
from types import CodeType, FrameType
from typing import Any

from dataplane.ring import RingWriter
from gateway.hub import Delivery, DeliveryOptions, GapNotice, Hub
from gateway.hub.events import OVERLOAD

from .conftest import msg

BLOCKING_FUNCTIONS = {("time", "sleep"), ("_thread", "allocate_lock")}
BLOCKING_C_MODULES = ("select", "selectors", "_queue")
BLOCKING_TYPES = ("lock", "condition", "semaphore", "queue", "event", "thread", "future")
BLOCKING_MODULES = ("threading.py", "queue.py", "asyncio/locks.py", "asyncio/queues.py")


class CallRecorder:
    """sys.setprofile hook: every C call (with its bound object) and Python function."""

    def __init__(self) -> None:
        self.c_calls: list[tuple[str, Any]] = []
        self.py_calls: list[CodeType] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_call":
            self.c_calls.append((getattr(arg, "__name__", "?"), getattr(arg, "__self__", None)))
        elif event == "call":
            self.py_calls.append(frame.f_code)

    def blocking_calls(self, allowed: tuple[object, ...] = ()) -> list[str]:
        found = []
        for name, owner in self.c_calls:
            if any(owner is ok for ok in allowed):
                continue
            kind = type(owner).__name__
            if isinstance(owner, socket.socket):
                if owner.gettimeout() != 0.0:
                    found.append(f"{kind}.{name} on a blocking socket")
            elif isinstance(owner, type(sys)):
                module = owner.__name__
                if (module, name) in BLOCKING_FUNCTIONS or module in BLOCKING_C_MODULES:
                    found.append(f"{module}.{name}")
            elif any(word in kind.lower() for word in BLOCKING_TYPES):
                found.append(f"{kind}.{name}")
        for code in self.py_calls:
            if code.co_filename.endswith(BLOCKING_MODULES):
                found.append(f"{code.co_filename}:{code.co_name}")
        return found


def test_publish_batch_never_waits_on_a_stalled_consumer(ring_name: str) -> None:
    hub = Hub(ring=RingWriter.create(ring_name, 1 << 22), handoff_limit=1000)
    subscribed = threading.Event()
    release = threading.Event()
    box: dict[str, Any] = {}

    def consumer_loop() -> None:
        async def main() -> None:
            box["lossy"] = hub.subscribe(
                1, ["a"], DeliveryOptions(queue_size=50, overflow="drop_oldest")
            )
            box["strict"] = hub.subscribe(1, ["a"], DeliveryOptions(queue_size=50))
            subscribed.set()
            release.wait(30)  # the loop is stalled: nothing on it can run
            for _ in range(5000):  # now its follower reads the ring
                if hub.caught_up():
                    break
                await asyncio.sleep(0.001)
            box["events"] = box["lossy"].poll(10_000)

        asyncio.run(main())

    thread = threading.Thread(target=consumer_loop)
    thread.start()
    assert subscribed.wait(10)
    recorder = CallRecorder()
    batches = [[msg(1, "a", i * 64 + j) for j in range(64)] for i in range(40)]
    sys.setprofile(recorder)
    try:
        for batch in batches:
            hub.publish_batch(batch)
    finally:
        sys.setprofile(None)
    try:
        assert recorder.c_calls, "the profiler saw nothing"
        assert recorder.blocking_calls(allowed=(hub._publish_lock,)) == []
        # The publisher never touched a consumer: their queues are still empty.
        assert len(box["lossy"].queue) == 0 and len(box["strict"].queue) == 0
        (follower,) = hub.followers()
        assert follower.pending == 40 * 64  # all of it waits in the ring
        assert follower.wakeups <= 1  # one wake-up pending at a time, never more
    finally:
        release.set()
        thread.join(10)
    events = box["events"]
    # 2560 behind, more than the limit of 1000: the loop skipped them, and the drop_oldest
    # consumer learns the exact number in a gap.
    assert follower.dropped == 40 * 64
    overload = [e for e in events if isinstance(e, GapNotice) and e.reason == OVERLOAD]
    assert overload == [GapNotice(1, follower.dropped, OVERLOAD)]
    assert [e for e in events if isinstance(e, Delivery)] == []
    assert box["strict"].closed  # the disconnect one was cut off, as it should be
    hub.close()


def test_publish_cost_does_not_depend_on_the_number_of_consumers() -> None:
    """The engine's work per batch is the same for 1 or 500 consumers on a loop: counted
    in calls made, not in time."""

    def calls_for(consumers: int) -> int:
        hub = Hub()
        counted = CallRecorder()
        stop = threading.Event()
        ready = threading.Event()

        def loop() -> None:
            async def main() -> None:
                for i in range(consumers):
                    hub.subscribe(1, [f"t{i % 10}"])
                ready.set()
                while not stop.is_set():
                    await asyncio.sleep(0.01)

            asyncio.run(main())

        thread = threading.Thread(target=loop)
        thread.start()
        ready.wait(10)
        batch = [msg(1, f"t{j % 10}", j) for j in range(64)]
        hub.publish_batch(batch)  # warm: topic ids, the first wake-up
        # A collection during the counted call would run other tests' finalizers (a ring
        # follower's release) in this thread and count their calls: none while counting.
        gc.collect()
        gc.disable()
        sys.setprofile(counted)
        try:
            hub.publish_batch(batch)
        finally:
            sys.setprofile(None)
            gc.enable()
            stop.set()
            thread.join(10)
            hub.close()
        return len(counted.c_calls) + len(counted.py_calls)

    assert calls_for(1) == calls_for(500)


def test_only_publishers_take_the_publish_lock() -> None:
    """The lock publish_* may wait on is used by the hub's publishing methods (and close,
    for the ring, and forget_session, for a deleted session's state) only: a consumer, a
    router or a subscription never holds it."""
    import inspect
    from pathlib import Path

    from gateway.hub import core

    users = [
        name
        for name, fn in inspect.getmembers(core.Hub, inspect.isfunction)
        if "_publish_lock" in inspect.getsource(fn)
    ]
    assert sorted(users) == [
        "__init__",
        "close",
        "forget_session",
        "publish_batch",
        "publish_gap",
        "ring_topic_id",
    ]
    package = Path(core.__file__).parent
    mentions = {p.name: p.read_text().count("_publish_lock") for p in package.glob("*.py")}
    assert {name: n for name, n in mentions.items() if n} == {"core.py": 6}

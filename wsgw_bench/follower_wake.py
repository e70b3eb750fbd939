"""A ring write -> the follower's loop code, in one process: the hop `wsgw bench feed`'s
/v1/stream and NATS paths pay between the ring record and the asyncio loop, for each way of
waking a `RingFollower` (gateway.hub.follower), alternated in one run.

    python -m wsgw_bench.follower_wake [--rates 100,1000,10000] [--seconds 2] [--rounds 3]

A writer thread writes records at the rate, stamped with CLOCK_REALTIME just before the
write: in C without the GIL (`bench_c_pace`, as the engines' C feeds write in their poll),
or with --python-writer from Python (`RingWriter.write`, which keeps the GIL, as the hub's
publish does); the follower's on_wake on the loop thread takes
time.time_ns() first thing and records the difference for each record it reads. Phases
alternate: direct (the writer writes the loop's eventfd) and thread (the notifier thread
sleeps in the ring's futex, then writes the eventfd). With --hub, the same through a `Hub`
and one consumer: the time to the code after `await consumer.get()`, where /v1/stream's
pump writes the socket (the follower's wake, the router, the consumer's queue and the
task's wake-up). With --hub --router-writes, the phases alternate /v1/stream's two ways of
writing instead (the follower woken directly in both): the router writes a waiting stream's
events at the end of its dispatch (`Consumer.direct_writer`, stamped in its write), or the
stream's task is woken and stamps after `await consumer.get()`. Prints p50/p99 per way and
rate, and the process's CPU. Figures are for reading, not asserting; the machine's load
moves them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import threading
import time
from collections.abc import Callable

from dataplane.ring import RingMessage, RingWriter, bench_c_pace
from gateway.hub import Hub
from gateway.hub import follower as follower_module
from gateway.hub.consumer import DeliveryOptions
from gateway.hub.events import Delivery, StreamEvent
from gateway.hub.follower import RingFollower


def percentile(ordered: list[int], p: float) -> float:
    if not ordered:
        return float("nan")
    return float(ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))])


async def phase(
    ring: RingWriter, tid: int, direct: bool, rate: float, seconds: float, c_writer: bool
) -> list[int]:
    """One phase: latencies in ns of the records written in `seconds` at `rate`."""
    lat: list[int] = []
    holder: dict[str, RingFollower] = {}

    def on_wake() -> None:
        now = time.time_ns()
        follower = holder["f"]
        for event in follower.read():
            if isinstance(event, RingMessage):
                lat.append(now - event.ts_ns)
        follower.rearm()

    loop = asyncio.get_running_loop()
    follower = RingFollower(ring, loop, on_wake, "bench", limit=1 << 20, direct=direct)
    holder["f"] = follower
    stop = threading.Event()
    await asyncio.sleep(0.2)
    if c_writer:
        count = int(rate * seconds)
        writer = threading.Thread(target=bench_c_pace, args=(ring, 64, count, rate), daemon=True)
        writer.start()
    else:
        writer = pace(rate, stop, lambda: ring.write(1, tid, b'{"p":1}', time.time_ns()))
    try:
        await paced_for(seconds, writer, stop)
    finally:
        follower.stop()
    return sorted(lat[int(len(lat) * 0.1) :])  # the first tenth: the phase's warm-up


def pace(rate: float, stop: threading.Event, write: Callable[[], object]) -> threading.Thread:
    def run() -> None:
        every = 1.0 / rate
        due = time.monotonic()
        while not stop.is_set():
            due += every
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            write()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def paced_for(seconds: float, writer: threading.Thread, stop: threading.Event) -> None:
    """Let a phase's writer run for `seconds`, then stop it (also when the phase fails) and
    give its last records 50 ms to arrive."""
    try:
        await asyncio.sleep(seconds)
    finally:
        stop.set()
        writer.join()
        await asyncio.sleep(0.05)


class StampingWriter:
    """A stream's direct writer that stamps what the router hands it (api.routes.stream's
    writes the socket there)."""

    def __init__(self, lat: list[int]) -> None:
        self.lat = lat

    def ready(self) -> bool:
        return True

    def write(self, events: list[StreamEvent]) -> None:
        now = time.time_ns()
        self.lat.extend(now - e.recv_ts_ns for e in events if type(e) is Delivery)


async def hub_phase(
    direct: bool, rate: float, seconds: float, router_writes: bool = False
) -> list[int]:
    """One phase through a hub: publish_batch on a thread -> `await consumer.get()` (or the
    router's direct write)."""
    follower_module.DIRECT_WAKE = direct  # the hub's router makes its follower with the default
    lat: list[int] = []
    with Hub(ring=RingWriter.create(None, 16 << 20)) as hub:
        consumer = hub.subscribe(1, ["t"], DeliveryOptions(queue_size=1_000_000))
        if router_writes:
            consumer.direct_writer = StampingWriter(lat)

        async def pump() -> None:
            while True:
                events = await consumer.get()
                now = time.time_ns()
                lat.extend(now - e.recv_ts_ns for e in events if type(e) is Delivery)

        task = asyncio.create_task(pump())
        stop = threading.Event()
        await asyncio.sleep(0.2)
        writer = pace(
            rate, stop, lambda: hub.publish_batch([(1, "t", b"{}", time.time_ns(), None)])
        )
        try:
            await paced_for(seconds, writer, stop)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    follower_module.DIRECT_WAKE = True
    return sorted(lat[int(len(lat) * 0.1) :])


async def run(
    rates: list[float],
    seconds: float,
    rounds: int,
    through_hub: bool,
    c_writer: bool,
    router_writes: bool = False,
) -> None:
    ring = RingWriter.create(None, 16 << 20)
    tid = ring.register_topic("1:bench")
    results: dict[tuple[float, bool], list[tuple[float, float]]] = {}
    cpu: dict[bool, float] = {True: 0.0, False: 0.0}
    try:
        for r in range(rounds):
            for rate in rates:
                order = (True, False) if r % 2 == 0 else (False, True)
                for direct in order:
                    t0 = os.times()
                    if router_writes:  # here `direct`: the router writes
                        lat = await hub_phase(True, rate, seconds, direct)
                    elif through_hub:
                        lat = await hub_phase(direct, rate, seconds)
                    else:
                        lat = await phase(ring, tid, direct, rate, seconds, c_writer)
                    t1 = os.times()
                    cpu[direct] += (t1.user - t0.user) + (t1.system - t0.system)
                    results.setdefault((rate, direct), []).append(
                        (percentile(lat, 50) / 1000, percentile(lat, 99) / 1000)
                    )
    finally:
        ring.close()
    for rate in rates:
        for direct in (True, False):
            got = results[(rate, direct)]
            p50 = statistics.median(p for p, _ in got)
            p99 = statistics.median(p for _, p in got)
            if router_writes:
                name = "router writes" if direct else "stream task woken"
            else:
                name = "direct (writer -> eventfd)" if direct else "notifier thread (futex)"
            where = "stream write" if router_writes else "consumer.get" if through_hub else "loop"
            print(
                f"{rate:>8.0f} msg/s {name:28} write -> {where} p50 {p50:7.1f} us p99 {p99:8.1f} us"
            )
    for direct in (True, False):
        print(f"process CPU, all {'direct' if direct else 'thread'} phases: {cpu[direct]:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="100,1000,10000")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hub", action="store_true", help="through a Hub and a consumer")
    parser.add_argument("--python-writer", action="store_true", help="write from Python")
    parser.add_argument(
        "--router-writes", action="store_true", help="with --hub: router writes against task"
    )
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    asyncio.run(
        run(rates, args.seconds, args.rounds, args.hub, not args.python_writer, args.router_writes)
    )


if __name__ == "__main__":
    main()

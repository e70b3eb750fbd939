"""Cost per message of a feed group on the engine's path (issue #19 target: under 1 us):
two legs, every message on both, Binance trade frames, one topic.

Run from the repository: PYTHONPATH=. python tests/unit/groups/bench_group_c.py [messages]
Prints ns per message (a message = its two arrivals: one wins, one is a duplicate):
- in C: what the engine pays per message (C identity, the group's lock and arbiter, staging
  the winner, for each of its two copies; the median of the offers C timed itself, so a
  preempted sample on a loaded machine does not count); the ring writes (one per 64
  arrivals, as per burst) are not in it;
- the same calls from Python (a ctypes crossing per arrival on top);
- the Python path: Python identity + CArbiter.offer_many per batch of 64 (FeedGroup.offer)."""

from __future__ import annotations

import sys
import time

from dataplane.arbiter import CArbiter, CGroup
from dataplane.ring import RingWriter
from gateway.dialects.identity import identity_for

TOPIC = "btcusdt@trade"
BURST = 64


def frames(messages: int) -> list[bytes]:
    body = (
        b'{"stream":"btcusdt@trade","data":{"e":"trade","E":1700000000000,"s":"BTCUSDT",'
        b'"t":%d,"p":"97000.10","q":"0.01000","T":1700000000000,"m":true,"M":true},'
        b'"sim_seq":%d,"sim_ts":1700000000000000000}'
    )
    return [body % (i, i) for i in range(1, messages + 1)]


def c_group(raws: list[bytes]) -> tuple[float, float]:
    ring = RingWriter.create(None, 1 << 26)
    try:
        topic_id = ring.register_topic("1073741825:" + TOPIC)
        group = CGroup(ring.handle, hub_id=1 << 30 | 1, gap_topic_id=1, dialect="binance", legs=2)
        t0 = time.perf_counter_ns()
        now = time.time_ns()
        for i, raw in enumerate(raws):
            group.offer_staged(0, topic_id, TOPIC, raw, now + i)
            group.offer_staged(1, topic_id, TOPIC, raw, now + i + 300_000)
            if i % (BURST // 2) == 0:
                group.flush()
        group.flush()
        wall = time.perf_counter_ns() - t0
        stats = group.stats()
        assert stats["delivered"] == len(raws), stats
        median = group.cost_p50()
        assert median is not None
        group.close()
        return 2 * median, wall / len(raws)
    finally:
        ring.close()


def python_path(raws: list[bytes]) -> float:
    identity = identity_for("binance")
    arbiter = CArbiter(2)
    t0 = time.perf_counter_ns()
    now = time.time_ns()
    for start in range(0, len(raws), BURST // 2):
        for leg, lag in ((0, 0), (1, 300_000)):
            arrivals = []
            for i, raw in enumerate(raws[start : start + BURST // 2]):
                found = identity(raw)
                arrivals.append((leg, 0, found.id, found.prev, raw, now + start + i + lag))  # type: ignore[union-attr]
            arbiter.offer_many(arrivals)
    wall = time.perf_counter_ns() - t0
    arbiter.close()
    return wall / len(raws)


def main() -> None:
    messages = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    raws = frames(messages)
    in_c, from_python = c_group(raws)
    print(f"C group, in C (engine's path): {in_c:8.0f} ns/message")
    print(f"C group, called from Python:   {from_python:8.0f} ns/message")
    print(f"Python path (identity + CArbiter.offer_many): {python_path(raws):8.0f} ns/message")


if __name__ == "__main__":
    main()

"""Limits: topics split over connections, requests paced by a token bucket (time injected)."""

from __future__ import annotations

import pytest

from gateway.dialects import (
    BinanceDialect,
    Limits,
    RequestQueue,
    SubscriptionPlanner,
    TokenBucket,
    make_dialect,
    plan_connections,
)


def test_token_bucket() -> None:
    bucket = TokenBucket(rate=4.0, capacity=1, now=0.0)
    assert bucket.take(0.0)
    assert not bucket.take(0.1)
    assert bucket.ready_at(0.1) == pytest.approx(0.25)
    assert bucket.take(0.25)
    bucket.consume(0.25)  # a pong that had to go: the bucket goes into debt
    assert bucket.ready_at(0.25) == pytest.approx(0.75)
    assert not bucket.take(0.6)
    assert bucket.take(0.75)
    # It never holds more than its capacity, however long it waits.
    assert bucket.take(100.0)
    assert not bucket.take(100.0)
    with pytest.raises(ValueError):
        TokenBucket(rate=0, capacity=1, now=0)


def release_times(limits: Limits, count: int) -> list[float]:
    """When each of count queued requests leaves, stepping the clock as poll_at says."""
    now = 0.0
    queue = RequestQueue(limits, now)
    queue.push([f"m{i}" for i in range(count)])
    times: list[float] = []
    while len(queue):
        times += [now] * len(queue.pop_due(now))
        at = queue.poll_at(now)
        assert at is not None or not len(queue)
        now = at if at is not None else now
    assert queue.sent == count
    return times


def max_in_window(times: list[float], window: float = 1.0) -> int:
    return max(sum(1 for t in times if start <= t <= start + window) for start in times)


def test_binance_pace_never_exceeds_five_per_second() -> None:
    limits = BinanceDialect.limits
    times = release_times(limits, 40)
    assert max_in_window(times) <= 5  # a closed one-second window, the strict reading
    assert times[-1] == pytest.approx(39 / 4.0)  # 80 % of the cap, steady


def test_bursty_limits() -> None:
    limits = Limits(requests_per_second=8.0, burst=10, headroom=1.0)
    times = release_times(limits, 30)
    assert times[:10] == [0.0] * 10  # the burst
    assert times[10] == pytest.approx(1 / 8.0)


def test_unlimited_queue() -> None:
    assert release_times(Limits(), 5) == [0.0] * 5
    queue = RequestQueue(Limits(), 0.0)
    assert queue.poll_at(0.0) is None


def test_keepalives_count_against_the_cap() -> None:
    queue = RequestQueue(BinanceDialect.limits, 0.0)
    queue.note_other(0.0)  # a keepalive just went out
    queue.push(["sub"])
    assert queue.pop_due(0.0) == []
    assert queue.poll_at(0.0) == pytest.approx(0.25)


def test_planner_fills_in_order_and_never_moves() -> None:
    planner = SubscriptionPlanner(1024)
    placed = planner.add(f"t{i}" for i in range(2500))
    assert {k: len(v) for k, v in placed.items()} == {0: 1024, 1: 1024, 2: 452}
    assert planner.add(["t0", "t1"]) == {}  # already placed
    removed = planner.remove(["t5", "t6", "t2000", "nope"])
    assert removed == {0: ["t5", "t6"], 1: ["t2000"]}
    assert planner.connection_of("t5") is None
    # New topics fill the holes, oldest connection first; no topic changes connection.
    before = {t: planner.connection_of(t) for t in (f"t{i}" for i in range(2500))}
    placed = planner.add(["n1", "n2", "n3", "n4"])
    assert placed == {0: ["n1", "n2"], 1: ["n3"], 2: ["n4"]}
    assert all(planner.connection_of(t) == c for t, c in before.items())
    assert planner.total == 2500 - 3 + 4
    assert all(len(c.topics) <= 1024 for c in planner.connections)


def test_uncapped_planner() -> None:
    planner = SubscriptionPlanner(None)
    assert list(planner.add(f"t{i}" for i in range(5000))) == [0]
    with pytest.raises(ValueError):
        SubscriptionPlanner(0)


def test_plan_connections_gives_each_its_dialect_and_queue() -> None:
    topics = [f"s{i}usdt@trade" for i in range(1500)]
    plans = plan_connections(BinanceDialect, topics, now=0.0)
    assert [len(p.topics) for p in plans] == [1024, 476]
    assert plans[0].dialect is not plans[1].dialect  # request ids are per connection
    assert [len(p.queue) for p in plans] == [6, 3]
    assert all(p.path == "/stream" for p in plans)
    okx = plan_connections(lambda: make_dialect("okx"), ["trades:BTC-USDT"], now=0.0)
    assert len(okx) == 1 and okx[0].path == "/ws/v5/public"

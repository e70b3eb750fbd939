"""The simulator's book model (gateway/simulator/books.py): deterministic per topic, never
crossed, windows a client can follow by applying and truncating, stale snapshots that are
the book as it was, and far sequence numbers rendered without replaying them."""

from __future__ import annotations

import time

import orjson
import pytest

from gateway.simulator import Fault, FaultError, SimConfig, Simulator
from gateway.simulator.books import JUMP, MAX_LEVELS, MIN_LEVELS, SimBook
from gateway.simulator.feeds import FEEDS, FUTURES

TS = 1_700_000_000_000_000_000


def book(dialect: str, topic: str) -> SimBook:
    found = FEEDS[dialect]().book_state(topic)
    assert found is not None
    return found


def test_the_same_topic_gives_the_same_updates_and_other_topics_others() -> None:
    a, b = FEEDS["okx"](), FEEDS["okx"]()
    first = [a.render("books:BTC-USDT", n, TS) for n in range(1, 60)]
    assert first == [b.render("books:BTC-USDT", n, TS) for n in range(1, 60)]
    # Asked again from the start, a state replays to the same messages.
    assert a.render("books:BTC-USDT", 7, TS) == first[6]
    other = [a.render("books:ETH-USDT", n, TS) for n in range(1, 60)]
    assert other != first


@pytest.mark.parametrize(
    ("dialect", "topic"),
    [("binance", "btcusdt@depth"), ("kraken", "book:BTC/USD"), ("bitstamp", "diff_order_book_x")],
)
def test_the_book_never_crosses_and_keeps_its_size(dialect: str, topic: str) -> None:
    sim = book(dialect, topic)
    last_us = 0
    for _ in range(3000):
        sim.step(TS)
        bids, asks = sim.top()
        assert MIN_LEVELS <= len(bids) <= MAX_LEVELS and MIN_LEVELS <= len(asks) <= MAX_LEVELS
        assert float(bids[0][0]) < float(asks[0][0])
        assert all(float(s) > 0 for _, s in bids + asks)
        assert sim.ts_us > last_us  # strictly increasing, even within one ns stamp
        last_us = sim.ts_us


@pytest.mark.parametrize(
    ("dialect", "topic", "depth"),
    [("kraken", "book:BTC/USD", 10), ("bybit", "orderbook.1.BTCUSDT", 1)],
)
def test_a_window_is_followed_by_applying_then_truncating(
    dialect: str, topic: str, depth: int
) -> None:
    sim = book(dialect, topic)
    bids: dict[float, tuple[str, str]] = {}
    asks: dict[float, tuple[str, str]] = {}
    top_bids, top_asks = sim.top(depth)
    bids.update((float(p), (p, s)) for p, s in top_bids)
    asks.update((float(p), (p, s)) for p, s in top_asks)
    for _ in range(2000):
        sim.step(TS)
        changed_bids, changed_asks = sim.changes
        for side, changes in ((bids, changed_bids), (asks, changed_asks)):
            for p, s in changes:
                if float(s) == 0:
                    side.pop(float(p), None)
                else:
                    side[float(p)] = (p, s)
        for side, best_first in ((bids, True), (asks, False)):
            for k in sorted(side, reverse=best_first)[depth:]:
                del side[k]
        ours = (
            [bids[k] for k in sorted(bids, reverse=True)],
            [asks[k] for k in sorted(asks)],
        )
        assert ours == sim.top(depth)


def test_a_stale_snapshot_is_the_book_as_it_was() -> None:
    sim, then = book("binance", "btcusdt@depth"), book("binance", "btcusdt@depth")
    sim.advance_to(300, TS)
    then.advance_to(260, TS)
    seq, ts_us, bids, asks = sim.stale(40)
    assert seq == 260 and ts_us == then.ts_us
    assert (bids, asks) == then.top()
    assert sim.seq == 300  # the live book is untouched
    assert sim.stale(10_000)[0] == 0  # no further back than the start


def test_far_sequence_numbers_are_rendered_at_once() -> None:
    feed = FEEDS["binance"]()
    start = time.perf_counter()
    for seq in (2**53, 2**40, 2**53 - 1):
        body = orjson.loads(feed.render("btcusdt@depth", seq, TS))
        assert body["data"]["U"] == body["data"]["u"] == body["sim_seq"] == seq
    assert time.perf_counter() - start < 30  # not 2**53 steps (a loose bound: shared CPUs)
    assert JUMP < 2**40


def test_futures_depth_updates_carry_pu_and_spot_ones_do_not() -> None:
    feed = FEEDS["binance"]()
    futures = orjson.loads(feed.render(FUTURES + "btcusdt@depth@100ms", 5, TS))
    spot = orjson.loads(feed.render("btcusdt@depth@100ms", 5, TS))
    assert futures["stream"] == spot["stream"] == "btcusdt@depth@100ms"
    assert (futures["data"]["U"], futures["data"]["u"], futures["data"]["pu"]) == (5, 5, 4)
    assert "pu" not in spot["data"]
    reply = feed.on_open("/fstream/stream?streams=btcusdt@depth@100ms", 3)
    assert reply.subscribe == [FUTURES + "btcusdt@depth@100ms"]
    listing = feed.on_message('{"method":"LIST_SUBSCRIPTIONS","id":1}', reply.subscribe, 3)
    assert orjson.loads(listing.send[0])["result"] == ["btcusdt@depth@100ms"]


def test_the_book_faults_parse_and_describe_themselves() -> None:
    assert Fault.parse("checksum").describe() == "checksum:after=0,count=1"
    assert Fault.parse("checksum:count=3").count == 3
    assert Fault.parse("stale:behind=10").behind == 10
    assert Fault.from_mapping({"kind": "stale", "behind": "7"}).describe() == (
        "stale:after=0,behind=7"
    )
    with pytest.raises(FaultError):
        Fault.parse("stale:behind=-1")


def test_a_stale_fault_is_the_simulators_and_waits_for_the_next_rest_snapshot() -> None:
    sim = Simulator(SimConfig(faults=(Fault("stale", behind=5), Fault("checksum"))))
    assert sim.stale_snapshots == [5]
    assert [f.kind for f in sim._every_faults] == ["checksum"]
    assert sim.inject(Fault("stale", behind=9), "next") == 1
    assert sim.stale_snapshots == [5, 9]
    sim.clear_faults()
    assert sim.stale_snapshots == []

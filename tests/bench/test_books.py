"""`books` in quick mode: every venue's stream runs through both contenders, which end with
the same book (the scenario raises otherwise), and the figures are finite and positive.
Never how fast: these machines are shared."""

from __future__ import annotations

import math

from wsgw_bench.books import SIM_STREAMS, bench_books, cryptofeed_stream, sim_stream, wsgw_stream
from wsgw_bench.core import SCENARIOS, BenchOptions


def test_books_is_a_registered_scenario() -> None:
    from wsgw_bench import cli

    cli._load_scenarios()
    assert SCENARIOS["books"].run is bench_books


def test_both_contenders_keep_the_same_book_of_every_venue() -> None:
    for name in SIM_STREAMS:
        snap, updates = sim_stream(name, 300)
        ours = wsgw_stream(name)(snap, updates)
        theirs = cryptofeed_stream(name)(snap, updates).to_dict()
        bids, asks = ours.book.snapshot()
        assert [(float(p), float(s)) for p, s in bids] == [
            (float(p), float(s)) for p, s in theirs["bid"].items()
        ], name
        assert [(float(p), float(s)) for p, s in asks] == [
            (float(p), float(s)) for p, s in theirs["ask"].items()
        ], name


def test_quick_run_measures_every_venue_and_the_book_read() -> None:
    results = bench_books(BenchOptions(quick=True, repetitions=1))
    metrics = {(m.metric, m.contender) for m in results}
    for name in SIM_STREAMS:
        assert {(f"{name} msg/s", "wsgw"), (f"{name} msg/s", "cryptofeed")} <= metrics
    assert ("binance msg/s", "wsgw-c") in metrics  # the venues done in C: a third contender
    assert ("book read, depth 100 (us)", "wsgw in-process") in metrics
    for m in results:
        assert m.samples and all(math.isfinite(v) and v > 0 for v in m.samples), m
    assert sum(m.reference for m in results) == len(SIM_STREAMS)


def test_books_api_is_a_registered_scenario() -> None:
    from wsgw_bench import cli
    from wsgw_bench.core import SCENARIOS

    cli._load_scenarios()
    assert "books_api" in SCENARIOS

"""`wsgw bench fleet --quick` for real (3 nodes on a throwaway PostgreSQL, 3 sessions, 2
kills), its figures' consistency and its clean-up; the percentile and the hand-over
bookkeeping on made-up figures."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from wsgw_bench.core import BenchOptions
from wsgw_bench.fleet import (
    BUSES,
    CONTENDERS,
    BusLatencyResult,
    RingTap,
    percentile,
    plan_for,
    run_bus_latency,
    run_fleet,
)

ROOT = Path(__file__).resolve().parents[2]


def leftovers() -> set[str]:
    shm = {p.name for p in Path("/dev/shm").glob("wsgw-b[fl]*")}
    tmp = {p.name for p in Path(tempfile.gettempdir()).glob("wsgw-fleet*")}
    return shm | tmp


def test_percentile_is_nearest_rank() -> None:
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([5], 99) == 5
    assert percentile([], 50) != percentile([], 50)  # nan


def test_hand_overs_and_duplicates_from_the_rings() -> None:
    tap = RingTap()
    try:
        tap.seen = {
            ("r1", 7): [(0.0, 1), (0.1, 2), (0.2, 3)],
            ("r2", 7): [(1.0, 9), (1.1, 10)],
            ("r3", 7): [(2.0, 10), (2.1, 14)],  # 10 twice: on r2 and r3
        }
        # 10 on both r2 and r3 (an overlap): the hand-over is r2's last to r3's next.
        assert tap.hand_overs(7) == [("r1", "r2", 3, 9), ("r2", "r3", 10, 14)]
        assert tap.duplicates(7) == [frozenset({"r2", "r3"})]
        assert tap.last("r2", 7) == (1.1, 10)
        assert tap.first_after("r3", 7, 2.05) == (2.1, 14)
    finally:
        tap.close()


def test_quick_run_fails_over_every_killed_session_and_cleans_up() -> None:
    before = leftovers()
    plan = plan_for(BenchOptions(quick=True))
    lines: list[str] = []
    result = run_fleet(plan, lines.append)
    print("\n".join([*lines, result.summary()]))
    assert len(result.moved_per_kill) == plan.kills
    assert all(moved >= 1 for moved in result.moved_per_kill)  # each kill hit an owner
    assert len(result.failover_s) == sum(result.moved_per_kill)
    assert all(0 < took < 10 * plan.lease_s for took in result.failover_s)
    assert len(result.lost_per_failover) == len(result.failover_s)
    assert result.duplicates == 0  # the fence: no sequence on two nodes' rings
    assert leftovers() <= before


def test_the_scenario_is_registered() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "bench", "--list"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    assert any(line.split()[:1] == ["fleet"] for line in listed.splitlines())


def test_the_bus_latency_summary_says_what_the_fleet_adds() -> None:
    figures = {"fleet node": [110.0, 120.0, 130.0], "single gateway": [100.0, 100.0, 900.0]}
    result = BusLatencyResult(rounds=1, window_s=1.0, load=[2.0, 3.5])
    result.latency_us = {c: dict.fromkeys(BUSES, figures[c]) for c in CONTENDERS}
    text = result.summary()
    assert "load 2.0-3.5" in text
    assert "fleet node p50 120 us p99 130 us (3 msgs); single gateway p50 100 us" in text
    assert text.count("the fleet adds +20 us p50") == len(BUSES)


def test_a_short_bus_latency_run_times_both_contenders_on_both_buses() -> None:
    before = leftovers()
    result = run_bus_latency(1, 1.0, 100.0, print)
    print(result.summary())
    for contender in CONTENDERS:
        for bus in BUSES:
            got = result.latency_us[contender][bus]
            assert len(got) > 10, (contender, bus)
            assert all(value > 0 for value in got)
    assert leftovers() <= before

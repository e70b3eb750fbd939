"""`failover`: its schedule and the reader's tally on made-up figures (no privileges), then a
short run for real: the group loses nothing and repeats nothing while its legs are killed in
turn, the single session beside it loses what its resets cost (announced by gaps), and
nothing is left behind."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace

import pytest

from gateway.lab import Lab
from tests.bench.leftovers import assert_run_left_nothing
from tests.conftest import requires_dpdk
from wsgw_bench.core import BenchOptions
from wsgw_bench.failover import (
    GROUP_CONTENDER,
    LEG_CONTENDERS,
    LINK,
    RESET,
    SINGLE_CONTENDER,
    Kill,
    Result,
    Tally,
    WireSampler,
    brought_by_a_leg,
    leg_silences,
    plan_for,
    run_failover,
    schedule,
)

QUICK = plan_for(BenchOptions(quick=True))


def test_plans_and_schedules() -> None:
    full = plan_for(BenchOptions())
    assert (full.duration, full.rate, full.kill_every) == (600.0, 10_000.0, 10.0)
    kills = schedule(full)
    assert len(kills) == 59  # 10 .. 590 s
    assert kills[:4] == [
        Kill(10.0, "A", RESET),
        Kill(20.0, "B", RESET),
        Kill(30.0, "A", LINK),
        Kill(40.0, "B", LINK),
    ]
    assert [k.at for k in schedule(QUICK)] == [5.0, 10.0, 15.0, 20.0]
    assert plan_for(BenchOptions(quick=True, rate=2000)).rate == 2000


def test_the_tally_counts_the_window_only() -> None:
    tally = Tally()
    tally.message("t", 1, None, 0)  # read before the start marks came: marked only
    tally.message("t", 2, None, 0)
    for seq in (3, 4, 6, 4, 5):  # 4 twice, 5 after 6
        tally.message("t", seq, 2, 1_000_000)
    tally.message("u", 1, 0, 2_000_000)
    report = tally.report({"t": 2, "u": 0}, {"t": 7, "u": 1})
    assert report["expected"] == 6  # t: 3..7, u: 1
    assert report["delivered"] == 5 and report["lost"] == 1  # t 7 never came
    assert report["duplicated"] == 1 and report["out_of_order"] == 1
    assert report["latency_p50_us"] == 1000.0 and report["latency_max_us"] == 2000.0


def test_a_loss_of_the_group_is_told_false_when_a_leg_brought_it() -> None:
    """3 and 4 lost by the group: leg A brought 3 (the hold gave up on it), no leg 4."""
    group, leg_a, leg_b = Tally(), Tally(), Tally()
    for seq in (1, 2, 5):
        group.message("t", seq, 0, 0)
    for seq in (1, 2, 3):
        leg_a.message("t", seq, 0, 0)
    for seq in (5,):
        leg_b.message("t", seq, 0, 0)
    assert group.report({"t": 0}, {"t": 5})["lost"] == 2
    assert brought_by_a_leg(group, [leg_a, leg_b], {"t": 0}, {"t": 5}) == 1


def test_a_leg_silence_is_told_the_simulators_or_on_the_way() -> None:
    """Silences past the hold (ms): 0-100 the copy after it was sent at 1 ms (it waited on
    its way: the leg's socket then held unacked bytes behind a zero window); 100-150 sent
    at 150 (the simulator sent nothing meanwhile); 150-400 inside a kill's window."""
    ms = 1_000_000
    leg = Tally()
    for seq, (received, sent) in enumerate(((0, 0), (100, 1), (150, 150), (400, 151)), 1):
        leg.stamp("t", seq, received * ms + 1, sent * ms + 1)
    silences = leg_silences(leg, 20 * ms)
    assert [(s[0] // ms, s[1] // ms) for s in silences] == [(0, 100), (100, 150), (150, 400)]
    wire = WireSampler.__new__(WireSampler)  # no sampling thread: made-up samples
    wire.legs, wire._stamps = {"10.0.0.1:5": "A"}, []
    wire.samples = [
        (t * ms, {"simulator": (t * ms, 0)}, {"10.0.0.1:5": (900 if t < 100 else 0, 4, 0)})
        for t in range(0, 400, 10)
    ]
    lines = wire.survey("A", silences, [(200 * ms, 500 * ms)])
    assert lines[0].startswith("leg A: 3 silences > hold: 1 at its kills; 1 the simulator")
    assert "1 copies sent and delayed" in lines[0]
    assert "sampled 1; its socket held unacked bytes in 1, a zero window in 1, " in lines[1]
    assert lines[1].endswith(
        "retransmissions in 0; waited for a CPU half the silence or more: simulator 0"
    )


def _result(group: dict[str, int], single: dict[str, int], lapped: int = 0) -> Result:
    clean = {"expected": 100, "delivered": 100, "lost": 0, "duplicated": 0}
    clean |= {"out_of_order": 0, "gaps": 0}
    return Result(
        QUICK,
        25.0,
        (),
        {GROUP_CONTENDER: clean | group, SINGLE_CONTENDER: clean | single},
        {},
        {},
        lapped,
    )


@pytest.mark.parametrize(
    ("group", "single", "problem"),
    [
        ({}, {"lost": 5, "gaps": 1}, None),
        ({"lost": 1}, {}, "the group: 1 lost"),
        ({"duplicated": 2}, {}, "the group: 2 duplicated"),
        ({"gaps": 1}, {}, "the group: 1 gaps"),
        ({}, {"lost": 5}, "the single session lost 5 without a gap record"),
    ],
)
def test_verdict(group: dict[str, int], single: dict[str, int], problem: str | None) -> None:
    result = _result(group, single)
    assert result.ok is (problem is None)
    if problem is not None:
        assert problem in result.problems()
    assert not replace(result, lapped=1).ok


# ---- the real thing ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def quick_run() -> Iterator[Result]:
    """One short run at 2k msg/s, kills at 5, 10, 15, 20 s. The group holds a hole 500 ms,
    not 20: on the shared 2-core test machine one leg lags the other by more than 20 ms at
    times, and a hole the lagging leg would fill expires before it does (a loss the bench
    reports with the default hold, not what this test is about)."""
    name = f"fot{os.getpid() % 10000}"[:10]
    try:
        yield run_failover(replace(QUICK, rate=2000.0, hold_ms=500), name, print)
    finally:
        assert not Lab(name, kernel_client=True).exists(), f"lab {name} left behind"


@requires_dpdk
@pytest.mark.dpdk
@pytest.mark.usefixtures("eal")
def test_the_group_loses_nothing_and_the_single_session_what_it_must(quick_run: Result) -> None:
    assert [k.kind for k in quick_run.kills] == [RESET, RESET, LINK, LINK]
    group = quick_run.contenders[GROUP_CONTENDER]
    single = quick_run.contenders[SINGLE_CONTENDER]
    assert quick_run.problems() == [], quick_run.as_dict()
    assert group["expected"] == single["expected"] > 20_000
    assert group["delivered"] == group["expected"]
    assert (group["lost"], group["duplicated"], group["gaps"]) == (0, 0, 0)
    # Reset with A, with B, and beside B's link cut (A's cut only stalls it): three
    # reconnects, each a gap, the messages sent meanwhile lost; nothing twice.
    assert single["gaps"] >= 3 and single["lost"] > 0
    assert single["duplicated"] == 0
    legs = quick_run.group["legs"]
    assert all(leg["won"] > 0 and leg["late"] > 0 for leg in legs)
    assert sum(leg["won"] for leg in legs) >= group["delivered"]
    assert all(quick_run.sessions[name]["reconnects"] >= 1 for name in ("A", "B", "S"))
    # Each leg's own stream (the group's tap) beside the group's: its send -> arrival.
    for name in LEG_CONTENDERS.values():
        leg = quick_run.contenders[name]
        assert leg["delivered"] > 0 and leg["duplicated"] == 0
        assert leg["arrival_p50_us"] is not None and leg["arrival_p99_us"] is not None


@requires_dpdk
@pytest.mark.dpdk
@pytest.mark.usefixtures("eal")
def test_the_run_leaves_nothing(quick_run: Result) -> None:
    assert_run_left_nothing(quick_run, "wsgw-failover")

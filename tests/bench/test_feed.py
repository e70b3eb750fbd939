"""`feed`: how a consumer reads the simulator's stamps and counts its windows (no
privileges), then the quick mode for real: every contender delivers every message of both
rates in order, with figures that make sense, and leaves nothing behind. Behaviour only:
no figure is compared with another."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.lab import Lab
from gateway.simulator.feeds import FEEDS
from tests.conftest import requires_dpdk
from wsgw_bench.core import BenchOptions
from wsgw_bench.feed import (
    CONTENDER_SPECS,
    CONTENDERS,
    DIRECT,
    DPDK_RING,
    DPDK_RING_LOWLAT,
    DPDK_RING_STEPPED_NAPS,
    DPDK_STREAM_THREAD,
    KERNEL_RING,
    Plan,
    Tally,
    Window,
    binance_topic,
    engine_rates,
    main,
    measurements,
    percentile,
    plan_for,
    plot,
    probe_lines,
    run_feed,
    sim_tail,
    summary,
)
from wsgw_bench.servers import nats_server_binary

QUICK = plan_for(BenchOptions(quick=True))
RING_CONTENDERS = (DPDK_RING, DPDK_RING_LOWLAT, KERNEL_RING)


# ---- the consumer's side ---------------------------------------------------------------------
def test_the_simulators_stamps_are_read_from_its_own_messages() -> None:
    feed = FEEDS["binance"]()
    raw = feed.render("btcusdt@trade", 42, 1_700_000_000_123_456_789)
    assert sim_tail(raw) == (42, 1_700_000_000_123_456_789)
    assert binance_topic(raw) == "btcusdt@trade"
    assert sim_tail(b'{"result":null,"id":1}') is None  # a control message
    assert binance_topic(b'{"type":"gap"}') == ""


def _message(topic: str, seq: int, sent: int) -> bytes:
    return FEEDS["binance"]().render(topic, seq, sent)


def test_a_window_counts_times_and_checks_the_sequence() -> None:
    ours, theirs = mp.Pipe()
    tally = Tally(ours)
    theirs.send(("window", 1_000, 2_000))
    deadline = time.monotonic() + 5
    while not tally.pending and time.monotonic() < deadline:
        time.sleep(0.01)
    tally.tick(500)  # the window is armed, not yet open
    tally.see(600, _message("a@trade", 1, 100), "a@trade")  # before it: sequence only
    tally.see(1_100, _message("a@trade", 2, 1_000), "a@trade", read_ts=1_050)
    tally.see(1_200, _message("a@trade", 5, 1_100), "a@trade")  # 3 and 4 lost
    tally.see(1_300, _message("a@trade", 4, 1_200), "a@trade")  # back: reordered
    tally.see(1_400, _message("b@trade", 9, 1_300), "b@trade")  # a topic's first
    tally.tick(1_900)
    assert not theirs.poll()
    tally.tick(2_001)
    kind, result = theirs.recv()
    assert kind == "result"
    assert (result["count"], result["lost"], result["reordered"]) == (4, 2, 1)
    assert sorted(memoryview(result["latency"]).cast("q")) == [100, 100, 100, 100]
    assert list(memoryview(result["to_read"]).cast("q")) == [50]
    assert list(memoryview(result["from_read"]).cast("q")) == [50]
    theirs.send(("stop",))
    deadline = time.monotonic() + 5
    while not tally.stopping and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tally.stopping


def test_percentiles_and_the_report_of_made_up_windows(tmp_path: Path) -> None:
    assert percentile([], 50) != percentile([], 50)  # NaN
    assert percentile(list(range(1000, 101_000, 1000)), 99) == 100.0

    def windows_of(name: str) -> list[Window]:
        split = [] if name == DIRECT else [400]  # only the ring has the session's stamp
        return [
            Window(rate, 1.0, int(rate), 0, 0, [1000, 2000, 3000], split, split, {"consumer": 1})
            for rate in QUICK.rates
        ]

    windows = {name: windows_of(name) for name in (DIRECT, DPDK_RING)}
    for w in windows[DPDK_RING]:
        w.cpu.update(gateway=5.0, simulator=2.0)
    for w in windows[DIRECT]:
        w.cpu["simulator"] = 2.0
    out = measurements(QUICK, windows)
    metrics = {(m.metric, m.contender): m for m in out}
    p50 = metrics[("100 msg/s: latency p50", DPDK_RING)]
    assert p50.median == 2.0
    assert metrics[("1k msg/s: latency p50", DIRECT)].reference
    assert ("100 msg/s: CPU gateway", DIRECT) not in metrics  # no gateway: no row
    assert ("100 msg/s: send -> session read p50", DIRECT) not in metrics
    assert metrics[("100 msg/s: send -> session read p50", DPDK_RING)].median == 0.4
    assert plot(QUICK, windows, tmp_path / "feed.png").stat().st_size > 0
    lines = summary(QUICK, windows)
    assert len(lines) == 2 * len(QUICK.rates)  # a contender and a rate each
    ring_100 = next(line for line in lines if "100 msg/s" in line and DPDK_RING in line)
    assert "1.00x" in ring_100 and "split 0 + 0 us" in ring_100  # 400 ns: 0 us


def test_the_probe_says_what_each_busy_thread_and_the_engine_did() -> None:
    before = {
        "threads": {"wsgw-engine-1/7": (0, 0, 0, 0), "wsgw-api/8": (1_000, 0, 1, 1)},
        "engine": {"c_polls": 100, "c_sleeps": 0, "c_sleep_ns": 0, "c_rx_bursts": 0},
    }
    after = {
        "threads": {
            "wsgw-engine-1/7": (200_000_000, 50_000_000, 10, 2_000),  # 10 % over 2 s
            "wsgw-api/8": (1_000, 0, 1, 1),  # idle: left out
        },
        "engine": {
            "c_polls": 200,
            "c_sleeps": 2_000,
            "c_sleep_ns": 2_000_000_000,
            "c_rx_wakes": 1_500,
            "c_rx_bursts": 1_000,
            "c_rx_frames": 3_000,
            "c_empty_polls": 64_000,
        },
    }
    rates = engine_rates(before, after, 2.0)
    assert rates["c_sleeps"] == 1_000 and rates["c_polls"] == 50
    thread, threads, engine = probe_lines(before, after, 2.0)
    assert threads == "  threads 2: wsgw-api, wsgw-engine-1"
    assert "wsgw-engine-1/7" in thread and "cpu  10.0%" in thread
    assert "runq wait   25.0 ms/s" in thread and "wakes     1000/s" in thread
    assert "naps 1000 (asked 1000 us each)" in engine and "(3.00 frames each)" in engine
    assert engine_rates({}, {}, 1.0) == {} and probe_lines({}, {}, 1.0) == []


def test_every_contender_is_known_by_its_name_and_a_wrong_one_is_refused() -> None:
    assert all(spec.name == name for name, spec in CONTENDER_SPECS.items())
    assert set(CONTENDERS) < set(CONTENDER_SPECS)  # the others: chosen by hand, not by CI
    assert not CONTENDER_SPECS[DPDK_STREAM_THREAD].profile.direct_wake
    assert all(CONTENDER_SPECS[name].profile.direct_wake for name in CONTENDERS)
    with pytest.raises(SystemExit):
        main(["--contenders", f"{DPDK_RING};no such contender"])


# ---- the real thing --------------------------------------------------------------------------
def _lab_name() -> str:
    return f"fq{os.getpid() % 100000}"[:10]


def _children() -> set[int]:
    """This process's children, but multiprocessing's resource tracker (started with the
    first spawned process, it lives as long as this one)."""
    me = os.getpid()
    pids = {int(p) for p in Path(f"/proc/{me}/task/{me}/children").read_text().split()}
    return {p for p in pids if b"resource_tracker" not in _cmdline(p)}


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes() or Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return b""


@pytest.fixture(scope="module")
def quick_run() -> Iterator[dict[str, list[Window]]]:
    """One quick run for the module's tests (about 50 s)."""
    name = _lab_name()
    children = _children()
    try:
        yield run_feed(QUICK, name)
    finally:
        assert not Lab(name, kernel_client=True).exists(), f"lab {name} left behind"
        assert not list(Path("/dev/shm").glob(f"wsgw-feed{os.getpid()}*"))
        left = {p: _cmdline(p) for p in _children() - children}
        assert not left, f"processes left behind: {left}"


@requires_dpdk
@pytest.mark.dpdk
def test_every_contender_delivers_every_message_in_order(
    quick_run: dict[str, list[Window]],
) -> None:
    nats = {name for name in CONTENDERS if CONTENDER_SPECS[name].sink == "nats"}
    expected = set(CONTENDERS) - (set() if nats_server_binary() else nats)
    assert set(quick_run) == expected
    for name, windows in quick_run.items():
        assert [w.rate for w in windows] == list(QUICK.rates), name
        for w in windows:
            assert (w.lost, w.reordered) == (0, 0), (name, w.rate)
            assert set(w.events.values()) == {0}, (name, w.rate, w.events)  # nothing to explain
            # the simulator's rate, give or take the window's edges
            assert 0.8 * w.rate <= w.count / w.seconds <= 1.2 * w.rate, (name, w.rate, w.count)
            assert len(w.latency) == w.count


@requires_dpdk
@pytest.mark.dpdk
def test_the_figures_make_sense(quick_run: dict[str, list[Window]]) -> None:
    for name, windows in quick_run.items():
        for w in windows:
            p50, p99, p999 = (percentile(w.latency, p) for p in (50, 99, 99.9))
            assert 0 < p50 <= p99 <= p999 < 10e6, (name, w.rate)  # one clock: positive
            assert set(w.cpu) == (
                {"consumer", "simulator"}
                if name == DIRECT
                else {"consumer", "gateway", "simulator"}
            )
            assert all(0 <= c <= 250 for c in w.cpu.values()), (name, w.cpu)
            if CONTENDER_SPECS[name].transport == "dpdk":  # the engine's counters came along
                assert w.engine["c_polls"] > 0 and w.engine["c_sleeps"] >= 0, name
                assert any("wsgw-engine" in line for line in w.probe), (name, w.probe)
            if name in RING_CONTENDERS:  # the ring record's stamp splits the path
                assert len(w.to_read) == len(w.from_read) == w.count
                assert w.to_read[0] > 0 and w.from_read[0] >= 0, name
            else:
                assert not w.to_read
    assert {m.contender for m in measurements(QUICK, quick_run)} == set(quick_run)


def test_quick_mode_is_short() -> None:
    """What `make test` pays for: rates x (warm-up + window) per contender, plus starts."""
    per_contender = len(QUICK.rates) * (QUICK.warmup + QUICK.measure)
    assert QUICK.rounds == 1 and per_contender <= 5


def test_make_bench_runs_it() -> None:
    from wsgw_bench.cli import _load_scenarios
    from wsgw_bench.core import SCENARIOS

    _load_scenarios()
    assert SCENARIOS["feed"].in_all and SCENARIOS["feed"].needs_root


@requires_dpdk
@pytest.mark.dpdk
def test_the_default_engine_naps_at_its_ceiling_and_the_stepped_contender_does_not() -> None:
    """The before/after pair of issue #16: the default engine (an af_packet port, so an RX
    fd) naps 1 ms at once, ended by the next frame; the "before" contender steps its naps
    up from 2 us after every burst. Both deliver every message in order."""
    plan = Plan((1000.0,), 0.5, 1.5, 1)
    name = _lab_name()
    try:
        windows = run_feed(plan, name, (DPDK_RING, DPDK_RING_STEPPED_NAPS), log=lambda _: None)
    finally:
        assert not Lab(name, kernel_client=True).exists(), f"lab {name} left behind"
    asked_us = {}
    for contender, (w,) in windows.items():
        assert (w.lost, w.reordered) == (0, 0) and w.count > 0, contender
        asked_us[contender] = w.engine["c_sleep_ns"] / w.engine["c_sleeps"] / 1e3
    assert asked_us[DPDK_RING] > 900  # the ceiling (1000 us), less naps cut by a deadline
    assert asked_us[DPDK_RING_STEPPED_NAPS] < 600  # 2, 4, 8 ... us after every burst

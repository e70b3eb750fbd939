"""The other scenarios of `wsgw bench` in --quick mode, one repetition: results are produced,
numbers are finite and positive, data checks passed (a scenario raises when its data is
wrong). Never how fast: these machines are shared."""

from __future__ import annotations

import math
import os

import pytest

from gateway.lab import Lab
from tests.conftest import requires_dpdk
from wsgw_bench.core import SCENARIOS, BenchOptions, Measurement
from wsgw_bench.report import write_results


def _load() -> None:
    from wsgw_bench import cli

    cli._load_scenarios()


def run(name: str, duration: float | None = None) -> list[Measurement]:
    _load()
    lab = f"s{name[:4]}{os.getpid() % 10000}"[:10]
    options = BenchOptions(quick=True, repetitions=1, lab_name=lab, duration=duration)
    try:
        return SCENARIOS[name].run(options)
    finally:
        assert not Lab(lab).exists(), f"lab {lab} left behind"


def sane(results: list[Measurement]) -> None:
    assert results
    for m in results:
        for value in m.samples:
            assert math.isfinite(value) and value >= 0, m


@pytest.mark.parametrize("name", ["micro", "topic", "ring"])
def test_cpu_scenarios(name: str) -> None:
    results = run(name)
    sane(results)
    if name == "ring":  # publish -> receipt p50/p99/p99.9, CPU: C and Python readers, policy, rate
        latency = [m for m in results if m.metric.startswith("publish->receipt")]
        assert len(latency) == 2 * 2 * 4 * 3 and all(m.samples for m in latency)


def test_fanout_sink_smoke() -> None:
    """One stream beside 1 and 10 other ones, the C sink off, uncapped and capped at 8:
    every delivery made (a missing one is noted), latency and the writer's time per record
    for each."""
    results = run("fanout_sink")
    sane(results)
    assert "fanout_sink" not in [n for n, s in SCENARIOS.items() if s.in_all]
    assert {m.contender for m in results} == {
        "/v1/stream, C sink, no cap",
        "/v1/stream, C sink, cap 8 (default)",
        "/v1/stream, router writes (sink off)",
    }
    assert len(results) == 2 * 4 * 3 and all(len(m.samples) == 1 for m in results)
    assert not [m.note for m in results if "missing" in m.note]


@pytest.mark.usefixtures("eal")
@requires_dpdk
@pytest.mark.dpdk
@pytest.mark.parametrize("name", ["stream", "fanout", "conformance", "floor", "books_rest"])
def test_lab_scenarios(name: str) -> None:
    results = run(name)
    sane(results)
    if name == "conformance":  # 1.* and 2.*, on both transports, graded strictly
        runs = [m for m in results if m.metric == "Autobahn cases run"]
        assert [m.samples for m in runs] == [[27.0], [27.0]], runs
        kinds = ("FAILED", "NON-STRICT", "UNIMPLEMENTED")
        bad = [m for m in results if m.metric in [f"Autobahn cases {k}" for k in kinds]]
        assert len(bad) == 2 * 3 and all(m.samples == [0.0] for m in bad), bad
    if name == "floor":  # every contender answered (testpmd only where dpdk-dev is installed)
        answered = [m for m in results if m.metric.endswith("p50") and m.samples]
        assert len(answered) >= 3, [(m.contender, m.note) for m in results]
    if name == "books_rest":  # every contender fetched the snapshot: p50 and p99 each
        assert len(results) == 3 * 2 and all(m.samples for m in results), results
    if name == "fanout":  # a stalled consumer: p99 without / with, ring and /v1/stream
        stall = [m for m in results if "stall" in m.metric]
        assert len(stall) == 3 * 2 and all(m.samples for m in stall)


@pytest.mark.usefixtures("eal")
@requires_dpdk
@pytest.mark.dpdk
def test_soak_smoke() -> None:
    """`soak` for 8 s (too short to judge memory: figures produced, data verified; slopes
    and growths may be negative)."""
    results = {m.metric: m for m in run("soak", duration=8.0)}
    assert "soak" not in [n for n, s in SCENARIOS.items() if s.in_all]  # not in `make bench`
    for m in results.values():
        assert len(m.samples) == 1 and math.isfinite(m.samples[0]), m
    assert 50 < results["RSS at the end"].samples[0] < 4096
    assert results["messages through the hub"].samples[0] > 100


def test_report_writes_table_json_and_plots(tmp_path) -> None:  # type: ignore[no-untyped-def]
    results = [
        Measurement("demo", "throughput", "a", "msg/s", True, [1.0, 2.0], True),
        Measurement("demo", "throughput", "b", "msg/s", True, [3.0, 4.0]),
        Measurement("demo", "RTT p50", "a", "us", False, [10.0]),
        Measurement("demo", "RTT p99", "a", "us", False, [30.0]),
    ]
    written = write_results(results, tmp_path, "wsgw bench demo")
    assert {p.name for p in written} == {"table.txt", "results.json", "demo.png"}
    assert (tmp_path / "demo.png").stat().st_size > 1000
    assert "wsgw bench demo" in (tmp_path / "table.txt").read_text()

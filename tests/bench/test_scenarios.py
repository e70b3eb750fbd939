"""`connect`, `rtt`, `ingest`, `udp-pps` in --quick mode, one repetition, in a lab of their
own: every contender has numbers or a note saying why not, and the numbers are sane (never
how fast: these machines are shared)."""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.lab import Lab
from tests.conftest import requires_dpdk
from wsgw_bench.core import BenchOptions, Measurement, report_run
from wsgw_bench.udp import DPDK, SENDMMSG, SENDTO, udp_pps
from wsgw_bench.ws_scenarios import connect, ingest, rtt

pytestmark = [
    requires_dpdk,
    pytest.mark.dpdk,
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc"),
    # The process's EAL as the other tests have it (no hugepages); the scenarios reuse it.
    pytest.mark.usefixtures("eal"),
]

WS_CONTENDERS = {"picows", "aiohttp", "websockets", "wsgw kernel", "wsgw DPDK"}
REFERENCE_LIBS = {"picows", "aiohttp", "websockets"}


def _lab_name(tag: str) -> str:
    return f"b{tag}{os.getpid() % 100000}"[:10]


def run(
    func: Callable[[BenchOptions], list[Measurement]], tag: str, mtu: int = 1500
) -> list[Measurement]:
    name = _lab_name(tag)
    try:
        return func(BenchOptions(quick=True, repetitions=1, lab_name=name, mtu=mtu))
    finally:
        lab = Lab(name, kernel_client=True)
        assert not lab.exists(), f"lab {name} left behind"
        lab.down()


def by_metric(results: list[Measurement]) -> dict[str, dict[str, Measurement]]:
    out: dict[str, dict[str, Measurement]] = {}
    for m in results:
        out.setdefault(m.metric, {})[m.contender] = m
    return out


def first_notes(results: list[Measurement]) -> dict[str, str]:
    """Each contender's notes: they sit on its first measurement."""
    notes: dict[str, str] = {}
    for m in results:
        notes.setdefault(m.contender, m.note)
    return notes


def check_present_or_skipped(results: list[Measurement], contenders: set[str]) -> None:
    notes = first_notes(results)
    for metric, group in by_metric(results).items():
        assert set(group) >= contenders, metric
        for name, m in group.items():
            if m.samples:
                assert all(math.isfinite(s) and s > 0 for s in m.samples), (metric, name)
            else:
                assert notes[name], f"{metric} / {name}: no sample and no note"
        refs = [m for m in group.values() if m.reference]
        assert len(refs) == 1, metric


def test_connect() -> None:
    results = run(connect, "c")
    groups = by_metric(results)
    assert set(groups) == {
        "TCP connect p50",
        "WS open p50",
        "WS open p99",
        "WSS open p50",
        "WSS open p99",
    }
    check_present_or_skipped([m for m in results if m.metric != "TCP connect p50"], WS_CONTENDERS)
    tcp = groups["TCP connect p50"]
    assert tcp["kernel socket"].samples
    assert tcp["kernel socket"].reference
    assert tcp["wsgw stack (DPDK)"].samples, tcp["wsgw stack (DPDK)"].note
    for lib in REFERENCE_LIBS:
        assert groups["WS open p50"][lib].samples, groups["WS open p50"][lib].note
    assert groups["WS open p50"]["picows"].reference
    assert "wss://" in results[0].note


def test_rtt() -> None:
    results = run(rtt, "r")
    groups = by_metric(results)
    assert len(groups) == 6
    check_present_or_skipped(results, WS_CONTENDERS)
    for size in ("64 B", "1 KiB"):
        for lib in REFERENCE_LIBS:
            p50 = groups[f"RTT p50 {size}"][lib]
            p99 = groups[f"RTT p99 {size}"][lib]
            p999 = groups[f"RTT p99.9 {size}"][lib]
            assert p50.samples, p50.note
            assert p50.median <= p99.median <= p999.median
        # the stack's own floor: C alone per round trip, its last echo checked
        floor = groups[f"RTT p50 {size}"]["wsgw stack, C loop (floor)"]
        assert floor.samples, floor.note


def test_ingest() -> None:
    results = run(ingest, "i")
    groups = by_metric(results)
    assert set(groups) == {"msg/s 100 B", "CPU/msg 100 B", "msg/s 1 KiB", "CPU/msg 1 KiB"}
    check_present_or_skipped(results, WS_CONTENDERS)
    notes = first_notes(results)
    for lib in REFERENCE_LIBS:
        assert groups["msg/s 100 B"][lib].samples, notes[lib]
        assert groups["CPU/msg 1 KiB"][lib].samples, notes[lib]
        assert "no gap, no duplicate" in notes[lib]
        assert "DATA ERROR" not in notes[lib]
    # The DPDK contenders say how the receive went: per poll, burst and ACK.
    for dpdk in ("wsgw DPDK (engine loop) (batch)", "wsgw DPDK (batch)"):
        if groups["msg/s 1 KiB"][dpdk].samples:
            assert "receive split:" in notes[dpdk], notes[dpdk]


def test_ingest_on_jumbo_links() -> None:
    """`--mtu 9000`: both links jumbo, the rows named with the MTU, the data of the kernel
    and the DPDK contenders checked alike."""
    results = run(ingest, "j", mtu=9000)
    groups = by_metric(results)
    assert set(groups) == {
        f"{metric} {size}, MTU 9000"
        for metric in ("msg/s", "CPU/msg")
        for size in ("100 B", "1 KiB")
    }
    notes = first_notes(results)
    for name in ("picows", "wsgw DPDK (batch)"):
        assert groups["msg/s 1 KiB, MTU 9000"][name].samples, notes[name]
        assert "no gap, no duplicate" in notes[name] and "DATA ERROR" not in notes[name]


def test_udp_pps() -> None:
    results = run(udp_pps, "u")
    groups = by_metric(results)
    assert set(groups) == {"TX pkt/s 18 B", "delivered 18 B", "TX pkt/s 64 B", "delivered 64 B"}
    check_present_or_skipped(results, {DPDK, SENDMMSG, SENDTO})
    notes = first_notes(results)
    for size in (18, 64):
        for name in (DPDK, SENDMMSG, SENDTO):
            tx = groups[f"TX pkt/s {size} B"][name]
            delivered = groups[f"delivered {size} B"][name]
            assert tx.samples, notes[name]
            assert 0 < delivered.median <= 100
    assert groups["TX pkt/s 18 B"][SENDMMSG].reference
    assert "178k" in notes[DPDK]
    assert "InCsumErrors 0" in notes[SENDMMSG]  # the C checksums verify at the peer


def test_a_long_scenario_reports_its_summary_and_writes_its_run(tmp_path: Path) -> None:
    lines: list[str] = []
    out = tmp_path / "out"
    report_run(BenchOptions(out=out), "demo", "a\nb", {"lost": 0}, lines.append)
    assert lines == ["a", "b", f"wrote {out / 'demo.json'}"]
    assert json.loads((out / "demo.json").read_text()) == {"lost": 0}
    report_run(BenchOptions(), "demo", "c", {}, lines.append)  # no --out: nothing written
    assert lines[-1] == "c"

"""`faultsoak`: the verdict's rules on made-up figures (no privileges), then the quick mode
for real (kills at 10 and 20 s, one 3 s link flap) with its verdict per transport, its
clean-up, and its clean-up on Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.lab import Lab
from tests.bench.leftovers import assert_run_left_nothing
from tests.conftest import requires_dpdk
from wsgw_bench.core import BenchOptions
from wsgw_bench.faultsoak import (
    KILL,
    LINK,
    FeedLedger,
    Ledger,
    Outage,
    Progress,
    Result,
    SessionResult,
    merge,
    plan_for,
    recovery,
    run_faultsoak,
    schedule,
)

QUICK = plan_for(BenchOptions(quick=True))


# ---- the rules ----------------------------------------------------------------------------------
def test_schedules() -> None:
    quick = [(f.kind, f.at, f.length) for f in schedule(QUICK)]
    assert quick == [(KILL, 10.0, 0.0), (LINK, 15.0, 3.0), (KILL, 20.0, 0.0)]
    full = schedule(plan_for(BenchOptions()))
    kills = [f.at for f in full if f.kind == KILL]
    flaps = [(f.at, f.length) for f in full if f.kind == LINK]
    assert kills == [20.0 * k for k in range(1, 90)]  # 20 .. 1780 s
    assert flaps == [(120.0 * k, 10.0) for k in range(1, 15)]  # 120 .. 1680 s, 10 s each


def test_overlapping_faults_are_one_outage() -> None:
    done = [(LINK, 120.0, 130.2), (KILL, 120.1, 121.3), (KILL, 140.0, 141.1)]
    assert merge(done) == [Outage((LINK, KILL), 120.0, 130.2), Outage((KILL,), 140.0, 141.1)]


def test_ledger_tells_announced_from_silent_breaks() -> None:
    feed = FeedLedger()
    for seq in (1, 2, 3):
        feed.message("t", seq)
    feed.gap()
    feed.message("t", 7)  # a jump after a gap: 3 announced losses
    feed.gap()
    feed.message("t", 1)  # back to 1 after a gap: a restarted feed
    feed.message("t", 5)  # a jump with no gap: silent loss
    feed.message("u", 9)  # a topic's first message is no break
    assert (feed.messages, feed.gaps, feed.lost, feed.restarts) == (7, 2, 3, 1)
    assert (feed.silent, feed.first_silent) == (1, "t: 5 after 1")


def test_a_lapped_reader_announces_the_break_of_every_session() -> None:
    ledger = Ledger()
    ledger.feed(1).message("t", 1)
    ledger.feed(2).message("t", 1)
    ledger.lap(500)
    ledger.feed(1).message("t", 300)
    ledger.feed(2).message("t", 400)
    report = ledger.report()
    assert report["lapped"] == 500
    assert [report["sessions"][s]["silent"] for s in (1, 2)] == [0, 0]


def test_recovery_is_from_the_outage_end_to_the_next_message() -> None:
    samples = [
        Progress(9.9, True, 100),
        Progress(10.0, False, 100),  # the outage ends here
        Progress(10.5, True, 100),  # connected, nothing yet
        Progress(11.2, True, 130),
    ]
    assert recovery(samples, 10.0, 20.0) == pytest.approx(1.2)
    assert recovery(samples, 10.0, 11.0) is None  # not before the next outage
    assert recovery(samples, 11.2, 20.0) is None  # nothing after the last sample


def _session(**changes: object) -> SessionResult:
    ok = SessionResult(
        transport="kernel",
        state="connected",
        reason="streaming: subscribed 4 topics",
        connects=3,
        reconnects=2,
        connect_failures=1,
        gaps=2,
        sequence_gaps=0,
        messages=1000,
        delivered=1000,
        gaps_seen=2,
        lost=0,
        restarts=8,
        silent=0,
        first_silent="",
        recoveries=(1.0, 2.5),
        late_recoveries=0,
        connected_share=0.9,
        gap_reasons=(("reconnect: close code 1006", 2),),
    )
    return replace(ok, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({}, None),
        ({"state": "failed", "reason": "failed: gave up"}, "kernel session failed at the end"),
        ({"recoveries": (1.0, None)}, "delivered nothing after the last outage"),
        ({"silent": 1, "first_silent": "t: 5 after 1"}, "1 sequence breaks without a gap"),
        ({"gaps_seen": 1}, "counted 2 gaps, the reader saw 1"),
        ({"delivered": 0}, "the reader got no message"),
    ],
)
def test_verdict(changes: dict[str, object], problem: str | None) -> None:
    session = _session(**changes)
    result = Result(QUICK, 30.0, (), (), (session,), lapped=0)
    assert result.ok is (problem is None)
    if problem is not None:
        assert any(problem in p for p in result.problems()), result.problems()


def test_the_result_is_plain_json_also_when_nothing_recovered() -> None:
    result = Result(QUICK, 30.0, (), (), (_session(recoveries=(None,)),), lapped=0)
    assert json.loads(json.dumps(result.as_dict(), allow_nan=False))["ok"] is False


def test_a_lapped_reader_fails_the_verdict() -> None:
    assert not Result(QUICK, 30.0, (), (), (_session(),), lapped=1).ok


# ---- the real thing ------------------------------------------------------------------------
def _lab_name(tag: str) -> str:
    return f"fs{tag}{os.getpid() % 10000}"[:10]


@pytest.fixture(scope="module")
def quick_run() -> Iterator[Result]:
    """One quick run for the module's tests (it takes about 35 s)."""
    name = _lab_name("q")
    try:
        yield run_faultsoak(QUICK, name, print)
    finally:
        assert not Lab(name, kernel_client=True).exists(), f"lab {name} left behind"


def _check_session(result: Result, transport: str) -> None:
    session = result.session(transport)
    assert session.problems() == [], result.as_dict()
    kills = sum(1 for kind, _, _ in result.faults if kind == KILL)
    assert session.reconnects >= kills  # every kill cost a connection
    assert session.gaps >= session.reconnects and session.gaps == session.gaps_seen
    assert session.restarts >= 1  # the reader saw the new simulator's sequence
    assert all(r is not None for r in session.recoveries)  # back after every outage


@requires_dpdk
@pytest.mark.dpdk
@pytest.mark.usefixtures("eal")
def test_quick_run_made_its_faults_and_left_nothing(quick_run: Result) -> None:
    kinds = [kind for kind, _, _ in quick_run.faults]
    assert kinds.count(KILL) == 2 and kinds.count(LINK) == 1
    assert len(quick_run.outages) == 3
    assert_run_left_nothing(quick_run, "wsgw-faultsoak")


@requires_dpdk
@pytest.mark.dpdk
@pytest.mark.usefixtures("eal")
def test_kernel_session_comes_back_and_announces_every_gap(quick_run: Result) -> None:
    _check_session(quick_run, "kernel")


@requires_dpdk
@pytest.mark.dpdk
@pytest.mark.usefixtures("eal")
def test_dpdk_session_comes_back_and_announces_every_gap(quick_run: Result) -> None:
    _check_session(quick_run, "dpdk")


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


@requires_dpdk
@pytest.mark.dpdk
def test_ctrl_c_removes_the_lab_and_every_process() -> None:
    """`wsgw bench faultsoak --quick` interrupted once its faults run: the lab, the
    simulator and the ring reader are gone when it exits."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from gateway.cli import app; app()",
            "bench",
            "faultsoak",
            "--quick",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    lab: Lab | None = None
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        for line in proc.stdout:
            if "kill every" in line:  # "... msg/s per session, lab NAME": faults begin
                lab = Lab(line.split(", lab ")[1].strip(), kernel_client=True)
                break
            if time.monotonic() > deadline:
                break
        assert lab is not None and lab.exists(), "the run did not get to its faults"
        made = _children(proc.pid)
        assert made, "no simulator or reader process"
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
        assert not lab.exists()
        # multiprocessing's resource tracker leaves when its pipe closes: a moment later
        deadline = time.monotonic() + 10
        while (left := [p for p in made if Path(f"/proc/{p}").exists()]) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.1)
        assert not left
    finally:
        if proc.poll() is None:  # failed before: let it clean up what it made, then stop it
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if lab is not None:
            lab.down()

"""Sessions end to end on the DPDK transport: the feed simulator runs on the kernel in the
lab's peer namespace; the session reaches it through a real DPDK port, wsgw's own TCP/IP
stack and the engine thread. Every message in order, a dropped connection survived with a
reconnect, a resubscribe and one gap, an oversized message refused with 1009."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from dataplane.engine import Engine
from gateway.dialects import make_dialect
from gateway.lab import Lab
from gateway.sessions import HeartbeatConfig, RecordingSink, State, UpstreamSession
from gateway.simulator.process import running_simulator, send_command
from tests.conftest import requires_dpdk
from tests.integration.test_sessions_helpers import (
    EventLog,
    check_order,
    counts,
    fast_config,
    run,
    until,
)
from tests.integration.test_simulator_helpers import TOPICS

pytestmark = [requires_dpdk, pytest.mark.dpdk]
SIM_PORT = 9400


@pytest.fixture
def engine(lab_engine) -> tuple[Engine, Lab]:  # type: ignore[no-untyped-def]
    return lab_engine(time_wait=0.2)  # type: ignore[no-any-return]


@pytest.fixture
def simulator(engine: tuple[Engine, Lab]) -> Iterator[subprocess.Popen[str]]:
    _, lab = engine
    with running_simulator(lab, SIM_PORT, 200, stdin=True) as proc:
        yield proc


def dpdk_config(lab: Lab, dialect: str, **overrides: Any) -> Any:
    url = f"ws://{lab.peer_ip}:{SIM_PORT}/{dialect}{make_dialect(dialect).path}"
    return fast_config(url, dialect, transport="dpdk", **overrides)


def start(
    engine: Engine, config: Any, topics: list[str]
) -> tuple[UpstreamSession, RecordingSink, EventLog]:
    sink, events = RecordingSink(), EventLog()
    session = UpstreamSession(1, config, sink, on_event=events.append, topics=topics, engine=engine)
    session.start()
    return session, sink, events


@pytest.mark.parametrize("dialect", sorted(TOPICS))
def test_every_message_in_order_over_dpdk(
    engine: tuple[Engine, Lab], simulator: Any, dialect: str
) -> None:
    eng, lab = engine

    async def scenario() -> None:
        session, sink, _ = start(eng, dpdk_config(lab, dialect), TOPICS[dialect])
        try:
            await until(lambda: counts(sink, TOPICS[dialect])(40), timeout=20)
        finally:
            await session.stop()
        assert check_order(sink, TOPICS[dialect]) == 0
        assert session.state is State.STOPPED

    run(scenario(), timeout=40)


def test_drop_reconnects_resubscribes_and_reports_one_gap_over_dpdk(
    engine: tuple[Engine, Lab], simulator: Any
) -> None:
    eng, lab = engine
    topics = TOPICS["binance"]

    async def scenario() -> None:
        session, sink, events = start(eng, dpdk_config(lab, "binance"), topics)
        try:
            await until(lambda: counts(sink, topics)(20), timeout=20)
            send_command(simulator, "fault drop after=10 target=all")
            await until(
                lambda: session.counters.connects == 2 and session.state is State.STREAMING,
                timeout=20,
            )
            resumed = {t: len(sink.messages(t)) for t in topics}
            await until(
                lambda: all(len(sink.messages(t)) > resumed[t] + 20 for t in topics), timeout=20
            )
        finally:
            await session.stop()
        assert check_order(sink, topics) == 1
        assert len(sink.gaps()) == 1
        assert (session.counters.reconnects, session.counters.gaps) == (1, 1)
        assert len(events.of("gap")) == 1

    run(scenario(), timeout=60)


def test_a_stalled_feed_is_detected_over_dpdk(engine: tuple[Engine, Lab], simulator: Any) -> None:
    eng, lab = engine
    topics = ["btcusdt@trade"]

    async def scenario() -> None:
        hb = HeartbeatConfig(ping_interval_s=0.1, ping_timeout_s=3.0, dead_feed_timeout_s=0.5)
        session, sink, events = start(eng, dpdk_config(lab, "binance", heartbeat=hb), topics)
        try:
            await until(lambda: len(sink.messages()) >= 10, timeout=20)
            send_command(simulator, "fault stall after=5 seconds=4 target=all")
            await until(
                lambda: session.counters.connects == 2 and session.state is State.STREAMING,
                timeout=10,
            )
        finally:
            await session.stop()
        (backoff,) = events.entered("backoff")
        assert "no data" in backoff.reason

    run(scenario(), timeout=40)


@pytest.mark.parametrize(
    ("fault", "code"),
    [
        ("malformed after=2 variant=rsv", 1002),
        ("malformed after=2 variant=utf8", 1007),
        ("opcode after=2", 1002),
        ("oversized after=1", 1009),  # over the session's max_message_size (64 KiB)
    ],
)
def test_protocol_violations_close_with_the_right_code_over_dpdk(
    engine: tuple[Engine, Lab], simulator: Any, fault: str, code: int
) -> None:
    eng, lab = engine
    topics = TOPICS["binance"]

    async def scenario() -> None:
        config = dpdk_config(lab, "binance", max_message_size=1 << 16)
        session, sink, events = start(eng, config, topics)
        try:
            await until(lambda: counts(sink, topics)(5), timeout=20)
            kind, _, extra = fault.partition(" ")
            send_command(simulator, f"fault {kind} target=all {extra}")
            await until(lambda: session.counters.reconnects >= 1, timeout=20)
        finally:
            await session.stop()
        assert events.entered("backoff")[0].details["close_code"] == code

    run(scenario(), timeout=60)

"""Autobahn TestSuite over the DPDK transport: kosoku's fuzzingserver runs on the kernel in
the lab's peer namespace, our client reaches it through a real DPDK port and wsgw's own
TCP/IP stack (cases 1-7, 9, 10, 12, 13, as for the kernel transport)."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from dataplane.engine import Engine
from dataplane.transports.dpdk import connect_dpdk
from gateway.bench.conformance import CASES, SLOW, run_suite
from gateway.lab import Lab
from tests.conftest import requires_dpdk

pytest.importorskip("kosoku")
pytestmark = [requires_dpdk, pytest.mark.dpdk, pytest.mark.slow]


@pytest.fixture
def engine(lab_engine) -> tuple[Engine, Lab]:  # type: ignore[no-untyped-def]
    return lab_engine(time_wait=0.2, recv_buffer=4 << 20, send_buffer=4 << 20)  # type: ignore[no-any-return]


@pytest.mark.timeout(1800)
def test_autobahn_client_cases_pass_over_dpdk(engine: tuple[Engine, Lab]) -> None:
    eng, lab = engine
    full = os.environ.get("WSGW_AUTOBAHN_FULL") == "1"

    def connect(url: str, **options: object) -> object:
        return connect_dpdk(url, engine=eng, **options)

    results = run_suite(lab, CASES, [] if full else SLOW, lab.peer_ip, connect)
    assert len(results) == (517 if full else 361), len(results)
    verdicts = Counter((r[1], r[2]) for r in results)
    print(f"Autobahn over DPDK: {len(results)} cases, verdicts {dict(verdicts)}")
    failed = [f"{r[0]}: {r[1]}/{r[2]} {r[4]} {r[5]}" for r in results if not r[3]]
    assert not failed, f"{len(failed)} of {len(results)} failed:\n" + "\n".join(failed)

"""Autobahn TestSuite over the DPDK transport: kosoku's fuzzingserver runs on the kernel in
the lab's peer namespace (on a free port), our client reaches it through a real DPDK port
and wsgw's own TCP/IP stack, graded as on the kernel transport (no FAILED, NON-STRICT or
UNIMPLEMENTED case).

The WebSocket code above the transport is the kernel transport's (test_autobahn_kernel.py),
which runs the wide sample (`wsgw_bench.conformance.SAMPLE`, 387 cases). So that `make test`
stays short, this one runs `DPDK_SAMPLE` (311 cases): every case of 1-7, 9, 10 (9.x: 16 MiB
messages through the stack) and the five smaller sizes of 12.1 and 13.1 (compressed JSON
both ways); the rest of 12.x/13.x is the same bytes in other data sets and took 58 of the
SAMPLE's 86 s here. WSGW_AUTOBAHN_FULL=1 runs all 517; `wsgw bench conformance` (make bench)
always does, on both transports.

Run time (2 CPUs, quiet): the SAMPLE 86 s, all 517 15.8 min (loaded). Every case OK but the
3 INFORMATIONAL ones (7.1.6, 7.13.1, 7.13.2).
"""

from __future__ import annotations

import os

import pytest

from dataplane.engine import Engine
from dataplane.transports.dpdk import connect_dpdk
from gateway.lab import Lab
from tests.conftest import requires_dpdk
from wsgw_bench.conformance import ALL_CASES, CASES, DPDK_SAMPLE, DPDK_SAMPLE_CASES, run_suite

pytest.importorskip("kosoku")
pytestmark = [requires_dpdk, pytest.mark.dpdk, pytest.mark.slow]


@pytest.fixture
def engine(lab_engine) -> tuple[Engine, Lab]:  # type: ignore[no-untyped-def]
    return lab_engine(time_wait=0.2, recv_buffer=4 << 20, send_buffer=4 << 20)  # type: ignore[no-any-return]


@pytest.mark.timeout(3600)
def test_autobahn_client_cases_pass_strictly_over_dpdk(engine: tuple[Engine, Lab]) -> None:
    eng, lab = engine
    full = os.environ.get("WSGW_AUTOBAHN_FULL") == "1"

    def connect(url: str, **options: object) -> object:
        return connect_dpdk(url, engine=eng, **options)

    grade = run_suite(lab, CASES if full else DPDK_SAMPLE, lab.peer_ip, connect)
    print(f"Autobahn over DPDK: {len(grade.verdicts)} cases, {grade.summary()}")
    assert len(grade.verdicts) == (ALL_CASES if full else DPDK_SAMPLE_CASES), grade.summary()
    assert grade.conformant, grade.problems()

"""Autobahn TestSuite, client side, on the kernel transport: kosoku's fuzzingserver (the
Autobahn case files on Python 3, in a process of its own on a free port) drives our client.

Graded by `wsgw_bench.conformance.Grade`: no case FAILED, NON-STRICT or UNIMPLEMENTED
(INFORMATIONAL is what the RFC leaves open, and is only printed).

`make test` runs a wide sample (`wsgw_bench.conformance.SAMPLE`, 387 cases:
every case of 1-7, 9, 10 and the smaller sizes of every permessage-deflate group). The whole
suite (517 cases, with 12.*.6-18 and 13.*.6-18 that echo 1000 messages of up to 128 KiB
each, compressed both ways) took 246 s of the suite's 22 min on 2 CPUs; it runs in `wsgw
bench conformance` (make bench), or here with WSGW_AUTOBAHN_FULL=1. Either way in three
parts at once (1-10, 12, 13), each with its server and client processes.
"""

from __future__ import annotations

import os

import pytest

from wsgw_bench.conformance import (
    ALL_CASES,
    KERNEL_SAMPLE_SHARDS,
    KERNEL_SHARDS,
    SAMPLE_CASES,
    run_kernel_suite,
)

pytest.importorskip("kosoku")


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_autobahn_client_cases_pass_strictly() -> None:
    full = os.environ.get("WSGW_AUTOBAHN_FULL") == "1"
    grade = run_kernel_suite(KERNEL_SHARDS if full else KERNEL_SAMPLE_SHARDS)
    print(f"Autobahn over the kernel transport: {len(grade.verdicts)} cases, {grade.summary()}")
    assert len(grade.verdicts) == (ALL_CASES if full else SAMPLE_CASES), grade.summary()
    assert grade.conformant, grade.problems()

"""Autobahn TestSuite, client side, on the kernel transport: kosoku's fuzzingserver (the
Autobahn case files on Python 3, in a process of its own on a free port) drives our client
through every client case, 1-7, 9, 10, 12 and 13 (517, with the permessage-deflate cases
12.*.6-18 and 13.*.6-18 that echo 1000 messages of up to 128 KiB each).

Graded by `wsgw_bench.conformance.Grade`: no case FAILED, NON-STRICT or UNIMPLEMENTED
(INFORMATIONAL is what the RFC leaves open, and is only printed).

Run time: 13.4 min for the 517 cases in one run with 2 CPUs shared with other work (load
average 5-10), 8 min on a quieter machine; 6.5 min of user CPU (client and fuzzingserver
together: they take turns, an echo is a round trip). So the cases run in three parts at
once (`KERNEL_SHARDS`: 1-10, 12, 13), each with its server and client processes. The 361
cases of 1-10 take about 50 s; 12.*.6-18 and 13.*.6-18 (1000 messages of 8-128 KiB each,
compressed both ways) are the rest. In the slowest, 12.3.18, the fuzzingserver spent 4.9 s
of CPU and our client 3.3 s (9.6 s before our deflate went from zlib level 6 to 1).
"""

from __future__ import annotations

import pytest

from wsgw_bench.conformance import ALL_CASES, KERNEL_SHARDS, run_kernel_suite

pytest.importorskip("kosoku")


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_every_autobahn_client_case_passes_strictly() -> None:
    grade = run_kernel_suite(KERNEL_SHARDS)
    print(f"Autobahn over the kernel transport: {len(grade.verdicts)} cases, {grade.summary()}")
    assert len(grade.verdicts) == ALL_CASES, grade.summary()
    assert grade.conformant, grade.problems()

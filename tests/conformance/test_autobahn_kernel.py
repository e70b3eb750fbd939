"""Autobahn TestSuite, client side: kosoku's fuzzingserver (the Autobahn case files on
Python 3) drives our kernel-transport client through cases 1-7, 9, 10, 12 and 13.

The client is Autobahn's echo client: ask /getCaseCount, run /runCase?case=N&agent=wsgw
echoing every message until the server closes, then /updateReports. 12.x/13.x
(permessage-deflate) run their five smaller message sizes by default; set
WSGW_AUTOBAHN_FULL=1 for all 517 cases (about 8 minutes on 2 CPUs).
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter

import pytest

from dataplane.transports.kernel import connect_kernel
from dataplane.ws.errors import ConnectionClosed, HandshakeError

kosoku = pytest.importorskip("kosoku")

AGENT = "wsgw"
CASES = ["1.*", "2.*", "3.*", "4.*", "5.*", "6.*", "7.*", "9.*", "10.*", "12.*", "13.*"]
# Sub-cases 6..18 of 12.x/13.x echo 1000 messages of 8 KiB..128 KiB each: minutes.
SLOW = [f"{major}.*.{minor}" for major in (12, 13) for minor in range(6, 19)]
LIMIT = 32 * 1024 * 1024  # 9.x sends 16 MiB messages


async def run_case(base: str, index: int) -> None:
    url = f"{base}/runCase?case={index}&agent={AGENT}"
    try:
        async with connect_kernel(
            url, max_message_size=LIMIT, max_frame_size=LIMIT, close_timeout=3.0
        ) as ws:
            async for message in ws:
                await ws.send(message.data, text=message.text)
    except (ConnectionClosed, HandshakeError):
        pass  # the failure cases end this way on purpose; the server judges


async def run_suite(exclude: list[str] | None) -> list[object]:
    async with kosoku.run_fuzzingserver(CASES, exclude, port=0) as server:
        base = f"ws://{server.address}:{server.port}"
        async with connect_kernel(f"{base}/getCaseCount") as ws:
            count = int((await ws.recv()).data)
        for index in range(1, count + 1):
            await run_case(base, index)
        async with connect_kernel(f"{base}/updateReports?agent={AGENT}"):
            pass
        try:
            return list(await asyncio.wait_for(server.get_result(), 120))
        except kosoku.FailureError as failure:
            return list(failure.results)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_autobahn_client_cases_pass() -> None:
    full = os.environ.get("WSGW_AUTOBAHN_FULL") == "1"
    results = asyncio.run(run_suite(None if full else SLOW))
    assert len(results) == (517 if full else 361), len(results)
    verdicts = Counter((r.behavior.value, r.behavior_close.value) for r in results)  # type: ignore[attr-defined]
    failed = [
        f"{r.case_id}: {r.behavior.value}/{r.behavior_close.value} {r.result} {r.result_close}"  # type: ignore[attr-defined]
        for r in results
        if not r.passed  # type: ignore[attr-defined]
    ]
    assert not failed, f"{len(failed)} of {len(results)} cases failed ({verdicts}):\n" + "\n".join(
        failed
    )

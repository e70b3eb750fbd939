"""dataplane.transports.http over the kernel's sockets (engine None): the same answers of
tests/integration/faulty_http.py as test_http_dpdk.py's, from a server on loopback (no lab,
no DPDK), so the client's kernel path (the `books_rest` bench's reference) is held too."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from dataplane.errors import RefusedError
from tests.integration.test_books_sim import free_port
from tests.integration.test_http_dpdk import FAULTY_HTTP, OUTCOMES, outcome


def test_each_answer_gives_the_body_or_its_typed_error_over_the_kernel() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/api/v3/depth?symbol=BTCUSDT&limit=5"
    assert asyncio.run(outcome(url, None)) is RefusedError  # nothing listens yet
    command = [sys.executable, FAULTY_HTTP, "127.0.0.1", str(port), "-", ",".join(OUTCOMES)]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"

        async def run() -> dict[str, bytes | type[Exception]]:
            return {mode: await outcome(url, None) for mode in OUTCOMES}

        assert asyncio.run(run()) == OUTCOMES
    finally:
        proc.kill()
        proc.wait()

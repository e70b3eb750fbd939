"""Autobahn TestSuite over the DPDK transport: kosoku's fuzzingserver runs on the kernel in
the lab's peer namespace, our client reaches it through a real DPDK port and wsgw's own
TCP/IP stack (cases 1-7, 9, 10, 12, 13, as for the kernel transport)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator

import pytest

from dataplane.dpdk import Eal
from dataplane.engine import Engine, EngineConfig
from dataplane.stack.iface import Interface
from dataplane.stack.tcp import TcpConfig
from dataplane.transports.dpdk import connect_dpdk
from dataplane.wire.addr import ip_to_int
from dataplane.ws.errors import ConnectionClosed, HandshakeError
from gateway.lab import Lab
from tests.conformance.test_autobahn_kernel import AGENT, CASES, LIMIT, SLOW
from tests.conftest import requires_dpdk

pytest.importorskip("kosoku")
pytestmark = [requires_dpdk, pytest.mark.dpdk, pytest.mark.slow]

SERVER = """
import asyncio, json, sys, kosoku
cases, exclude, host = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
async def main():
    async with kosoku.run_fuzzingserver(cases, exclude or None, host=host, port=9001) as s:
        print("ready", flush=True)
        try:
            results = list(await asyncio.wait_for(s.get_result(), 1200))
        except kosoku.FailureError as failure:
            results = list(failure.results)
        print(json.dumps([[r.case_id, r.behavior.value, r.behavior_close.value, r.passed,
                           str(r.result), str(r.result_close)] for r in results]), flush=True)
asyncio.run(main())
"""


@pytest.fixture
def engine(eal: Eal, lab: Lab) -> Iterator[tuple[Engine, Lab]]:
    with eal.open_port(lab.vdev) as port:
        iface = Interface(
            port.mac,
            ip_to_int(lab.gw_ip),
            ip_to_int(lab.netmask),
            tcp_config=TcpConfig(time_wait=0.2, recv_buffer=4 << 20, send_buffer=4 << 20),
        )
        eng = Engine(iface, port=port, config=EngineConfig())
        eng.start()
        try:
            yield eng, lab
        finally:
            eng.close()


async def run_client(base: str, engine: Engine) -> None:
    async with connect_dpdk(f"{base}/getCaseCount", engine=engine) as ws:
        count = int((await ws.recv()).data)
    for index in range(1, count + 1):
        try:
            async with connect_dpdk(
                f"{base}/runCase?case={index}&agent={AGENT}",
                engine=engine,
                max_message_size=LIMIT,
                max_frame_size=LIMIT,
                close_timeout=3.0,
            ) as ws:
                async for message in ws:
                    await ws.send(message.data, text=message.text)
        except (ConnectionClosed, HandshakeError):
            pass  # the failure cases end this way on purpose; the server judges
    async with connect_dpdk(f"{base}/updateReports?agent={AGENT}", engine=engine):
        pass


@pytest.mark.timeout(1800)
def test_autobahn_client_cases_pass_over_dpdk(engine: tuple[Engine, Lab]) -> None:
    eng, lab = engine
    full = os.environ.get("WSGW_AUTOBAHN_FULL") == "1"
    server = lab.popen(
        [
            sys.executable,
            "-c",
            SERVER,
            json.dumps(CASES),
            json.dumps([] if full else SLOW),
            lab.peer_ip,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready"
        asyncio.run(run_client(f"ws://{lab.peer_ip}:9001", eng))
        results = json.loads(server.stdout.readline())
    finally:
        server.kill()
        server.wait()
    assert len(results) == (517 if full else 361), len(results)
    verdicts = Counter((r[1], r[2]) for r in results)
    print(f"Autobahn over DPDK: {len(results)} cases, verdicts {dict(verdicts)}")
    failed = [f"{r[0]}: {r[1]}/{r[2]} {r[4]} {r[5]}" for r in results if not r[3]]
    assert not failed, f"{len(failed)} of {len(results)} failed:\n" + "\n".join(failed)

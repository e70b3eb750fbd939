"""Autobahn TestSuite over the DPDK transport: kosoku's fuzzingserver runs on the kernel in
the lab's peer namespace, our client reaches it through a real DPDK port and wsgw's own
TCP/IP stack (cases 1-7, 9, 10, 12, 13, as for the kernel transport)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator

import pytest

from dataplane.dpdk import Eal
from dataplane.engine import Engine, EngineConfig
from dataplane.stack.iface import Interface
from dataplane.stack.tcp import TcpConfig
from dataplane.transports.dpdk import connect_dpdk
from dataplane.wire.addr import ip_to_int
from gateway.bench.conformance import CASES, SLOW, run_suite
from gateway.lab import Lab
from tests.conftest import requires_dpdk

pytest.importorskip("kosoku")
pytestmark = [requires_dpdk, pytest.mark.dpdk, pytest.mark.slow]


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

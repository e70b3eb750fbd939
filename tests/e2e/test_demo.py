"""`wsgw demo` (what `make run` runs), end to end: simulator -> DPDK port -> wsgw's stack
-> session -> hub -> shared-memory ring -> consumer, configured through the REST API."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gateway.lab import Lab
from tests.conftest import requires_dpdk

pytestmark = [requires_dpdk, pytest.mark.dpdk]


def test_demo_streams_through_the_whole_gateway_and_cleans_up() -> None:
    name = "e2edemo"
    with socket.socket() as probe:  # a free port for the API, chosen by the test
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    state_before = set(Path(tempfile.gettempdir()).glob("wsgw-demo-*"))
    demo = ["demo", "-n", name, "--duration", "4", "--api-port", str(port)]
    proc = subprocess.run(
        [sys.executable, "-m", "gateway.cli", *demo],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert f"API        http://127.0.0.1:{port}  (port {port}" in out
    assert "transport dpdk" in out
    assert re.search(r"port 1: net_af_packet_e2edemo.* \(up\)", out)
    lines = [line for line in out.splitlines() if line.startswith("t=")]
    assert len(lines) >= 3
    totals = [int(re.search(r"total (\d+)", line).group(1)) for line in lines]  # type: ignore[union-attr]
    assert totals[-1] > totals[0] > 0  # messages keep arriving at the consumer
    assert all("gaps 0" in line and "session connected" in line for line in lines[1:])
    assert not Lab(name).exists()
    assert not list(Path("/dev/shm").glob("wsgw-demo*-messages"))
    assert set(Path(tempfile.gettempdir()).glob("wsgw-demo-*")) <= state_before  # its state

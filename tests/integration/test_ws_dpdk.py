"""The WebSocket client over the user-space stack on a real DPDK port, against servers
nobody here wrote (`websockets`, `aiohttp`) running on the kernel in the lab namespace."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dataplane.engine import Engine
from dataplane.transports.dpdk import connect_dpdk
from dataplane.ws.errors import ConnectionClosed
from gateway.lab import Lab
from tests.conftest import requires_dpdk

pytestmark = [requires_dpdk, pytest.mark.dpdk]
SERVERS = str(Path(__file__).parents[1] / "utils" / "ws_servers.py")
SIZES = [1, 125, 126, 65535, 65536, 1 << 20]


@pytest.fixture
def engine(lab_engine) -> tuple[Engine, Lab]:  # type: ignore[no-untyped-def]
    return lab_engine(time_wait=0.5, recv_buffer=4 << 20)  # type: ignore[no-any-return]


def start_server(lab: Lab, kind: str, port: int, *extra: str) -> subprocess.Popen[str]:
    proc = lab.popen(
        [sys.executable, SERVERS, kind, lab.peer_ip, str(port), *extra],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


async def echo_all(url: str, engine: Engine, deflate: bool, **options: object) -> None:
    async with connect_dpdk(url, engine=engine, deflate=deflate, **options) as ws:
        for size in SIZES:
            payload = os.urandom(size)
            await ws.send(payload)
            message = await ws.recv()
            assert message.data == payload and not message.text
            text = "é" * (size // 2) or "x"
            await ws.send(text)
            message = await ws.recv()
            assert message.data.decode() == text and message.text
        rtt = await ws.ping()
        assert rtt >= 0
        # Fragmented: a big message from the server arrives in pieces it may split freely.
        await ws.send(b"z" * (3 << 20))
        assert (await ws.recv()).data == b"z" * (3 << 20)


@pytest.mark.parametrize("kind", ["websockets", "aiohttp"])
@pytest.mark.parametrize("deflate", [False, True])
def test_echo_over_dpdk(engine: tuple[Engine, Lab], kind: str, deflate: bool) -> None:
    eng, lab = engine
    server = start_server(lab, kind, 8100, *([] if deflate else ["--no-deflate"]))
    try:
        asyncio.run(echo_all(f"ws://{lab.peer_ip}:8100/", eng, deflate))
    finally:
        server.kill()
        server.wait()


def test_server_initiated_close(engine: tuple[Engine, Lab]) -> None:
    eng, lab = engine
    server = start_server(lab, "websockets", 8101)

    async def run() -> None:
        async with connect_dpdk(f"ws://{lab.peer_ip}:8101/", engine=eng) as ws:
            await ws.send("close:4001")
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            assert ws.close_code == 4001
            assert ws.close_reason == "asked to"

    try:
        asyncio.run(run())
    finally:
        server.kill()
        server.wait()


def test_wss_with_a_test_ca(engine: tuple[Engine, Lab], tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    eng, lab = engine
    ca = trustme.CA()
    cert = ca.issue_cert(lab.peer_ip, "feed.test")
    cert_file, key_file, ca_file = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    ca.cert_pem.write_to_path(str(ca_file))
    server = start_server(lab, "websockets", 8443, "--tls", str(cert_file), str(key_file))
    try:
        asyncio.run(
            echo_all(
                "wss://feed.test:8443/", eng, True, ca_file=str(ca_file), connect_host=lab.peer_ip
            )
        )
    finally:
        server.kill()
        server.wait()

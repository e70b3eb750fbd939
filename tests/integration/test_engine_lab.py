"""The engine on a real DPDK port: fast path share, data integrity, idle CPU, GIL release.

The kernel peer in the lab namespace streams to the engine's thread, which runs the C
fast path on a net_af_packet port. Bounds on CPU and latency here are deliberately
generous (shared 2-core machines); `wsgw bench` reports the precise figures.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from dataplane.dpdk import DpdkPort, Eal
from dataplane.engine import Engine, EngineConfig
from dataplane.fastpath import FastPathConfig
from dataplane.stack.iface import Interface
from dataplane.stack.socket import TcpSocket
from dataplane.stack.tcp import TcpConfig
from dataplane.wire.addr import ip_to_int
from gateway.lab import Lab
from tests.conftest import requires_dpdk
from tests.integration.test_stack_kernel import MB, PEER_SERVER
from tests.utils.peer_server import payload

pytestmark = [requires_dpdk, pytest.mark.dpdk]


class Sink:
    """Engine service: drains one socket, hashing what it reads."""

    def __init__(self, sock: TcpSocket) -> None:
        self.sock = sock
        self.digest = hashlib.sha256()
        self.count = 0
        self.done = threading.Event()

    def __call__(self, now: float) -> None:
        while chunk := self.sock.recv(1 << 20):
            self.digest.update(chunk)
            self.count += len(chunk)
        if self.sock.at_eof or self.sock.error is not None:
            self.done.set()


@pytest.fixture
def engine(eal: Eal, lab: Lab) -> Iterator[tuple[Engine, Lab]]:
    with eal.open_port(lab.vdev) as port:
        yield make_engine(port, lab), lab


def make_engine(port: DpdkPort, lab: Lab) -> Engine:
    iface = Interface(
        port.mac,
        ip_to_int(lab.gw_ip),
        ip_to_int(lab.netmask),
        tcp_config=TcpConfig(time_wait=0.5, recv_buffer=4 << 20),
    )
    engine = Engine(iface, port=port, config=EngineConfig(fastpath=FastPathConfig()))
    engine.start()
    return engine


def stream_from_kernel(engine: Engine, lab: Lab, size: int, port: int) -> Sink:
    server = lab.popen(
        [sys.executable, PEER_SERVER, lab.peer_ip, str(port), "source", str(size), "4"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    sock = engine.call(
        lambda: engine.interface.connect(ip_to_int(lab.peer_ip), port, time.monotonic())
    ).result(5)
    sink = Sink(sock)
    engine.call(lambda: engine.services.append(sink)).result(5)
    return sink


def test_kernel_streams_200mb_mostly_on_the_fast_path(engine: tuple[Engine, Lab]) -> None:
    eng, lab = engine
    try:
        size = 200 * MB
        sink = stream_from_kernel(eng, lab, size, 7001)
        assert sink.done.wait(240), f"received {sink.count} of {size}"
        assert sink.sock.error is None
        assert sink.count == size
        assert sink.digest.digest() == hashlib.sha256(payload(size, 4)).digest()
        stats = eng.fastpath.stats()
        data_segments = stats["fast_segments"] + eng.counters.slow_frames
        share = stats["fast_segments"] / max(data_segments, 1)
        print(
            f"fast path: {stats['fast_segments']} segments, slow path: "
            f"{eng.counters.slow_frames} frames, share {share:.3f}"
        )
        assert share > 0.8
    finally:
        eng.close()


def test_idle_engine_uses_little_cpu(engine: tuple[Engine, Lab]) -> None:
    eng, _ = engine
    try:
        time.sleep(0.5)  # let the back-off reach its ceiling
        before, start = eng.cpu_seconds(), time.monotonic()
        time.sleep(3.0)
        used = (eng.cpu_seconds() - before) / (time.monotonic() - start)
        print(f"idle engine thread: {used * 100:.2f} % of a core")
        assert used < 0.10
        assert eng.snapshot()["c_sleeps"] > 0
    finally:
        eng.close()


def test_another_thread_keeps_answering_while_the_engine_streams(
    engine: tuple[Engine, Lab],
) -> None:
    """The GIL is released while C polls: an asyncio HTTP endpoint in another thread stays
    responsive during a full-rate stream."""
    eng, lab = engine
    ready = threading.Event()
    address: list[int] = []
    control: dict[str, object] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    async def serve() -> None:
        stop = asyncio.Event()
        control["loop"], control["stop"] = asyncio.get_running_loop(), stop
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        address.append(server.sockets[0].getsockname()[1])
        ready.set()
        async with server:
            await stop.wait()

    api = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
    api.start()
    try:
        assert ready.wait(5)
        sink = stream_from_kernel(eng, lab, 100 * MB, 7002)
        latencies = []
        while not sink.done.is_set() and len(latencies) < 300:
            start = time.perf_counter()
            with socket.create_connection(("127.0.0.1", address[0]), timeout=5) as conn:
                conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                assert conn.recv(100).endswith(b"ok")
            latencies.append(time.perf_counter() - start)
        assert sink.done.wait(240)
        assert len(latencies) >= 20
        p99 = statistics.quantiles(latencies, n=100)[98]
        print(
            f"endpoint during stream: n={len(latencies)} p50 "
            f"{statistics.median(latencies) * 1e3:.2f} ms p99 {p99 * 1e3:.2f} ms"
        )
        assert p99 < 0.100
    finally:
        if "loop" in control:
            control["loop"].call_soon_threadsafe(control["stop"].set)  # type: ignore[attr-defined]
        api.join(5)
        eng.close()

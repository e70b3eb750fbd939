"""The engine loop on a real DPDK port: the WebSocket client runs on the engine's own
event loop (dataplane/loop.py), one thread for the stack, the WebSocket and the
application, against a `websockets` server on the kernel in the lab namespace."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dataplane.engine import Engine
from dataplane.errors import RefusedError
from dataplane.stack.tcp_errors import TcpRefusedError
from dataplane.transports.dpdk import EngineTransport, connect_dpdk
from dataplane.ws.errors import ConnectionClosed
from gateway.lab import Lab
from tests.conftest import requires_dpdk, run_in_loop

pytestmark = [requires_dpdk, pytest.mark.dpdk]
SERVERS = str(Path(__file__).parents[1] / "utils" / "ws_servers.py")
SIZES = [1, 125, 126, 65535, 65536, 1 << 20]


def websockets_server(lab: Lab, port: int) -> list[str]:
    return [SERVERS, "websockets", lab.peer_ip, str(port), "--no-deflate"]


def transport_of(ws: Any) -> EngineTransport:
    transport = ws._transport
    assert isinstance(transport, EngineTransport)
    return transport


@pytest.mark.parametrize("flush_on_write", [False, True])
def test_echo_on_the_engine_loop(
    loop_engine: tuple[Engine, Lab],
    lab_spawn: Callable[[list[str]], None],
    flush_on_write: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine, lab = loop_engine
    lab_spawn(websockets_server(lab, 8200))
    monkeypatch.setattr(EngineTransport, "flush_on_write", flush_on_write)

    async def main() -> None:
        commands_before = engine.counters.commands
        async with connect_dpdk(f"ws://{lab.peer_ip}:8200/", engine=engine) as ws:
            transport = transport_of(ws)
            assert transport.direct  # no thread hop: same loop, same thread as the engine
            assert engine.native_id == threading.get_native_id()
            for size in SIZES:
                payload = os.urandom(size)
                await ws.send(payload)
                message = await ws.recv()
                assert message.data == payload and not message.text
                await ws.send("é" * (size // 2) or "x")
                assert (await ws.recv()).data.decode() == "é" * (size // 2) or "x"
            assert await ws.ping() >= 0
            await ws.send(b"z" * (3 << 20))
            assert (await ws.recv()).data == b"z" * (3 << 20)
        assert engine.counters.commands == commands_before  # nothing crossed threads
        assert engine.interface.connection_count <= 1  # ours in TIME_WAIT at most

    run_in_loop(engine, main)
    assert engine.fastpath.stats()["fast_segments"] > 0  # the C fast path carried bytes
    # RX burst (C clock) -> data_received, and its in-C part, were stamped
    assert engine.rx_to_protocol_ns and engine.fastpath.rx_to_return_ns
    assert all(0 <= ns < 10**9 for ns in engine.rx_to_protocol_ns)


def test_server_close_and_our_abort(
    loop_engine: tuple[Engine, Lab], lab_spawn: Callable[[list[str]], None]
) -> None:
    engine, lab = loop_engine
    lab_spawn(websockets_server(lab, 8201))
    url = f"ws://{lab.peer_ip}:8201/"

    async def main() -> None:
        async with connect_dpdk(url, engine=engine) as ws:
            await ws.send("close:4001")
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            assert ws.close_code == 4001 and ws.close_reason == "asked to"
        ws = await connect_dpdk(url, engine=engine)
        transport = transport_of(ws)
        sock = transport._sock
        assert sock is not None
        transport.abort()
        await asyncio.wait_for(ws.wait_closed(), 5)
        assert transport.is_closing()
        assert ws.close_code == 1006  # no closing handshake: abnormal
        assert transport.pump not in engine.services
        assert sock.state.name == "CLOSED"  # RST sent, the stack forgot it
        with pytest.raises(ConnectionClosed):
            await ws.send(b"after abort")

    run_in_loop(engine, main)


def test_connect_refused_and_engine_call_from_a_thread(
    loop_engine: tuple[Engine, Lab],
) -> None:
    engine, lab = loop_engine

    async def main() -> None:
        # nobody listens: the kernel answers RST, the connect fails without hanging
        # as the one transport-error family, the stack's own error chained as the cause
        with pytest.raises(RefusedError) as refused:
            await connect_dpdk(f"ws://{lab.peer_ip}:8299/", engine=engine, connect_timeout=5)
        assert isinstance(refused.value.__cause__, TcpRefusedError)
        assert engine.services == []
        ident = threading.get_ident()
        ran_on = await asyncio.to_thread(
            lambda: engine.call(lambda: (threading.get_ident(), engine.interface.ip)).result(5)
        )
        assert ran_on == (ident, engine.interface.ip)

    run_in_loop(engine, main)


def test_threaded_mode_still_works_after_the_loop(
    loop_engine: tuple[Engine, Lab], lab_spawn: Callable[[list[str]], None]
) -> None:
    """The same engine, first on a loop, then on its own thread: both transports."""
    engine, lab = loop_engine
    lab_spawn(websockets_server(lab, 8202))
    url = f"ws://{lab.peer_ip}:8202/"

    async def once() -> bool:
        async with connect_dpdk(url, engine=engine) as ws:
            await ws.send(b"ping")
            assert (await ws.recv()).data == b"ping"
            return transport_of(ws).direct

    assert run_in_loop(engine, once) is True
    engine.start()
    try:
        assert asyncio.run(once()) is False
    finally:
        engine.stop()


class EchoBench:
    """A WebSocket to a kernel `websockets` echo server, quiet after one echo through
    Python, and the frames of `FastPath.bench_echo` (from wsproto, an oracle nobody here
    wrote): the masked request and the peer's answer."""

    def __init__(self, engine: Engine, url: str) -> None:
        from wsproto.frame_protocol import FrameProtocol

        self.engine, self.url = engine, url
        self.payload = os.urandom(64)
        self.frame = bytes(FrameProtocol(client=True, extensions=[]).send_data(self.payload))
        self.reply = bytes(FrameProtocol(client=False, extensions=[]).send_data(self.payload))

    async def open_quiet(self) -> tuple[Any, Any]:
        """(the WebSocket, its connection) once the echo came back and ACKs settled."""
        ws = await connect_dpdk(self.url, engine=self.engine, deflate=False)
        await ws.send(self.payload)
        assert (await ws.recv()).data == self.payload
        await asyncio.sleep(0)
        self.engine.flush(settle=True)
        return ws, transport_of(ws)._sock.connection  # type: ignore[union-attr]


def test_the_c_echo_benchmark_loop(
    loop_engine: tuple[Engine, Lab], lab_spawn: Callable[[list[str]], None]
) -> None:
    """`FastPath.bench_echo` (C alone per round trip, the stack's own floor in `wsgw bench
    rtt`): a kernel `websockets` server answers every frame it sends, the last answer is
    the frame wsproto builds for it; an answer that never comes whole times out, and the
    flow is withdrawn either way."""
    from dataplane.fastpath import FastPathError

    engine, lab = loop_engine
    lab_spawn(websockets_server(lab, 8205))
    bench = EchoBench(engine, f"ws://{lab.peer_ip}:8205/")
    frame, reply = bench.frame, bench.reply

    async def main() -> None:
        ws, conn = await bench.open_quiet()
        rtts, last = engine.fastpath.bench_echo(conn, frame, len(reply), 200, 5.0)
        assert len(rtts) == 200 and all(0 < ns < 5 * 10**9 for ns in rtts)
        assert last == reply
        assert engine.fastpath.flows == 0  # withdrawn: C moved the state Python has
        transport_of(ws).abort()

        ws, conn = await bench.open_quiet()
        with pytest.raises(FastPathError, match="timed out"):
            engine.fastpath.bench_echo(conn, frame, len(reply) + 1, 3, 0.2)
        assert engine.fastpath.flows == 0
        transport_of(ws).abort()
        with pytest.raises(FastPathError, match="not on the fast path"):
            engine.fastpath.bench_echo(conn, frame, len(reply), 1, 0.2)

    run_in_loop(engine, main)


def test_the_c_echo_benchmark_loop_outlasts_the_peers_retransmission(
    loop_engine: tuple[Engine, Lab], lab_spawn: Callable[[list[str]], None]
) -> None:
    """The benchmark's process off the CPU for 1 s mid-run (SIGSTOP from outside, as a
    loaded machine does for 50-390 ms): the peer's kernel retransmits its unacknowledged
    last answer (TLP, RTO at 200 ms), and the copy of data the flow already has is dropped
    and counted, not a "Protocol error" (the CI flake of `test_rtt`); the stall shows as one
    long round trip."""
    engine, lab = loop_engine
    lab_spawn(websockets_server(lab, 8206))
    bench = EchoBench(engine, f"ws://{lab.peer_ip}:8206/")

    async def main() -> None:
        ws, conn = await bench.open_quiet()
        dropped = engine.fastpath.stats()["bench_dropped"]
        pid = os.getpid()
        pause = subprocess.Popen(
            ["sh", "-c", f"sleep 0.1; kill -STOP {pid}; sleep 1; kill -CONT {pid}"]
        )
        try:
            rtts, last = engine.fastpath.bench_echo(
                conn, bench.frame, len(bench.reply), 20_000, 5.0
            )
        finally:
            pause.wait(10)
            transport_of(ws).abort()
        assert last == bench.reply
        assert max(rtts) >= 0.9e9  # the round the pause fell in
        assert engine.fastpath.stats()["bench_dropped"] > dropped  # the peer's copy

    run_in_loop(engine, main)


def test_engine_loop_thread_serves_coroutines_from_other_threads(
    loop_engine: tuple[Engine, Lab], lab_spawn: Callable[[list[str]], None]
) -> None:
    """`EngineLoopThread` (what the runtime runs a port's sessions on): coroutines submitted
    from this thread run on the engine's loop, on the engine's thread, and a WebSocket
    opened there is direct; stop cancels what is left and frees the engine; an engine that
    runs its own thread is refused with the reason."""
    from dataplane.engine import EngineError
    from dataplane.loop import EngineLoopThread, engine_of

    engine, lab = loop_engine
    lab_spawn(websockets_server(lab, 8206))
    runner = EngineLoopThread(engine, name="test-engine-loop")
    runner.start()
    try:
        assert engine.running and engine.in_loop

        async def echo() -> tuple[bool, bool, bytes]:
            here = engine_of(asyncio.get_running_loop()) is engine and engine.on_engine_thread
            async with connect_dpdk(f"ws://{lab.peer_ip}:8206/", engine=engine) as ws:
                await ws.send(b"over the engine loop thread")
                return here, transport_of(ws).direct, (await ws.recv()).data

        assert runner.submit(echo()).result(10) == (True, True, b"over the engine loop thread")
        forever = runner.submit(asyncio.sleep(3600))
    finally:
        runner.stop()
    runner.stop()  # twice: nothing left to do
    assert forever.cancelled()
    assert not engine.running and not engine.in_loop
    engine.start()  # free for its own thread again
    try:
        with pytest.raises(EngineError, match="runs its own thread"):
            EngineLoopThread(engine).start()
    finally:
        engine.stop()

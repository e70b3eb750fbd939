"""Opening a WebSocket on the engine loop: the open returns in the loop iteration that
handled the server's 101 (no extra engine turn, each of which is a flush and a C poll),
and an open that gets no answer still ends in a TimeoutError with the connection aborted."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from dataplane.engine import Engine
from dataplane.transports.connection import WsClientConnection
from dataplane.transports.dpdk import connect_dpdk
from gateway.lab import Lab
from tests.conftest import requires_dpdk, run_in_loop

pytestmark = [requires_dpdk, pytest.mark.dpdk]
SERVERS = str(Path(__file__).parents[1] / "utils" / "ws_servers.py")
SILENT = (
    "import socket, sys, time\n"
    "s = socket.socket()\n"
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind((sys.argv[1], int(sys.argv[2])))\n"
    "s.listen(8)\n"  # the kernel completes the handshake; nobody ever answers the upgrade
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


def test_open_returns_in_the_turn_that_read_the_101(
    loop_engine: tuple[Engine, Lab],
    lab_spawn: Callable[[list[str]], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine, lab = loop_engine
    lab_spawn([SERVERS, "websockets", lab.peer_ip, "9301", "--no-deflate"])
    turns = 0
    turn = engine.turn

    def counting_turn(timeout: float | None) -> None:
        nonlocal turns
        turns += 1
        turn(timeout)

    monkeypatch.setattr(engine, "turn", counting_turn)
    at_101: list[int] = []
    received = WsClientConnection._data_received

    def marking_received(self: WsClientConnection, data: bytes) -> None:
        if b" 101 " in data[:16]:
            at_101.append(turns)
        received(self, data)

    monkeypatch.setattr(WsClientConnection, "_data_received", marking_received)

    async def main() -> list[tuple[int, int]]:
        seen = []
        for _ in range(5):
            ws = await connect_dpdk(f"ws://{lab.peer_ip}:9301/", engine=engine, deflate=False)
            seen.append((at_101[-1], turns))
            await ws.send("ping")
            assert (await ws.recv()).data == b"ping"
            await ws.close()
        return seen

    for delivered_in, returned_after in run_in_loop(engine, main):
        assert returned_after == delivered_in  # no turn between the 101 and the open


def test_open_without_an_answer_times_out_and_aborts(
    loop_engine: tuple[Engine, Lab], lab_spawn: Callable[[list[str]], None]
) -> None:
    engine, lab = loop_engine
    lab_spawn(["-c", SILENT, lab.peer_ip, "9302"])

    async def main() -> None:
        with pytest.raises(TimeoutError, match="timed out"):
            await connect_dpdk(
                f"ws://{lab.peer_ip}:9302/", engine=engine, deflate=False, open_timeout=0.3
            )
        # the aborted connection is gone from the stack (RST sent, flow dropped)
        for _ in range(100):
            if engine.interface.connection_count == 0:
                break
            await asyncio.sleep(0.01)
        assert engine.interface.connection_count == 0
        # and the engine still opens the next one
        lab_spawn([SERVERS, "websockets", lab.peer_ip, "9303", "--no-deflate"])
        ws = await connect_dpdk(f"ws://{lab.peer_ip}:9303/", engine=engine, deflate=False)
        await ws.send("ok")
        assert (await ws.recv()).data == b"ok"
        await ws.close()

    run_in_loop(engine, main)


def test_connect_timeout_bounds_tcp_and_open_timeout_the_upgrade(
    loop_engine: tuple[Engine, Lab], lab_spawn: Callable[[list[str]], None]
) -> None:
    """One deadline serves both phases: connect_timeout until TCP is up, then it moves to
    open_timeout from there (a long connect_timeout does not stretch the upgrade)."""
    engine, lab = loop_engine
    lab_spawn(["-c", SILENT, lab.peer_ip, "9304"])

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def attempt(host: str, connect_timeout: float, open_timeout: float) -> None:
            await connect_dpdk(
                f"ws://{host}:9304/",
                engine=engine,
                deflate=False,
                connect_timeout=connect_timeout,
                open_timeout=open_timeout,
            )

        started = loop.time()
        with pytest.raises((TimeoutError, OSError)):  # nobody answers ARP for unused_ip
            await attempt(lab.unused_ip, connect_timeout=0.3, open_timeout=30)
        assert loop.time() - started < 5
        started = loop.time()
        with pytest.raises(TimeoutError, match="timed out"):
            await attempt(lab.peer_ip, connect_timeout=30, open_timeout=0.3)
        assert loop.time() - started < 5
        for _ in range(100):
            if engine.interface.connection_count == 0:
                break
            await asyncio.sleep(0.01)
        assert engine.interface.connection_count == 0

    run_in_loop(engine, main)

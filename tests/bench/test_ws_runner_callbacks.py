"""The callback contenders of the rtt benchmark: "wsgw kernel (callbacks)" and the DPDK
ones drive their round trips from the message handler (`set_message_handler` +
`send_nowait`), as picows is driven; against a real `websockets` echo server on
127.0.0.1 (and in the lab namespace for the DPDK engine loop)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from dataplane.transports.connection import WsClientConnection
from tests.conftest import requires_dpdk, run_in_loop
from wsgw_bench import ws_runner, ws_scenarios
from wsgw_bench.ws_runner import run_loop, run_test

CALLBACK_NAMES = [
    "wsgw kernel (callbacks)",
    "wsgw DPDK (callbacks)",
    "wsgw DPDK (engine loop, callbacks)",
]
WS_SERVERS = str(Path(__file__).parents[1] / "utils" / "ws_servers.py")


@asynccontextmanager
async def echo_server(stop_after: int | None = None) -> AsyncIterator[str]:
    """ws://127.0.0.1:PORT of a websockets echo server; with stop_after, the server closes
    (1000) once it echoed that many messages."""

    async def echo(conn: ServerConnection) -> None:
        echoed = 0
        try:
            async for message in conn:
                if stop_after is not None and echoed == stop_after:
                    await conn.close(1000, "enough")
                    return
                await conn.send(message)
                echoed += 1
        except ConnectionClosed:
            pass

    async with serve(echo, "127.0.0.1", 0, compression=None, max_size=None) as server:
        yield f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"


@pytest.fixture
def recv_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts WsClientConnection.recv() calls (behaviour unchanged)."""
    calls: list[int] = []
    original = WsClientConnection.recv

    async def counted(self: WsClientConnection) -> Any:
        calls.append(1)
        return await original(self)

    monkeypatch.setattr(WsClientConnection, "recv", counted)
    return calls


def test_callback_contenders_are_named_and_listed() -> None:
    contenders = ws_runner.wsgw_callback_contenders()
    assert [c.name for c in contenders] == CALLBACK_NAMES
    assert [c.transport for c in contenders] == ["kernel", "dpdk", "dpdk-loop"]
    assert all(c.name.endswith(ws_runner.CALLBACKS_MARK) for c in contenders)
    assert not any(c.name.endswith(ws_runner.BATCH_SUFFIX) for c in contenders)
    assert "wsgw-kernel-callbacks" in ws_runner.CONTENDERS
    # the rtt scenario has them (the kernel one run by the runner), ingest does not
    rtt = {c.name: c for c in ws_scenarios._contenders("rtt")}
    assert set(CALLBACK_NAMES) <= set(rtt)
    assert rtt["wsgw kernel (callbacks)"].runner == "wsgw-kernel-callbacks"
    assert rtt["wsgw DPDK (callbacks)"].runner is None
    assert rtt["wsgw DPDK (engine loop, callbacks)"].transport == "dpdk-loop"
    ingest = {c.name for c in ws_scenarios._contenders("ingest")}
    assert not ingest & set(CALLBACK_NAMES)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_kernel_callback_adapter_rtt(loop: str, recv_calls: list[int]) -> None:
    adapter = ws_runner.make_adapter("wsgw-kernel-callbacks")
    assert isinstance(adapter, ws_runner.WsgwCallbackAdapter)
    assert adapter.name == "wsgw kernel (callbacks)"
    assert "message handler" in adapter.version()

    async def main() -> dict[str, Any]:
        async with echo_server() as url:
            return await run_test(
                adapter, "rtt", url, {"count": 200, "warmup": 20, "sizes": [64, 1024, 65536]}
            )

    results, used = run_loop(main(), loop)
    assert used.startswith(loop)
    for size in ("64", "1024", "65536"):
        r = results[size]
        assert r["n"] == 200 and r["mismatches"] == 0, r
        assert 0 < r["p50"] <= r["p99"] <= r["max"]
    assert recv_calls == []  # driven from the handler, never through recv()


def test_kernel_callback_adapter_counts_what_a_closing_server_never_echoed() -> None:
    """The server closes after 30 echoes: the run ends (no hang), with the 30 samples it
    has and the 20 missing round trips counted as mismatches."""
    adapter = ws_runner.make_adapter("wsgw-kernel-callbacks")

    async def main() -> dict[str, Any]:
        async with echo_server(stop_after=30) as url:
            async with asyncio.timeout(10):
                return await run_test(adapter, "rtt", url, {"count": 40, "warmup": 10})

    results, _ = run_loop(main(), "asyncio")
    assert results["64"]["n"] == 20  # echoes 10..29, after the warmup
    assert results["64"]["mismatches"] == 20


@requires_dpdk
@pytest.mark.dpdk
def test_engine_loop_callback_adapter_rtt(
    loop_engine: tuple[Any, Any], lab_spawn: Callable[[list[str]], None]
) -> None:
    """ "wsgw DPDK (engine loop, callbacks)" as ws_scenarios runs it: the adapter awaited on
    the engine's own loop, against a websockets echo server in the lab namespace."""
    engine, lab = loop_engine
    lab_spawn([WS_SERVERS, "websockets", lab.peer_ip, "8220", "--no-deflate"])
    found = {c.name: c for c in ws_runner.wsgw_callback_contenders(engine=engine)}
    adapter = ws_runner.wsgw_adapter(found["wsgw DPDK (engine loop, callbacks)"])
    assert isinstance(adapter, ws_runner.WsgwCallbackAdapter)

    async def main() -> dict[str, Any]:
        async with asyncio.timeout(20):
            return await run_test(
                adapter,
                "rtt",
                f"ws://{lab.peer_ip}:8220",
                {"count": 200, "warmup": 20, "sizes": [64, 1024]},
            )

    results = run_in_loop(engine, main)
    for size in ("64", "1024"):
        assert results[size]["n"] == 200 and results[size]["mismatches"] == 0, results[size]


@requires_dpdk
@pytest.mark.dpdk
def test_threaded_dpdk_callback_adapter_rtt(
    lab_engine: Callable[..., tuple[Any, Any]], lab_spawn: Callable[[list[str]], None]
) -> None:
    """ "wsgw DPDK (callbacks)": the engine on its own thread, the adapter on asyncio."""
    engine, lab = lab_engine()
    lab_spawn([WS_SERVERS, "websockets", lab.peer_ip, "8221", "--no-deflate"])
    found = {c.name: c for c in ws_runner.wsgw_callback_contenders(engine=engine)}
    adapter = ws_runner.wsgw_adapter(found["wsgw DPDK (callbacks)"])
    assert isinstance(adapter, ws_runner.WsgwCallbackAdapter)
    results, _ = run_loop(
        run_test(
            adapter, "rtt", f"ws://{lab.peer_ip}:8221", {"count": 100, "warmup": 10, "sizes": [64]}
        ),
        "asyncio",
    )
    assert results["64"]["n"] == 100 and results["64"]["mismatches"] == 0, results["64"]

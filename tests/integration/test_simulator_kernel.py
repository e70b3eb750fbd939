"""The gateway's own WebSocket client (the kernel transport) against the simulator: every
dialect end to end, and the faults seen through its errors. Skipped until
dataplane/transports/kernel.py exists."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.dialects import Data, make_dialect
from gateway.simulator import Fault, SimConfig, Simulator
from tests.integration.test_simulator_helpers import TOPICS, contiguous, run, sim_seq

kernel = pytest.importorskip("dataplane.transports.kernel")
ws_errors = pytest.importorskip("dataplane.ws.errors")


async def next_data(ws: Any, dialect: Any, count: int) -> dict[str, list[int]]:
    seqs: dict[str, list[int]] = {}
    async with asyncio.timeout(10):
        while sum(map(len, seqs.values())) < count:
            message = await ws.recv()
            kind = dialect.classify(message.data)
            if isinstance(kind, Data):
                seqs.setdefault(kind.topic, []).append(sim_seq(message.data))
    return seqs


async def read_forever(ws: Any) -> None:
    async with asyncio.timeout(10):
        while True:
            await ws.recv()


@pytest.mark.parametrize("name", list(TOPICS))
def test_kernel_transport_every_dialect(name: str) -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=300.0)) as sim:
            dialect = make_dialect(name)
            async with kernel.connect_kernel(sim.url(name, dialect.connect_path())) as ws:
                for message in dialect.subscribe_messages(TOPICS[name]):
                    await ws.send(message)
                seqs = await next_data(ws, dialect, 60)
                assert set(seqs) == set(TOPICS[name])
                assert all(contiguous(s) for s in seqs.values())

    run(scenario())


@pytest.mark.parametrize(
    ("fault", "codes"),
    [
        (Fault("drop", after=5), {1006}),
        (Fault("malformed", after=5, variant="rsv"), {1002}),
        (Fault("malformed", after=5, variant="utf8"), {1007}),
        (Fault("opcode", after=5), {1002}),
        (Fault("oversized", after=5, size=200_000), {1009}),
    ],
)
def test_kernel_transport_sees_faults(fault: Fault, codes: set[int]) -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=300.0)) as sim:
            dialect = make_dialect("binance")
            url = sim.url("binance", dialect.connect_path(["btcusdt@trade"]))
            async with kernel.connect_kernel(url, max_message_size=64 * 1024) as ws:
                await next_data(ws, dialect, 1)
                sim.inject(fault)
                with pytest.raises(ws_errors.ConnectionClosed) as caught:
                    await read_forever(ws)
                assert caught.value.code in codes, caught.value

    run(scenario())

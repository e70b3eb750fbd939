"""Exchange limits end to end: the simulator enforces Binance's (5 messages/s, 1024 streams
per connection) and the gateway's planner and request queue stay inside them."""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from gateway.dialects import BinanceDialect, make_dialect, plan_connections
from gateway.dialects.planner import PlannedConnection
from gateway.simulator import SimConfig, Simulator, wait_until
from tests.integration.test_simulator_helpers import client, receive, run


async def read_forever(ws: ClientConnection) -> None:
    async with asyncio.timeout(5):
        while True:
            await ws.recv()


def test_unpaced_requests_are_punished() -> None:
    async def scenario() -> None:
        config = SimConfig(rate=0.0, enforce_limits=True)
        async with Simulator(config) as sim, client(sim.url("binance", "/stream")) as ws:
            for i in range(10):
                params = [f"sym{i}usdt@trade"]
                await ws.send(json.dumps({"method": "SUBSCRIBE", "params": params, "id": i}))
            with pytest.raises(ConnectionClosed) as caught:
                await read_forever(ws)
            assert caught.value.rcvd is not None and caught.value.rcvd.code == 1008

    run(scenario())


async def _drive(plan: PlannedConnection, ws: ClientConnection) -> int:
    """Send the plan's queue at its pace; return how many acks came back."""
    loop = asyncio.get_running_loop()
    acks = 0
    while len(plan.queue):
        for message in plan.queue.pop_due(loop.time()):
            await ws.send(message)
        at = plan.queue.poll_at(loop.time())
        if at is not None:
            await asyncio.sleep(max(0.0, at - loop.time()))
    got = await receive(ws, plan.dialect, lambda g: plan.dialect.pending_requests == 0, timeout=10)
    acks += len(got.acks)
    return acks


def test_planner_splits_and_paces_within_binance_limits() -> None:
    topics = [f"s{i:04d}usdt@trade" for i in range(1100)]

    async def scenario() -> None:
        async with Simulator(SimConfig(rate=0.0, enforce_limits=True)) as sim:
            loop = asyncio.get_running_loop()
            plans = plan_connections(BinanceDialect, topics, loop.time())
            assert [len(p.topics) for p in plans] == [1024, 76]
            sockets = [await client(sim.url("binance", p.path), max_size=None) for p in plans]
            started = loop.time()
            acks = await asyncio.gather(
                *[_drive(p, ws) for p, ws in zip(plans, sockets, strict=True)]
            )
            elapsed = loop.time() - started
            # 1024 streams at 200 per request: 6 requests at 4/s on the first connection.
            assert acks == [6, 1]
            assert 1.0 < elapsed < 5.0, elapsed
            await wait_until(lambda: len(sim.stats()["subscribers"]) == 1100)
            assert sim.counters.connections_open == 2  # nobody was cut off
            sim.emit("binance", topics[-1], 3)
            dialect = plans[1].dialect
            got = await receive(sockets[1], dialect, lambda g: len(g.seqs[topics[-1]]) == 3)
            assert got.seqs[topics[-1]] == [1, 2, 3]
            for ws in sockets:
                await ws.close()

    run(scenario())


def test_topics_in_the_url() -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=100.0)) as sim:
            plans = plan_connections(
                lambda: make_dialect("binance"), ["btcusdt@trade"], 0.0, topics_in_url=True
            )
            assert plans[0].path == "/stream?streams=btcusdt@trade"
            assert len(plans[0].queue) == 0
            async with client(sim.url("binance", plans[0].path)) as ws:
                got = await receive(
                    ws, plans[0].dialect, lambda g: len(g.seqs["btcusdt@trade"]) >= 3
                )
                assert got.seqs["btcusdt@trade"][:3] == [1, 2, 3]

    run(scenario())

"""The simulator speaks every dialect: a plain `websockets` client, driven by the gateway's
own dialect objects, subscribes, receives every message in order, and unsubscribes."""

from __future__ import annotations

import asyncio

import pytest

from gateway.dialects import Ack, Data, Heartbeat, make_dialect
from gateway.simulator import SimConfig, Simulator, wait_until
from tests.integration import test_simulator_helpers as simh

DIALECTS = list(simh.TOPICS)
PER_TOPIC = 40


@pytest.mark.parametrize("name", DIALECTS)
def test_subscribe_receive_in_order_unsubscribe(name: str) -> None:
    topics = simh.TOPICS[name]

    async def scenario() -> None:
        config = SimConfig(rate=400.0, heartbeat_interval=0.2, symbols=simh.SYMBOLS)
        async with Simulator(config) as sim:
            dialect = make_dialect(name)
            async with simh.client(sim.url(name, dialect.connect_path())) as ws:
                for message in dialect.subscribe_messages(topics):
                    await ws.send(message)
                got = await simh.receive(
                    ws,
                    dialect,
                    lambda g: all(len(g.seqs[t]) >= PER_TOPIC for t in topics),
                )
                assert set(got.seqs) == set(topics)
                for topic in topics:
                    seqs = got.seqs[topic]
                    assert seqs[0] == 1, (topic, seqs[:5])  # nothing before the subscription
                    assert simh.contiguous(seqs), (topic, seqs)
                # Every request acked (per topic where the exchange acks per topic).
                acked = {t for a in got.acks for t in a.topics}
                assert acked == set(topics) or name in ("binance", "bybit", "generic")
                assert got.acks and all(a.op == "subscribe" for a in got.acks)
                assert dialect.pending_requests == 0
                assert not got.errors
                # The burst path classifies the same way as message by message.
                assert dialect.classify_batch(got.raw) == [dialect.classify(r) for r in got.raw]

                # Unsubscribe one topic: an ack, then it stops while the others go on.
                gone = topics[0]
                for message in dialect.unsubscribe_messages([gone]):
                    await ws.send(message)
                after = await simh.receive(
                    ws, dialect, lambda g: any(a.op == "unsubscribe" for a in g.acks)
                )
                assert any(gone in a.topics or not a.topics for a in after.acks)
                await wait_until(lambda: sim.stats()["subscribers"].get(f"{name}:{gone}") is None)
                last = sim.sent(name, gone)
                tail = await simh.receive(ws, dialect, lambda g: len(g.seqs[topics[1]]) >= 10)
                assert all(s <= last for s in tail.seqs.get(gone, []))
            await wait_until(lambda: sim.counters.connections_open == 0)
            assert sim.counters.connections_total == 1

    simh.run(scenario())


@pytest.mark.parametrize("name", DIALECTS)
def test_unknown_symbol_is_an_error(name: str) -> None:
    async def scenario() -> None:
        async with Simulator(SimConfig(rate=50.0, symbols=simh.SYMBOLS)) as sim:
            dialect = make_dialect(name)
            async with simh.client(sim.url(name, dialect.connect_path())) as ws:
                for message in dialect.subscribe_messages([simh.BAD_TOPICS[name]]):
                    await ws.send(message)
                got = await simh.receive(ws, dialect, lambda g: bool(g.errors), timeout=5)
                assert got.errors[0].reason
                assert not got.seqs

    simh.run(scenario())


def test_binance_streams_in_the_url_and_list() -> None:
    """Combined streams named in the URL flow with no request; LIST_SUBSCRIPTIONS lists them."""

    async def scenario() -> None:
        async with Simulator(SimConfig(rate=200.0)) as sim:
            dialect = make_dialect("binance")
            topics = ["btcusdt@trade", "ethusdt@bookTicker"]
            async with simh.client(sim.url(None, dialect.connect_path(topics))) as ws:
                got = await simh.receive(
                    ws, dialect, lambda g: all(len(g.seqs[t]) >= 5 for t in topics)
                )
                assert set(got.seqs) == set(topics)
                await ws.send(dialect.list_subscriptions_message())
                listed = await simh.receive(ws, dialect, lambda g: bool(g.acks))
                assert listed.acks[0].op == "list"
                assert set(listed.acks[0].active or ()) == set(topics)

    simh.run(scenario())


def test_keepalives_answered() -> None:
    """The client keepalives of OKX, Bybit and Bitstamp get their answer (a Heartbeat)."""

    async def scenario() -> None:
        async with Simulator(SimConfig(rate=0.0)) as sim:
            for name in ("okx", "bybit", "bitstamp"):
                dialect = make_dialect(name)
                keepalive = dialect.keepalive()
                assert keepalive is not None
                interval, message = keepalive
                assert 0 < interval < 30
                async with simh.client(sim.url(name, dialect.connect_path())) as ws:
                    await ws.send(message)
                    got = await simh.receive(ws, dialect, lambda g: g.heartbeats > 0, timeout=3)
                    assert got.heartbeats == 1

    simh.run(scenario())


def test_many_connections_share_a_topic() -> None:
    """Subscribers of one topic see the same sequence numbers (one publisher per topic)."""

    async def scenario() -> None:
        async with Simulator(SimConfig(rate=0.0)) as sim:
            dialects = [make_dialect("bybit") for _ in range(5)]
            sockets = [await simh.client(sim.url("bybit")) for _ in dialects]
            try:
                for ws, d in zip(sockets, dialects, strict=True):
                    for m in d.subscribe_messages(["publicTrade.BTCUSDT"]):
                        await ws.send(m)
                    await simh.receive(ws, d, lambda g: bool(g.acks))
                sim.emit("bybit", "publicTrade.BTCUSDT", 25)
                results = await asyncio.gather(
                    *[
                        simh.receive(ws, d, lambda g: len(g.seqs["publicTrade.BTCUSDT"]) >= 25)
                        for ws, d in zip(sockets, dialects, strict=True)
                    ]
                )
                for got in results:
                    assert got.seqs["publicTrade.BTCUSDT"] == list(range(1, 26))
                assert sim.counters.data_messages == 125
                assert sim.stats()["sent_per_topic"]["bybit:publicTrade.BTCUSDT"] == 25
            finally:
                for ws in sockets:
                    await ws.close()

    simh.run(scenario())


def test_rates_total_cap_and_bursts() -> None:
    async def scenario() -> None:
        config = SimConfig(rate=1000.0, total_rate=200.0)
        async with Simulator(config) as sim:
            dialect = make_dialect("okx")
            topics = ["trades:BTC-USDT", "trades:ETH-USDT"]
            async with simh.client(sim.url("okx")) as ws:
                for m in dialect.subscribe_messages(topics):
                    await ws.send(m)
                await simh.receive(ws, dialect, lambda g: len(g.acks) == 2)
                start = asyncio.get_running_loop().time()
                got = await simh.receive(
                    ws, dialect, lambda g: sum(map(len, g.seqs.values())) >= 100
                )
                elapsed = asyncio.get_running_loop().time() - start
                # 200/s shared by two topics: 100 messages take about half a second.
                assert 0.3 < elapsed < 1.5, elapsed
                assert abs(len(got.seqs[topics[0]]) - len(got.seqs[topics[1]])) <= 8
                # Bursts on top of a zero rate: bursts only.
                sim.set_rate(rate=0.0, burst_size=30, burst_interval=0.2)
                burst = await simh.receive(ws, dialect, lambda g: len(g.seqs[topics[0]]) >= 60)
                assert simh.contiguous(burst.seqs[topics[0]])

    simh.run(scenario())


@pytest.mark.parametrize(
    ("name", "topic", "beat"),
    [
        ("coinbase", "heartbeat:BTC-USD", Heartbeat("heartbeat:BTC-USD")),
        ("kraken", "trade:BTC/USD", Heartbeat()),
    ],
)
def test_application_heartbeats(name: str, topic: str, beat: Heartbeat) -> None:
    """Coinbase's heartbeat channel and Kraken's heartbeat while subscribed."""

    async def scenario() -> None:
        async with Simulator(SimConfig(rate=0.0, heartbeat_interval=0.05)) as sim:
            dialect = make_dialect(name)
            async with simh.client(sim.url(name, dialect.path)) as ws:
                for m in dialect.subscribe_messages([topic]):
                    await ws.send(m)
                got = await simh.receive(ws, dialect, lambda g: g.heartbeats >= 3)
                assert isinstance(got.acks[0], Ack)
                assert not any(isinstance(c, Data) for c in got.classified)
                assert all(c == beat for c in got.classified if isinstance(c, Heartbeat))

    simh.run(scenario())


def test_wss_with_generated_ca(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async def scenario() -> None:
        config = SimConfig(rate=100.0, tls=True, cert_dir=tmp_path)
        async with Simulator(config) as sim:
            assert sim.tls is not None
            assert sim.url().startswith("wss://")
            dialect = make_dialect("kraken")
            context = sim.tls.client_context()
            async with simh.client(sim.url("kraken", dialect.path), ssl=context) as ws:
                for m in dialect.subscribe_messages(["trade:BTC/USD"]):
                    await ws.send(m)
                got = await simh.receive(ws, dialect, lambda g: len(g.seqs["trade:BTC/USD"]) >= 5)
                assert simh.contiguous(got.seqs["trade:BTC/USD"])
        for name in ("ca.pem", "server.pem", "server.key"):
            assert (tmp_path / name).exists()

    simh.run(scenario())

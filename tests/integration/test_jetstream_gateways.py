"""JetStream message ids end to end: real `wsgw serve` processes (own state dirs, SQLite,
API ports and rings) publish one Binance feed of the simulator into one stream of a real
`nats-server -js`. Two gateways run the feed as session 1 each (as two legs of one feed
would), one of them is killed (kill -9) mid-stream and restarted on its state: the stream
holds every trade once, with no hole, and a durable consumer in its own process gets each
once. The message ids come from the sessions' dialect (gateway.runtime.compose)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.simulator.process import local_simulator
from tests.integration.nats_helpers import Subscriber, needs_nats
from tests.integration.test_jetstream_durable import Consumer
from tests.integration.test_nats_sink import wait_until
from wsgw_bench.gateways import ServeGateway, jetstream_nats
from wsgw_bench.servers import NatsServer

pytestmark = needs_nats
ROOT = Path(__file__).resolve().parents[2]
STREAM = "E2E"
TOPIC = "btcusdt@trade"
SUBJECT = f"wsgw.1.{TOPIC}"


@pytest.fixture
def simulator() -> Iterator[int]:
    with local_simulator(200) as port:
        yield port


def trades(url: str) -> list[int]:
    """The trade ids the stream holds for session 1's topic, in stream order."""

    async def read() -> list[int]:
        import nats

        nc = await nats.connect(url)
        js = nc.jetstream()
        info = await js.stream_info(STREAM)
        got: list[int] = []
        if not info.state.messages:
            await nc.close()
            return got
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(STREAM, seq)
            if msg.subject == SUBJECT:
                got.append(json.loads(msg.data or b"{}")["data"]["t"])
        await nc.close()
        return got

    return asyncio.run(read())


def test_a_gateway_killed_and_restarted_beside_another_stores_every_trade_once(
    simulator: int, tmp_path: Path
) -> None:
    with NatsServer(jetstream=True) as nats:
        nats_settings = jetstream_nats(nats.url, STREAM)
        gateways = [ServeGateway(name, tmp_path, nats=nats_settings) for name in ("a", "b")]
        consumer = Consumer(nats.url, "e2e", stream=STREAM)
        wire: Subscriber | None = None
        try:
            for gw in gateways:
                gw.start()
            wait_until(lambda: "ready" in str(trades_or_none(nats.url)), 20)
            consumer.start()  # the durable begins at the stream's end
            wire = Subscriber(nats.url, [SUBJECT])  # every copy either gateway publishes
            for gw in gateways:
                session = gw.post(
                    "/v1/sessions",
                    {
                        "name": "bn",
                        "url": f"ws://127.0.0.1:{simulator}/binance/stream",
                        "dialect": "binance",
                        "transport": "kernel",
                        "reconnect_initial_delay_s": 0.1,
                    },
                )
                assert session["id"] == 1  # the same session id: one feed, two legs
                gw.post("/v1/subscriptions", {"session_id": 1, "topics": [TOPIC], "consumer": "c"})
                gw.post("/v1/sessions/1/start")
            a, b = gateways
            wait_until(lambda: 1 in a.connected() and 1 in b.connected(), 30)
            wait_until(lambda: len(trades(nats.url)) >= 300, 30)
            a.kill()  # mid-stream; b goes on
            time.sleep(1.0)
            a.start()  # on its state: the session is started again (restore)
            wait_until(lambda: 1 in a.connected(), 30)
            time.sleep(2.0)  # both publish again
            b.kill()
            time.sleep(1.0)
            a.kill()
            stored = trades(nats.url)
            consumer.wait_for(len(stored))
            time.sleep(0.5)  # nothing more comes
            got = [int(x) for x in consumer.got if x.isdigit()]  # not "restart"
            wire.close()
            published = [json.loads(data)["data"]["t"] for _, data, _ in wire.got]
        finally:
            if wire is not None:
                wire.close()
            consumer.kill()
            for gw in gateways:
                gw.close()
    print(f"stream: {len(stored)} trades {stored[0]}..{stored[-1]}, published {len(published)}")
    assert len(published) > len(stored)  # both published most trades: the copies were dropped
    assert len(stored) == len(set(stored))  # no trade stored twice
    assert sorted(stored) == list(range(min(stored), max(stored) + 1))  # no hole
    assert got == stored  # the durable consumer: each once, in stream order


def trades_or_none(url: str) -> str:
    """'ready' once the gateways' sink has made the stream."""
    try:
        trades(url)
    except Exception:
        return "absent"
    return "ready"

"""The consumer SDK (gateway.client) over its three transports against a live gateway: a real
uvicorn serving /v1/stream, a real nats-server with JetStream, the hub's shared-memory ring,
all fed by a synthetic publisher (this thread plays the engine). Each transport must give
every message of its topics, in order, with the ring's sequence numbers and names; a gateway
restart mid-stream must show as a Restart and the stream go on; JetStream must resume from a
position without loss or duplicates; a refused stream must say why."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from dataplane.ring import RingWriter
from gateway.client import (
    Client,
    ClientEvent,
    Gap,
    Restart,
    RingMessage,
    SourceUnavailableError,
    StreamClosedError,
)
from gateway.hub import Hub
from gateway.hub.nats import JetStreamConfig, NatsConfig, NatsSink
from wsgw_bench.servers import NatsServer, ServerThread, free_port, gateway_app, nats_server_binary

pytestmark = pytest.mark.skipif(nats_server_binary() is None, reason="nats-server not installed")

TOPICS = ["t0", "t1", "t2"]


@dataclass
class Gateway:
    """One run of a gateway: a hub over a ring, its NATS sink and the API serving it."""

    state: Path
    ring_name: str
    nats: NatsServer
    port: int
    hub: Hub | None = None
    server: ServerThread | None = None
    session: int = 0
    consume: str = ""

    def start(self) -> Gateway:
        sink_config = NatsConfig(servers=[self.nats.url], headers=True, jetstream=JetStreamConfig())
        sink = NatsSink(sink_config).start(10)
        self.hub = Hub(ring=RingWriter.create(self.ring_name, 16 << 20), nats=sink)
        self.server = ServerThread(gateway_app(self.state, self.hub), port=self.port).start()
        control = self.server.config.app.state.control
        if not self.consume:
            _, self.consume = control.tokens.create("sdk", ["consume"])
            self.session = control.sessions.create(
                {"name": "feed", "url": "wss://feed.example/ws", "dialect": "generic",
                 "transport": "kernel"}
            ).id  # fmt: skip
        wait_until(lambda: sink.stats.jetstream_ready, "the JetStream stream")
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.hub is not None:
            self.hub.close()
            self.hub = None

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/stream"

    @property
    def epoch(self) -> int:
        assert self.hub is not None
        return int(self.hub.epoch_hex, 16)

    def publish(self, start: int, count: int) -> None:
        """Messages start..start+count-1, message i on TOPICS[i % 3], in batches of 50."""
        assert self.hub is not None
        for first in range(start, start + count, 50):
            batch = range(first, min(first + 50, start + count))
            self.hub.publish_batch(
                [(self.session, TOPICS[i % 3], body(i), time.time_ns(), None) for i in batch]
            )


def body(i: int) -> bytes:
    return orjson.dumps({"i": i})


def wait_until(check: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def collect(client: Client, count: int, timeout: float = 20.0) -> list[ClientEvent]:
    """Events until `count` messages came (or the timeout: then what came)."""
    events: list[ClientEvent] = []
    deadline = time.monotonic() + timeout
    while sum(type(e) is RingMessage for e in events) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        events.extend(client.read(timeout=min(left, 0.5)))
    return events


def numbers(events: list[ClientEvent]) -> list[int]:
    """The publisher's numbers of the messages among events (gap records left out)."""
    return [
        orjson.loads(bytes(e.payload))["i"]
        for e in events
        if type(e) is RingMessage and e.topic != "$gap"
    ]


@pytest.fixture(scope="module")
def nats() -> Iterator[NatsServer]:
    server = NatsServer(jetstream=True).start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def gw(tmp_path: Path, nats: NatsServer) -> Iterator[Gateway]:
    gateway = Gateway(tmp_path, f"wsgw-test-{os.getpid()}-sdk", nats, free_port()).start()
    try:
        yield gateway
    finally:
        gateway.stop()


def ring_client(gw: Gateway) -> Client:
    return Client.attach(gw.ring_name, topics=[f"{gw.session}:*"], copy=True, wait="futex")


def wait_subscribed(gw: Gateway, consumers: int = 1) -> None:
    assert gw.hub is not None
    hub = gw.hub
    wait_until(lambda: len(hub.consumers()) >= consumers, "the stream's subscription")


def test_every_transport_gives_the_ring_s_messages_in_order(gw: Gateway) -> None:
    ring = ring_client(gw)
    stream = Client.connect(gw.ws, session=gw.session, token=gw.consume)
    bus = Client.connect(gw.nats.url, session=gw.session)
    try:
        wait_subscribed(gw)
        time.sleep(0.2)  # the NATS subscription reaches the server
        gw.publish(0, 600)
        from_ring = collect(ring, 600)
        from_stream = collect(stream, 600)
        from_bus = collect(bus, 600)
    finally:
        for client in (ring, stream, bus):
            client.close()
    assert numbers(from_ring) == list(range(600))
    for events in (from_stream, from_bus):
        messages = [e for e in events if type(e) is RingMessage]
        assert numbers(events) == list(range(600))
        # The ring's sequence numbers, names and stamps: one gateway, one numbering.
        assert [(m.seq, m.session_id, m.topic) for m in messages] == [
            (m.seq, m.session_id, m.topic) for m in from_ring if type(m) is RingMessage
        ]
        assert all(m.ts_ns > 0 for m in messages)
    assert stream.epoch == bus.epoch or bus.epoch == 0  # NATS learns it from a gap event
    assert stream.epoch == gw.epoch


def test_topics_filter_and_async_reads(gw: Gateway) -> None:
    async def main() -> tuple[list[int], list[int]]:
        stream = Client.connect(gw.ws, session=gw.session, topics=["t1"], token=gw.consume)
        bus = Client.connect(gw.nats.url, session=gw.session, topics=["t1"])
        got: dict[str, list[int]] = {"stream": [], "bus": []}

        async def drain(name: str, client: Client) -> None:
            async for event in client:
                assert type(event) is RingMessage, event
                assert event.topic == f"{gw.session}:t1"
                got[name].append(orjson.loads(event.payload)["i"])
                if len(got[name]) == 100:
                    return

        try:
            await asyncio.to_thread(wait_subscribed, gw)
            await asyncio.sleep(0.2)
            tasks = [
                asyncio.create_task(drain("stream", stream)),
                asyncio.create_task(drain("bus", bus)),
            ]
            await asyncio.to_thread(gw.publish, 0, 300)
            await asyncio.wait_for(asyncio.gather(*tasks), 20)
        finally:
            await stream.aclose()
            await bus.aclose()
        return got["stream"], got["bus"]

    from_stream, from_bus = asyncio.run(main())
    assert from_stream == from_bus == [i for i in range(300) if i % 3 == 1]


def test_a_gateway_restart_mid_stream_is_a_restart_and_the_stream_goes_on(gw: Gateway) -> None:
    stream = Client.connect(gw.ws, session=gw.session, token=gw.consume, follow=True)
    bus = Client.connect(gw.nats.url, session=gw.session, follow=True)
    try:
        wait_subscribed(gw)
        time.sleep(0.2)
        assert gw.hub is not None
        gw.hub.publish_gap(gw.session, None, "reconnect")  # NATS learns the run's epoch
        gw.publish(0, 100)
        before = {"stream": collect(stream, 100), "bus": collect(bus, 100)}
        first_epoch = gw.epoch
        gw.stop()
        gw.start()  # a new run: new ring, new epoch, same port and database
        assert gw.epoch != first_epoch
        # The stream client reconnects by itself (1001 going away, then refused until the
        # new server listens); NATS stays connected and learns of the new run from its gap.
        deadline = time.monotonic() + 20
        after_stream: list[ClientEvent] = []
        while not any(type(e) is Restart for e in after_stream) and time.monotonic() < deadline:
            after_stream.extend(stream.read(timeout=0.2))
        wait_subscribed(gw)
        time.sleep(0.2)
        gw.hub.publish_gap(gw.session, None, "restart")
        gw.publish(100, 100)
        after_stream.extend(collect(stream, 100))
        after_bus = collect(bus, 100 + 1)  # the gap record too
    finally:
        stream.close()
        bus.close()
    assert numbers(before["stream"]) == numbers(before["bus"]) == list(range(100))
    restarts = [e for e in after_stream if type(e) is Restart]
    assert restarts == [Restart(first_epoch, gw.epoch)]
    assert numbers(after_stream) == list(range(100, 200))
    bus_restarts = [e for e in after_bus if type(e) is Restart]
    assert bus_restarts == [Restart(first_epoch, gw.epoch)]
    assert numbers(after_bus)[-100:] == list(range(100, 200))


def test_jetstream_resumes_from_a_position_without_loss_or_duplicates(gw: Gateway) -> None:
    # From now on (the stream outlives the test's gateway: it holds earlier tests' messages).
    first = Client.connect(gw.nats.url, session=gw.session, jetstream="WSGW")
    try:
        gw.publish(0, 200)
        got = collect(first, 200)
        position = first.position
    finally:
        first.close()
    assert numbers(got) == list(range(200))
    assert position is not None
    gw.publish(200, 100)  # while no consumer is connected
    time.sleep(0.3)
    resumed = Client.connect(
        gw.nats.url, session=gw.session, jetstream="WSGW", start_seq=position + 1
    )
    try:
        rest = collect(resumed, 100)
    finally:
        resumed.close()
    assert numbers(rest) == list(range(200, 300))


def test_a_refused_stream_says_why_and_an_absent_one_is_unavailable(gw: Gateway) -> None:
    with pytest.raises(StreamClosedError) as refused:
        Client.connect(gw.ws, session=gw.session, token="not-a-token")
    assert refused.value.code == 4401
    with pytest.raises(StreamClosedError) as missing:
        Client.connect(gw.ws, session=999_999, token=gw.consume)
    assert missing.value.code == 4404
    with pytest.raises(SourceUnavailableError):
        Client.connect(f"ws://127.0.0.1:{free_port()}/v1/stream", session=1, token=gw.consume)
    with pytest.raises(SourceUnavailableError):
        Client.connect(f"nats://127.0.0.1:{free_port()}", session=1)
    with pytest.raises(ValueError, match="unsupported stream URL"):
        Client.connect("http://127.0.0.1/v1/stream")


def test_a_dropped_stream_reconnects_to_the_same_run_with_a_gap(gw: Gateway) -> None:
    """The consumer's connection drops (the gateway cut it) while the gateway goes on: the
    client reconnects by itself and reports what went by meanwhile as a Gap, no Restart."""
    stream = Client.connect(gw.ws, session=gw.session, token=gw.consume, follow=True)
    try:
        wait_subscribed(gw)
        gw.publish(0, 10)
        before = collect(stream, 10)
        assert gw.hub is not None and gw.server is not None
        for consumer in gw.hub.consumers():  # the gateway ends the stream: 1012 restart
            gw.server.call(lambda c=consumer: c.cut(1012, "service restart", "shutdown"))
        wait_until(lambda: not gw.hub or not gw.hub.consumers(), "the stream's end")
        gw.publish(10, 30)  # nobody reads these over the stream
        events: list[ClientEvent] = []
        deadline = time.monotonic() + 20
        while not any(type(e) is Gap for e in events) and time.monotonic() < deadline:
            events.extend(stream.read(timeout=0.2))
        wait_subscribed(gw)
        gw.publish(40, 10)
        events.extend(collect(stream, 10))
    finally:
        stream.close()
    assert numbers(before) == list(range(10))
    assert not any(type(e) is Restart for e in events)
    gaps = [e for e in events if type(e) is Gap]
    assert len(gaps) == 1 and gaps[0].lost >= 30
    assert numbers(events)[-10:] == list(range(40, 50))

"""The NATS sink's acknowledged JetStream publishing (issue #20) against a real
`nats-server -js`: a message sent while the server restarts (down, then loading its file
store) is sent again with its message id until JetStream acknowledges it, and stored once."""

from __future__ import annotations

import threading
import time

import pytest

from tests.integration.nats_helpers import needs_nats
from tests.integration.test_jetstream_durable import (
    SESSION,
    Gateway,
    stored,
    trade,
    trade_id,
)
from tests.integration.test_nats_sink import wait_until
from wsgw_bench.servers import NatsServer

pytestmark = needs_nats


@pytest.fixture
def server() -> NatsServer:
    nats = NatsServer(jetstream=True).start()
    yield nats  # type: ignore[misc]
    nats.cleanup()


def kill_nats(server: NatsServer) -> None:
    """kill -9 of the nats-server (its store folder stays for the restart)."""
    proc = server.proc
    assert proc is not None
    proc.kill()
    proc.wait(10)
    server.proc = None


def test_every_message_is_stored_once_across_a_server_restart_mid_stream(
    server: NatsServer,
) -> None:
    gateway = Gateway(server.url, storage="file", ack_timeout_s=0.5)
    total = 6000
    sent = threading.Event()

    def flow() -> None:
        for at in range(1, total + 1, 50):
            batch = [trade(i) for i in range(at, at + 50)]
            gateway.hub.publish_batch([(SESSION, "btcusdt@trade", p, 0, None) for p in batch])
            time.sleep(0.01)
        sent.set()

    try:
        threading.Thread(target=flow, daemon=True).start()
        wait_until(lambda: gateway.sink.stats.published >= 1000, 30)
        kill_nats(server)  # mid-stream: what is in its socket and acks in flight are lost
        time.sleep(0.5)
        server.start()  # JetStream loads its file store after the port opens: refused
        assert sent.wait(60)
        gateway.wait_published(total)
    finally:
        gateway.close()
    stats = gateway.sink.stats
    ids = [trade_id(p) for p in stored(server.url)]
    assert sorted(ids) == list(range(1, total + 1))  # each one, once
    assert stats.resent > 0  # the restart cost acks: they were sent again
    assert stats.dropped_unacked == 0
    assert sum(gateway.sink.dropped.values()) == 0


def test_a_refused_message_is_dropped_and_counted_after_retry_for(server: NatsServer) -> None:
    """A stream deleted under the sink: nothing listens, every send is refused, then given up."""
    import asyncio

    gateway = Gateway(server.url, ack_timeout_s=0.2, retry_for_s=0.6)
    try:

        async def delete() -> None:
            import nats

            nc = await nats.connect(server.url)
            await nc.jetstream().delete_stream("MD")
            await nc.close()

        asyncio.run(delete())
        gateway.publish([trade(i) for i in range(1, 11)], wait=False)
        sink = gateway.sink
        wait_until(lambda: sink.stats.dropped_unacked == 10, 10)
    finally:
        gateway.close()
    assert sink.stats.refused >= 10
    assert sink.dropped["unacked"] == 10
    assert sink.stats.stored == 0


def test_a_sink_stopping_while_the_server_is_gone_stops_and_counts_what_it_dropped(
    server: NatsServer,
) -> None:
    gateway = Gateway(server.url, ack_window=10)
    sink = gateway.sink
    thread = sink._thread
    assert thread is not None
    try:
        gateway.publish([trade(i) for i in range(1, 11)])
        kill_nats(server)
        gateway.publish([trade(i) for i in range(11, 111)], wait=False)
        wait_until(lambda: sink.unacked >= 10, 10)  # the window is full: the sink waits
    finally:
        gateway.close()
    assert not thread.is_alive()
    assert sink.stats.stored == 10
    assert sink.stats.stored + sum(sink.dropped.values()) == 110

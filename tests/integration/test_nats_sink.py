"""The NATS sink against a real nats-server of our own (loopback, free port): subjects,
order, gap events, headers, JetStream, and NATS being down (dropped and counted, then
reconnected by nats-py)."""

from __future__ import annotations

import asyncio
import json

from gateway.hub import Hub
from gateway.hub.names import nats_subject
from gateway.hub.nats import JetStreamConfig, NatsConfig, NatsSink
from tests.integration.nats_helpers import Subscriber, needs_nats, wait_until
from wsgw_bench.servers import NatsServer, free_port

pytestmark = needs_nats


def test_messages_and_gaps_reach_their_subjects_in_order(nats_server: NatsServer) -> None:
    sink = NatsSink(NatsConfig(servers=[nats_server.url], subject_prefix="md.gw1")).start(10)
    hub = Hub(nats=sink)
    everything = Subscriber(nats_server.url, ["md.gw1.>"])
    dotted = Subscriber(nats_server.url, [nats_subject("md.gw1", 4, "BTC-USD.trades")])
    try:
        topics = ["btcusdt@trade", "BTC-USD.trades", "a*b"]
        for i in range(0, 3000, 30):
            hub.publish_batch(
                [(4, topics[j % 3], f"{j}".encode(), 0, None) for j in range(i, i + 30)]
            )
        gap_seq = hub.publish_gap(4, 12, "reconnect")
        wait_until(lambda: len(everything.got) == 3001 and len(dotted.got) == 1000)
    finally:
        everything.close()
        dotted.close()
        hub.close()
    subjects = {s for s, _, _ in everything.got}
    assert subjects == {
        "md.gw1.4.btcusdt@trade",
        "md.gw1.4.BTC-USD~2Etrades",
        "md.gw1.4.a~2Ab",
        "md.gw1.4.$gap",
    }
    for k, topic in enumerate(topics):
        subject = nats_subject("md.gw1", 4, topic)
        got = [int(d) for s, d, _ in everything.got if s == subject]
        assert got == list(range(k, 3000, 3))  # every one, in order
    assert [int(d) for _, d, _ in dotted.got] == list(range(1, 3000, 3))
    gap = json.loads(everything.got[-1][1])
    assert (gap["seq"], gap["session"], gap["lost"], gap["reason"]) == (gap_seq, 4, 12, "reconnect")
    assert sink.stats.published == 3000 and sink.stats.gaps == 1
    assert sum(sink.dropped.values()) == 0
    assert not sink.loop.is_running()  # stopped with the hub


def test_headers_carry_the_sequence_and_receive_time(nats_server: NatsServer) -> None:
    sink = NatsSink(NatsConfig(servers=[nats_server.url], headers=True)).start(10)
    hub = Hub(nats=sink)
    sub = Subscriber(nats_server.url, ["wsgw.>"])
    try:
        first = hub.publish_batch([(1, "t", b"x", 111, None), (1, "t", b"y", 222, None)])
        wait_until(lambda: len(sub.got) == 2)
    finally:
        sub.close()
        hub.close()
    assert [h for _, _, h in sub.got] == [
        {"Wsgw-Seq": str(first), "Wsgw-Recv-Ts": "111"},
        {"Wsgw-Seq": str(first + 1), "Wsgw-Recv-Ts": "222"},
    ]


def test_nats_down_drops_and_counts_then_reconnects() -> None:
    """No server at first: messages are dropped and counted (never queued without bound);
    once a server listens the sink connects by itself; a restart of the server is a
    reconnect; every message is either published or counted as dropped."""
    port = free_port()
    sink = NatsSink(
        NatsConfig(
            servers=[f"nats://127.0.0.1:{port}"],
            connect_timeout_s=0.5,
            reconnect_wait_s=0.2,
            buffer_messages=1000,
            pending_bytes=64 << 10,
        )
    ).start()
    hub = Hub(nats=sink)
    total = 0

    def publish(n: int, paced: bool = False) -> None:
        nonlocal total
        for _ in range(n // 10):
            hub.publish_batch([(1, "t", b"m" * 100, 0, None) for _ in range(10)])
            total += 10
            if paced:  # within the sink's buffer, so that none is dropped
                wait_until(lambda: sink.pending < 500)

    try:
        publish(5000)
        assert not sink.stats.connected
        wait_until(lambda: sink.pending == 0)
        assert sink.dropped["not_connected"] + sink.dropped["buffer_full"] == 5000
        server = NatsServer(port=port).start()
        try:
            assert sink.wait_connected(10)
            sub = Subscriber(server.url, ["wsgw.>"])
            publish(2000, paced=True)
            wait_until(lambda: len([m for m in sub.got if not m[0].endswith("$gap")]) == 2000)
            sub.close()
            # What was read before the first connection was told first, exactly.
            early = [json.loads(d) for s, d, _ in sub.got if s.endswith("$gap")]
            assert sum(g["lost"] for g in early) == 5000, (early, sink.dropped)
            server.stop()  # NATS goes away mid-stream
            wait_until(lambda: not sink.stats.connected)
            publish(3000)
            server.start()
            wait_until(lambda: sink.stats.reconnects >= 1 and sink.stats.connected, 20)
            sub = Subscriber(server.url, ["wsgw.>"])
            publish(1000, paced=True)
            wait_until(lambda: len([m for m in sub.got if not m[0].endswith("$gap")]) == 1000)
            sub.close()
            # What nats-py's buffer refused meanwhile came first, as a gap record.
            told = [json.loads(d) for s, d, _ in sub.got if s.endswith("$gap")]
            dropped = sink.dropped["disconnected"] + sink.dropped["error"]
            assert sum(g["lost"] for g in told if g["reason"] == "nats_sink_dropped") == dropped
        finally:
            server.cleanup()
    finally:
        hub.close()
    stats = sink.stats
    assert stats.published + sum(sink.dropped.values()) == total
    assert stats.disconnects >= 1


def test_jetstream_stream_is_created_and_stores_the_messages() -> None:
    with NatsServer(jetstream=True) as server:
        config = NatsConfig(
            servers=[server.url], jetstream=JetStreamConfig(stream="MD", storage="memory")
        )
        sink = NatsSink(config).start(10)
        hub = Hub(nats=sink)
        try:
            assert sink.stats.jetstream_ready
            for i in range(100):
                hub.publish_batch([(2, "t.x", f"{i}".encode(), 0, None)])
            hub.publish_gap(2, None, "reconnect")
        finally:
            hub.close()

        async def check() -> None:
            import nats

            nc = await nats.connect(server.url)
            js = nc.jetstream()
            info = await js.stream_info("MD")
            assert info.config.subjects == ["wsgw.>"]
            assert info.state.messages == 101
            last = await js.get_last_msg("MD", "wsgw.2.t~2Ex")
            assert last.data == b"99"
            await nc.close()

        asyncio.run(check())

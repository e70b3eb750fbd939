"""Records that reach the ring without the hub (C writes them inside the engine's poll) reach
/v1/stream and NATS like the hub's own: the ring is the consumers' one source.

A real uvicorn server serves /v1/stream to real WebSocket clients, a nats-server of our own
takes the sink's messages; this thread writes the ring both ways, one after the other (the
ring has one writer at a time): `Hub.publish_batch`/`publish_gap`, and `RingWriter`'s
`write_columns` called directly, under topic ids from `Hub.ring_topic_id` or registered on
the ring alone. Every consumer gets every record of its topics once, in ring order, with
the ring's sequence numbers, its topic spelled as published, and NATS the same numbers."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from dataplane.ring import SHM_DIR, RingWriter
from gateway.hub import Hub, ring_topic
from gateway.hub.names import nats_gap_subject, nats_subject
from gateway.hub.nats import NatsConfig, NatsSink
from tests.integration.nats_helpers import Subscriber, needs_nats, wait_until
from wsgw_bench.servers import NatsServer, ServerThread, gateway_app

RING = f"wsgw-test-{os.getpid()}-ringwriters"
LONG = "depth@" + "x" * 80  # its ring name is shortened (hash suffix)

pytestmark = needs_nats


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[Hub, ServerThread, Any, NatsServer]]:
    nats = NatsServer().start()
    sink = None
    hub = None
    server = None
    try:
        sink = NatsSink(NatsConfig(servers=[nats.url], headers=True)).start(10)
        hub = Hub(ring=RingWriter.create(RING, 1 << 22), nats=sink)
        server = ServerThread(gateway_app(tmp_path, hub)).start()
        yield hub, server, server.config.app.state.control, nats
    finally:
        if server is not None:
            server.stop()
        if hub is not None:
            hub.close()
        elif sink is not None:
            sink.stop()
        nats.cleanup()
        assert not list(SHM_DIR.glob(RING + "*")), "ring file left behind"


def test_records_written_to_the_ring_directly_reach_streams_and_nats(
    gateway: tuple[Hub, ServerThread, Any, NatsServer],
) -> None:
    from websockets.asyncio.client import connect

    hub, server, service, nats = gateway
    sid = service.sessions.create(
        {"name": "feed", "url": "wss://feed.example/ws", "dialect": "generic",
         "transport": "kernel"}
    ).id  # fmt: skip
    _, token = service.tokens.create("reader", ["consume"])
    base = f"{server.ws_url}/v1/stream?token={token}&session={sid}&envelope=1"
    ring = hub.ring
    assert ring is not None
    bus = Subscriber(nats.url, [f"wsgw.{sid}.>"])
    written: list[tuple[int, str, int]] = []  # (seq, topic, i) in ring order; i -1: a gap

    def write() -> None:
        seq = hub.publish_batch([(sid, "t0", b'{"i":0}', 0, 7), (sid, LONG, b'{"i":1}', 0, 8)])
        written.extend([(seq, "t0", 0), (seq + 1, LONG, 1)])
        # The C path: ids from the hub, records straight into the ring.
        t0, long_id = hub.ring_topic_id(sid, "t0"), hub.ring_topic_id(sid, LONG)
        seq = ring.write_columns([sid] * 3, [t0, long_id, t0], [b'{"i":2}', b'{"i":3}', b'{"i":4}'])
        written.extend([(seq, "t0", 2), (seq + 1, LONG, 3), (seq + 2, "t0", 4)])
        gap = hub.publish_gap(sid, 3, "reconnect")
        written.append((gap, "$gap", -1))
        # A topic the hub never saw: registered on the ring alone, under its ring name.
        t9 = ring.register_topic(ring_topic(sid, "t9"))
        seq = ring.write_columns([sid, sid], [t9, t0], [b'{"i":5}', b'{"i":6}'])
        written.extend([(seq, "t9", 5), (seq + 1, "t0", 6)])
        seq = hub.publish_batch([(sid, "t0", b'{"i":7}', 0, None)])
        written.append((seq, "t0", 7))

    async def frames(ws: Any, count: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while len(out) < count:
            obj = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
            if obj.get("type") in ("msg", "gap"):
                out.append(obj)
        return out

    async def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
        async with (
            connect(base) as every,
            connect(f"{base}&topics=t0,{LONG}") as some,
        ):
            hello = orjson.loads(await asyncio.wait_for(every.recv(), 10))
            while len(hub.consumers()) != 2:
                await asyncio.sleep(0.005)
            await asyncio.get_running_loop().run_in_executor(None, write)
            return await frames(every, 9), await frames(some, 8), hello["epoch"]

    try:
        every, some, epoch = asyncio.run(run())
        wait_until(lambda: len(bus.got) == 9, 20)
    finally:
        bus.close()

    def seen(got: list[dict[str, Any]]) -> list[tuple[int, str, int]]:
        return [
            (f["seq"], f["topic"], orjson.loads(f["payload"])["i"])
            if f["type"] == "msg"
            else (f["seq"], "$gap", -1)
            for f in got
        ]

    assert epoch == f"{ring.epoch:016x}"
    assert seen(every) == written
    assert seen(some) == [w for w in written if w[1] in ("t0", LONG, "$gap")]
    gap = next(f for f in every if f["type"] == "gap")
    assert (gap["lost"], gap["reason"], gap["epoch"]) == (3, "reconnect", epoch)
    by_seq = {f["seq"]: f for f in every}
    assert by_seq[written[0][0]]["upstream_seq"] == 7  # the hub's own messages keep theirs
    assert "upstream_seq" not in by_seq[written[2][0]]  # the ring has no field for it
    assert all(by_seq[s]["recv_ts_ns"] > 0 for s, t, _ in written if t != "$gap")

    expected = [
        (nats_gap_subject("wsgw", sid), seq)
        if topic == "$gap"
        else (nats_subject("wsgw", sid, topic), seq)
        for seq, topic, _ in written
    ]
    got = [
        (subject, orjson.loads(data)["seq"] if subject.endswith("$gap") else int(h["Wsgw-Seq"]))
        for subject, data, h in bus.got
        if h is not None or subject.endswith("$gap")
    ]
    assert got == expected
    gap_body = orjson.loads(next(d for s, d, _ in bus.got if s.endswith("$gap")))
    assert (gap_body["lost"], gap_body["epoch"]) == (3, epoch)

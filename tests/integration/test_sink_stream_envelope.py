"""Envelope streams (/v1/stream?envelope=1) on the stream sink end to end (issue #16): a real
uvicorn server over a hub whose ring writer sends the envelopes itself, raw WebSocket clients
that check every byte. A stream served by the sink and one served by the router alone
(app.state.stream_sink False) get, frame for frame, `Delivery.envelope_wire()` of every
record: records written to the ring by another writer (as the engine's C feed does), a
kernel session's publishes without and with upstream seqs (upstream_seq is Python's: the sink
leaves those to the router), a gap (the router's notice) and a payload that is not UTF-8
(payload_b64), in session mode (some topics, every topic) and subscription mode."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest

import gateway.client.stream as stream_mod
from gateway.hub.consumer import Consumer
from gateway.hub.events import OP_TEXT, Delivery, GapNotice, ws_frame
from gateway.hub.names import ring_topic
from gateway.hub.sink import EXTRA, GAP, ST_MESSAGES, TOPIC, UTF8
from tests.integration.test_sink_stream import (  # noqa: F401 (gw, sink_on: fixtures)
    TOPICS,
    Gateway,
    RawClient,
    gw,
    sink_on,
    wait_until,
)
from tests.utils.stream_shim import count_shim_envelopes

#: Payloads that test the escaping: JSON specials, control bytes, DEL, multi-byte UTF-8.
PAYLOADS = [
    b'{"px":"1.5","q":2}',
    b'quote " backslash \\ slash /',
    b"\x00\x01\x08\t\n\x0b\x0c\r\x1f\x7f",
    "é € 𝄞 \u2028".encode(),
    b"x" * 300,  # a 4-byte frame head
]


def armed(consumer: Consumer) -> Callable[[], bool]:
    return lambda: consumer.sink_armed


def consumer_of(gateway: Gateway, before: list[Consumer]) -> Consumer:
    wait_until(lambda: len(gateway.consumers()) == len(before) + 1, what="the stream's consumer")
    return next(c for c in gateway.consumers() if c not in before)


def run(gateway: Gateway, queries: list[str], on: bool) -> tuple[list[list[bytes]], list[Consumer]]:
    """Open a client per query (envelope=1), write the records of the test, and return what
    each client got after its subscribed frame (raw frames, past gaps skipped) and the
    consumers."""
    gateway.app.state.stream_sink = on
    clients: list[RawClient] = []
    consumers: list[Consumer] = []
    try:
        for q in queries:
            clients.append(RawClient(gateway, f"{q}&envelope=1"))
            consumers.append(consumer_of(gateway, consumers))
        for client in clients:
            op, data, _ = client.frame()
            assert op == OP_TEXT and orjson.loads(data)["type"] == "subscribed"
        want: list[list[bytes]] = [[] for _ in clients]
        step = 0

        def expect(item: Delivery | GapNotice) -> None:
            for i, consumer in enumerate(consumers):
                if isinstance(item, GapNotice):
                    if item.session_id == consumer.session_id:
                        want[i].append(ws_frame(OP_TEXT, item.json().encode()))
                elif consumer.topics is None or item.topic in consumer.topics:
                    want[i].append(item.envelope_wire())

        def settled() -> None:
            """Every client got what it is owed so far; with the sink, armed again (after
            the frames: the router takes a stream back before it writes, and arms it again
            once it wrote all)."""
            nonlocal step
            step += 1
            for i, client in enumerate(clients):
                got = [client.data_frames(1)[0][2] for _ in range(len(want[i]) - len(seen[i]))]
                seen[i] += got
                assert seen[i] == want[i], f"client {i}, step {step}"
            if on:
                for consumer in consumers:
                    wait_until(armed(consumer), what=f"the sink to be armed (step {step})")

        seen: list[list[bytes]] = [[] for _ in clients]
        ring = gateway.hub.ring
        assert ring is not None
        tids = {t: gateway.hub.ring_topic_id(gateway.session, t) for t in TOPICS}
        settled()
        # another writer's records (the engine's C feed): no upstream seq, any payload
        for k, p in enumerate(PAYLOADS * 2):
            topic = TOPICS[k % 3]
            ts = 1_700_000_000_000_000_000 + k
            seq = ring.write(gateway.session, tids[topic], p, ts)
            expect(Delivery(seq, gateway.session, topic, p, ts, None))
        settled()
        # a kernel session's publishes: without upstream seqs, then with some
        for useq in (None, 1000):
            batch = [
                (gateway.session, TOPICS[k % 3], PAYLOADS[k % 5], 1_800_000_000_000_000_000 + k,
                 None if useq is None or k % 2 else useq + k)
                for k in range(9)
            ]  # fmt: skip
            first = gateway.hub.publish_batch(batch)
            for k, (sid, topic, p, ts, u) in enumerate(batch):
                expect(Delivery(first + k, sid, topic, p, ts, u))
            settled()
        # a gap of the session, then a payload that is not UTF-8
        seq = gateway.hub.publish_gap(gateway.session, 3, "reconnect")
        expect(GapNotice(gateway.session, 3, "reconnect", seq, epoch=gateway.hub.epoch_hex))
        settled()
        bad = b"\xff\xfe" + b"\x01" * 10
        seq = ring.write(gateway.session, tids["t0"], bad, 5)
        expect(Delivery(seq, gateway.session, "t0", bad, 5, None))
        seq = ring.write(gateway.session, tids["t2"], b'{"after":1}', 6)
        expect(Delivery(seq, gateway.session, "t2", b'{"after":1}', 6, None))
        settled()
        return [[_no_seq(f) for f in got] for got in seen], consumers
    finally:
        for client in clients:
            client.close()
        wait_until(lambda: not gateway.consumers(), what="the streams to end")


def _no_seq(frame: bytes) -> bytes:
    """The frame with its seq taken out (the runs' ring sequence numbers differ)."""
    head = 2 + (2 if frame[1] == 126 else 0)
    body = orjson.loads(frame[head:])
    body.pop("seq", None)
    return orjson.dumps(body)


def test_envelope_streams_get_the_routers_frames_from_the_sink(gw: Gateway) -> None:  # noqa: F811
    sub = gw.app.state.control.subscriptions.create(
        {"session_id": gw.session, "topics": ["t1", "t2"], "consumer": "envelope-sub"}
    ).subscription
    queries = [
        f"session={gw.session}&topics=t0,t2&queue_size=10000",
        f"session={gw.session}&queue_size=10000",  # every topic of the session
        f"subscription={sub.id}",
    ]
    got: dict[bool, Any] = {}
    for on in (True, False):
        frames, consumers = run(gw, queries, on)
        got[on] = frames
        if on:
            for consumer in consumers:
                assert consumer.sink_arms >= 3  # first, after EXTRA, after GAP
                stops = consumer.sink_stops
                assert stops.get(GAP) == 1 and stops.get(EXTRA, 0) >= 1, stops
                assert stops.get(UTF8, 0) == (1 if consumer.topics is None or "t0" in
                                              consumer.topics else 0), stops  # fmt: skip
        else:
            assert all(c.sink_arms == 0 for c in consumers)
    assert got[True] == got[False]


def test_the_sink_sent_the_envelopes_itself(gw: Gateway) -> None:  # noqa: F811
    """While armed, the envelopes of another writer's records leave from the writer's thread
    (the sink counts them), not from the router."""
    client = RawClient(gw, f"session={gw.session}&topics=t0&envelope=1&queue_size=1000")
    try:
        consumer = consumer_of(gw, [])
        assert orjson.loads(client.frame()[1])["type"] == "subscribed"
        wait_until(armed(consumer), what="the sink to be armed")
        link: Any = consumer.sink
        before = link.entry.state()[ST_MESSAGES]
        ring = gw.hub.ring
        assert ring is not None
        tid = gw.hub.ring_topic_id(gw.session, "t0")
        want = []
        for k in range(20):
            seq = ring.write(gw.session, tid, b'{"k":%d}' % k, 7)
            want.append(Delivery(seq, gw.session, "t0", b'{"k":%d}' % k, 7, None).envelope_wire())
        assert [client.data_frames(1)[0][2] for _ in want] == want
        assert link.entry.state()[ST_MESSAGES] - before == 20
        assert consumer.sink_armed
    finally:
        client.close()


def test_a_topic_new_to_an_every_topic_stream_goes_through_python_once(
    gw: Gateway,  # noqa: F811
) -> None:
    """The sink has no middle for a topic the session publishes after the stream armed: it
    stops there, the router sends that envelope, and the next arm tells the sink the topic
    (its next records leave from the writer's thread)."""
    client = RawClient(gw, f"session={gw.session}&envelope=1&queue_size=1000")
    try:
        consumer = consumer_of(gw, [])
        assert orjson.loads(client.frame()[1])["type"] == "subscribed"
        wait_until(armed(consumer), what="the sink to be armed")
        ring = gw.hub.ring
        assert ring is not None
        topic = f"new-{os.getpid()}-{time.monotonic_ns()}"
        tid = gw.hub.ring_topic_id(gw.session, topic)
        one = ring.write(gw.session, tid, b'{"n":1}', 8)
        want = Delivery(one, gw.session, topic, b'{"n":1}', 8, None).envelope_wire()
        assert client.data_frames(1)[0][2] == want
        assert consumer.sink_stops.get(TOPIC) == 1
        wait_until(armed(consumer), what="the sink to be armed again")
        link: Any = consumer.sink
        before = link.entry.state()[ST_MESSAGES]
        two = ring.write(gw.session, tid, b'{"n":2}', 9)
        want = Delivery(two, gw.session, topic, b'{"n":2}', 9, None).envelope_wire()
        assert client.data_frames(1)[0][2] == want
        assert link.entry.state()[ST_MESSAGES] == before + 1  # the sink sent it
        assert consumer.sink_stops.get(TOPIC) == 1
    finally:
        client.close()


def test_the_sdk_takes_the_sinks_envelopes_in_its_shim_read(
    gw: Gateway,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK's one-call shim read knows the sink's exact envelope: every one the sink sent
    (escapes, control bytes, multi-byte UTF-8, a 4-byte frame head) is taken by it, not left
    to the Python path, and comes out as the RingMessage the Python path makes of it."""
    from gateway.client.stream import StreamSource, stream_url

    if stream_mod._shim_read() is None:
        pytest.skip("the shim does not load")
    made = count_shim_envelopes(monkeypatch)
    url = stream_url(f"ws://127.0.0.1:{gw.server.port}", ["t0"], gw.session)
    source = StreamSource(url + "&queue_size=1000")
    try:
        consumer = consumer_of(gw, [])
        wait_until(armed(consumer), what="the sink to be armed")
        # What comes first (a past gap of the module's earlier tests: the Python path's, and
        # envelopes in the same read behind it would be too), read before the test's records.
        while source.read(timeout=0.3):
            pass
        made.clear()
        ring = gw.hub.ring
        assert ring is not None
        tid = gw.hub.ring_topic_id(gw.session, "t0")
        want = []
        for k, payload in enumerate(PAYLOADS):
            seq = ring.write(gw.session, tid, payload, 100 + k)
            want.append((seq, gw.session, ring_topic(gw.session, "t0"), 100 + k, payload, -1))
        got: list[Any] = []
        deadline = time.monotonic() + 20
        while len(got) < len(want) and time.monotonic() < deadline:
            got += source.read(timeout=0.5)
        assert [tuple(e) for e in got] == want
        assert sum(made) == len(want)
        assert consumer.sink_armed  # (the sink sent them, not the router)
    finally:
        source.close()

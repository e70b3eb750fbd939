"""The hub: routing by session and topic, sequence numbers shared with the ring, gap events,
the ring's `$gap` records and placeholders, payload copies, closing."""

from __future__ import annotations

import asyncio
import json

import pytest

from dataplane.ring import RingReader, RingWriter
from gateway.hub import Delivery, DeliveryOptions, GapNotice, Hub, HubClosedError, ring_topics
from gateway.hub.consumer import ConsumerClosed
from gateway.hub.names import RING_GAP_TOPIC, ring_topic

from .conftest import msg, settle


def payloads(events: list[object]) -> list[bytes]:
    return [e.payload for e in events if isinstance(e, Delivery)]


def test_consumers_get_their_topics_in_order() -> None:
    async def main() -> None:
        hub = Hub()
        a = hub.subscribe(1, ["a"])
        ab = hub.subscribe(1, ["a", "b"])
        every = hub.subscribe(1)
        other = hub.subscribe(2, ["a"])
        first = hub.publish_batch([msg(1, "a", 0), msg(1, "b", 1), msg(2, "a", 2), msg(1, "c", 3)])
        hub.publish_batch([msg(1, "a", 4)])
        await settle(hub)
        assert first == 1 and hub.next_seq == 6
        assert payloads(a.poll()) == [b"a#0", b"a#4"]
        assert payloads(ab.poll()) == [b"a#0", b"b#1", b"a#4"]
        got = every.poll()
        assert payloads(got) == [b"a#0", b"b#1", b"c#3", b"a#4"]
        assert [e.seq for e in got if isinstance(e, Delivery)] == [1, 2, 4, 5]
        assert payloads(other.poll()) == [b"a#2"]
        assert a.poll() == []

    asyncio.run(main())


def test_a_message_is_one_shared_delivery_with_its_fields() -> None:
    async def main() -> None:
        hub = Hub()
        x = hub.subscribe(7, ["t"])
        y = hub.subscribe(7, ["t"])
        hub.publish_batch([(7, "t", b'{"p":1}', 123, 99), (7, "t", b"\xff\x00", 124, None)])
        await settle(hub)
        (dx1, dx2), (dy1, _) = x.poll(), y.poll()
        assert dx1 is dy1  # made once, shared
        assert isinstance(dx1, Delivery) and isinstance(dx2, Delivery)
        assert (dx1.seq, dx1.session_id, dx1.topic, dx1.recv_ts_ns, dx1.upstream_seq) == (
            1,
            7,
            "t",
            123,
            99,
        )
        assert dx1.text == '{"p":1}'
        assert json.loads(dx1.envelope()) == {
            "type": "msg",
            "seq": 1,
            "session": 7,
            "topic": "t",
            "recv_ts_ns": 123,
            "upstream_seq": 99,
            "payload": '{"p":1}',
        }
        assert dx2.text is None
        env = json.loads(dx2.envelope())
        assert env["payload_b64"] == "/wA=" and "payload" not in env and "upstream_seq" not in env

    asyncio.run(main())


def test_sequence_numbers_are_the_rings(ring: RingWriter, ring_name: str) -> None:
    async def main() -> None:
        ring.write(9, ring.register_topic("someone-else"), b"before the hub")
        hub = Hub(ring=ring)
        assert hub.next_seq == 2
        reader = RingReader.attach(ring_name, topics=ring_topics(1, ["a"]), start="oldest")
        consumer = hub.subscribe(1, ["a"])
        hub.publish_batch([msg(1, "a", 0), msg(1, "b", 1), msg(1, "a", 2)])
        gap_seq = hub.publish_gap(1, 17, "reconnect")
        hub.publish_batch([msg(1, "a", 3)])
        await settle(hub)
        events = consumer.poll()
        seqs = [e.seq for e in events]
        assert seqs == [2, 4, gap_seq, 6] and gap_seq == 5
        assert events[2] == GapNotice(1, 17, "reconnect", 5, epoch=hub.epoch_hex)
        assert hub.epoch == ring.epoch  # the run is the ring's
        ring_events = reader.read_batch(timeout=1.0)
        assert [(e.seq, e.topic) for e in ring_events] == [
            (2, "1:a"),
            (4, "1:a"),
            (5, RING_GAP_TOPIC),
            (6, "1:a"),
        ]
        gap = ring_events[2]
        assert gap.session_id == 1
        assert json.loads(bytes(gap.payload)) == {
            "type": "gap",
            "seq": 5,
            "session": 1,
            "lost": 17,
            "reason": "reconnect",
            "ts_ns": gap.ts_ns,
            "epoch": f"{ring.epoch:016x}",
        }
        assert hub.counters.ring_written == 5
        reader.close()

    asyncio.run(main())


def test_gap_events_reach_every_consumer_of_the_session_only() -> None:
    async def main() -> None:
        hub = Hub()
        a, b, every, other = (
            hub.subscribe(1, ["a"]),
            hub.subscribe(1, ["b"]),
            hub.subscribe(1),
            hub.subscribe(2, ["a"]),
        )
        hub.publish_batch([msg(1, "a", 0)])
        hub.publish_gap(1, None, "reconnect after heartbeat timeout")
        hub.publish_batch([msg(1, "b", 1)])
        await settle(hub)
        notice = GapNotice(1, None, "reconnect after heartbeat timeout", 2, epoch=hub.epoch_hex)
        assert a.poll()[1:] == [notice]
        assert b.poll()[0] == notice
        assert every.poll()[1] == notice
        assert other.poll() == []
        assert json.loads(notice.json()) == {
            "type": "gap",
            "seq": 2,
            "session": 1,
            "lost": None,
            "reason": "reconnect after heartbeat timeout",
            "epoch": hub.epoch_hex,
        }

    asyncio.run(main())


def test_ring_placeholders_keep_numbers_aligned(ring_name: str) -> None:
    """A message the ring cannot hold (too large, or no topic id left) becomes a `$gap`
    record with lost=1 in the ring, while the downstream consumers still get it."""

    async def main() -> None:
        with RingWriter.create(ring_name, 1 << 16, max_topics=3) as ring:
            hub = Hub(ring=ring)  # ids: $gap, then room for one more topic
            reader = RingReader.attach(ring_name, start="oldest")
            consumer = hub.subscribe(1)
            big = b"x" * (ring.max_payload + 1)
            hub.publish_batch([msg(1, "a", 0), (1, "a", big, 0, None), msg(1, "b", 2)])
            await settle(hub)
            assert [e.seq for e in consumer.poll()] == [1, 2, 3]
            events = reader.read_batch(timeout=1.0)
            assert [(e.seq, e.topic) for e in events] == [
                (1, "1:a"),
                (2, RING_GAP_TOPIC),
                (3, RING_GAP_TOPIC),
            ]
            reasons = [json.loads(bytes(e.payload))["reason"] for e in events[1:]]
            assert reasons == ["too_large_for_ring", "ring_topic_table_full"]
            assert hub.counters.ring_replaced == 2
            reader.close()

    asyncio.run(main())


def test_payloads_that_are_not_bytes_are_copied() -> None:
    async def main() -> None:
        hub = Hub()
        consumer = hub.subscribe(1, ["a"])
        buffer = bytearray(b"first")
        hub.publish_batch([(1, "a", buffer, 0, None)])  # type: ignore[list-item]
        buffer[:] = b"reuse"
        await settle(hub)
        (item,) = consumer.poll()
        assert isinstance(item, Delivery) and item.payload == b"first"

    asyncio.run(main())


def test_bad_messages_are_a_type_error() -> None:
    hub = Hub()
    with pytest.raises(TypeError, match="session_id, topic, payload"):
        hub.publish_batch([(1, "a", b"x")])  # type: ignore[list-item]


def test_long_topics_get_unique_ring_names() -> None:
    a, b = "t" * 100 + "A", "t" * 100 + "B"
    na, nb = ring_topic(3, a), ring_topic(3, b)
    assert na != nb and na.startswith("3:ttt") and len(na.encode()) <= 56
    assert ring_topic(3, "btcusdt@trade") == "3:btcusdt@trade"


def test_closing_the_hub_ends_every_consumer_with_1001(ring_name: str) -> None:
    async def main() -> None:
        ring = RingWriter.create(ring_name, 1 << 16)
        hub = Hub(ring=ring)
        consumer = hub.subscribe(1, ["a"])
        waiting = asyncio.create_task(consumer.get())
        await settle(hub)
        hub.close()
        with pytest.raises(ConsumerClosed) as closed:
            await waiting
        assert (closed.value.code, closed.value.kind) == (1001, "shutdown")
        assert ring.closed
        assert hub.publish_batch([msg(1, "a", 0)]) == hub.next_seq  # ignored, no error
        with pytest.raises(HubClosedError):
            hub.subscribe(1, ["a"])
        assert hub.consumers() == []

    asyncio.run(main())


def test_a_loop_without_consumers_is_no_longer_fed() -> None:
    async def main() -> None:
        hub = Hub()
        consumer = hub.subscribe(1, ["a"])
        (follower,) = hub.followers()
        consumer.close()
        assert hub.followers() == []
        assert follower.dead  # its thread ended, its reader detached
        hub.publish_batch([msg(1, "a", 0)])
        again = hub.subscribe(1, ["a"])
        hub.publish_batch([msg(1, "a", 1)])
        await settle(hub)
        assert payloads(again.poll()) == [b"a#1"]
        stats = {s.name: s for s in hub.consumer_stats()}["anonymous"]
        assert (stats.opened, stats.connected, stats.disconnects) == (2, 1, {"client": 1})

    asyncio.run(main())


def test_consumers_on_two_loops_each_get_everything() -> None:
    """Each loop has its own hand-off and router; the engine offers the batch to both."""
    import threading

    hub = Hub()
    ready = threading.Barrier(3)
    results: dict[str, list[bytes]] = {}

    def run(tag: str) -> None:
        async def main() -> None:
            consumer = hub.subscribe(1, ["a"], DeliveryOptions(queue_size=100))
            ready.wait()
            got: list[bytes] = []
            while len(got) < 50:
                got += payloads(await consumer.get())
            results[tag] = got

        asyncio.run(main())

    threads = [threading.Thread(target=run, args=(t,)) for t in ("x", "y")]
    for t in threads:
        t.start()
    ready.wait()
    for i in range(50):
        hub.publish_batch([msg(1, "a", i)])
    for t in threads:
        t.join(10)
    expected = [f"a#{i}".encode() for i in range(50)]
    assert results == {"x": expected, "y": expected}


def test_records_written_to_the_ring_without_the_hub_reach_its_consumers() -> None:
    """The ring is the consumers' one source: what another writer puts there (C in the
    engine's poll) is routed like the hub's own, with the ring's numbers, under the topic
    the hub registered (`ring_topic_id`) or the ring name's (`<session>:<topic>`)."""

    async def main() -> None:
        hub = Hub()  # a private ring
        ring = hub.ring
        assert ring is not None and hub.private_ring and ring.path is None
        t0 = hub.subscribe(1, ["t0"])
        every = hub.subscribe(1)
        first = hub.publish_batch([msg(1, "t0", 0)])
        tid = hub.ring_topic_id(1, "t0")
        other = ring.register_topic(ring_topic(1, "x"))
        second = ring.write_columns([1, 1, 2], [tid, other, tid], [b"t0#1", b"x#2", b"t0#3"])
        await settle(hub)
        got = t0.poll()
        assert [(d.seq, d.topic, d.payload) for d in got] == [  # type: ignore[union-attr]
            (first, "t0", b"t0#0"),
            (second, "t0", b"t0#1"),
        ]
        assert [(d.seq, d.topic) for d in every.poll()] == [  # type: ignore[union-attr]
            (first, "t0"),
            (second, "t0"),
            (second + 1, "x"),
        ]
        hub.close()

    asyncio.run(main())


def test_published_counts_what_other_writers_put_in_the_ring(ring: RingWriter) -> None:
    """The engines' C feeds write the ring themselves: wsgw_hub_published (the dashboard's
    hub rate, the soak's count) counts their messages with the hub's own, not its gaps."""
    hub = Hub(ring=ring)
    try:
        hub.publish_batch([msg(1, "t0", 0), msg(1, "t0", 1)])
        hub.publish_gap(1, None, "reconnect")
        assert hub.published_total == 2
        tid = hub.ring_topic_id(1, "t0")
        ring.write_columns([1, 1, 1], [tid, tid, tid], [b"c0", b"c1", b"c2"])
        assert hub.published_total == 5
        hub.publish_batch([msg(1, "t0", 2)])
        assert hub.published_total == 6 and hub.counters.published == 3
    finally:
        hub.close()

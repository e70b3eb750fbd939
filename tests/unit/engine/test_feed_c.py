"""The C feed path at the C level: frames injected into an engine without a port.

A flow with a feed attached and armed: the poll turns the complete data frames of known
topics at the head of the flow's bytes into ring records, and reports their bytes as fed
at the next sync; the first frame that is anything else disarms the feed and stays in the
flow's ring for Python, with everything after it. Arming honours only the exact position
where the bytes not yet handed to Python begin.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Iterator

import pytest

from dataplane.feed import CFeed
from dataplane.ring import RingMessage, RingReader, RingWriter
from dataplane.shim import EngineBinding, build_topic_spec, flow_set_feed
from gateway.dialects.binance import BinanceDialect
from gateway.hub.names import ring_topic
from tests.unit.engine.test_fastpath_acks import frame
from tests.unit.engine.test_fastpath_c import make_engine, register

SID = 7
RCV_NXT = 1000
TOPICS = ("btcusdt@trade", "ethusdt@trade")
VIRTUAL_NOW_NS = 10**9


def ws_frame(payload: bytes, first: int = 0x81) -> bytes:
    """A server frame (unmasked) with the shortest length encoding."""
    n = len(payload)
    if n < 126:
        return bytes([first, n]) + payload
    if n < 1 << 16:
        return bytes([first, 126]) + struct.pack("!H", n) + payload
    return bytes([first, 127]) + struct.pack("!Q", n) + payload


def data(topic: str, i: int, pad: int = 0) -> bytes:
    body = f'{{"stream":"{topic}","data":{{"i":{i},"p":"{"x" * pad}"}}}}'
    return body.encode()


class Rig:
    """An engine with one flow, a memfd ring with a reader, a feed on the flow."""

    def __init__(self, ring_size: int = 1 << 16) -> None:
        self.engine: EngineBinding = make_engine()
        self.engine.set_time(VIRTUAL_NOW_NS)
        self.slot, self.flow = register(self.engine, rcv_nxt=RCV_NXT, ring=ring_size)
        self.ring = RingWriter.create(None, 1 << 20)
        self.reader = RingReader.attach_fd(self.ring.fd, copy=True, start="oldest")
        paths = BinanceDialect.topic_paths
        spec = build_topic_spec(paths.paths, presence=paths.presence, strict=paths.strict)
        self.feed = CFeed(self.ring, SID, spec, 4096)
        self.tids = {}
        for topic in TOPICS:
            tid = self.ring.register_topic(ring_topic(SID, topic))
            self.tids[topic] = tid
            assert self.feed.set_topic(topic, tid)
        assert flow_set_feed(self.engine.handle, self.slot, self.feed.handle) == 0
        self.seq = RCV_NXT  # next sequence number the peer sends
        self.python_seq = RCV_NXT  # what Python was handed up to

    def send(self, *payloads: bytes) -> None:
        """Inject one segment per payload, poll once."""
        frames = []
        for p in payloads:
            frames.append(frame(self.seq, p))
            self.seq += len(p)
        assert self.engine.inject(frames) == len(frames)
        self.engine.poll(0, 0)

    def sync(self) -> tuple[bytes, int]:
        """(bytes handed to Python, bytes fed) since the last sync."""
        out = self.engine.flow_sync(self.slot, True)
        data, rcv_nxt, fed = out[0], out[1], out[-1]
        assert isinstance(data, bytes) and isinstance(fed, int)
        self.python_seq += fed + len(data)
        assert rcv_nxt == self.python_seq
        return data, fed

    def records(self) -> list[tuple[int, str, bytes]]:
        out = []
        for event in self.reader.poll():
            assert isinstance(event, RingMessage)
            out.append((event.session_id, event.topic, bytes(event.payload)))
        return out

    def close(self) -> None:
        self.engine.destroy()
        self.feed.close()
        self.reader.close()
        self.ring.close()


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig()
    yield r
    r.close()


def names(topic: str) -> str:
    return ring_topic(SID, topic)


def test_data_frames_become_ring_records_and_their_bytes_are_fed(rig: Rig) -> None:
    rig.feed.arm(RCV_NXT)
    a, b = data(TOPICS[0], 1), data(TOPICS[1], 2)
    rig.send(ws_frame(a) + ws_frame(b))
    assert rig.records() == [(SID, names(TOPICS[0]), a), (SID, names(TOPICS[1]), b)]
    assert rig.sync() == (b"", len(ws_frame(a) + ws_frame(b)))
    stats = rig.feed.stats()
    assert stats["messages"] == 2 and stats["armed"] == 1
    delta = rig.feed.take()
    assert delta.messages == 2
    assert delta.topic_messages == {TOPICS[0]: 1, TOPICS[1]: 1}
    assert delta.last_message_ns > 0 and delta.latency_ns


def test_a_control_frame_stops_the_feed_and_it_and_the_rest_go_to_python(rig: Rig) -> None:
    rig.feed.arm(RCV_NXT)
    a, b = data(TOPICS[0], 1), data(TOPICS[0], 2)
    ping = ws_frame(b"hi", 0x89)
    rig.send(ws_frame(a) + ping + ws_frame(b))
    assert rig.records() == [(SID, names(TOPICS[0]), a)]
    assert rig.sync() == (ping + ws_frame(b), len(ws_frame(a)))
    assert rig.feed.stats()["armed"] == 0
    # Disarmed: later frames go to Python too, until it arms again where it stands.
    c = data(TOPICS[0], 3)
    rig.send(ws_frame(c))
    assert rig.records() == []
    assert rig.sync() == (ws_frame(c), 0)
    rig.feed.arm(rig.python_seq)
    d = data(TOPICS[0], 4)
    rig.send(ws_frame(d))
    assert rig.records() == [(SID, names(TOPICS[0]), d)]
    assert rig.sync() == (b"", len(ws_frame(d)))


@pytest.mark.parametrize(
    "odd",
    [
        ws_frame(b'{"stream":"btcusdt@trade","data":1}', 0x01),  # a first fragment
        ws_frame(b'{"stream":"btcusdt@trade","data":1}', 0x82),  # binary
        ws_frame(b'{"stream":"btcusdt@trade","data":1}', 0xC1),  # RSV1 (deflate)
        bytes([0x81, 0x80 | 4]) + b"abcd" + b"xxxx",  # masked
        ws_frame(b'{"stream":"btcusdt@depth","data":1}'),  # a topic not in the table
        ws_frame(b'{"result":null,"id":1}'),  # an ack: no topic
        ws_frame(b'{"stream":"btc\\u0075sdt@trade","data":1}'),  # an escaped topic
        ws_frame(b'{"stream":"btcusdt@trade","data":"\xff"}'),  # not UTF-8
        ws_frame(data(TOPICS[0], 9, pad=5000)),  # beyond max_payload
    ],
)
def test_anything_but_a_plain_data_frame_of_a_known_topic_goes_to_python(
    rig: Rig, odd: bytes
) -> None:
    rig.feed.arm(RCV_NXT)
    a = data(TOPICS[0], 1)
    after = ws_frame(data(TOPICS[0], 2))
    payloads = (
        [ws_frame(a) + odd[:1000], odd[1000:] + after]
        if len(odd) > 1000
        else [ws_frame(a) + odd + after]
    )
    payloads = [p for p in payloads if p]
    # (segments of at most MSS-ish sizes: a long frame spans several)
    segments: list[bytes] = []
    for p in payloads:
        segments.extend(p[i : i + 1400] for i in range(0, len(p), 1400))
    rig.send(*segments)
    assert rig.records() == [(SID, names(TOPICS[0]), a)]
    assert rig.sync() == (odd + after, len(ws_frame(a)))


def test_a_frame_split_across_segments_of_one_burst_is_taken(rig: Rig) -> None:
    rig.feed.arm(RCV_NXT)
    payload = data(TOPICS[0], 1, pad=300)
    a = ws_frame(payload)
    rig.send(a[:1], a[1:3], a[3:100], a[100:])
    assert rig.records() == [(SID, names(TOPICS[0]), payload)]
    assert rig.sync() == (b"", len(a))


def test_a_frame_incomplete_when_the_poll_returns_goes_to_python(rig: Rig) -> None:
    rig.feed.arm(RCV_NXT)
    a, b = ws_frame(data(TOPICS[0], 1)), ws_frame(data(TOPICS[0], 2))
    rig.send(a + b[:5])
    assert len(rig.records()) == 1
    assert rig.sync() == (b[:5], len(a))
    assert rig.feed.stats()["armed"] == 0
    rig.send(b[5:])
    assert rig.records() == []
    assert rig.sync() == (b[5:], 0)


def test_a_stale_arm_is_refused(rig: Rig) -> None:
    rig.send(ws_frame(data(TOPICS[0], 1)))
    handed, _ = rig.sync()  # Python has these bytes now...
    rig.feed.arm(RCV_NXT)  # ...but arms where it stood before them
    rig.send(ws_frame(data(TOPICS[0], 2)))
    assert rig.records() == []
    assert rig.feed.stats()["arms_refused"] == 1
    rig.sync()
    rig.feed.arm(rig.python_seq)
    rig.send(ws_frame(data(TOPICS[0], 3)))
    assert len(rig.records()) == 1
    assert handed


def test_a_slow_path_segment_of_the_flow_stops_the_feed(rig: Rig) -> None:
    rig.feed.arm(RCV_NXT)
    a = ws_frame(data(TOPICS[0], 1))
    later = ws_frame(data(TOPICS[0], 2))
    # Out of order: the segment after a missing one goes to the slow path.
    gap = frame(rig.seq + 10, later)
    assert rig.engine.inject([gap]) == 1
    rig.engine.poll(0, 0)
    assert rig.feed.stats()["armed"] == 0
    rig.engine.flow_sync(rig.slot, True)
    rig.send(a)
    assert rig.records() == []


def test_unsubscribed_topics_go_to_python(rig: Rig) -> None:
    rig.feed.remove_topic(TOPICS[1])
    rig.feed.arm(RCV_NXT)
    a, b = data(TOPICS[0], 1), data(TOPICS[1], 2)
    rig.send(ws_frame(a) + ws_frame(b))
    assert rig.records() == [(SID, names(TOPICS[0]), a)]
    assert rig.sync() == (ws_frame(b), len(ws_frame(a)))
    assert rig.feed.stats()["stop_unknown_topic"] == 1


def test_a_frame_across_the_flow_rings_end_is_taken_whole() -> None:
    rig = Rig(ring_size=4096)
    try:
        rig.feed.arm(RCV_NXT)
        sent: list[bytes] = []
        for i in range(40):  # ~ 250 bytes each: the ring wraps several times
            p = data(TOPICS[i % 2], i, pad=180)
            sent.append(p)
            rig.send(ws_frame(p))
            assert rig.sync()[0] == b""
        assert [r[2] for r in rig.records()] == sent
    finally:
        rig.close()


def test_records_are_numbered_with_the_hubs_writes_in_between() -> None:
    """The ring's writer lock: C feed writes and Python writes share one sequence."""
    rig = Rig()
    try:
        rig.feed.arm(RCV_NXT)
        rig.send(ws_frame(data(TOPICS[0], 1)))
        seq = rig.ring.write(SID, rig.tids[TOPICS[1]], b"python", 0)
        rig.send(ws_frame(data(TOPICS[0], 2)))
        events = rig.reader.poll()
        assert [e.seq for e in events if isinstance(e, RingMessage)] == [seq - 1, seq, seq + 1]
    finally:
        rig.close()


def test_a_frame_split_across_two_bursts_of_one_poll_waits_for_its_rest(rig: Rig) -> None:
    """The first burst (32 frames) ends inside a frame: the armed feed keeps it in the ring
    and the poll goes on; the next burst completes it and the feed takes it."""
    rig.engine.set_time(0)  # the real clock: the poll runs until its budget
    rig.feed.arm(RCV_NXT)
    payloads = [data(TOPICS[i % 2], i) for i in range(32)]
    stream = b"".join(ws_frame(p) for p in payloads)
    cut = len(stream) - 10  # 31 whole frames and most of the 32nd in the first 32 segments
    pieces = [stream[i * (cut // 32) : (i + 1) * (cut // 32)] for i in range(31)]
    pieces.append(stream[31 * (cut // 32) : cut])
    pieces.append(stream[cut:])
    frames = []
    for piece in pieces:
        frames.append(frame(rig.seq, piece))
        rig.seq += len(piece)
    assert rig.engine.inject(frames) == 33
    rig.engine.poll(0, 5_000_000)
    assert [r[2] for r in rig.records()] == payloads
    assert rig.sync() == (b"", len(stream))
    assert rig.feed.stats()["stops"] == 0


def python_side(buf: bytes) -> tuple[list[bytes], bool]:
    """A reference reader of every byte C handed over, from the start: (the data messages
    of its complete frames in order, what the Python path publishes; whether it stands at a
    message boundary: every byte parsed, no fragmented message held). Text and binary data
    frames with a stream are messages; fragments are reassembled; control frames skipped."""
    out: list[bytes] = []
    pos = 0
    fragments: list[bytes] | None = None
    while len(buf) - pos >= 2:
        n = buf[pos + 1] & 0x7F
        hlen = 2 + (2 if n == 126 else 8 if n == 127 else 0)
        if len(buf) - pos < hlen:
            break
        if n == 126:
            n = int.from_bytes(buf[pos + 2 : pos + 4], "big")
        elif n == 127:
            n = int.from_bytes(buf[pos + 2 : pos + 10], "big")
        if len(buf) - pos < hlen + n:
            break
        first, payload = buf[pos], buf[pos + hlen : pos + hlen + n]
        pos += hlen + n
        opcode = first & 0x0F
        if opcode >= 8:
            continue
        if opcode in (1, 2) and not first & 0x80:
            fragments = [payload]
            continue
        if opcode == 0:
            assert fragments is not None
            fragments.append(payload)
            if not first & 0x80:
                continue
            payload, fragments = b"".join(fragments), None
        if b'"stream"' in payload:
            out.append(payload)
    return out, fragments is None and pos == len(buf)


@pytest.mark.parametrize("seed", range(12))
def test_order_holds_whatever_the_segmentation_and_the_mix(seed: int) -> None:
    """A random mix of frames (data of known and unknown topics, pings, fragments, binary)
    cut into segments at frame boundaries or anywhere, in random bursts; a model of Python
    reads what C hands over, publishes its data messages to the same ring and arms the feed
    whenever it stands at a message boundary. The ring must hold every data message once,
    in stream order, and C must have carried some of them."""
    import random

    rng = random.Random(seed)
    rig = Rig(ring_size=1 << 14)
    try:
        stream = b""
        bounds = [0]
        expected: list[bytes] = []
        for i in range(400):
            kind = rng.random()
            p = data(rng.choice((*TOPICS, "xrpusdt@trade")), i, pad=rng.choice((0, 0, 50, 900)))
            if kind < 0.75:
                stream += ws_frame(p)
                expected.append(p)
            elif kind < 0.85:
                stream += ws_frame(b"ping", 0x89)
            elif kind < 0.93:
                stream += ws_frame(p[:7], 0x01) + ws_frame(p[7:], 0x80)
                expected.append(p)
            else:
                stream += ws_frame(p, 0x82)
                expected.append(p)
            bounds.append(len(stream))
        handed = b""
        published = 0
        tid = rig.tids[TOPICS[0]]
        at, k = 0, 0
        while at < len(stream):
            burst = []
            for _ in range(rng.randint(1, 6)):
                if at >= len(stream):
                    break
                if rng.random() < 0.7:  # up to a frame boundary (1 to 3 frames on)
                    k = min(len(bounds) - 1, max(k, bisect_right(bounds, at)) + rng.randint(0, 2))
                    end = max(bounds[k], at + 1)
                else:
                    end = at + rng.choice((1, 2, 7, 60, 300, 1400))
                end = min(end, len(stream), at + 1400)
                burst.append(stream[at:end])
                at = end
            rig.send(*burst)
            got, _ = rig.sync()
            handed += got
            messages, boundary = python_side(handed)
            for p in messages[published:]:  # the Python path publishes them
                rig.ring.write(SID, tid, p, 0)
            published = len(messages)
            if boundary:
                rig.feed.arm(rig.python_seq)
        assert [r[2] for r in rig.records()] == expected
        stats = rig.feed.stats()
        assert stats["messages"] > 0 and stats["stops"] > 0
    finally:
        rig.close()


def test_a_ring_closed_under_an_armed_feed_costs_its_messages_not_the_process() -> None:
    """The hub may close its ring before an engine let go of a feed (a shutdown out of
    order): the feed holds the mapping, its writes fail and are counted."""
    rig = Rig()
    try:
        rig.feed.arm(RCV_NXT)
        rig.send(ws_frame(data(TOPICS[0], 1)))
        assert len(rig.records()) == 1
        rig.reader.close()
        rig.ring.close()
        rig.send(ws_frame(data(TOPICS[0], 2)), ws_frame(data(TOPICS[0], 3)))
        stats = rig.feed.stats()
        assert stats["messages"] == 3 and stats["ring_errors"] == 2
        assert rig.sync() == (b"", 3 * len(ws_frame(data(TOPICS[0], 1))))
    finally:
        rig.engine.destroy()
        rig.feed.close()  # the last holder: the mapping goes now

"""The C sink's NATS slots alone (sink.c, gateway.hub.sink) on a socketpair: the bytes are
nats-py's PUB without reply (gateway.hub.nats_c.pub), every session's records go out, and C
stops at a topic it has no subject for, at any $gap record, and exactly at a full socket;
the records of a burst leave in one send at its end."""

from __future__ import annotations

import socket
import time
from functools import partial

import pytest

from dataplane.ring import RingWriter
from dataplane.shim import stream_sink as c
from gateway.hub.nats_c import pub
from gateway.hub.sink import (
    GAP,
    ST_ARMED,
    ST_NEXT_SEQ,
    ST_REASON,
    ST_SENDS,
    TOPIC,
    StreamSink,
)
from tests.unit.hub.test_sink import drain, overfill, receive, resumed, small_buffers

OUT_MAX_AGE_NS = 1_000_000  # sink.c's: a buffered PUB this old goes out inside a burst


def test_pubs_are_nats_pys_bytes_and_stop_where_python_must_write(
    ring: RingWriter, pair: tuple[socket.socket, socket.socket], sink: StreamSink
) -> None:
    gap, a, b = (ring.register_topic(n) for n in ("$gap", "1:a", "2:b"))
    entry = sink.add_nats(pair[0].fileno())
    assert not entry.subject(a, b"has space") and not entry.subject(a, b"")
    assert entry.subject(a, b"wsgw.1.a") and entry.subject(b, b"wsgw.2.b")
    assert entry.arm(ring.last_seq + 1)
    payloads = [b"", b"x", b"\xff\r\n", b"y" * 70000]
    for p in payloads:
        ring.write(1, a, p)
        ring.write(2, b, p)  # every session
    want = b"".join(pub("wsgw.1.a", p) + pub("wsgw.2.b", p) for p in payloads)
    assert receive(pair[1], len(want)) == want
    new = ring.register_topic("1:new")
    seq = ring.write(1, new, b"z")  # no subject yet: Python's
    state = entry.state()
    assert (state[ST_ARMED], state[ST_REASON], state[ST_NEXT_SEQ]) == (0, TOPIC, seq)
    entry.disarm()
    assert entry.subject(new, b"wsgw.1.new") and entry.arm(ring.last_seq + 1)
    ring.write(1, new, b"z2")
    seq = ring.write(7, gap, b"{}")  # any session's gap: Python's
    state = entry.state()
    assert (state[ST_ARMED], state[ST_REASON], state[ST_NEXT_SEQ]) == (0, GAP, seq)
    assert drain(pair[1]) == pub("wsgw.1.new", b"z2")


def test_a_full_socket_stops_the_nats_slot_exactly(
    ring: RingWriter, pair: tuple[socket.socket, socket.socket], sink: StreamSink
) -> None:
    small_buffers(pair)
    topic = ring.register_topic("1:a")
    entry = sink.add_nats(pair[0].fileno())
    assert entry.subject(topic, b"s.1.a")
    first, payloads, state = overfill(ring, entry, topic)
    got = resumed(pair[1], entry, first, payloads, state, partial(pub, "s.1.a"))
    assert got == b"".join(pub("s.1.a", payloads[s]) for s in range(first, first + 200))


def test_a_burst_goes_out_in_one_send_at_its_end(
    ring: RingWriter, pair: tuple[socket.socket, socket.socket], sink: StreamSink
) -> None:
    """The records of one burst (an engine poll's feeds: several ring writes) wait in the
    slot's buffer and leave in one send when the burst ends; a write call outside a burst
    is a burst of its own (one send for its 300 records). A burst that a preemption made
    longer than the buffer's age limit (OUT_MAX_AGE_NS, 1 ms) may send early, by design:
    such a try is drained and made again (a loaded CI machine saw one)."""
    a, b = ring.register_topic("1:a"), ring.register_topic("2:b")
    entry = sink.add_nats(pair[0].fileno())
    assert entry.subject(a, b"s.1.a") and entry.subject(b, b"s.2.b")
    assert entry.arm(ring.last_seq + 1)
    want = b"".join(pub("s.1.a", b"%d" % i) + pub("s.2.b", b"%d" % i) for i in range(50))
    pair[1].setblocking(False)
    for _try in range(20):
        sends = entry.state()[ST_SENDS]
        c.burst_begin()
        try:
            c.burst_begin()  # bursts nest: the outermost end sends
            began = time.monotonic_ns()
            for i in range(50):
                ring.write(1, a, b"%d" % i)
                ring.write(2, b, b"%d" % i)
            c.burst_end()
            state = entry.state()
            inside = time.monotonic_ns() - began < OUT_MAX_AGE_NS
            if inside:
                with pytest.raises(BlockingIOError):
                    pair[1].recv(1)  # nothing sent inside the burst
                assert (state[ST_ARMED], state[ST_SENDS]) == (1, sends)
                assert state[ST_NEXT_SEQ] == ring.last_seq + 1  # buffered: C's, not Python's
        finally:
            c.burst_end()
        assert drain(pair[1]) == want  # every record, once, in order, either way
        if inside:
            assert entry.state()[ST_SENDS] == sends + 1
            break
    else:
        pytest.fail("no burst of 100 writes stayed under 1 ms in 20 tries")
    sends = entry.state()[ST_SENDS]
    ring.write_batch([(1, a, b"x%d" % i) for i in range(300)])
    assert entry.state()[ST_SENDS] == sends + 1
    assert drain(pair[1]) == b"".join(pub("s.1.a", b"x%d" % i) for i in range(300))


def test_a_python_disarm_inside_a_burst_hands_the_buffer_over_as_the_rest(
    ring: RingWriter, pair: tuple[socket.socket, socket.socket], sink: StreamSink
) -> None:
    """What C buffered and had not sent when Python takes the socket back is the rest:
    Python writes it first, then resumes at next_seq, so every record goes once, in order."""
    a = ring.register_topic("1:a")
    entry = sink.add_nats(pair[0].fileno())
    assert entry.subject(a, b"s.1.a") and entry.arm(ring.last_seq + 1)
    c.burst_begin()
    try:
        first = ring.write(1, a, b"one")
        ring.write(1, a, b"two")
        state = entry.disarm()
    finally:
        c.burst_end()
    ring.write(1, a, b"three")  # disarmed: Python's
    assert (state[ST_ARMED], state[ST_NEXT_SEQ]) == (0, first + 2)
    assert drain(pair[1]) == b""  # the end sent nothing: the slot was not armed
    assert entry.take_rest(state) == pub("s.1.a", b"one") + pub("s.1.a", b"two")
    assert entry.arm(ring.last_seq + 1)

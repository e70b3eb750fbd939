"""The C stream sink alone (gateway.hub.sink over dataplane/shim/sink.c), on a socketpair:
the frames it sends are gateway.hub.events.ws_frame's, an arm is refused when the ring
already holds its seq, and a full socket stops it exactly: what it sent, the rest of a
frame it sent in part, and the seq Python resumes at add up to every frame once."""

from __future__ import annotations

import socket
from typing import Any

from dataplane.ring import RingWriter
from gateway.hub.events import OP_BINARY, OP_TEXT, ws_frame
from gateway.hub.sink import (
    AGAIN,
    GAP,
    PARTIAL,
    ST_ARMED,
    ST_NEXT_SEQ,
    ST_REASON,
    SinkSocket,
    StreamSink,
)


def overfill(
    ring: RingWriter, entry: Any, topic: int, count: int = 200
) -> tuple[int, dict[int, bytes], Any]:
    """Arm entry at the ring's next record and write count 780-byte records of topic, more
    than the small socket takes: (the first seq, seq -> payload, the state C stopped in)."""
    first = ring.last_seq + 1
    assert entry.arm(first)
    payloads = {}
    for i in range(count):
        p = (b"%d:" % i) + b"y" * 777
        payloads[ring.write(1, topic, p)] = p
    state = entry.state()
    assert state[ST_ARMED] == 0 and state[ST_REASON] in (AGAIN, PARTIAL)
    return first, payloads, state


def frame(payload: bytes) -> bytes:
    try:
        payload.decode()
        return ws_frame(OP_TEXT, payload)
    except UnicodeDecodeError:
        return ws_frame(OP_BINARY, payload)


def test_frames_are_the_hubs_and_only_of_the_sockets_topics(
    ring: RingWriter, pair: tuple[socket.socket, socket.socket]
) -> None:
    gap, mine, other = (ring.register_topic(n) for n in ("$gap", "1:a", "1:b"))
    sink = StreamSink(ring.handle, gap)
    try:
        entry = sink.add(pair[0].fileno(), 1, [mine])
        assert not entry.arm(ring.last_seq + 2)  # a seq the ring does not hold yet: refused
        assert entry.arm(ring.last_seq + 1)
        payloads = [b"x" * n for n in (0, 1, 125, 126, 65535, 65536)] + [b"\xff\xfe", "é".encode()]
        for p in payloads:
            ring.write(1, mine, p)
            ring.write(1, other, b"not mine")
            ring.write(2, mine, b"another session")
        want = b"".join(frame(p) for p in payloads)
        got = b""
        pair[1].settimeout(5)
        while len(got) < len(want):
            got += pair[1].recv(1 << 20)
        assert got == want
        assert entry.state()[ST_ARMED] == 1
        seq = ring.write(1, gap, b"{}")  # a gap of its session: the sink stops there
        state = entry.state()
        assert (state[ST_ARMED], state[ST_REASON], state[ST_NEXT_SEQ]) == (0, GAP, seq)
    finally:
        sink.close()


def drain(sock: socket.socket) -> bytes:
    out = b""
    sock.setblocking(False)
    while True:
        try:
            data = sock.recv(1 << 20)
        except BlockingIOError:
            return out
        if not data:
            return out
        out += data


def test_a_full_socket_stops_the_sink_exactly(
    ring: RingWriter, pair: tuple[socket.socket, socket.socket]
) -> None:
    pair[0].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    pair[1].setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    gap, topic = ring.register_topic("$gap"), ring.register_topic("1:a")
    sink = StreamSink(ring.handle, gap)
    try:
        entry: SinkSocket = sink.add(pair[0].fileno(), 1, [])
        first, payloads, state = overfill(ring, entry, topic)
        got = drain(pair[1]) + entry.take_rest(state)  # Python writes the rest first ...
        resume = state[ST_NEXT_SEQ]
        got += b"".join(frame(payloads[s]) for s in range(resume, first + 200))  # ... then on
        assert got == b"".join(frame(payloads[s]) for s in range(first, first + 200))
        entry.remove()
    finally:
        sink.close()


def test_a_stream_of_every_topic_stops_at_its_sessions_gap_too(
    ring: RingWriter, pair: tuple[socket.socket, socket.socket]
) -> None:
    gap, topic = ring.register_topic("$gap"), ring.register_topic("1:a")
    sink = StreamSink(ring.handle, gap)
    try:
        entry = sink.add(pair[0].fileno(), 1, [])  # every topic of session 1
        assert entry.arm(ring.last_seq + 1)
        ring.write(1, topic, b"one")
        ring.write(2, gap, b"{}")  # another session's gap: not its business
        ring.write(1, topic, b"two")
        seq = ring.write(1, gap, b"{}")
        ring.write(1, topic, b"three")  # after the stop: Python's
        state = entry.state()
        assert (state[ST_ARMED], state[ST_REASON], state[ST_NEXT_SEQ]) == (0, GAP, seq)
        assert drain(pair[1]) == frame(b"one") + frame(b"two")
    finally:
        sink.close()

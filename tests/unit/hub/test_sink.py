"""The C stream sink alone (gateway.hub.sink over dataplane/shim/sink.c), on a socketpair:
the frames it sends are gateway.hub.events.ws_frame's, an arm is refused when the ring
already holds its seq, and a full socket stops it exactly: what it sent, the rest of a
frame it sent in part, and the seq Python resumes at add up to every frame once; it arms
at most its limit of stream sockets (NATS slots aside), first armed first served."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import pytest
import typer

from dataplane.ring import RingWriter
from gateway.cli.common import load_settings
from gateway.hub.events import OP_BINARY, OP_TEXT, ws_frame
from gateway.hub.sink import (
    AGAIN,
    GAP,
    MAX_STREAMS_DEFAULT,
    MAX_STREAMS_LIMIT,
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


def small_buffers(pair: tuple[socket.socket, socket.socket]) -> None:
    """4 KiB each way: overfill's records fill the socket."""
    pair[0].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    pair[1].setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)


def resumed(
    sock: socket.socket,
    entry: Any,
    first: int,
    payloads: dict[int, bytes],
    state: Any,
    encode: Callable[[bytes], bytes],
) -> bytes:
    """What the reader gets when Python takes over where C stopped after overfill: what C
    sent, the rest of a record it sent in part, then encode(payload) from the seq Python
    resumes at."""
    got = drain(sock) + entry.take_rest(state)  # Python writes the rest first ...
    resume = state[ST_NEXT_SEQ]
    return got + b"".join(encode(payloads[s]) for s in range(resume, first + len(payloads)))


def receive(sock: socket.socket, size: int) -> bytes:
    """At least size bytes from sock (5 s at most for each read)."""
    got = b""
    sock.settimeout(5)
    while len(got) < size:
        got += sock.recv(1 << 20)
    return got


def frame(payload: bytes) -> bytes:
    try:
        payload.decode()
        return ws_frame(OP_TEXT, payload)
    except UnicodeDecodeError:
        return ws_frame(OP_BINARY, payload)


def test_frames_are_the_hubs_and_only_of_the_sockets_topics(
    ring: RingWriter, pair: tuple[socket.socket, socket.socket], sink: StreamSink
) -> None:
    gap, mine, other = (ring.register_topic(n) for n in ("$gap", "1:a", "1:b"))
    entry = sink.add(pair[0].fileno(), 1, [mine])
    assert not entry.arm(ring.last_seq + 2)  # a seq the ring does not hold yet: refused
    assert entry.arm(ring.last_seq + 1)
    payloads = [b"x" * n for n in (0, 1, 125, 126, 65535, 65536)] + [b"\xff\xfe", "é".encode()]
    for p in payloads:
        ring.write(1, mine, p)
        ring.write(1, other, b"not mine")
        ring.write(2, mine, b"another session")
    want = b"".join(frame(p) for p in payloads)
    assert receive(pair[1], len(want)) == want
    assert entry.state()[ST_ARMED] == 1
    seq = ring.write(1, gap, b"{}")  # a gap of its session: the sink stops there
    state = entry.state()
    assert (state[ST_ARMED], state[ST_REASON], state[ST_NEXT_SEQ]) == (0, GAP, seq)


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
    ring: RingWriter, pair: tuple[socket.socket, socket.socket], sink: StreamSink
) -> None:
    small_buffers(pair)
    topic = ring.register_topic("1:a")
    entry: SinkSocket = sink.add(pair[0].fileno(), 1, [])
    first, payloads, state = overfill(ring, entry, topic)
    got = resumed(pair[1], entry, first, payloads, state, frame)
    assert got == b"".join(frame(payloads[s]) for s in range(first, first + 200))
    entry.remove()


def test_a_stream_of_every_topic_stops_at_its_sessions_gap_too(
    ring: RingWriter, pair: tuple[socket.socket, socket.socket], sink: StreamSink
) -> None:
    gap, topic = ring.register_topic("$gap"), ring.register_topic("1:a")
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


def test_the_sink_arms_at_most_its_limit_of_streams_first_armed_first_served(
    ring: RingWriter,
) -> None:
    gap, topic = ring.register_topic("$gap"), ring.register_topic("1:a")
    sink = StreamSink(ring.handle, gap)
    with ExitStack() as stack:
        stack.callback(sink.close)
        pairs = [socket.socketpair() for _ in range(4)]
        for a, b in pairs:
            stack.callback(a.close)
            stack.callback(b.close)
        assert sink.max_streams == MAX_STREAMS_DEFAULT and sink.room() == MAX_STREAMS_DEFAULT
        sink.limit_streams(2)
        entries = [sink.add(a.fileno(), 1, []) for a, _ in pairs[:3]]
        nats = sink.add_nats(pairs[3][0].fileno())
        seq = ring.last_seq + 1
        assert entries[0].arm(seq) and entries[1].arm(seq)
        assert sink.room() == 0
        assert not entries[2].arm(seq)  # the third stays on Python
        assert nats.arm(seq)  # NATS slots do not count
        ring.write(1, topic, b"one")
        assert [drain(b) for _, b in pairs[:3]] == [frame(b"one")] * 2 + [b""]
        assert entries[2].state()[ST_ARMED] == 0
        entries[0].disarm()  # a place frees: the waiting stream takes it
        assert sink.room() == 1
        seq = ring.last_seq + 1
        assert entries[2].arm(seq) and not entries[0].arm(seq)
        sink.limit_streams(1)  # lowered: the armed stay armed, nobody new arms
        assert [e.state()[ST_ARMED] for e in entries] == [0, 1, 1] and sink.room() == 0
        entries[1].disarm()
        assert sink.room() == 0 and not entries[0].arm(seq)
        sink.limit_streams(0)
        entries[2].disarm()
        assert sink.room() == 0 and not entries[2].arm(seq)
        for bad in (-1, MAX_STREAMS_LIMIT + 1):
            with pytest.raises(ValueError, match="max streams"):
                sink.limit_streams(bad)


@pytest.mark.parametrize("value", ["-1", "1025", "eight"])
def test_a_bad_stream_sink_max_stops_startup_naming_it(
    value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    monkeypatch.chdir(tmp_path)  # no wsgw.toml
    monkeypatch.setenv("WSGW_API__STREAM_SINK_MAX", value)
    with pytest.raises(typer.Exit) as exc:
        load_settings()
    assert exc.value.exit_code == 2
    assert "api.stream_sink_max" in capsys.readouterr().err


def test_stream_sink_max_defaults_to_the_sinks_and_takes_its_whole_range(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_settings().api.stream_sink_max == MAX_STREAMS_DEFAULT
    for value in (0, MAX_STREAMS_LIMIT):
        monkeypatch.setenv("WSGW_API__STREAM_SINK_MAX", str(value))
        assert load_settings().api.stream_sink_max == value


def test_each_send_is_sampled_with_its_oldest_records_age(
    ring: RingWriter, pair: tuple[socket.socket, socket.socket], sink: StreamSink
) -> None:
    """The lag samples (the feed bench's read -> sink send split): one per send, the time
    from the ring stamp of the first record it carried; records written to no armed socket
    take no sample, nor records the ring's writer stamped itself (no read stamp given)."""
    topic = ring.register_topic("1:a")
    ring.write(1, topic, b"before")  # no socket armed: no send, no sample
    assert sink.lags() == (0, [])
    entry = sink.add(pair[0].fileno(), 1, [])
    assert entry.arm(ring.last_seq + 1)
    stamp = time.time_ns() - 5_000_000  # read 5 ms ago
    ring.write(1, topic, b"one", ts=stamp)
    ring.write(1, topic, b"two", ts=time.time_ns())
    ring.write(1, topic, b"three")  # the writer's stamp: sent, not sampled
    total, samples = sink.lags()
    assert total == 2 and len(samples) == 2
    assert 5_000_000 <= samples[0] < 5_000_000 + 1_000_000_000
    assert samples[1] < samples[0]
    assert drain(pair[1]) == frame(b"one") + frame(b"two") + frame(b"three")

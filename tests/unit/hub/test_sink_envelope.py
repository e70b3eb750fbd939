"""The C stream sink's envelope sockets (dataplane/shim/sink.c, issue #16) against the hub's
Python envelope: for any payload (ASCII, JSON escapes, control bytes, multi-byte UTF-8, bytes
that are not UTF-8), seq, ring stamp and topic, what reaches the socket is, byte for byte,
`Delivery(...).envelope_wire()` of each record, the sink sending what it can and Python what
it leaves (a payload that is not UTF-8: payload_b64) from where it stopped. It also stops at
a topic it was not told, a gap of its session and a record written under envelope_hold (an
upstream seq only Python knows), and Hub.publish_batch holds exactly those with one."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataplane.ring import RingWriter
from gateway.hub import Hub
from gateway.hub.events import Delivery
from gateway.hub.names import ring_topic
from gateway.hub.sink import (
    EXTRA,
    GAP,
    ST_ARMED,
    ST_NEXT_SEQ,
    ST_REASON,
    TOPIC,
    UTF8,
    SinkSocket,
    StreamSink,
    envelope_hold,
    envelope_middle,
)
from tests.unit.hub.test_sink import drain, receive

SESSION = 7

#: Payloads: the bytes JSON escapes, every control byte, DEL, multi-byte UTF-8 (2, 3 and 4
#: bytes, U+2028), and bytes that are not UTF-8 (a lone continuation byte, a cut sequence,
#: a surrogate's encoding, 0xff).
_PIECES = st.sampled_from(
    [b'"', b"\\", b"/", b"\x7f", b"a", b"{}", "é".encode(), "€".encode(), "𝄞".encode()]
    + ["\u2028".encode(), b"\x80", b"\xe2\x82", b"\xed\xa0\x80", b"\xff"]
    + [bytes([c]) for c in range(0x20)]
)
PAYLOADS = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=64).map(str.encode),
    st.lists(_PIECES, max_size=24).map(b"".join),
    st.integers(0, 70_000).map(lambda n: b"x" * n),  # the 2-, 4- and 10-byte frame heads
)
TOPICS = st.lists(
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12),
    min_size=1,
    max_size=3,
    unique=True,
)


def envelope(seq: int, topic: str, payload: bytes, ts: int) -> bytes:
    return Delivery(seq, SESSION, topic, payload, ts, None).envelope_wire()


@pytest.fixture
def sock_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A socket pair with room for a whole example (the sink never fills it)."""
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    yield a, b
    a.close()
    b.close()


def test_the_sinks_envelopes_are_the_hubs_for_any_payload_seq_stamp_and_topic(
    ring: RingWriter, sink: StreamSink, sock_pair: tuple[socket.socket, socket.socket]
) -> None:
    tids: dict[str, int] = {}

    @settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        topics=TOPICS,
        records=st.lists(
            st.tuples(st.integers(0, 2), PAYLOADS, st.integers(1, 2**64 - 1)),
            min_size=1,
            max_size=12,
        ),
        whole=st.booleans(),
    )
    def check(topics: list[str], records: list[tuple[int, bytes, int]], whole: bool) -> None:
        for t in topics:
            if t not in tids:
                tids[t] = ring.register_topic(ring_topic(SESSION, t))
        entry = sink.add_envelope(
            sock_pair[0].fileno(), SESSION, [] if whole else list(tids[t] for t in topics)
        )
        try:
            for t in topics:
                assert entry.envelope_topic(tids[t], envelope_middle(SESSION, t))
            first = ring.last_seq + 1
            assert entry.arm(first)
            written = []
            for pick, payload, ts in records:
                topic = topics[pick % len(topics)]
                seq = ring.write(SESSION, tids[topic], payload, ts)
                written.append((seq, topic, payload, ts))
            want = b"".join(envelope(*w) for w in written)
            state = entry.state()
            resume = state[ST_NEXT_SEQ]
            bad = [seq for seq, _, payload, _ in written if not _utf8(payload)]
            if bad:  # C stopped at the first payload that is not UTF-8: Python's from there
                assert (state[ST_ARMED], state[ST_REASON], resume) == (0, UTF8, bad[0])
            else:
                assert (state[ST_ARMED], resume) == (1, written[-1][0] + 1)
            sent = b"".join(envelope(*w) for w in written if w[0] < resume)
            got = receive(sock_pair[1], len(sent)) if sent else b""
            got += entry.take_rest(state) + b"".join(
                envelope(*w) for w in written if w[0] >= resume
            )
            assert got == want
            assert drain(sock_pair[1]) == b""
        finally:
            entry.remove()

    check()


def _utf8(payload: bytes) -> bool:
    try:
        payload.decode()
    except UnicodeDecodeError:
        return False
    return True


def test_a_record_the_writer_stamps_carries_the_stamp_the_ring_gave_it(
    ring: RingWriter, sink: StreamSink, sock_pair: tuple[socket.socket, socket.socket]
) -> None:
    tid = ring.register_topic(ring_topic(SESSION, "a"))
    entry = sink.add_envelope(sock_pair[0].fileno(), SESSION, [tid])
    assert entry.envelope_topic(tid, envelope_middle(SESSION, "a"))
    assert entry.arm(ring.last_seq + 1)
    before = time.time_ns()
    seq = ring.write(SESSION, tid, b'{"p":1}')  # no stamp given: the ring's clock
    after = time.time_ns()
    got = receive(sock_pair[1], 2)
    got += receive(sock_pair[1], got[1] - len(got) + 2) if len(got) < got[1] + 2 else b""
    body = orjson.loads(got[2:])
    assert before <= body["recv_ts_ns"] <= after
    assert got == envelope(seq, "a", b'{"p":1}', body["recv_ts_ns"])


def stopped(entry: SinkSocket) -> tuple[int, int, int]:
    state = entry.state()
    return state[ST_ARMED], state[ST_REASON], state[ST_NEXT_SEQ]


def test_the_sink_stops_at_an_untold_topic_its_gap_and_a_held_write(
    ring: RingWriter, sink: StreamSink, sock_pair: tuple[socket.socket, socket.socket]
) -> None:
    gap = ring.register_topic("$gap")
    told, untold = (ring.register_topic(ring_topic(SESSION, t)) for t in ("a", "b"))
    entry = sink.add_envelope(sock_pair[0].fileno(), SESSION, [])  # every topic
    assert entry.envelope_topic(told, envelope_middle(SESSION, "a"))
    assert not entry.envelope_topic(told, b"")  # empty: refused
    plain = sink.add(sock_pair[0].fileno(), SESSION, [])
    assert not plain.envelope_topic(told, envelope_middle(SESSION, "a"))  # not an envelope slot
    plain.remove()

    assert entry.arm(ring.last_seq + 1)
    one = ring.write(SESSION, told, b"1", 5)
    ring.write(SESSION + 1, untold, b"another session's", 5)
    seq = ring.write(SESSION, untold, b"2", 5)
    assert stopped(entry) == (0, TOPIC, seq)
    assert drain(sock_pair[1]) == envelope(one, "a", b"1", 5)

    assert entry.arm(ring.last_seq + 1)
    ring.write(SESSION + 1, gap, b"{}", 5)  # another session's gap: not its business
    seq = ring.write(SESSION, gap, b"{}", 5)
    assert stopped(entry) == (0, GAP, seq)

    assert entry.arm(ring.last_seq + 1)
    envelope_hold(True)
    try:
        ring.write(SESSION + 1, told, b"not wanted", 5)  # held, but not its session's
        seq = ring.write(SESSION, told, b"3", 5)
    finally:
        envelope_hold(False)
    assert stopped(entry) == (0, EXTRA, seq)
    assert entry.arm(ring.last_seq + 1)
    four = ring.write(SESSION, told, b"4", 5)  # the hold is over
    assert stopped(entry) == (1, 1, four + 1)
    assert drain(sock_pair[1]) == envelope(four, "a", b"4", 5)
    entry.remove()


def test_publish_batch_holds_the_envelope_sockets_at_a_message_with_an_upstream_seq(
    ring: RingWriter, sock_pair: tuple[socket.socket, socket.socket]
) -> None:
    hub = Hub(ring=ring)
    try:
        tid = hub.ring_topic_id(SESSION, "a")
        sink = hub.stream_sink()
        assert sink is not None
        entry = sink.add_envelope(sock_pair[0].fileno(), SESSION, [tid])
        assert entry.envelope_topic(tid, envelope_middle(SESSION, "a"))
        assert entry.arm(hub.next_seq)
        first = hub.publish_batch([(SESSION, "a", b"1", 5, None), (SESSION, "a", b"2", 5, None)])
        assert stopped(entry)[:2] == (1, 1)
        seq = hub.publish_batch([(SESSION, "a", b"3", 5, None), (SESSION, "a", b"4", 5, 44)])
        assert stopped(entry) == (0, EXTRA, seq)  # the whole batch: Python's
        assert drain(sock_pair[1]) == envelope(first, "a", b"1", 5) + envelope(
            first + 1, "a", b"2", 5
        )
        assert entry.arm(hub.next_seq)
        seq = hub.publish_batch([(SESSION, "a", b"5", 5, None)])
        assert stopped(entry) == (1, 1, seq + 1)  # the hold ended with the write
        entry.remove()
    finally:
        hub.close()

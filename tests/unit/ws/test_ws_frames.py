"""Frames (RFC 6455 section 5), control frames and the closing handshake (section 7), with
wsproto as the oracle: our frames parsed by its server side, its frames parsed by us."""

from __future__ import annotations

import itertools
import os
import struct
from typing import cast

import pytest
from ws_helpers import BACKENDS, accepted, feed, open_raw, server_frame
from wsproto.events import (
    BytesMessage,
    CloseConnection,
    TextMessage,
)
from wsproto.events import (
    Message as WsprotoMessage,
)
from wsproto.events import (
    Ping as WsprotoPing,
)
from wsproto.events import (
    Pong as WsprotoPong,
)

from dataplane.ws.client import ConnectionState, WsClient, is_valid_close_code
from dataplane.ws.errors import LocalProtocolError
from dataplane.ws.events import Closed, CloseReceived, Handshake, Message, Ping, Pong
from dataplane.ws.scan import MASKED, BackendName, mask_py, scan_frames

SIZES = [0, 1, 125, 126, 127, 65535, 65536, 1 << 20]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> BackendName:
    return cast(BackendName, request.param)


def closes_with(client: WsClient, data: bytes, code: int, *, step: int = 0) -> Closed:
    """Feed data: the client must fail with code, queue that close frame and stop."""
    events = feed(client, data, step=step)
    assert isinstance(events[-1], Closed), events
    closed = events[-1]
    assert closed.code == code and closed.failure and not closed.clean, closed
    assert client.state is ConnectionState.ERROR
    first, body = client_frames(client.data_to_send())[-1]
    assert first == 0x88 and body[:2] == struct.pack("!H", code)
    # Anything after a failure is not read (section 7.1.7).
    assert feed(client, server_frame(1, b"late")) == []
    return closed


def client_frames(out: bytes) -> list[tuple[int, bytes]]:
    """Our (masked) frames as (first header byte, unmasked payload)."""
    words, consumed, _, _ = scan_frames(out, 0, 1000)
    assert consumed == len(out)
    frames = []
    for i in range(0, len(words), 4):
        info, offset, size, key = words[i : i + 4]
        assert info & MASKED, "client frames are masked (section 5.3)"
        frames.append(
            (info & 0xFF, mask_py(out[offset : offset + size], key.to_bytes(4, "little")))
        )
    return frames


# ---- our frames through wsproto's server -------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_client_messages_parse_in_wsproto(backend: BackendName, size: int) -> None:
    client, server, _ = accepted(backend=backend, deflate=None)
    text = "é" * (size // 2)
    data = os.urandom(size)
    server.receive_data(client.send_text(text) + client.send_binary(data))
    events = list(server.events())
    assert events == [TextMessage(data=text), BytesMessage(data=data)]


def test_every_client_frame_is_masked_with_a_fresh_key(backend: BackendName) -> None:
    client, _, _ = accepted(backend=backend, deflate=None)
    keys = set()
    for _ in range(200):
        frame = client.send_binary(b"\x00" * 8)
        assert frame[1] & 0x80, "client frames must be masked (section 5.3)"
        keys.add(frame[2:6])
        assert frame[6:] == frame[2:6] * 2  # zeros XOR key = key
    assert len(keys) > 190


def test_control_frames_from_the_client(backend: BackendName) -> None:
    client, server, _ = accepted(backend=backend, deflate=None)
    server.receive_data(client.ping(b"abc") + client.pong(b"hb"))
    assert list(server.events()) == [WsprotoPing(payload=b"abc"), WsprotoPong(payload=b"hb")]
    with pytest.raises(LocalProtocolError, match="125"):
        client.ping(b"x" * 126)


# ---- wsproto's frames through our client -------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_server_messages_parse_in_the_client(backend: BackendName, size: int) -> None:
    client, server, _ = accepted(backend=backend, deflate=None)
    text = "ü" * (size // 2)
    data = os.urandom(size)
    events = feed(client, server.send(TextMessage(text)) + server.send(BytesMessage(data)))
    assert events == [Message(text.encode(), True), Message(data, False)]


@pytest.mark.parametrize("step", [0, 1, 3, 1000])
def test_fragmented_messages_with_control_frames_in_between(
    backend: BackendName, step: int
) -> None:
    """Section 5.4: fragments in order, control frames may be injected between them."""
    client, server, _ = accepted(backend=backend, deflate=None)
    text = "snapshot: " + "€" * 500
    raw = text.encode()
    # Split a multi-byte character across fragments: validation must be incremental.
    cuts = [0, 11, 12, 700, len(raw)]
    parts = [raw[a:b] for a, b in itertools.pairwise(cuts)]
    wire = server_frame(1, parts[0], fin=False)
    wire += server_frame(9, b"hb")
    for part in parts[1:-1]:
        wire += server_frame(0, part, fin=False)
    wire += server_frame(10, b"pong")
    wire += server_frame(0, parts[-1])
    wire += server.send(WsprotoMessage(data=b"bin", message_finished=False))
    wire += server.send(WsprotoMessage(data=b"ary", message_finished=True))
    events = feed(client, wire, step=step)
    assert events == [Ping(b"hb"), Pong(b"pong"), Message(raw, True), Message(b"binary", False)]


def test_ping_is_answered_with_a_pong_carrying_its_payload(backend: BackendName) -> None:
    client, server, _ = accepted(backend=backend, deflate=None)
    events = feed(client, server.send(WsprotoPing(b"\x00\xff" * 62)))
    assert events == [Ping(b"\x00\xff" * 62)]
    server.receive_data(client.data_to_send())
    assert list(server.events()) == [WsprotoPong(payload=b"\x00\xff" * 62)]
    assert client.data_to_send() == b""


def test_pong_answers_our_ping(backend: BackendName) -> None:
    client, server, _ = accepted(backend=backend, deflate=None)
    server.receive_data(client.ping(b"t1"))
    ping = next(server.events())
    assert isinstance(ping, WsprotoPing)
    assert feed(client, server.send(ping.response())) == [Pong(b"t1")]


# ---- the closing handshake (section 7) ------------------------------------------------------
def test_server_initiated_close_is_echoed(backend: BackendName) -> None:
    client, server, _ = accepted(backend=backend, deflate=None)
    wire = server.send(TextMessage("last")) + server.send(CloseConnection(1001, "restart"))
    events = feed(client, wire + server_frame(1, b"after close"))
    assert events == [
        Message(b"last", True),
        CloseReceived(1001, "restart"),
        Closed(1001, "restart", clean=True),
    ]
    assert client.state is ConnectionState.CLOSED
    server.receive_data(client.data_to_send())
    assert list(server.events()) == [CloseConnection(code=1001, reason="")]
    with pytest.raises(LocalProtocolError):
        client.send_text("x")
    with pytest.raises(LocalProtocolError):
        client.close()
    assert feed(client, b"") == []  # the TCP close that follows is no event
    assert client.state is ConnectionState.CLOSED


def test_client_initiated_close_keeps_delivering_until_the_reply(backend: BackendName) -> None:
    client, server, _ = accepted(backend=backend, deflate=None)
    server.receive_data(client.close(4000, "bye"))
    assert list(server.events()) == [CloseConnection(code=4000, reason="bye")]
    assert client.state is ConnectionState.CLOSING
    with pytest.raises(LocalProtocolError):
        client.send_text("no data after close")
    with pytest.raises(LocalProtocolError):
        client.ping()
    # Data still in flight arrives; a ping gets no pong after our close.
    events = feed(client, server_frame(1, b"in flight") + server_frame(9, b"p"))
    assert events == [Message(b"in flight", True), Ping(b"p")]
    assert client.data_to_send() == b""
    events = feed(client, server_frame(8, struct.pack("!H", 4000)))
    assert events == [CloseReceived(4000, ""), Closed(4000, "", clean=True)]
    assert client.state is ConnectionState.CLOSED
    assert client.data_to_send() == b""  # no second close frame


def test_close_without_status_is_1005_and_echoed_empty(backend: BackendName) -> None:
    client = open_raw(backend=backend)
    events = feed(client, server_frame(8))
    assert events == [CloseReceived(1005, ""), Closed(1005, "", clean=True)]
    assert client_frames(client.data_to_send()) == [(0x88, b"")]


def test_close_without_code_from_the_client() -> None:
    client = open_raw()
    frame = client.close(None)
    assert frame[1] == 0x80
    with pytest.raises(LocalProtocolError):
        open_raw().close(None, "reason needs a code")


@pytest.mark.parametrize("code", [999, 1004, 1005, 1006, 1015, 1016, 2999, 5000])
def test_reserved_close_codes_cannot_be_sent(code: int) -> None:
    with pytest.raises(LocalProtocolError, match=r"7\.4"):
        open_raw().close(code)


def test_close_reason_length_limit() -> None:
    open_raw().close(1000, "r" * 123)
    with pytest.raises(LocalProtocolError, match="123"):
        open_raw().close(1000, "é" * 62)


def test_end_of_stream_without_close_is_1006(backend: BackendName) -> None:
    client = open_raw(backend=backend)
    events = feed(client, server_frame(1, b"partial", length=100)[:20] + b"")
    assert events == []
    events = feed(client, b"")
    assert events == [Closed(1006, "connection closed without a closing handshake", clean=False)]
    assert client.state is ConnectionState.ERROR
    assert client.close_code == 1006


# ---- protocol violations become close events (sections 5, 7.1.7, 8.1) --------------------
KEY = b"\x01\x02\x03\x04"
VIOLATIONS = [
    ("masked server frame", server_frame(1, b"hi", mask=KEY), 1002),
    ("RSV1 without deflate", server_frame(1, b"hi", rsv=4), 1002),
    ("RSV2", server_frame(1, b"hi", rsv=2), 1002),
    ("RSV3", server_frame(2, b"hi", rsv=1), 1002),
    ("data opcode 3", server_frame(3, b"x"), 1002),
    ("data opcode 7", server_frame(7), 1002),
    ("control opcode 0xB", server_frame(0xB), 1002),
    ("control opcode 0xF", server_frame(0xF, b"x"), 1002),
    ("ping of 126 bytes", server_frame(9, b"p" * 126), 1002),
    ("fragmented ping", server_frame(9, b"p", fin=False), 1002),
    ("control frame with RSV1", server_frame(10, b"", rsv=4), 1002),
    ("continuation first", server_frame(0, b"x"), 1002),
    ("text inside fragments", server_frame(1, b"a", fin=False) + server_frame(1, b"b"), 1002),
    ("invalid UTF-8", server_frame(1, b"\xce\xba\xe1\xbd\xb9\xed\xa0\x80"), 1007),
    ("overlong UTF-8", server_frame(1, b"\xc0\xaf"), 1007),
    (
        "bad UTF-8 in a later fragment",
        server_frame(1, b"ok", fin=False) + server_frame(0, b"\xff", fin=False),
        1007,
    ),
    (
        "UTF-8 cut at the end of the message",
        server_frame(1, "€".encode()[:2], fin=False) + server_frame(0, b""),
        1007,
    ),
    ("close with 1-byte payload", server_frame(8, b"\x03"), 1002),
    ("close reason not UTF-8", server_frame(8, b"\x03\xe8\xff"), 1007),
    ("length with the top bit set", b"\x82\x7f" + (1 << 63).to_bytes(8, "big"), 1002),
    ("length 2**64-1", b"\x82\x7f" + b"\xff" * 8, 1002),
]


@pytest.mark.parametrize(("name", "wire", "code"), VIOLATIONS, ids=[v[0] for v in VIOLATIONS])
@pytest.mark.parametrize("step", [0, 1])
def test_violations_close_with_the_right_code(
    backend: BackendName, name: str, wire: bytes, code: int, step: int
) -> None:
    client = open_raw(backend=backend)
    closed = closes_with(client, wire, code, step=step)
    assert closed.reason


@pytest.mark.parametrize("code", [0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000])
def test_invalid_close_codes_from_the_server_are_1002(backend: BackendName, code: int) -> None:
    client = open_raw(backend=backend)
    closes_with(client, server_frame(8, struct.pack("!H", code)), 1002)


@pytest.mark.parametrize("code", [1000, 1001, 1002, 1003, 1007, 1011, 1012, 1014, 3000, 4999])
def test_valid_close_codes_from_the_server_are_echoed(backend: BackendName, code: int) -> None:
    assert is_valid_close_code(code)
    client = open_raw(backend=backend)
    events = feed(client, server_frame(8, struct.pack("!H", code) + "ü".encode()))
    assert events[-1] == Closed(code, "ü", clean=True)
    assert client_frames(client.data_to_send()) == [(0x88, struct.pack("!H", code))]


def test_frame_over_max_frame_size_closes_1009_from_its_header(backend: BackendName) -> None:
    client = open_raw(backend=backend, max_frame_size=1000)
    # Only the header has arrived: the 1009 comes before the payload is buffered.
    closes_with(client, server_frame(2, b"", length=1001), 1009)
    client = open_raw(backend=backend, max_frame_size=1000)
    closes_with(client, server_frame(2, b"x" * 1001), 1009)
    client = open_raw(backend=backend, max_frame_size=1000)
    assert feed(client, server_frame(2, b"x" * 1000)) == [Message(b"x" * 1000, False)]


def test_message_over_max_message_size_closes_1009(backend: BackendName) -> None:
    client = open_raw(backend=backend, max_message_size=1000)
    wire = server_frame(1, b"a" * 600, fin=False) + server_frame(0, b"b" * 401)
    closes_with(client, wire, 1009)
    client = open_raw(backend=backend, max_message_size=1000)
    closes_with(client, server_frame(1, b"a" * 1001), 1009)
    client = open_raw(backend=backend, max_message_size=1000)
    wire = server_frame(1, b"a" * 600, fin=False) + server_frame(0, b"b" * 400)
    assert feed(client, wire) == [Message(b"a" * 600 + b"b" * 400, True)]


def test_violation_while_closing_sends_no_second_close(backend: BackendName) -> None:
    client = open_raw(backend=backend)
    client.close()
    events = feed(client, server_frame(3))
    assert events == [Closed(1002, "unknown data opcode 0x3", clean=False, failure=True)]
    assert client.data_to_send() == b""


# ---- local misuse ------------------------------------------------------------------------
@pytest.mark.parametrize("batch", [False, True])
def test_an_oversized_frame_whose_header_was_held_fails_once(
    backend: BackendName, batch: bool
) -> None:
    """One byte of a frame's header in a read, the rest of it and its payload in the next:
    the header declares more than max_frame_size (section 5.2; 1009 from the header) and
    nothing after it is read. The rest of that read was once scanned after the failure:
    its payload, read as frames, raised LocalProtocolError ("cannot protocol failure in
    state error"; found by test_ws_batch's hypothesis test)."""
    client = open_raw(backend=backend, batch=batch, max_frame_size=100)
    big = server_frame(2, b"a" * 200)  # 126-form length; 0x61 as a header: RSV bits set
    events = feed(client, server_frame(2, b"first") + big[:1])
    events += feed(client, big[1:] + server_frame(2, b"after"))
    assert [e.data for e in events if isinstance(e, Message)] == [b"first"], events
    assert isinstance(events[-1], Closed) and events[-1].code == 1009 and events[-1].failure
    assert client.state is ConnectionState.ERROR
    assert [f for f, _ in client_frames(client.data_to_send())] == [0x88]  # one close
    assert feed(client, server_frame(2, b"late")) == []


def test_sending_before_the_handshake_raises() -> None:
    client = WsClient("h")
    with pytest.raises(LocalProtocolError, match="connecting"):
        client.send_text("early")
    client.initiate()
    with pytest.raises(LocalProtocolError):
        client.ping()
    with pytest.raises(LocalProtocolError):
        client.close()


def test_text_bytes_must_be_utf8() -> None:
    client = open_raw()
    with pytest.raises(LocalProtocolError, match="UTF-8"):
        client.send_text(b"\xff")
    assert client.send_text("é".encode())[0] == 0x81


# ---- a whole conversation, fed every way ---------------------------------------------------
def conversation(client: WsClient) -> bytes:
    from ws_helpers import raw_accept

    return (
        raw_accept(client)
        + server_frame(1, b'{"op":"hello"}')
        + server_frame(2, os.urandom(70000))
        + server_frame(1, "π".encode()[:1], fin=False)
        + server_frame(9, b"mid")
        + server_frame(0, "π".encode()[1:] + b" ok")
        + server_frame(10, b"")
        + b"".join(server_frame(1, b'{"px":%d}' % i) for i in range(300))
        + server_frame(8, struct.pack("!H", 1000) + b"done")
    )


@pytest.mark.parametrize("step", [1, 2, 7, 64, 1500])
def test_whole_conversation_byte_at_a_time_equals_one_read(backend: BackendName, step: int) -> None:
    reference = WsClient("h", deflate=None, scan_backend=backend)
    reference.initiate()
    wire = conversation(reference)
    expected = feed(reference, wire)
    assert isinstance(expected[0], Handshake)
    assert expected[-1] == Closed(1000, "done", clean=True)
    assert len([e for e in expected if isinstance(e, Message)]) == 303

    client = WsClient("h", deflate=None, scan_backend=backend)
    client.initiate()
    client._handshake.key = reference._handshake.key  # same accept token
    got = feed(client, wire, step=step)
    for event in (expected[0], got[0]):
        assert isinstance(event, Handshake)
    assert got[1:] == expected[1:]


# ---- failing after the messages before a violation (defer_failure, section 7.1.7) ---------
# One read, as Autobahn sends it: complete messages, then a violation, then frames that must
# never be read (a ping here: no pong may follow).
READS_WITH_A_LATE_VIOLATION = [
    (
        "3.2 RSV2",
        server_frame(1, b"hello") + server_frame(1, b"hello", rsv=2) + server_frame(9),
        1002,
    ),
    ("4.1.3 opcode 3", server_frame(1, b"hello") + server_frame(3) + server_frame(9), 1002),
    (
        "5.15 continuation of nothing",
        server_frame(1, b"frag1", fin=False)
        + server_frame(0, b"frag2")
        + server_frame(0, b"frag3", fin=False)
        + server_frame(1, b"frag4"),
        1002,
    ),
    ("bad UTF-8 after a binary", server_frame(2, b"\x00") + server_frame(1, b"\xff"), 1007),
]


@pytest.mark.parametrize(
    ("name", "wire", "code"),
    READS_WITH_A_LATE_VIOLATION,
    ids=[r[0] for r in READS_WITH_A_LATE_VIOLATION],
)
@pytest.mark.parametrize("batch", [False, True])
def test_violation_after_messages_waits_for_their_answers(
    backend: BackendName, name: str, wire: bytes, code: int, batch: bool
) -> None:
    """With defer_failure the messages come out, the client stays open for their answers,
    reads nothing more, and fails on fail_deferred(): answers first, then the close."""
    client = open_raw(backend=backend, batch=batch, defer_failure=True)
    events = feed(client, wire)
    assert events and all(isinstance(e, Message) for e in events), events
    assert client.failure_deferred and client.state is ConnectionState.OPEN
    assert client.data_to_send() == b""  # no pong: the ping came after the violation
    messages = [e for e in events if isinstance(e, Message)]
    answers = b"".join(client.send_binary(m.data) for m in messages)
    assert feed(client, server_frame(9, b"later") + server_frame(1, b"later")) == []
    client.fail_deferred()
    assert not client.failure_deferred
    events = list(client.events())
    assert len(events) == 1 and isinstance(events[0], Closed), events
    assert events[0].code == code and events[0].failure
    assert client.state is ConnectionState.ERROR
    assert client_frames(answers) == [(0x82, m.data) for m in messages]
    first, body = client_frames(client.data_to_send())[-1]
    assert first == 0x88 and body[:2] == struct.pack("!H", code)
    client.fail_deferred()  # nothing held any more: nothing happens
    assert list(client.events()) == [] and client.data_to_send() == b""


@pytest.mark.parametrize(("name", "wire", "code"), READS_WITH_A_LATE_VIOLATION[:1], ids=["3.2"])
def test_violation_after_messages_fails_at_once_without_defer_failure(
    backend: BackendName, name: str, wire: bytes, code: int
) -> None:
    client = open_raw(backend=backend)
    events = feed(client, wire)
    assert isinstance(events[0], Message) and isinstance(events[-1], Closed), events
    assert events[-1].code == code and not client.failure_deferred


def test_end_of_stream_fails_a_deferred_violation(backend: BackendName) -> None:
    client = open_raw(backend=backend, defer_failure=True)
    feed(client, server_frame(1, b"hello") + server_frame(1, b"x", rsv=2))
    assert client.failure_deferred
    events = feed(client, b"")
    assert len(events) == 1 and isinstance(events[0], Closed), events
    assert events[0].code == 1002 and events[0].failure
    assert client.state is ConnectionState.ERROR


def test_violation_alone_in_its_read_waits_while_earlier_messages_are_pending(
    backend: BackendName,
) -> None:
    """A transport that still holds messages of earlier reads for the application says so
    (`messages_pending`): a violation in a read of its own then waits as well."""
    client = open_raw(backend=backend, defer_failure=True)
    assert [type(e) for e in feed(client, server_frame(1, b"hello"))] == [Message]
    client.messages_pending = True
    assert feed(client, server_frame(3) + server_frame(9)) == []
    assert client.failure_deferred and client.state is ConnectionState.OPEN
    assert client.data_to_send() == b""
    client.fail_deferred()
    (closed,) = client.events()
    assert isinstance(closed, Closed) and closed.code == 1002 and closed.failure


def test_violation_alone_in_its_read_fails_at_once_even_with_defer_failure(
    backend: BackendName,
) -> None:
    client = open_raw(backend=backend, defer_failure=True)
    assert feed(client, server_frame(1, b"hello")) == [Message(b"hello", True)]
    closes_with(client, server_frame(1, b"x", rsv=2), 1002)


# ---- invalid UTF-8 fails before its frame is whole (section 8.1, Autobahn 6.4.3/6.4.4) ----
PREFIX = "κόσμε".encode()  # valid
BAD = b"\xf4\x90\x80\x80"  # U+110000: invalid from its second byte on


@pytest.mark.parametrize(
    "chops",
    [
        [PREFIX, BAD, b"edited"],  # 6.4.3: the invalid bytes come in the second chop
        [PREFIX + BAD[:1], BAD[1:2], BAD[2:] + b"edited"],  # 6.4.4: cut inside the sequence
    ],
)
@pytest.mark.parametrize("batch", [False, True])
def test_invalid_utf8_in_a_frame_still_arriving_fails_fast(
    backend: BackendName, chops: list[bytes], batch: bool
) -> None:
    client = open_raw(backend=backend, batch=batch)
    payload = b"".join(chops)
    wire = server_frame(1, payload)
    header = len(wire) - len(payload)
    assert feed(client, wire[: header + len(chops[0])]) == []
    assert client.state is ConnectionState.OPEN
    closes_with(client, chops[1], 1007)  # the rest of the frame has not come


def test_invalid_utf8_in_a_continuation_still_arriving_fails_fast(backend: BackendName) -> None:
    """The check of a pending continuation carries the state of the earlier fragments."""
    client = open_raw(backend=backend)
    part = server_frame(0, b"\x90\x80\x80" + b"a" * 200)
    assert feed(client, server_frame(1, PREFIX + b"\xf4", fin=False) + part[:4]) == []
    closes_with(client, part[4:5], 1007)


@pytest.mark.parametrize("step", [1, 2, 7, 100])
def test_valid_text_arriving_in_pieces_is_not_failed(backend: BackendName, step: int) -> None:
    """No false alarm from the early check: sequences cut across reads, ASCII runs, a
    fragmented message whose continuation starts inside a sequence, compressed-looking
    binary."""
    client = open_raw(backend=backend)
    text = ("€ok" * 300).encode()
    wire = server_frame(1, text, long_form=127)
    wire += server_frame(1, text[:1], fin=False) + server_frame(0, text[1:])
    wire += server_frame(2, b"\xff" * 300)
    events = feed(client, wire, step=step)
    assert events == [Message(text, True), Message(text, True), Message(b"\xff" * 300, False)]

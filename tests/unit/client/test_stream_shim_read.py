"""The /v1/stream source's one-call shim read (wsgw_stream_read) against its Python path
(WSGW_STREAM_READ=python: WsClient + orjson for every frame), which stays the reference: the
same events, exceptions, close and bytes sent back for any frames fed in any pieces, byte at a
time too, with the C sink's exact envelopes, near misses of them and every other kind of frame.

The source reads a real socket (a socketpair; this test plays the gateway's end)."""

from __future__ import annotations

import itertools
import os
import socket
import struct
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gateway.client.stream as stream_mod
from dataplane.ws.client import WsClient
from dataplane.ws.handshake import accept_token
from gateway.client.stream import StreamSource
from tests.utils.stream_shim import count_shim_envelopes

pytestmark = pytest.mark.skipif(
    stream_mod._shim_read() is None, reason="the shim does not load: nothing to compare"
)

SUBSCRIBED = b'{"type":"subscribed","epoch":"1a","next_seq":1}'


def frame(body: bytes, first: int = 0x81, form: int | None = None) -> bytes:
    """A server frame (unmasked); form: the length field's size (7, 16, 64) if not shortest."""
    n = len(body)
    if form is None:
        form = 7 if n < 126 else 16 if n < 65536 else 64
    if form == 7:
        return bytes((first, n)) + body
    if form == 16:
        return bytes((first, 126)) + struct.pack("!H", n) + body
    return bytes((first, 127)) + struct.pack("!Q", n) + body


def envelope(seq: int, session: int, topic: str, ts: int, payload: str) -> bytes:
    """What the C sink writes (Delivery.envelope's shape, orjson's spelling)."""
    return orjson.dumps(
        {
            "type": "msg",
            "seq": seq,
            "session": session,
            "topic": topic,
            "recv_ts_ns": ts,
            "payload": payload,
        }
    )


def _source(server: socket.socket, client: socket.socket) -> StreamSource:
    ws = WsClient(
        "test.invalid",
        "/v1/stream",
        deflate=False,
        batch=True,
        max_message_size=stream_mod.MAX_MESSAGE_SIZE,
        max_frame_size=stream_mod.MAX_MESSAGE_SIZE,
    )
    ws.initiate()
    ws.prepare_receive()
    ws.receive_data(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept_token(ws._handshake.key) + b"\r\n\r\n"
    )
    early = list(ws.events())
    server.sendall(frame(SUBSCRIBED))
    opened = stream_mod._open
    stream_mod._open = lambda *_: (client, ws, early[1:])  # type: ignore[assignment]
    try:
        return StreamSource("ws://test.invalid/v1/stream")
    finally:
        stream_mod._open = opened


def _sent_frames(data: bytes) -> list[tuple[int, bytes]]:
    """The client's frames (masked) as (first byte, unmasked payload)."""
    out, at = [], 0
    while at + 2 <= len(data):
        n, head = data[at + 1] & 0x7F, 2
        if n == 126:
            n, head = struct.unpack_from("!H", data, at + 2)[0], 4
        elif n == 127:
            n, head = struct.unpack_from("!Q", data, at + 2)[0], 10
        key = data[at + head : at + head + 4]
        body = data[at + head + 4 : at + head + 4 + n]
        out.append((data[at], bytes(b ^ key[i % 4] for i, b in enumerate(body))))
        at += head + 4 + n
    return out


def run(pieces: list[bytes], shim: bool, eof: bool = True) -> dict[str, Any]:
    """Feed pieces one at a time to a source (shim read on or off): what it made of them."""
    if shim:
        os.environ.pop("WSGW_STREAM_READ", None)
    else:
        os.environ["WSGW_STREAM_READ"] = "python"
    server, client = socket.socketpair()
    try:
        source = _source(server, client)
        assert (source._shim is not None) is shim
        seen: list[Any] = []

        def take() -> None:
            for _ in range(4):
                try:
                    seen.extend(source.read(timeout=0))
                except Exception as exc:
                    seen.append(("raised", type(exc).__name__, str(exc)))

        for piece in pieces:
            if source._ended:
                break
            server.sendall(piece)
            take()
        if eof and not source._ended:
            server.shutdown(socket.SHUT_WR)
            take()
        server.setblocking(False)
        back = b""
        try:
            while chunk := server.recv(1 << 16):
                back += chunk
        except (BlockingIOError, ConnectionResetError):
            pass
        result = {
            "events": seen,
            "close": (source.close_code, source.close_reason),
            "ended": source.ended,
            "last_seq": source.last_seq,
            "sent": _sent_frames(back),
        }
        source.close()
        return result
    finally:
        os.environ.pop("WSGW_STREAM_READ", None)
        server.close()
        client.close()


def same_both_ways(pieces: list[bytes], eof: bool = True) -> dict[str, Any]:
    fast = run(pieces, shim=True, eof=eof)
    slow = run(pieces, shim=False, eof=eof)
    assert fast == slow
    return fast


def cut(data: bytes, points: list[int]) -> list[bytes]:
    points = sorted({p % (len(data) + 1) for p in points} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


# ---- the frames -----------------------------------------------------------------------------
_text = st.text(
    st.one_of(
        st.sampled_from('"\\/\b\f\n\r\t\x00\x01\x1f\x7f é€𝄞{}:,'),
        st.characters(codec="utf-8"),
    ),
    max_size=40,
)
_u64 = st.integers(0, 2**64 - 1)
_envelopes = st.builds(
    envelope,
    _u64,
    st.integers(0, 2**32),
    st.text(max_size=12).filter(lambda t: all(c >= " " for c in t)),
    _u64,
    _text,
)


def _near_misses(good: bytes) -> Iterator[bytes]:
    """Envelopes that are JSON (or almost) but not the sink's exact shape."""
    body = orjson.loads(good)
    yield orjson.dumps({**body, "upstream_seq": 7})
    yield orjson.dumps({k: body[k] for k in reversed(body)})
    yield good.replace(b",", b", ", 1)
    yield good.replace(b'"seq":', b'"seq":0', 1)
    yield good.replace(b'"seq":', b'"seq":-', 1)
    yield good.replace(b'"session":', b'"session":1.5e', 1)
    yield good.replace(b'"recv_ts_ns":', b'"recv_ts_ns":99999999999999999999', 1)
    yield good.replace(b'"payload":"', b'"payload":"\\u00e9', 1)
    yield good.replace(b'"payload":"', b'"payload":"\\u001F\\/\\ud834\\udd1e', 1)
    yield good.replace(b'"payload":"', b'"payload":"\\x', 1)
    yield good.replace(b'"payload":"', b'"payload":"\x01', 1)
    yield good.replace(b'"topic":"', b'"topic":"\\"', 1)
    yield good.replace(b'"payload":"', b'"payload":"\xff', 1)
    yield good[:-1]
    yield good + b" "
    yield good[:-2] + b'\\"}'
    yield orjson.dumps({**body, "payload_b64": "AAE=", "payload": None})
    yield orjson.dumps({"type": "gap", "session": 1, "seq": 3, "reason": "queue_full", "lost": 2})
    yield orjson.dumps({"type": "gap", "session": 1, "seq": 9, "reason": "reconnect"})
    yield orjson.dumps({"type": "hello"})
    yield b'{"type":"msg","seq":1}'
    yield b""


@st.composite
def _frames(draw: st.DrawFn) -> bytes:
    good = draw(_envelopes)
    kind = draw(st.integers(0, 15))
    if kind <= 8:
        return frame(good, form=draw(st.sampled_from([None] * 8 + [16, 64])))
    if kind <= 11:
        return frame(draw(st.sampled_from(list(_near_misses(good)))))
    if kind == 12:  # a ping (answered), a pong, a binary frame
        return draw(
            st.sampled_from(
                [frame(b"hi", 0x89), frame(b"", 0x8A), frame(good, 0x82), frame(b"x" * 126, 0x89)]
            )
        )
    if kind == 13:  # a fragmented message, an RSV bit (no deflate: a failure), a masked frame
        half = len(good) // 2
        return draw(
            st.sampled_from(
                [
                    frame(good[:half], 0x01) + frame(good[half:], 0x80),
                    frame(good, 0xC1),
                    bytes((0x81, 0x80 | len(good[:100]))) + b"\0\0\0\0" + good[:100],
                ]
            )
        )
    if kind == 14:  # a close (the stream ends: nothing after it is read)
        return frame(struct.pack("!H", draw(st.sampled_from([1000, 4401, 1011]))) + b"bye", 0x88)
    return frame(good.replace(b"msg", b"ms\xc3", 1))  # not UTF-8: close 1007


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_frames(), min_size=1, max_size=12), st.lists(st.integers(0, 10_000), max_size=8))
def test_the_shim_read_gives_what_the_python_path_gives(
    frames: list[bytes], points: list[int]
) -> None:
    data = b"".join(frames)
    same_both_ways(cut(data, points))


@settings(max_examples=25, deadline=None)
@given(st.lists(_frames(), min_size=1, max_size=4))
def test_byte_at_a_time_too(frames: list[bytes]) -> None:
    data = b"".join(frames)
    same_both_ways([data[i : i + 1] for i in range(len(data))])


def test_the_sinks_envelopes_come_out_as_messages_with_the_payload_unescaped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = count_shim_envelopes(monkeypatch)
    payload = '{"e":"trade","s":"BTC\\USDT"}\n\x01é'
    frames = [frame(envelope(s, 3, "btcusdt@trade", 10 + s, payload)) for s in (1, 2)]
    got = same_both_ways([b"".join(frames)], eof=False)
    assert made == [2]  # (the shim made both; the Python path the same again)
    assert [tuple(e) for e in got["events"]] == [
        (s, 3, "3:btcusdt@trade", 10 + s, payload.encode(), -1) for s in (1, 2)
    ]
    assert got["last_seq"] == 2


def test_a_ping_between_envelopes_is_answered_and_the_envelopes_around_it_come() -> None:
    data = (
        frame(envelope(1, 3, "t", 5, "a")) + frame(b"p1", 0x89) + frame(envelope(2, 3, "t", 6, "b"))
    )
    got = same_both_ways([data], eof=False)
    assert [e.payload for e in got["events"]] == [b"a", b"b"]
    assert got["sent"] == [(0x8A, b"p1")]


def test_the_shim_takes_the_sinks_envelopes_and_leaves_the_rest() -> None:
    """The shim alone: it stops at the first frame that is not the exact shape."""
    from dataplane.shim import StreamRead

    read = StreamRead(4096, 1 << 20)
    good = envelope(5, 1, "t", 9, 'x"y')
    data = frame(good) + frame(good) + frame(good.replace(b",", b", ", 1)) + frame(good)
    assert read.scan(data) == 2
    assert list(read.out[:7]) == [5, 1, 9, good.index(b'"t"') + 3, 1, 0, 3]
    assert read.pay[:3].tobytes() == b'x"y'
    assert (read.ctx.got, read.ctx.consumed) == (len(data), 2 * len(frame(good)))


def test_a_frame_cut_short_is_left_whole_even_where_the_last_read_left_its_bytes() -> None:
    """The shim's buffer still holds the last read's bytes past this read's end: the same
    frame again, cut after 10 bytes, must wait for its rest, not be read from those."""
    whole = frame(envelope(1, 3, "t", 5, "a" * 50))
    again = frame(envelope(2, 3, "t", 5, "a" * 50))
    got = same_both_ways([whole, again[:10], again[10:]], eof=False)
    assert [e.seq for e in got["events"]] == [1, 2]

"""The batch receive path (`WsClient(batch=True)`, `wsgw_ws_scan_batch`) against the
per-frame path and against oracles (h11/smoltcp style differential tests).

- C and pure-Python batch scans agree on every input; the C UTF-8 check agrees with
  Python's strict decoder;
- a client with the batch path on and one with it off, fed the same random frame stream
  (sizes, opcodes, control frames, fragments, bad UTF-8, RSV bits, masks, partial frames)
  whole, a byte at a time or in random chunks, give the same messages, the same other
  events, the same close codes and the same frames to send;
- frames encoded by wsproto's server side come out of the batch path as wsproto sent them.
"""

from __future__ import annotations

import array
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ws_helpers import BACKENDS, accepted, open_raw, server_frame
from wsproto.events import BytesMessage, TextMessage

from dataplane.ws.client import WsClient
from dataplane.ws.events import Message, MessageBatch, WsEvent
from dataplane.ws.scan import (
    BATCH_END,
    BATCH_FULL,
    BATCH_OTHER,
    BATCH_PARTIAL,
    BackendName,
    make_batch_scanner,
    mask_py,
    resolve,
    scan_batch,
    scan_frames,
)

needs_c = pytest.mark.skipif(resolve("auto") != "c", reason="the C shim is not built")
DIFF = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Payloads that stress the UTF-8 rules: valid multi-byte text, and each kind of bad text.
GOOD_TEXT = [
    b"",
    b"plain ascii",
    "h\u00e9llo \u20ac \U0001d11e".encode(),
    "\U0010ffff\ud7ff\ue000".encode(),
    b"x" * 40 + "\u00e9".encode(),
]
BAD_TEXT = [
    b"\xc0\xaf",  # overlong '/'
    b"\xe0\x80\xaf",  # overlong, 3 bytes
    b"\xf0\x80\x80\xaf",  # overlong, 4 bytes
    b"\xed\xa0\x80",  # surrogate U+D800
    b"\xed\xbf\xbf",  # surrogate U+DFFF
    b"\xf4\x90\x80\x80",  # U+110000
    b"\xf5\x80\x80\x80",
    b"\xff",
    b"\x80",
    b"abc\xe2\x82",  # truncated euro sign
    b"01234567\xce",  # truncated after an ASCII word
    b"a" * 17 + b"\xc3\x28",
]


def utf8_ok(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# ---- the C kernels against their Python twins ---------------------------------------------
@needs_c
@pytest.mark.parametrize("data", GOOD_TEXT + BAD_TEXT)
def test_c_utf8_matches_python_on_edge_cases(data: bytes) -> None:
    from dataplane.shim import utf8_valid

    assert utf8_valid(data) == utf8_ok(data)
    for prefix in (b"", b"a", b"abcdefg", b"abcdefgh" * 3):
        assert utf8_valid(prefix + data) == utf8_ok(prefix + data)


@needs_c
@DIFF
@given(
    st.lists(
        st.binary(max_size=12)
        | st.text(max_size=12).map(lambda t: t.encode("utf-8", "surrogatepass"))
        | st.sampled_from(BAD_TEXT + GOOD_TEXT),
        max_size=8,
    ).map(b"".join)
)
def test_c_utf8_matches_python(data: bytes) -> None:
    from dataplane.shim import utf8_valid

    assert utf8_valid(data) == utf8_ok(data)


def any_frame() -> st.SearchStrategy[bytes]:
    """One frame with random fields, mostly well-formed data frames, sometimes cut short."""
    payload = st.binary(max_size=300) | st.sampled_from(GOOD_TEXT + BAD_TEXT)
    frame = st.builds(
        server_frame,
        st.sampled_from([1, 1, 2, 2, 2, 0, 3, 8, 9, 10, 11]),
        payload,
        fin=st.sampled_from([True, True, True, False]),
        rsv=st.sampled_from([0, 0, 0, 0, 4, 2, 1]),
        mask=st.sampled_from([None, None, None, b"\x01\x02\x03\x04"]),
        long_form=st.sampled_from([None, None, 126, 127]),
    )
    return frame


def frame_stream() -> st.SearchStrategy[bytes]:
    """Frames, now and then raw bytes between them (a header cut short, garbage)."""
    return st.lists(any_frame() | any_frame() | st.binary(max_size=6), max_size=14).map(b"".join)


@needs_c
@DIFF
@given(
    data=frame_stream() | st.binary(max_size=200),
    start=st.integers(0, 40),
    max_size=st.sampled_from([0, 5, 100, 300, 1 << 20, (1 << 64) - 1]),
    max_frames=st.integers(1, 6),
)
def test_c_batch_scan_matches_python(
    data: bytes, start: int, max_size: int, max_frames: int
) -> None:
    start = min(start, len(data))
    c = make_batch_scanner("c", max_frames).scan(data, start, max_size)
    assert c == scan_batch(data, start, max_size, max_frames)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_scan_stops_where_the_rules_say(backend: BackendName) -> None:
    data = server_frame(2, b"a" * 3) + server_frame(1, b"ok") + server_frame(9, b"p")
    scanner = make_batch_scanner(backend, 16)
    count, spans, ops, stop, why = scanner.scan(data, 0, 100)
    assert (count, ops, why) == (2, b"\x02\x01", BATCH_OTHER)
    assert stop == len(data) - 3
    assert memoryview(spans).cast("Q").tolist() == [2, 3, 7, 2]
    assert scanner.scan(data, 0, 2)[0] == 0  # the first frame is over max_size
    assert scanner.scan(data[:-3], 0, 100)[4] == BATCH_END
    assert scanner.scan(data[:-4], 0, 100)[3:] == (5, BATCH_PARTIAL)
    assert scanner.scan(server_frame(1, b"\xed\xa0\x80"), 0, 100)[4] == BATCH_OTHER
    assert scanner.scan(server_frame(2, b"x", rsv=4), 0, 100)[4] == BATCH_OTHER
    assert scanner.scan(server_frame(2, b"x", fin=False), 0, 100)[4] == BATCH_OTHER
    assert scanner.scan(server_frame(2, b"x", mask=b"abcd"), 0, 100)[4] == BATCH_OTHER
    full = make_batch_scanner(backend, 1).scan(data, 0, 100)
    assert (full[0], full[3], full[4]) == (1, 5, BATCH_FULL)


@needs_c
def test_seq_check_in_c_counts_like_ingest_check() -> None:
    from dataplane.shim import WsSeqCheck

    seqs = [0, 1, 2, 5, 6, 3, 7, 7]
    data = b"".join(server_frame(2, s.to_bytes(8, "big") + b"x" * 92) for s in seqs)
    data += server_frame(2, (8).to_bytes(8, "big"))  # wrong length, in sequence
    count, spans, _, _, _ = scan_batch(data, 0, 1000)
    check = WsSeqCheck(100)
    check.check(data, spans, count - 2)
    check.check(data, spans[16 * (count - 2) :], 2)  # state carries across calls
    assert (check.next_seq, check.gaps, check.duplicates, check.bad_length) == (9, 2, 2, 1)


# ---- the client: batch path on and off give the same events -------------------------------
def client_frames(data: bytes) -> list[tuple[int, bytes]]:
    """The client's own (masked) frames as (first byte, unmasked payload)."""
    words, _, _, _ = scan_frames(data, 0, 1 << 20)
    it = iter(words)
    out = []
    for info, offset, size, key in zip(it, it, it, it, strict=True):
        out.append((info & 0xFF, mask_py(data[offset : offset + size], key.to_bytes(4, "little"))))
    return out


def flatten(events: list[WsEvent]) -> list[WsEvent]:
    out: list[WsEvent] = []
    for event in events:
        if isinstance(event, MessageBatch):
            assert len(event) > 0
            out.extend(event.messages())
            # The zero-copy views say the same as the copies.
            assert [bytes(v) for v in event.views()] == event.payloads()
        else:
            out.append(event)
    return out


def run(client: WsClient, pieces: list[bytes]) -> tuple[list[WsEvent], list[tuple[int, bytes]]]:
    events: list[WsEvent] = []
    sent = b""
    for piece in pieces:
        client.receive_data(piece)
        events += client.events()
        sent += client.data_to_send()
    client.receive_data(b"")
    events += client.events()
    return events, client_frames(sent)


def split(data: bytes, how: str, seed: int) -> list[bytes]:
    if how == "whole" or not data:
        return [data] if data else []
    if how == "bytes":
        return [data[i : i + 1] for i in range(len(data))]
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 12))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def compare(
    backend: BackendName, data: bytes, how: str, seed: int, *extra: str, **limits: Any
) -> bool:
    """Feed data to a batch client and a per-frame client; True if any batch came out."""
    pieces = split(data, how, seed)
    plain = open_raw(*extra, backend=backend, **limits)
    batched = open_raw(*extra, backend=backend, batch=True, **limits)
    want, want_sent = run(plain, pieces)
    got, got_sent = run(batched, pieces)
    assert not any(isinstance(e, MessageBatch) for e in want)
    assert flatten(got) == want
    assert got_sent == want_sent
    assert (batched.state, batched.close_code, batched.close_reason) == (
        plain.state,
        plain.close_code,
        plain.close_reason,
    )
    return any(isinstance(e, MessageBatch) for e in got)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["whole", "bytes", "chunks"])
@DIFF
@given(data=frame_stream(), seed=st.integers(0, 1 << 30))
def test_batch_on_and_off_give_the_same_events(
    backend: BackendName, how: str, data: bytes, seed: int
) -> None:
    compare(backend, data, how, seed, max_message_size=250, max_frame_size=280)


def clean_stream() -> st.SearchStrategy[bytes]:
    """Mostly good data frames with now and then a ping, a fragmented message or bad text:
    long runs for the batch path with every way out of a run in between."""
    good = st.builds(
        server_frame,
        st.sampled_from([1, 2]),
        st.binary(max_size=120).map(lambda b: b.hex()[:120].encode()),
    ) | st.builds(server_frame, st.just(2), st.binary(max_size=200))
    other = st.sampled_from(
        [
            server_frame(9, b"ping"),
            server_frame(10, b"pong"),
            server_frame(1, b"fra", fin=False) + server_frame(9) + server_frame(0, b"g"),
            server_frame(2, b"x" * 126),
            server_frame(1, "\u20ac".encode()),
        ]
    )
    tail = st.sampled_from(
        [
            b"",
            server_frame(1, b"\xed\xa0\x80"),
            server_frame(8, (1000).to_bytes(2, "big") + b"bye"),
            server_frame(2, b"z" * 300),
            server_frame(2, b"m", mask=b"abcd"),
            server_frame(2, b"r", rsv=2),
        ]
    )
    return st.tuples(st.lists(good | good | good | other, max_size=40), tail).map(
        lambda parts: b"".join(parts[0]) + parts[1]
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["whole", "bytes", "chunks"])
@DIFF
@given(data=clean_stream(), seed=st.integers(0, 1 << 30))
def test_batch_on_and_off_agree_on_mostly_clean_streams(
    backend: BackendName, how: str, data: bytes, seed: int
) -> None:
    compare(backend, data, how, seed, max_message_size=250)


@DIFF
@given(data=clean_stream(), seed=st.integers(0, 1 << 30))
def test_with_deflate_negotiated_every_frame_takes_the_per_frame_path(
    data: bytes, seed: int
) -> None:
    deflate = "Sec-WebSocket-Extensions: permessage-deflate"
    got = compare("auto", data, "chunks", seed, deflate, deflate=True, max_message_size=250)
    assert not got  # the batch path is off while a decompressor is there


# Reads of exactly one frame (or nearly): the batch client takes a whole final unmasked
# data frame of the 7-bit or the 16-bit length form without a scan; everything else that
# looks like one must still come out as the per-frame code says.
ONE_FRAME_READS = [
    server_frame(1, b"e" * 200),  # 16-bit length: an envelope
    server_frame(2, bytes(range(256)) * 3),
    server_frame(1, "\u00e9\u20ac".encode() * 40),  # non-ASCII text, valid
    server_frame(1, b"short", long_form=126),  # 16-bit form of a 7-bit length
    server_frame(2, b"", long_form=126),
    server_frame(1, b"x" * 130 + b"\xed\xa0\x80"),  # bad UTF-8: 1007
    server_frame(2, b"m" * 200, mask=b"abcd"),  # masked by the server: 1002
    server_frame(2, b"r" * 200, rsv=2),
    server_frame(2, b"o" * 300),  # over max_message_size
    server_frame(2, b"s" * 200)[:-1],  # a byte short: held for the next read
    server_frame(2, b"s" * 200) + b"\x82",  # the first byte of the next frame behind it
    server_frame(2, b"l" * 200, length=199) + b"!",  # declares a byte less than the read
    server_frame(1, b"f" * 200, fin=False),  # a fragment: not a message yet
    server_frame(2, b"x" * 130, long_form=127),
    server_frame(9, b"p" * 100),
    server_frame(8, (1000).to_bytes(2, "big") + b"bye"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("data", ONE_FRAME_READS)
def test_a_read_of_one_frame_gives_what_the_per_frame_path_gives(
    backend: BackendName, data: bytes
) -> None:
    compare(backend, data, "whole", 0, max_message_size=250)
    # ... also behind a fragment that is still open, and after a held partial frame.
    opened = server_frame(1, b"a" * 10, fin=False)
    for pieces in ([opened, data, server_frame(0, b"z")], [data[:3], data[3:], data]):
        plain = open_raw(backend=backend, max_message_size=250)
        batched = open_raw(backend=backend, batch=True, max_message_size=250)
        got, got_sent = run(batched, pieces)
        assert (flatten(got), got_sent) == run(plain, pieces)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_of_frames_is_one_batch(backend: BackendName) -> None:
    frames = [server_frame(2, i.to_bytes(8, "big") + b"p" * 92) for i in range(1000)]
    frames.insert(500, server_frame(9, b"hb"))
    client = open_raw(backend=backend, batch=True)
    client.receive_data(b"".join(frames) + server_frame(1, b"tail", fin=False))
    events = list(client.events())
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["MessageBatch", "Ping", "MessageBatch"]
    assert [len(e) for e in events if isinstance(e, MessageBatch)] == [500, 500]
    first = events[0]
    assert isinstance(first, MessageBatch)
    assert first.lengths.tolist() == [100] * 500
    assert int.from_bytes(first.views()[499][:8], "big") == 499
    assert client_frames(client.data_to_send()) == [(0x8A, b"hb")]  # the pong
    # The fragmented message at the end is open: its end goes through the per-frame code.
    # A run of one message comes as a Message: nothing to gain from a batch of one.
    client.receive_data(server_frame(0, b"!") + server_frame(2, b"after"))
    assert list(client.events()) == [Message(b"tail!", True), Message(b"after", False)]
    client.receive_data(server_frame(2, b"x") + server_frame(2, b"y") + server_frame(9, b""))
    events = list(client.events())
    assert events[0] == MessageBatch(
        server_frame(2, b"x") + server_frame(2, b"y") + server_frame(9, b""),
        array.array("Q", [2, 1, 5, 1]).tobytes(),
        b"\x02\x02",
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_utf8_inside_a_run_fails_1007_after_the_good_ones(backend: BackendName) -> None:
    good = [server_frame(1, b"fine %d" % i) for i in range(5)]
    client = open_raw(backend=backend, batch=True)
    client.receive_data(b"".join(good) + server_frame(1, b"ok\xc0\xafno") + good[0])
    events = list(client.events())
    assert isinstance(events[0], MessageBatch)
    assert [m.data for m in events[0].messages()] == [b"fine %d" % i for i in range(5)]
    assert client.close_code == 1007
    assert len(events) == 2


def test_messages_of_a_batch_rebuild_the_batch() -> None:
    messages = [Message(b"abc", True), Message(b"", False), Message(b"\x00\xff", False)]
    batch = MessageBatch.of(messages)
    assert len(batch) == 3
    assert batch.messages() == messages
    assert batch.offsets.tolist() == [0, 3, 3]


# ---- wsproto as the frame-encoding oracle -------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@DIFF
@given(
    messages=st.lists(st.text(max_size=80) | st.binary(max_size=300), max_size=30),
    seed=st.integers(0, 1 << 30),
)
def test_wsproto_frames_come_out_of_the_batch_path(
    backend: BackendName, messages: list[str | bytes], seed: int
) -> None:
    client, server, _ = accepted(backend=backend, batch=True, deflate=None)
    wire = b"".join(
        server.send(TextMessage(m) if isinstance(m, str) else BytesMessage(m)) for m in messages
    )
    got: list[WsEvent] = []
    for piece in split(wire, "chunks", seed):
        client.receive_data(piece)
        got += client.events()
    expected = [
        Message(m.encode() if isinstance(m, str) else m, isinstance(m, str)) for m in messages
    ]
    assert flatten(got) == expected


@needs_c
def test_c_batch_scan_refuses_bad_arguments() -> None:
    from dataplane.shim import WsBatchScanner

    with pytest.raises(ValueError, match="bad arguments"):
        WsBatchScanner(4).scan(b"\x82\x00", 3, 100)
    with pytest.raises(ValueError, match="max_frames"):
        WsBatchScanner(0)
    with pytest.raises(ValueError, match="beyond"):
        scan_batch(b"\x82\x00", 3, 100)

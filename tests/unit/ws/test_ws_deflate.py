"""permessage-deflate (RFC 7692): negotiation, both directions against wsproto, context
takeover, window bits, and bounded decompression (a bomb closes 1009 without the memory)."""

from __future__ import annotations

import json
import tracemalloc
import zlib
from typing import cast

import pytest
from ws_helpers import BACKENDS, accepted, feed, open_raw, server_frame
from wsproto.events import BytesMessage, TextMessage
from wsproto.events import Message as WsprotoMessage
from wsproto.extensions import PerMessageDeflate

from dataplane.ws.client import ConnectionState
from dataplane.ws.deflate import (
    DeflateOptions,
    DeflateParams,
    NegotiationError,
    accept_response,
)
from dataplane.ws.errors import LocalProtocolError
from dataplane.ws.events import Closed, Message
from dataplane.ws.scan import BackendName


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> BackendName:
    return cast(BackendName, request.param)


def deflate_raw(data: bytes, *, final: bool = False, wbits: int = -15) -> bytes:
    """A server's compressed message payload (section 7.2.1), made here with zlib."""
    z = zlib.compressobj(6, zlib.DEFLATED, wbits)
    out = z.compress(data) + z.flush(zlib.Z_FINISH if final else zlib.Z_SYNC_FLUSH)
    return out if final else out[:-4]


MARKET = [
    json.dumps({"e": "depthUpdate", "s": "BTCUSDT", "b": [["42000.1", str(i)]] * 20}).encode()
    for i in range(30)
]

SERVER_CONFIGS = [
    PerMessageDeflate(),
    PerMessageDeflate(server_no_context_takeover=True),
    PerMessageDeflate(client_no_context_takeover=True),
    PerMessageDeflate(server_max_window_bits=9),
    PerMessageDeflate(client_max_window_bits=10, server_max_window_bits=10),
]


@pytest.mark.parametrize("server_ext", SERVER_CONFIGS, ids=repr)
@pytest.mark.parametrize(
    "options",
    [True, DeflateOptions(client_no_context_takeover=False), DeflateOptions(level=6)],
    ids=["default", "context-takeover", "level6"],
)
def test_both_directions_through_wsproto(
    backend: BackendName, server_ext: PerMessageDeflate, options: bool | DeflateOptions
) -> None:
    ext = PerMessageDeflate(
        client_no_context_takeover=server_ext.client_no_context_takeover,
        client_max_window_bits=server_ext.client_max_window_bits,
        server_no_context_takeover=server_ext.server_no_context_takeover,
        server_max_window_bits=server_ext.server_max_window_bits,
    )
    client, server, handshake = accepted(extensions=[ext], backend=backend, deflate=options)
    assert handshake.extensions == ("permessage-deflate",)
    assert handshake.deflate is not None and client.deflate == handshake.deflate
    wire = b""
    for message in MARKET:
        frame = client.send_text(message)
        assert frame[0] == 0xC1  # FIN, RSV1, text: compressed (section 6)
        wire += frame
    wire += client.send_binary(b"\x00" * 5000)
    server.receive_data(wire)
    got = list(server.events())
    assert got == [TextMessage(m.decode()) for m in MARKET] + [BytesMessage(b"\x00" * 5000)]

    out = b"".join(server.send(TextMessage(m.decode())) for m in MARKET)
    out += server.send(WsprotoMessage(data=b"frag", message_finished=False))
    out += server.send(WsprotoMessage(data=b"mented", message_finished=True))
    assert out[0] & 0x40  # the server compressed too
    events = feed(client, out, step=0)
    assert events == [Message(m, True) for m in MARKET] + [Message(b"fragmented", False)]


def test_server_messages_compressed_here_fed_byte_at_a_time(backend: BackendName) -> None:
    client = open_raw(
        "Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover",
        backend=backend,
        deflate=True,
    )
    payload = json.dumps({"snapshot": list(range(2000))}).encode()
    compressed = deflate_raw(payload)
    # One compressed message in three fragments; RSV1 on the first only (section 6.1).
    a, b = len(compressed) // 3, 2 * len(compressed) // 3
    wire = (
        server_frame(1, compressed[:a], fin=False, rsv=4)
        + server_frame(0, compressed[a:b], fin=False)
        + server_frame(9, b"hb")
        + server_frame(0, compressed[b:])
        + server_frame(1, b"plain after compressed")
        + server_frame(2, b"\x00", rsv=4)  # an empty message compresses to one 0x00
    )
    events = [e for e in feed(client, wire, step=1) if isinstance(e, Message)]
    assert events == [
        Message(payload, True),
        Message(b"plain after compressed", True),
        Message(b"", False),
    ]


def test_a_message_ending_in_a_final_block_resets_the_stream(backend: BackendName) -> None:
    client = open_raw("Sec-WebSocket-Extensions: permessage-deflate", backend=backend, deflate=True)
    wire = server_frame(1, deflate_raw(b"first", final=True), rsv=4)
    wire += server_frame(1, deflate_raw(b"second"), rsv=4)
    assert feed(client, wire) == [Message(b"first", True), Message(b"second", True)]


def test_an_8_bit_client_window_means_uncompressed_messages(backend: BackendName) -> None:
    client = open_raw(
        "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits=8",
        backend=backend,
        deflate=True,
    )
    assert client.deflate is not None and client.deflate.client_max_window_bits == 8
    assert client.send_text("x" * 1000)[0] == 0x81  # no RSV1: zlib has no 8-bit raw window


def test_compress_threshold_sends_small_messages_plain() -> None:
    client = open_raw(
        "Sec-WebSocket-Extensions: permessage-deflate",
        deflate=DeflateOptions(compress_threshold=64),
    )
    assert client.send_text("small")[0] == 0x81
    assert client.send_text("x" * 64)[0] == 0xC1


@pytest.mark.parametrize("step", [0, 4096])
def test_decompression_bomb_closes_1009_with_bounded_memory(
    backend: BackendName, step: int
) -> None:
    limit = 1 << 20
    bomb = deflate_raw(b"\x00" * (100 * 1000 * 1000))  # 100 MB of zeros, ~100 KB on the wire
    assert len(bomb) < 200_000
    client = open_raw(
        "Sec-WebSocket-Extensions: permessage-deflate",
        backend=backend,
        deflate=True,
        max_message_size=limit,
    )
    wire = server_frame(2, bomb, rsv=4)
    tracemalloc.start()
    try:
        events = feed(client, wire, step=step)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert events[-1] == Closed(1009, "decompressed message exceeds the limit", False, True)
    assert client.state is ConnectionState.ERROR
    # The wire bytes (buffered and joined) plus at most about one limit of output.
    assert peak < 3 * len(wire) + 3 * limit, peak


def test_bomb_across_fragments_is_caught_by_the_message_limit(backend: BackendName) -> None:
    client = open_raw(
        "Sec-WebSocket-Extensions: permessage-deflate",
        backend=backend,
        deflate=True,
        max_message_size=100_000,
    )
    z = zlib.compressobj(6, zlib.DEFLATED, -15)
    first = z.compress(b"a" * 60_000) + z.flush(zlib.Z_SYNC_FLUSH)
    second = z.compress(b"a" * 60_000) + z.flush(zlib.Z_SYNC_FLUSH)
    wire = server_frame(1, first, fin=False, rsv=4) + server_frame(0, second[:-4])
    events = feed(client, wire)
    assert isinstance(events[-1], Closed) and events[-1].code == 1009


@pytest.mark.parametrize(
    ("wire", "code"),
    [
        (server_frame(1, b"\xff\xff\xff garbage", rsv=4), 1007),
        (
            server_frame(1, deflate_raw(b"ok"), fin=False, rsv=4) + server_frame(0, b"x", rsv=4),
            1002,
        ),
        (server_frame(9, b"", rsv=4), 1002),
        (server_frame(1, deflate_raw(b"\xff\xfe"), rsv=4), 1007),
    ],
    ids=["bad-deflate-data", "rsv1-on-continuation", "rsv1-on-ping", "invalid-utf8-inside"],
)
def test_deflate_violations(backend: BackendName, wire: bytes, code: int) -> None:
    client = open_raw(
        "Sec-WebSocket-Extensions: permessage-deflate",
        backend=backend,
        deflate=True,
    )
    events = feed(client, wire)
    assert isinstance(events[-1], Closed)
    assert events[-1].code == code and events[-1].failure


# ---- negotiation (RFC 7692 section 7.1) ------------------------------------------------------
def params(text: str) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for item in filter(None, (p.strip() for p in text.split(";"))):
        key, sep, value = item.partition("=")
        out.append((key, value if sep else None))
    return out


@pytest.mark.parametrize(
    ("options", "response", "expected"),
    [
        (DeflateOptions(), "", DeflateParams(True, False, 15, 15)),
        (
            DeflateOptions(client_no_context_takeover=False),
            "client_no_context_takeover; server_no_context_takeover",
            DeflateParams(True, True, 15, 15),
        ),
        (DeflateOptions(), "client_max_window_bits=9", DeflateParams(True, False, 9, 15)),
        (
            DeflateOptions(client_max_window_bits=10),
            "",
            DeflateParams(True, False, 10, 15),
        ),
        (
            DeflateOptions(server_max_window_bits=10),
            "server_max_window_bits=9",
            DeflateParams(True, False, 15, 9),
        ),
        (
            DeflateOptions(server_no_context_takeover=True),
            "server_no_context_takeover",
            DeflateParams(True, True, 15, 15),
        ),
    ],
)
def test_negotiated_parameters(
    options: DeflateOptions, response: str, expected: DeflateParams
) -> None:
    assert accept_response(options, params(response)) == expected


@pytest.mark.parametrize(
    ("options", "response", "reason"),
    [
        (DeflateOptions(server_max_window_bits=10), "", "not answered"),
        (DeflateOptions(server_max_window_bits=10), "server_max_window_bits=11", "exceeds"),
        (DeflateOptions(client_max_window_bits=10), "client_max_window_bits=12", "exceeds"),
        (DeflateOptions(server_no_context_takeover=True), "", "not answered"),
        (DeflateOptions(), "client_max_window_bits=16", "8..15"),
        (DeflateOptions(), "client_max_window_bits=x", "value"),
        (DeflateOptions(), "client_no_context_takeover=1", "no value"),
        (DeflateOptions(), "mystery", "unknown"),
    ],
)
def test_bad_responses_are_negotiation_errors(
    options: DeflateOptions, response: str, reason: str
) -> None:
    with pytest.raises(NegotiationError, match=reason):
        accept_response(options, params(response))


def test_bad_local_options_raise() -> None:
    with pytest.raises(LocalProtocolError):
        DeflateOptions(client_max_window_bits=7)
    with pytest.raises(LocalProtocolError):
        DeflateOptions(level=11)

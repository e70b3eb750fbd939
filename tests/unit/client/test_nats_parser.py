"""The core NATS reader's parser (gateway.client.nats_core) against nats-py's own parser as
the oracle: the same operations, split anywhere (byte at a time too), give the same
messages; malformed input raises NatsProtocolError, never a wrong message. The shim's scan
of plain messages on and off gives the same events and the same errors (differential)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nats.protocol.parser import Parser

from dataplane.shim import NatsScanner
from gateway.client.nats_core import (
    MAX_CONTROL_LINE,
    MAX_PAYLOAD,
    NatsErr,
    NatsInfo,
    NatsMsg,
    NatsOk,
    NatsParser,
    NatsPing,
    NatsPong,
    NatsProtocolError,
    parse_headers,
)

TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-$", min_size=1, max_size=12)
SUBJECT = st.lists(TOKEN, min_size=1, max_size=4).map(".".join)
HEADER_NAME = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12
)
HEADER_VALUE = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789 .:/", max_size=20).map(
    str.strip
)
MESSAGE = st.tuples(
    SUBJECT,
    st.integers(1, 10**6),
    st.none() | SUBJECT,
    st.none() | st.dictionaries(HEADER_NAME, HEADER_VALUE, max_size=4),
    st.binary(max_size=300),
)


def encode(
    subject: str, sid: int, reply: str | None, headers: dict[str, str] | None, payload: bytes
) -> bytes:
    reply_part = f" {reply}" if reply else ""
    if headers is None:
        return f"MSG {subject} {sid}{reply_part} {len(payload)}\r\n".encode() + payload + b"\r\n"
    block = "NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    head = block.encode()
    line = f"HMSG {subject} {sid}{reply_part} {len(head)} {len(head) + len(payload)}\r\n"
    return line.encode() + head + payload + b"\r\n"


class OracleSink:
    """What nats-py's parser hands its client: the messages, PINGs, PONGs, errors, INFOs."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, payload: bytes, hdr: bytes | None
    ) -> None:
        self.events.append(("msg", subject.decode(), sid, reply.decode() or None, payload))

    async def _process_ping(self) -> None:
        self.events.append(("ping",))

    async def _process_pong(self) -> None:
        self.events.append(("pong",))

    async def _process_err(self, text: str) -> None:
        self.events.append(("err", text.strip("'")))  # nats-py strips the quotes later

    async def _process_info(self, info: dict[str, Any]) -> None:
        self.events.append(("info", info))


def ours_as_oracle(events: list[Any]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for e in events:
        if isinstance(e, NatsMsg):
            out.append(("msg", e.subject, e.sid, e.reply, e.payload))
        elif isinstance(e, NatsPing):
            out.append(("ping",))
        elif isinstance(e, NatsPong):
            out.append(("pong",))
        elif isinstance(e, NatsErr):
            out.append(("err", e.text.lower()))
        elif isinstance(e, NatsInfo):
            out.append(("info", e.fields))
    return out


def chunks_of(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


CONTROL = st.sampled_from(
    [
        b"PING\r\n",
        b"PONG\r\n",
        b"+OK\r\n",
        b"-ERR 'Slow Consumer'\r\n",
        b'INFO {"server_id":"x","max_payload":1048576}\r\n',
    ]
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(MESSAGE.map(lambda m: ("m", m)), CONTROL.map(lambda c: ("c", c))), max_size=12
    ),
    st.lists(st.integers(0, 10_000), max_size=12),
)
def test_split_anywhere_gives_what_nats_py_parses(
    ops: list[tuple[str, Any]], cuts: list[int]
) -> None:
    wire = b"".join(encode(*op) if kind == "m" else op for kind, op in ops)
    oracle = OracleSink()
    reference = Parser(oracle)
    asyncio.run(reference.parse(wire))

    parser = NatsParser()
    events: list[Any] = []
    for chunk in chunks_of(wire, cuts):
        events.extend(parser.feed(chunk))
    assert parser.buffered == 0
    assert ours_as_oracle(events) == oracle.events
    assert outcome(wire, cuts, scan=False) == (events, 0)
    messages = [e for e in events if isinstance(e, NatsMsg)]
    sent = [op for kind, op in ops if kind == "m"]
    assert [m.headers for m in messages] == [h for _, _, _, h, _ in sent]
    assert sum(isinstance(e, NatsOk) for e in events) == sum(
        op == b"+OK\r\n" for kind, op in ops if kind == "c"
    )


def test_byte_at_a_time_gives_the_same_messages() -> None:
    wire = (
        b"".join(
            encode(
                "wsgw.3.btcusdt",
                1,
                None,
                {"Wsgw-Seq": str(i), "Wsgw-Recv-Ts": "17"},
                b'{"i":%d}' % i,
            )
            for i in range(20)
        )
        + b"PING\r\n"
    )
    parser = NatsParser()
    events: list[Any] = []
    for i in range(len(wire)):
        events.extend(parser.feed(wire[i : i + 1]))
    assert [e.headers["Wsgw-Seq"] for e in events if isinstance(e, NatsMsg)] == [
        str(i) for i in range(20)
    ]
    assert events[-1] == NatsPing()
    assert parser.buffered == 0


def test_operations_are_case_insensitive_and_a_reply_subject_is_kept() -> None:
    events = NatsParser().feed(b"msg a.b 7 inbox.1 2\r\nhi\r\nping\r\n")
    assert events == [NatsMsg("a.b", 7, "inbox.1", None, b"hi"), NatsPing()]


def test_status_headers_come_as_nats_py_names_them() -> None:
    assert parse_headers(b"NATS/1.0 503\r\n\r\n") == {"Status": "503"}
    assert parse_headers(b"NATS/1.0 404 No Messages\r\n\r\n") == {
        "Status": "404",
        "Description": "No Messages",
    }
    assert parse_headers(b"NATS/1.0\r\nA: 1\r\nA: 2\r\nB:  x \r\n\r\n") == {"A": "1", "B": "x"}


@pytest.mark.parametrize(
    ("wire", "says"),
    [
        (b"FOO bar\r\n", "unknown operation"),
        (b"MSG a 1 x\r\nabc\r\n", "malformed MSG"),
        (b"MSG a 1\r\n", "malformed MSG"),
        (b"HMSG a 1 2\r\n", "malformed HMSG"),
        (b"MSG a 1 3\r\nabcXY", "not followed by CRLF"),
        (b"HMSG a 1 10 5\r\n01234\r\n", "headers longer"),
        (b"HMSG a 1 5 5\r\nHTTP/\r\n", "header block starts"),
        (b"HMSG a 1 13 13\r\nNATS/1.0\r\nX\r\n\r\n", "has no name"),
        (b"INFO [1]\r\n", "JSON object"),
        (b"INFO {\r\n", "not JSON"),
        (b"MSG a 1 99999999999\r\n", "largest payload"),
        (b"MSG \xff\xfe 1 2\r\nhi\r\n", "not UTF-8"),
        (b"MSG a 1 \xff 2\r\nhi\r\n", "not UTF-8"),
        (b"M" * (MAX_CONTROL_LINE + 1), "longer than"),
    ],
)
@pytest.mark.parametrize("scan", [True, False], ids=["shim", "python"])
def test_malformed_input_is_a_protocol_error(wire: bytes, says: str, scan: bool) -> None:
    with pytest.raises(NatsProtocolError, match=says):
        read_all_headers(NatsParser(scan=scan).feed(wire))


def read_all_headers(events: list[Any]) -> None:
    """Headers are parsed on demand: asking for them is where a bad block shows."""
    for event in events:
        if isinstance(event, NatsMsg):
            _ = event.headers


PIECES = [b"MSG ", b"HMSG ", b"\r\n", b"PING", b" 1 ", b" 2", b"a.b", b"\xff", b"NATS/1.0"]


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=40),
            st.sampled_from(PIECES),
        ),
        max_size=20,
    )
)
def test_any_bytes_give_events_or_a_protocol_error(pieces: list[bytes]) -> None:
    """Whatever the server sends, the parser says NatsProtocolError or gives events, and a
    message's headers parse or say NatsProtocolError: no other exception escapes."""
    parser = NatsParser()
    with contextlib.suppress(NatsProtocolError):
        read_all_headers(parser.feed(b"".join(pieces)))


# ---- the shim's scan of plain messages, on and off ------------------------------------------
NUMBERS = (b"Wsgw-Seq", b"Wsgw-Recv-Ts")


def outcome(
    wire: bytes, cuts: list[int], scan: bool, numbers: tuple[bytes, ...] = ()
) -> tuple[list[Any], int] | str:
    """What a parser makes of wire fed in the given pieces: its events and what it holds,
    or the error it raised (type and text)."""
    parser = NatsParser(scan=scan, numbers=numbers)
    events: list[Any] = []
    try:
        for chunk in chunks_of(wire, cuts):
            events.extend(parser.feed(chunk))
    except NatsProtocolError as exc:
        return f"{type(exc).__name__}: {exc}"
    return events, parser.buffered


def test_the_shim_scans_when_it_loads() -> None:
    assert NatsParser()._scanner is not None
    assert NatsParser(scan=False)._scanner is None


NEAR_PLAIN = st.sampled_from(
    [
        b"MSG a.b 1 2\r\nhi\r\n",
        b"msg a.b 1 2\r\nhi\r\n",
        b"MSG\ta.b\t\t1  2\r\nhi\r\n",
        b"MSG a.b 1 2 \r\nhi\r\n",
        b"MSG a.b 1 inbox 2\r\nhi\r\n",
        b"MSG a.b 1 2\r\nhiX\r\n",
        b"MSG a.b 1234567890123456789 2\r\nhi\r\n",
        b"MSG a.b 12345678901234567890 2\r\nhi\r\n",
        b"MSG a.b 1 0002\r\nhi\r\n",
        b"MSG a\nb 1 2\r\nhi\r\n",
        b"MSG a\rb 1 2\r\nhi\r\n",
        b"MSGa.b 1 2\r\nhi\r\n",
        b"HMSG a.b 1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
        b"hmsg a.b 1 12 12\r\nNATS/1.0\r\n\r\n\r\n",
        b"HMSG a.b 1 12 11\r\nNATS/1.0\r\n\r\n\r\n",
        b"HMSG a.b 1 3 5\r\nNAThi\r\n",
        b"HMSG a.b 1 r 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
        b"MSG \xff 1 2\r\nhi\r\n",
        b"MSG a 1 99999999999\r\n",
        b"PING\r\n",
        b"-ERR 'x'\r\n",
    ]
)


NUMBER_VALUE = st.sampled_from(
    ["1", "0012", " 7 ", "\t42", "1796298610231722071", "9999999999999999999",
     "18446744073709551615", "", "x", "-3", "+3", "1_000", "1 2", "12x", "\u0663", "\x0b5",
     "5\x0b"]
)  # fmt: skip
SINK_HEADERS = st.lists(
    st.tuples(st.sampled_from([*(n.decode() for n in NUMBERS), "wsgw-seq", "Other"]), NUMBER_VALUE),
    max_size=4,
).map(lambda pairs: "".join(f"{name}:{value}\r\n" for name, value in pairs))


def sink_message(subject: str, sid: int, lines: str, payload: bytes) -> bytes:
    """An HMSG with header lines as given (names twice, odd values: written raw)."""
    head = f"NATS/1.0\r\n{lines}\r\n".encode()
    line = f"HMSG {subject} {sid} {len(head)} {len(head) + len(payload)}\r\n".encode()
    return line + head + payload + b"\r\n"


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            MESSAGE.map(lambda m: encode(*m)),
            st.builds(
                sink_message, SUBJECT, st.integers(1, 99), SINK_HEADERS, st.binary(max_size=40)
            ),
            NEAR_PLAIN,
            st.sampled_from(PIECES),
            st.binary(max_size=12),
        ),
        max_size=16,
    ),
    st.lists(st.integers(0, 10_000), max_size=8),
    st.sampled_from([(), NUMBERS[:1], NUMBERS]),
)
def test_the_scan_on_and_off_give_the_same_events_and_errors(
    pieces: list[bytes], cuts: list[int], numbers: tuple[bytes, ...]
) -> None:
    wire = b"".join(pieces)
    assert outcome(wire, cuts, True, numbers) == outcome(wire, cuts, False, numbers)


@pytest.mark.parametrize("value", NUMBER_VALUE.elements)  # type: ignore[attr-defined]
def test_a_header_number_is_read_alike_with_the_scan_on_and_off(value: str) -> None:
    wire = sink_message("a", 1, f"Wsgw-Recv-Ts:{value}\r\nWsgw-Seq: {value}\r\n", b"x")
    assert outcome(wire, [], True, NUMBERS) == outcome(wire, [], False, NUMBERS)


def test_header_numbers_come_with_each_message() -> None:
    wire = (
        sink_message("a", 1, "Wsgw-Seq: 5\r\nWsgw-Recv-Ts: 17\r\n", b"x")
        + sink_message("a", 1, "Wsgw-Seq: 6\r\nWsgw-Seq: 9\r\n", b"y")  # the first one
        + sink_message("a", 1, "Wsgw-Seq: x\r\nWsgw-Recv-Ts:  +18 \r\n", b"z")
        + b"MSG a 1 1\r\nw\r\n"
    )
    for scan in (True, False):
        events = NatsParser(scan=scan, numbers=NUMBERS).feed(wire)
        assert [e.numbers for e in events if isinstance(e, NatsMsg)] == [
            (5, 17),
            (6, 0),
            (0, 18),
            (0, 0),
        ], scan


def test_the_scan_takes_a_long_read_in_several_calls() -> None:
    """More plain messages than the scanner's result array holds: every one, in order."""
    wire = b"".join(encode(f"s.{i % 3}", 1, None, None, b"%d" % i) for i in range(11))
    wire += b"PING\r\n" + encode("t", 2, None, {"A": "1"}, b"x")
    parser = NatsParser()
    parser._scanner = NatsScanner(MAX_PAYLOAD, max_msgs=2)
    events = parser.feed(wire)
    assert [e.payload for e in events[:11]] == [b"%d" % i for i in range(11)]
    assert events[11] == NatsPing()
    assert events[12] == NatsMsg("t", 2, None, b"NATS/1.0\r\nA: 1\r\n\r\n", b"x")
    assert parser.buffered == 0


def test_the_scanner_stops_where_the_parser_must_read() -> None:
    scanner = NatsScanner(MAX_PAYLOAD)
    plain = b"MSG a 1 2\r\nhi\r\n"
    for rest in (b"PING\r\n", b"MSG a 1 r 2\r\nhi\r\n", b"MSG a 1 2\r\nh", b"MSG a 1"):
        buf = bytearray(plain + rest)
        words, consumed = scanner.scan(buf, 0)
        assert (words, consumed) == ([4, 1, 1, 11, 0, 11, 2, 0, 0], len(plain)), rest
    assert scanner.scan(bytearray(), 0) == ([], 0)
    assert scanner.scan(bytearray(plain * 2), len(plain))[1] == 2 * len(plain)

"""Topic extraction: the C scanner, its Python twin and json.loads/orjson must agree.

Valid JSON: every path's span decodes to the value json.loads finds there. Any bytes at
all: C and Python give the same status and spans, and neither crashes. Truncation: strict
scans refuse every proper prefix; early scans either refuse it or found everything before
the cut.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from dataplane.shim import (
    JSON_ABSENT,
    JSON_ARRAY,
    JSON_FALSE,
    JSON_NULL,
    JSON_NUMBER,
    JSON_OBJECT,
    JSON_STRING,
    JSON_STRING_ESC,
    JSON_TRUE,
    TOPIC_MALFORMED,
    TOPIC_MAX_KEY,
    TOPIC_OK,
    TOPIC_PARTIAL,
    TOPIC_TOO_DEEP,
    TopicBatch,
    TopicError,
    TopicValueSpan,
    build_topic_spec,
    topic_extract,
)
from gateway.dialects.base import get_path, has_path
from gateway.dialects.jsonscan import TopicPaths, parse_path, scan, span_text

MAX_KEY = TOPIC_MAX_KEY


def c_scan(message: bytes, paths: TopicPaths) -> tuple[int, list[TopicValueSpan]]:
    spec = build_topic_spec(paths.paths, presence=paths.presence, strict=paths.strict)
    return topic_extract(spec, message)


def both(message: bytes, paths: TopicPaths) -> tuple[int, list[TopicValueSpan]]:
    """Scan with both implementations, assert they agree, return the answer."""
    got_c = c_scan(message, paths)
    got_py = scan(message, paths)
    assert got_c == got_py, (message[:200], paths)
    return got_c


def value_of(message: bytes, span: TopicValueSpan) -> Any:
    raw = message[span.offset : span.offset + span.length]
    if span.kind in (JSON_STRING, JSON_STRING_ESC):
        return span_text(message, span)
    return json.loads(raw)


KIND_OF_TYPE = {
    str: JSON_STRING,
    bool: None,
    int: JSON_NUMBER,
    float: JSON_NUMBER,
    dict: JSON_OBJECT,
}


def kind_matches(kind: int, value: Any) -> bool:
    if isinstance(value, bool):
        return kind == (JSON_TRUE if value else JSON_FALSE)
    if value is None:
        return kind == JSON_NULL
    if isinstance(value, str):
        return kind in (JSON_STRING, JSON_STRING_ESC)
    if isinstance(value, int | float):
        return kind == JSON_NUMBER
    if isinstance(value, dict):
        return kind == JSON_OBJECT
    return kind == JSON_ARRAY


# ---- strategies -------------------------------------------------------------------------
keys = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=0, max_size=6
) | st.sampled_from(["stream", "data", "arg", "channel", "instId", "s", "topic", '"', "\\", "é"])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=25,
)
documents = st.dictionaries(keys, json_values, max_size=6) | json_values


def paths_in(doc: Any, draw: st.DrawFn) -> tuple[str | int, ...]:
    """A path that exists in doc (or stops at a random depth), sometimes bent to miss."""
    path: list[str | int] = []
    node = doc
    for _ in range(draw(st.integers(1, 4))):
        if isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node)))
            path.append(key)
            node = node[key]
        elif isinstance(node, list) and node:
            index = draw(st.integers(0, len(node) - 1))
            path.append(index)
            node = node[index]
        else:
            break
    if not path or draw(st.integers(0, 4)) == 0:
        path.append(draw(st.sampled_from(["nope", "stream", 0, 3])))
    return tuple(path[:4])


@st.composite
def doc_and_paths(draw: st.DrawFn) -> tuple[Any, TopicPaths]:
    doc = draw(documents)
    n = draw(st.integers(1, 4))
    raw_paths = [paths_in(doc, draw) for _ in range(n)]
    for path in raw_paths:
        assume(all(not isinstance(p, str) or len(p.encode()) <= MAX_KEY for p in path))
    presence = tuple(draw(st.booleans()) for _ in raw_paths)
    return doc, TopicPaths(tuple(raw_paths), presence, draw(st.booleans()))


@st.composite
def serialised(draw: st.DrawFn) -> tuple[bytes, Any, TopicPaths]:
    doc, paths = draw(doc_and_paths())
    style = draw(st.sampled_from(["compact", "spaced", "indent", "ascii", "orjson"]))
    if style == "orjson":
        text = orjson.dumps(doc)
    elif style == "indent":
        text = json.dumps(doc, indent=draw(st.integers(0, 3)), ensure_ascii=False).encode()
    elif style == "ascii":
        text = json.dumps(doc).encode()
    elif style == "spaced":
        text = (
            " \n" + json.dumps(doc, separators=(" , ", " : "), ensure_ascii=False) + "\t"
        ).encode()
    else:
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    return text, doc, paths


# ---- valid JSON: agree with json.loads ----------------------------------------------------
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(serialised())
def test_spans_match_json_loads(case: tuple[bytes, Any, TopicPaths]) -> None:
    text, doc, paths = case
    assert json.loads(text) == orjson.loads(text) or True  # both parse it (nan-free)
    status, spans = both(text, paths)
    assert status in (TOPIC_OK, TOPIC_PARTIAL)
    for i, (path, span) in enumerate(zip(paths.paths, spans, strict=True)):
        exists = has_path(doc, path)
        assert span.found == exists, (path, text)
        if not exists:
            continue
        expected = get_path(doc, path)
        assert kind_matches(span.kind, expected), (path, span, expected)
        if paths.is_presence(i):
            assert span.length == 0
            continue
        got = value_of(text, span)
        assert got == expected or (got != got and expected != expected), (path, got, expected)
    assert (status == TOPIC_OK) == all(s.found for s in spans)


@settings(max_examples=300, deadline=None)
@given(serialised(), st.data())
def test_truncation_never_invents(case: tuple[bytes, Any, TopicPaths], data: st.DataObject) -> None:
    text, _, paths = case
    text = text.strip()
    assume(len(text) > 1)
    cut = data.draw(st.integers(0, len(text) - 1))
    prefix = text[:cut]
    status, spans = both(prefix, paths)
    strict = TopicPaths(paths.paths, paths.presence, strict=True)
    strict_status, strict_spans = both(prefix, strict)
    # A proper prefix of one JSON value is never one JSON value... except a number cut
    # short (123 -> 12), the one case where the prefix is itself valid.
    if not (text[:1].isdigit() or text[:1] == b"-"):
        assert strict_status in (TOPIC_MALFORMED, TOPIC_TOO_DEEP)
        assert all(not s.found for s in strict_spans)
    if status == TOPIC_OK:
        full_status, full_spans = both(text, paths)
        assert full_status == TOPIC_OK
        assert spans == full_spans
    elif status < 0:
        assert all(not s.found for s in spans)


# ---- arbitrary input: the two scanners agree, nothing crashes -----------------------------
JSONISH = st.sampled_from(list(b'{}[]":,\\ \tabcnlstrue0123-.e'))
FIXED_PATHS = [
    TopicPaths.of("stream"),
    TopicPaths.of("arg.channel", "arg.instId", presence=("data",)),
    TopicPaths.of("channel", "data[0].symbol"),
    TopicPaths.of("a", "b.c", "[1]", strict=True),
    TopicPaths((("a", 0, "b", "c"),)),
]


@settings(max_examples=1500, deadline=None)
@given(
    st.binary(max_size=64) | st.lists(JSONISH, max_size=80).map(bytes), st.sampled_from(FIXED_PATHS)
)
def test_any_bytes_same_answer(message: bytes, paths: TopicPaths) -> None:
    status, spans = both(message, paths)
    if status < 0:
        assert all(not s.found for s in spans)
    for span in spans:
        assert span.offset + span.length <= len(message)


@settings(max_examples=800, deadline=None)
@given(serialised(), st.data())
def test_mutations_same_answer(case: tuple[bytes, Any, TopicPaths], data: st.DataObject) -> None:
    text, _, paths = case
    assume(text)
    mutated = bytearray(text)
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(mutated)))
        byte = data.draw(JSONISH | st.integers(0, 255))
        op = data.draw(st.sampled_from(["insert", "replace", "delete"]))
        if op == "insert":
            mutated.insert(pos, byte)
        elif pos < len(mutated):
            if op == "replace":
                mutated[pos] = byte
            else:
                del mutated[pos]
    both(bytes(mutated), paths)


# ---- hand-made adversarial cases ----------------------------------------------------------
STREAM = TopicPaths.of("stream")


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # A key-like text inside a string is not a key.
        (b'{"x":"\\"stream\\":\\"fake\\"","stream":"real"}', "real"),
        (b'{"x":{"stream":"nested"},"stream":"top"}', "top"),
        (b'{"x":["stream","fake"],"stream":"top"}', "top"),
        # Escaped quotes and backslashes in and around the value.
        (b'{"stream":"a\\"b"}', 'a"b'),
        (b'{"stream":"a\\\\"}', "a\\"),
        (b'{"x":"\\\\","stream":"ok"}', "ok"),
        # An escaped key is the same key.
        (b'{"str\\u0065am":"esc"}', "esc"),
        (b'{"\\u0073\\u0074\\u0072\\u0065\\u0061\\u006d":"all"}', "all"),
        # Whitespace everywhere JSON allows it.
        (b' \r\n\t{ \n"stream" \t:\r "ws" \n} \n', "ws"),
        # First occurrence wins (json.loads keeps the last; exchanges never repeat keys).
        (b'{"stream":"first","stream":"second"}', "first"),
        # Brackets inside strings do not count.
        (b'{"x":"}}]]{{","y":["]",{"}":"["}],"stream":"after"}', "after"),
    ],
)
def test_adversarial_found(message: bytes, expected: str) -> None:
    status, spans = both(message, STREAM)
    assert status == TOPIC_OK
    assert span_text(message, spans[0]) == expected


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"   ",
        b"{",
        b'{"stream"',
        b'{"stream":',
        b'{"stream":"unterminated',
        b'{"stream":"ends in backslash\\',
        b'{"x":{"y":[1,2,{"z":"',
        b'{"x":[1,2}],"stream":"a"}',
        b'{"x" "stream":"a"}',
        b'{"x":1 "stream":"a"}',
        b'{,"stream":"a"}',
        b'{"str\\qeam":"bad escape in a compared key"}',
        b'{"str\\u00zzam":"bad hex"}',
        b'{"x":tru,"stream":"a"}',
        b'{"x":nul}',
        b'["stream"',
        b"\xff\xfe",
        b'{"stream":"a"} trailing' if False else b'{"x":1} trailing',
        b"}",
    ],
)
def test_adversarial_not_found(message: bytes) -> None:
    status, spans = both(message, STREAM)
    assert status == TOPIC_MALFORMED
    assert not spans[0].found


def test_truncated_after_the_value() -> None:
    """Early mode stops at the value (the frame layer hands over whole messages); strict
    mode reads to the end and refuses the truncated message."""
    message = b'{"stream":"btcusdt@trade","data":{"e":"tr'
    assert both(message, STREAM)[0] == TOPIC_OK
    assert both(message, TopicPaths.of("stream", strict=True))[0] == TOPIC_MALFORMED


def test_deep_nesting() -> None:
    deep_ok = b'{"x":' + b"[" * 1000 + b"]" * 1000 + b',"stream":"s"}'
    assert both(deep_ok, STREAM)[0] == TOPIC_OK
    too_deep = b'{"x":' + b"[" * 5000 + b"]" * 5000 + b',"stream":"s"}'
    status, spans = both(too_deep, STREAM)
    assert status == TOPIC_TOO_DEEP and not spans[0].found
    mismatched = b'{"x":' + b"[{" * 200 + b"]}" * 200 + b',"stream":"s"}'
    assert both(mismatched, STREAM)[0] == TOPIC_MALFORMED


def test_kinds_and_spans() -> None:
    message = b'{"s":"txt","n":-1.5e3,"t":true,"f":false,"z":null,"o":{"a":[1]},"a":[{"b":2}]}'
    paths = TopicPaths.of("n", "t", "o", "a[0].b")
    status, spans = both(message, paths)
    assert status == TOPIC_OK
    assert [s.kind for s in spans] == [JSON_NUMBER, JSON_TRUE, JSON_OBJECT, JSON_NUMBER]
    assert [message[s.offset : s.offset + s.length] for s in spans] == [
        b"-1.5e3",
        b"true",
        b'{"a":[1]}',
        b"2",
    ]
    status, spans = both(message, TopicPaths.of("f", "z", "s", "nope"))
    assert status == TOPIC_PARTIAL
    assert [s.kind for s in spans] == [JSON_FALSE, JSON_NULL, JSON_STRING, JSON_ABSENT]


def test_presence_stops_without_skipping() -> None:
    """A presence path found last ends the scan at its value: the rest is never read."""
    paths = TopicPaths.of("arg.channel", presence=("data",))
    message = b'{"arg":{"channel":"trades"},"data":[{"unterminated'
    status, spans = both(message, paths)
    assert status == TOPIC_OK
    assert spans[1] == TopicValueSpan(message.index(b"["), 0, JSON_ARRAY)


def test_top_level_array_and_scalars() -> None:
    kraken_v1 = b'[42,[["5541.2","0.15","1534614057.3","s","l",""]],"trade","XBT/USD"]'
    status, spans = both(kraken_v1, TopicPaths.of("[2]", "[3]"))
    assert status == TOPIC_OK
    assert [span_text(kraken_v1, s) for s in spans] == ["trade", "XBT/USD"]
    assert both(b"12", STREAM)[0] == TOPIC_PARTIAL
    assert both(b'"stream"', STREAM)[0] == TOPIC_PARTIAL


def test_parse_path() -> None:
    assert parse_path("arg.instId") == ("arg", "instId")
    assert parse_path("data[0].symbol") == ("data", 0, "symbol")
    assert parse_path("[3]") == (3,)
    for bad in ("", "a..b", "a[x]", "a.", "[1"):
        with pytest.raises(TopicError):
            parse_path(bad)


def test_spec_limits() -> None:
    with pytest.raises(TopicError):
        build_topic_spec([("a",)] * 5)
    with pytest.raises(TopicError):
        build_topic_spec([("a", "b", "c", "d", "e")])
    with pytest.raises(TopicError):
        build_topic_spec([("k" * 49,)])
    with pytest.raises(TopicError):
        build_topic_spec([(70000,)])


def test_batch_matches_single_calls() -> None:
    paths = TopicPaths.of("arg.channel", "arg.instId", presence=("data",))
    spec = build_topic_spec(paths.paths, presence=paths.presence)
    messages = [
        b'{"arg":{"channel":"trades","instId":"BTC-USDT"},"data":[]}',
        b'{"event":"subscribe","arg":{"channel":"trades","instId":"BTC-USDT"}}',
        b"pong",
        b"",
        b'{"arg":{"channel":"books5","instId":"ETH-USDT"},"data":[{"asks":[]}]}',
    ] * 100
    batch = TopicBatch(spec, capacity=8)  # grows
    assert batch.run(messages) == 200
    for i, message in enumerate(messages):
        status, spans = topic_extract(spec, message)
        assert batch.status[i] == status
        assert [batch.span(i, p) for p in range(3)] == spans
    # The same messages laid out in one receive buffer, with gaps between them.
    buf = bytearray()
    offsets, lengths = [], []
    for message in messages:
        buf += b"\xff" * 3
        offsets.append(len(buf))
        lengths.append(len(message))
        buf += message
    assert batch.run_buffer(buf, offsets, lengths) == 200
    assert batch.run_buffer(bytes(buf), offsets, lengths) == 200
    with pytest.raises(ValueError, match="outside"):
        batch.run_buffer(buf, [len(buf)], [1])
    assert batch.run([]) == 0


@example(b'{"stream":"x"}')
@given(st.binary(max_size=16))
def test_python_backend_alone(message: bytes) -> None:
    """The Python twin never raises, whatever it is given."""
    scan(message, STREAM)


# ---- long values: the 64-byte block skipper, escapes across block edges -------------------
tricky_text = st.text(alphabet=st.sampled_from(list('ab"\\{}[]é/ ')), min_size=0, max_size=150)
big_values = st.recursive(
    tricky_text | st.integers() | st.booleans(),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(tricky_text, inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=500, deadline=None)
@given(big_values, st.integers(0, 70), st.sampled_from([",", ", ", ",\n  "]))
def test_long_skips(value: Any, pad: int, sep: str) -> None:
    doc_text = '{"x":' + " " * pad + json.dumps(value, ensure_ascii=False) + sep + '"stream":"s"}'
    message = doc_text.encode()
    status, spans = both(message, STREAM)
    assert status == TOPIC_OK and span_text(message, spans[0]) == "s"
    strict = TopicPaths.of("stream", strict=True)
    assert both(message, strict)[0] == TOPIC_OK
    # Every cut of it: the same answer from both, and strict never accepts a cut.
    for cut in range(0, len(message), 7):
        assert both(message[:cut], strict)[0] in (TOPIC_MALFORMED, TOPIC_TOO_DEEP)


@pytest.mark.parametrize("at", range(56, 72))
def test_escape_on_block_edge(at: int) -> None:
    """A backslash as the last byte of a 64-byte block hides the first byte of the next."""
    head = b'{"x":["'
    filler = b"a" * (at - len(head))
    for tail in (b'\\"]"],"stream":"s"}', b'\\\\"],"stream":"s"}', b'\\"', b'\\\\"]'):
        message = head + filler + tail
        status, _ = both(message, STREAM)
        assert status == (TOPIC_OK if message.endswith(b"}") else TOPIC_MALFORMED), message

"""Message identity in C (dataplane/shim/identity.c) against the Python reference,
gateway.dialects.identity.identity_for: wherever C tells an identity it is Python's, on the
exchanges' documented frames, the dialect fixtures, the simulator's frames and generated
ones; and C tells it for the kinds it covers (trade, aggTrade, depth; Bybit books; OKX
books; Coinbase sequence)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.arbiter import CIdentity
from gateway.dialects.identity import HASH, MALFORMED_FRAME, Identity, identity_for
from tests.integration.test_simulator_helpers import TOPICS
from tests.unit.dialects.fixtures import FIXTURES
from tests.unit.dialects.test_dialects_identity import CONTROL, SAMPLES, sim_frame

C_DIALECTS = ("binance", "bybit", "okx", "coinbase")


def agree(dialect: str, raw: bytes) -> bool:
    """C's answer, when it gives one, is Python's; returns whether C gave one. (A frame
    broken after the fields C reads is told by C, refused by Python: wsgw_identity.h. Such
    frames are checked to be broken, and left out.)"""
    told = CIdentity(dialect)(raw)
    if told is None:
        return False
    expected = identity_for(dialect)(raw)
    if expected == MALFORMED_FRAME:
        with pytest.raises(json.JSONDecodeError):
            json.loads(raw)
        return False
    assert isinstance(expected, Identity), (raw, told, expected)
    assert expected.kind != HASH
    assert (told.topic, told.id, told.kind, told.prev) == (
        expected.topic,
        expected.id,
        expected.kind,
        expected.prev,
    ), raw
    return True


#: The documented frames C must tell (kinds it covers); the others it may leave to Python.
MUST_TELL = {
    b"@trade", b"@aggTrade", b"depthUpdate", b"orderbook.50", b'"books"', b'"done"', b'"match"'
}  # fmt: skip


@pytest.mark.parametrize(("dialect", "raw", "expected"), SAMPLES)
def test_documented_frames(dialect: str, raw: bytes, expected: Identity) -> None:
    if dialect not in C_DIALECTS:
        return
    told = agree(dialect, raw)
    covered = expected.kind != HASH and any(mark in raw for mark in MUST_TELL)
    covered = covered and b'"e":"trade","E":1,"s":"BNBBTC"' not in raw  # the raw endpoint
    assert told == covered, raw


@pytest.mark.parametrize(("dialect", "raw"), [c for c in CONTROL if c[0] in C_DIALECTS])
def test_control_frames_are_not_told(dialect: str, raw: bytes) -> None:
    assert not agree(dialect, raw)


@pytest.mark.parametrize("dialect", C_DIALECTS)
def test_fixtures_and_simulator_frames(dialect: str) -> None:
    told = 0
    for case in FIXTURES[dialect]:
        told += agree(dialect, case.raw)
    for topic in TOPICS[dialect]:
        for seq in (1, 41, 2**40):
            told += agree(dialect, sim_frame(dialect, topic, seq))
    assert told > 0


# ---- generated frames -------------------------------------------------------------------
ids = st.integers(min_value=-(2**63) + 2, max_value=2**63 - 1)
names = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x2FF, exclude_characters='"\\'), max_size=12
)
extras = st.dictionaries(
    st.sampled_from(["E", "p", "q", "x", "ts", "checksum", "b", "side", "cts"]),
    st.one_of(st.integers(), st.text(max_size=5), st.booleans(), st.none(), st.floats(
        allow_nan=False, allow_infinity=False)),
    max_size=3,
)  # fmt: skip
#: Values where an id should be: mostly ints, sometimes what C must leave to Python.
id_values = st.one_of(ids, ids, ids, st.floats(allow_nan=False), st.text(max_size=3), st.none())


def dumps(obj: object, shuffle: bool) -> bytes:
    if shuffle and isinstance(obj, dict):
        obj = dict(reversed(list(obj.items())))
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


@st.composite
def binance_frames(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["trade", "aggTrade", "depthUpdate", "other", None]))
    event: dict[str, object] = {"E": 1, "s": draw(names)}
    if kind is not None:
        event["e"] = kind
    field_names = {"trade": ["t"], "aggTrade": ["a"], "depthUpdate": ["U", "u"]}
    for name in field_names.get(kind or "", ["t", "u"]):
        if draw(st.integers(0, 9)):
            event[name] = draw(id_values)
    event.update(draw(extras))
    frame: dict[str, object] = {"stream": draw(names), "data": event}
    return dumps(frame, draw(st.booleans()))


@st.composite
def bybit_frames(draw: st.DrawFn) -> bytes:
    book: dict[str, object] = {"s": draw(names), "b": [], "a": []}
    if draw(st.integers(0, 9)):
        book["u"] = draw(st.one_of(id_values, st.just(1)))
    book["seq"] = draw(ids)
    frame: dict[str, object] = {"topic": draw(names), "ts": 1, "data": book}
    kind = draw(st.sampled_from(["snapshot", "delta", None, "absent"]))
    if kind != "absent":
        frame["type"] = kind
    frame.update(draw(extras))
    return dumps(frame, draw(st.booleans()))


@st.composite
def okx_frames(draw: st.DrawFn) -> bytes:
    item: dict[str, object] = {"asks": [], "bids": [], "ts": "1"}
    if draw(st.integers(0, 9)):
        item["seqId"] = draw(id_values)
    if draw(st.integers(0, 9)):
        item["prevSeqId"] = draw(st.one_of(id_values, st.just(-1)))
    items = [item, *draw(st.lists(st.just({"asks": []}), max_size=1))]
    frame = {
        "arg": {"channel": draw(names), "instId": draw(names)},
        "action": "update",
        "data": items,
    }
    return dumps(frame, draw(st.booleans()))


@st.composite
def coinbase_frames(draw: st.DrawFn) -> bytes:
    kinds = ["match", "last_match", "ticker", "l2update", "received", "done", "open", "zzz"]
    frame: dict[str, object] = {
        "type": draw(st.sampled_from(kinds)),
        "product_id": draw(names),
        "time": "2014-11-07T08:19:27.028459Z",
    }
    if draw(st.integers(0, 9)):
        frame["sequence"] = draw(id_values)
    frame.update(draw(extras))
    return dumps(frame, draw(st.booleans()))


@settings(max_examples=400, deadline=None)
@given(st.one_of(
    st.tuples(st.just("binance"), binance_frames()),
    st.tuples(st.just("bybit"), bybit_frames()),
    st.tuples(st.just("okx"), okx_frames()),
    st.tuples(st.just("coinbase"), coinbase_frames()),
))  # fmt: skip
def test_generated_frames(case: tuple[str, bytes]) -> None:
    dialect, raw = case
    agree(dialect, raw)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(C_DIALECTS), st.binary(max_size=64))
def test_arbitrary_bytes_never_disagree(dialect: str, raw: bytes) -> None:
    agree(dialect, raw)


def test_frames_cut_before_their_id_are_not_told() -> None:
    """(C stops reading once it has the id: what follows it is not checked.)"""
    raw = SAMPLES[0][1]
    for cut in range(raw.index(b'"t":12345') + len(b'"t":12345')):
        assert CIdentity("binance")(raw[:cut]) is None

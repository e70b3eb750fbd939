"""Message identity (gateway/dialects/identity.py): the exchange's own ids where a frame has
them, a content hash otherwise, and a typed 'no identity' for anything else."""

from __future__ import annotations

import json
import time
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.dialects import GenericConfig
from gateway.dialects.identity import (
    HASH,
    ID,
    IDENTITIES,
    SEQUENCE,
    Identity,
    NoIdentity,
    content_hash,
    identity_for,
)
from gateway.simulator.feeds import FEEDS
from tests.integration.test_simulator_helpers import TOPICS

DIALECTS = [*IDENTITIES, "generic"]

#: Frames as the exchanges document them -> the identity expected.
SAMPLES: list[tuple[str, bytes, Identity]] = [
    (
        "binance",
        b'{"stream":"btcusdt@trade","data":{"e":"trade","E":1,"s":"BTCUSDT","t":12345,'
        b'"p":"1.0","q":"2.0","b":88,"a":50,"T":1,"m":true,"M":true}}',
        Identity("btcusdt@trade", 12345, SEQUENCE, 12344),
    ),
    (
        "binance",
        b'{"stream":"btcusdt@aggTrade","data":{"e":"aggTrade","E":1,"s":"BTCUSDT","a":26129,'
        b'"p":"0.01","q":"100","f":100,"l":105,"T":1,"m":true,"M":true}}',
        Identity("btcusdt@aggTrade", 26129, SEQUENCE, 26128),
    ),
    (
        "binance",
        b'{"stream":"bnbbtc@depth@100ms","data":{"e":"depthUpdate","E":1,"s":"BNBBTC",'
        b'"U":157,"u":160,"b":[["0.0024","10"]],"a":[["0.0026","100"]]}}',
        Identity("bnbbtc@depth@100ms", 160, SEQUENCE, 156),
    ),
    (
        "binance",
        b'{"stream":"bnbusdt@bookTicker","data":{"u":400900217,"s":"BNBUSDT","b":"25.3",'
        b'"B":"31.2","a":"25.36","A":"40.66"}}',
        Identity("bnbusdt@bookTicker", 400900217, ID),
    ),
    (
        "binance",
        b'{"stream":"bnbbtc@depth5","data":{"lastUpdateId":160,"bids":[],"asks":[]}}',
        Identity("bnbbtc@depth5", 160, ID),
    ),
    (
        "binance",  # the raw endpoint: no wrapper
        b'{"e":"trade","E":1,"s":"BNBBTC","t":7,"p":"1","q":"1","T":1,"m":true,"M":true}',
        Identity("bnbbtc@trade", 7, SEQUENCE, 6),
    ),
    (
        "coinbase",
        b'{"type":"match","trade_id":10,"sequence":50,"maker_order_id":"a","taker_order_id":'
        b'"b","time":"2014-11-07T08:19:27.028459Z","product_id":"BTC-USD","size":"5.2",'
        b'"price":"400.23","side":"sell"}',
        Identity("matches:BTC-USD", 50, ID),
    ),
    (
        "coinbase",
        b'{"type":"done","time":"2014-11-07T08:19:27.028459Z","product_id":"BTC-USD",'
        b'"sequence":10,"price":"200.2","order_id":"d50e","reason":"filled","side":"sell"}',
        Identity("full:BTC-USD", 10, SEQUENCE, 9),
    ),
    (
        "kraken",
        b'{"channel":"trade","type":"update","data":[{"symbol":"MATIC/USD","side":"buy",'
        b'"price":0.5147,"qty":6423.4,"ord_type":"market","trade_id":4665846,"timestamp":'
        b'"2023-09-25T07:48:36.925533Z"},{"symbol":"MATIC/USD","side":"buy","price":0.5147,'
        b'"qty":1136.2,"ord_type":"market","trade_id":4665847,"timestamp":'
        b'"2023-09-25T07:49:36.925603Z"}]}',
        Identity("trade:MATIC/USD", 4665847, ID),
    ),
    (
        "okx",
        b'{"arg":{"channel":"books","instId":"BTC-USDT"},"action":"update","data":[{"asks":'
        b'[["8476.98","415","0","13"]],"bids":[],"ts":"1597026383085","checksum":-1200119424,'
        b'"prevSeqId":123456,"seqId":123457}]}',
        Identity("books:BTC-USDT", 123457, SEQUENCE, 123456),
    ),
    (
        "okx",
        b'{"arg":{"channel":"books","instId":"BTC-USDT"},"action":"snapshot","data":[{"asks":'
        b'[],"bids":[],"ts":"1597026383085","checksum":1,"prevSeqId":-1,"seqId":123456}]}',
        Identity("books:BTC-USDT", 123456, SEQUENCE, None),
    ),
    (
        "okx",
        b'{"arg":{"channel":"trades","instId":"BTC-USDT"},"data":[{"instId":"BTC-USDT",'
        b'"tradeId":"130639474","px":"42219.9","sz":"0.1","side":"buy","ts":"1630048897897",'
        b'"count":"3"}]}',
        Identity("trades:BTC-USDT", 130639474, ID),
    ),
    (
        "bybit",
        b'{"topic":"orderbook.50.BTCUSDT","type":"delta","ts":1,"data":{"s":"BTCUSDT","b":[],'
        b'"a":[["17440.50","78.857"]],"u":13079593,"seq":22520573252},"cts":1}',
        Identity("orderbook.50.BTCUSDT", 13079593, SEQUENCE, 13079592),
    ),
    (
        "bybit",
        b'{"topic":"orderbook.50.BTCUSDT","type":"snapshot","ts":1,"data":{"s":"BTCUSDT",'
        b'"b":[],"a":[],"u":13079592,"seq":22520573250},"cts":1}',
        Identity("orderbook.50.BTCUSDT", 13079592, SEQUENCE, None),
    ),
    (
        "bybit",
        b'{"topic":"tickers.BTCUSDT","type":"snapshot","data":{"symbol":"BTCUSDT",'
        b'"lastPrice":"21109.77"},"cs":2588407389,"ts":1673853746003}',
        Identity("tickers.BTCUSDT", 2588407389, ID),
    ),
    (
        "bitstamp",
        b'{"data":{"id":123456789,"timestamp":"1","amount":0.1,"amount_str":"0.1","price":1,'
        b'"price_str":"1","type":0,"microtimestamp":"1","buy_order_id":1,"sell_order_id":2},'
        b'"channel":"live_trades_btcusd","event":"trade"}',
        Identity("live_trades_btcusd", 123456789, ID),
    ),
]

#: Frames that are not data: acks, heartbeats, errors, status.
CONTROL: list[tuple[str, bytes]] = [
    ("binance", b'{"result":null,"id":1}'),
    ("binance", b'{"error":{"code":2,"msg":"Invalid request"},"id":1}'),
    ("coinbase", b'{"type":"subscriptions","channels":[]}'),
    (
        "coinbase",
        b'{"type":"heartbeat","sequence":90,"last_trade_id":20,"product_id":"BTC-USD",'
        b'"time":"2014-11-07T08:19:28.464459Z"}',
    ),
    ("kraken", b'{"channel":"heartbeat"}'),
    ("kraken", b'{"channel":"status","type":"update","data":[{"api_version":"v2"}]}'),
    ("okx", b'{"event":"subscribe","arg":{"channel":"books","instId":"BTC-USDT"},"connId":"a"}'),
    ("okx", b"pong"),
    ("bybit", b'{"success":true,"ret_msg":"pong","conn_id":"x","op":"ping"}'),
    (
        "bitstamp",
        b'{"event":"bts:subscription_succeeded","channel":"live_trades_btcusd","data":{}}',
    ),
    ("generic", b'{"result":null,"id":3}'),
    ("generic", b'{"type":"heartbeat"}'),
]

#: What each simulator topic's messages are identified by.
SIM_KINDS = {
    "binance": [SEQUENCE, SEQUENCE, SEQUENCE],
    "coinbase": [ID, HASH, ID],
    "kraken": [ID, HASH, HASH],
    "okx": [ID, SEQUENCE, HASH],
    "bybit": [HASH, SEQUENCE, ID],
    "bitstamp": [ID, HASH, ID],
    "generic": [HASH, HASH, HASH],
}


def sim_frame(dialect: str, topic: str, seq: int) -> bytes:
    return FEEDS[dialect](None).render(topic, seq, time.time_ns())


@pytest.mark.parametrize(("dialect", "raw", "expected"), SAMPLES)
def test_exchange_frames(dialect: str, raw: bytes, expected: Identity) -> None:
    assert identity_for(dialect)(raw) == expected


@pytest.mark.parametrize(("dialect", "raw"), CONTROL)
def test_control_frames_have_no_identity(dialect: str, raw: bytes) -> None:
    assert isinstance(identity_for(dialect)(raw), NoIdentity)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_simulator_frames(dialect: str) -> None:
    identity = identity_for(dialect)
    for topic, kind in zip(TOPICS[dialect], SIM_KINDS[dialect], strict=True):
        first, second = sim_frame(dialect, topic, 41), sim_frame(dialect, topic, 42)
        a, b = identity(first), identity(second)
        assert isinstance(a, Identity) and isinstance(b, Identity), (topic, a, b)
        assert a.kind == b.kind == kind, topic
        assert a.topic == b.topic
        if kind == HASH:
            assert a.id == content_hash(first) and a.id != b.id
        else:
            assert (a.id, b.id) == (41, 42)
        if kind == SEQUENCE:
            assert b.prev == a.id  # the next message follows: no gap


def test_generic_with_a_configured_topic() -> None:
    config = GenericConfig(topic_path="arg.channel+arg.instId", data_presence="data")
    identity = identity_for("generic", config)
    raw = b'{"arg":{"channel":"books","instId":"BTC-USDT"},"data":[1]}'
    assert identity(raw) == Identity("books:BTC-USDT", content_hash(raw), HASH)
    assert isinstance(identity(b'{"arg":{"channel":"books","instId":"BTC-USDT"}}'), NoIdentity)


def test_unknown_dialect() -> None:
    with pytest.raises(ValueError, match="unknown dialect"):
        identity_for("nasdaq")


def reencode(raw: bytes, indent: int | None, sort_keys: bool, spaced: bool) -> bytes:
    """The same JSON value written differently (whitespace, key order)."""
    value = orjson.loads(raw)
    separators = (", ", ": ") if spaced else (",", ":")
    return json.dumps(value, indent=indent, sort_keys=sort_keys, separators=separators).encode()


@settings(max_examples=300, deadline=None)
@given(
    dialect=st.sampled_from(DIALECTS),
    which=st.integers(0, 2),
    seq=st.integers(1, 2**53),
    indent=st.none() | st.integers(0, 3),
    sort_keys=st.booleans(),
    spaced=st.booleans(),
)
def test_identity_survives_reencoding_only_where_the_exchange_id_is_used(
    dialect: str, which: int, seq: int, indent: int | None, sort_keys: bool, spaced: bool
) -> None:
    identity = identity_for(dialect)
    raw = sim_frame(dialect, TOPICS[dialect][which], seq)
    original = identity(raw)
    assert isinstance(original, Identity)
    assert identity(raw) == original  # deterministic
    other = reencode(raw, indent, sort_keys, spaced)
    again = identity(other)
    assert isinstance(again, Identity) and again.topic == original.topic
    if original.kind == HASH:
        assert (again == original) == (other == raw)  # a hash names the bytes
    else:
        assert again == original and original.id == seq


json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=8,
)
#: Objects with the keys the identity functions look at, holding values of any type.
shaped = st.fixed_dictionaries(
    {},
    optional={
        key: json_values
        for key in (
            "stream", "data", "e", "s", "t", "a", "U", "u", "type", "product_id", "sequence",
            "channel", "arg", "event", "topic", "cs", "symbol", "trade_id", "seqId", "id",
        )
    },
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(dialect=st.sampled_from(DIALECTS), value=json_values | shaped)
def test_any_json_gives_a_result_never_an_exception(dialect: str, value: Any) -> None:
    result = identity_for(dialect)(json.dumps(value).encode())
    assert isinstance(result, Identity | NoIdentity)


@settings(max_examples=300, deadline=None)
@given(dialect=st.sampled_from(DIALECTS), raw=st.binary(max_size=200))
def test_any_bytes_give_a_result_never_an_exception(dialect: str, raw: bytes) -> None:
    assert isinstance(identity_for(dialect)(raw), Identity | NoIdentity)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_truncated_frames_have_no_identity(dialect: str) -> None:
    identity = identity_for(dialect)
    for topic in TOPICS[dialect]:
        raw = sim_frame(dialect, topic, 7)
        for end in range(len(raw)):
            assert isinstance(identity(raw[:end]), NoIdentity), raw[:end]

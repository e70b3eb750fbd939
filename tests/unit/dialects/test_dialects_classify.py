"""Dialects: documented messages classified right, by the fast path and by the parse,
with the C and the Python scanner; requests rendered as each exchange wants them."""

from __future__ import annotations

import json

import pytest

from gateway.dialects import (
    DIALECTS,
    Ack,
    Data,
    Dialect,
    DialectError,
    GenericConfig,
    GenericDialect,
    Heartbeat,
    Match,
    Other,
    make_dialect,
)
from gateway.dialects.base import UNPARSABLE
from tests.unit.dialects.fixtures import FIXTURES, Case

CASES = [(name, i, case) for name, cases in FIXTURES.items() for i, case in enumerate(cases)]


def prepared(name: str, case: Case, backend: str) -> Dialect:
    dialect = make_dialect(name, backend=backend)
    if case.setup:
        dialect.subscribe_messages(case.setup)
    return dialect


@pytest.mark.parametrize("backend", ["c", "python"])
@pytest.mark.parametrize(("name", "index", "case"), CASES, ids=lambda v: str(v)[:20])
def test_fixture_classification(name: str, index: int, case: Case, backend: str) -> None:
    dialect = prepared(name, case, backend)
    assert dialect.extractor.backend == backend
    assert dialect.classify(case.raw) == case.expected
    # The parse alone (the slow path) agrees with whatever the fast path said.
    assert prepared(name, case, backend).classify_slow(case.raw) == case.expected
    # And as text, as a WebSocket library hands it over.
    assert prepared(name, case, backend).classify(case.raw.decode()) == case.expected


@pytest.mark.parametrize("name", list(FIXTURES))
def test_batch_equals_one_by_one(name: str) -> None:
    data = [c.raw for c in FIXTURES[name] if isinstance(c.expected, Data | Heartbeat)]
    messages = data * 50 + [b"not json", b""]
    dialect = make_dialect(name)
    expected = [make_dialect(name).classify(m) for m in messages]
    assert dialect.classify_batch(messages) == expected
    assert make_dialect(name, backend="python").classify_batch(messages) == expected
    assert expected[-1] == Other(UNPARSABLE, "")


def test_data_never_parses_on_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Data messages of every dialect are recognised from spans alone."""
    for name, cases in FIXTURES.items():
        dialect = make_dialect(name)

        def no_parse(raw: bytes, name: str = name) -> object:
            raise AssertionError(f"{name}: parsed {raw[:60]!r}")

        monkeypatch.setattr(dialect, "classify_slow", no_parse)
        for case in cases:
            if isinstance(case.expected, Data) and b"\\u" not in case.raw:
                if name == "binance" and case.raw.startswith(b'{"e"'):
                    continue  # the raw endpoint is not the combined one the dialect uses
                if name == "coinbase" and case.setup:
                    dialect.subscribe_messages(case.setup)
                assert dialect.classify(case.raw) == case.expected


# ---- requests ---------------------------------------------------------------------------------
def test_binance_requests() -> None:
    d = make_dialect("binance")
    assert d.subscribe_messages(["BTCUSDT@trade", "ethusdt@kline_1M"]) == [
        '{"method":"SUBSCRIBE","params":["btcusdt@trade","ethusdt@kline_1M"],"id":1}'
    ]
    assert d.unsubscribe_messages(["btcusdt@trade"]) == [
        '{"method":"UNSUBSCRIBE","params":["btcusdt@trade"],"id":2}'
    ]
    assert d.connect_path(["btcusdt@trade", "ethusdt@depth"]) == (
        "/stream?streams=btcusdt@trade/ethusdt@depth"
    )
    many = d.subscribe_messages([f"s{i}usdt@trade" for i in range(450)])
    assert [len(json.loads(m)["params"]) for m in many] == [200, 200, 50]
    assert d.limits.max_topics_per_connection == 1024
    assert d.limits.requests_per_second == 5
    assert d.keepalive() is None  # server pings, answered by the WebSocket layer
    with pytest.raises(DialectError):
        d.subscribe_messages(["btcusdt"])


def test_coinbase_requests() -> None:
    d = make_dialect("coinbase")
    (message,) = d.subscribe_messages(
        ["matches:btc-usd", "matches:ETH-USD", "level2_batch:BTC-USD"]
    )
    assert json.loads(message) == {
        "type": "subscribe",
        "channels": [
            {"name": "matches", "product_ids": ["BTC-USD", "ETH-USD"]},
            {"name": "level2_batch", "product_ids": ["BTC-USD"]},
        ],
    }
    with pytest.raises(DialectError):
        d.normalize("BTC-USD")


def test_kraken_requests_one_per_channel() -> None:
    d = make_dialect("kraken")
    messages = [
        json.loads(m)
        for m in d.subscribe_messages(["trade:btc/usd", "book:ETH/USD", "trade:ETH/USD"])
    ]
    assert messages == [
        {
            "method": "subscribe",
            "params": {"channel": "trade", "symbol": ["BTC/USD", "ETH/USD"]},
            "req_id": 1,
        },
        {"method": "subscribe", "params": {"channel": "book", "symbol": ["ETH/USD"]}, "req_id": 2},
    ]
    # Acked symbol by symbol: the request settles with its last symbol.
    ack = (
        b'{"method":"subscribe","result":{"channel":"trade","symbol":"%s"},'
        b'"success":true,"req_id":1}'
    )
    assert d.classify(ack % b"BTC/USD") == Ack(1, ("trade:BTC/USD",), "subscribe")
    assert d.pending_requests == 2
    assert d.classify(ack % b"ETH/USD") == Ack(1, ("trade:ETH/USD",), "subscribe")
    assert d.pending_requests == 1


def test_okx_requests_and_keepalive() -> None:
    d = make_dialect("okx")
    assert d.subscribe_messages(["trades:btc-usdt"]) == [
        '{"id":"1","op":"subscribe","args":[{"channel":"trades","instId":"BTC-USDT"}]}'
    ]
    big = d.subscribe_messages([f"books5:INSTRUMENT{i:05d}-USDT" for i in range(3000)])
    assert len(big) > 1
    assert all(len(m) <= 64 * 1024 for m in big)
    assert sum(len(json.loads(m)["args"]) for m in big) == 3000
    assert d.keepalive() == (25.0, "ping")


def test_bybit_requests_and_keepalive() -> None:
    d = make_dialect("bybit")
    messages = d.subscribe_messages([f"publicTrade.S{i}USDT" for i in range(25)])
    assert [len(json.loads(m)["args"]) for m in messages] == [10, 10, 5]
    assert json.loads(messages[0])["req_id"] == "1"
    assert d.keepalive() == (20.0, '{"op":"ping"}')
    assert d.normalize("orderbook.50.btcusdt") == "orderbook.50.BTCUSDT"


def test_bitstamp_requests_and_keepalive() -> None:
    d = make_dialect("bitstamp")
    assert d.subscribe_messages(["live_trades_btcusd", "diff_order_book_ethusd"]) == [
        '{"event":"bts:subscribe","data":{"channel":"live_trades_btcusd"}}',
        '{"event":"bts:subscribe","data":{"channel":"diff_order_book_ethusd"}}',
    ]
    assert d.keepalive() == (10.0, '{"event":"bts:heartbeat"}')
    ack = b'{"event":"bts:subscription_succeeded","channel":"diff_order_book_ethusd","data":{}}'
    assert d.classify(ack) == Ack(None, ("diff_order_book_ethusd",), "subscribe")
    assert d.pending_requests == 1


def test_generic_templates() -> None:
    per_topic = GenericDialect(
        GenericConfig(
            subscribe='{"action":"sub","channel":"{topic}","seq":{id}}',
            unsubscribe='{"action":"unsub","channel":"{topic}","seq":{id}}',
            topic_path="arg.channel+arg.instId",
            data_presence="data",
            ack=Match("event", "subscribe"),
            error=Match("event", "error"),
            error_reason_path="msg",
            id_path=None,
            keepalive_message="ping",
            keepalive_interval=15.0,
        )
    )
    assert per_topic.subscribe_messages(['a"b', "c"]) == [
        '{"action":"sub","channel":"a\\"b","seq":1}',
        '{"action":"sub","channel":"c","seq":1}',
    ]
    push = b'{"arg":{"channel":"trades","instId":"BTC-USDT"},"data":[]}'
    assert per_topic.classify(push) == Data("trades:BTC-USDT")
    event = b'{"event":"subscribe","arg":{"channel":"trades","instId":"BTC-USDT"}}'
    assert isinstance(per_topic.classify(event), Ack)
    assert per_topic.classify(b'{"event":"error","msg":"no"}').reason == "no"  # type: ignore[union-attr]
    assert per_topic.keepalive() == (15.0, "ping")
    batched = GenericDialect()
    assert batched.subscribe_messages(["x", "y"]) == [
        '{"op":"subscribe","topics":["x","y"],"id":1}'
    ]
    with pytest.raises(DialectError):
        GenericConfig(subscribe='{"op":"sub"}')
    with pytest.raises(DialectError):
        GenericConfig(keepalive_message="ping")


def test_registry() -> None:
    assert set(DIALECTS) == {"binance", "coinbase", "kraken", "okx", "bybit", "bitstamp", "generic"}
    with pytest.raises(DialectError, match="unknown dialect"):
        make_dialect("mtgox")
    for name in DIALECTS:
        dialect = make_dialect(name)
        assert dialect.classify(b"\xff\xfe garbage") == Other(UNPARSABLE, "\ufffd\ufffd garbage")
        assert isinstance(dialect.classify(b"[1,2,3]"), Other)
        assert isinstance(dialect.classify(b'"just a string"'), Other)

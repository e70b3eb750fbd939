"""Kraken v2 `book` at a depth (issue #21): the topic `book.N:SYMBOL` subscribes with
`depth` N, its messages (which name no depth) and acks are told to that topic, and the
book manager keeps N levels a side (sync_options)."""

from __future__ import annotations

import json

import pytest

from gateway.books.manager import sync_options
from gateway.dialects import make_dialect
from gateway.dialects.base import Ack, Data, DialectError


def test_the_depth_is_spelled_in_the_topic() -> None:
    d = make_dialect("kraken")
    assert d.normalize("BOOK.100:btc/usd") == "book.100:BTC/USD"
    assert d.normalize("book.10:BTC/USD") == "book:BTC/USD"  # Kraken's default
    for bad in ("book.11:BTC/USD", "book.:BTC/USD", "book.x:BTC/USD"):
        with pytest.raises(DialectError, match="10, 25, 100, 500, 1000"):
            d.normalize(bad)


def test_subscribe_classify_and_ack() -> None:
    d = make_dialect("kraken")
    messages = [json.loads(m) for m in d.subscribe_messages(["book.100:BTC/USD", "book:ETH/USD"])]
    assert [m["params"] for m in messages] == [
        {"channel": "book", "symbol": ["BTC/USD"], "depth": 100},
        {"channel": "book", "symbol": ["ETH/USD"]},
    ]
    ack = (
        b'{"method":"subscribe","result":{"channel":"book","depth":100,"snapshot":true,'
        b'"symbol":"BTC/USD"},"success":true,"req_id":1}'
    )
    assert d.classify(ack) == Ack(1, ("book.100:BTC/USD",), "subscribe")
    update = b'{"channel":"book","type":"update","data":[{"symbol":"%s","bids":[],"asks":[]}]}'
    assert d.classify(update % b"BTC/USD") == Data("book.100:BTC/USD")
    assert d.classify(update % b"ETH/USD") == Data("book:ETH/USD")
    trade = b'{"channel":"trade","type":"update","data":[{"symbol":"BTC/USD"}]}'
    assert d.classify(trade) == Data("trade:BTC/USD")


def test_the_books_depth_is_the_topics() -> None:
    assert sync_options("kraken", "book.500:BTC/USD") == {"depth": 500}
    assert sync_options("kraken", "book:BTC/USD") == {"depth": 10}
    assert sync_options("kraken", "trade:BTC/USD") == {}
    assert sync_options("bybit", "orderbook.50.BTCUSDT") == {"depth": 50}

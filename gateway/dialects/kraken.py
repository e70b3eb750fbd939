"""Kraken spot WebSocket API v2 (wss://ws.kraken.com/v2).

Topics are `channel:SYMBOL` (`trade:BTC/USD`, `book:ETH/USD`). A request subscribes one
channel for a list of symbols: `{"method": "subscribe", "params": {"channel": "trade",
"symbol": [...]}, "req_id": N}`; the server acks each symbol separately (`result.symbol`,
`success`), so a request is settled by its last symbol. Data messages carry `channel` and
`data[0].symbol`. A `heartbeat` message arrives about once a second while subscribed, so no
client keepalive is needed. Kraken documents no per-message cap; the pace is conservative.

The `book` channel's depth (levels a side: 10, 25, 100, 500 or 1000; 10 when not given) is
spelled in the topic as `book.N:SYMBOL` (`book.100:BTC/USD`; `book.10:X` is `book:X`) and
sent as the request's `depth`. Book messages name no depth, so they are told to the book
topic last subscribed for their symbol (one depth per symbol on a connection).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.dialects import base
from gateway.dialects.jsonscan import TopicPaths

#: The depths Kraken v2 `book` takes (docs.kraken.com/api/docs/websocket-v2/book).
BOOK_DEPTHS = (10, 25, 100, 500, 1000)
BOOK_DEFAULT_DEPTH = 10


def book_depth(topic: str) -> int | None:
    """The depth of a canonical book topic (`book:X` 10, `book.N:X` N), None for others."""
    channel = topic.partition(":")[0]
    if channel == "book":
        return BOOK_DEFAULT_DEPTH
    if channel.startswith("book.") and channel[5:].isdigit():
        return int(channel[5:])
    return None


class KrakenDialect(base.VenueDialect):
    name = "kraken"
    path = "/v2"
    limits = base.Limits(requests_per_second=5.0, burst=5)
    topic_paths = TopicPaths.of("channel", "data[0].symbol")

    def __init__(self, *, backend: str = "auto") -> None:
        super().__init__(backend=backend)
        #: symbol -> the book topic last subscribed for it (its messages name no depth)
        self._book_topics: dict[str, str] = {}

    def normalize(self, topic: str) -> str:
        channel, sep, symbol = topic.partition(":")
        if not sep or not channel or "/" not in symbol or any(c.isspace() for c in topic):
            raise base.DialectError(
                f"kraken: {topic!r} is not channel:BASE/QUOTE like trade:BTC/USD"
            )
        channel = channel.lower()
        if channel.startswith("book."):
            depth = channel[5:]
            if not depth.isdigit() or int(depth) not in BOOK_DEPTHS:
                raise base.DialectError(
                    f"kraken: {topic!r}: the book depth is one of "
                    f"{', '.join(map(str, BOOK_DEPTHS))} (book.100:BTC/USD)"
                )
            channel = "book" if int(depth) == BOOK_DEFAULT_DEPTH else f"book.{int(depth)}"
        return f"{channel}:{symbol.upper()}"

    def _data(self, channel: str, symbol: str) -> base.Data:
        if channel == "book":
            return base.Data(self._book_topics.get(symbol) or f"book:{symbol}")
        return base.Data(f"{channel}:{symbol}")

    def _group(self, topics: list[str]) -> list[list[str]]:
        by_channel: dict[str, list[str]] = {}
        for topic in topics:
            by_channel.setdefault(topic.partition(":")[0], []).append(topic)
        return list(by_channel.values())

    def _render(self, op: str, topics: list[str], request_id: int) -> list[base.Message]:
        channel = topics[0].partition(":")[0]
        symbols = [t.partition(":")[2] for t in topics]
        self._track(request_id, op, topics)
        params: dict[str, object] = {"channel": channel, "symbol": symbols}
        depth = book_depth(topics[0])
        if depth is not None:
            params["channel"] = "book"
            if depth != BOOK_DEFAULT_DEPTH:
                params["depth"] = depth
            if op == "subscribe":
                self._book_topics.update(zip(symbols, topics, strict=True))
        return [base.json_text({"method": op, "params": params, "req_id": request_id})]

    def _fast(self, raw: bytes, s: Sequence[int], b: int) -> base.Classified | None:
        channel = self._str(raw, s, b)
        if channel is None:
            return None
        symbol = self._str(raw, s, b + 3)
        if symbol:
            return self._data(channel, symbol)
        if channel == "heartbeat":
            return base.Heartbeat()
        return None

    def _classify_message(self, obj: dict[str, Any]) -> base.Classified:  # noqa: PLR0911 (a classifier: one return per message kind)
        channel = obj.get("channel")
        if isinstance(channel, str):
            data = obj.get("data")
            first = data[0] if isinstance(data, list) and data else None
            if isinstance(first, dict) and isinstance(first.get("symbol"), str):
                return self._data(channel, first["symbol"])
            if channel == "heartbeat":
                return base.Heartbeat()
            return base.Other(base.INFO, channel)
        method = obj.get("method")
        if method == "pong":
            return base.Heartbeat()
        if method in ("subscribe", "unsubscribe"):
            result = obj["result"] if isinstance(obj.get("result"), dict) else {}
            symbol = result.get("symbol", obj.get("symbol"))
            rid = obj.get("req_id")
            pending = self._pending.get(self._lookup(rid) or -1)
            ch = result.get("channel") or (pending[1][0].partition(":")[0] if pending else None)
            topic = f"{ch}:{symbol}" if ch and isinstance(symbol, str) else None
            if pending and topic and book_depth(topic):  # the request's own spelling
                topic = next((t for t in pending[1] if t.endswith(f":{symbol}")), topic)
            rid, op = self._settle_topic(rid, topic)
            topics = (topic,) if topic else ()
            if obj.get("success") is False or "error" in obj:
                return base.Error(str(obj.get("error", "request failed")), rid, topics)
            return base.Ack(rid, topics, op or str(method))
        if "error" in obj:
            return base.Error(str(obj["error"]), obj.get("req_id"))
        return base.Other(base.UNKNOWN, str(method))

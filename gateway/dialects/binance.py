"""Binance spot market streams (wss://stream.binance.com:9443).

Topics are stream names (`btcusdt@trade`, `btcusdt@depth@100ms`). The connection uses the
combined endpoint, `/stream?streams=a/b`, whose events come wrapped as
`{"stream": name, "data": event}`: the topic is the first key, so the scanner stops after a
few dozen bytes. Live changes use `{"method": "SUBSCRIBE", "params": [...], "id": N}`,
acked with `{"result": null, "id": N}`. Server pings (every 20 s) are WebSocket frames that
the WebSocket layer answers. Limits: 1024 streams per connection and 5 incoming messages
per second, pongs included; a connection that exceeds them is closed (1008).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.dialects import base
from gateway.dialects.jsonscan import TopicPaths

# Event type of the raw endpoint (/ws) -> stream suffix, for events that are not wrapped.
_RAW_EVENTS = {
    "trade": "trade",
    "aggTrade": "aggTrade",
    "depthUpdate": "depth",
    "24hrTicker": "ticker",
    "24hrMiniTicker": "miniTicker",
    "bookTicker": "bookTicker",
}


class BinanceDialect(base.PlainTopicDialect):
    name = "binance"
    path = "/stream"
    limits = base.Limits(
        max_topics_per_connection=1024,
        max_topics_per_request=200,  # not documented; keeps one request well under 8 KB
        requests_per_second=5.0,
        burst=1,
    )
    topic_paths = TopicPaths.of("stream")

    def normalize(self, topic: str) -> str:
        symbol, sep, stream = topic.partition("@")
        if not sep or not symbol or not stream or any(c.isspace() or c == "/" for c in topic):
            raise base.DialectError(f"binance: {topic!r} is not a stream name like btcusdt@trade")
        # Symbols are lower case; the stream part keeps its case (kline_1M is a month).
        return f"{symbol.lower()}@{stream}"

    def connect_path(self, topics: Sequence[str] = ()) -> str:
        if not topics:
            return self.path
        return f"{self.path}?streams=" + "/".join(self.normalize(t) for t in topics)

    def _render(self, op: str, topics: list[str], request_id: int) -> list[base.Message]:
        method = {"subscribe": "SUBSCRIBE", "unsubscribe": "UNSUBSCRIBE"}[op]
        self._track(request_id, op, topics)
        return [base.json_text({"method": method, "params": topics, "id": request_id})]

    def list_subscriptions_message(self) -> base.Message:
        request_id = next(self._ids)
        self._track(request_id, "list", ())
        return base.json_text({"method": "LIST_SUBSCRIPTIONS", "id": request_id})

    def _classify_message(self, obj: dict[str, Any]) -> base.Classified:  # noqa: PLR0911 (a classifier: one return per message kind)
        stream = obj.get("stream")
        if isinstance(stream, str) and "data" in obj:
            return base.Data(stream)
        request_id = obj.get("id")
        error = obj.get("error")
        if isinstance(error, dict) or ("code" in obj and "msg" in obj):
            body = error if isinstance(error, dict) else obj
            rid, _, topics = self._settle(request_id)
            return base.Error(str(body.get("msg", "")), rid, topics, body.get("code"))
        if "result" in obj and request_id is not None:
            rid, op, topics = self._settle(request_id)
            result = obj["result"]
            if isinstance(result, list):
                return base.Ack(rid, topics, "list", tuple(str(r) for r in result))
            return base.Ack(rid, topics, op or "subscribe")
        event = obj.get("e")
        if event == "serverShutdown":
            return base.Other(base.RECONNECT, "serverShutdown")
        if isinstance(event, str) and isinstance(obj.get("s"), str):
            suffix = _RAW_EVENTS.get(event)
            if event == "kline" and isinstance(obj.get("k"), dict):
                suffix = f"kline_{obj['k'].get('i')}"
            if suffix:
                return base.Data(f"{obj['s'].lower()}@{suffix}")
        if isinstance(event, str):
            return base.Other(base.INFO, event)
        return base.Other(base.UNKNOWN, base.json_text(obj)[:80])

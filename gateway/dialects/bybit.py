"""Bybit v5 public WebSocket (wss://stream.bybit.com/v5/public/spot).

Topics are Bybit's own (`publicTrade.BTCUSDT`, `orderbook.50.BTCUSDT`), carried as
`{"req_id": "N", "op": "subscribe", "args": [...]}` and acked with `success` and
`ret_msg`. Data messages start with `topic`. The client sends `{"op": "ping"}` every 20 s
(the server drops quiet connections) and gets a pong. Limits: 10 args per request on spot
and 21,000 characters of args; no per-message rate is documented, so the pace is modest.
"""

from __future__ import annotations

from typing import Any

from gateway.dialects import base
from gateway.dialects.jsonscan import TopicPaths

KEEPALIVE_S = 20.0


class BybitDialect(base.PlainTopicDialect):
    name = "bybit"
    path = "/v5/public/spot"
    limits = base.Limits(
        max_topics_per_request=10, max_request_bytes=21_000, requests_per_second=10.0, burst=5
    )
    topic_paths = TopicPaths.of("topic")

    def normalize(self, topic: str) -> str:
        parts = topic.split(".")
        if len(parts) < 2 or not all(parts) or any(c.isspace() for c in topic):
            raise base.DialectError(f"bybit: {topic!r} is not a topic like publicTrade.BTCUSDT")
        return ".".join(parts[:-1]) + "." + parts[-1].upper()

    def _render(self, op: str, topics: list[str], request_id: int) -> list[base.Message]:
        self._track(str(request_id), op, topics)
        return [base.json_text({"req_id": str(request_id), "op": op, "args": topics})]

    def keepalive(self) -> tuple[float, base.Message] | None:
        return KEEPALIVE_S, base.json_text({"op": "ping"})

    def _classify_message(self, obj: dict[str, Any]) -> base.Classified:
        topic = obj.get("topic")
        if isinstance(topic, str) and "data" in obj:
            return base.Data(topic)
        op = obj.get("op")
        if op in ("ping", "pong"):
            return base.Heartbeat()
        if op in ("subscribe", "unsubscribe"):
            req_id = obj.get("req_id") or None
            rid, sent_op, topics = self._settle(req_id)
            if obj.get("success") is False:
                return base.Error(str(obj.get("ret_msg", "")), rid, topics)
            return base.Ack(rid, topics, sent_op or str(op))
        if obj.get("success") is False:
            return base.Error(str(obj.get("ret_msg", "")), obj.get("req_id") or None)
        return base.Other(base.UNKNOWN, str(op))

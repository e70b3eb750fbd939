"""Coinbase Exchange market data (wss://ws-feed.exchange.coinbase.com).

Topics are `channel:PRODUCT` (`matches:BTC-USD`, `level2_batch:ETH-USD`). One subscribe
message carries every channel with its products; the server answers with a
`subscriptions` message listing everything now subscribed (no request id, so acks settle
the oldest request) or an `error`. Data messages say their `type` (match, l2update,
ticker...) and `product_id`; the type maps back to the channel. Limits (per IP): 8
requests/s with bursts up to 20, 100 client messages/s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.dialects import base
from gateway.dialects.jsonscan import TopicPaths

#: Message type -> the channel that carries it.
TYPE_CHANNEL = {
    "match": "matches",
    "last_match": "matches",
    "ticker": "ticker",
    "ticker_batch": "ticker_batch",
    "snapshot": "level2",
    "l2update": "level2",
    "received": "full",
    "open": "full",
    "done": "full",
    "change": "full",
    "activate": "full",
    "auction": "auction",
    "rfq_match": "rfq_matches",
}
_TYPE_CHANNEL_RAW = {k.encode(): v for k, v in TYPE_CHANNEL.items()}
_LEVEL2 = ("level2", "level2_batch")


class CoinbaseDialect(base.VenueDialect):
    name = "coinbase"
    path = "/"
    limits = base.Limits(requests_per_second=8.0, burst=10)
    topic_paths = TopicPaths.of("type", "product_id")

    def __init__(self, *, backend: str = "auto") -> None:
        super().__init__(backend=backend)
        self._level2_batch: set[str] = set()  # products whose level2 data is the batch channel

    def normalize(self, topic: str) -> str:
        channel, sep, product = topic.partition(":")
        if not sep or not channel or not product or any(c.isspace() for c in topic):
            raise base.DialectError(
                f"coinbase: {topic!r} is not channel:PRODUCT like matches:BTC-USD"
            )
        return f"{channel.lower()}:{product.upper()}"

    def _render(self, op: str, topics: list[str], request_id: int) -> list[base.Message]:
        by_channel: dict[str, list[str]] = {}
        for topic in topics:
            channel, _, product = topic.partition(":")
            by_channel.setdefault(channel, []).append(product)
            if channel == "level2_batch":
                if op == "subscribe":
                    self._level2_batch.add(product)
                else:
                    self._level2_batch.discard(product)
        channels = [{"name": ch, "product_ids": products} for ch, products in by_channel.items()]
        self._track(request_id, op, topics)
        return [base.json_text({"type": op, "channels": channels})]

    def _channel(self, msg_type: str, product: str) -> str | None:
        channel = TYPE_CHANNEL.get(msg_type)
        if channel == "level2" and product in self._level2_batch:
            return "level2_batch"
        return channel

    def _fast(self, raw: bytes, s: Sequence[int], b: int) -> base.Classified | None:
        msg_type = self._raw(raw, s, b)
        product = self._str(raw, s, b + 3)
        if msg_type is None or not product:
            return None
        channel = _TYPE_CHANNEL_RAW.get(msg_type)
        if channel is not None:
            if channel == "level2" and product in self._level2_batch:
                channel = "level2_batch"
            return base.Data(f"{channel}:{product}")
        if msg_type == b"heartbeat":
            return base.Heartbeat(f"heartbeat:{product}")
        return None

    def _classify_message(self, obj: dict[str, Any]) -> base.Classified:
        msg_type = obj.get("type")
        product = obj.get("product_id")
        if isinstance(msg_type, str) and isinstance(product, str):
            channel = self._channel(msg_type, product)
            if channel is not None:
                return base.Data(f"{channel}:{product}")
            if msg_type == "heartbeat":
                return base.Heartbeat(f"heartbeat:{product}")
        if msg_type == "subscriptions":
            active = []
            for entry in obj.get("channels", []):
                if isinstance(entry, dict):
                    active += [f"{entry.get('name')}:{p}" for p in entry.get("product_ids", [])]
            rid, op, topics = self._settle(None)
            return base.Ack(rid, topics, op or "subscribe", tuple(active))
        if msg_type == "error":
            rid, _, topics = self._settle(None)
            reason = str(obj.get("message", "error"))
            if obj.get("reason"):
                reason = f"{reason}: {obj['reason']}"
            return base.Error(reason, rid, topics)
        if msg_type == "status":
            return base.Other(base.INFO, "status")
        return base.Other(base.UNKNOWN, str(msg_type))

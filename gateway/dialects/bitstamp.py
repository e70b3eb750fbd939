"""Bitstamp WebSocket API v2 (wss://ws.bitstamp.net).

Topics are channel names (`live_trades_btcusd`, `diff_order_book_btcusd`). One message per
channel, `{"event": "bts:subscribe", "data": {"channel": ...}}`, acked with
`bts:subscription_succeeded` naming the channel. Data messages put `data` first and
`channel`/`event` after it, so the scanner skips the data object (by brackets, not by
parsing it); an `event` without the `bts:` prefix marks data. `bts:request_reconnect` asks
the client to reconnect (maintenance). Keepalive: `bts:heartbeat`, answered in kind.
No limits are documented; the pace is modest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.dialects.base import (
    INFO,
    RECONNECT,
    UNKNOWN,
    Ack,
    Classified,
    Data,
    Dialect,
    DialectError,
    Error,
    Heartbeat,
    Limits,
    Message,
    Other,
    json_text,
)
from gateway.dialects.jsonscan import TopicPaths

KEEPALIVE_S = 10.0


class BitstampDialect(Dialect):
    name = "bitstamp"
    path = "/"
    limits = Limits(max_topics_per_request=1, requests_per_second=10.0, burst=5)
    topic_paths = TopicPaths.of("channel", "event")

    def normalize(self, topic: str) -> str:
        if not topic or not topic.replace("_", "").replace("-", "").isalnum():
            raise DialectError(f"bitstamp: {topic!r} is not a channel like live_trades_btcusd")
        return topic.lower()

    def _render(self, op: str, topics: list[str], request_id: int) -> list[Message]:
        channel = topics[0]
        self._track(f"{op}:{channel}", op, topics)
        return [json_text({"event": f"bts:{op}", "data": {"channel": channel}})]

    def keepalive(self) -> tuple[float, Message] | None:
        return KEEPALIVE_S, json_text({"event": "bts:heartbeat"})

    def _fast(self, raw: bytes, s: Sequence[int], b: int) -> Classified | None:
        channel = self._str(raw, s, b)
        event = self._raw(raw, s, b + 3)
        if channel and event is not None and not event.startswith(b"bts:"):
            return Data(channel)
        return None

    def _classify_obj(self, obj: Any) -> Classified:  # noqa: PLR0911 (a classifier: one return per message kind)
        if not isinstance(obj, dict):
            return Other(UNKNOWN, type(obj).__name__)
        event = obj.get("event")
        channel = obj.get("channel")
        if not isinstance(event, str):
            return Other(UNKNOWN, json_text(obj)[:80])
        if not event.startswith("bts:") and isinstance(channel, str) and channel:
            return Data(channel)
        if event in ("bts:subscription_succeeded", "bts:unsubscription_succeeded"):
            op = "subscribe" if event == "bts:subscription_succeeded" else "unsubscribe"
            _, _, topics = self._settle(f"{op}:{channel}")
            return Ack(None, topics or ((channel,) if isinstance(channel, str) else ()), op)
        if event == "bts:error":
            data = obj["data"] if isinstance(obj.get("data"), dict) else {}
            _, _, topics = self._settle(None)
            return Error(str(data.get("message", "error")), None, topics, data.get("code"))
        if event == "bts:request_reconnect":
            return Other(RECONNECT, event)
        if event == "bts:heartbeat":
            return Heartbeat()
        return Other(INFO, event)

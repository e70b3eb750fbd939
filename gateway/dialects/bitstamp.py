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

from gateway.dialects import base
from gateway.dialects.jsonscan import TopicPaths

KEEPALIVE_S = 10.0


class BitstampDialect(base.VenueDialect):
    name = "bitstamp"
    path = "/"
    limits = base.Limits(max_topics_per_request=1, requests_per_second=10.0, burst=5)
    topic_paths = TopicPaths.of("channel", "event")

    def normalize(self, topic: str) -> str:
        if not topic or not topic.replace("_", "").replace("-", "").isalnum():
            raise base.DialectError(f"bitstamp: {topic!r} is not a channel like live_trades_btcusd")
        return topic.lower()

    def _render(self, op: str, topics: list[str], request_id: int) -> list[base.Message]:
        channel = topics[0]
        self._track(f"{op}:{channel}", op, topics)
        return [base.json_text({"event": f"bts:{op}", "data": {"channel": channel}})]

    def keepalive(self) -> tuple[float, base.Message] | None:
        return KEEPALIVE_S, base.json_text({"event": "bts:heartbeat"})

    def _fast(self, raw: bytes, s: Sequence[int], b: int) -> base.Classified | None:
        channel = self._str(raw, s, b)
        event = self._raw(raw, s, b + 3)
        if channel and event is not None and not event.startswith(b"bts:"):
            return base.Data(channel)
        return None

    def _classify_message(self, obj: dict[str, Any]) -> base.Classified:  # noqa: PLR0911 (a classifier: one return per message kind)
        event = obj.get("event")
        channel = obj.get("channel")
        if not isinstance(event, str):
            return base.Other(base.UNKNOWN, base.json_text(obj)[:80])
        if not event.startswith("bts:") and isinstance(channel, str) and channel:
            return base.Data(channel)
        if event in ("bts:subscription_succeeded", "bts:unsubscription_succeeded"):
            op = "subscribe" if event == "bts:subscription_succeeded" else "unsubscribe"
            _, _, topics = self._settle(f"{op}:{channel}")
            return base.Ack(None, topics or ((channel,) if isinstance(channel, str) else ()), op)
        if event == "bts:error":
            data = obj["data"] if isinstance(obj.get("data"), dict) else {}
            _, _, topics = self._settle(None)
            return base.Error(str(data.get("message", "error")), None, topics, data.get("code"))
        if event == "bts:request_reconnect":
            return base.Other(base.RECONNECT, event)
        if event == "bts:heartbeat":
            return base.Heartbeat()
        return base.Other(base.INFO, event)

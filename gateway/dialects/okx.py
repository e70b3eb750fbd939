"""OKX v5 public WebSocket (wss://ws.okx.com:8443/ws/v5/public).

Topics are `channel:instId` (`trades:BTC-USDT`, `books5:ETH-USDT`). A request carries a
list of args, `{"id": "N", "op": "subscribe", "args": [{"channel": ..., "instId": ...}]}`,
each acked on its own (`{"event": "subscribe", "arg": {...}}`). Data messages hold the same
`arg` plus `data`; acks hold `arg` plus `event`, so a data message is `arg.channel` and
`arg.instId` found together with a `data` key (tested for presence only, never skipped).
The server closes a connection idle for 30 s: the client sends the text `ping` every 25 s
and gets `pong`. Limits: a request's args at most 64 KB; 480 subscribe/unsubscribe/login
requests per hour per connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.dialects import base
from gateway.dialects.jsonscan import TopicPaths

KEEPALIVE_S = 25.0


class OkxDialect(base.VenueDialect):
    name = "okx"
    path = "/ws/v5/public"
    # 480 per hour: a bucket of 50 refilled at 480/h (x0.8) never exceeds 480 in an hour.
    limits = base.Limits(max_request_bytes=64 * 1024, requests_per_second=480 / 3600, burst=50)
    topic_paths = TopicPaths.of("arg.channel", "arg.instId", presence=("data",))

    def normalize(self, topic: str) -> str:
        channel, sep, inst = topic.partition(":")
        if not sep or not channel or not inst or any(c.isspace() for c in topic):
            raise base.DialectError(f"okx: {topic!r} is not channel:instId like trades:BTC-USDT")
        return f"{channel}:{inst.upper()}"

    def _requests(self, op: str, topics: list[str]) -> list[base.Message]:
        # Split by encoded size: the 64 KB cap is on the args of one request.
        out: list[base.Message] = []
        limit = (self.limits.max_request_bytes or 1 << 30) - 64
        group: list[str] = []
        size = 0
        for topic in topics:
            cost = len(topic) + 32
            if group and size + cost > limit:
                out += self._render(op, group, next(self._ids))
                group, size = [], 0
            group.append(topic)
            size += cost
        if group:
            out += self._render(op, group, next(self._ids))
        return out

    def _render(self, op: str, topics: list[str], request_id: int) -> list[base.Message]:
        args = []
        for topic in topics:
            channel, _, inst = topic.partition(":")
            args.append({"channel": channel, "instId": inst})
        self._track(str(request_id), op, topics)
        return [base.json_text({"id": str(request_id), "op": op, "args": args})]

    def keepalive(self) -> tuple[float, base.Message] | None:
        return KEEPALIVE_S, "ping"

    def _text_control(self, raw: bytes) -> base.Classified | None:
        return base.Heartbeat() if raw.strip() == b"pong" else None

    def _fast(self, raw: bytes, s: Sequence[int], b: int) -> base.Classified | None:
        if not s[b + 8]:  # no "data": an event, not a push
            return None
        channel = self._str(raw, s, b)
        inst = self._str(raw, s, b + 3)
        return base.Data(f"{channel}:{inst}") if channel and inst else None

    def _classify_message(self, obj: dict[str, Any]) -> base.Classified:
        arg = obj.get("arg") if isinstance(obj.get("arg"), dict) else None
        topic = None
        if arg is not None and isinstance(arg.get("channel"), str):
            topic = f"{arg['channel']}:{arg.get('instId', '')}"
        event = obj.get("event")
        if event is None and "data" in obj and topic:
            return base.Data(topic)
        if event in ("subscribe", "unsubscribe"):
            rid, op = self._settle_topic(obj.get("id"), topic)
            return base.Ack(rid, (topic,) if topic else (), op or str(event))
        if event == "error":
            rid, _, topics = self._settle(obj.get("id"))
            return base.Error(str(obj.get("msg", "")), rid, topics, obj.get("code"))
        if event == "notice":
            return base.Other(base.RECONNECT, str(obj.get("msg", "")))
        if isinstance(event, str):
            return base.Other(base.INFO, event)
        return base.Other(base.UNKNOWN, base.json_text(obj)[:80])

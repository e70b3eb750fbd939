"""A dialect configured by templates, for feeds that have no dialect of their own.

Requests are templates with placeholders: `{topic}` (one message per topic, the topic as
JSON string content), `{topics}` (one message for a batch, a JSON array) and `{id}` (the
request number). The topic is read at a key path (or several joined, e.g.
`arg.channel+arg.instId` with `:`); control messages are recognised by key paths and values
after a parse. A keepalive message and interval are optional.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.dialects import base
from gateway.dialects.jsonscan import TopicPaths, parse_path


@dataclass(frozen=True)
class Match:
    """A control message test: the value at path equals value (or just exists, if None)."""

    path: str
    value: Any = None

    def test(self, obj: Any) -> bool:
        path = parse_path(self.path)
        if self.value is None:
            return base.has_path(obj, path)
        return bool(base.get_path(obj, path) == self.value)


@dataclass(frozen=True)
class GenericConfig:
    name: str = "generic"
    path: str = "/"
    subscribe: str = '{"op":"subscribe","topics":{topics},"id":{id}}'
    unsubscribe: str = '{"op":"unsubscribe","topics":{topics},"id":{id}}'
    topic_path: str = "topic"  # "a.b" or several joined with "+"
    topic_join: str = ":"
    data_presence: str | None = None  # a path whose presence marks data, if topic is not enough
    ack: Match | None = field(default_factory=lambda: Match("result"))
    error: Match | None = field(default_factory=lambda: Match("error"))
    heartbeat: Match | None = field(default_factory=lambda: Match("type", "heartbeat"))
    id_path: str | None = "id"
    error_reason_path: str | None = "error"
    keepalive_message: str | None = None
    keepalive_interval: float = 0.0
    limits: base.Limits = field(default_factory=base.Limits)

    def __post_init__(self) -> None:
        for template in (self.subscribe, self.unsubscribe):
            if ("{topic}" in template) == ("{topics}" in template):
                raise base.DialectError(
                    f"template {template!r} needs exactly one of {{topic}}, {{topics}}"
                )
        if self.keepalive_message is not None and self.keepalive_interval <= 0:
            raise base.DialectError("a keepalive message needs a positive interval")


class GenericDialect(base.Dialect):
    name = "generic"
    topic_paths = TopicPaths.of("topic")

    def __init__(self, config: GenericConfig | None = None, *, backend: str = "auto") -> None:
        self.config = config or GenericConfig()
        self._topic_parts = [parse_path(p) for p in self.config.topic_path.split("+")]
        presence = [self.config.data_presence] if self.config.data_presence else []
        # Instance attributes shadow the class-level defaults for this configuration.
        self.topic_paths = TopicPaths(  # type: ignore[misc]
            tuple(self._topic_parts) + tuple(parse_path(p) for p in presence),
            (False,) * len(self._topic_parts) + (True,) * len(presence),
        )
        self.limits = self.config.limits  # type: ignore[misc]
        self.path = self.config.path  # type: ignore[misc]
        self.name = self.config.name  # type: ignore[misc]
        super().__init__(backend=backend)

    def _render(self, op: str, topics: list[str], request_id: int) -> list[base.Message]:
        template = self.config.subscribe if op == "subscribe" else self.config.unsubscribe
        self._track(request_id, op, topics)
        if "{topics}" in template:
            text = template.replace("{topics}", base.json_text(topics))
            return [text.replace("{id}", str(request_id))]
        out: list[base.Message] = []
        for topic in topics:
            text = template.replace("{topic}", base.json_text(topic)[1:-1])
            out.append(text.replace("{id}", str(request_id)))
        return out

    def keepalive(self) -> tuple[float, base.Message] | None:
        if self.config.keepalive_message is None:
            return None
        return self.config.keepalive_interval, self.config.keepalive_message

    def _fast(self, raw: bytes, s: Sequence[int], b: int) -> base.Classified | None:
        parts = []
        for i in range(len(self._topic_parts)):
            text = self._str(raw, s, b + 3 * i)
            if not text:
                return None
            parts.append(text)
        if self.config.data_presence and not s[b + 3 * len(self._topic_parts) + 2]:
            return None
        return base.Data(self.config.topic_join.join(parts))

    def _classify_obj(self, obj: Any) -> base.Classified:
        cfg = self.config
        parts = [base.get_path(obj, p) for p in self._topic_parts]
        is_data = cfg.data_presence is None or base.has_path(obj, parse_path(cfg.data_presence))
        if is_data and parts and all(isinstance(p, str) and p for p in parts):
            return base.Data(cfg.topic_join.join(str(p) for p in parts))
        request_id = base.get_path(obj, parse_path(cfg.id_path)) if cfg.id_path else None
        if cfg.error is not None and cfg.error.test(obj):
            path = cfg.error_reason_path
            reason = base.get_path(obj, parse_path(path)) if path else None
            rid, _, topics = self._settle(request_id)
            return base.Error(str(reason if reason is not None else "error"), rid, topics)
        if cfg.ack is not None and cfg.ack.test(obj):
            rid, op, topics = self._settle(request_id)
            return base.Ack(rid, topics, op or "subscribe")
        if cfg.heartbeat is not None and cfg.heartbeat.test(obj):
            return base.Heartbeat()
        return base.Other(base.UNKNOWN, base.json_text(obj)[:80])

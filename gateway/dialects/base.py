"""The dialect interface: what the gateway needs to know about one exchange's feed protocol.

A dialect turns topics into subscribe/unsubscribe messages and sorts every incoming text
message into Data / Ack / Error / Heartbeat / Other. Data is the hot case: it is recognised
from the spans that the topic scanner (C, in bursts) reports, with no JSON parse; anything
the fast test is unsure about takes the slow path, a full parse, which is complete on its
own. A dialect object belongs to one connection: it numbers that connection's requests and
remembers which topics each one carried, so acks can name them.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from dataplane.shim import JSON_STRING, JSON_STRING_ESC
from gateway.dialects.extract import TopicExtractor
from gateway.dialects.jsonscan import TopicPaths

Message = str | bytes
RequestId = int | str


class DialectError(ValueError):
    """A topic or configuration that the dialect cannot express."""


# ---- what classify() returns --------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Data:
    """A market-data message for one topic (the only hot case)."""

    topic: str


@dataclass(frozen=True, slots=True)
class Ack:
    """The exchange confirmed a request; topics are those the request carried."""

    id: RequestId | None
    topics: tuple[str, ...] = ()
    op: str = "subscribe"  # subscribe | unsubscribe | list
    active: tuple[str, ...] | None = None  # the full subscription list, when the ack has it


@dataclass(frozen=True, slots=True)
class Error:
    """The exchange refused a request or reports a problem."""

    reason: str
    id: RequestId | None = None
    topics: tuple[str, ...] = ()
    code: int | str | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Liveness only: a heartbeat message or the answer to our keepalive."""

    topic: str | None = None


@dataclass(frozen=True, slots=True)
class Other:
    """Anything else; kind RECONNECT asks the client to reconnect soon."""

    kind: str
    detail: str = ""


RECONNECT = "reconnect"
INFO = "info"
UNKNOWN = "unknown"
UNPARSABLE = "unparsable"

Classified = Data | Ack | Error | Heartbeat | Other


@dataclass(frozen=True)
class Limits:
    """What the exchange allows on one connection.

    requests_per_second is the documented cap on client messages; the request queue uses
    `headroom` of it, with at most `burst` messages back to back, because keepalives and
    pongs often count against the same cap and a token bucket with a burst would exceed a
    sliding one-second window.
    """

    max_topics_per_connection: int | None = None
    max_topics_per_request: int | None = None
    max_request_bytes: int | None = None
    requests_per_second: float | None = None
    burst: int = 1
    headroom: float = 0.8

    @property
    def request_rate(self) -> float | None:
        return (
            None if self.requests_per_second is None else self.requests_per_second * self.headroom
        )


def json_text(value: Any) -> str:
    """Compact JSON, as exchanges expect it (and as the simulator compares it)."""
    return orjson.dumps(value).decode()


def chunks(items: Sequence[str], size: int | None) -> list[list[str]]:
    if not items:
        return []
    if size is None or size <= 0:
        return [list(items)]
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


class Dialect(ABC):
    """One exchange's feed protocol, for one connection."""

    name: ClassVar[str]
    #: The URL path of the public market-data endpoint.
    path: ClassVar[str] = "/"
    limits: ClassVar[Limits] = Limits()
    #: The key paths the topic scanner reports, in the order _fast reads them.
    topic_paths: ClassVar[TopicPaths]
    #: True when _fast classifies every message whose path 0 is a non-empty plain JSON
    #: string (no escape) as Data of exactly that string: the C feed path (dataplane/feed.py)
    #: may then take such messages of subscribed topics without asking the dialect. Set by
    #: `PlainTopicDialect`, whose _fast is that rule.
    c_feed: ClassVar[bool] = False

    def __init__(self, *, backend: str = "auto") -> None:
        self._ids = itertools.count(1)
        #: Requests awaiting an ack: id -> (op, topics). Ordered, for exchanges without ids.
        self._pending: dict[RequestId, tuple[str, tuple[str, ...]]] = {}
        self._fifo: deque[RequestId] = deque()
        self._left: dict[RequestId, set[str]] = {}
        self.extractor = TopicExtractor(self.topic_paths, backend=backend)
        self._n = len(self.topic_paths.paths)

    # ---- requests ------------------------------------------------------------------------
    def connect_path(self, topics: Sequence[str] = ()) -> str:
        """Path (and query) to open; only dialects with topics in the URL use topics."""
        return self.path

    def normalize(self, topic: str) -> str:
        """The canonical spelling of a topic; DialectError when it is not one."""
        if not topic or any(c.isspace() for c in topic):
            raise DialectError(f"{self.name}: bad topic {topic!r}")
        return topic

    def subscribe_messages(self, topics: Iterable[str]) -> list[Message]:
        """The messages that subscribe topics, split to honour the per-request limits."""
        return self._requests("subscribe", [self.normalize(t) for t in topics])

    def unsubscribe_messages(self, topics: Iterable[str]) -> list[Message]:
        return self._requests("unsubscribe", [self.normalize(t) for t in topics])

    def _requests(self, op: str, topics: list[str]) -> list[Message]:
        out: list[Message] = []
        for group in self._group(topics):
            for chunk in chunks(group, self.limits.max_topics_per_request):
                request_id = next(self._ids)
                out.extend(self._render(op, chunk, request_id))
        return out

    def _group(self, topics: list[str]) -> list[list[str]]:
        """Topics that can share one request (most dialects: all of them)."""
        return [topics] if topics else []

    @abstractmethod
    def _render(self, op: str, topics: list[str], request_id: int) -> list[Message]:
        """Messages for one request; implementations call _track for what gets acked."""

    def _track(self, request_id: RequestId, op: str, topics: Sequence[str]) -> None:
        self._pending[request_id] = (op, tuple(topics))
        self._fifo.append(request_id)

    def _settle(
        self, request_id: RequestId | None
    ) -> tuple[RequestId | None, str, tuple[str, ...]]:
        """The request an ack or error answers: by id, or the oldest when there is none."""
        if request_id is not None:
            rid = self._lookup(request_id)
            if rid is None:
                return request_id, "", ()
        elif self._fifo:
            rid = self._fifo[0]
        else:
            return None, "", ()
        op, topics = self._pending.pop(rid)
        self._left.pop(rid, None)
        self._fifo.remove(rid)
        return rid, op, topics

    def _settle_topic(
        self, request_id: RequestId | None, topic: str | None
    ) -> tuple[RequestId | None, str]:
        """For exchanges that ack each topic of a request separately: (id, op) of the
        request that carried topic; the request is settled when its last topic is."""
        rid = self._lookup(request_id)
        if rid is None and topic is not None:
            rid = next((r for r in self._fifo if topic in self._pending[r][1]), None)
        if rid is None:
            return request_id, ""
        op, topics = self._pending[rid]
        left = self._left.setdefault(rid, set(topics))
        left.discard(topic or "")
        if not left or topic is None:
            self._pending.pop(rid)
            self._left.pop(rid, None)
            self._fifo.remove(rid)
        return rid, op

    def _lookup(self, request_id: RequestId | None) -> RequestId | None:
        if request_id is None:
            return None
        if request_id in self._pending:
            return request_id
        if (
            isinstance(request_id, str)
            and request_id.isdigit()
            and int(request_id) in self._pending
        ):
            return int(request_id)
        return None

    @property
    def pending_requests(self) -> int:
        return len(self._pending)

    def keepalive(self) -> tuple[float, Message] | None:
        """(interval s, message) the client must send, or None when WebSocket pings do."""
        return None

    # ---- classification -----------------------------------------------------------------
    def classify(self, message: Message) -> Classified:
        """Sort one message: the fast span test first, the full parse when it says nothing."""
        raw = message.encode() if isinstance(message, str) else message
        status, spans = self.extractor.extract(raw)
        if status >= 0:
            fast = self._fast(raw, spans, 0)
            if fast is not None:
                return fast
        return self.classify_slow(raw)

    def classify_batch(self, messages: Sequence[bytes]) -> list[Classified]:
        """Sort a burst with one scanner call; control messages take the slow path."""
        status, spans = self.extractor.run(messages)
        out: list[Classified] = []
        stride = 3 * self._n
        fast = self._fast
        for i, raw in enumerate(messages):
            result = fast(raw, spans, i * stride) if status[i] >= 0 else None
            out.append(result if result is not None else self.classify_slow(raw))
        return out

    def classify_slow(self, raw: bytes) -> Classified:
        """The complete classification, from a full parse (control messages, odd data)."""
        text = self._text_control(raw)
        if text is not None:
            return text
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return Other(UNPARSABLE, raw[:80].decode("utf-8", "replace"))
        return self._classify_obj(obj)

    def _text_control(self, raw: bytes) -> Classified | None:
        """Non-JSON control messages (OKX's 'pong'); None when raw is not one."""
        return None

    @abstractmethod
    def _fast(self, raw: bytes, s: Sequence[int], b: int) -> Classified | None:
        """Classify from spans: s[b + 3*p + 0..2] = offset, length, kind of path p.
        Return None whenever unsure; the slow path then decides."""

    @abstractmethod
    def _classify_obj(self, obj: Any) -> Classified:
        """Classify a parsed message (any JSON value)."""

    # ---- helpers for _fast ----------------------------------------------------------------
    @staticmethod
    def _str(raw: bytes, s: Sequence[int], i: int) -> str | None:
        """The plain string at span i (None for escaped strings and other kinds)."""
        if s[i + 2] != JSON_STRING:
            return None
        off = s[i]
        return raw[off : off + s[i + 1]].decode()

    @staticmethod
    def _raw(raw: bytes, s: Sequence[int], i: int) -> bytes | None:
        if s[i + 2] != JSON_STRING:
            return None
        off = s[i]
        return raw[off : off + s[i + 1]]

    @staticmethod
    def _escaped(s: Sequence[int], i: int) -> bool:
        return s[i + 2] == JSON_STRING_ESC


class VenueDialect(Dialect):
    """An exchange's own dialect: its messages are JSON objects, so any other JSON value is
    Other(UNKNOWN) and `_classify_message` sorts the objects. (The generic dialect takes
    any JSON value: its paths may start in an array.)"""

    def _classify_obj(self, obj: Any) -> Classified:
        if not isinstance(obj, dict):
            return Other(UNKNOWN, type(obj).__name__)
        return self._classify_message(obj)

    @abstractmethod
    def _classify_message(self, obj: dict[str, Any]) -> Classified:
        """Classify a message that is a JSON object."""


class PlainTopicDialect(VenueDialect):
    """A venue whose data messages name their topic in one string, at path 0 (Binance's
    `stream`, Bybit's `topic`): a plain (unescaped), non-empty string there is the topic,
    so the C feed path may take such messages without asking the dialect (`c_feed`)."""

    c_feed = True

    def _fast(self, raw: bytes, s: Sequence[int], b: int) -> Classified | None:
        topic = self._str(raw, s, b)
        return Data(topic) if topic else None


def get_path(obj: Any, path: Sequence[str | int]) -> Any:
    """obj[path[0]][path[1]]... or None when any step is missing."""
    for part in path:
        if isinstance(part, int):
            if not isinstance(obj, list) or part >= len(obj):
                return None
        elif not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def has_path(obj: Any, path: Sequence[str | int]) -> bool:
    """Whether obj has a value (null included) at path."""
    for part in path:
        if isinstance(part, int):
            if not isinstance(obj, list) or part >= len(obj):
                return False
        elif not isinstance(obj, dict) or part not in obj:
            return False
        obj = obj[part]
    return True

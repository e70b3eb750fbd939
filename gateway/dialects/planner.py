"""Honouring an exchange's limits: topics split across connections, requests paced.

Both pieces are sans-IO with time passed in (`now`, monotonic seconds), like the TCP code:
they never sleep, they say when they next have work (`poll_at`). The session loop feeds
them and sends what they release.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from gateway.dialects.base import Dialect, Limits, Message


class TokenBucket:
    """`rate` tokens per second, holding at most `capacity`; starts full."""

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        if rate <= 0 or capacity < 1:
            raise ValueError("a token bucket needs rate > 0 and capacity >= 1")
        self.rate = rate
        self.capacity = float(capacity)
        self.tokens = float(capacity)
        self.stamp = now

    def _refill(self, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now

    def take(self, now: float, n: float = 1.0) -> bool:
        """Take n tokens if they are there."""
        self._refill(now)
        if self.tokens + 1e-9 >= n:
            self.tokens -= n
            return True
        return False

    def consume(self, now: float, n: float = 1.0) -> None:
        """Take n tokens even into debt (a message that had to go, such as a pong)."""
        self._refill(now)
        self.tokens -= n

    def ready_at(self, now: float, n: float = 1.0) -> float:
        """When n tokens will be there (now, if they are)."""
        self._refill(now)
        missing = n - self.tokens
        return now if missing <= 1e-9 else now + missing / self.rate


class RequestQueue:
    """Control messages of one connection, released at the pace the limits allow."""

    def __init__(self, limits: Limits, now: float) -> None:
        rate = limits.request_rate
        self._bucket = TokenBucket(rate, max(1, limits.burst), now) if rate else None
        self._queue: deque[Message] = deque()
        self.sent = 0

    def __len__(self) -> int:
        return len(self._queue)

    def push(self, messages: Iterable[Message]) -> None:
        self._queue.extend(messages)

    def pop_due(self, now: float) -> list[Message]:
        """The messages that may go now, in order."""
        out: list[Message] = []
        while self._queue and (self._bucket is None or self._bucket.take(now)):
            out.append(self._queue.popleft())
        self.sent += len(out)
        return out

    def note_other(self, now: float) -> None:
        """A message outside the queue (keepalive) went out and counts against the cap."""
        if self._bucket is not None:
            self._bucket.consume(now)

    def poll_at(self, now: float) -> float | None:
        """When the next queued message may go; None when the queue is empty."""
        if not self._queue:
            return None
        return now if self._bucket is None else self._bucket.ready_at(now)


@dataclass
class ConnectionPlan:
    """The topics one connection carries."""

    index: int
    topics: set[str] = field(default_factory=set)


class SubscriptionPlanner:
    """Places topics on connections, none above the dialect's per-connection cap.

    New topics fill the connections in order (the oldest first), a new connection opens
    when all are full; removing topics never moves others (a move would be an unsubscribe
    plus a subscribe, with a gap in between).
    """

    def __init__(self, max_per_connection: int | None) -> None:
        if max_per_connection is not None and max_per_connection < 1:
            raise ValueError("max_per_connection must be >= 1")
        self.cap = max_per_connection
        self.connections: list[ConnectionPlan] = []
        self._where: dict[str, int] = {}

    def connection_of(self, topic: str) -> int | None:
        return self._where.get(topic)

    def add(self, topics: Iterable[str]) -> dict[int, list[str]]:
        """Place new topics; returns connection index -> topics to subscribe there."""
        placed: dict[int, list[str]] = {}
        for topic in dict.fromkeys(topics):
            if topic in self._where:
                continue
            target = next(
                (c for c in self.connections if self.cap is None or len(c.topics) < self.cap),
                None,
            )
            if target is None:
                target = ConnectionPlan(len(self.connections))
                self.connections.append(target)
            target.topics.add(topic)
            self._where[topic] = target.index
            placed.setdefault(target.index, []).append(topic)
        return placed

    def remove(self, topics: Iterable[str]) -> dict[int, list[str]]:
        """Drop topics; returns connection index -> topics to unsubscribe there."""
        removed: dict[int, list[str]] = {}
        for topic in dict.fromkeys(topics):
            index = self._where.pop(topic, None)
            if index is None:
                continue
            self.connections[index].topics.discard(topic)
            removed.setdefault(index, []).append(topic)
        return removed

    @property
    def total(self) -> int:
        return len(self._where)


@dataclass
class PlannedConnection:
    """A connection to open: the dialect object that will talk on it, its topics, the
    path to connect to and the paced queue of requests to send once it is open."""

    dialect: Dialect
    topics: list[str]
    path: str
    queue: RequestQueue


def plan_connections(
    factory: Callable[[], Dialect],
    topics: Sequence[str],
    now: float,
    *,
    topics_in_url: bool = False,
) -> list[PlannedConnection]:
    """Split topics over as many connections as the per-connection cap needs, each with its
    subscribe requests queued at the allowed pace (or, where the dialect takes topics in
    the URL and topics_in_url is set, with them in the path and nothing to send)."""
    first = factory()
    planner = SubscriptionPlanner(first.limits.max_topics_per_connection)
    out: list[PlannedConnection] = []
    for index, group in sorted(planner.add(first.normalize(t) for t in topics).items()):
        dialect = first if index == 0 else factory()
        queue = RequestQueue(dialect.limits, now)
        if topics_in_url and dialect.connect_path(group[:1]) != dialect.path:
            path = dialect.connect_path(group)
        else:
            path = dialect.connect_path()
            queue.push(dialect.subscribe_messages(group))
        out.append(PlannedConnection(dialect, group, path, queue))
    return out

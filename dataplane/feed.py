"""The C feed path seen from Python: one `CFeed` per upstream connection.

The engine's poll turns the data frames of subscribed topics into message ring records
itself (dataplane/shim/wsgw_feed.h says how, and why order holds). Python keeps
everything else: it fills the topic table as topics are subscribed, arms the feed whenever
its own WebSocket reader stands at a message boundary with nothing held, and reads the
counters (messages, bytes, per topic, the newest receive time, latency samples) in its
housekeeping. Topic table changes and attach/detach run on the engine's thread; `arm` and
`take` are safe from any thread.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from dataplane.ring import RingWriter
from dataplane.shim import FEED_MAX_TOPICS as MAX_TOPICS
from dataplane.shim import FEED_TOPIC_MAX as TOPIC_MAX
from dataplane.shim import FeedBinding, FeedError, TopicSpec

__all__ = ["MAX_TOPICS", "TOPIC_MAX", "CFeed", "FeedDelta", "FeedError"]


@dataclass
class FeedDelta:
    """What the feed did since the last `take`."""

    messages: int = 0
    bytes: int = 0
    writes: int = 0  # ring writes (one per burst that brought messages)
    stops: int = 0  # times the feed disarmed and left frames to Python
    topic_messages: dict[str, int] = field(default_factory=dict)
    last_message_ns: int = 0  # CLOCK_REALTIME receive stamp of the newest record (0: none)
    latency_ns: list[int] = field(default_factory=list)  # receive stamp -> ring record


class CFeed:
    """One connection's feed: ring writer, session id, the dialect's topic spec."""

    def __init__(
        self, ring: RingWriter, session_id: int, spec: TopicSpec, max_payload: int
    ) -> None:
        self.ring = ring  # held: the C feed writes through its handle
        self.session_id = session_id
        limit = min(max_payload, ring.max_payload)
        self._binding = FeedBinding(ring.handle, session_id, limit, spec)
        # Freed when nothing refers to it any more: the transport holds it until its flow
        # let go of it (EngineTransport.detach_feed), so C never writes through a freed one.
        self._finalizer = weakref.finalize(self, self._binding.destroy)
        self._index: dict[str, int] = {}  # topic -> its slot in the per-topic counts
        self._names: list[str | None] = []
        self._seen_counts: list[int] = []
        self._seen = {"messages": 0, "bytes": 0, "writes": 0, "stops": 0, "last_message_ns": 0}
        self._samples_next = 0

    @property
    def handle(self) -> int:
        return self._binding.handle

    # ---- engine thread ------------------------------------------------------------------
    def set_topic(self, topic: str, topic_id: int) -> bool:
        """Route topic's data frames to ring topic topic_id; False when the table cannot
        take it (too long, full): its frames stay Python's."""
        raw = topic.encode()
        if not raw or len(raw) > TOPIC_MAX:
            return False
        index = self._index.get(topic)
        if index is None:
            if len(self._names) >= MAX_TOPICS:
                return False
            index = len(self._names)
        try:
            self._binding.topic_set(raw, topic_id, index)
        except FeedError:
            return False
        if topic not in self._index:
            self._index[topic] = index
            self._names.append(topic)
            self._seen_counts.append(0)
        return True

    def remove_topic(self, topic: str) -> None:
        """Its frames go to Python again (the count index stays: counts only grow)."""
        if topic in self._index:
            self._binding.topic_set(topic.encode(), 0, self._index[topic])

    def disarm(self) -> None:
        self._binding.disarm()

    def join_group(self, group_handle: int, leg: int) -> None:
        """Before the feed is attached: its data frames go through the feed group's arbiter
        as `leg` (dataplane.arbiter.CGroup), which writes the winners to the ring."""
        self._binding.join_group(group_handle, leg)

    # ---- any thread ---------------------------------------------------------------------
    def arm(self, seq: int) -> None:
        """Python has processed every byte before TCP sequence number seq (see the header)."""
        self._binding.arm(seq)

    def stats(self) -> dict[str, int]:
        return self._binding.stats()

    def take(self) -> FeedDelta:
        """Counters since the last take (one caller at a time)."""
        stats = self._binding.stats()
        seen = self._seen
        delta = FeedDelta(
            messages=stats["messages"] - seen["messages"],
            bytes=stats["bytes"] - seen["bytes"],
            writes=stats["writes"] - seen["writes"],
            stops=stats["stops"] - seen["stops"],
        )
        if stats["last_message_ns"] != seen["last_message_ns"]:
            delta.last_message_ns = stats["last_message_ns"]
        seen["messages"] = stats["messages"]
        seen["bytes"] = stats["bytes"]
        seen["writes"] = stats["writes"]
        seen["stops"] = stats["stops"]
        seen["last_message_ns"] = stats["last_message_ns"]
        if delta.messages:
            names = self._names
            counts = self._binding.topic_counts(len(names))
            for i, count in enumerate(counts):
                moved = count - self._seen_counts[i]
                if moved:
                    name = names[i]
                    if name is not None:
                        delta.topic_messages[name] = moved
                    self._seen_counts[i] = count
        delta.latency_ns, self._samples_next = self._binding.samples(self._samples_next)
        return delta

    def close(self) -> None:
        """Free the C feed now: detached from its flow first (engine thread)."""
        self._finalizer()

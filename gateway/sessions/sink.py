"""Where sessions put messages: the fan-out hub, or anything with the same two methods.

Sessions call the sink on their event-loop thread, once per received burst (never per
message) and once per gap; a sink that is read from other threads locks on its own side.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

#: (session_id, topic, payload, recv_ts_ns, upstream seq or None)
Published = tuple[int, str, bytes, int, int | None]


class MessageSink(Protocol):
    """What a session needs of the hub (gateway.hub)."""

    def publish_batch(self, messages: Sequence[Published]) -> object:
        """Data messages of one burst, in arrival order (the result is not used)."""
        ...

    def publish_gap(self, session_id: int, lost: int | None, reason: str) -> object:
        """Messages of session_id may be missing here: `lost` of them, None when unknown."""
        ...


class NullSink:
    """Drops everything (a runtime built without a hub)."""

    def publish_batch(self, messages: Sequence[Published]) -> None:
        pass

    def publish_gap(self, session_id: int, lost: int | None, reason: str) -> None:
        pass


@dataclass(frozen=True)
class GapMark:
    """A gap as a RecordingSink logs it, between the messages around it."""

    session_id: int
    lost: int | None
    reason: str


class RecordingSink:
    """Keeps everything in arrival order (tests, debugging); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.log: list[Published | GapMark] = []
        self.batches = 0

    def publish_batch(self, messages: Sequence[Published]) -> None:
        with self._lock:
            self.log.extend(messages)
            self.batches += 1

    def publish_gap(self, session_id: int, lost: int | None, reason: str) -> None:
        with self._lock:
            self.log.append(GapMark(session_id, lost, reason))

    def messages(self, topic: str | None = None) -> list[Published]:
        with self._lock:
            entries = list(self.log)
        return [
            e for e in entries if not isinstance(e, GapMark) and (topic is None or e[1] == topic)
        ]

    def gaps(self) -> list[GapMark]:
        with self._lock:
            return [e for e in self.log if isinstance(e, GapMark)]

    def entries(self) -> list[Published | GapMark]:
        with self._lock:
            return list(self.log)

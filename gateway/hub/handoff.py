"""The engine thread's one way to reach an asyncio loop without ever waiting on it.

`offer` (engine thread) appends the entry to a deque (atomic under the GIL: no lock) and
wakes the loop with `call_soon_threadsafe` only when no wake-up is pending, so a loop that
keeps up is woken once per batch at most and a busy one drains many batches per wake-up.
A loop that falls behind by more than `limit` messages gets no more batches: the engine
counts what it could not hand over, per (session, topic), and the counts reach the loop as
an `Overflow` entry where the loss happened, so the consumers learn exactly what they lost.

Each counter is written by one thread only (`offered`/`dropped` by the engine, `taken` by
the loop), so none needs a lock; `pending` is their difference.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from gateway.hub.events import Batch, Entry, GapEvent, Overflow

MISSED_RECORDS = 256  # loss records kept apart before the engine merges them


class Handoff:
    """Engine thread -> one loop. on_wake runs on the loop and calls `take`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_wake: Callable[[], None],
        limit: int,
        name: str,
        *,
        count_keys: bool = True,
    ) -> None:
        if limit < 1:
            raise ValueError(f"hand-off limit must be at least 1 message, not {limit}")
        self.loop = loop
        self.name = name
        self.limit = limit
        self.count_keys = count_keys  # per (session, topic) loss counts: routers need them
        self._on_wake = on_wake
        self._entries: deque[Entry] = deque()
        self._scheduled = False
        # Loss records (counts per key or None, total), one per batch that did not fit.
        # The engine appends; whoever comes first pops from the left (each record goes to
        # exactly one side): the engine before its next batch that fits, so the loss sits
        # where it happened; the loop after draining the entries, so a loss is reported
        # even when the engine publishes nothing more.
        self._missed: deque[tuple[dict[tuple[int, str], int] | None, int]] = deque()
        self.offered = 0  # messages handed over (engine thread)
        self.dropped = 0  # messages not handed over: the loop was too far behind (engine thread)
        self.taken = 0  # messages the loop took (loop thread)
        self.wakeups = 0  # call_soon_threadsafe calls (engine thread)
        self.dead = False  # the loop is closed: offers are dropped

    @property
    def pending(self) -> int:
        return self.offered - self.taken

    # ---- engine thread ----------------------------------------------------------------------
    def offer(self, batch: Batch) -> None:
        """Hand a batch over, or count it as dropped when the loop is `limit` behind."""
        n = len(batch.messages)
        if self.dead:  # nobody will read: no per-topic counts either
            self.dropped += n
            return
        if self.offered - self.taken + n > self.limit:
            self._drop(batch, n)
            return
        if self._missed:
            self._note_missed()
        self._entries.append(batch)
        self.offered += n
        self._wake()

    def offer_event(self, event: GapEvent) -> None:
        """Events are rare and small: they always go through (after any loss note)."""
        if self.dead:
            return
        if self._missed:
            self._note_missed()
        self._entries.append(event)
        self._wake()

    def _drop(self, batch: Batch, n: int) -> None:
        self.dropped += n
        counts: dict[tuple[int, str], int] | None = None
        if self.count_keys:
            counts = {}
            for message in batch.messages:
                key = (message[0], message[1])
                counts[key] = counts.get(key, 0) + 1
        missed = self._missed
        missed.append((counts, n))
        if len(missed) > MISSED_RECORDS:  # the loop is far behind: merge the two newest
            last = missed.pop()
            try:
                before = missed.pop()
            except IndexError:  # the loop took the rest meanwhile
                missed.append(last)
                return
            missed.append(_merge(before, last))
        self._wake()  # the loop reports the loss even if nothing else comes

    def _note_missed(self) -> None:
        record = _pop_all(self._missed)
        if record is not None:
            self._entries.append(Overflow(record[0] or {}, record[1]))

    def _wake(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self.wakeups += 1
            try:
                self.loop.call_soon_threadsafe(self._run)
            except RuntimeError:  # the loop is closed: nobody will ever read this
                self.dead = True
                self._entries.clear()

    # ---- loop thread --------------------------------------------------------------------
    def _run(self) -> None:
        # Cleared before taking: an entry offered from now on schedules another wake-up.
        self._scheduled = False
        self._on_wake()

    def take(self) -> list[Entry]:
        """Everything handed over so far, in order, then any loss the engine noted since."""
        entries = self._entries
        out: list[Entry] = []
        n = 0
        pop = entries.popleft
        while entries:
            entry = pop()
            out.append(entry)
            if type(entry) is Batch:
                n += len(entry.messages)
        self.taken += n
        record = _pop_all(self._missed)
        if record is not None:
            out.append(Overflow(record[0] or {}, record[1]))
        return out

    def __repr__(self) -> str:
        return f"<Handoff {self.name} pending={self.pending} dropped={self.dropped}>"


Record = tuple[dict[tuple[int, str], int] | None, int]


def _merge(a: Record, b: Record) -> Record:
    if a[0] is None or b[0] is None:
        return (None, a[1] + b[1])
    counts = dict(a[0])
    for key, n in b[0].items():
        counts[key] = counts.get(key, 0) + n
    return (counts, a[1] + b[1])


def _pop_all(missed: deque[Record]) -> Record | None:
    """Pop every record from the left (safe against the other thread popping too)."""
    total: Record | None = None
    while True:
        try:
            record = missed.popleft()
        except IndexError:
            return total
        total = record if total is None else _merge(total, record)

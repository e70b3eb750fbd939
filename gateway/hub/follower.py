"""A ring reader that wakes an asyncio loop: how /v1/stream routers and the NATS sink read.

Every record reaches the hub's consumers through the shared-memory ring, whoever wrote it
(`Hub.publish_batch`, or C inside the engine's poll), so there is one path and one set of
sequence numbers. A `RingFollower` owns a reader of the ring and one waiting thread: the
thread sleeps in the ring's futex wait with the GIL released and, when records arrive,
schedules `on_wake` on the loop with one `call_soon_threadsafe`, then sleeps on an event
until the loop calls `rearm` (after reading). So a loop has at most one wake-up pending,
the thread never spins while the loop is busy, and the records are read on the loop, at
its own pace: a loop that stalls costs the writer nothing, it falls behind in the ring.

A follower more than `limit` messages behind the writer skips to the newest record and
reports what it skipped, as it reports being lapped by the writer: a `Gap` (lost, first
seq) first in what `read` returns. Either way the loss is counted (`dropped`), never silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from dataplane.ring import Gap, RingClosedError, RingEvent, RingReader, RingWriter

log = logging.getLogger("wsgw.hub")

#: Longest futex wait of the waiting thread: how often it looks whether it was stopped.
WAIT_SLICE = 1.0
#: Records a follower reads per ring call.
READ_BATCH = 1024


class RingFollower:
    """One reader of `ring` feeding one loop. `on_wake` runs on the loop; it calls `read`
    (any number of times) and then `rearm`, after which the next record wakes it again."""

    def __init__(
        self,
        ring: RingWriter,
        loop: asyncio.AbstractEventLoop,
        on_wake: Callable[[], None],
        name: str,
        *,
        limit: int,
    ) -> None:
        if limit < 1:
            raise ValueError(f"follower limit must be at least 1 message, not {limit}")
        self.loop = loop
        self.name = name
        self.limit = limit
        self._on_wake = on_wake
        # Starts past the newest record: it gets what is written from now on.
        self.reader = RingReader.attach_fd(ring.fd, copy=True, max_batch=READ_BATCH)
        self._armed = threading.Event()
        # Held by whoever asks the reader from outside the loop (metrics, tests) and by
        # `stop` to detach it, so no one asks a reader that is being freed.
        self._detach_lock = threading.Lock()
        self._halting = False  # the waiting thread ends
        self._stopping = False  # reads end too
        self.dead = False  # the loop is closed, or the follower was stopped
        self.dropped = 0  # messages lost: lapped by the writer, or skipped past `limit`
        self.read_count = 0  # messages read (loop thread)
        self.wakeups = 0  # call_soon_threadsafe calls (waiting thread)
        self._thread = threading.Thread(
            target=self._wait_loop, name=f"wsgw-follow-{name}", daemon=True
        )
        self._thread.start()

    @property
    def pending(self) -> int:
        """Messages written that this follower has not read yet."""
        with self._detach_lock:
            if self.dead:
                return 0
            with contextlib.suppress(RingClosedError):
                return self.reader.lag
            return 0

    @property
    def next_seq(self) -> int | None:
        """The sequence number this follower reads next (None: stopped)."""
        with self._detach_lock:
            if self._stopping:
                return None
            with contextlib.suppress(RingClosedError):
                return self.reader.next_seq
            return None

    # ---- waiting thread -------------------------------------------------------------------
    def _wait_loop(self) -> None:
        reader = self.reader
        while not self._halting:
            try:
                ready = reader.wait(WAIT_SLICE)  # futex, GIL released
            except RingClosedError:
                break
            except Exception:
                log.exception("ring follower %s: wait failed", self.name)
                break
            if not ready or self._halting:
                if self.loop.is_closed():  # its loop ended without stopping us: nobody reads
                    self.dead = True
                    break
                continue
            self._armed.clear()
            self.wakeups += 1
            try:
                self.loop.call_soon_threadsafe(self._run)
            except RuntimeError:  # the loop is closed: nobody will read
                self.dead = True
                break
            self._armed.wait()
            if reader.closed:  # the writer closed the ring and it was read to the end
                break

    # ---- loop thread ---------------------------------------------------------------------
    def _run(self) -> None:
        if self._stopping:
            return
        self._on_wake()

    def read(self) -> list[RingEvent]:
        """What the ring holds for this follower now (up to READ_BATCH records), after a
        Gap when messages were lost since the last read. [] once stopped or closed."""
        if self._stopping:
            return []
        reader = self.reader
        try:
            lag = reader.lag
            skipped: Gap | None = None
            if lag > self.limit:
                before = reader.next_seq
                reader.seek("latest")
                skipped = Gap(reader.next_seq - before, before)
            events = reader.read_batch(timeout=0)
        except RingClosedError:
            return []
        if events and type(events[0]) is Gap:
            lapped = events[0]
            if skipped is not None:  # lapped right after the skip: one gap of both
                events[0] = Gap(skipped.lost + lapped.lost, skipped.first_seq)
            skipped = None
        if skipped is not None and skipped.lost:
            events.insert(0, skipped)
        if events and type(events[0]) is Gap:
            self.dropped += events[0].lost
            self.read_count += len(events) - 1
        else:
            self.read_count += len(events)
        return events

    def rearm(self) -> None:
        """Done reading for now: the next record (or one still there) wakes the loop again."""
        self._armed.set()

    def halt(self) -> None:
        """End the waiting thread (any thread; idempotent): the loop is woken no more, and
        may still `read` what is left (a sink's last drain) without meeting the thread's
        wait on the reader."""
        self._halting = True
        self.reader.interrupt()  # a no-op once detached
        self._armed.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(WAIT_SLICE * 5)

    def stop(self) -> None:
        """End the waiting thread and detach (any thread; idempotent)."""
        if self._stopping:
            return
        with self._detach_lock:
            self._stopping = True
            self.dead = True
        self.halt()
        with self._detach_lock:
            self.reader.close()

    def __repr__(self) -> str:
        return f"<RingFollower {self.name} pending={self.pending} dropped={self.dropped}>"

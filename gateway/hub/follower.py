"""A ring reader that wakes an asyncio loop: how /v1/stream routers and the NATS sink read.

Every record reaches the hub's consumers through the shared-memory ring, whoever wrote it
(`Hub.publish_batch`, or C inside the engine's poll), so there is one path and one set of
sequence numbers. A `RingFollower` owns a reader of the ring and an eventfd the loop watches
(`add_reader`); when records arrive the eventfd is written once, and not again until the
loop calls `rearm` (after reading). Who writes it (the shim's ring notifier, in C: never
Python, so waking the loop costs no GIL hand-over):

- direct (the default, `DIRECT_WAKE`): the ring's writer itself, in this process, right
  after it publishes (the hub's `publish_batch`, the engines' C feeds in their poll). One
  wake-up in series, the loop's.
- a waiting thread in C that sleeps in the ring's futex wait, then writes the eventfd: two
  wake-ups in series (the thread's, then the loop's) and a thread per loop (p50 10-20 us
  more per wake-up, 11-25 % more CPU, in `wsgw_bench.follower_wake` on a loaded 2-vCPU host;
  docs/PERFORMANCE.md, feed). It works whoever writes the ring; `direct=False` or
  WSGW_RING_DIRECT_WAKE=0 choose it.

Either way a loop has at most one wake-up pending, nothing spins while the loop is busy, and
the records are read on the loop, at its own pace: a loop that stalls costs the writer
nothing (one eventfd write per wake-up at most), it falls behind in the ring.

Parked (`park`): while everything a follower feeds is sent by the ring writer's C sink (a
/v1/stream router whose streams are all armed, the NATS sink with C armed), the loop is not
woken per record at all: its wake-up only found the records the sink had sent, and on a
2-vCPU machine it ran beside the consumer's own wake-up (issue #16: 3000-6000 wake-ups/s of
the API loop at 10k-20k msg/s). The sink writes the follower's eventfd when it stops sending
by itself (`SinkSocket.wake_on_stop`) and Python's own take-backs `unpark`. Parked, the loop
reads what the sink sent every PARK_S (a tick, not tied to the records' arrival): a few
hundred records at 20k msg/s, so no read holds the GIL long (a 50 ms tick's 1000 records
did, and the engine's thread, which takes the GIL after every burst, waited for it). Only
below PARK_MAX_RATE records a second: above it the per-record wake-ups batch several
records each, and parking measured worse at 20k msg/s (docs/PERFORMANCE.md, session 13).

A follower more than `limit` messages behind the writer skips to the newest record and
reports what it skipped, as it reports being lapped by the writer: a `Gap` (lost, first
seq) first in what `read` returns. Either way the loss is counted (`dropped`), never silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable

from dataplane.ring import Gap, RingClosedError, RingError, RingEvent, RingReader, RingWriter
from dataplane.shim import (
    ring_notifier_count,
    ring_notifier_rearm,
    ring_notifier_start,
    ring_notifier_start_direct,
    ring_notifier_stop,
)

log = logging.getLogger("wsgw.hub")

#: Records a follower reads per ring call.
READ_BATCH = 1024
#: Whether followers are woken by the ring's writer directly (no waiting thread); a
#: follower's `direct` argument overrides it. WSGW_RING_DIRECT_WAKE=0 turns it off.
DIRECT_WAKE = os.environ.get("WSGW_RING_DIRECT_WAKE", "1") != "0"
#: A parked follower's loop reads what the sink sent this often (and parks again while the
#: sink still sends all).
PARK_S = 0.01
#: Above this many records a second (measured over PARK_S at least) a follower does not park.
PARK_MAX_RATE = 5000
#: Whether followers park while the C sink sends all they feed; WSGW_FOLLOWER_PARK=0: never.
PARK = os.environ.get("WSGW_FOLLOWER_PARK", "1") != "0"


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
        direct: bool | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError(f"follower limit must be at least 1 message, not {limit}")
        self.loop = loop
        self.name = name
        self.limit = limit
        self._on_wake = on_wake
        # Starts past the newest record: it gets what is written from now on.
        self.reader = RingReader.attach_fd(ring.fd, copy=True, max_batch=READ_BATCH)
        # Held by whoever asks the reader from outside the loop (metrics, tests) and by
        # `stop` to detach it, so no one asks a reader that is being freed.
        self._detach_lock = threading.Lock()
        self._halted = False  # the notifier thread ended
        self._stopping = False  # reads end too
        self.dead = False  # the loop is closed, or the follower was stopped
        self.dropped = 0  # messages lost: lapped by the writer, or skipped past `limit`
        self.read_count = 0  # messages read (loop thread)
        # Whether the last read was full, so the follower may be far behind: only then is
        # its lag asked (a C call making a dict), not on every wake-up of a light feed.
        self._maybe_behind = True
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._park: asyncio.TimerHandle | None = None  # parked: the timer that ends it
        self.parks = 0  # times parked (loop thread)
        self._busy = False  # reading more than PARK_MAX_RATE records a second: no parking
        self._rate_at = 0.0  # monotonic time and read_count of the rate's last estimate
        self._rate_count = 0
        #: Woken by the writer's writes (True) or by a waiting thread (False).
        self.direct = DIRECT_WAKE if direct is None else direct
        if self.direct:
            rc, self._notifier = ring_notifier_start_direct(
                self.reader._handle, self._fd, ring._live()
            )
        else:
            rc, self._notifier = ring_notifier_start(self.reader._handle, self._fd, 0)
        if rc < 0:
            os.close(self._fd)
            self.reader.close()
            raise RingError(f"ring notifier: {os.strerror(-rc)}", -rc)
        # A follower dropped without `stop` (its loop ended, its hub was never closed) ends
        # its C thread before the reader that thread waits on can be freed: the finalizer
        # holds the reader until then.
        self._finalizer = weakref.finalize(
            self, _release, self._notifier, self.reader, self._fd, self._detach_lock
        )
        try:
            if _running_loop() is loop:
                loop.add_reader(self._fd, self._readable)
            else:  # the NATS sink's loop, from the hub's constructor
                loop.call_soon_threadsafe(self._watch)
        except RuntimeError:  # the loop is closed
            self.stop()
            raise

    @property
    def wakeups(self) -> int:
        """Notifications sent (one per wake-up of the loop), by the writer or the thread."""
        with self._detach_lock:
            return 0 if self._halted else ring_notifier_count(self._notifier)

    def _watch(self) -> None:
        if not self._halted:
            self.loop.add_reader(self._fd, self._readable)

    def _readable(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._fd)
        if not self._stopping:
            self._on_wake()

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

    # ---- loop thread ---------------------------------------------------------------------
    def read(self) -> list[RingEvent]:
        """What the ring holds for this follower now (up to READ_BATCH records), after a
        Gap when messages were lost since the last read. [] once stopped or closed."""
        if self._stopping:
            return []
        reader = self.reader
        try:
            skipped: Gap | None = None
            if self._maybe_behind and reader.lag > self.limit:
                before = reader.next_seq
                reader.seek("latest")
                skipped = Gap(reader.next_seq - before, before)
            events = reader.read_batch(timeout=0)
        except RingClosedError:
            return []
        self._maybe_behind = len(events) >= READ_BATCH
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

    @property
    def wake_fd(self) -> int:
        """The eventfd the loop watches: written once, it wakes the loop (a parked one too)."""
        return self._fd

    @property
    def parked(self) -> bool:
        return self._park is not None

    def park(self) -> None:
        """Done reading, and everything this follower feeds is sent by the C sink: no
        wake-up per record until `unpark` or the sink's stop (it writes `wake_fd`); the loop
        reads again PARK_S from now, and parks again if the sink still sends all (loop
        thread; a no-op when parked already; with PARK off: `rearm`)."""
        now = time.monotonic()
        if now - self._rate_at >= PARK_S:  # the rate since the last estimate
            read = self.read_count - self._rate_count
            self._busy = read > PARK_MAX_RATE * (now - self._rate_at)
            self._rate_at, self._rate_count = now, self.read_count
        if not PARK or self._busy:
            self.rearm()
            return
        if self._park is None and not self._halted:
            self._park = self.loop.call_later(PARK_S, self._tick)
            self.parks += 1

    def _tick(self) -> None:
        """Parked: read what the sink sent (the reader parks again or rearms)."""
        self._park = None
        if not (self._stopping or self._halted):
            self._on_wake()

    def unpark(self) -> None:
        """Woken per record again (loop thread; idempotent)."""
        if self._park is not None:
            self.rearm()

    def rearm(self) -> None:
        """Done reading for now: the next record (or one still there) wakes the loop again
        (a parked follower is parked no more)."""
        park, self._park = self._park, None
        if park is not None:
            park.cancel()
        with self._detach_lock:  # not while `halt` frees the notifier (the sink's stop)
            if not self._halted:
                ring_notifier_rearm(self._notifier)

    def halt(self) -> None:
        """End the waiting thread (idempotent): the loop is woken no more, and may still
        `read` what is left (a sink's last drain)."""
        with self._detach_lock:
            if self._halted:
                return
            self._halted = True
            self._finalizer.detach()
            ring_notifier_stop(self._notifier)  # joins it: it writes to the eventfd no more
        fd = self._fd
        loop = self.loop
        if loop.is_closed():
            os.close(fd)
        elif _running_loop() is loop:
            loop.remove_reader(fd)
            os.close(fd)
        else:
            try:
                loop.call_soon_threadsafe(_unwatch, loop, fd)
            except RuntimeError:  # closed meanwhile
                os.close(fd)

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


def _release(notifier: int, reader: RingReader, fd: int, lock: threading.Lock) -> None:
    """A dropped follower's end: its thread, then its eventfd and reader."""
    with lock:
        ring_notifier_stop(notifier)
    os.close(fd)
    reader.close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _unwatch(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    try:
        loop.remove_reader(fd)
    finally:
        os.close(fd)

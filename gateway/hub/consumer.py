"""One downstream consumer: a bounded queue on an event loop, its overflow policy, optional
conflation, and the counters the metrics read.

Everything here runs on the consumer's loop (the API thread); the engine thread never
touches a consumer. The router pushes each message into the queues of the consumers that
want it; a queue that is full either disconnects its consumer (`disconnect`, the default:
no silent loss) or drops its oldest message and owes the consumer a gap event with the
exact count (`drop_oldest`). A stalled consumer therefore costs the others nothing: its
queue stops growing at queue_size and then it is cut off or loses its own oldest messages.
A reader with a `direct_writer` is written to by the router at the end of its dispatch
while the reader waits in get() and the writer is ready: in order (only then is the queue
empty of older events), at most DIRECT_WRITE_MAX events, else its task is woken as usual.
A reader with a `sink` (gateway.hub.sink: /v1/stream's socket in the ring writer's C sink)
is armed whenever it waits with nothing queued and nothing unwritten: the ring's writer
then sends its frames itself, and the router only keeps what it routes to it (`_shadow`)
until the sink says it sent it; when the sink stops (a full socket buffer, a gap record)
or Python takes the stream back (`take_back`), delivery resumes here at the first record
the sink did not send, after the rest of a frame it sent in part.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from gateway.hub.events import OVERLOAD, QUEUE_FULL, Delivery, GapNotice, StreamEvent
from gateway.hub.protocol import (
    CLOSE_GOING_AWAY,
    CLOSE_NORMAL,
    CLOSE_POLICY_VIOLATION,
    CLOSE_SLOW_CONSUMER,
    CLOSE_TRY_AGAIN_LATER,
    overload_reason,
    slow_consumer_reason,
)

OverflowPolicy = Literal["disconnect", "drop_oldest"]
#: Why a consumer ended: the label of the disconnects metric.
DisconnectKind = Literal[
    "slow", "overload", "client", "shutdown", "error", "revoked", "deleted", "operator"
]
DEFAULT_QUEUE_SIZE = 4096
MAX_QUEUE_SIZE = 1_000_000
MAX_CONFLATION_MS = 60_000
#: At most this many events are written straight from the router's dispatch; a longer
#: backlog goes to the reader's task, which lets the loop's other streams run in between.
DIRECT_WRITE_MAX = 256
#: How soon a waiting stream looks again whether its connection's buffer drained (so the
#: stream sink may take it) when nothing else wakes it.
SINK_ARM_RETRY_S = 0.002
_consumer_ids = itertools.count(1)


class SinkLink(Protocol):
    """A reader's entry in the ring writer's stream sink (api.routes.stream's)."""

    def ready(self) -> bool:
        """Whether the connection holds nothing unwritten and is open (arming is exact)."""

    def arm(self, seq: int) -> bool:
        """Let the sink send from ring seq on; False when the ring already holds seq."""

    def state(self) -> tuple[int, ...]:
        """The sink's state of the socket (gateway.hub.sink ST_* fields)."""

    def disarm(self) -> tuple[int, ...]:
        """Take the socket back from the sink; its state after."""

    def write_rest(self, state: tuple[int, ...]) -> None:
        """Write the rest of a frame the sink sent in part, if any (before anything else)."""

    def detach(self) -> None:
        """Leave the sink for good (the connection ends)."""


class DirectWriter(Protocol):
    """A reader that can take events on the router's turn, without its task running: the
    stream's connection while it is writable (api.routes.stream)."""

    def ready(self) -> bool:
        """Whether a write now would go out at once (else the reader's task takes over)."""

    def write(self, events: list[StreamEvent]) -> None: ...


@dataclass(frozen=True)
class DeliveryOptions:
    """A subscription's delivery options (api.schemas.subscriptions has the same bounds)."""

    queue_size: int = DEFAULT_QUEUE_SIZE
    overflow: OverflowPolicy = "disconnect"
    conflation_ms: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.queue_size <= MAX_QUEUE_SIZE:
            raise ValueError(f"queue_size must be 1..{MAX_QUEUE_SIZE}, not {self.queue_size}")
        if self.overflow not in ("disconnect", "drop_oldest"):
            raise ValueError(
                f"overflow must be 'disconnect' or 'drop_oldest', not {self.overflow!r}"
            )
        if not 0 <= self.conflation_ms <= MAX_CONFLATION_MS:
            raise ValueError(
                f"conflation_ms must be 0..{MAX_CONFLATION_MS}, not {self.conflation_ms}"
            )


@dataclass
class ConsumerStats:
    """Counters of every stream opened under one consumer name (the metrics' label)."""

    name: str
    connected: int = 0
    opened: int = 0
    delivered: int = 0  # handed to the consumer's connection
    dropped: int = 0  # dropped by drop_oldest (queue full)
    overload: int = 0  # its loop fell behind the ring by this many (gap notices, cuts)
    conflated: int = 0  # replaced by a newer value of the same topic (conflation)
    disconnects: dict[str, int] = field(default_factory=dict)


class ConsumerClosed(Exception):
    """The consumer was ended: `code` and `reason` are what its connection should close
    with; `kind` says why (slow, overload, client, shutdown, error, revoked)."""

    def __init__(self, code: int, reason: str, kind: DisconnectKind) -> None:
        super().__init__(f"{kind}: {reason} ({code})")
        self.code = code
        self.reason = reason
        self.kind = kind


class Consumer:
    """A consumer of one session's topics (all of them when topics is None) on one loop.

    Read it with `await get()` (a list of Delivery and GapNotice, in order), which raises
    ConsumerClosed once it was cut off or closed; `close()` when the reader goes away.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        name: str,
        session_id: int,
        topics: frozenset[str] | None,
        options: DeliveryOptions,
        stats: ConsumerStats,
        on_close: Callable[[Consumer], None],
    ) -> None:
        self.loop = loop
        self.name = name
        self.session_id = session_id
        self.topics = topics
        self.options = options
        self.stats = stats
        #: This process's number for the consumer (the operator's force-close names it).
        self.id = next(_consumer_ids)
        self.opened_at = time.time()
        self.dropped = 0  # this consumer's share of stats.dropped
        self._on_close = on_close
        self.limit = options.queue_size
        self.drop_oldest = options.overflow == "drop_oldest"
        self.queue: deque[StreamEvent] = deque()
        self._waiter: asyncio.Future[None] | None = None
        #: Set by a reader that may be written to from the router's dispatch while its task
        #: waits in get(): the events then skip one turn of the loop (the task's wake-up).
        self.direct_writer: DirectWriter | None = None
        # The router's hook that defers a direct write to the end of its dispatch (so a
        # batch of records goes out in one write); it returns False outside a dispatch.
        self.defer_flush: Callable[[Consumer], bool] | None = None
        self._flush_deferred = False
        self._closed: ConsumerClosed | None = None
        self.ended: asyncio.Future[ConsumerClosed] = loop.create_future()
        # drop_oldest: messages dropped at the head since the reader last took, and the
        # session gap notices that were at the head meanwhile (never dropped).
        self._lost_at_head = 0
        self._notices_at_head: list[GapNotice] = []
        # conflation: the latest message per topic while an interval is open
        self._interval = options.conflation_ms / 1000.0
        self._latest: dict[str, Delivery] = {}
        self._window: asyncio.TimerHandle | None = None
        self.push = self._conflate if self._interval else self._push  # the router's entry
        #: The seq of the session's gap this consumer got as past on subscribing (if any).
        self.past_gap_seq: int | None = None
        #: The stream sink's socket (None: Python writes everything) and the router's next
        #: ring seq (everything before it was routed): what an arm needs.
        self.sink: SinkLink | None = None
        self.ring_next: Callable[[], int | None] | None = None
        #: The router's follower: its eventfd (the sink writes it when it stops sending
        #: here) and its unpark (Python takes the stream back): gateway.hub.follower's park.
        self.wake_fd = -1
        self.unpark: Callable[[], None] | None = None
        self.sink_armed = False
        self.sink_arms = 0  # times armed (tests and metrics)
        self.sink_takebacks = 0  # times Python disarmed it to write itself
        self.sink_stops: dict[int, int] = {}  # the sink's own stops, by reason (gateway.hub.sink)
        # While armed: what the router routed here and the sink may not have sent yet.
        self._shadow: deque[StreamEvent] = deque()
        # After the sink stopped: the first ring seq Python delivers (earlier ones went out).
        self._resume_seq: int | None = None
        self._arm_retry: asyncio.TimerHandle | None = None
        stats.connected += 1
        stats.opened += 1

    # ---- fed by the router (loop thread) ---------------------------------------------------
    def _push(self, item: Delivery) -> None:
        queue = self.queue
        if len(queue) < self.limit:
            queue.append(item)
            if self._waiter is not None:
                self._signal()
        else:
            self._full(item)

    def _full(self, item: Delivery) -> None:
        if not self.drop_oldest:
            self.cut(CLOSE_SLOW_CONSUMER, slow_consumer_reason(self.limit), "slow")
            return
        queue = self.queue
        while queue:
            head = queue.popleft()
            if type(head) is Delivery:
                self._lost_at_head += 1
                self.dropped += 1
                self.stats.dropped += 1
                break
            self._notices_at_head.append(head)  # type: ignore[arg-type]
        queue.append(item)
        if self._waiter is not None:
            self._signal()

    def _conflate(self, item: Delivery) -> None:
        if self._window is None:  # the first update after a quiet interval goes at once
            self._push(item)
            self._window = self.loop.call_later(self._interval, self._flush_window)
            return
        if item.topic in self._latest:
            self.stats.conflated += 1
        self._latest[item.topic] = item

    def _flush_window(self) -> None:
        latest = self._latest
        if not latest or self._closed is not None:
            self._window = None
            return
        self._latest = {}
        for item in sorted(latest.values(), key=_seq_of):
            self._push(item)
            if self._closed is not None:
                return
        self._window = self.loop.call_later(self._interval, self._flush_window)

    def push_gap(self, notice: GapNotice) -> None:
        """Gap notices are never dropped or conflated, and do not count against the bound."""
        if self.sink_armed or self._resume_seq is not None:
            if notice.seq is None:  # not a ring record: Python writes it, so it writes all
                self.take_back()
                self._resume_seq = None
                self.push = self._conflate if self._interval else self._push
            elif self.sink_armed:
                self._shadow_push(notice)
                return
            else:
                self._resume_push(notice)
                return
        self.queue.append(notice)
        if self._waiter is not None:
            self._signal()

    def overflowed(self, lost: int) -> None:
        """This loop fell `lost` messages behind the ring (of any stream on the loop: the
        ring cannot say whose), so some of this consumer's may never come."""
        self.stats.overload += lost
        if self.sink_armed or self._resume_seq is not None:
            self.take_back()  # some of what the sink sent may be among them: said as lost
            self._resume_seq = None
            self.push = self._conflate if self._interval else self._push
        if self.drop_oldest or self._interval:
            self.push_gap(GapNotice(self.session_id, lost, OVERLOAD))
        else:
            self.cut(CLOSE_TRY_AGAIN_LATER, overload_reason(lost), "overload")

    def _signal(self) -> None:
        """Something arrived for a reader that waits: written by the router at the end of
        its dispatch if the reader has a direct writer, else the reader's task is woken."""
        if self._flush_deferred:
            return
        defer = self.defer_flush
        if self.direct_writer is not None and defer is not None and defer(self):
            self._flush_deferred = True
            return
        self._wake()

    # ---- the stream sink (loop thread) ------------------------------------------------------
    def try_arm(self) -> None:
        """Hand the stream to the sink if everything routed here was written and the
        connection holds nothing: the sink sends from the router's next seq on."""
        sink = self.sink
        if (
            sink is None
            or self.sink_armed
            or self._resume_seq is not None
            or self._closed is not None
            or self.queue
            or self._latest
            or self._lost_at_head
            or self._notices_at_head
            or self.ring_next is None
        ):
            return
        if not sink.ready():  # its transport still writes: look again once it may not
            if self._arm_retry is None:
                self._arm_retry = self.loop.call_later(SINK_ARM_RETRY_S, self._retry_arm)
            return
        seq = self.ring_next()
        if seq is None or not sink.arm(seq):
            return
        self.sink_armed = True
        self.sink_arms += 1
        self.push = self._shadow_push

    def _retry_arm(self) -> None:
        self._arm_retry = None
        if self._waiter is not None:  # else its task runs and tries on its next wait
            self.try_arm()

    def _shadow_push(self, item: StreamEvent) -> None:
        """Armed: keep it until the sink says it went out (settled after the dispatch)."""
        self._shadow.append(item)
        if self._flush_deferred:
            return
        defer = self.defer_flush
        if defer is not None and defer(self):
            self._flush_deferred = True
        else:
            self.settle()

    def settle(self) -> None:
        """Drop what the sink sent from the shadow; if the sink stopped, resume here."""
        sink = self.sink
        if not self.sink_armed or sink is None:
            return
        state = sink.state()
        if state[0]:  # armed: it sent everything before its next seq
            upto = state[1]
            shadow = self._shadow
            while shadow and shadow[0].seq < upto:  # type: ignore[operator]
                if type(shadow.popleft()) is Delivery:
                    self.stats.delivered += 1
            return
        self._release(state)

    def take_back(self) -> None:
        """Python writes next (a control frame, a close, a notice): disarm first."""
        sink = self.sink
        if self.sink_armed and sink is not None:
            self.sink_takebacks += 1
            self._release(sink.disarm())

    def _release(self, state: tuple[int, ...]) -> None:
        """The sink stopped at state's next seq: the rest of its partial frame goes first,
        then every record from that seq on, through the queue."""
        assert self.sink is not None
        self.sink_armed = False
        if self.unpark is not None:  # the router routes here again, record by record
            self.unpark()
        reason = state[3]
        self.sink_stops[reason] = self.sink_stops.get(reason, 0) + 1
        self.sink.write_rest(state)
        self._resume_seq = state[1]
        self.push = self._resume_push
        shadow, self._shadow = self._shadow, deque()
        for item in shadow:
            self._resume_push(item)

    def _resume_push(self, item: StreamEvent) -> None:
        """Records before the resume seq went out through the sink; the first at or after
        it ends the resume and everything flows through the queue again."""
        resume = self._resume_seq
        if resume is not None and item.seq is not None and item.seq < resume:
            if type(item) is Delivery:
                self.stats.delivered += 1
            return
        self._resume_seq = None
        self.push = self._conflate if self._interval else self._push
        if type(item) is Delivery:
            self.push(item)
        else:
            self.push_gap(item)  # type: ignore[arg-type]

    def detach_sink(self) -> None:
        """The connection ends (or will be written by Python alone): leave the sink."""
        sink = self.sink
        if sink is None:
            return
        self.take_back()
        self.sink = None
        sink.detach()

    def flush(self) -> None:
        """The router's end of dispatch: write what is queued straight to the reader if it
        still waits and can take it now; else wake its task (which writes it in order)."""
        self._flush_deferred = False
        if self.sink_armed:
            self.settle()
            return
        waiter = self._waiter
        if waiter is None or waiter.done() or self._closed is not None:
            return  # the task runs already (it takes the queue) or the consumer ended
        writer = self.direct_writer
        if writer is None or self.lag > DIRECT_WRITE_MAX or not writer.ready():
            self._wake()
            return
        events = self.poll(DIRECT_WRITE_MAX)
        if events:
            writer.write(events)
            self.try_arm()

    def _wake(self) -> None:
        waiter = self._waiter
        self._waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ---- read by the connection (loop thread) -----------------------------------------------
    @property
    def lag(self) -> int:
        """Messages waiting for this consumer (queue plus conflated values)."""
        return len(self.queue) + len(self._latest)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def poll(self, max_items: int = 256) -> list[StreamEvent]:
        """What is there now (raises ConsumerClosed once closed)."""
        if self._closed is not None:
            raise self._closed
        out: list[StreamEvent] = []
        if self._notices_at_head:
            out += self._notices_at_head
            self._notices_at_head = []
        if self._lost_at_head:
            out.append(GapNotice(self.session_id, self._lost_at_head, QUEUE_FULL))
            self._lost_at_head = 0
        queue = self.queue
        take = min(max_items, len(queue))
        if take:
            pop = queue.popleft
            out += [pop() for _ in range(take)]
            self.stats.delivered += take
        return out

    async def get(self, max_items: int = 256) -> list[StreamEvent]:
        """The next events, waiting for some; raises ConsumerClosed once closed."""
        while True:
            events = self.poll(max_items)
            if events:
                return events
            self.try_arm()
            waiter = self._waiter = self.loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    # ---- ending ---------------------------------------------------------------------------
    def cut(self, code: int, reason: str, kind: DisconnectKind) -> None:
        """End the consumer (idempotent): its queue is discarded, get() raises."""
        if self._closed is not None:
            return
        closed = self._closed = ConsumerClosed(code, reason, kind)
        if self._arm_retry is not None:
            self._arm_retry.cancel()
            self._arm_retry = None
        if self.sink is not None:
            self.sink_armed = False  # what the sink holds no longer matters
            self.sink.detach()
            self.sink = None
        self._shadow.clear()
        self.queue.clear()
        self._latest.clear()
        if self._window is not None:
            self._window.cancel()
            self._window = None
        stats = self.stats
        stats.connected -= 1
        stats.disconnects[kind] = stats.disconnects.get(kind, 0) + 1
        self._on_close(self)
        self._wake()
        if not self.ended.done():
            self.ended.set_result(closed)

    def close(self) -> None:
        """The reader went away (the client closed or disconnected)."""
        self.cut(CLOSE_NORMAL, "closed by the consumer", "client")

    def force_close(self, operator: str) -> None:
        """An operator closed the stream (any thread): 1008 with a reason naming them."""
        reason = f"closed by operator {operator!r}"
        self.loop.call_soon_threadsafe(self.cut, CLOSE_POLICY_VIOLATION, reason, "operator")

    def shutdown(self) -> None:
        self.cut(CLOSE_GOING_AWAY, "gateway shutting down", "shutdown")

    def __repr__(self) -> str:
        topics = "*" if self.topics is None else ",".join(sorted(self.topics))
        return (
            f"<Consumer {self.name} session={self.session_id} topics={topics} "
            f"lag={self.lag} closed={self.closed}>"
        )


def _seq_of(item: Delivery) -> int:
    return item.seq

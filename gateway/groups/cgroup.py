"""A running feed group arbitrated in C (issue #19): the same contract as
gateway.groups.feed.FeedGroup (the Python path, which stays the reference), with the
arbiter, the message identity and the ring writes in C (dataplane.arbiter.CGroup).

Where it runs: a group whose dialect has a C identity (dataplane.arbiter.has_c_identity:
Binance, Bybit, OKX, Coinbase) and whose sink is a hub with a ring. Its legs' C feeds join
the group (GroupRouter.feed_group, UpstreamSession._attach_feed), so on a DPDK engine a
leg's frame goes from the flow's bytes through the C identity and the group's arbiter to the
ring inside the engine's poll, with no Python per message. Frames the read loops carry (a
kernel leg, a frame C could not tell, bytes before the feed armed) come here in batches and
go to the same C group, one call per frame: C identity first, Python's identity where C
cannot tell (a kind C does not cover), the leg-0 pass-through for frames with no exchange
id, as on the Python path. One arbiter thus sees every frame of every leg, each leg in its
order.

Holes expire in C at every offer once their deadline passed (inside the arbiter, after that
offer's own arrival counted), and on a timer here (every half hold time) when the legs are
silent; a leg with unread input holds a due hole for it (asked in C): a kernel leg's socket
that still holds unread bytes (FIONREAD; leg_input), or a batch a read loop is offering
frame by frame here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from dataplane.arbiter import CGroup
from dataplane.ring import RingWriter
from gateway.dialects.identity import HASH, Identity, identity_for
from gateway.groups.figures import DownGaps, leg_figures
from gateway.groups.handover import Successor
from gateway.hub.events import GapEvent
from gateway.hub.names import RING_GAP_TOPIC
from gateway.sessions.sink import MessageSink, Published

log = logging.getLogger("wsgw.groups")


def c_group_sink(sink: MessageSink) -> tuple[RingWriter, Callable[[int, str], int]] | None:
    """The ring and topic registration a C group writes through, None where the sink
    offers none (then the group runs on the Python path)."""
    ring = getattr(sink, "ring", None)
    register = getattr(sink, "ring_topic_id", None)
    if not isinstance(ring, RingWriter) or ring.closed or not callable(register):
        return None
    return ring, register


class CFeedGroup:
    """One group's C arbiter; legs may call from several threads (C locks the group)."""

    def __init__(
        self,
        spec: Any,
        sink: MessageSink,
        loop: asyncio.AbstractEventLoop | None,
        floors: dict[str, int] | None,
        *,
        hub_id: int,
        max_keys: int,
    ) -> None:
        found = c_group_sink(sink)
        if found is None:
            raise ValueError("a C feed group needs a hub with a ring")
        ring, self._register = found
        self.spec = spec
        self.hub_id = hub_id
        self.path = "c"
        self._sink = sink
        self._loop = loop
        self._identity = identity_for(spec.dialect)
        self._leg_of = {sid: leg for leg, sid in enumerate(spec.legs)}
        self._topic_ids: dict[str, int] = {}
        self._lock = threading.Lock()  # the Python-side counters and the timer
        self._closed = False
        self.successor = Successor()  # where batches that come after close go (set_group)
        self._timer: asyncio.TimerHandle | None = None
        self._floors = dict(floors or {})
        self._final_last: dict[str, int] | None = None
        self.passed_topics: set[str] = set()  # as FeedGroup's
        self._down_gaps = DownGaps()
        self.group = CGroup(
            ring.handle,
            hub_id=hub_id,
            gap_topic_id=ring.register_topic(RING_GAP_TOPIC),
            dialect=spec.dialect,
            legs=len(spec.legs),
            hold_ns=spec.hold_ms * 1_000_000,
            max_keys=max_keys,
            epoch=str(getattr(sink, "epoch_hex", "") or ""),
            tap_ids=spec.legs if getattr(spec, "tap", False) else (),
        )
        for topic, last in self._floors.items():
            self.group.floor(topic, last)
        self.passed_through = 0
        self.dropped_unidentified = 0
        self.leg_gaps = [0] * len(spec.legs)
        # C writes the group's `$gap` records: the hub asks it for the last one (a
        # /v1/stream consumer that subscribes later gets it as a past gap).
        self._gap_source = getattr(sink, "gap_source", None)
        if callable(self._gap_source):
            self._gap_source(hub_id, self.last_gap)
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._tick)

    # ---- legs' calls (any thread) ------------------------------------------------------
    def offer(self, messages: Sequence[Published]) -> None:
        """A leg's batch the read loop carried: every frame to the C group, in order."""
        leg = self._leg_of[messages[0][0]]
        group, identity, hub_id = self.group, self._identity, self.hub_id
        loose: list[Published] = []
        # One C call a frame: meanwhile the engine's leg may give holes up, and the rest of
        # this batch (stamped when it was read, maybe longer than the hold ago) is this
        # leg's unread input.
        late: Sequence[Published] = ()
        group.set_leg_busy(leg, True)
        try:
            for i, (_, topic, raw, ts, _) in enumerate(messages):
                data = bytes(raw)
                topic_id = self._topic_id(topic)
                if topic_id and group.offer(leg, topic_id, topic, data, ts):
                    continue
                if self._closed:  # refused because closed: the rest is the successor's
                    late = messages[i:]
                    break
                found = identity(data)
                if (
                    topic_id
                    and type(found) is Identity
                    and found.kind != HASH
                    and group.offer_identity(
                        leg, topic_id, topic, (found.topic, found.id, found.prev), data, ts
                    )
                ):
                    continue
                if type(found) is Identity and found.kind != HASH:
                    log.debug("group %d: %s not arbitrated (keys full?)", self.spec.id, topic)
                loose.append((hub_id, topic, raw, ts, None))
                self.passed_topics.add(topic)
        finally:
            group.set_leg_busy(leg, False)
        if loose:
            if leg == 0:
                self.passed_through += len(loose)
                self._sink.publish_batch(loose)
            else:
                self.dropped_unidentified += len(loose)
        if late:
            self.successor.forward(late)

    def leg_gap(
        self, session_id: int, lost: int | None, reason: str, *, stopped: bool = False
    ) -> None:
        """A leg lost messages (reconnect, went down): holes no longer wait for it; C marks
        it live again at its next frame."""
        leg = self._leg_of[session_id]
        with self._lock:
            if self._closed:
                return
            self._down_gaps.leg_down(leg, stopped)
            if not self.group.stats()["leg_live"][leg]:
                return  # already down: one reset tells several state changes
            self.leg_gaps[leg] += 1  # counts up -> down only
        self.group.set_live(leg, False, time.time_ns())
        stats = self.group.stats()  # C marks a leg live at its next frame, Python down
        with self._lock:
            told = self._down_gaps.reason(  # as FeedGroup's
                leg,
                not any(stats["leg_live"]),
                stats["delivered"] + self.passed_through,
                bool(self.passed_topics),
                reason,
            )
        if told is not None:
            self._sink.publish_gap(self.hub_id, lost if told[1] else None, told[0])

    def restart(self, topic: str) -> int:
        """As FeedGroup.restart, in C (wsgw_group_restart)."""
        return 0 if self._closed else self.group.restart(topic)

    def leg_input(self, session_id: int, fd: int) -> None:
        """The leg's kernel socket (-1: none, or closed): while it holds unread bytes, a
        hole that is due waits for the leg (C asks FIONREAD; wsgw_group_set_leg_fd)."""
        self.group.set_leg_fd(self._leg_of[session_id], fd)

    def leg_queued(self, session_id: int, queued: bool) -> None:
        """The leg's connection holds frames read from its socket, not offered yet: they
        hold a due hole as the socket's bytes do (wsgw_group_set_leg_queued)."""
        self.group.set_leg_queued(self._leg_of[session_id], queued)

    def _topic_id(self, topic: str) -> int:
        """The ring topic id of the group's topic (0: the ring's table is full)."""
        topic_id = self._topic_ids.get(topic)
        if topic_id is None:
            topic_id = self._topic_ids[topic] = int(self._register(self.hub_id, topic))
        return topic_id

    # ---- the timer (the runtime's loop) ------------------------------------------------
    def expire(self, now_ns: int | None = None) -> None:
        self.group.expire(now_ns if now_ns is not None else time.time_ns())

    def _tick(self) -> None:
        """Holes of silent legs expire here (busy legs expire them in C)."""
        if self._closed or self._loop is None:
            return
        deadline = self.group.deadline
        if deadline is not None and deadline <= time.time_ns():
            self.expire()
        self._timer = self._loop.call_later(max(self.spec.hold_ms, 2) / 2000, self._tick)

    # ---- figures -----------------------------------------------------------------------
    def last_gap(self) -> GapEvent | None:
        """The last `$gap` record C wrote for the group, as the hub remembers its own."""
        found = self.group.last_gap()
        if found is None:
            return None
        seq, body = found
        fields = orjson.loads(body)
        lost = fields.get("lost")
        return GapEvent(
            seq,
            self.hub_id,
            lost if isinstance(lost, int) else None,
            str(fields.get("reason", "")),
            int(fields.get("ts_ns", 0)),
            fields.get("epoch"),
        )

    def last_delivered(self) -> dict[str, int]:
        """Per identity topic, the last id delivered (the floors of the group's next form)."""
        if self._final_last is not None:
            return dict(self._final_last)
        return {**self._floors, **self.group.last_delivered()}

    def figures(self, leg_states: Callable[[int], str] | None = None) -> dict[str, Any]:
        """As FeedGroup.figures, from the C group's counters."""
        states = [leg_states(sid) if leg_states else None for sid in self.spec.legs]
        group = self.group
        stats = group.stats()
        totals = group.totals()
        legs = []
        for leg, sid in enumerate(self.spec.legs):
            legs.append(
                leg_figures(
                    group,
                    leg,
                    sid,
                    live=stats["leg_live"][leg],
                    downs=self.leg_gaps[leg],
                    messages=stats["leg_messages"][leg],
                    newest_id=stats["leg_newest"][leg],
                    state=states[leg],
                )
            )
        offers = stats["offers"]
        return {
            "hub_id": self.hub_id,
            "path": "c",
            "delivered": stats["delivered"],
            "gaps": stats["gaps"],
            "lost": stats["lost"],
            "passed_through": self.passed_through,
            "dropped_unidentified": self.dropped_unidentified,
            "below_floor": stats["below_floor"],
            "duplicates": int(totals.duplicates),
            "held": int(totals.held),
            # on the engine's path: C identity + lock + arbiter + staging of one frame (the
            # median of the timed ones; a message costs two frames: its copies on two legs)
            "arbitration_ns_per_frame": group.cost_p50(),
            "engine_offers": offers,
            # due holes a kernel leg's unread socket bytes held (each such leg asked)
            "unread_waits": stats["unread_waits"],
            "python_offers": stats["python_offers"],
            "legs": legs,
        }

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            timer, self._timer = self._timer, None
        self.group.refuse()  # final: what it delivered stays what it is
        if callable(self._gap_source):
            self._gap_source(self.hub_id, None)  # the hub keeps the last one
        self._final_last = {**self._floors, **self.group.last_delivered()}
        self.group.close()
        if timer is not None and self._loop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(timer.cancel)

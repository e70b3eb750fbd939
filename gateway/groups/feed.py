"""A running feed group (issue #19): its legs' batches through one C arbiter, the winners
published to the hub as the group's own stream.

Naming: a group publishes under the hub session id `GROUP_HUB_BASE + group_id` (group 3 is
hub session 1073741827), so its ring topics are `1073741827:btcusdt@trade`, its NATS
subjects `<prefix>.1073741827.<token>` and its gaps `$gap` records of that session: every
reader the hub already has (ring client topic patterns, /v1/stream, NATS) reads a group
as it reads a session, and no session id (below 2**30 in practice: ids are 32-bit and
never reused) can take one of these.

Per batch of a leg: one identity parse per frame (gateway.dialects.identity), one
`CArbiter.offer_many` for the batch, one `publish_batch` per run of winners. The arbiter's
key is a per-group index of the identity's topic. Frames without an exchange id (NoIdentity,
or the HASH kind: a content hash has no order to arbitrate by) pass through from leg 0
only, after the batch's winners: a group of generic-dialect legs is leg 0's stream.

This is the Python path, the reference: groups whose dialect has a C identity and whose sink
is a hub with a ring run on gateway.groups.cgroup.CFeedGroup instead (arbitration in C, on the
engine's path for DPDK legs), unless the router is told `c_path=False`.

A leg on a kernel socket tells its group that socket (GroupRouter.leg_input, from the
session): while the socket holds unread bytes (FIONREAD), a hole that is due waits for that
leg, its read loop being late (the arbiter's `unread` probe; in C for CFeedGroup). So do the
frames its connection already read from the socket and queued, not offered yet
(GroupRouter.leg_queued): FIONREAD no longer counts them, and a loaded machine may hold the
session thread off the CPU right after such a read (the failover bench's false losses with
`unread_waits` 0: the probe found the socket just emptied).

A leg's gap (it reconnected) marks it down in the arbiter, so holes no longer wait for it;
its next batch marks it live again. The last live leg going down for a failure is a gap of
the group (every leg down: unlinked topics would lose silently), and leg 0 going down is one
when frames have passed through (no exchange id): no other leg can fill what it loses of
them (DownGaps). A `Lost` is published as a gap of the group with the missing count. Holes
that no leg fills expire at the next offer past their deadline (the arbiter does it, once
that offer's own arrival counted) and on a timer on the runtime's loop.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import logging
import termios
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dataplane.arbiter import CArbiter, Delivered, Lost, Output, has_c_identity
from gateway.dialects.identity import HASH, Identity, identity_for
from gateway.groups.cgroup import CFeedGroup, c_group_sink
from gateway.groups.figures import DownGaps, leg_figures
from gateway.groups.handover import Successor
from gateway.sessions.sink import MessageSink, Published

log = logging.getLogger("wsgw.groups")

#: Hub session ids of groups start here (module docstring).
GROUP_HUB_BASE = 1 << 30
#: Topic keys (identity topics) a group arbitrates at most; more pass through from leg 0.
MAX_GROUP_TOPICS = 4096
DEFAULT_HOLD_MS = 20


def socket_unread(fd: int) -> bool:
    """Whether the kernel socket `fd` holds bytes not read yet (FIONREAD); False when it
    cannot tell (closed)."""
    if fd < 0:
        return False
    count = array.array("i", [0])
    try:
        fcntl.ioctl(fd, termios.FIONREAD, count, True)
    except OSError:
        return False
    return count[0] > 0


def group_hub_id(group_id: int) -> int:
    """The hub session id a group publishes under."""
    return GROUP_HUB_BASE + group_id


@dataclass(frozen=True)
class GroupSpec:
    """What the runtime needs to run a group: legs are session ids, leg i at index i."""

    id: int
    name: str
    legs: tuple[int, ...]
    dialect: str
    hold_ms: int = DEFAULT_HOLD_MS
    path: str = "auto"  # "auto": in C where it can be (GroupRouter), "python": the reference
    #: Also publish every copy each leg brought, as it arrived, under the leg's own session
    #: id (a measuring aid: each leg's send -> arrival beside the group's; off in service)
    tap: bool = False


@dataclass
class GroupCounters:
    delivered: int = 0
    gaps: int = 0
    lost: int = 0
    passed_through: int = 0  # no identity: from leg 0
    below_floor: int = 0  # copies of what the group's previous form delivered
    dropped_unidentified: int = 0  # no identity: from another leg
    leg_gaps: list[int] = field(default_factory=list)
    leg_messages: list[int] = field(default_factory=list)  # arrivals with an identity
    leg_newest: list[int | None] = field(default_factory=list)  # id of the newest arrival


class FeedGroup:
    """One group's arbiter and what it publishes; legs may call from several threads."""

    def __init__(
        self,
        spec: GroupSpec,
        sink: MessageSink,
        loop: asyncio.AbstractEventLoop | None = None,
        floors: dict[str, int] | None = None,
    ) -> None:
        """floors: per identity topic, the last id a previous form of this group delivered
        (a change runs a fresh arbiter): copies up to it are duplicates, not news."""
        self.spec = spec
        self.hub_id = group_hub_id(spec.id)
        self.path = "python"
        self._sink = sink
        self._loop = loop
        self._identity = identity_for(spec.dialect)
        self._leg_fd = [-1] * len(spec.legs)  # each leg's kernel socket (leg_input)
        self._leg_queued = [False] * len(spec.legs)  # frames read, not offered (leg_queued)
        self._arbiter = CArbiter(
            len(spec.legs),
            hold_ns=spec.hold_ms * 1_000_000,
            max_topics=MAX_GROUP_TOPICS,
            unread=self._unread,
        )
        self._leg_of = {sid: leg for leg, sid in enumerate(spec.legs)}
        self._keys: dict[str, int] = {}
        self._key_topics: list[str] = []
        self._key_names: list[str] = []  # the identity topic of each key
        self._last: list[int | None] = []  # the last id delivered, per key
        self._floors = dict(floors or {})
        self.passed_topics: set[str] = set()  # topics of frames passed through (no exchange id)
        self._down: set[int] = set()
        self._down_gaps = DownGaps()
        self._lock = threading.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._asked_at: int | None = None
        self._closed = False
        self.successor = Successor()  # where batches that come after close go (set_group)
        legs = len(spec.legs)
        self.counters = GroupCounters(
            leg_gaps=[0] * legs, leg_messages=[0] * legs, leg_newest=[None] * legs
        )

    # ---- legs' calls (any thread) ------------------------------------------------------
    def offer(self, messages: Sequence[Published]) -> None:
        """A leg's batch (all of one session): the winners out, in order."""
        leg = self._leg_of[messages[0][0]]
        identity = self._identity
        keys, floors = self._keys, self._floors
        arrivals: list[tuple[int, int, int, int | None, bytes, int]] = []
        loose: list[Published] = []
        below_floor = 0
        tapped: list[Published] = []
        tap = tapped.append if self.spec.tap else _not_tapped
        for sid, topic, raw, ts, _ in messages:
            found = identity(raw)
            if type(found) is Identity and found.kind != HASH:
                if floors and found.id <= floors.get(found.topic, -1):
                    below_floor += 1
                    continue
                key = keys.get(found.topic)
                if key is None:
                    key = self._new_key(found.topic, topic)
                if key is not None:
                    arrivals.append((leg, key, found.id, found.prev, bytes(raw), ts))
                    tap((sid, topic, raw, ts, None))
                    continue
            loose.append((self.hub_id, topic, raw, ts, None))
            self.passed_topics.add(topic)
        with self._lock:
            closed = self._closed
            if not closed:
                self._take(leg, messages[0][3], arrivals, below_floor, tapped, loose)
        if closed:
            self.successor.forward(messages)

    def _take(
        self,
        leg: int,
        first_ts: int,
        arrivals: list[tuple[int, int, int, int | None, bytes, int]],
        below_floor: int,
        tapped: list[Published],
        loose: list[Published],
    ) -> None:
        """Under the lock, the group open: a leg's identified batch through the arbiter."""
        outputs: list[Output] = []
        self.counters.below_floor += below_floor
        if leg in self._down:
            self._down.discard(leg)
            outputs += self._arbiter.set_live(leg, True, first_ts)
        if arrivals:
            self.counters.leg_messages[leg] += len(arrivals)
            self.counters.leg_newest[leg] = arrivals[-1][2]
            outputs += self._arbiter.offer_many(arrivals)
        if tapped:
            self._sink.publish_batch(tapped)
        self._emit(outputs)
        if loose:
            if leg == 0:
                self.counters.passed_through += len(loose)
                self._sink.publish_batch(loose)
            else:
                self.counters.dropped_unidentified += len(loose)
        self._ask_timer()

    def leg_gap(
        self, session_id: int, lost: int | None, reason: str, *, stopped: bool = False
    ) -> None:
        """A leg lost messages (reconnect, sequence break): holes no longer wait for it."""
        leg = self._leg_of[session_id]
        with self._lock:
            if self._closed:
                return
            self._down_gaps.leg_down(leg, stopped)
            if leg in self._down:
                return  # already down: one reset tells several state changes
            self.counters.leg_gaps[leg] += 1  # counts up -> down only
            self._down.add(leg)
            self._emit(self._arbiter.set_live(leg, False, time.time_ns()))
            counters = self.counters
            told = self._down_gaps.reason(
                leg,
                len(self._down) == len(self.spec.legs),
                counters.delivered + counters.passed_through,
                bool(self.passed_topics),
                reason,
            )
            if told is not None:
                self._sink.publish_gap(self.hub_id, lost if told[1] else None, told[0])
            self._ask_timer()

    def restart(self, topic: str) -> int:
        """A book of the group's stream on `topic` resubscribes: its linked keys restart at
        their next unlinked message, the venue's snapshot (Arbiter.restart), and their
        floors go (the arbiter's own `last` is past them). How many keys restarted."""
        restarted = 0
        with self._lock:
            if self._closed:
                return 0
            for key, key_topic in enumerate(self._key_topics):
                if key_topic == topic and self._arbiter.restart(key):
                    self._floors.pop(self._key_names[key], None)
                    restarted += 1
        return restarted

    def leg_input(self, session_id: int, fd: int) -> None:
        """The leg's kernel socket (-1: none, or closed): its unread bytes hold holes."""
        self._leg_fd[self._leg_of[session_id]] = fd

    def leg_queued(self, session_id: int, queued: bool) -> None:
        """The leg's connection holds frames read from its socket, not offered yet: they
        hold holes as the socket's bytes do."""
        self._leg_queued[self._leg_of[session_id]] = queued

    def _unread(self, leg: int) -> bool:
        """The arbiter's probe (under the lock, only when a hole is due)."""
        return self._leg_queued[leg] or socket_unread(self._leg_fd[leg])

    # ---- the timer (the runtime's loop) ------------------------------------------------
    def expire(self, now_ns: int | None = None) -> None:
        with self._lock:
            if self._closed:
                return
            self._emit(self._arbiter.expire(now_ns if now_ns is not None else time.time_ns()))
            self._asked_at = None
            self._ask_timer()

    def _ask_timer(self) -> None:
        """Under the lock: have `expire` run when the arbiter's deadline comes."""
        deadline = self._arbiter.deadline
        if deadline is None or deadline == self._asked_at or self._loop is None:
            return
        self._asked_at = deadline
        with contextlib.suppress(RuntimeError):  # a closed loop: the runtime is going away
            self._loop.call_soon_threadsafe(self._arm, deadline)

    def _arm(self, deadline: int) -> None:
        if self._closed:
            return
        if self._timer is not None:
            if self._timer_at is not None and self._timer_at <= deadline:
                return  # an earlier timer runs expire, which asks again
            self._timer.cancel()
        assert self._loop is not None
        delay = max(0.0, (deadline - time.time_ns()) / 1e9)
        self._timer_at = deadline
        self._timer = self._loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_at = None
        self.expire()

    # ---- internals ---------------------------------------------------------------------
    def _new_key(self, identity_topic: str, topic: str) -> int | None:
        with self._lock:
            key = self._keys.get(identity_topic)
            if key is None and len(self._key_topics) < MAX_GROUP_TOPICS:
                key = len(self._key_topics)
                self._key_topics.append(topic)
                self._key_names.append(identity_topic)
                self._last.append(None)
                self._keys[identity_topic] = key
            return key

    def _emit(self, outputs: list[Output]) -> None:
        """Under the lock: runs of winners in one publish_batch each, a gap between."""
        if not outputs:
            return
        hub_id, topics, sink, last = self.hub_id, self._key_topics, self._sink, self._last
        run: list[Published] = []
        for out in outputs:
            if type(out) is Delivered:
                last[out.key] = out.this
                run.append((hub_id, topics[out.key], out.payload, out.arrived_ns, out.this))
                continue
            assert isinstance(out, Lost)
            if run:
                self._publish(run)
                run = []
            self.counters.gaps += 1
            self.counters.lost += out.missing or 0
            reason = f"lost on every leg: {topics[out.key]} after {out.after}, before {out.before}"
            sink.publish_gap(hub_id, out.missing, reason)
        if run:
            self._publish(run)

    def _publish(self, run: list[Published]) -> None:
        self.counters.delivered += len(run)
        try:
            self._sink.publish_batch(run)
        except Exception:  # the hub's bug must not take the legs down with it
            log.exception("group %d: the sink refused a batch of %d", self.spec.id, len(run))

    def last_delivered(self) -> dict[str, int]:
        """Per identity topic, the last id delivered (the floors of the group's next form)."""
        with self._lock:
            floors = dict(self._floors)
            for name, last in zip(self._key_names, self._last, strict=True):
                if last is not None:
                    floors[name] = last
            return floors

    # ---- figures -----------------------------------------------------------------------
    def figures(self, leg_states: Callable[[int], str] | None = None) -> dict[str, Any]:
        """The group's and each leg's figures (won, late, lag p50/p99 in ns, state)."""
        # The states first: leg_states takes the runtime's lock, which is held while it
        # calls into a group (set_group), so never under this group's lock.
        states = [leg_states(sid) if leg_states else None for sid in self.spec.legs]
        with self._lock:
            if self._closed:
                return {"legs": [], "held": 0, "duplicates": 0, **vars(self.counters)}
            arbiter = self._arbiter
            live = arbiter.live
            legs = []
            for leg, sid in enumerate(self.spec.legs):
                legs.append(
                    leg_figures(
                        arbiter,
                        leg,
                        sid,
                        live=live[leg],
                        downs=self.counters.leg_gaps[leg],
                        messages=self.counters.leg_messages[leg],
                        newest_id=self.counters.leg_newest[leg],
                        state=states[leg],
                    )
                )
            return {
                "hub_id": self.hub_id,
                "path": "python",
                "delivered": self.counters.delivered,
                "gaps": self.counters.gaps,
                "lost": self.counters.lost,
                "passed_through": self.counters.passed_through,
                "dropped_unidentified": self.counters.dropped_unidentified,
                "duplicates": arbiter.duplicates,
                "held": arbiter.held,
                "legs": legs,
            }

    def close(self) -> None:
        with self._lock:
            self._closed = True
            timer, self._timer = self._timer, None
            self._arbiter.close()
        if timer is not None and self._loop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(timer.cancel)


def _not_tapped(_: Published) -> None:
    """A group without GroupSpec.tap publishes no leg's copies."""


AnyGroup = FeedGroup | CFeedGroup


class GroupRouter:
    """The sink sessions publish to: a leg's batches go to its group, the rest to the hub.
    One dict look-up per batch (every message of a batch is of one session)."""

    def __init__(
        self,
        sink: MessageSink,
        loop: asyncio.AbstractEventLoop | None = None,
        *,
        c_path: bool = True,
    ) -> None:
        """c_path: run groups in C where they can (gateway.groups.cgroup); False: every group
        on the Python path (the reference)."""
        self._sink = sink
        self._loop = loop
        self._c_path = c_path
        self._by_leg: dict[int, AnyGroup] = {}
        self.groups: dict[int, AnyGroup] = {}
        self._leg_fds: dict[int, int] = {}  # session id -> its kernel socket (leg_input)

    def is_leg(self, session_id: int) -> bool:
        return session_id in self._by_leg

    def is_c_leg(self, session_id: int) -> bool:
        """A leg of a group arbitrated in C: its C feed may carry it (feed_group)."""
        group = self._by_leg.get(session_id)
        return isinstance(group, CFeedGroup)

    def feed_group(self, session_id: int) -> tuple[int, int] | None:
        """For a C-arbitrated group's leg: (the C group's handle, the leg's index), which its
        C feed joins (UpstreamSession._attach_feed); None for any other session."""
        group = self._by_leg.get(session_id)
        if not isinstance(group, CFeedGroup) or not group.group.handle:
            return None
        return group.group.handle, group.spec.legs.index(session_id)

    # What a session asks its sink for the C feed path (UpstreamSession._attach_feed): the
    # hub's ring and topic ids. A session that is no leg writes its messages there in C,
    # past this router, as it would with the hub as its sink. A leg of a group arbitrated
    # in C takes that path too, through its group (feed_group; its topics are the group's);
    # legs of groups on the Python path never do.
    @property
    def ring(self) -> object:
        return getattr(self._sink, "ring", None)

    @property
    def ring_topic_id(self) -> Callable[[int, str], int] | None:
        register = getattr(self._sink, "ring_topic_id", None)
        if not callable(register):
            return None

        def topic_id(session_id: int, topic: str) -> int:
            """A C group's leg's topics are the group's (its C feed writes winners there)."""
            group = self._by_leg.get(session_id)
            if isinstance(group, CFeedGroup):
                return int(register(group.hub_id, topic))
            return int(register(session_id, topic))

        return topic_id

    def set_group(self, spec: GroupSpec) -> AnyGroup:
        """Run the group; a change replaces its previous form with a fresh arbiter that
        starts where the old one left off (nothing delivered twice)."""
        old = self.groups.get(spec.id)
        floors = None
        if old is not None:
            # Closed first, so what it delivered is final; a leg's batch that reaches it
            # in the instant before the swap below is dropped (a change is rare).
            old.close()
            floors = old.last_delivered()
        group = self._new_group(spec, floors)
        if old is not None:
            for sid in old.spec.legs:
                if self._by_leg.get(sid) is old:
                    del self._by_leg[sid]
        self.groups[spec.id] = group
        for sid in spec.legs:
            self._by_leg[sid] = group
            if sid in self._leg_fds:
                group.leg_input(sid, self._leg_fds[sid])
        if old is not None:
            old.successor.name(group)  # batches that reached the old form after its close
        return group

    def _new_group(self, spec: GroupSpec, floors: dict[str, int] | None) -> AnyGroup:
        if (
            self._c_path
            and spec.path != "python"
            and has_c_identity(spec.dialect)
            and c_group_sink(self._sink)
        ):
            return CFeedGroup(
                spec,
                self._sink,
                self._loop,
                floors,
                hub_id=group_hub_id(spec.id),
                max_keys=MAX_GROUP_TOPICS,
            )
        return FeedGroup(spec, self._sink, self._loop, floors)

    def remove_group(self, group_id: int) -> None:
        group = self.groups.pop(group_id, None)
        if group is None:
            return
        for sid in group.spec.legs:
            if self._by_leg.get(sid) is group:
                del self._by_leg[sid]
        group.close()
        group.successor.name(None)  # removed: late batches go nowhere, as the legs' do

    def leg_input(self, session_id: int, fd: int) -> None:
        """A session's kernel socket (-1: it closes): a leg's unread bytes hold its group's
        holes (module doc). Kept for a group that takes the session as a leg later."""
        if fd < 0:
            self._leg_fds.pop(session_id, None)
        else:
            self._leg_fds[session_id] = fd
        group = self._by_leg.get(session_id)
        if group is not None:
            group.leg_input(session_id, fd)

    def leg_queued(self, session_id: int, queued: bool) -> None:
        """A session's connection holds frames it read and has not offered (True) or none:
        for a leg, unread input as its socket's bytes are (module doc)."""
        group = self._by_leg.get(session_id)
        if group is not None:
            group.leg_queued(session_id, queued)

    def resync(self, session_id: int, topic: str) -> int:
        """A book of a leg's topic resubscribes (a checksum mismatch, any reason): the
        session whose resubscribe brings the venue's snapshot into the group's stream. Its
        own, once the group restarted the topic's keys (FeedGroup.restart); leg 0 where the
        topic's frames carry no exchange id, since those pass through from leg 0 only and
        another leg's snapshot would be dropped; the session itself for no leg."""
        group = self._by_leg.get(session_id)
        if group is None or group.restart(topic) or topic not in group.passed_topics:
            return session_id
        return group.spec.legs[0]

    def leg_down(self, session_id: int, reason: str, *, stopped: bool = False) -> None:
        """A leg left streaming (backoff, stopped, failed): holes stop waiting for it.
        stopped: it was stopped, not lost (DownGaps)."""
        group = self._by_leg.get(session_id)
        if group is not None:
            group.leg_gap(session_id, None, reason, stopped=stopped)

    def publish_batch(self, messages: Sequence[Published]) -> object:
        if messages:
            group = self._by_leg.get(messages[0][0])
            if group is not None:
                group.offer(messages)
                return None
        return self._sink.publish_batch(messages)

    def publish_gap(self, session_id: int, lost: int | None, reason: str) -> object:
        group = self._by_leg.get(session_id)
        if group is not None:
            group.leg_gap(session_id, lost, reason)
            return None
        return self._sink.publish_gap(session_id, lost, reason)

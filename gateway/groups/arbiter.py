"""A/B arbitration of a feed group: two or more legs (upstream connections) carry the same
stream; the first copy of each message wins, later copies are dropped, and a message is lost
only when every leg missed it (issue #19). Sans-IO: the caller passes each arrival and the
time, and calls `expire` when `deadline` comes; nothing here reads a clock or a socket.

A message's identity is the exchange's own sequence, per topic key (gateway.dialects.identity
gives it): `this` (its sequence number, or the last id of the range it covers) and `prev` (the
`this` of the message before it on that topic: an exchange that links messages, as OKX's
prevSeqId, Binance depth `U - 1`, contiguous trade ids `t - 1`; None when the exchange gives
no link, then only the order is known, not the gaps).

Per topic key, linked messages (prev given):
- `prev == last` (the last delivered): delivered at once, then whatever was held and now
  follows it;
- `this <= last`: a copy of a delivered message (or an older one): dropped, and the leg's lag
  behind the winner is sampled (its copy's arrival minus the winner's);
- otherwise the message is ahead of a hole: held. The hole is a loss once every live leg
  has gone past it (each leg's newest `this` > last: none of them will bring it), or once it
  is due: `hold_ns` after it opened, and `hold_ns` after the newest arrival (on any topic) of
  any live leg that has not gone past it yet. A leg that brought anything within the hold is
  moving, only further behind than the hold: the hole waits for it (a hold shorter than a
  leg's lag would otherwise declare losses that leg was about to fill); a leg silent for the
  hold (stalled, dead before it was told down) is not waited for. Silence is told on the
  arrivals' own stamps: an offer counts its own leg's arrival before it gives up the holes
  due at its stamp (a leg whose frames waited unread while the gateway stalled is not silent:
  the failover bench's false losses were declared by the very frame of the leg they waited
  for, its first after an engine stall), and when no leg arrived for longer than the hold
  (the gateway, or the whole feed, stalled: both legs' frames come late, in bursts, one
  leg's burst first) every leg gets the hold afresh from that arrival. `max_hold_ns` after it
  opened, the hole is due whatever: a leg that is slow forever cannot stall the stream.
  Before a hole that is due goes, the caller's `unread` probe is asked about each live leg
  that has not gone past it: a leg that still has input the caller has not offered (bytes in
  its socket: its reader runs late, as a Python read loop does on a loaded machine while the
  engine's leg keeps arriving) is counted as arriving now, so the hole waits another hold
  for it (within max_hold_ns); the failover bench's false losses after session 10 were
  holes given up while the kernel leg's socket held the missing message unread.
  Then a `Lost` (first missing, count where the link tells it) and the held messages go out
  in order.

Unlinked messages (prev None) are delivered when `this > last` and dropped otherwise (no gap
can be told). The first message of a key sets where the stream starts (nothing before it
is a loss). After a loss on a key, its next unlinked message (a venue's snapshot, as a
resubscribe brings it: OKX `books`) restarts the key even when `this <= last`: the group's
consumers lost the stream there, and a book of it recovers only from a snapshot (issue #21).
So does a key the caller `restart`s: a book of the group's stream found wrong for another
reason (a checksum mismatch, a break the book saw and the group did not) resubscribes, and
the venue's snapshot of what the group has delivered is news to it, not a copy. Only keys of
linked messages (books) restart: an unlinked stream (trades) has no snapshot to restart
from, and a copy of one of its messages would go out twice.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

#: How long a message may wait for a hole before it to be filled by another leg.
DEFAULT_HOLD_NS = 20_000_000
#: How long a hole may wait at most, even for a leg that keeps moving. 10 s: a leg that far
#: behind is as good as gone (the simulator drops a connection whose backlog passes 100k
#: messages, 10 s at 10k msg/s, as exchanges drop slow consumers). It was 1 s: the 10-minute
#: failover run on a loaded machine (legs seconds behind the winner, still moving) gave
#: 254,497 messages up as lost that a leg brought later.
DEFAULT_MAX_HOLD_NS = 10_000_000_000
#: Messages held per topic at most: beyond it the oldest hole is declared lost at once. Enough
#: for max_hold at 10k msg/s on one topic (it was 4096: 1.6 s at 2.5k msg/s, a bound as
#: binding as the 1 s max_hold was); C bounds the held bytes with its arena besides.
DEFAULT_MAX_HELD = 1 << 17
#: Lag samples kept per leg (a ring: the latest ones).
LAG_SAMPLES = 1024

P = TypeVar("P")


class Delivered(NamedTuple):
    """A message that won: the first copy of it any leg brought."""

    key: Hashable
    this: int
    payload: object
    leg: int
    arrived_ns: int


class Lost(NamedTuple):
    """Messages no leg brought: on `key`, the ids after `after` (the last delivered) up to
    the `prev` of `before` (the first delivered after the hole). missing: the ids lost
    (messages, where each message takes one id), None where messages are not linked."""

    key: Hashable
    after: int
    before: int
    missing: int | None


Output = Delivered | Lost


@dataclass
class LegStats:
    """What one leg did: messages it won (first copy), copies it brought late, its lag
    behind the winner on those (ns samples, the latest LAG_SAMPLES), and its newest id."""

    won: int = 0
    late: int = 0
    lag_ns: list[int] = field(default_factory=list)
    _lag_at: int = 0

    def sample(self, lag_ns: int) -> None:
        if len(self.lag_ns) < LAG_SAMPLES:
            self.lag_ns.append(lag_ns)
        else:
            self.lag_ns[self._lag_at] = lag_ns
            self._lag_at = (self._lag_at + 1) % LAG_SAMPLES

    def lag_percentile(self, q: float) -> int | None:
        """The q-th percentile (0..100) of the lag samples, None without samples."""
        if not self.lag_ns:
            return None
        ordered = sorted(self.lag_ns)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


@dataclass
class _Topic(Generic[P]):
    last: int  # the `this` of the last message delivered
    won_ns: dict[int, int] = field(default_factory=dict)  # this -> winner's arrival (recent)
    held: list[tuple[int, int, int, P, int, int]] = field(default_factory=list)
    # heap of (this, prev, leg, payload, arrived_ns, tiebreak)
    hole_since: int | None = None  # when the oldest hole opened (ns)
    newest: dict[int, int] = field(default_factory=dict)  # leg -> its newest `this` here
    after_loss: bool = False  # a loss was declared (or a restart asked); no unlinked since
    linked: bool = False  # a linked message (prev given) arrived: a book's key, not trades'


class Arbiter(Generic[P]):
    """First copy wins across `legs` legs, per topic key (module doc)."""

    def __init__(
        self,
        legs: int,
        *,
        hold_ns: int = DEFAULT_HOLD_NS,
        max_held: int = DEFAULT_MAX_HELD,
        won_window: int = 8192,
        max_hold_ns: int = DEFAULT_MAX_HOLD_NS,
        unread: Callable[[int], bool] | None = None,
    ) -> None:
        """unread: whether a leg still has input not offered yet (module doc); asked only
        when a hole is due, of the legs it may wait for. None: no leg ever has."""
        if legs < 1:
            raise ValueError(f"a feed group has at least 1 leg, not {legs}")
        if hold_ns < 0 or max_held < 1:
            raise ValueError("hold_ns must be >= 0 and max_held >= 1")
        self.legs = legs
        self.hold_ns = hold_ns
        self.max_hold_ns = max(hold_ns, max_hold_ns)  # never shorter than the hold
        self.max_held = max_held
        self.won_window = won_window
        self.stats = [LegStats() for _ in range(legs)]
        self.live = [True] * legs
        self.arrived_ns: list[int | None] = [None] * legs  # each leg's newest arrival, any topic
        self.newest_arrival_ns: int | None = None  # the newest arrival of any leg
        self.lost_total = 0
        self.duplicates = 0
        self._topics: dict[Hashable, _Topic[P]] = {}
        self._tiebreak = 0
        self._unread = unread

    # ---- input --------------------------------------------------------------------------
    def offer(
        self, leg: int, key: Hashable, this: int, prev: int | None, payload: P, now_ns: int
    ) -> list[Output]:
        """One arrival on `leg`; what goes out because of it, in order: first the holes due
        at its stamp (module doc: as the timer would have had them, but with this arrival
        counted), then the message itself."""
        newest = self.newest_arrival_ns
        if newest is not None and now_ns - newest > self.hold_ns:
            # No leg arrived for longer than the hold: the gateway (or the whole feed) was
            # stalled, not one leg silent. Every leg is given the hold afresh from here, so
            # that the leg whose backlog is read second is not given up on.
            self.arrived_ns = [now_ns if at is not None else None for at in self.arrived_ns]
        if newest is None or now_ns > newest:
            self.newest_arrival_ns = now_ns
        self.arrived_ns[leg] = now_ns
        out: list[Output] = self.expire(now_ns) if self._held_anywhere() else []
        out += self._arbitrate(leg, key, this, prev, payload, now_ns)
        return out

    def _arbitrate(
        self, leg: int, key: Hashable, this: int, prev: int | None, payload: P, now_ns: int
    ) -> list[Output]:
        topic = self._topics.get(key)
        if topic is None:  # the stream starts here
            topic = self._topics[key] = _Topic(last=this - 1 if prev is None else prev)
        newest = topic.newest.get(leg)
        if newest is None or this > newest:
            topic.newest[leg] = this
        if prev is not None:
            topic.linked = True
        if this <= topic.last and prev is None and topic.after_loss:
            topic.last, topic.won_ns = this - 1, {}  # a snapshot after a loss: start afresh
        if this <= topic.last:
            self._late(leg, topic, this, now_ns)
            return []
        if prev is None or prev == topic.last:
            if prev is None:
                topic.after_loss = False
            out: list[Output] = [self._deliver(key, topic, this, payload, leg, now_ns)]
            self._release(key, topic, out)
            return out
        if any(h[0] == this for h in topic.held):  # a copy of a held one
            self._late(leg, topic, this, now_ns)
        else:
            entry = (this, prev, leg, payload, now_ns, self._next_tiebreak())
            heapq.heappush(topic.held, entry)
            if topic.hole_since is None:
                topic.hole_since = now_ns
        out = []
        if len(topic.held) > self.max_held or self._every_live_leg_passed(topic):
            self._declare_hole(key, topic, out)
        return out

    def restart(self, key: Hashable) -> bool:
        """The key's next unlinked message (the snapshot a resubscribe brings) restarts it,
        as after a loss (module doc). False, and nothing changes, for a key that never
        arrived or whose messages are not linked."""
        topic = self._topics.get(key)
        if topic is None or not topic.linked:
            return False
        topic.after_loss = True
        return True

    def set_live(self, leg: int, live: bool, now_ns: int) -> list[Output]:
        """A leg went down (or came back): a down leg is not waited for."""
        self.live[leg] = live
        out: list[Output] = []
        if not live:
            for key, topic in self._topics.items():
                if topic.held and self._every_live_leg_passed(topic):
                    self._declare_hole(key, topic, out)
        return out

    def expire(self, now_ns: int) -> list[Output]:
        """Holes that are due (module doc) are losses: what they held goes out."""
        out: list[Output] = []
        for key, topic in self._topics.items():
            while (due := self._due(topic)) is not None and now_ns >= due:
                if self._unread_waits(topic, now_ns):
                    break
                self._declare_hole(key, topic, out)
        return out

    @property
    def deadline(self) -> int | None:
        """When `expire` may have work (ns, the caller's clock), None while nothing is held.
        A moving leg pushes it later: calling expire early does nothing."""
        dues = [due for t in self._topics.values() if (due := self._due(t)) is not None]
        return min(dues) if dues else None

    # ---- steps --------------------------------------------------------------------------
    def _deliver(
        self, key: Hashable, topic: _Topic[P], this: int, payload: P, leg: int, now_ns: int
    ) -> Delivered:
        topic.last = this
        won = topic.won_ns
        won[this] = now_ns
        while len(won) > self.won_window:  # keep the recent ones (dicts keep order)
            del won[next(iter(won))]
        self.stats[leg].won += 1
        return Delivered(key, this, payload, leg, now_ns)

    def _release(self, key: Hashable, topic: _Topic[P], out: list[Output]) -> None:
        """Deliver the held messages that now follow the last one; drop held copies."""
        held = topic.held
        while held and (held[0][0] <= topic.last or held[0][1] == topic.last):
            this, _, leg, payload, arrived, _ = heapq.heappop(held)
            if this <= topic.last:  # a copy held while the hole was open
                self._late(leg, topic, this, arrived)
                continue
            out.append(self._deliver(key, topic, this, payload, leg, arrived))
        topic.hole_since = held[0][4] if held else None

    def _declare_hole(self, key: Hashable, topic: _Topic[P], out: list[Output]) -> None:
        """The oldest hole is a loss: report it, deliver the next held message and what
        follows it."""
        this, prev, leg, payload, arrived, _ = heapq.heappop(topic.held)
        missing = prev - topic.last if prev is not None else None
        out.append(Lost(key, topic.last, this, missing))
        topic.after_loss = True
        self.lost_total += missing or 0
        out.append(self._deliver(key, topic, this, payload, leg, arrived))
        self._release(key, topic, out)

    def _late(self, leg: int, topic: _Topic[P], this: int, now_ns: int) -> None:
        self.duplicates += 1
        stats = self.stats[leg]
        stats.late += 1
        won = topic.won_ns.get(this)
        if won is not None:
            stats.sample(now_ns - won)

    def _due(self, topic: _Topic[P]) -> int | None:
        """When the topic's oldest hole is a loss unless filled: hold_ns after it opened and
        after the newest arrival of each live leg that may still fill it, at most
        max_hold_ns after it opened. None without a hole."""
        since = topic.hole_since
        if since is None:
            return None
        due = since + self.hold_ns
        last = topic.last
        for leg in range(self.legs):
            arrived = self.arrived_ns[leg]
            if arrived is None or not self.live[leg] or topic.newest.get(leg, last) > last:
                continue
            due = max(due, arrived + self.hold_ns)
        return min(due, since + self.max_hold_ns)

    def _unread_waits(self, topic: _Topic[P], now_ns: int) -> bool:
        """Whether the due hole waits for a live leg that has not gone past it and still has
        unread input (the probe): each such leg counts as arriving at now_ns, so the hole is
        due a hold later. Never from max_hold_ns after the hole opened."""
        probe = self._unread
        since = topic.hole_since
        if probe is None or since is None or now_ns >= since + self.max_hold_ns:
            return False
        waits = False
        last = topic.last
        for leg in range(self.legs):
            if self.live[leg] and topic.newest.get(leg, last) <= last and probe(leg):
                self.arrived_ns[leg] = now_ns
                waits = True
        return waits

    def _every_live_leg_passed(self, topic: _Topic[P]) -> bool:
        """Whether no live leg can still bring the message after `last`: each one has
        already brought something past it, and a leg delivers in order, so it skipped it
        (had it brought it, it would have been delivered)."""
        last = topic.last
        return all(topic.newest.get(leg, last) > last for leg in range(self.legs) if self.live[leg])

    def _held_anywhere(self) -> bool:
        return any(topic.hole_since is not None for topic in self._topics.values())

    def _next_tiebreak(self) -> int:
        self._tiebreak += 1
        return self._tiebreak

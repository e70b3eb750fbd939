"""A/B arbitration in C (dataplane/shim/arbiter.c): the same rules, method names and outputs
as the Python reference, gateway.groups.arbiter.Arbiter (issue #19), for topic keys that are
small integers (ring topic ids) and bytes payloads.

The engine's per-message path calls the C arbiter from C; this wrapper is for tests and
benchmarks, and for Python callers that have a batch: `offer_many` takes a list of arrivals
and pays one ctypes call for all of them. The output tuples mirror the reference's fields
(dataplane does not import gateway, so they are defined here).
"""

from __future__ import annotations

import ctypes
import errno
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, NamedTuple

from dataplane.closing import Closing
from dataplane.shim import ARB_DELIVERED as DELIVERED
from dataplane.shim import ARB_LAG_SAMPLES as LAG_SAMPLES
from dataplane.shim import ARB_MAX_LEGS as MAX_LEGS
from dataplane.shim import ARB_NO_MISSING as NO_MISSING
from dataplane.shim import ARB_NO_PREV as NO_PREV
from dataplane.shim import (
    ARB_OUT_FORMAT,
    ArbLegStats,
    ArbOut,
    ArbTotals,
    GroupBinding,
    GroupConf,
    IdentityStruct,
    identity_dialect_code,
)
from dataplane.shim import ARB_UNREAD_FN as _UNREAD_FN
from dataplane.shim import IDENTITY_NO_PREV as _ID_NO_PREV
from dataplane.shim import IDENTITY_SEQUENCE as _ID_SEQUENCE
from dataplane.shim import arbiter_library as lib
from dataplane.shim import identity_scan as _identity_scan

#: As the reference's defaults (gateway.groups.arbiter).
DEFAULT_HOLD_NS = 20_000_000
DEFAULT_MAX_HOLD_NS = 10_000_000_000  # as wsgw_arbiter.h's WSGW_ARB_DEFAULT_MAX_HOLD_NS
DEFAULT_MAX_HELD = 1 << 17  # as gateway.groups.arbiter's (why there)
DEFAULT_WON_WINDOW = 8192
DEFAULT_MAX_TOPICS = 1024
#: Held payloads at most, every topic: beyond it the oldest hole is declared lost.
DEFAULT_ARENA_BYTES = 64 << 20

__all__ = [
    "DEFAULT_ARENA_BYTES",
    "DEFAULT_HOLD_NS",
    "DEFAULT_MAX_HELD",
    "LAG_SAMPLES",
    "MAX_LEGS",
    "Arrival",
    "CArbiter",
    "CGroup",
    "CIdentity",
    "CIdentityResult",
    "Delivered",
    "LegStats",
    "Lost",
    "Output",
]

_OUT_SIZE = ctypes.sizeof(ArbOut)
_UNPACK = ARB_OUT_FORMAT


class Delivered(NamedTuple):
    """A message that won: the first copy of it any leg brought."""

    key: int
    this: int
    payload: bytes
    leg: int
    arrived_ns: int


class Lost(NamedTuple):
    """Ids no leg brought on `key`: after `after` up to the prev of `before`."""

    key: int
    after: int
    before: int
    missing: int | None


Output = Delivered | Lost
#: One arrival for offer_many: (leg, key, this, prev, payload, now_ns), offer's arguments.
Arrival = tuple[int, int, int, int | None, bytes, int]


@dataclass
class LegStats:
    """A snapshot of one leg's figures (the reference's LegStats fields)."""

    won: int = 0
    late: int = 0
    lag_ns: list[int] = field(default_factory=list)

    def lag_percentile(self, q: float) -> int | None:
        """The q-th percentile (0..100) of the lag samples, None without samples."""
        if not self.lag_ns:
            return None
        ordered = sorted(self.lag_ns)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def _check(rc: int, what: str) -> int:
    if rc >= 0:
        return rc
    if rc == -errno.ENOMEM:
        raise MemoryError(f"arbiter: {what}: out of memory")
    raise ValueError(f"arbiter: {what}: {errno.errorcode.get(-rc, rc)}")


class CArbiter(Closing):
    """First copy wins across `legs` legs, per topic key 0..max_topics-1 (module doc)."""

    def __init__(
        self,
        legs: int,
        *,
        hold_ns: int = DEFAULT_HOLD_NS,
        max_held: int = DEFAULT_MAX_HELD,
        won_window: int = DEFAULT_WON_WINDOW,
        max_topics: int = DEFAULT_MAX_TOPICS,
        arena_bytes: int = DEFAULT_ARENA_BYTES,
        max_hold_ns: int = DEFAULT_MAX_HOLD_NS,
        unread: Callable[[int], bool] | None = None,
    ) -> None:
        """unread: the reference's probe of a leg's input not offered yet (called from C)."""
        if not 1 <= legs <= MAX_LEGS:
            raise ValueError(f"a feed group has 1..{MAX_LEGS} legs, not {legs}")
        if hold_ns < 0 or max_held < 1:
            raise ValueError("hold_ns must be >= 0 and max_held >= 1")
        self._handle: int | None = None
        self._lib: Any = lib()
        handle = ctypes.c_void_p()
        _check(
            self._lib.wsgw_arb_create(
                legs, hold_ns, max_held, max_topics, won_window, arena_bytes, ctypes.byref(handle)
            ),
            "create",
        )
        self._handle = handle.value
        _check(self._lib.wsgw_arb_set_max_hold(self._handle, max_hold_ns), "max hold")
        self._unread = None  # the C callback, kept alive while C may call it
        if unread is not None:
            self._unread = _UNREAD_FN(lambda _ctx, leg: int(bool(unread(leg))))
            self._lib.wsgw_arb_set_unread_probe(self._handle, self._unread, None)
        self.legs = legs
        self.hold_ns = hold_ns
        self.max_hold_ns = max(hold_ns, max_hold_ns)
        self.max_held = max_held
        self.won_window = won_window
        self.max_topics = max_topics
        self.arena_bytes = arena_bytes

    # ---- lifetime -----------------------------------------------------------------------
    def close(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self._lib.wsgw_arb_destroy(self._handle)
            self._handle = None

    def __del__(self) -> None:
        self.close()

    @property
    def _h(self) -> int:
        if self._handle is None:
            raise ValueError("arbiter is closed")
        return self._handle

    # ---- input --------------------------------------------------------------------------
    def offer(
        self, leg: int, key: int, this: int, prev: int | None, payload: bytes, now_ns: int
    ) -> list[Output]:
        """One arrival on `leg`; what goes out because of it, in order."""
        rc = self._lib.wsgw_arb_offer(
            self._h,
            leg,
            key,
            this,
            NO_PREV if prev is None else prev,
            payload,
            len(payload),
            now_ns,
        )
        return self._outputs(_check(rc, "offer"), (payload,))

    def offer_many(self, arrivals: Sequence[Arrival]) -> list[Output]:
        """Arrivals in order, (leg, key, this, prev, payload, now_ns) each: every output of
        them, in order, from one C call."""
        if not arrivals:
            return []
        legs, keys, thises, prevs, payloads, nows = zip(*arrivals, strict=True)
        leg_col = array("I", legs)
        key_col = array("I", keys)
        this_col = array("q", thises)
        prev_col = array("q", [NO_PREV if p is None else p for p in prevs])
        now_col = array("q", nows)
        offsets = array("I", [0])
        offsets.extend(accumulate(map(len, payloads)))
        rc = self._lib.wsgw_arb_offer_columns(
            self._h,
            len(arrivals),
            leg_col.buffer_info()[0],
            key_col.buffer_info()[0],
            this_col.buffer_info()[0],
            prev_col.buffer_info()[0],
            now_col.buffer_info()[0],
            b"".join(payloads),
            offsets.buffer_info()[0],
        )
        return self._outputs(_check(rc, "offer_many"), payloads)

    def set_live(self, leg: int, live: bool, now_ns: int) -> list[Output]:
        """A leg went down (or came back): a down leg is not waited for."""
        rc = self._lib.wsgw_arb_set_live(self._h, leg, int(live), now_ns)
        return self._outputs(_check(rc, "set_live"), ())

    def restart(self, key: int) -> bool:
        """The key's next unlinked message restarts it, as after a loss; False for a key
        never seen or not linked (gateway.groups.arbiter.Arbiter.restart)."""
        return _check(self._lib.wsgw_arb_restart(self._h, key), "restart") == 1

    def expire(self, now_ns: int) -> list[Output]:
        """Holes that are due (a moving leg is waited for) are losses."""
        return self._outputs(_check(self._lib.wsgw_arb_expire(self._h, now_ns), "expire"), ())

    @property
    def deadline(self) -> int | None:
        """When `expire` has work (ns, the caller's clock), None while nothing is held."""
        at = ctypes.c_int64()
        return at.value if self._lib.wsgw_arb_deadline(self._h, ctypes.byref(at)) else None

    def _outputs(self, count: int, payloads: Sequence[bytes]) -> list[Output]:
        if not count:
            return []
        raw = ctypes.string_at(self._lib.wsgw_arb_outputs(self._h), count * _OUT_SIZE)
        out: list[Output] = []
        for (
            kind,
            key,
            this,
            after,
            missing,
            arrived,
            ptr,
            length,
            src,
            leg,
            _,
        ) in _UNPACK.iter_unpack(raw):
            if kind == DELIVERED:
                if src >= 0:
                    payload = payloads[src]
                else:
                    payload = ctypes.string_at(ptr, length) if length else b""
                out.append(Delivered(key, this, payload, leg, arrived))
            else:
                out.append(Lost(key, after, this, None if missing == NO_MISSING else missing))
        return out

    # ---- figures ------------------------------------------------------------------------
    def leg_stats(self, leg: int) -> LegStats:
        raw = ArbLegStats()
        _check(self._lib.wsgw_arb_leg_stats(self._h, leg, ctypes.byref(raw)), "leg_stats")
        samples = array("q", bytes(8 * LAG_SAMPLES))
        n = _check(
            self._lib.wsgw_arb_lag_samples(self._h, leg, samples.buffer_info()[0], LAG_SAMPLES),
            "lag_samples",
        )
        return LegStats(won=int(raw.won), late=int(raw.late), lag_ns=samples[:n].tolist())

    def lag_percentile(self, leg: int, q: float) -> int | None:
        """The q-th percentile (0..100) of the leg's lag samples, in C; None without any."""
        ns = ctypes.c_int64()
        found = _check(
            self._lib.wsgw_arb_lag_percentile(self._h, leg, q, ctypes.byref(ns)), "percentile"
        )
        return ns.value if found else None

    @property
    def stats(self) -> list[LegStats]:
        """Each leg's figures now (a snapshot, not live objects)."""
        return [self.leg_stats(leg) for leg in range(self.legs)]

    @property
    def live(self) -> list[bool]:
        raw = ArbLegStats()
        result = []
        for leg in range(self.legs):
            self._lib.wsgw_arb_leg_stats(self._h, leg, ctypes.byref(raw))
            result.append(bool(raw.live))
        return result

    def totals(self) -> ArbTotals:
        raw = ArbTotals()
        self._lib.wsgw_arb_totals(self._h, ctypes.byref(raw))
        return raw

    @property
    def lost_total(self) -> int:
        return int(self.totals().lost)

    @property
    def duplicates(self) -> int:
        return int(self.totals().duplicates)

    @property
    def held(self) -> int:
        """Messages held now, every topic."""
        return int(self.totals().held)


# ---- message identity and feed groups in C (wsgw_identity.h, wsgw_feed.h) ---------------
class CIdentityResult(NamedTuple):
    """What C tells of a frame: gateway.dialects.identity.Identity's fields (kind "seq" or
    "id"; prev None where the exchange links nothing)."""

    topic: str
    id: int
    kind: str
    prev: int | None


class CIdentity:
    """The C identity of one dialect: `ident(raw)` is a CIdentityResult, or None where C
    does not tell (the Python identity decides). For tests and measurements: the engine's
    path calls it from C."""

    def __init__(self, dialect: str) -> None:
        self.code = identity_dialect_code(dialect)
        if not self.code:
            raise ValueError(f"no C identity for the {dialect!r} dialect")
        self._out = IdentityStruct()

    def __call__(self, raw: bytes) -> CIdentityResult | None:
        out = self._out
        if not _identity_scan(self.code, raw, out):
            return None
        prev = None if out.prev == _ID_NO_PREV else int(out.prev)
        kind = "seq" if out.kind == _ID_SEQUENCE else "id"
        return CIdentityResult(out.topic[: out.topic_len].decode(), int(out.this_id), kind, prev)


def has_c_identity(dialect: str) -> bool:
    """Whether C tells the identity of some of this dialect's frames."""
    return identity_dialect_code(dialect) != 0


class CGroup(Closing):
    """A feed group's arbiter in C, shared by its legs' C feeds (CFeed.join_group) and by
    Python's offers of the frames the read loops carry: winners and gaps are written to the
    ring by C under the group's hub session id (dataplane/shim/wsgw_feed.h)."""

    def __init__(
        self,
        ring_handle: int,
        *,
        hub_id: int,
        gap_topic_id: int,
        dialect: str,
        legs: int,
        hold_ns: int = DEFAULT_HOLD_NS,
        max_held: int = DEFAULT_MAX_HELD,
        max_keys: int = DEFAULT_MAX_TOPICS,
        arena_bytes: int = DEFAULT_ARENA_BYTES,
        epoch: str = "",
        tap_ids: Sequence[int] = (),
    ) -> None:
        """tap_ids: per leg, a session id to publish that leg's copies under as they arrived
        (wsgw_feed.h's tap_ids; none by default)."""
        if not 1 <= legs <= MAX_LEGS:
            raise ValueError(f"a feed group has 1..{MAX_LEGS} legs, not {legs}")
        if len(tap_ids) > legs:
            raise ValueError(f"{len(tap_ids)} tap ids for {legs} legs")
        conf = GroupConf(
            ring=ring_handle,
            hub_id=hub_id,
            gap_topic_id=gap_topic_id,
            dialect=identity_dialect_code(dialect),
            legs=legs,
            hold_ns=hold_ns,
            max_held=max_held,
            max_keys=max_keys,
            arena_bytes=arena_bytes,
            epoch=epoch.encode()[:23],
            tap_ids=(ctypes.c_uint32 * MAX_LEGS)(*tap_ids),
        )
        self.legs = legs
        self.max_keys = max_keys
        self._binding = GroupBinding(conf)
        self._ident = IdentityStruct()

    @property
    def handle(self) -> int:
        return self._binding.handle

    def refuse(self) -> None:
        """Refuse further frames (a joined feed's go to Python, which has a new group)."""
        self._binding.close()

    def close(self) -> None:
        """Refuse further frames and drop this reference (joined feeds hold theirs)."""
        self._binding.release()

    def __del__(self) -> None:
        self.close()

    def offer(self, leg: int, topic_id: int, topic: str, raw: bytes, ts_ns: int) -> bool:
        """A frame of `leg` the read loop carries: True when C identified and took it."""
        return self._binding.offer(leg, topic_id, topic.encode(), raw, ts_ns) > 0

    def offer_staged(self, leg: int, topic_id: int, topic: str, raw: bytes, ts_ns: int) -> bool:
        """As the engine's feed offers (timed in C): winners wait for `flush`."""
        return self._binding.offer_staged(leg, topic_id, topic.encode(), raw, ts_ns) > 0

    def flush(self) -> None:
        self._binding.flush()

    def cost_p50(self) -> int | None:
        """Median ns of an engine offer (C identity, lock, arbiter, staging), of the latest
        timed ones; None before any. The median: a preempted sample says nothing of C."""
        samples = sorted(self._binding.cost_samples())
        return samples[len(samples) // 2] if samples else None

    def offer_identity(
        self,
        leg: int,
        topic_id: int,
        topic: str,
        identity: tuple[str, int, int | None],
        raw: bytes,
        ts_ns: int,
    ) -> bool:
        """A frame whose identity (topic, id, prev) Python found: True when taken."""
        ident = self._ident
        name = identity[0].encode()[:128]
        ident.topic = name
        ident.topic_len = len(name)
        ident.this_id = identity[1]
        ident.prev = _ID_NO_PREV if identity[2] is None else identity[2]
        ident.kind = _ID_SEQUENCE
        return self._binding.offer_identity(leg, topic_id, topic.encode(), ident, raw, ts_ns) > 0

    def floor(self, identity_topic: str, last: int) -> None:
        self._binding.floor(identity_topic.encode(), last)

    def restart(self, topic: str) -> int:
        """A book of the group's stream on `topic` (the legs' topic name) resubscribes: its
        linked keys restart at their next unlinked message (wsgw_group_restart). How many."""
        return self._binding.restart(topic.encode())

    def set_live(self, leg: int, live: bool, now_ns: int) -> None:
        self._binding.set_live(leg, live, now_ns)

    def set_leg_fd(self, leg: int, fd: int) -> None:
        """The leg's kernel socket (-1: none): its unread bytes hold a due hole for it
        (wsgw_group_set_leg_fd). Cleared by the caller before the socket closes."""
        self._binding.set_leg_fd(leg, fd)

    def set_leg_busy(self, leg: int, busy: bool) -> None:
        """The leg's read loop is offering a batch (True) or done: the rest of the batch
        counts as unread input meanwhile (wsgw_group_set_leg_busy)."""
        self._binding.set_leg_busy(leg, busy)

    def set_leg_queued(self, leg: int, queued: bool) -> None:
        """The leg's reader holds frames read from its socket, not offered yet (True), or
        none: they count as unread input (wsgw_group_set_leg_queued)."""
        self._binding.set_leg_queued(leg, queued)

    def expire(self, now_ns: int) -> None:
        self._binding.expire(now_ns)

    @property
    def deadline(self) -> int | None:
        return self._binding.deadline()

    def stats(self) -> dict[str, Any]:
        raw = self._binding.stats()
        legs = range(self.legs)
        return {
            "delivered": int(raw.delivered),
            "gaps": int(raw.gaps),
            "lost": int(raw.lost),
            "below_floor": int(raw.below_floor),
            "not_told": int(raw.not_told),
            "ring_errors": int(raw.ring_errors),
            "offers": int(raw.offers),
            "offer_ns": int(raw.offer_ns),
            "python_offers": int(raw.python_offers),
            "unread_waits": int(raw.unread_waits),
            "leg_messages": [int(raw.leg_messages[i]) for i in legs],
            "leg_newest": [int(raw.leg_newest[i]) if raw.leg_messages[i] else None for i in legs],
            "leg_live": [bool(raw.leg_live[i]) for i in legs],
        }

    def leg_stats(self, leg: int) -> LegStats:
        raw = self._binding.leg_stats(leg)
        return LegStats(won=int(raw.won), late=int(raw.late))

    def lag_percentile(self, leg: int, q: float) -> int | None:
        return self._binding.lag_percentile(leg, q)

    def totals(self) -> ArbTotals:
        return self._binding.totals()

    def last_delivered(self) -> dict[str, int]:
        return self._binding.last(self.max_keys)

    def last_gap(self) -> tuple[int, bytes] | None:
        """The last `$gap` record C wrote for the group: (its ring seq, its JSON body)."""
        return self._binding.last_gap()

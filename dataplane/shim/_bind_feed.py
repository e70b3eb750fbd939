"""ctypes declarations and a typed wrapper for the C feed path (feed.c, wsgw_feed.h).

`dataplane.feed` is the only user; it sees ints and bytes, never ctypes.
"""

from __future__ import annotations

import ctypes
from typing import Any

from dataplane.errors import DataplaneError
from dataplane.shim._bind_arbiter import ArbLegStats, ArbTotals
from dataplane.shim._bind_identity import IdentityStruct
from dataplane.shim._bind_topic import TopicSpec
from dataplane.shim._loader import KEEP_GIL, library, load

_vp = ctypes.c_void_p
_u64p = ctypes.POINTER(ctypes.c_uint64)

#: Must equal the constants of wsgw_feed.h.
MAX_TOPICS = 1024
TOPIC_MAX = 120
SAMPLES = 256

FEED_STAT_FIELDS = (
    "messages", "bytes", "wire_bytes", "writes", "stops", "arms", "arms_refused",
    "last_message_ns", "ring_errors", "samples", "armed", "stop_unknown_topic",
)  # fmt: skip


class FeedConf(ctypes.Structure):
    _fields_ = [
        ("ring", _vp),
        ("session_id", ctypes.c_uint32),
        ("max_payload", ctypes.c_uint32),
        ("spec", TopicSpec),
    ]


class FeedStats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in FEED_STAT_FIELDS]


ARB_MAX_LEGS = 8
GROUP_EPOCH_MAX = 24


class GroupConf(ctypes.Structure):
    _fields_ = [
        ("ring", _vp),
        ("hub_id", ctypes.c_uint32),
        ("gap_topic_id", ctypes.c_uint32),
        ("dialect", ctypes.c_uint32),
        ("legs", ctypes.c_uint32),
        ("hold_ns", ctypes.c_int64),
        ("max_held", ctypes.c_uint32),
        ("max_keys", ctypes.c_uint32),
        ("arena_bytes", ctypes.c_uint64),
        ("epoch", ctypes.c_char * GROUP_EPOCH_MAX),
        ("tap_ids", ctypes.c_uint32 * ARB_MAX_LEGS),
    ]


#: The longest `$gap` record a C group writes (GROUP_GAP_BYTES in feed.c).
GROUP_GAP_BYTES = 512

GROUP_STAT_FIELDS = (
    "delivered", "gaps", "lost", "below_floor", "not_told", "ring_errors", "expired",
    "offer_ns", "offers", "cost_samples", "python_offers", "unread_waits",
)  # fmt: skip


class GroupStats(ctypes.Structure):
    _fields_ = [
        *[(name, ctypes.c_int64 if name == "lost" else ctypes.c_uint64)
          for name in GROUP_STAT_FIELDS],
        ("leg_messages", ctypes.c_uint64 * ARB_MAX_LEGS),
        ("leg_newest", ctypes.c_int64 * ARB_MAX_LEGS),
        ("leg_live", ctypes.c_uint64 * ARB_MAX_LEGS),
    ]  # fmt: skip


PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_feed_conf_size": (ctypes.c_uint32, []),
    "wsgw_feed_create": (ctypes.c_int, [ctypes.POINTER(FeedConf), ctypes.POINTER(_vp)]),
    "wsgw_feed_destroy": (None, [_vp]),
    "wsgw_feed_topic_set": (
        ctypes.c_int, [_vp, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32]
    ),
    "wsgw_feed_arm": (None, [_vp, ctypes.c_uint32]),
    "wsgw_feed_disarm": (None, [_vp]),
    "wsgw_feed_stats": (None, [_vp, ctypes.POINTER(FeedStats)]),
    "wsgw_feed_topic_counts": (ctypes.c_uint32, [_vp, _u64p, ctypes.c_uint32]),
    "wsgw_feed_samples": (
        ctypes.c_uint32, [_vp, ctypes.c_uint64, _u64p, ctypes.c_uint32, _u64p]
    ),
    "wsgw_engine_flow_set_feed": (ctypes.c_int, [_vp, ctypes.c_int, _vp]),
    "wsgw_group_conf_size": (ctypes.c_uint32, []),
    "wsgw_group_create": (ctypes.c_int, [ctypes.POINTER(GroupConf), ctypes.POINTER(_vp)]),
    "wsgw_group_release": (None, [_vp]),
    "wsgw_group_close": (None, [_vp]),
    "wsgw_group_floor": (ctypes.c_int, [_vp, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_int64]),
    "wsgw_group_restart": (ctypes.c_int, [_vp, ctypes.c_char_p, ctypes.c_uint32]),
    "wsgw_group_offer": (
        ctypes.c_int,
        [_vp, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32,
         ctypes.c_char_p, ctypes.c_uint32, ctypes.c_int64],
    ),
    "wsgw_group_offer_staged": (
        ctypes.c_int,
        [_vp, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32,
         ctypes.c_char_p, ctypes.c_uint32, ctypes.c_int64],
    ),
    "wsgw_group_flush": (None, [_vp]),
    "wsgw_group_cost_samples": (ctypes.c_uint32, [_vp, _u64p, ctypes.c_uint32]),
    "wsgw_group_offer_identity": (
        ctypes.c_int,
        [_vp, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32,
         ctypes.POINTER(IdentityStruct), ctypes.c_char_p, ctypes.c_uint32, ctypes.c_int64],
    ),
    "wsgw_group_set_live": (ctypes.c_int, [_vp, ctypes.c_uint32, ctypes.c_int, ctypes.c_int64]),
    "wsgw_group_set_leg_fd": (ctypes.c_int, [_vp, ctypes.c_uint32, ctypes.c_int]),
    "wsgw_group_set_leg_busy": (None, [_vp, ctypes.c_uint32, ctypes.c_int]),
    "wsgw_group_set_leg_queued": (None, [_vp, ctypes.c_uint32, ctypes.c_int]),
    "wsgw_group_expire": (ctypes.c_int, [_vp, ctypes.c_int64]),
    "wsgw_group_deadline": (ctypes.c_int, [_vp, ctypes.POINTER(ctypes.c_int64)]),
    "wsgw_group_stats": (None, [_vp, ctypes.POINTER(GroupStats)]),
    "wsgw_group_leg_stats": (ctypes.c_int, [_vp, ctypes.c_uint32, ctypes.POINTER(ArbLegStats)]),
    "wsgw_group_lag_percentile": (
        ctypes.c_int, [_vp, ctypes.c_uint32, ctypes.c_double, ctypes.POINTER(ctypes.c_int64)]
    ),
    "wsgw_group_totals": (None, [_vp, ctypes.POINTER(ArbTotals)]),
    "wsgw_group_last": (
        ctypes.c_uint32, [_vp, _vp, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32]
    ),
    "wsgw_group_last_gap": (
        ctypes.c_int64, [_vp, ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32)]
    ),
    "wsgw_feed_join_group": (ctypes.c_int, [_vp, _vp, ctypes.c_uint32]),
}  # fmt: skip


class FeedError(DataplaneError):
    """The C feed could not be created or configured."""


class FeedBinding:
    """One C feed (`struct wsgw_feed`): created here, destroyed by `destroy`."""

    def __init__(self, ring_handle: int, session_id: int, max_payload: int, spec: TopicSpec):
        shim = load()
        lib = library()
        self._lib = lib
        size = int(lib.wsgw_feed_conf_size())
        if size != ctypes.sizeof(FeedConf):
            raise FeedError(
                f"struct wsgw_feed_conf is {size} bytes in the shim, "
                f"{ctypes.sizeof(FeedConf)} here: rebuild the shim"
            )
        conf = FeedConf(ring=ring_handle, session_id=session_id, max_payload=max_payload)
        conf.spec = spec
        handle = _vp()
        rc = int(lib.wsgw_feed_create(ctypes.byref(conf), ctypes.byref(handle)))
        if rc < 0:
            raise FeedError(f"cannot create the feed: {shim.last_error()}", -rc)
        self.handle = int(handle.value or 0)
        self._stats = FeedStats()
        self._counts = (ctypes.c_uint64 * MAX_TOPICS)()
        self._samples = (ctypes.c_uint64 * SAMPLES)()
        self._next = ctypes.c_uint64()

    def destroy(self) -> None:
        if self.handle:
            self._lib.wsgw_feed_destroy(self.handle)
            self.handle = 0

    def topic_set(self, name: bytes, topic_id: int, index: int) -> None:
        if not self.handle:
            raise FeedError("the feed was destroyed")
        rc = int(self._lib.wsgw_feed_topic_set(self.handle, name, len(name), topic_id, index))
        if rc < 0:
            raise FeedError(f"feed topic {name!r}: {load().last_error()}", -rc)

    def join_group(self, group_handle: int, leg: int) -> None:
        """Before the feed is attached: its frames go through the group as `leg`."""
        if not self.handle:
            raise FeedError("the feed was destroyed")
        rc = int(self._lib.wsgw_feed_join_group(self.handle, group_handle, leg))
        if rc < 0:
            raise FeedError(f"feed: cannot join the group as leg {leg}", -rc)

    def arm(self, seq: int) -> None:
        if self.handle:
            self._lib.wsgw_feed_arm(self.handle, seq & 0xFFFFFFFF)

    def disarm(self) -> None:
        if self.handle:
            self._lib.wsgw_feed_disarm(self.handle)

    def stats(self) -> dict[str, int]:
        """The counters (the last ones read, once destroyed)."""
        if self.handle:
            self._lib.wsgw_feed_stats(self.handle, ctypes.byref(self._stats))
        return {name: int(getattr(self._stats, name)) for name in FEED_STAT_FIELDS}

    def topic_counts(self, n: int) -> list[int]:
        n = min(n, MAX_TOPICS)
        if self.handle:
            self._lib.wsgw_feed_topic_counts(self.handle, self._counts, n)
        return list(self._counts[:n])

    def samples(self, since: int) -> tuple[list[int], int]:
        """Latency samples (ns) taken after number `since`, and the number to pass next."""
        if not self.handle:
            return [], since
        n = int(self._lib.wsgw_feed_samples(self.handle, since, self._samples, SAMPLES,
                                            ctypes.byref(self._next)))  # fmt: skip
        return list(self._samples[:n]), int(self._next.value)


def flow_set_feed(engine_handle: int, slot: int, feed_handle: int) -> int:
    """Attach the feed to the engine's flow (0: detach); on the engine's thread."""
    return int(library().wsgw_engine_flow_set_feed(engine_handle, slot, feed_handle or None))


class GroupBinding:
    """One C feed group (`struct wsgw_group`): created here, released by `release`. Calls
    keep the GIL: each is short (the C side takes only the group's own lock)."""

    def __init__(self, conf: GroupConf) -> None:
        shim = load()
        self._lib = lib = library(KEEP_GIL)
        size = int(lib.wsgw_group_conf_size())
        if size != ctypes.sizeof(GroupConf):
            raise FeedError(
                f"struct wsgw_group_conf is {size} bytes in the shim, "
                f"{ctypes.sizeof(GroupConf)} here: rebuild the shim"
            )
        handle = _vp()
        rc = int(lib.wsgw_group_create(ctypes.byref(conf), ctypes.byref(handle)))
        if rc < 0:
            raise FeedError(f"cannot create the group: {shim.last_error()}", -rc)
        self.handle = int(handle.value or 0)
        self._offer = lib.wsgw_group_offer
        self._offer_identity = lib.wsgw_group_offer_identity
        self._offer_staged = lib.wsgw_group_offer_staged
        self._stats = GroupStats()
        self._i64 = ctypes.c_int64()

    def close(self) -> None:
        """Closed: every frame is refused from now on (the handle stays readable)."""
        if self.handle:
            self._lib.wsgw_group_close(self.handle)

    def release(self) -> None:
        if self.handle:
            self._lib.wsgw_group_close(self.handle)
            self._lib.wsgw_group_release(self.handle)
            self.handle = 0

    def offer(self, leg: int, topic_id: int, name: bytes, raw: bytes, ts_ns: int) -> int:
        """1 taken, 0 C cannot tell (or closed), -errno."""
        if not self.handle:
            return 0
        return int(self._offer(self.handle, leg, topic_id, name, len(name), raw, len(raw), ts_ns))

    def offer_staged(self, leg: int, topic_id: int, name: bytes, raw: bytes, ts_ns: int) -> int:
        """As offer, as the engine offers: winners wait for `flush`."""
        if not self.handle:
            return 0
        return int(
            self._offer_staged(self.handle, leg, topic_id, name, len(name), raw, len(raw), ts_ns)
        )

    def flush(self) -> None:
        if self.handle:
            self._lib.wsgw_group_flush(self.handle)

    def cost_samples(self) -> list[int]:
        """ns of the latest timed engine offers (one in 16 is timed)."""
        if not self.handle:
            return []
        out = (ctypes.c_uint64 * 1024)()
        n = int(self._lib.wsgw_group_cost_samples(self.handle, out, 1024))
        return list(out[:n])

    def offer_identity(
        self, leg: int, topic_id: int, name: bytes, ident: IdentityStruct, raw: bytes, ts_ns: int
    ) -> int:
        if not self.handle:
            return 0
        return int(self._offer_identity(self.handle, leg, topic_id, name, len(name),
                                        ctypes.byref(ident), raw, len(raw), ts_ns))  # fmt: skip

    def floor(self, topic: bytes, last: int) -> None:
        if self.handle:
            self._lib.wsgw_group_floor(self.handle, topic, len(topic), last)

    def restart(self, topic: bytes) -> int:
        if not self.handle:
            return 0
        return int(self._lib.wsgw_group_restart(self.handle, topic, len(topic)))

    def set_live(self, leg: int, live: bool, now_ns: int) -> None:
        if self.handle:
            self._lib.wsgw_group_set_live(self.handle, leg, int(live), now_ns)

    def set_leg_fd(self, leg: int, fd: int) -> None:
        if self.handle:
            self._lib.wsgw_group_set_leg_fd(self.handle, leg, fd)

    def set_leg_busy(self, leg: int, busy: bool) -> None:
        if self.handle:
            self._lib.wsgw_group_set_leg_busy(self.handle, leg, int(busy))

    def set_leg_queued(self, leg: int, queued: bool) -> None:
        if self.handle:
            self._lib.wsgw_group_set_leg_queued(self.handle, leg, int(queued))

    def expire(self, now_ns: int) -> None:
        if self.handle:
            self._lib.wsgw_group_expire(self.handle, now_ns)

    def deadline(self) -> int | None:
        if self.handle and self._lib.wsgw_group_deadline(self.handle, ctypes.byref(self._i64)):
            return int(self._i64.value)
        return None

    def stats(self) -> GroupStats:
        """The counters (the last ones read, once released)."""
        if self.handle:
            self._lib.wsgw_group_stats(self.handle, ctypes.byref(self._stats))
        return self._stats

    def leg_stats(self, leg: int) -> ArbLegStats:
        out = ArbLegStats()
        if self.handle:
            self._lib.wsgw_group_leg_stats(self.handle, leg, ctypes.byref(out))
        return out

    def lag_percentile(self, leg: int, q: float) -> int | None:
        if (
            self.handle
            and self._lib.wsgw_group_lag_percentile(self.handle, leg, q, ctypes.byref(self._i64))
            == 1
        ):
            return int(self._i64.value)
        return None

    def totals(self) -> ArbTotals:
        out = ArbTotals()
        if self.handle:
            self._lib.wsgw_group_totals(self.handle, ctypes.byref(out))
        return out

    def last_gap(self) -> tuple[int, bytes] | None:
        """The last `$gap` record the group wrote: (its ring seq, its JSON), None before any."""
        if not self.handle:
            return None
        body = ctypes.create_string_buffer(GROUP_GAP_BYTES)
        size = ctypes.c_uint32()
        seq = int(self._lib.wsgw_group_last_gap(self.handle, body, len(body), ctypes.byref(size)))
        return (seq, body.raw[: size.value]) if seq > 0 else None

    def last(self, max_keys: int) -> dict[str, int]:
        """Per identity topic, the last id delivered."""
        if not self.handle:
            return {}
        values = (ctypes.c_int64 * max_keys)()
        cap = max_keys * 129
        names = ctypes.create_string_buffer(cap)
        n = int(self._lib.wsgw_group_last(self.handle, values, names, cap, max_keys))
        topics = names.raw.split(b"\0")[:n]
        return {t.decode(errors="replace"): int(v) for t, v in zip(topics, values[:n], strict=True)}

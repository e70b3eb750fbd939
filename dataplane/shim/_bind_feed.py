"""ctypes declarations and a typed wrapper for the C feed path (feed.c, wsgw_feed.h).

`dataplane.feed` is the only user; it sees ints and bytes, never ctypes.
"""

from __future__ import annotations

import ctypes
from typing import Any

from dataplane.errors import DataplaneError
from dataplane.shim._bind_topic import TopicSpec
from dataplane.shim._loader import library, load

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

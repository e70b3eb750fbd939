"""ctypes prototypes and wrappers for the stream sink (sink.c, wsgw_sink.h): the ring's writer
sends /v1/stream frames to armed sockets itself.

Every call keeps the GIL: each takes the sink's mutex for a table look-up (the writer's hook
holds it only while it sends one slice, and never needs the GIL)."""

from __future__ import annotations

import ctypes
from typing import Any

from dataplane.shim._loader import KEEP_GIL, library

_vp = ctypes.c_void_p
_u64p = ctypes.POINTER(ctypes.c_uint64)

# wsgw_sink.h: enum wsgw_sink_reason
NEVER, ARMED, PYTHON, AGAIN, PARTIAL, ERROR, GAP, TOPIC, BUSY, UTF8, EXTRA = range(11)
REASONS = (
    "never",
    "armed",
    "python",
    "again",
    "partial",
    "error",
    "gap",
    "topic",
    "busy",
    "utf8",
    "extra",
)
# wsgw_sink.h: the state's fields
(
    ST_ARMED,
    ST_NEXT_SEQ,
    ST_REST_LEN,
    ST_REASON,
    ST_ERRNO,
    ST_MESSAGES,
    ST_BYTES,
    ST_DISARMS,
    ST_SENDS,
) = range(9)
ST_COUNT = 9
MAX_SOCKETS = 1024
LAG_SAMPLES = 1024  # WSGW_SINK_LAG_SAMPLES
MAX_TOPICS = 4096
MIDDLE_MAX = 4096  # WSGW_SINK_MIDDLE_MAX

PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_sink_open": (ctypes.c_int, [_vp, ctypes.c_uint32, ctypes.POINTER(_vp)]),
    "wsgw_sink_close": (None, [_vp]),
    "wsgw_sink_add": (
        ctypes.c_int,
        [_vp, ctypes.c_int, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32), ctypes.c_uint32],
    ),
    "wsgw_sink_add_nats": (ctypes.c_int, [_vp, ctypes.c_int, ctypes.c_uint32]),
    "wsgw_sink_nats_subject": (
        ctypes.c_int,
        [_vp, ctypes.c_int, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32],
    ),
    "wsgw_sink_add_envelope": (
        ctypes.c_int,
        [_vp, ctypes.c_int, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32), ctypes.c_uint32],
    ),
    "wsgw_sink_envelope_topic": (
        ctypes.c_int,
        [_vp, ctypes.c_int, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32],
    ),
    "wsgw_sink_envelope_hold": (None, [ctypes.c_int]),
    "wsgw_sink_remove": (ctypes.c_int, [_vp, ctypes.c_int]),
    "wsgw_sink_wake_fd": (ctypes.c_int, [_vp, ctypes.c_int, ctypes.c_int]),
    "wsgw_sink_arm": (ctypes.c_int, [_vp, ctypes.c_int, ctypes.c_uint64]),
    "wsgw_sink_max_streams": (ctypes.c_int, [_vp, ctypes.c_uint32]),
    "wsgw_sink_stream_room": (ctypes.c_uint32, [_vp]),
    "wsgw_sink_disarm": (ctypes.c_int, [_vp, ctypes.c_int, _u64p]),
    "wsgw_sink_state": (ctypes.c_int, [_vp, ctypes.c_int, _u64p]),
    "wsgw_sink_lags": (
        ctypes.c_uint32,
        [_vp, ctypes.POINTER(ctypes.c_uint32), ctypes.c_uint32, _u64p],
    ),
    "wsgw_sink_burst_begin": (None, []),
    "wsgw_sink_burst_end": (None, []),
    "wsgw_sink_take_rest": (
        ctypes.c_int64,
        [_vp, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint64],
    ),
}


def open_sink(writer: int, gap_topic_id: int) -> tuple[int, int]:
    """(0 and the sink's handle) or (-errno, 0)."""
    out = _vp()
    rc = int(library(KEEP_GIL).wsgw_sink_open(writer, gap_topic_id, ctypes.byref(out)))
    return rc, int(out.value or 0)


def close_sink(handle: int) -> None:
    library(KEEP_GIL).wsgw_sink_close(handle)


def add(handle: int, fd: int, session_id: int, topic_ids: list[int]) -> int:
    """The socket's slot (>= 0) or -errno; topic_ids [] means every topic of the session."""
    ids = (ctypes.c_uint32 * max(1, len(topic_ids)))(*topic_ids)
    return int(library(KEEP_GIL).wsgw_sink_add(handle, fd, session_id, ids, len(topic_ids)))


def add_envelope(handle: int, fd: int, session_id: int, topic_ids: list[int]) -> int:
    """An envelope stream's slot (as add's; its topics' middles told by envelope_topic) or
    -errno."""
    ids = (ctypes.c_uint32 * max(1, len(topic_ids)))(*topic_ids)
    return int(
        library(KEEP_GIL).wsgw_sink_add_envelope(handle, fd, session_id, ids, len(topic_ids))
    )


def envelope_topic(handle: int, slot: int, topic_id: int, middle: bytes) -> int:
    """Tell an envelope slot topic_id's middle (`,"session":S,"topic":"T","recv_ts_ns":`):
    0 or -errno."""
    return int(
        library(KEEP_GIL).wsgw_sink_envelope_topic(handle, slot, topic_id, middle, len(middle))
    )


def envelope_hold(on: bool) -> None:
    """While on, the records this thread writes stop envelope slots that want them (Python
    adds their upstream_seq): wsgw_sink_envelope_hold."""
    library(KEEP_GIL).wsgw_sink_envelope_hold(1 if on else 0)


def add_nats(handle: int, fd: int, busy_sends: int = 0) -> int:
    """A NATS connection's slot (every session, PUB records) or -errno; busy_sends: more
    sends in a millisecond hand back (0: never)."""
    return int(library(KEEP_GIL).wsgw_sink_add_nats(handle, fd, busy_sends))


def nats_subject(handle: int, slot: int, topic_id: int, subject: bytes) -> int:
    """Tell a NATS slot topic_id's subject: 0 or -errno."""
    return int(
        library(KEEP_GIL).wsgw_sink_nats_subject(handle, slot, topic_id, subject, len(subject))
    )


def wake_fd(handle: int, slot: int, fd: int) -> int:
    """The eventfd the sink writes when it stops sending to slot by itself (-1: none): 0 or
    -errno."""
    return int(library(KEEP_GIL).wsgw_sink_wake_fd(handle, slot, fd))


def remove(handle: int, slot: int) -> int:
    return int(library(KEEP_GIL).wsgw_sink_remove(handle, slot))


def arm(handle: int, slot: int, seq: int) -> int:
    """0, or -EAGAIN (the ring already holds seq), -EBUSY, -EDQUOT (max_streams armed),
    -EINVAL."""
    return int(library(KEEP_GIL).wsgw_sink_arm(handle, slot, seq))


def max_streams(handle: int, limit: int) -> int:
    """At most limit stream sockets armed at once: how many are armed now, or -EINVAL."""
    return int(library(KEEP_GIL).wsgw_sink_max_streams(handle, limit))


def stream_room(handle: int) -> int:
    """How many more stream sockets may be armed now (no mutex: a hint)."""
    return int(library(KEEP_GIL).wsgw_sink_stream_room(handle))


def _state(name: str, handle: int, slot: int) -> tuple[int, ...]:
    out = (ctypes.c_uint64 * ST_COUNT)()
    rc = int(getattr(library(KEEP_GIL), name)(handle, slot, out))
    if rc < 0:
        raise ValueError(f"sink slot {slot}: {rc}")
    return tuple(out)


def disarm(handle: int, slot: int) -> tuple[int, ...]:
    """Disarm; the state (ST_* fields)."""
    return _state("wsgw_sink_disarm", handle, slot)


def state(handle: int, slot: int) -> tuple[int, ...]:
    """The state (ST_* fields), unchanged."""
    return _state("wsgw_sink_state", handle, slot)


def take_rest(handle: int, slot: int, length: int) -> bytes:
    """The rest of a frame the sink sent in part (b"": none), now Python's to write."""
    if length <= 0:
        return b""
    buf = ctypes.create_string_buffer(length)
    rc = int(library(KEEP_GIL).wsgw_sink_take_rest(handle, slot, buf, length))
    if rc < 0:
        raise ValueError(f"sink slot {slot}: take_rest {rc}")
    return buf.raw[:rc]


def lags(handle: int) -> tuple[int, list[int]]:
    """(samples ever taken, the newest ones oldest first): per send, ns from its oldest
    record's ring stamp to the send (wsgw_sink_lags)."""
    out = (ctypes.c_uint32 * LAG_SAMPLES)()
    total = ctypes.c_uint64()
    n = int(library(KEEP_GIL).wsgw_sink_lags(handle, out, LAG_SAMPLES, ctypes.byref(total)))
    return int(total.value), list(out[:n])


def burst_begin() -> None:
    """Open a burst in this thread (nests): NATS slots send what it writes at its end."""
    library(KEEP_GIL).wsgw_sink_burst_begin()


def burst_end() -> None:
    """Close this thread's burst: the outermost end sends the NATS slots' buffers."""
    library(KEEP_GIL).wsgw_sink_burst_end()

"""ctypes prototypes and wrappers for the ring notifier (ringnotify.c, wsgw_ringnotify.h): how
a ring's records wake an event loop through an eventfd, by a C thread waiting on a ring reader
or (direct) by the ring's writer in this process.

start and stop (a join) release the GIL; start_direct, rearm and count keep it (a mutex, a
condition signal or one look at the ring, far cheaper than a GIL hand-over)."""

from __future__ import annotations

import ctypes
from typing import Any

from dataplane.shim._loader import KEEP_GIL, library

_vp = ctypes.c_void_p

PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_ring_notifier_start": (
        ctypes.c_int,
        [_vp, ctypes.c_int, ctypes.c_int64, ctypes.POINTER(_vp)],
    ),
    "wsgw_ring_notifier_start_direct": (
        ctypes.c_int,
        [_vp, ctypes.c_int, _vp, ctypes.POINTER(_vp)],
    ),
    "wsgw_ring_notifier_rearm": (None, [_vp]),
    "wsgw_ring_notifier_is_direct": (ctypes.c_int, [_vp]),
    "wsgw_ring_notifier_count": (ctypes.c_uint64, [_vp]),
    "wsgw_ring_notifier_stop": (None, [_vp]),
}


def start(reader: int, notify_fd: int, spin_ns: int) -> tuple[int, int]:
    """(0 and the notifier's handle) or (-errno, 0)."""
    out = _vp()
    rc = int(library().wsgw_ring_notifier_start(reader, notify_fd, spin_ns, ctypes.byref(out)))
    return rc, int(out.value or 0)


def start_direct(reader: int, notify_fd: int, writer: int) -> tuple[int, int]:
    """(0 and the notifier's handle) or (-errno, 0): notified by `writer`'s writes."""
    out = _vp()
    lib = library(KEEP_GIL)
    rc = int(lib.wsgw_ring_notifier_start_direct(reader, notify_fd, writer, ctypes.byref(out)))
    return rc, int(out.value or 0)


def is_direct(handle: int) -> bool:
    return bool(library(KEEP_GIL).wsgw_ring_notifier_is_direct(handle))


def rearm(handle: int) -> None:
    library(KEEP_GIL).wsgw_ring_notifier_rearm(handle)


def count(handle: int) -> int:
    return int(library(KEEP_GIL).wsgw_ring_notifier_count(handle))


def stop(handle: int) -> None:
    """Joins the thread (GIL released meanwhile) and frees the notifier."""
    library().wsgw_ring_notifier_stop(handle)

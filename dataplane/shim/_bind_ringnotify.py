"""ctypes prototypes and wrappers for the ring notifier (ringnotify.c, wsgw_ringnotify.h): a C
thread that waits on a ring reader and writes to an eventfd an event loop watches.

start and stop (a join) release the GIL; rearm and count keep it (a mutex and a condition
signal, far cheaper than a GIL hand-over)."""

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
    "wsgw_ring_notifier_rearm": (None, [_vp]),
    "wsgw_ring_notifier_count": (ctypes.c_uint64, [_vp]),
    "wsgw_ring_notifier_stop": (None, [_vp]),
}


def start(reader: int, notify_fd: int, spin_ns: int) -> tuple[int, int]:
    """(0 and the notifier's handle) or (-errno, 0)."""
    out = _vp()
    rc = int(library().wsgw_ring_notifier_start(reader, notify_fd, spin_ns, ctypes.byref(out)))
    return rc, int(out.value or 0)


def rearm(handle: int) -> None:
    library(KEEP_GIL).wsgw_ring_notifier_rearm(handle)


def count(handle: int) -> int:
    return int(library(KEEP_GIL).wsgw_ring_notifier_count(handle))


def stop(handle: int) -> None:
    """Joins the thread (GIL released meanwhile) and frees the notifier."""
    library().wsgw_ring_notifier_stop(handle)

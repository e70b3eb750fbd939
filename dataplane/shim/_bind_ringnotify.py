"""ctypes prototypes and wrappers for the ring notifier (ringnotify.c, wsgw_ringnotify.h): a C
thread that waits on a ring reader and writes to an eventfd an event loop watches."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from dataplane.shim._loader import load

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
#: Called with the GIL held: a mutex and a condition signal, far cheaper than a GIL hand-over.
_KEEP_GIL = ("wsgw_ring_notifier_rearm", "wsgw_ring_notifier_count")


class _Libs:
    def __init__(self) -> None:
        shim = load()
        self.slow = shim.lib  # start and stop (a join) release the GIL
        fast = ctypes.PyDLL(str(shim.path))
        for name in _KEEP_GIL:
            restype, argtypes = PROTOTYPES[name]
            func = getattr(fast, name)
            func.restype = restype
            func.argtypes = argtypes
        self.fast = fast


_libs: _Libs | None = None
_libs_lock = threading.Lock()


def _get() -> _Libs:
    global _libs
    if _libs is None:
        with _libs_lock:
            if _libs is None:
                _libs = _Libs()
    return _libs


def start(reader: int, notify_fd: int, spin_ns: int) -> tuple[int, int]:
    """(0 and the notifier's handle) or (-errno, 0)."""
    out = _vp()
    rc = int(_get().slow.wsgw_ring_notifier_start(reader, notify_fd, spin_ns, ctypes.byref(out)))
    return rc, int(out.value or 0)


def rearm(handle: int) -> None:
    _get().fast.wsgw_ring_notifier_rearm(handle)


def count(handle: int) -> int:
    return int(_get().fast.wsgw_ring_notifier_count(handle))


def stop(handle: int) -> None:
    """Joins the thread (GIL released meanwhile) and frees the notifier."""
    _get().slow.wsgw_ring_notifier_stop(handle)

"""The scheduler's slice for a thread (EEVDF, Linux 6.12+): a latency-sensitive thread that
runs briefly per wake-up asks for a short slice, so its wake-up gets an earlier virtual
deadline and preempts the task on the CPU instead of waiting in the run queue for it.

sched_setattr(2) with SCHED_OTHER and sched_runtime = the slice (the kernel clamps it to
0.1-100 ms); no privilege needed. Older kernels ignore sched_runtime for SCHED_OTHER.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import struct
import threading
from pathlib import Path

#: sched_setattr's syscall number per architecture (no libc wrapper before glibc 2.41).
SYS_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}
#: struct sched_attr, SCHED_ATTR_SIZE_VER1: size, policy, flags, nice, priority, runtime,
#: deadline, period, util_min, util_max.
SCHED_ATTR = struct.Struct("=IIQiIQQQII")
SCHED_OTHER = 0


def set_thread_slice(slice_ns: int) -> None:
    """Ask for a slice of slice_ns for the calling thread (SCHED_OTHER, its nice kept).
    OSError when the kernel refuses (or the architecture is unknown)."""
    _set_slice(0, slice_ns)  # 0: the calling thread


def _set_slice(tid: int, slice_ns: int) -> None:
    """sched_setattr(tid) with SCHED_OTHER, the thread's nice and sched_runtime slice_ns."""
    number = SYS_SCHED_SETATTR.get(platform.machine())
    if number is None:
        raise OSError(0, f"sched_setattr: unknown architecture {platform.machine()}")
    nice = os.getpriority(os.PRIO_PROCESS, tid)  # a thread's own nice on Linux
    attr = SCHED_ATTR.pack(SCHED_ATTR.size, SCHED_OTHER, 0, nice, 0, slice_ns, 0, 0, 0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, tid, attr, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"sched_setattr: {os.strerror(err)}")


def thread_slice_ns(native_id: int) -> int | None:
    """The slice a thread of this process runs with (/proc's se.slice), None when the
    kernel does not say (before 6.6)."""
    for line in Path(f"/proc/self/task/{native_id}/sched").read_text().splitlines():
        if line.startswith("se.slice"):
            return int(line.split(":")[1])
    return None


def set_slice_of(native_id: int, slice_ns: int) -> None:
    """set_thread_slice for another thread of this process, by its native id (its nice
    kept). OSError when the kernel refuses, or when the id is no thread of this process
    (a thread that ended: its id may be another process's by now)."""
    if not Path(f"/proc/self/task/{native_id}").exists():
        raise OSError(3, f"no thread {native_id} in this process")  # ESRCH
    _set_slice(native_id, slice_ns)


def restore_slice_of(native_id: int, previous_ns: int | None) -> None:
    """Give a thread of this process back the slice it had (`thread_slice_ns` before a
    slice was set): the kernel's default when that is what it was, else that value asked
    again. OSError as `set_slice_of`."""
    set_slice_of(native_id, 0)  # 0: the kernel's default slice
    if previous_ns is not None and thread_slice_ns(native_id) != previous_ns:
        set_slice_of(native_id, previous_ns)  # the thread had a slice of its own


class SliceLeases:
    """Short slices lent to threads of this process by several owners (ring readers, say),
    each thread's own slice given back when its last lease ends: two readers waiting on one
    thread, closed in any order, leave it as it was before the first. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: native id -> (leases held, the slice the thread had before the first)
        self._held: dict[int, tuple[int, int]] = {}

    def hold(self, native_id: int, slice_ns: int) -> bool:
        """Give the thread slice_ns (the first lease sets it, later ones count). False,
        and no lease, when the kernel reports no slice (before 6.6) or refuses it."""
        with self._lock:
            count, before = self._held.get(native_id, (0, 0))
            if count == 0:
                try:
                    if os.sched_getscheduler(native_id) != os.SCHED_OTHER:
                        return False  # sched_setattr would change its policy too
                    current = thread_slice_ns(native_id)
                    if current is None:
                        return False
                    set_slice_of(native_id, slice_ns)
                except OSError:
                    return False
                before = current
            self._held[native_id] = (count + 1, before)
            return True

    def release(self, native_id: int) -> None:
        """End one lease; the last one gives the thread its slice back (a thread that
        ended meanwhile is skipped)."""
        with self._lock:
            count, before = self._held.pop(native_id, (0, 0))
            if count > 1:
                self._held[native_id] = (count - 1, before)
            elif count == 1:
                with contextlib.suppress(OSError):
                    restore_slice_of(native_id, before)

    def held(self, native_id: int) -> int:
        """Leases the thread holds now."""
        with self._lock:
            return self._held.get(native_id, (0, 0))[0]


#: The process's leases (ring readers' waiting threads, dataplane.ring.RingReader; the
#: engine's thread, dataplane.engine.Engine).
SLICE_LEASES = SliceLeases()

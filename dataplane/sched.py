"""The scheduler's slice for a thread (EEVDF, Linux 6.12+): a latency-sensitive thread that
runs briefly per wake-up asks for a short slice, so its wake-up gets an earlier virtual
deadline and preempts the task on the CPU instead of waiting in the run queue for it.

sched_setattr(2) with SCHED_OTHER and sched_runtime = the slice (the kernel clamps it to
0.1-100 ms); no privilege needed. Older kernels ignore sched_runtime for SCHED_OTHER.
"""

from __future__ import annotations

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
    number = SYS_SCHED_SETATTR.get(platform.machine())
    if number is None:
        raise OSError(0, f"sched_setattr: unknown architecture {platform.machine()}")
    nice = os.getpriority(os.PRIO_PROCESS, 0)  # 0: the calling thread on Linux
    attr = SCHED_ATTR.pack(SCHED_ATTR.size, SCHED_OTHER, 0, nice, 0, slice_ns, 0, 0, 0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, 0, attr, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"sched_setattr: {os.strerror(err)}")


def thread_slice_ns(native_id: int) -> int | None:
    """The slice a thread of this process runs with (/proc's se.slice), None when the
    kernel does not say (before 6.6)."""
    for line in Path(f"/proc/self/task/{native_id}/sched").read_text().splitlines():
        if line.startswith("se.slice"):
            return int(line.split(":")[1])
    return None


def restore_thread_slice(previous_ns: int | None) -> None:
    """Give the calling thread back the slice it had (`thread_slice_ns` before a
    `set_thread_slice`): the kernel's default when that is what it was, else that value
    asked again. OSError as `set_thread_slice`."""
    set_thread_slice(0)  # 0: the kernel's default slice
    if previous_ns is not None and thread_slice_ns(threading.get_native_id()) != previous_ns:
        set_thread_slice(previous_ns)  # the thread had a slice of its own

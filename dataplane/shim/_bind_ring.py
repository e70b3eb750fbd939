"""ctypes declarations and thin typed wrappers for the message ring (msgring.c, wsgw_ring.h).

`dataplane.ring` is the only user; it sees ints, bytes and memoryviews, never ctypes.

Two handles on the same library, both from `_loader.library`: the CDLL (`library()`), which
releases the GIL for the call, for what may block or take long (wait, create/attach with
MAP_POPULATE, benchmarks); the PyDLL (`library(KEEP_GIL)`), which keeps the GIL, for the
per-batch calls (write, read). Releasing and retaking
the GIL around a 100 ns call costs more than the call, and hands the GIL to another thread
that may keep it for a whole switch interval (5 ms) while the engine waits: a convoy.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
from array import array
from typing import Any

from dataplane.shim._loader import KEEP_GIL, bench_function, library, load

_u64p = ctypes.POINTER(ctypes.c_uint64)
_vp = ctypes.c_void_p

#: Must equal WSGW_RING_API / WSGW_RING_LAYOUT in wsgw_ring.h.
RING_API = 5
RING_LAYOUT = 2

F_REPLACE = 1
F_START_OLDEST = 2
#: enum wsgw_ring_wait_mode: the wait policy a writer recommends (NONE: no advice).
WAIT_NONE, WAIT_FUTEX, WAIT_SPIN, WAIT_BUSY, WAIT_ADAPTIVE = range(5)
WAIT_SPIN_MAX_NS = (1 << 48) - 1
REC_HDR = 32
TOPIC_NAME_MAX = 56
PAGE = 4096
MAGIC = 0x474E495257475357
#: struct wsgw_ring_view, unpacked with struct "<QQIIII"
VIEW_FORMAT = "<QQIIII"
VIEW_SIZE = 32
#: struct wsgw_ring_read_info, read as u64[8]
(
    INFO_LOST,
    INFO_RESUME_SEQ,
    INFO_NEXT_SEQ,
    INFO_WRITE_SEQ,
    INFO_TOPIC_COUNT,
    INFO_CLOSED,
    INFO_FILTERED,
    INFO_WOKE_NS,
) = range(8)
INFO_WORDS = 8

RING_INFO_FIELDS = (
    "capacity",
    "data_offset",
    "max_payload",
    "max_topics",
    "topic_count",
    "write_pos",
    "write_seq",
    "tail_pos",
    "tail_seq",
    "state",
    "writer_pid",
    "instance",
    "created_ns",
    "waiters",
)
WRITER_STAT_FIELDS = ("messages", "bytes", "batches", "pads", "overwritten", "wakeups")
READER_STAT_FIELDS = (
    "messages",
    "bytes",
    "gaps",
    "lost",
    "filtered",
    "retries",
    "waits",
    "wakeups",
    "spin_hits",
    "spin_ns",
)
#: wsgw_ring_wait's spin_ns for the busy policy (WSGW_RING_SPIN_BUSY).
SPIN_BUSY = -1
#: wsgw_ring_wait's spin_ns flag of the adaptive policy, the cap in the low bits
#: (WSGW_RING_SPIN_ADAPTIVE).
SPIN_ADAPTIVE = 1 << 62
#: The reader table (WSGW_RING_MAX_READERS slots, names of WSGW_RING_READER_NAME_MAX bytes).
MAX_READERS = 31
READER_NAME_MAX = 64
#: slot flags: WSGW_RING_SLOT_CLOSE (the operator closed the reader)
SLOT_CLOSE = 1
READER_ENTRY_FIELDS = (
    "slot",
    "pid",
    "flags",
    "attached_ns",
    "heartbeat_ns",
    "next_seq",
    "messages",
    "gaps",
    "lost",
    "alive",
)


class _RingInfo(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in RING_INFO_FIELDS]


class _WriterStats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in WRITER_STAT_FIELDS]


class _ReaderStats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in READER_STAT_FIELDS]


class _ReaderEntry(ctypes.Structure):
    _fields_ = [
        *((name, ctypes.c_uint64) for name in READER_ENTRY_FIELDS),
        ("name", ctypes.c_char * READER_NAME_MAX),
    ]


class _View(ctypes.Structure):
    _fields_ = [
        ("seq", ctypes.c_uint64),
        ("ts_ns", ctypes.c_uint64),
        ("session_id", ctypes.c_uint32),
        ("topic_id", ctypes.c_uint32),
        ("offset", ctypes.c_uint32),
        ("len", ctypes.c_uint32),
    ]


assert ctypes.sizeof(_View) == VIEW_SIZE

# name -> (restype, argtypes); merged into the loader's table and checked at load time.
PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_ring_api_version": (ctypes.c_int, []),
    "wsgw_ring_layout_version": (ctypes.c_int, []),
    "wsgw_ring_create": (
        ctypes.c_int,
        [
            ctypes.c_char_p,
            ctypes.c_uint64,
            ctypes.c_uint32,
            ctypes.c_uint32,
            ctypes.c_uint32,
            ctypes.POINTER(_vp),
        ],
    ),
    "wsgw_ring_writer_fd": (ctypes.c_int, [_vp]),
    "wsgw_ring_topic_register": (ctypes.c_int, [_vp, ctypes.c_char_p, ctypes.c_uint32]),
    "wsgw_ring_write": (
        ctypes.c_int64,
        [_vp, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_uint32],
    ),
    "wsgw_ring_write_batch": (ctypes.c_int64, [_vp, _vp, ctypes.c_uint32]),
    "wsgw_ring_write_packed": (
        ctypes.c_int64,
        [_vp, ctypes.c_char_p, _vp, _vp, _vp, _vp, ctypes.c_uint32],
    ),
    "wsgw_ring_writer_info": (ctypes.c_int, [_vp, ctypes.POINTER(_RingInfo)]),
    "wsgw_ring_writer_stats": (ctypes.c_int, [_vp, ctypes.POINTER(_WriterStats)]),
    "wsgw_ring_writer_close": (None, [_vp, ctypes.c_int]),
    "wsgw_ring_set_wait_hint": (ctypes.c_int, [_vp, ctypes.c_uint32, ctypes.c_uint64]),
    "wsgw_ring_wait_hint": (ctypes.c_int, [_vp, _u64p]),
    "wsgw_ring_set_writer_cpu": (ctypes.c_int, [_vp, ctypes.c_int32]),
    "wsgw_ring_writer_cpu": (ctypes.c_int32, [_vp]),
    "wsgw_ring_attach": (
        ctypes.c_int,
        [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32, ctypes.POINTER(_vp)],
    ),
    "wsgw_ring_read": (ctypes.c_int, [_vp, _vp, ctypes.c_uint32, _vp, ctypes.c_uint32, _vp]),
    "wsgw_ring_read_wait": (
        ctypes.c_int,
        [_vp, _vp, ctypes.c_uint32, _vp, ctypes.c_uint32, _vp, ctypes.c_int64, ctypes.c_int64],
    ),
    "wsgw_ring_wait": (ctypes.c_int, [_vp, ctypes.c_int64, ctypes.c_int64]),
    "wsgw_ring_spin_adaptive": (ctypes.c_int, [_vp, ctypes.c_uint64]),
    "wsgw_ring_reader_interrupt": (None, [_vp]),
    "wsgw_ring_reader_filter": (ctypes.c_int, [_vp, _vp, ctypes.c_uint32, ctypes.c_uint32]),
    "wsgw_ring_reader_seek": (ctypes.c_int, [_vp, ctypes.c_int]),
    "wsgw_ring_topic_name": (
        ctypes.c_int,
        [_vp, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32],
    ),
    "wsgw_ring_reader_info": (ctypes.c_int, [_vp, ctypes.POINTER(_RingInfo)]),
    "wsgw_ring_reader_stats": (ctypes.c_int, [_vp, ctypes.POINTER(_ReaderStats)]),
    "wsgw_ring_reader_next_seq": (ctypes.c_uint64, [_vp]),
    "wsgw_ring_writer_alive": (ctypes.c_int, [_vp]),
    "wsgw_ring_reader_slot": (ctypes.c_int, [_vp]),
    "wsgw_ring_reader_set_name": (ctypes.c_int, [_vp, ctypes.c_char_p, ctypes.c_uint32]),
    "wsgw_ring_readers": (ctypes.c_int, [_vp, ctypes.POINTER(_ReaderEntry), ctypes.c_uint32]),
    "wsgw_ring_close_reader": (ctypes.c_int, [_vp, ctypes.c_uint32, ctypes.c_uint32]),
    "wsgw_ring_detach": (None, [_vp]),
}

#: Only in a library built for benchmarks (see setup.py); declared when present.
BENCH_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_ring_bench_write": (
        ctypes.c_int64,
        [_vp, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32],
    ),
    "wsgw_ring_bench_rw": (
        ctypes.c_int64,
        [_vp, _vp, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32],
    ),
    "wsgw_ring_bench_read": (ctypes.c_int, [_vp, ctypes.c_uint64, ctypes.c_int64, _u64p]),
    "wsgw_ring_bench_pace": (
        ctypes.c_int,
        [_vp, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64, _u64p],
    ),
    "wsgw_ring_bench_latency": (
        ctypes.c_int,
        [_vp, ctypes.c_uint64, ctypes.c_int64, ctypes.c_int64, _u64p, _u64p],
    ),
}


def last_error() -> str:
    return load().last_error()


def versions() -> tuple[int, int]:
    """(API, layout) of the loaded library."""
    lib = library()
    return int(lib.wsgw_ring_api_version()), int(lib.wsgw_ring_layout_version())


# ---- writer ---------------------------------------------------------------------------------
def create(
    path: bytes | None, capacity: int, max_topics: int, mode: int, flags: int
) -> tuple[int, int]:
    """(rc, handle); handle is 0 when rc < 0."""
    out = _vp()
    rc = int(library().wsgw_ring_create(path, capacity, max_topics, mode, flags, ctypes.byref(out)))
    return rc, int(out.value or 0)


def writer_fd(handle: int) -> int:
    return int(library(KEEP_GIL).wsgw_ring_writer_fd(handle))


def topic_register(handle: int, name: bytes) -> int:
    return int(library(KEEP_GIL).wsgw_ring_topic_register(handle, name, len(name)))


class WriteFn:
    """wsgw_ring_write and wsgw_ring_write_packed bound once: the per-call path is one call."""

    def __init__(self, handle: int) -> None:
        fast = library(KEEP_GIL)
        self._handle = handle
        self._write: Any = fast.wsgw_ring_write
        self._packed: Any = fast.wsgw_ring_write_packed

    def close(self) -> None:
        """Before the writer is freed: later calls return -EBADF instead of touching it."""
        self._write = self._packed = _closed

    def one(self, session_id: int, topic_id: int, ts_ns: int, payload: bytes) -> int:
        return int(self._write(self._handle, session_id, topic_id, ts_ns, payload, len(payload)))

    def packed(
        self,
        blob: bytes,
        lens: array[int],
        sessions: array[int],
        topics: array[int],
        ts: array[int] | None,
    ) -> int:
        """lens/sessions/topics: array('I'), ts: array('Q') or None; payloads back to back."""
        return int(
            self._packed(
                self._handle,
                blob,
                lens.buffer_info()[0],
                sessions.buffer_info()[0],
                topics.buffer_info()[0],
                ts.buffer_info()[0] if ts is not None else None,
                len(lens),
            )
        )


def _closed(*_args: object) -> int:
    return -errno.EBADF


def writer_info(handle: int) -> dict[str, int]:
    info = _RingInfo()
    library(KEEP_GIL).wsgw_ring_writer_info(handle, ctypes.byref(info))
    return {name: int(getattr(info, name)) for name in RING_INFO_FIELDS}


def writer_stats(handle: int) -> dict[str, int]:
    stats = _WriterStats()
    library(KEEP_GIL).wsgw_ring_writer_stats(handle, ctypes.byref(stats))
    return {name: int(getattr(stats, name)) for name in WRITER_STAT_FIELDS}


def set_wait_hint(handle: int, mode: int, spin_ns: int) -> int:
    return int(library(KEEP_GIL).wsgw_ring_set_wait_hint(handle, mode, spin_ns))


def set_writer_cpu(handle: int, cpu: int) -> int:
    return int(library(KEEP_GIL).wsgw_ring_set_writer_cpu(handle, cpu))


def writer_cpu(handle: int) -> int:
    """The CPU the writer published, -1: none."""
    return int(library(KEEP_GIL).wsgw_ring_writer_cpu(handle))


def wait_hint(handle: int) -> tuple[int, int]:
    """(mode, spin_ns) the writer recommends (WAIT_NONE: none)."""
    spin = ctypes.c_uint64()
    return int(library(KEEP_GIL).wsgw_ring_wait_hint(handle, ctypes.byref(spin))), int(spin.value)


def readers(handle: int) -> list[dict[str, int | str]]:
    """The reader table's occupied slots (READER_ENTRY_FIELDS and "name"); reclaims the
    slots of dead readers on the way. Reads /proc-free: one kill(pid, 0) per slot."""
    entries = (_ReaderEntry * MAX_READERS)()
    n = int(library().wsgw_ring_readers(handle, entries, MAX_READERS))
    found: list[dict[str, int | str]] = []
    for entry in entries[: max(n, 0)]:
        row: dict[str, int | str] = {
            name: int(getattr(entry, name)) for name in READER_ENTRY_FIELDS
        }
        row["name"] = bytes(entry.name).rstrip(b"\0").decode(errors="replace")
        found.append(row)
    return found


def close_reader(handle: int, slot: int, pid: int) -> int:
    return int(library(KEEP_GIL).wsgw_ring_close_reader(handle, slot, pid))


def writer_close(handle: int, unlink: bool) -> None:
    library().wsgw_ring_writer_close(handle, int(unlink))


# ---- reader ---------------------------------------------------------------------------------
def attach(path: bytes | None, fd: int, flags: int) -> tuple[int, int]:
    out = _vp()
    rc = int(library().wsgw_ring_attach(path, fd, flags, ctypes.byref(out)))
    return rc, int(out.value or 0)


class ReadBuffers:
    """One reader's read call with its descriptors and its arena, as memoryviews.

    After `read` returns n, `views[: n * VIEW_SIZE]` holds n packed struct wsgw_ring_view
    (VIEW_FORMAT) and `info` the u64[7] read info. The arena is an anonymous mmap owned by
    Python (zero pages until touched): views of it stay valid memory even after the reader
    is gone, and hold whatever the last read put there."""

    def __init__(self, handle: int, max_batch: int, arena_size: int) -> None:
        self._handle = handle
        self._read = library(KEEP_GIL).wsgw_ring_read
        self._read_wait = library().wsgw_ring_read_wait  # may block: releases the GIL
        self._views = (_View * max_batch)()
        self._info = (ctypes.c_uint64 * INFO_WORDS)()
        self._arena = mmap.mmap(-1, arena_size)
        self._arena_c = (ctypes.c_char * arena_size).from_buffer(self._arena)
        self._views_addr = ctypes.addressof(self._views)
        self._info_addr = ctypes.addressof(self._info)
        self._arena_addr = ctypes.addressof(self._arena_c)
        self.max_batch = max_batch
        self.arena_size = arena_size
        #: The read calls' arguments after max: the arena and the info.
        self._rest = (self._arena_addr, arena_size, self._info_addr)
        self.views = memoryview(self._views).cast("B")
        self.info = memoryview(self._info).cast("B").cast("Q")
        self.arena = memoryview(self._arena)
        self.raw = self._arena

    def read(self, max_count: int) -> int:
        return int(self._read(self._handle, self._views_addr, max_count, *self._rest))

    def read_wait(self, max_count: int, timeout_ns: int, spin_ns: int) -> int:
        """read, and when nothing came, wait (GIL released) and read again: one call
        (wsgw_ring_read_wait)."""
        return int(
            self._read_wait(
                self._handle, self._views_addr, max_count, *self._rest, timeout_ns, spin_ns
            )
        )


def wait(handle: int, timeout_ns: int, spin_ns: int) -> int:
    """Releases the GIL for the whole wait."""
    return int(library().wsgw_ring_wait(handle, timeout_ns, spin_ns))


def spin_adaptive(handle: int, cap_ns: int) -> int:
    """Releases the GIL for the spin (wsgw_ring_spin_adaptive)."""
    return int(library().wsgw_ring_spin_adaptive(handle, cap_ns))


def interrupt(handle: int) -> None:
    library(KEEP_GIL).wsgw_ring_reader_interrupt(handle)


def set_filter(handle: int, ids: list[int] | None, upto: int) -> int:
    """Deliver only ids among 0..upto (higher ids all pass); None delivers everything."""
    if ids is None:
        return int(library(KEEP_GIL).wsgw_ring_reader_filter(handle, None, 0, 0))
    arr = array("I", ids or [0])  # never an empty buffer: its address could be NULL
    return int(
        library(KEEP_GIL).wsgw_ring_reader_filter(handle, arr.buffer_info()[0], len(ids), upto)
    )


def seek(handle: int, oldest: bool) -> int:
    return int(library(KEEP_GIL).wsgw_ring_reader_seek(handle, int(oldest)))


def topic_name(handle: int, topic_id: int) -> str | None:
    buf = ctypes.create_string_buffer(TOPIC_NAME_MAX)
    n = int(library(KEEP_GIL).wsgw_ring_topic_name(handle, topic_id, buf, TOPIC_NAME_MAX))
    return buf.raw[:n].decode(errors="replace") if n > 0 else None


def reader_info(handle: int) -> dict[str, int]:
    info = _RingInfo()
    library(KEEP_GIL).wsgw_ring_reader_info(handle, ctypes.byref(info))
    return {name: int(getattr(info, name)) for name in RING_INFO_FIELDS}


def reader_stats(handle: int) -> dict[str, int]:
    stats = _ReaderStats()
    library(KEEP_GIL).wsgw_ring_reader_stats(handle, ctypes.byref(stats))
    return {name: int(getattr(stats, name)) for name in READER_STAT_FIELDS}


def next_seq(handle: int) -> int:
    return int(library(KEEP_GIL).wsgw_ring_reader_next_seq(handle))


def writer_alive(handle: int) -> int:
    return int(library(KEEP_GIL).wsgw_ring_writer_alive(handle))


def reader_slot(handle: int) -> int:
    """The reader's slot in the reader table, -1: none."""
    return int(library(KEEP_GIL).wsgw_ring_reader_slot(handle))


def reader_set_name(handle: int, name: bytes) -> int:
    return int(library(KEEP_GIL).wsgw_ring_reader_set_name(handle, name, len(name)))


def detach(handle: int) -> None:
    library().wsgw_ring_detach(handle)


# ---- benchmarks (GIL released: they run for a while) ---------------------------------------
def bench_write(handle: int, payload_len: int, count: int, batch: int) -> int:
    return int(
        bench_function(library(), "wsgw_ring_bench_write")(handle, payload_len, count, batch)
    )


def bench_rw(writer: int, reader: int, payload_len: int, count: int, batch: int) -> int:
    return int(
        bench_function(library(), "wsgw_ring_bench_rw")(writer, reader, payload_len, count, batch)
    )


def bench_read(handle: int, count: int, timeout_ns: int) -> tuple[int, list[int]]:
    """(rc, [delivered, lost, bytes, ns first..last])."""
    result = (ctypes.c_uint64 * 4)()
    rc = int(bench_function(library(), "wsgw_ring_bench_read")(handle, count, timeout_ns, result))
    return rc, [int(x) for x in result]


def bench_pace(handle: int, payload_len: int, count: int, period_ns: int) -> tuple[int, list[int]]:
    """(rc, [publishes, messages, largest publish, elapsed ns])."""
    result = (ctypes.c_uint64 * 4)()
    rc = int(
        bench_function(library(), "wsgw_ring_bench_pace")(
            handle, payload_len, count, period_ns, result
        )
    )
    return rc, [int(x) for x in result]


def bench_latency(
    handle: int, count: int, timeout_ns: int, spin_ns: int
) -> tuple[int, list[int], list[int]]:
    """(rc, [delivered, lost, wall ns, cpu ns, waits, wakeups, spin hits, disorder,
    involuntary context switches], latencies in ns of the delivered messages)."""
    result = (ctypes.c_uint64 * 9)()
    lat = (ctypes.c_uint64 * max(1, count))()
    rc = int(
        bench_function(library(), "wsgw_ring_bench_latency")(
            handle, count, timeout_ns, spin_ns, lat, result
        )
    )
    out = [int(x) for x in result]
    return rc, out, list(lat[: out[0]])

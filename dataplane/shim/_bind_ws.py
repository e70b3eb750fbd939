"""ctypes prototypes and typed wrappers for the WebSocket scan/mask area (ws_scan.c).

`dataplane.ws.scan` is the only user: it picks these wrappers when the shim loads and its
pure-Python twins otherwise. Buffers pass without copies: `bytes` as `c_char_p`, writable
buffers (bytearray) through `from_buffer`.
"""

from __future__ import annotations

import ctypes
from typing import Any

from dataplane.shim._loader import library, load

#: Words per frame in a scan result (WSGW_WS_SCAN_WORDS in wsgw_ws.h).
SCAN_WORDS = 4

_u64_p = ctypes.POINTER(ctypes.c_uint64)

PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_ws_scan": (
        ctypes.c_int,
        [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, _u64_p, ctypes.c_uint32, _u64_p],
    ),
    "wsgw_ws_scan_batch": (
        ctypes.c_int,
        [
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_size_t,
            ctypes.c_uint64,
            _u64_p,
            ctypes.c_void_p,
            ctypes.c_uint32,
            _u64_p,
        ],
    ),
    "wsgw_utf8_valid": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t]),
    "wsgw_ws_seq_check": (
        None,
        [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint64, _u64_p],
    ),
    "wsgw_ws_mask": (None, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]),
    "wsgw_ws_mask_copy": (
        None,
        [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t],
    ),
}


class CScanner:
    """`wsgw_ws_scan` with its own result arrays (one per connection: not thread-safe)."""

    def __init__(self, max_frames: int = 128) -> None:
        lib = library()
        self.max_frames = max_frames
        self._scan = lib.wsgw_ws_scan
        self._out = (ctypes.c_uint64 * (SCAN_WORDS * max_frames))()
        self._tail = (ctypes.c_uint64 * 3)()

    def scan(self, buf: bytes, start: int) -> tuple[list[int], int, int, int]:
        """(words, consumed, need, pending) exactly as `dataplane.ws.scan.scan_frames`."""
        count = self._scan(buf, start, len(buf), self._out, self.max_frames, self._tail)
        if count < 0:
            raise ValueError(f"wsgw_ws_scan: {load().last_error()}")
        tail = self._tail
        return self._out[: SCAN_WORDS * count], tail[0], tail[1], tail[2]


class CBatchScanner:
    """`wsgw_ws_scan_batch` with its own result arrays (one per connection: not
    thread-safe). `scan` returns what `dataplane.ws.scan.scan_batch` returns."""

    def __init__(self, max_frames: int = 4096) -> None:
        if max_frames < 1:
            raise ValueError("a batch scan needs max_frames >= 1")
        lib = library()
        self.max_frames = max_frames
        self._scan = lib.wsgw_ws_scan_batch
        self._spans = (ctypes.c_uint64 * (2 * max_frames))()
        self._spans_at = ctypes.addressof(self._spans)
        self._ops = (ctypes.c_uint8 * max_frames)()
        self._ops_at = ctypes.addressof(self._ops)
        self._tail = (ctypes.c_uint64 * 2)()

    def scan(self, buf: bytes, start: int, max_size: int) -> tuple[int, bytes, bytes, int, int]:
        """(count, spans, opcodes, stop offset, why): spans as native uint64 pairs."""
        count = self._scan(
            buf, start, len(buf), max_size, self._spans, self._ops_at, self.max_frames, self._tail
        )
        tail = self._tail
        if count <= 0:
            if count < 0:
                raise ValueError(f"wsgw_ws_scan_batch: {load().last_error()}")
            return 0, b"", b"", tail[0], tail[1]
        string_at = ctypes.string_at
        return (
            count,
            string_at(self._spans_at, 16 * count),
            string_at(self._ops_at, count),
            tail[0],
            tail[1],
        )


def utf8_valid(data: bytes) -> bool:
    """RFC 3629 validity, in C (the same verdict as Python's strict UTF-8 decoder)."""
    return bool(library().wsgw_utf8_valid(data, len(data)))


class SeqCheck:
    """`wsgw_ws_seq_check`: sequence numbers of a run of payloads checked in C."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._check = library().wsgw_ws_seq_check
        #: next expected sequence number, gaps, duplicates, wrong lengths (read and write)
        self.state = (ctypes.c_uint64 * 4)()

    def check(self, buf: bytes, spans: bytes, count: int) -> None:
        self._check(buf, spans, count, self.size, self.state)

    @property
    def next_seq(self) -> int:
        return int(self.state[0])

    @property
    def gaps(self) -> int:
        return int(self.state[1])

    @property
    def duplicates(self) -> int:
        return int(self.state[2])

    @property
    def bad_length(self) -> int:
        return int(self.state[3])


def mask_copy(data: bytes, key: bytes, phase: int = 0) -> bytes:
    """data XOR the repeated key, as new bytes (RFC 6455 section 5.3)."""
    size = len(data)
    out = ctypes.create_string_buffer(size)
    library().wsgw_ws_mask_copy(out, data, size, key, phase)
    return ctypes.string_at(out, size)


def mask_into(frame: bytearray, offset: int, data: bytes, key: bytes) -> None:
    """Write data XOR key into frame[offset:offset + len(data)] (frame already that long)."""
    size = len(data)
    view = (ctypes.c_char * len(frame)).from_buffer(frame)
    try:
        library().wsgw_ws_mask_copy(ctypes.addressof(view) + offset, data, size, key, 0)
    finally:
        del view


def mask_inplace(buf: bytearray, key: bytes, phase: int = 0, start: int = 0, end: int = -1) -> None:
    """XOR buf[start:end] with the key in place (end -1: to the end of buf)."""
    stop = len(buf) if end < 0 else end
    if stop <= start:
        return
    view = (ctypes.c_char * len(buf)).from_buffer(buf)
    try:
        library().wsgw_ws_mask(ctypes.addressof(view) + start, stop - start, key, phase)
    finally:
        del view

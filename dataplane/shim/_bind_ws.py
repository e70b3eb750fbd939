"""ctypes prototypes and typed wrappers for the WebSocket scan/mask area (ws_scan.c).

`dataplane.ws.scan` is the only user: it picks these wrappers when the shim loads and its
pure-Python twins otherwise. Buffers pass without copies: `bytes` as `c_char_p`, writable
buffers (bytearray) through `from_buffer`.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from dataplane.shim._loader import load

#: Words per frame in a scan result (WSGW_WS_SCAN_WORDS in wsgw_ws.h).
SCAN_WORDS = 4

_u64_p = ctypes.POINTER(ctypes.c_uint64)

PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_ws_scan": (
        ctypes.c_int,
        [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, _u64_p, ctypes.c_uint32, _u64_p],
    ),
    "wsgw_ws_mask": (None, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]),
    "wsgw_ws_mask_copy": (
        None,
        [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t],
    ),
}


@functools.cache
def _lib() -> ctypes.CDLL:
    """The loaded shim, looked up once (load() resolves paths on every call)."""
    return load().lib


class CScanner:
    """`wsgw_ws_scan` with its own result arrays (one per connection: not thread-safe)."""

    def __init__(self, max_frames: int = 128) -> None:
        lib = _lib()
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


def mask_copy(data: bytes, key: bytes, phase: int = 0) -> bytes:
    """data XOR the repeated key, as new bytes (RFC 6455 section 5.3)."""
    size = len(data)
    out = ctypes.create_string_buffer(size)
    _lib().wsgw_ws_mask_copy(out, data, size, key, phase)
    return ctypes.string_at(out, size)


def mask_into(frame: bytearray, offset: int, data: bytes, key: bytes) -> None:
    """Write data XOR key into frame[offset:offset + len(data)] (frame already that long)."""
    size = len(data)
    view = (ctypes.c_char * len(frame)).from_buffer(frame)
    try:
        _lib().wsgw_ws_mask_copy(ctypes.addressof(view) + offset, data, size, key, 0)
    finally:
        del view


def mask_inplace(buf: bytearray, key: bytes, phase: int = 0, start: int = 0, end: int = -1) -> None:
    """XOR buf[start:end] with the key in place (end -1: to the end of buf)."""
    stop = len(buf) if end < 0 else end
    if stop <= start:
        return
    view = (ctypes.c_char * len(buf)).from_buffer(buf)
    try:
        _lib().wsgw_ws_mask(ctypes.addressof(view) + start, stop - start, key, phase)
    finally:
        del view

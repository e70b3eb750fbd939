"""ctypes prototypes and a typed wrapper for the core NATS scan (nats_scan.c).

`gateway.client.nats_core` is the only user: its parser takes the plain messages of a read
from here when the shim loads, and reads everything else (and everything, without the shim)
itself. The buffer passes without a copy (a bytearray through `from_buffer`).
"""

from __future__ import annotations

import ctypes
from typing import Any

from dataplane.shim._loader import library, load

#: Words per message in a scan result (WSGW_NATS_SCAN_WORDS in wsgw_nats.h).
SCAN_WORDS = 9
#: A header number the scan leaves to the caller (WSGW_NATS_ASK).
ASK = (1 << 64) - 1

_u64_p = ctypes.POINTER(ctypes.c_uint64)

PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_nats_scan": (
        ctypes.c_int,
        [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_size_t,
            ctypes.c_uint64,
            ctypes.c_char_p,
            ctypes.c_char_p,
            _u64_p,
            ctypes.c_uint32,
            _u64_p,
        ],
    ),
}


class NatsScanner:
    """`wsgw_nats_scan` with its own result arrays (one per parser: not thread-safe)."""

    WORDS = SCAN_WORDS
    ASK = ASK

    def __init__(
        self, max_payload: int, numbers: tuple[bytes, ...] = (), max_msgs: int = 1024
    ) -> None:
        """numbers: at most two header names whose values the scan reads as numbers."""
        if len(numbers) > 2 or any(not name or b"\0" in name for name in numbers):
            raise ValueError(f"at most two header names, not empty: {numbers!r}")
        self._scan = library().wsgw_nats_scan
        self.max_payload = max_payload
        self._numbers = (*numbers, None, None)[:2]
        self.max_msgs = max_msgs
        self._out = (ctypes.c_uint64 * (SCAN_WORDS * max_msgs))()
        self._consumed = ctypes.c_uint64()

    def scan(self, buf: bytearray, start: int) -> tuple[list[int], int]:
        """(words, consumed): SCAN_WORDS words per plain message from start on (the header
        numbers ASK, 0 or the value), and the offset past the last of them."""
        size = len(buf)
        if size == 0:
            return [], start
        view = (ctypes.c_char * size).from_buffer(buf)
        try:
            count = self._scan(
                ctypes.addressof(view),
                start,
                size,
                self.max_payload,
                *self._numbers,
                self._out,
                self.max_msgs,
                ctypes.byref(self._consumed),
            )
        finally:
            del view  # the bytearray may be resized again
        if count < 0:
            raise ValueError(f"wsgw_nats_scan: {load().last_error()}")
        return self._out[: SCAN_WORDS * count], self._consumed.value

"""ctypes prototypes and a typed wrapper for the C order book (book.c, wsgw_book.h).

`CBook` owns one `struct wsgw_book` and a reusable output buffer. Its calls go through the
GIL-keeping handle (KEEP_GIL): each is a few microseconds of C at most, shorter than a
GIL release and re-acquire, and the per-message one is the books' hot path.
"""

from __future__ import annotations

import ctypes
from array import array
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from dataplane.errors import DataplaneError
from dataplane.shim._loader import KEEP_GIL, library
from dataplane.shim._loader import load as load_shim

# enum wsgw_book_venue
VENUES = {"binance": 1, "okx": 2, "bybit": 3, "kraken": 4, "coinbase": 5, "bitstamp": 6}
# enum wsgw_book_side
BIDS, ASKS = 0, 1
# enum wsgw_book_status
APPLIED, IGNORED, GAP, NOT_JOINED, UNSUPPORTED, OTHER_SYMBOL, NO_SPACE, CHECKSUM = range(8)
MALFORMED, TOO_DEEP = -1, -2
STATUS_NAMES = {
    APPLIED: "applied",
    IGNORED: "ignored",
    GAP: "gap",
    NOT_JOINED: "not_joined",
    UNSUPPORTED: "unsupported",
    OTHER_SYMBOL: "other_symbol",
    NO_SPACE: "no_space",
    CHECKSUM: "checksum",
    MALFORMED: "malformed",
    TOO_DEEP: "too_deep",
}
# flags
OUT_JSON, OUT_BINARY = 0x1, 0x2
# enum wsgw_book_info
(
    INFO_FIRST_SEQ,
    INFO_SEQ,
    INFO_PREV_SEQ,
    INFO_JSON_LEN,
    INFO_BINARY_LEN,
    INFO_CRC_EXPECTED,
    INFO_CRC_GOT,
    INFO_N,
) = range(8)
SYMBOL_MAX = 64

_p = ctypes.c_void_p
_i64p = ctypes.POINTER(ctypes.c_int64)

PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_book_new": (_p, [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32]),
    "wsgw_book_free": (None, [_p]),
    "wsgw_book_clear": (None, [_p]),
    "wsgw_book_seq": (ctypes.c_int64, [_p]),
    "wsgw_book_set_seq": (None, [_p, ctypes.c_int64]),
    "wsgw_book_set_joined": (None, [_p, ctypes.c_int]),
    "wsgw_book_set_depth": (None, [_p, ctypes.c_uint32]),
    "wsgw_book_count": (ctypes.c_uint32, [_p, ctypes.c_uint32]),
    "wsgw_book_scale": (ctypes.c_uint32, [_p, ctypes.c_uint32]),
    "wsgw_book_update": (ctypes.c_int, [_p, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32]),
    "wsgw_book_truncate": (None, [_p, ctypes.c_uint32]),
    "wsgw_book_top_json": (
        ctypes.c_int64,
        [_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_uint32],
    ),
    "wsgw_book_on_message": (
        ctypes.c_int,
        [
            _p,
            ctypes.c_char_p,
            ctypes.c_uint32,
            ctypes.c_int64,
            ctypes.c_uint32,
            ctypes.c_void_p,
            ctypes.c_uint32,
            _i64p,
        ],
    ),
    "wsgw_book_on_batch": (
        ctypes.c_uint32,
        [
            _p,
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.c_uint32,
            ctypes.c_void_p,
            ctypes.c_uint32,
            ctypes.c_void_p,
            ctypes.c_uint32,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ],
    ),
}


class BookError(DataplaneError):
    """A C book that cannot be made (a venue not done in C, a symbol too long, no memory)."""


class CBook:
    """One symbol's book in C. `on_message` is the per-message path; the rest serve the
    Python side (snapshots, the Python rules' updates, reads)."""

    def __init__(self, venue: str, symbol: str, capacity: int = 1 << 16) -> None:
        lib = library(KEEP_GIL)
        code = VENUES.get(venue)
        if code is None:
            raise BookError(f"venue {venue!r} has no C book: one of {', '.join(VENUES)}")
        raw = symbol.encode()
        handle = lib.wsgw_book_new(code, raw, len(raw))
        if not handle:
            raise BookError(load_shim().last_error())
        self._lib = lib
        self._handle = handle
        self._out = ctypes.create_string_buffer(capacity)
        self._cap = capacity
        self._info = (ctypes.c_int64 * INFO_N)()
        self._on_message = lib.wsgw_book_on_message
        self._on_batch = lib.wsgw_book_on_batch
        self._lens = array("q")
        self._statuses = array("b")

    def __del__(self) -> None:
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            self._lib.wsgw_book_free(handle)

    def on_message(self, msg: bytes, recv_ns: int, flags: int) -> tuple[int, bytes, bytes]:
        """(status, JSON delta, MessagePack delta); the encodings asked in flags, b"" else."""
        info = self._info
        status: int = self._on_message(
            self._handle, msg, len(msg), recv_ns, flags, self._out, self._cap, info
        )
        if status == NO_SPACE:
            self._grow(info[INFO_JSON_LEN])
            return self.on_message(msg, recv_ns, flags)
        if status != APPLIED or not flags:
            return status, b"", b""
        n_json, n_bin = info[INFO_JSON_LEN], info[INFO_BINARY_LEN]
        data = self._out.raw[: n_json + n_bin] if n_json + n_bin > 4096 else None
        if data is None:
            data = ctypes.string_at(self._out, n_json + n_bin)
        return status, data[:n_json], data[n_json:]

    def on_batch(
        self, raws: Sequence[bytes], recv_ns: Sequence[int], flags: int
    ) -> tuple[int, array[int], array[int], bytes]:
        """A burst in one C call (the crossing costs more than a message's work): (how many
        went, statuses, per message the JSON and MessagePack lengths, the deltas back to
        back). Stops before the first message that is neither APPLIED nor IGNORED: its
        status is statuses[went]; NO_SPACE is handled here."""
        n = len(raws)
        if len(self._statuses) < n:
            self._statuses = array("b", bytes(n))
            self._lens = array("q", bytes(16 * n))
        offsets = array("I", accumulate(map(len, raws), initial=0))
        stamps = array("q", recv_ns)
        statuses, lens = self._statuses, self._lens
        args = (
            self._handle,
            b"".join(raws),
            offsets.buffer_info()[0],
            n,
            stamps.buffer_info()[0],
            flags,
        )
        sinks = (lens.buffer_info()[0], statuses.buffer_info()[0])
        went = int(self._on_batch(*args, self._out, self._cap, *sinks))
        if went == 0 and n and statuses[0] == NO_SPACE:
            self._grow(lens[0])
            went = int(self._on_batch(*args, self._out, self._cap, *sinks))
        total = sum(lens[: 2 * went]) if went else 0
        data = ctypes.string_at(self._out, total) if total else b""
        return went, statuses, lens, data

    def info(self) -> tuple[int, int, int]:
        """(first_seq, seq, prev_seq) of the last message read by on_message."""
        info = self._info
        return info[INFO_FIRST_SEQ], info[INFO_SEQ], info[INFO_PREV_SEQ]

    def checksums(self) -> tuple[int, int]:
        """(the message's, the book's) after on_message gave CHECKSUM."""
        return self._info[INFO_CRC_EXPECTED], self._info[INFO_CRC_GOT]

    def set_depth(self, depth: int) -> None:
        """Keep the best depth levels a side after each message (0: all)."""
        self._lib.wsgw_book_set_depth(self._handle, depth)

    def _grow(self, need: int) -> None:
        self._cap = max(need, 2 * self._cap)
        self._out = ctypes.create_string_buffer(self._cap)

    def clear(self) -> None:
        self._lib.wsgw_book_clear(self._handle)

    @property
    def seq(self) -> int:
        return int(self._lib.wsgw_book_seq(self._handle))

    @seq.setter
    def seq(self, value: int) -> None:
        self._lib.wsgw_book_set_seq(self._handle, value)

    def set_joined(self, joined: bool) -> None:
        self._lib.wsgw_book_set_joined(self._handle, int(joined))

    def count(self, side: int) -> int:
        return int(self._lib.wsgw_book_count(self._handle, side))

    def scales(self) -> tuple[int, int]:
        """(price, size) scales: decimal places the book's integers carry."""
        return int(self._lib.wsgw_book_scale(self._handle, 0)), int(
            self._lib.wsgw_book_scale(self._handle, 1)
        )

    def update(self, side: int, levels_json: bytes) -> int:
        """Apply `[["price","size"],...]` to a side; the status (nothing applied unless
        APPLIED)."""
        return int(self._lib.wsgw_book_update(self._handle, side, levels_json, len(levels_json)))

    def truncate(self, depth: int) -> None:
        self._lib.wsgw_book_truncate(self._handle, depth)

    def top_json(self, side: int, n: int) -> bytes:
        """The best n levels of a side as `[["price","size"],...]`. Its own buffer: a
        reader (GET /v1/books) may run between another thread's on_message and its copy."""
        n = min(n, self.count(side))
        out = ctypes.create_string_buffer(2 + 48 * n)
        got = int(self._lib.wsgw_book_top_json(self._handle, side, n, out, len(out)))
        return out.raw[:got]

"""Frame scanning and masking (RFC 6455 sections 5.2 and 5.3): the per-byte work.

The C shim (`ws_scan.c`) does it when it loads; the pure-Python functions here are its twin
(same results, tested for equality) and stand in where the shim is missing. A scan result is
`(words, consumed, need, pending)`; `words` holds SCAN_WORDS ints per complete frame:
`info` (first header byte | MASKED | header length << HEADER_SHIFT), payload offset,
payload length, masking key (little-endian int of the 4 key bytes, 0 when unmasked).
See wsgw_ws.h for the exact contract.
"""

from __future__ import annotations

import array
import os
import threading
from collections.abc import Callable
from typing import Literal, Protocol

SCAN_WORDS = 4
FIN = 0x80
RSV1 = 0x40
RSV2 = 0x20
RSV3 = 0x10
OPCODE = 0x0F
MASKED = 0x100
HEADER_SHIFT = 16
UINT64_MAX = (1 << 64) - 1
DEFAULT_MAX_FRAMES = 128

# Why scan_batch stopped (WSGW_WS_BATCH_* in wsgw_ws.h).
BATCH_END = 0  # the buffer ends on a frame boundary
BATCH_FULL = 1  # max_frames described: scan again from the stop offset
BATCH_PARTIAL = 2  # the next frame could be batched but is not wholly in the buffer
BATCH_OTHER = 3  # the next frame is for the per-frame code
DEFAULT_MAX_BATCH = 4096

ScanResult = tuple[list[int], int, int, int]
#: (count, spans: native uint64 (offset, length) pairs, opcodes: one byte each, stop, why)
BatchResult = tuple[int, bytes, bytes, int, int]
BackendName = Literal["auto", "c", "python"]


class Scanner(Protocol):
    max_frames: int

    def scan(self, buf: bytes, start: int) -> ScanResult: ...


def scan_frames(buf: bytes, start: int = 0, max_frames: int = DEFAULT_MAX_FRAMES) -> ScanResult:
    """Pure-Python `wsgw_ws_scan`: one struct-free pass per frame header, no per-byte loop."""
    if start > len(buf):
        raise ValueError(f"scan start {start} beyond buffer of {len(buf)} bytes")
    words: list[int] = []
    pos = start
    end = len(buf)
    need = 0
    pending = UINT64_MAX
    count = 0
    while count < max_frames:
        avail = end - pos
        if avail == 0:
            break
        if avail < 2:
            need = 2
            break
        b0 = buf[pos]
        b1 = buf[pos + 1]
        plen = b1 & 0x7F
        hlen = 2
        if plen == 126:
            hlen = 4
        elif plen == 127:
            hlen = 10
        if b1 & 0x80:
            hlen += 4
        if avail < hlen:
            need = hlen
            break
        if plen == 126:
            plen = int.from_bytes(buf[pos + 2 : pos + 4], "big")
        elif plen == 127:
            plen = int.from_bytes(buf[pos + 2 : pos + 10], "big")
        if plen > avail - hlen:
            need = min(plen + hlen, UINT64_MAX)
            pending = plen
            break
        key = int.from_bytes(buf[pos + hlen - 4 : pos + hlen], "little") if b1 & 0x80 else 0
        words += (b0 | (b1 & 0x80) << 1 | hlen << HEADER_SHIFT, pos + hlen, plen, key)
        pos += hlen + plen
        count += 1
    return words, pos, need, pending


def _utf8_ok(data: bytes) -> bool:
    """RFC 3629 validity, by Python's own decoder (the batch scan's twin does it in C)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def scan_batch(  # noqa: PLR0912  mirrors the C loop stop for stop (the differential tests)
    buf: bytes, start: int, max_size: int, max_frames: int = DEFAULT_MAX_BATCH
) -> BatchResult:
    """Pure-Python `wsgw_ws_scan_batch`: the run of complete, final, unmasked, RSV-clear
    text/binary frames of at most max_size bytes (text: valid UTF-8) from start."""
    if start > len(buf):
        raise ValueError(f"scan start {start} beyond buffer of {len(buf)} bytes")
    spans = array.array("Q")
    ops = bytearray()
    pos = start
    end = len(buf)
    why = BATCH_END
    while True:
        avail = end - pos
        if avail == 0:
            why = BATCH_END
            break
        if len(ops) == max_frames:
            why = BATCH_FULL
            break
        b0 = buf[pos]
        if b0 not in (0x81, 0x82):
            why = BATCH_OTHER
            break
        if avail < 2:
            why = BATCH_PARTIAL
            break
        b1 = buf[pos + 1]
        if b1 & 0x80:
            why = BATCH_OTHER
            break
        plen = b1
        hlen = 4 if plen == 126 else 10 if plen == 127 else 2
        if avail < hlen:
            why = BATCH_PARTIAL
            break
        if hlen > 2:
            plen = int.from_bytes(buf[pos + 2 : pos + hlen], "big")
        if plen > max_size:
            why = BATCH_OTHER
            break
        if plen > avail - hlen:
            why = BATCH_PARTIAL
            break
        if b0 == 0x81:
            payload = buf[pos + hlen : pos + hlen + plen]
            if not (payload.isascii() or _utf8_ok(payload)):
                why = BATCH_OTHER
                break
        spans.append(pos + hlen)
        spans.append(plen)
        ops.append(b0 & OPCODE)
        pos += hlen + plen
    return len(ops), spans.tobytes(), bytes(ops), pos, why


class BatchScanner(Protocol):
    max_frames: int

    def scan(self, buf: bytes, start: int, max_size: int) -> BatchResult: ...


class PyBatchScanner:
    """`scan_batch` behind the BatchScanner interface."""

    def __init__(self, max_frames: int = DEFAULT_MAX_BATCH) -> None:
        if max_frames < 1:
            raise ValueError("a batch scan needs max_frames >= 1")
        self.max_frames = max_frames

    def scan(self, buf: bytes, start: int, max_size: int) -> BatchResult:
        return scan_batch(buf, start, max_size, self.max_frames)


def make_batch_scanner(
    backend: BackendName = "auto", max_frames: int = DEFAULT_MAX_BATCH
) -> BatchScanner:
    if resolve(backend) == "c":
        from dataplane.shim import WsBatchScanner

        return WsBatchScanner(max_frames)
    return PyBatchScanner(max_frames)


class PyScanner:
    """`scan_frames` behind the Scanner interface."""

    def __init__(self, max_frames: int = DEFAULT_MAX_FRAMES) -> None:
        self.max_frames = max_frames

    def scan(self, buf: bytes, start: int) -> ScanResult:
        return scan_frames(buf, start, self.max_frames)


def mask_py(data: bytes, key: bytes, phase: int = 0) -> bytes:
    """data XOR the repeated 4-byte key as one big-integer XOR (no per-byte loop)."""
    size = len(data)
    if size == 0:
        return b""
    shift = phase & 3
    rotated = key[shift:] + key[:shift]
    stream = (rotated * (size // 4 + 1))[:size]
    return (int.from_bytes(data, "little") ^ int.from_bytes(stream, "little")).to_bytes(
        size, "little"
    )


def mask_inplace_py(buf: bytearray, key: bytes, phase: int = 0) -> None:
    buf[:] = mask_py(bytes(buf), key, phase)


def _c_available() -> bool:
    """Whether the shim loads (asked once per process: `dataplane.shim.available`)."""
    from dataplane.shim import available

    return available("WebSocket frame scan falls back to pure Python")


def resolve(backend: BackendName = "auto") -> Literal["c", "python"]:
    """The backend to use: WSGW_WS_SCAN=python|c overrides "auto"; "c" needs the shim."""
    if backend == "auto":
        forced = os.environ.get("WSGW_WS_SCAN", "").lower()
        if forced in ("c", "python"):
            backend = forced  # type: ignore[assignment]
        else:
            return "c" if _c_available() else "python"
    if backend == "c" and not _c_available():
        from dataplane.shim import load

        load()  # raises the loader's typed ShimError that says what to run
    return backend  # type: ignore[return-value]


def make_scanner(backend: BackendName = "auto", max_frames: int = DEFAULT_MAX_FRAMES) -> Scanner:
    if resolve(backend) == "c":
        from dataplane.shim import WsScanner

        return WsScanner(max_frames)
    return PyScanner(max_frames)


_per_thread = threading.local()


def shared_scanners(
    backend: BackendName = "auto", *, batch: bool = False
) -> tuple[Scanner, BatchScanner | None, Scanner | None]:
    """(frame scanner, batch scanner, one-frame scanner) for every connection of this
    thread: a scan keeps nothing past the call (its results are copies) and nothing here
    calls back into Python, so the connections of one thread can share them. Built per
    connection, their C result arrays (64 KiB for the batch) cost each open ~15 us."""
    cache: dict[tuple[str, bool], tuple[Scanner, BatchScanner | None, Scanner | None]] | None
    cache = getattr(_per_thread, "scanners", None)
    if cache is None:
        cache = _per_thread.scanners = {}
    key = (resolve(backend), batch)
    found = cache.get(key)
    if found is None:
        found = cache[key] = (
            make_scanner(backend),
            make_batch_scanner(backend) if batch else None,
            make_scanner(backend, max_frames=1) if batch else None,
        )
    return found


#: Below this size the big-integer XOR beats a ctypes call (see bench_ws_scan).
C_MASK_THRESHOLD = 512


def masker(backend: BackendName = "auto") -> Callable[[bytes, bytes], bytes]:
    """A `mask(data, key) -> bytes` function for the backend (C for large payloads)."""
    if resolve(backend) == "python":
        return mask_py
    from dataplane.shim import ws_mask_copy

    def mask(data: bytes, key: bytes) -> bytes:
        return ws_mask_copy(data, key) if len(data) >= C_MASK_THRESHOLD else mask_py(data, key)

    return mask

"""The Internet checksum (RFC 1071), computed by the C shim.

`inet_checksum` returns the value to store in (or expect from) a checksum field read with
struct '!H'; over data that already holds a correct checksum it returns 0.
`pseudo_header_sum` is the unfolded partial sum of the TCP/UDP pseudo header (RFC 9293
section 3.1, RFC 768): pass it as `partial` to chain. Partial sums are in the shim's native
word order, so chain them only through these functions, and only after even-length pieces.
"""

from __future__ import annotations

import struct
import sys

from dataplane.shim import Shim, load
from dataplane.wire._common import Buffer

# src, dst, zero, protocol, length: RFC 9293 section 3.1 "pseudo header".
_PSEUDO = struct.Struct("!IIBBH")

_shim: Shim | None = None


def _get_shim() -> Shim:
    # Loaded on first use, so importing the wire layer never needs the built library.
    global _shim
    if _shim is None:
        _shim = load()
    return _shim


def inet_checksum(data: Buffer, partial: int = 0) -> int:
    """RFC 1071 checksum of data plus an unfolded partial sum, as read with struct '!H'."""
    shim = _shim or _get_shim()
    return shim.checksum(data if isinstance(data, bytes) else bytes(data), partial)


def csum_partial(data: Buffer, partial: int = 0) -> int:
    """Unfolded sum of data added to partial; data must have even length unless it is last."""
    shim = _shim or _get_shim()
    return shim.csum_partial(data if isinstance(data, bytes) else bytes(data), partial)


def pseudo_header_sum(src: int, dst: int, protocol: int, length: int) -> int:
    """Unfolded sum of the IPv4 pseudo header for a TCP or UDP checksum."""
    try:
        header = _PSEUDO.pack(src, dst, 0, protocol, length)
    except struct.error as exc:
        raise ValueError(f"pseudo header field out of range: {exc}") from exc
    shim = _shim or _get_shim()
    return shim.csum_partial(header, 0)


#: Below this many bytes the sum is cheaper in Python (one bignum reduction, no ctypes call).
_SMALL = 512


def sum16(data: bytes) -> int:
    """The one's complement sum of data's 16-bit big-endian words (an odd last byte padded
    with zero), reduced modulo 0xFFFF: add such sums and plain 16-bit fields, reduce once
    more, and `(-total) % 0xFFFF` is the checksum field (RFC 1071; 2**16 = 1 mod 0xFFFF,
    so the end-around carry is the modulo). Large buffers go through the shim's C sum."""
    size = len(data)
    if size <= _SMALL:
        value = int.from_bytes(data, "big")
        return (value << 8 if size & 1 else value) % 0xFFFF
    shim = _shim or _get_shim()
    native = shim.csum_partial(data, 0)
    native = (native & 0xFFFF) + (native >> 16)
    native = (native & 0xFFFF) + (native >> 16)
    # The shim sums in the machine's word order: swap the folded sum back to network order
    # (RFC 1071 section 2(B): byte order independence).
    return ((native & 0xFF) << 8 | native >> 8) % 0xFFFF if _LITTLE else native % 0xFFFF


_LITTLE = sys.byteorder == "little"

__all__ = ["csum_partial", "inet_checksum", "pseudo_header_sum", "sum16"]

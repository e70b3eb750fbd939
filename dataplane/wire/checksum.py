"""The Internet checksum (RFC 1071), computed by the C shim.

`inet_checksum` returns the value to store in (or expect from) a checksum field read with
struct '!H'; over data that already holds a correct checksum it returns 0.
`pseudo_header_sum` is the unfolded partial sum of the TCP/UDP pseudo header (RFC 9293
section 3.1, RFC 768): pass it as `partial` to chain. Partial sums are in the shim's native
word order, so chain them only through these functions, and only after even-length pieces.
"""

from __future__ import annotations

import struct

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


__all__ = ["csum_partial", "inet_checksum", "pseudo_header_sum"]

"""The wire layer's exceptions: every parser raises only these for bad input.

The split tells the caller what to count: a `TruncatedError` or `MalformedError` is a
broken packet, a `ChecksumError` a corrupted one, an `UnsupportedError` a valid packet
that this stack chooses not to handle (IP fragments, QinQ, non-Ethernet ARP).
"""

from __future__ import annotations

from dataplane.errors import DataplaneError


class WireError(DataplaneError):
    """Bytes from the network that do not parse into a representation."""


class TruncatedError(WireError):
    """The buffer ends before the header or the length its own fields announce."""


class MalformedError(WireError):
    """A field holds a value its RFC forbids (bad version, length, option length...)."""


class ChecksumError(WireError):
    """The Internet checksum (RFC 1071) over the header or segment does not verify."""


class UnsupportedError(WireError):
    """Well-formed, but outside what this stack handles; count it and drop it."""


__all__ = ["ChecksumError", "MalformedError", "TruncatedError", "UnsupportedError", "WireError"]

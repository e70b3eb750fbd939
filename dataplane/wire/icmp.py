"""ICMP messages (RFC 792) for IPv4.

Echo request and reply carry an identifier and a sequence number; every other type is
parsed with ident = seq = 0 and the rest of the message (the 4 bytes after the checksum,
then the data: for errors, the offending IP header and 8 bytes of its payload) as payload.
The checksum covers the whole message (RFC 792 "Checksum").
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dataplane.wire._common import Buffer, as_bytes
from dataplane.wire.checksum import inet_checksum
from dataplane.wire.errors import ChecksumError, TruncatedError

TYPE_ECHO_REPLY = 0
TYPE_DEST_UNREACHABLE = 3
TYPE_ECHO_REQUEST = 8
TYPE_TIME_EXCEEDED = 11
#: Destination-unreachable code for "fragmentation needed and DF set" (RFC 1191).
CODE_FRAG_NEEDED = 4

# Field offsets: type 0, code 1, checksum 2, then ident 4 and seq 6 for echo messages.
_HEADER = struct.Struct("!BBH")
_ECHO = struct.Struct("!BBHHH")
_CHECKSUM = struct.Struct("!H")
_CHECKSUM_OFFSET = 2
HEADER_LEN = _ECHO.size  # 8: every ICMP message has at least these
_ECHO_TYPES = frozenset({TYPE_ECHO_REQUEST, TYPE_ECHO_REPLY})


@dataclass(frozen=True, slots=True)
class IcmpRepr:
    """One ICMP message; see the module docstring for what `payload` holds."""

    type: int
    code: int
    ident: int
    seq: int
    payload: bytes

    @property
    def is_echo(self) -> bool:
        return self.type in _ECHO_TYPES

    def echo_reply(self) -> IcmpRepr:
        """The reply to this echo request (RFC 792: same ident, seq and data)."""
        if self.type != TYPE_ECHO_REQUEST:
            raise ValueError(f"ICMP type {self.type} is not an echo request")
        return IcmpRepr(TYPE_ECHO_REPLY, 0, self.ident, self.seq, self.payload)

    @classmethod
    def parse(cls, message: Buffer, *, verify_checksum: bool = True) -> IcmpRepr:
        """The IPv4 payload of a protocol-1 packet."""
        data = as_bytes(message)
        if len(data) < HEADER_LEN:
            raise TruncatedError(f"ICMP message of {len(data)} bytes, needs {HEADER_LEN}")
        if verify_checksum and inet_checksum(data) != 0:
            raise ChecksumError("ICMP checksum does not verify")
        type_, code, _, ident, seq = _ECHO.unpack_from(data, 0)
        if type_ in _ECHO_TYPES:
            return cls(type_, code, ident, seq, data[HEADER_LEN:])
        return cls(type_, code, 0, 0, data[_HEADER.size :])

    def emit(self) -> bytes:
        try:
            if self.is_echo:
                message = bytearray(_ECHO.pack(self.type, self.code, 0, self.ident, self.seq))
            else:
                if self.ident or self.seq:
                    raise ValueError(f"ICMP type {self.type} has no ident/seq fields")
                if len(self.payload) < HEADER_LEN - _HEADER.size:
                    raise ValueError("a non-echo ICMP payload starts with 4 header bytes")
                message = bytearray(_HEADER.pack(self.type, self.code, 0))
        except struct.error as exc:
            raise ValueError(f"ICMP field out of range: {exc}") from exc
        message += self.payload
        packed = bytes(message)
        _CHECKSUM.pack_into(message, _CHECKSUM_OFFSET, inet_checksum(packed))
        return bytes(message)


__all__ = [
    "CODE_FRAG_NEEDED",
    "HEADER_LEN",
    "TYPE_DEST_UNREACHABLE",
    "TYPE_ECHO_REPLY",
    "TYPE_ECHO_REQUEST",
    "TYPE_TIME_EXCEEDED",
    "IcmpRepr",
]

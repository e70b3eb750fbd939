"""IPv4 headers (RFC 791 section 3.1), without fragmentation.

Parsing verifies the header checksum (RFC 1071), skips options (IHL > 5) and cuts the
payload at the total length, so link-layer padding never reaches the transport. This stack
neither sends nor reassembles fragments: a fragment raises `UnsupportedError` for the
caller to count and drop. Emission writes a 20-byte header without options.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dataplane.wire._common import Buffer, as_view
from dataplane.wire.checksum import inet_checksum, sum16
from dataplane.wire.errors import (
    ChecksumError,
    MalformedError,
    TruncatedError,
    UnsupportedError,
)

#: The protocol field's numbers (IANA); tcp and udp take theirs for the pseudo header.
PROTO_ICMP = 1
PROTO_TCP = 6
PROTO_UDP = 17

# Field offsets: version/IHL 0, DSCP/ECN 1, total length 2, identification 4,
# flags/fragment offset 6, TTL 8, protocol 9, header checksum 10, source 12, destination 16.
_HEADER = struct.Struct("!BBHHHBBHII")
_CHECKSUM = struct.Struct("!H")
_CHECKSUM_OFFSET = 10
HEADER_LEN = _HEADER.size  # 20
MAX_HEADER_LEN = 60
MAX_PACKET_LEN = 0xFFFF

_FLAG_DF = 0x4000
_FLAG_MF = 0x2000
_FRAG_OFFSET_MASK = 0x1FFF


@dataclass(frozen=True, slots=True)
class Ipv4Repr:
    """An IPv4 header as the stack sees it: addresses are ints, payload_len excludes the
    header. Fields that parsing drops (options, the reserved flag) are not represented."""

    src: int
    dst: int
    protocol: int
    payload_len: int
    ttl: int = 64
    ident: int = 0
    dont_fragment: bool = True
    dscp_ecn: int = 0

    @classmethod
    def parse(cls, packet: Buffer, *, verify_checksum: bool = True) -> tuple[Ipv4Repr, memoryview]:
        """The header and a zero-copy view of exactly `payload_len` payload bytes."""
        view = as_view(packet)
        size = len(view)
        if size < HEADER_LEN:
            raise TruncatedError(f"IPv4 packet of {size} bytes, header needs {HEADER_LEN}")
        (ver_ihl, dscp_ecn, total_len, ident, flags_frag, ttl, protocol, _, src, dst) = (
            _HEADER.unpack_from(view, 0)
        )
        if ver_ihl >> 4 != 4:
            raise MalformedError(f"IP version {ver_ihl >> 4} in an IPv4 packet")
        header_len = (ver_ihl & 0x0F) * 4
        if header_len < HEADER_LEN:
            raise MalformedError(f"IPv4 header length {header_len} is below 20")
        if header_len > size:
            raise TruncatedError(f"IPv4 header of {header_len} bytes in a {size}-byte buffer")
        # A header that verifies sums to 0xFFFF, 0 modulo 0xFFFF (it is never all zeros:
        # the version is 4). Summed in Python: cheaper than a C call for 20 bytes.
        if verify_checksum and sum16(view[:header_len].tobytes()) != 0:
            raise ChecksumError("IPv4 header checksum does not verify")
        if total_len < header_len:
            raise MalformedError(f"IPv4 total length {total_len} below header length")
        if total_len > size:
            raise TruncatedError(f"IPv4 total length {total_len} exceeds the {size}-byte buffer")
        if flags_frag & (_FLAG_MF | _FRAG_OFFSET_MASK):
            raise UnsupportedError(
                f"IPv4 fragment (MF={int(bool(flags_frag & _FLAG_MF))}, "
                f"offset={(flags_frag & _FRAG_OFFSET_MASK) * 8}): no reassembly"
            )
        repr_ = cls(
            src,
            dst,
            protocol,
            total_len - header_len,
            ttl,
            ident,
            bool(flags_frag & _FLAG_DF),
            dscp_ecn,
        )
        return repr_, view[header_len:total_len]

    def emit_header(self) -> bytes:
        """The 20-byte header, checksum filled in."""
        if not 0 <= self.payload_len <= MAX_PACKET_LEN - HEADER_LEN:
            raise ValueError(f"IPv4 payload of {self.payload_len} bytes does not fit")
        try:
            header = bytearray(
                _HEADER.pack(
                    0x45,
                    self.dscp_ecn,
                    HEADER_LEN + self.payload_len,
                    self.ident,
                    _FLAG_DF if self.dont_fragment else 0,
                    self.ttl,
                    self.protocol,
                    0,
                    self.src,
                    self.dst,
                )
            )
        except struct.error as exc:
            raise ValueError(f"IPv4 field out of range: {exc}") from exc
        _CHECKSUM.pack_into(header, _CHECKSUM_OFFSET, inet_checksum(bytes(header)))
        return bytes(header)

    def emit(self, payload: Buffer) -> bytes:
        """Header and payload; the payload must be exactly `payload_len` bytes."""
        if len(payload) != self.payload_len:
            raise ValueError(
                f"payload of {len(payload)} bytes for an Ipv4Repr of payload_len {self.payload_len}"
            )
        return self.emit_header() + payload


__all__ = [
    "HEADER_LEN",
    "MAX_PACKET_LEN",
    "PROTO_ICMP",
    "PROTO_TCP",
    "PROTO_UDP",
    "Ipv4Repr",
]

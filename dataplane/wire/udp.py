"""UDP datagrams (RFC 768) over IPv4, checksummed over the pseudo header.

A received checksum of 0 means the sender computed none (RFC 768), so it is not verified;
a computed checksum of 0 is sent as 0xFFFF, its one's-complement equal.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dataplane.wire._common import Buffer, as_bytes
from dataplane.wire.checksum import csum_partial, inet_checksum, pseudo_header_sum
from dataplane.wire.errors import ChecksumError, MalformedError, TruncatedError
from dataplane.wire.ipv4 import PROTO_UDP

# Field offsets: source port 0, destination port 2, length 4, checksum 6.
_HEADER = struct.Struct("!HHHH")
_CHECKSUM = struct.Struct("!H")
HEADER_LEN = _HEADER.size  # 8
MAX_DATAGRAM_LEN = 0xFFFF


@dataclass(frozen=True, slots=True)
class UdpRepr:
    src_port: int
    dst_port: int
    payload: bytes

    @classmethod
    def parse(
        cls, segment: Buffer, src_ip: int, dst_ip: int, *, verify_checksum: bool = True
    ) -> UdpRepr:
        """The IPv4 payload of a protocol-17 packet; bytes past the UDP length are ignored."""
        data = as_bytes(segment)
        if len(data) < HEADER_LEN:
            raise TruncatedError(f"UDP datagram of {len(data)} bytes, header needs 8")
        src_port, dst_port, length, checksum = _HEADER.unpack_from(data, 0)
        if length < HEADER_LEN:
            raise MalformedError(f"UDP length {length} is below the header's 8")
        if length > len(data):
            raise TruncatedError(f"UDP length {length} exceeds the {len(data)}-byte buffer")
        if length < len(data):
            data = data[:length]
        if verify_checksum and checksum != 0:
            pseudo = pseudo_header_sum(src_ip, dst_ip, PROTO_UDP, length)
            if inet_checksum(data, pseudo) != 0:
                raise ChecksumError("UDP checksum does not verify")
        return cls(src_port, dst_port, data[HEADER_LEN:])

    def emit(self, src_ip: int, dst_ip: int) -> bytes:
        length = HEADER_LEN + len(self.payload)
        if length > MAX_DATAGRAM_LEN:
            raise ValueError(f"UDP payload of {len(self.payload)} bytes does not fit")
        try:
            header = _HEADER.pack(self.src_port, self.dst_port, length, 0)
        except struct.error as exc:
            raise ValueError(f"UDP field out of range: {exc}") from exc
        partial = csum_partial(header, pseudo_header_sum(src_ip, dst_ip, PROTO_UDP, length))
        checksum = inet_checksum(self.payload, partial) or 0xFFFF
        return header[:6] + _CHECKSUM.pack(checksum) + self.payload


__all__ = ["HEADER_LEN", "PROTO_UDP", "UdpRepr"]

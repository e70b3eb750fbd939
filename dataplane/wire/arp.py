"""ARP for IPv4 over Ethernet (RFC 826): the only hardware/protocol pair this stack uses.

The packet is a fixed 28 bytes here: hardware type 1, protocol type 0x0800, address
lengths 6 and 4, operation, then sender and target hardware and protocol addresses.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dataplane.wire._common import Buffer
from dataplane.wire.errors import MalformedError, TruncatedError, UnsupportedError

HTYPE_ETHERNET = 1
PTYPE_IPV4 = 0x0800
OP_REQUEST = 1
OP_REPLY = 2

# Field offsets: htype 0, ptype 2, hlen 4, plen 5, oper 6, sha 8, spa 14, tha 18, tpa 24.
_FIXED = struct.Struct("!HHBBH")
_PACKET = struct.Struct("!HHBBH6sI6sI")
PACKET_LEN = _PACKET.size  # 28


@dataclass(frozen=True, slots=True)
class ArpRepr:
    """An Ethernet/IPv4 ARP request or reply; IPs are ints, MACs 6 bytes."""

    operation: int
    sender_mac: bytes
    sender_ip: int
    target_mac: bytes
    target_ip: int

    @classmethod
    def parse(cls, packet: Buffer) -> ArpRepr:
        """Bytes after the Ethernet header; trailing padding is ignored."""
        if len(packet) < _FIXED.size:
            raise TruncatedError(f"ARP packet of {len(packet)} bytes, fixed part needs 8")
        htype, ptype, hlen, plen, oper = _FIXED.unpack_from(packet, 0)
        if htype != HTYPE_ETHERNET or ptype != PTYPE_IPV4:
            raise UnsupportedError(f"ARP hardware type {htype}, protocol type 0x{ptype:04x}")
        if hlen != 6 or plen != 4:
            raise MalformedError(f"Ethernet/IPv4 ARP with address lengths {hlen}/{plen}")
        if oper not in (OP_REQUEST, OP_REPLY):
            raise UnsupportedError(f"ARP operation {oper} (only request and reply)")
        if len(packet) < PACKET_LEN:
            raise TruncatedError(f"ARP packet of {len(packet)} bytes, needs {PACKET_LEN}")
        _, _, _, _, _, sha, spa, tha, tpa = _PACKET.unpack_from(packet, 0)
        return cls(oper, sha, spa, tha, tpa)

    def emit(self) -> bytes:
        if self.operation not in (OP_REQUEST, OP_REPLY):
            raise ValueError(f"ARP operation {self.operation} (only request and reply)")
        if len(self.sender_mac) != 6 or len(self.target_mac) != 6:
            raise ValueError("ARP hardware addresses have 6 bytes")
        try:
            return _PACKET.pack(
                HTYPE_ETHERNET,
                PTYPE_IPV4,
                6,
                4,
                self.operation,
                self.sender_mac,
                self.sender_ip,
                self.target_mac,
                self.target_ip,
            )
        except struct.error as exc:
            raise ValueError(f"ARP field out of range: {exc}") from exc


__all__ = ["OP_REPLY", "OP_REQUEST", "PACKET_LEN", "ArpRepr"]

"""Ethernet II frames with at most one IEEE 802.1Q tag (no FCS: NICs strip and add it).

Layout: destination MAC (6), source MAC (6), EtherType (2), payload; with a tag, the
EtherType field holds 0x8100, then the tag control information (PCP:3 DEI:1 VID:12) and
the payload's EtherType follow.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dataplane.wire._common import Buffer, as_view
from dataplane.wire.errors import TruncatedError, UnsupportedError

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_ARP = 0x0806
ETHERTYPE_VLAN = 0x8100  # IEEE 802.1Q C-tag
ETHERTYPE_QINQ = 0x88A8  # IEEE 802.1ad S-tag (not handled)
ETHERTYPE_IPV6 = 0x86DD

BROADCAST = b"\xff\xff\xff\xff\xff\xff"

# Field offsets, in one place: dst 0..6, src 6..12, type 12..14 | tci 14..16, type 16..18.
_HEADER = struct.Struct("!6s6sH")
_TAG = struct.Struct("!HH")  # TCI, inner EtherType
HEADER_LEN = _HEADER.size  # 14
TAGGED_HEADER_LEN = HEADER_LEN + _TAG.size  # 18
#: Shortest frame on the wire without FCS; shorter ones are padded (IEEE 802.3 clause 4.2).
MIN_FRAME_LEN = 60
#: Values below this are IEEE 802.3 lengths, not EtherTypes.
_MIN_ETHERTYPE = 0x0600
_TAG_TYPES = frozenset({ETHERTYPE_VLAN, ETHERTYPE_QINQ, 0x9100})


@dataclass(frozen=True, slots=True)
class EthernetRepr:
    """One Ethernet II header. `vlan` is the 802.1Q tag control information (the VLAN ID
    in its low 12 bits, the priority in its top 3), or None for an untagged frame."""

    dst: bytes
    src: bytes
    ethertype: int
    vlan: int | None = None

    @property
    def vlan_id(self) -> int | None:
        return None if self.vlan is None else self.vlan & 0x0FFF

    @property
    def vlan_pcp(self) -> int | None:
        return None if self.vlan is None else self.vlan >> 13

    @property
    def header_len(self) -> int:
        return HEADER_LEN if self.vlan is None else TAGGED_HEADER_LEN

    @classmethod
    def parse(cls, frame: Buffer) -> tuple[EthernetRepr, memoryview]:
        """The header and a zero-copy view of the payload (which may end in padding)."""
        view = as_view(frame)
        if len(view) < HEADER_LEN:
            raise TruncatedError(f"Ethernet frame of {len(view)} bytes, header needs {HEADER_LEN}")
        dst, src, ethertype = _HEADER.unpack_from(view, 0)
        if ethertype == ETHERTYPE_VLAN:
            if len(view) < TAGGED_HEADER_LEN:
                raise TruncatedError(f"802.1Q frame of {len(view)} bytes, header needs 18")
            tci, ethertype = _TAG.unpack_from(view, HEADER_LEN)
            if ethertype in _TAG_TYPES:
                raise UnsupportedError(f"stacked VLAN tags (inner 0x{ethertype:04x})")
            if ethertype < _MIN_ETHERTYPE:
                raise UnsupportedError(f"802.3 length field 0x{ethertype:04x}, not Ethernet II")
            return cls(dst, src, ethertype, tci), view[TAGGED_HEADER_LEN:]
        if ethertype in _TAG_TYPES:
            raise UnsupportedError(f"VLAN tag type 0x{ethertype:04x} (only 802.1Q is handled)")
        if ethertype < _MIN_ETHERTYPE:
            raise UnsupportedError(f"802.3 length field 0x{ethertype:04x}, not Ethernet II")
        return cls(dst, src, ethertype), view[HEADER_LEN:]

    def emit_header(self) -> bytes:
        """The header alone (14 or 18 bytes)."""
        if len(self.dst) != 6 or len(self.src) != 6:
            raise ValueError("Ethernet addresses have 6 bytes")
        if not _MIN_ETHERTYPE <= self.ethertype <= 0xFFFF or self.ethertype in _TAG_TYPES:
            raise ValueError(f"EtherType 0x{self.ethertype:04x} cannot be emitted (use vlan=)")
        if self.vlan is None:
            return _HEADER.pack(self.dst, self.src, self.ethertype)
        if not 0 <= self.vlan <= 0xFFFF:
            raise ValueError(f"802.1Q tag control information out of range: {self.vlan}")
        return _HEADER.pack(self.dst, self.src, ETHERTYPE_VLAN) + _TAG.pack(
            self.vlan, self.ethertype
        )

    def emit(self, payload: Buffer = b"", *, pad: bool = False) -> bytes:
        """The frame: header then payload, zero-padded to 60 bytes when pad is set (for
        links whose driver does not pad short frames itself)."""
        frame = self.emit_header() + payload
        if pad and len(frame) < MIN_FRAME_LEN:
            frame += bytes(MIN_FRAME_LEN - len(frame))
        return frame


__all__ = [
    "BROADCAST",
    "ETHERTYPE_ARP",
    "ETHERTYPE_IPV4",
    "ETHERTYPE_IPV6",
    "ETHERTYPE_QINQ",
    "ETHERTYPE_VLAN",
    "HEADER_LEN",
    "MIN_FRAME_LEN",
    "TAGGED_HEADER_LEN",
    "EthernetRepr",
]

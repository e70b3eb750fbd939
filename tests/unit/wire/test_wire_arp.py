"""ARP for Ethernet/IPv4 (RFC 826)."""

from __future__ import annotations

import pytest
from hypothesis import given
from wire_strategies import WIRE_SETTINGS, arp_reprs, captured

from dataplane.wire.arp import OP_REPLY, OP_REQUEST, PACKET_LEN, ArpRepr
from dataplane.wire.errors import MalformedError, TruncatedError, UnsupportedError

GW_MAC = bytes.fromhex("564d95f2245a")
PEER_MAC = bytes.fromhex("1e1b078343e5")


def test_parse_captured_request_and_reply() -> None:
    request = ArpRepr.parse(captured("arp_request")[14:])
    assert request == ArpRepr(OP_REQUEST, GW_MAC, 0xC6120001, bytes(6), 0xC6120002)
    reply = ArpRepr.parse(captured("arp_reply")[14:])
    assert reply == ArpRepr(OP_REPLY, PEER_MAC, 0xC6120002, GW_MAC, 0xC6120001)
    assert reply.emit() == captured("arp_reply")[14:]


def test_trailing_padding_ignored() -> None:
    packet = captured("arp_reply")[14:]
    assert ArpRepr.parse(packet + bytes(18)) == ArpRepr.parse(packet)


@pytest.mark.parametrize("size", range(PACKET_LEN))
def test_truncated(size: int) -> None:
    with pytest.raises(TruncatedError):
        ArpRepr.parse(captured("arp_reply")[14 : 14 + size])


@pytest.mark.parametrize(
    ("patch", "error"),
    [
        ((0, b"\x00\x06"), UnsupportedError),  # IEEE 802 hardware type
        ((2, b"\x86\xdd"), UnsupportedError),  # IPv6 protocol type
        ((4, b"\x06\x10"), MalformedError),  # protocol address length 16
        ((4, b"\x08\x04"), MalformedError),  # hardware address length 8
        ((6, b"\x00\x03"), UnsupportedError),  # RARP request
        ((6, b"\x00\x00"), UnsupportedError),
    ],
)
def test_rejects(patch: tuple[int, bytes], error: type[Exception]) -> None:
    packet = bytearray(captured("arp_reply")[14:])
    offset, value = patch
    packet[offset : offset + len(value)] = value
    with pytest.raises(error):
        ArpRepr.parse(packet)


@pytest.mark.parametrize(
    "repr_",
    [
        ArpRepr(3, GW_MAC, 1, PEER_MAC, 2),
        ArpRepr(OP_REQUEST, GW_MAC[:5], 1, PEER_MAC, 2),
        ArpRepr(OP_REQUEST, GW_MAC, 1 << 32, PEER_MAC, 2),
    ],
)
def test_emit_rejects_bad_fields(repr_: ArpRepr) -> None:
    with pytest.raises(ValueError):
        repr_.emit()


@WIRE_SETTINGS
@given(arp_reprs)
def test_round_trip(arp: ArpRepr) -> None:
    packet = arp.emit()
    assert len(packet) == PACKET_LEN
    for buffer in (packet, bytearray(packet), memoryview(packet)):
        assert ArpRepr.parse(buffer) == arp

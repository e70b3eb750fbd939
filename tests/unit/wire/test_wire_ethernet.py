"""Ethernet II with one optional 802.1Q tag."""

from __future__ import annotations

import pytest
from hypothesis import given
from wire_strategies import WIRE_SETTINGS, captured, ethernet_reprs, payloads

from dataplane.wire.errors import TruncatedError, UnsupportedError
from dataplane.wire.ethernet import (
    BROADCAST,
    ETHERTYPE_ARP,
    ETHERTYPE_IPV4,
    ETHERTYPE_VLAN,
    MIN_FRAME_LEN,
    EthernetRepr,
)

A = bytes.fromhex("020000000001")
B = bytes.fromhex("020000000002")


def test_parse_captured_arp_request() -> None:
    frame = captured("arp_request")
    eth, payload = EthernetRepr.parse(frame)
    assert eth == EthernetRepr(BROADCAST, bytes.fromhex("564d95f2245a"), ETHERTYPE_ARP)
    assert isinstance(payload, memoryview)
    assert bytes(payload) == frame[14:]
    assert eth.vlan_id is None
    assert eth.header_len == 14


def test_tagged_frame() -> None:
    frame = A + B + b"\x81\x00\xa0\x64\x08\x00" + b"payload"
    eth, payload = EthernetRepr.parse(frame)
    assert eth == EthernetRepr(A, B, ETHERTYPE_IPV4, vlan=0xA064)
    assert eth.vlan_id == 100
    assert eth.vlan_pcp == 5
    assert eth.header_len == 18
    assert bytes(payload) == b"payload"
    assert eth.emit(payload) == frame


def test_vlan_id_alone_is_the_tag() -> None:
    assert EthernetRepr(A, B, ETHERTYPE_IPV4, vlan=100).emit(b"")[12:18] == bytes.fromhex(
        "8100 0064 0800"
    )


@pytest.mark.parametrize("size", range(14))
def test_truncated_header(size: int) -> None:
    with pytest.raises(TruncatedError):
        EthernetRepr.parse(bytes(A + B + b"\x08\x00")[:size])


@pytest.mark.parametrize("size", range(14, 18))
def test_truncated_tag(size: int) -> None:
    with pytest.raises(TruncatedError):
        EthernetRepr.parse((A + B + b"\x81\x00\x00\x64\x08\x00")[:size])


@pytest.mark.parametrize(
    "tail",
    [
        b"\x88\xa8\x00\x64\x81\x00",  # 802.1ad outer tag
        b"\x81\x00\x00\x64\x81\x00\x00\x65\x08\x00",  # two 802.1Q tags
        b"\x00\x2e",  # 802.3 length field
        b"\x81\x00\x00\x64\x05\xdc",  # tagged 802.3
    ],
)
def test_unsupported(tail: bytes) -> None:
    with pytest.raises(UnsupportedError):
        EthernetRepr.parse(A + B + tail + bytes(46))


@pytest.mark.parametrize(
    "repr_",
    [
        EthernetRepr(A, B, ETHERTYPE_VLAN),
        EthernetRepr(A, B, 0x05DC),
        EthernetRepr(A, B, 0x10000),
        EthernetRepr(A[:5], B, ETHERTYPE_IPV4),
        EthernetRepr(A, B, ETHERTYPE_IPV4, vlan=0x10000),
    ],
)
def test_emit_rejects_bad_fields(repr_: EthernetRepr) -> None:
    with pytest.raises(ValueError):
        repr_.emit(b"")


def test_pad_to_minimum() -> None:
    frame = EthernetRepr(A, B, ETHERTYPE_ARP).emit(b"\x01" * 28, pad=True)
    assert len(frame) == MIN_FRAME_LEN
    assert frame.endswith(bytes(MIN_FRAME_LEN - 42))
    assert len(EthernetRepr(A, B, ETHERTYPE_ARP).emit(b"\x01" * 28)) == 42
    assert len(EthernetRepr(A, B, ETHERTYPE_IPV4).emit(bytes(100), pad=True)) == 114


@WIRE_SETTINGS
@given(ethernet_reprs, payloads)
def test_round_trip(eth: EthernetRepr, payload: bytes) -> None:
    frame = eth.emit(payload)
    for buffer in (frame, bytearray(frame), memoryview(frame)):
        parsed, rest = EthernetRepr.parse(buffer)
        assert parsed == eth
        assert bytes(rest) == payload

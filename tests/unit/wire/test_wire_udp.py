"""UDP (RFC 768) with the pseudo-header checksum."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from wire_strategies import (
    DST_IP,
    SRC_IP,
    WIRE_SETTINGS,
    ips,
    pseudo_header,
    ref_checksum,
    udp_reprs,
)

from dataplane.wire.errors import ChecksumError, MalformedError, TruncatedError
from dataplane.wire.udp import PROTO_UDP, UdpRepr

DNS_LIKE = UdpRepr(53000, 53, b"\x12\x34\x01\x00\x00\x01" + bytes(6))


def test_checksum_matches_reference() -> None:
    datagram = DNS_LIKE.emit(SRC_IP, DST_IP)
    zeroed = datagram[:6] + b"\x00\x00" + datagram[8:]
    expected = ref_checksum(pseudo_header(SRC_IP, DST_IP, PROTO_UDP, len(datagram)) + zeroed)
    assert struct.unpack("!H", datagram[6:8])[0] == (expected or 0xFFFF)
    assert struct.unpack("!H", datagram[4:6])[0] == 8 + len(DNS_LIKE.payload)


def test_zero_checksum_means_none() -> None:
    datagram = bytearray(DNS_LIKE.emit(SRC_IP, DST_IP))
    datagram[6:8] = b"\x00\x00"
    assert UdpRepr.parse(datagram, SRC_IP, DST_IP) == DNS_LIKE


def test_computed_zero_is_sent_as_ffff() -> None:
    # Find a payload word that makes the sum come out 0: solve with the reference.
    base = UdpRepr(1, 2, b"\x00\x00")
    raw = bytearray(base.emit(SRC_IP, DST_IP))
    csum = struct.unpack("!H", raw[6:8])[0]
    # Adding the old checksum value into the payload word makes the new sum all ones.
    repr_ = UdpRepr(1, 2, struct.pack("!H", csum))
    datagram = repr_.emit(SRC_IP, DST_IP)
    assert datagram[6:8] == b"\xff\xff"
    assert UdpRepr.parse(datagram, SRC_IP, DST_IP) == repr_


def test_checksum_error_and_opt_out() -> None:
    datagram = bytearray(DNS_LIKE.emit(SRC_IP, DST_IP))
    datagram[-1] ^= 1
    with pytest.raises(ChecksumError):
        UdpRepr.parse(datagram, SRC_IP, DST_IP)
    with pytest.raises(ChecksumError):
        UdpRepr.parse(DNS_LIKE.emit(SRC_IP, DST_IP), SRC_IP, DST_IP + 1)
    assert UdpRepr.parse(datagram, SRC_IP, DST_IP, verify_checksum=False).src_port == 53000


def test_trailing_bytes_beyond_length_ignored() -> None:
    datagram = DNS_LIKE.emit(SRC_IP, DST_IP)
    assert UdpRepr.parse(datagram + b"junk", SRC_IP, DST_IP) == DNS_LIKE


@pytest.mark.parametrize("length", [0, 7])
def test_length_below_header(length: int) -> None:
    datagram = bytearray(DNS_LIKE.emit(SRC_IP, DST_IP))
    datagram[4:6] = struct.pack("!H", length)
    with pytest.raises(MalformedError):
        UdpRepr.parse(datagram, SRC_IP, DST_IP)


@pytest.mark.parametrize("cut", range(1, 21))
def test_truncated(cut: int) -> None:
    with pytest.raises(TruncatedError):
        UdpRepr.parse(DNS_LIKE.emit(SRC_IP, DST_IP)[:-cut], SRC_IP, DST_IP)


@pytest.mark.parametrize(
    "repr_", [UdpRepr(65536, 1, b""), UdpRepr(1, -1, b""), UdpRepr(1, 2, bytes(65528))]
)
def test_emit_rejects_bad_fields(repr_: UdpRepr) -> None:
    with pytest.raises(ValueError):
        repr_.emit(SRC_IP, DST_IP)


@WIRE_SETTINGS
@given(udp_reprs, ips, ips)
def test_round_trip(repr_: UdpRepr, src: int, dst: int) -> None:
    datagram = repr_.emit(src, dst)
    for buffer in (datagram, bytearray(datagram), memoryview(datagram)):
        assert UdpRepr.parse(buffer, src, dst) == repr_

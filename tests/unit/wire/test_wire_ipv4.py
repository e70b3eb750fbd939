"""IPv4 headers (RFC 791): checksum, options skipped, fragments refused, length checks."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from wire_strategies import WIRE_SETTINGS, captured, ipv4_packets

from dataplane.wire.checksum import inet_checksum
from dataplane.wire.errors import (
    ChecksumError,
    MalformedError,
    TruncatedError,
    UnsupportedError,
)
from dataplane.wire.ipv4 import PROTO_TCP, PROTO_UDP, Ipv4Repr

# Wikipedia's "IPv4 header checksum" example: checksum 0xb861.
WIKIPEDIA = bytes.fromhex("45000073000040004011b861c0a80001c0a800c7") + bytes(0x73 - 20)
WIKIPEDIA_REPR = Ipv4Repr(
    src=0xC0A80001, dst=0xC0A800C7, protocol=PROTO_UDP, payload_len=0x73 - 20, ttl=64
)


def with_checksum(header: bytes | bytearray) -> bytes:
    header = bytearray(header)
    header[10:12] = b"\x00\x00"
    ihl = (header[0] & 0x0F) * 4
    header[10:12] = struct.pack("!H", inet_checksum(bytes(header[:ihl])))
    return bytes(header)


def test_wikipedia_example_parses() -> None:
    repr_, payload = Ipv4Repr.parse(WIKIPEDIA)
    assert repr_ == WIKIPEDIA_REPR
    assert len(payload) == 0x73 - 20


def test_wikipedia_example_emits() -> None:
    assert WIKIPEDIA_REPR.emit_header()[10:12] == b"\xb8\x61"
    assert WIKIPEDIA_REPR.emit(bytes(0x73 - 20)) == WIKIPEDIA


def test_captured_syn() -> None:
    repr_, payload = Ipv4Repr.parse(captured("syn")[14:])
    assert repr_ == Ipv4Repr(0xC6120001, 0xC6120002, PROTO_TCP, 40, ttl=64, ident=0xB4B0)
    assert len(payload) == 40
    assert repr_.emit(payload) == captured("syn")[14:]


def test_link_padding_cut_at_total_length() -> None:
    packet = captured("ack")[14:]
    repr_, payload = Ipv4Repr.parse(packet + bytes(6))
    assert repr_.payload_len == len(payload) == len(packet) - 20


def test_options_skipped() -> None:
    # IHL 7: a record-route-like option area of 8 bytes (NOP x3 + EOL + padding).
    base = bytearray(WIKIPEDIA[:20])
    base[0] = 0x47
    base[2:4] = struct.pack("!H", 0x73 + 8)
    packet = with_checksum(bytes(base) + b"\x01\x01\x01\x00" + bytes(4)) + bytes(0x73 - 20)
    repr_, payload = Ipv4Repr.parse(packet)
    assert repr_ == WIKIPEDIA_REPR
    assert len(payload) == 0x73 - 20


def test_checksum_error_and_opt_out() -> None:
    packet = bytearray(WIKIPEDIA)
    packet[8] ^= 0x01  # TTL bit flip
    with pytest.raises(ChecksumError):
        Ipv4Repr.parse(packet)
    repr_, _ = Ipv4Repr.parse(packet, verify_checksum=False)
    assert repr_.ttl == 65


@pytest.mark.parametrize(
    ("offset", "value", "error"),
    [
        (0, 0x65, MalformedError),  # version 6
        (0, 0x44, MalformedError),  # IHL 4
        (0, 0x4F, TruncatedError),  # IHL 15: a 60-byte header in a 30-byte buffer
    ],
)
def test_version_and_ihl(offset: int, value: int, error: type[Exception]) -> None:
    """Checked before the checksum, so the checksum need not be fixed up."""
    packet = bytearray(WIKIPEDIA[:20] + bytes(10))
    packet[2:4] = struct.pack("!H", 30)
    packet[offset] = value
    with pytest.raises(error):
        Ipv4Repr.parse(packet)


def test_total_length_below_header() -> None:
    packet = bytearray(WIKIPEDIA)
    packet[2:4] = struct.pack("!H", 19)
    with pytest.raises(MalformedError):
        Ipv4Repr.parse(with_checksum(packet))


def test_total_length_beyond_buffer() -> None:
    with pytest.raises(TruncatedError):
        Ipv4Repr.parse(WIKIPEDIA[:-1])


@pytest.mark.parametrize("flags_frag", [0x2000, 0x0001, 0x6000, 0x1FFF, 0x4001])
def test_fragments_unsupported(flags_frag: int) -> None:
    packet = bytearray(WIKIPEDIA)
    packet[6:8] = struct.pack("!H", flags_frag)
    with pytest.raises(UnsupportedError, match="fragment"):
        Ipv4Repr.parse(with_checksum(packet))


def test_reserved_flag_ignored() -> None:
    packet = bytearray(WIKIPEDIA)
    packet[6:8] = struct.pack("!H", 0x8000 | 0x4000)
    repr_, _ = Ipv4Repr.parse(with_checksum(packet))
    assert repr_ == WIKIPEDIA_REPR


@pytest.mark.parametrize("size", range(len(WIKIPEDIA)))
def test_every_truncation(size: int) -> None:
    with pytest.raises(TruncatedError):
        Ipv4Repr.parse(WIKIPEDIA[:size])


@pytest.mark.parametrize(
    ("repr_", "payload"),
    [
        (Ipv4Repr(1, 2, 6, 3), b"ab"),  # payload_len mismatch
        (Ipv4Repr(1, 2, 6, 65516), bytes(65516)),  # too long
        (Ipv4Repr(1 << 32, 2, 6, 0), b""),
        (Ipv4Repr(1, 2, 256, 0), b""),
        (Ipv4Repr(1, 2, 6, 0, ttl=256), b""),
        (Ipv4Repr(1, 2, 6, 0, ident=-1), b""),
    ],
)
def test_emit_rejects_bad_fields(repr_: Ipv4Repr, payload: bytes) -> None:
    with pytest.raises(ValueError):
        repr_.emit(payload)


def test_largest_packet() -> None:
    repr_ = Ipv4Repr(1, 2, 6, 65515)
    packet = repr_.emit(bytes(65515))
    assert len(packet) == 65535
    assert Ipv4Repr.parse(packet)[0] == repr_


@WIRE_SETTINGS
@given(ipv4_packets())
def test_round_trip(packet_and_payload: tuple[Ipv4Repr, bytes]) -> None:
    repr_, payload = packet_and_payload
    packet = repr_.emit(payload)
    assert inet_checksum(packet[:20]) == 0
    for buffer in (packet, bytearray(packet), memoryview(packet)):
        parsed, rest = Ipv4Repr.parse(buffer)
        assert parsed == repr_
        assert bytes(rest) == payload

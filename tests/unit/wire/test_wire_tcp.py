"""TCP segments (RFC 9293) and options (RFC 7323, RFC 2018)."""

from __future__ import annotations

import pytest
from hypothesis import given
from wire_strategies import (
    DST_IP,
    SRC_IP,
    WIRE_SETTINGS,
    captured,
    ips,
    pseudo_header,
    ref_checksum,
    tcp_options,
    tcp_reprs,
)

from dataplane.wire.errors import ChecksumError, MalformedError, TruncatedError
from dataplane.wire.ipv4 import Ipv4Repr
from dataplane.wire.tcp import (
    MAX_OPTIONS_LEN,
    PROTO_TCP,
    TcpFlags,
    TcpOptions,
    TcpRepr,
)

LINUX_SYN_OPTIONS = TcpOptions(
    mss=1460, window_scale=10, sack_permitted=True, timestamp=(0xE9BDA214, 0)
)
# A pure ACK carrying a SACK block, exported from Wireshark as hex (TCP header only).
SACK_ACK = bytes.fromhex(
    "bfd701bb4dbb04ad75a06b21b010015e7a3800000101080a0072a3b80e5a53010101050a75a06b2075a06b21"
)


def segment_of(frame_name: str) -> tuple[Ipv4Repr, bytes]:
    ip, payload = Ipv4Repr.parse(captured(frame_name)[14:])
    return ip, bytes(payload)


# ---- known answers -----------------------------------------------------------------------


def test_captured_linux_syn() -> None:
    ip, segment = segment_of("syn")
    syn = TcpRepr.parse(segment, ip.src, ip.dst)
    assert syn == TcpRepr(
        src_port=55686,
        dst_port=5555,
        seq=0xA4E1A190,
        ack=0,
        flags=TcpFlags.SYN,
        window=64240,
        options=LINUX_SYN_OPTIONS,
    )
    assert isinstance(syn.flags, TcpFlags)
    assert syn.seg_len == 1
    # Linux's option layout is ours: the emitted segment is the captured one, byte for byte.
    assert syn.emit(ip.src, ip.dst) == segment
    assert LINUX_SYN_OPTIONS.emit() == bytes.fromhex("020405b40402080ae9bda214000000000103030a")


@pytest.mark.parametrize("name", ["syn", "syn_ack", "ack", "data", "fin_ack"])
def test_captured_segments_round_trip(name: str) -> None:
    ip, segment = segment_of(name)
    repr_ = TcpRepr.parse(segment, ip.src, ip.dst)
    assert repr_.emit(ip.src, ip.dst) == segment


def test_captured_data_segment() -> None:
    ip, segment = segment_of("data")
    data = TcpRepr.parse(memoryview(segment), ip.src, ip.dst)
    assert data.flags == TcpFlags.PSH | TcpFlags.ACK
    assert data.payload == b"hello"
    assert data.options == TcpOptions(timestamp=(0xDE68BEB0, 0xE9BDA214))
    assert data.seg_len == 5


def test_captured_fin_seg_len() -> None:
    ip, segment = segment_of("fin_ack")
    assert TcpRepr.parse(segment, ip.src, ip.dst).seg_len == 1


def test_sack_ack_layout_matches_capture() -> None:
    ack = TcpRepr.parse(SACK_ACK, 0, 0, verify_checksum=False)
    assert ack.options == TcpOptions(
        timestamp=(0x0072A3B8, 0x0E5A5301), sack_blocks=((0x75A06B20, 0x75A06B21),)
    )
    assert ack.flags == TcpFlags.ACK
    emitted = ack.emit(SRC_IP, DST_IP)
    assert emitted[:16] == SACK_ACK[:16]
    assert emitted[18:] == SACK_ACK[18:]


def test_checksum_matches_reference() -> None:
    repr_ = TcpRepr(1, 2, 3, 4, TcpFlags.ACK, 5, LINUX_SYN_OPTIONS, b"odd")
    segment = repr_.emit(SRC_IP, DST_IP)
    zeroed = segment[:16] + b"\x00\x00" + segment[18:]
    pseudo = pseudo_header(SRC_IP, DST_IP, PROTO_TCP, len(segment))
    assert int.from_bytes(segment[16:18], "big") == ref_checksum(pseudo + zeroed)


# ---- option parsing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"", TcpOptions()),
        (b"\x01\x01\x01\x01", TcpOptions()),
        (b"\x00\xff\xff\xff", TcpOptions()),  # EOL ends the list, garbage after it ignored
        (b"\x02\x04\x05\xb4\x00\x00\x00\x00", TcpOptions(mss=1460)),
        (b"\x1e\x04\xaa\xbb\x02\x04\x05\xb4", TcpOptions(mss=1460)),  # unknown kind 30 skipped
        (b"\xfe\x02\x01\x01", TcpOptions()),  # experimental kind 254, empty
        (b"\x03\x03\x0e\x00", TcpOptions(window_scale=14)),
        (b"\x03\x03\x0f\x00", TcpOptions(window_scale=14)),  # RFC 7323 2.3: clamp to 14
        (b"\x03\x03\xff\x00", TcpOptions(window_scale=14)),
        (b"\x04\x02\x01\x01", TcpOptions(sack_permitted=True)),
        (b"\x02\x04\x00\x01\x02\x04\x00\x02", TcpOptions(mss=2)),  # a duplicate: last wins
        (
            b"\x05\x22" + bytes(range(32)) + b"\x00\x00",
            TcpOptions(
                sack_blocks=(
                    (0x00010203, 0x04050607),
                    (0x08090A0B, 0x0C0D0E0F),
                    (0x10111213, 0x14151617),
                    (0x18191A1B, 0x1C1D1E1F),
                )
            ),
        ),
    ],
)
def test_options_parse(raw: bytes, expected: TcpOptions) -> None:
    assert TcpOptions.parse(raw) == expected
    assert TcpOptions.parse(bytearray(raw)) == expected


@pytest.mark.parametrize(
    "raw",
    [
        b"\x02",  # kind without a length byte
        b"\x01\x01\x01\x1e",
        b"\x02\x00\x00\x00",  # length 0
        b"\x1e\x01\x00\x00",  # length 1
        b"\x1e\x06\x00\x00",  # past the end
        b"\x02\x03\x05\x00",  # MSS of length 3
        b"\x02\x05\x05\xb4\x00\x00\x00\x00",
        b"\x03\x04\x07\x00",  # window scale of length 4
        b"\x03\x02\x01\x01",
        b"\x04\x03\x00\x00",  # SACK-permitted of length 3
        b"\x08\x09" + bytes(7) + b"\x00",  # timestamps of length 9
        b"\x08\x0b" + bytes(10),
        b"\x05\x02\x00\x00",  # SACK without blocks
        b"\x05\x09" + bytes(7) + b"\x00\x00\x00",  # SACK with half a block
        b"\x05\x0b" + bytes(10),
    ],
)
def test_options_malformed(raw: bytes) -> None:
    with pytest.raises(MalformedError):
        TcpOptions.parse(raw)


def test_options_area_longer_than_40_bytes() -> None:
    assert TcpOptions.parse(b"\x01" * 40) == TcpOptions()
    with pytest.raises(MalformedError, match="at most 40"):
        TcpOptions.parse(b"\x01" * 41)


def test_options_found_by_fuzzing_reemit() -> None:
    """atheris: a long area whose options re-emit in more than 40 bytes used to parse."""
    raw = bytes.fromhex("020405b40402080a0000000100000002030307") + bytes.fromhex(
        "051a" + "00000001" * 6
    )
    with pytest.raises(MalformedError):
        TcpOptions.parse(raw)


def test_options_malformed_inside_segment() -> None:
    base = TcpRepr(1, 2, 3, 4, TcpFlags.SYN, 5, TcpOptions(mss=1460))
    segment = bytearray(base.emit(SRC_IP, DST_IP))
    segment[21] = 3  # MSS length byte
    with pytest.raises(MalformedError, match="MSS"):
        TcpRepr.parse(segment, SRC_IP, DST_IP, verify_checksum=False)


# ---- option emission -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "raw"),
    [
        (TcpOptions(), ""),
        (TcpOptions(mss=536), "02040218"),
        (TcpOptions(sack_permitted=True), "01010402"),
        (TcpOptions(window_scale=7), "01030307"),
        (TcpOptions(timestamp=(1, 2)), "0101080a0000000100000002"),
        (TcpOptions(sack_permitted=True, timestamp=(1, 2)), "0402080a0000000100000002"),
        (TcpOptions(mss=1460, sack_permitted=True, window_scale=7), "020405b40101040201030307"),
        (TcpOptions(sack_blocks=((1, 2),)), "0101050a0000000100000002"),
        (
            TcpOptions(timestamp=(1, 2), sack_blocks=((3, 4), (5, 6), (7, 8))),
            "0101080a00000001000000020101051a000000030000000400000005000000060000000700000008",
        ),
    ],
)
def test_options_emit_linux_layout(options: TcpOptions, raw: str) -> None:
    emitted = options.emit()
    assert emitted == bytes.fromhex(raw)
    assert len(emitted) % 4 == 0
    assert TcpOptions.parse(emitted) == options


def test_options_compact_fallback_pads_with_eol() -> None:
    # Window scale + timestamps + 3 SACK blocks: 44 bytes aligned, 39 compact (+1 EOL).
    options = TcpOptions(window_scale=3, timestamp=(1, 2), sack_blocks=((3, 4), (5, 6), (7, 8)))
    emitted = options.emit()
    assert len(emitted) == MAX_OPTIONS_LEN
    assert emitted.startswith(bytes.fromhex("080a0000000100000002030303051a"))
    assert emitted.endswith(b"\x00")
    assert TcpOptions.parse(emitted) == options


@pytest.mark.parametrize(
    "options",
    [
        TcpOptions(timestamp=(1, 2), sack_blocks=((1, 2),) * 4),  # 10 + 34 > 40
        TcpOptions(sack_blocks=((1, 2),) * 5),
        TcpOptions(mss=0x10000),
        TcpOptions(mss=-1),
        TcpOptions(window_scale=15),
        TcpOptions(timestamp=(1 << 32, 0)),
        TcpOptions(sack_blocks=((1, -2),)),
        TcpOptions(sack_blocks=((1,),)),  # type: ignore[arg-type]
    ],
)
def test_options_emit_rejects(options: TcpOptions) -> None:
    with pytest.raises(ValueError):
        options.emit()


# ---- header checks -------------------------------------------------------------------------


def test_checksum_error_and_opt_out() -> None:
    ip, segment = segment_of("data")
    corrupt = bytearray(segment)
    corrupt[-1] ^= 0x20
    with pytest.raises(ChecksumError):
        TcpRepr.parse(corrupt, ip.src, ip.dst)
    with pytest.raises(ChecksumError):
        TcpRepr.parse(segment, ip.src, ip.dst ^ 1)
    assert TcpRepr.parse(corrupt, ip.src, ip.dst, verify_checksum=False).payload == b"hellO"


@pytest.mark.parametrize("offset", [0, 1, 4])
def test_data_offset_below_five(offset: int) -> None:
    segment = bytearray(TcpRepr(1, 2, 3, 4, TcpFlags.ACK, 5).emit(SRC_IP, DST_IP))
    segment[12] = offset << 4
    with pytest.raises(MalformedError, match="below 5"):
        TcpRepr.parse(segment, SRC_IP, DST_IP, verify_checksum=False)


def test_data_offset_beyond_segment() -> None:
    segment = bytearray(TcpRepr(1, 2, 3, 4, TcpFlags.ACK, 5).emit(SRC_IP, DST_IP))
    segment[12] = 6 << 4
    with pytest.raises(MalformedError):
        TcpRepr.parse(segment, SRC_IP, DST_IP, verify_checksum=False)


@pytest.mark.parametrize("size", range(20))
def test_truncated_header(size: int) -> None:
    _, segment = segment_of("syn")
    with pytest.raises(TruncatedError):
        TcpRepr.parse(segment[:size], SRC_IP, DST_IP)


def test_oversized_segment() -> None:
    segment = TcpRepr(1, 2, 3, 4, TcpFlags.ACK, 5).emit(SRC_IP, DST_IP) + bytes(65516)
    with pytest.raises(MalformedError):
        TcpRepr.parse(segment, SRC_IP, DST_IP)


def test_reserved_bits_ignored() -> None:
    _, segment = segment_of("syn")
    flagged = bytearray(segment)
    flagged[12] |= 0x0F
    assert TcpRepr.parse(flagged, 0, 0, verify_checksum=False) == TcpRepr.parse(
        segment, 0, 0, verify_checksum=False
    )


@pytest.mark.parametrize(
    "repr_",
    [
        TcpRepr(65536, 2, 3, 4, TcpFlags.ACK, 5),
        TcpRepr(1, 2, 1 << 32, 4, TcpFlags.ACK, 5),
        TcpRepr(1, 2, 3, -1, TcpFlags.ACK, 5),
        TcpRepr(1, 2, 3, 4, TcpFlags.ACK, 65536),
        TcpRepr(1, 2, 3, 4, TcpFlags.ACK, 5, urgent=65536),
        TcpRepr(1, 2, 3, 4, TcpFlags.ACK, 5, payload=bytes(65516)),
    ],
)
def test_emit_rejects_bad_fields(repr_: TcpRepr) -> None:
    with pytest.raises(ValueError):
        repr_.emit(SRC_IP, DST_IP)


def test_largest_segment() -> None:
    repr_ = TcpRepr(1, 2, 3, 4, TcpFlags.ACK, 5, payload=bytes(65515))
    segment = repr_.emit(SRC_IP, DST_IP)
    assert len(segment) == 65535
    assert TcpRepr.parse(segment, SRC_IP, DST_IP) == repr_


# ---- properties ----------------------------------------------------------------------------


@WIRE_SETTINGS
@given(tcp_reprs(), ips, ips)
def test_round_trip(repr_: TcpRepr, src: int, dst: int) -> None:
    segment = repr_.emit(src, dst)
    assert len(segment) % 4 == len(repr_.payload) % 4
    for buffer in (segment, bytearray(segment), memoryview(segment)):
        assert TcpRepr.parse(buffer, src, dst) == repr_


@WIRE_SETTINGS
@given(tcp_options())
def test_options_round_trip(options: TcpOptions) -> None:
    emitted = options.emit()
    assert len(emitted) % 4 == 0
    assert len(emitted) <= MAX_OPTIONS_LEN
    assert TcpOptions.parse(emitted) == options


@WIRE_SETTINGS
@given(tcp_options(aligned_only=True))
def test_aligned_options_keep_4_byte_fields_aligned(options: TcpOptions) -> None:
    """Linux's layout: every 32-bit field (timestamps, SACK edges) starts 4-byte aligned."""
    emitted = options.emit()
    pos = 0
    while pos < len(emitted):
        kind = emitted[pos]
        if kind == 1:
            pos += 1
            continue
        if kind in (5, 8):
            assert (pos + 2) % 4 == 0
        pos += emitted[pos + 1]


def test_flag_arithmetic_is_the_integers_and_stays_a_tcp_flags() -> None:
    """TcpFlags's own & and | (interned members, not enum's machinery) agree with the
    integers for every pair, return the interned member, and mix with plain ints."""
    members = [TcpFlags(i) for i in range(256)]
    for a in members[::7]:
        for b in members:
            both, either = a & b, a | b
            assert both == int(a) & int(b) and either == int(a) | int(b)
            assert type(both) is TcpFlags and type(either) is TcpFlags
            assert both is TcpFlags(int(a) & int(b))
    syn_ack = TcpFlags.SYN | TcpFlags.ACK
    assert syn_ack & 0x02 == 2 and 0x10 & syn_ack == 0x10 and syn_ack | 1 == 0x13
    assert repr(syn_ack & TcpFlags.FIN) == "<TcpFlags: 0>"
    assert not syn_ack & TcpFlags.FIN and syn_ack & TcpFlags.SYN

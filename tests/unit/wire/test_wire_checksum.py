"""The shim's RFC 1071 checksum against a pure-Python reference (differential test)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from wire_strategies import (
    WIRE_SETTINGS,
    native_to_network,
    pseudo_header,
    ref_checksum,
    ref_fold,
    ref_sum,
    swap16,
)

from dataplane.wire.checksum import csum_partial, inet_checksum, pseudo_header_sum

# RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to ddf2 (folded), checksum 220d.
RFC1071_EXAMPLE = bytes.fromhex("0001f203f4f5f6f7")
# Wikipedia "IPv4 header checksum": the header with its checksum field zeroed.
WIKIPEDIA_HEADER = bytes.fromhex("450000730000400040110000c0a80001c0a800c7")


def test_rfc1071_example() -> None:
    assert inet_checksum(RFC1071_EXAMPLE) == 0x220D
    assert ref_checksum(RFC1071_EXAMPLE) == 0x220D


def test_wikipedia_ipv4_header_checksum() -> None:
    assert inet_checksum(WIKIPEDIA_HEADER) == 0xB861
    filled = WIKIPEDIA_HEADER[:10] + b"\xb8\x61" + WIKIPEDIA_HEADER[12:]
    assert inet_checksum(filled) == 0


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00", b"\x00\x00", b"\xff", b"\xff\xff", b"\xff" * 7, b"\x00" * 9, b"\x80"],
)
def test_edge_cases_match_reference(data: bytes) -> None:
    assert inet_checksum(data) == ref_checksum(data)


def test_large_buffer_carries() -> None:
    # Enough 0xffff words to carry out of 32 bits many times over.
    data = b"\xff" * 200_001
    assert inet_checksum(data) == ref_checksum(data)


def test_every_length_and_alignment_around_the_32_byte_steps() -> None:
    """The shim sums 32 bytes a step (SSE2) and the rest word by word: every remainder,
    from every misaligned start, and a jumbo segment, agree with the reference."""
    data = bytes((i * 7919 + 13) % 256 for i in range(9000 + 64))
    for start in range(0, 33):
        for length in (*range(0, 100), 1460, 8960, 8961):
            piece = memoryview(data)[start : start + length]
            assert inet_checksum(piece) == ref_checksum(bytes(piece)), (start, length)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_accepts_every_buffer_type(kind: type) -> None:
    assert inet_checksum(kind(RFC1071_EXAMPLE)) == 0x220D
    assert csum_partial(kind(RFC1071_EXAMPLE)) == csum_partial(RFC1071_EXAMPLE)


@WIRE_SETTINGS
@given(st.binary(max_size=2048))
def test_checksum_matches_reference(data: bytes) -> None:
    assert inet_checksum(data) == ref_checksum(data)


@WIRE_SETTINGS
@given(st.binary(max_size=512))
def test_checksum_of_checksummed_data_is_zero(data: bytes) -> None:
    # Append the checksum as a trailing word (even-length data keeps word alignment).
    if len(data) % 2:
        data += b"\x00"
    csum = inet_checksum(data)
    assert inet_checksum(data + csum.to_bytes(2, "big")) == 0


@WIRE_SETTINGS
@given(st.binary(max_size=512))
def test_partial_sum_is_the_byte_swapped_reference_sum(data: bytes) -> None:
    # RFC 1071 section 2(B): byte-order independence, up to a swap of the folded sum.
    assert native_to_network(csum_partial(data)) == ref_fold(ref_sum(data))


@WIRE_SETTINGS
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=6), st.binary(max_size=201))
def test_chained_partial_sums(pieces: list[bytes], last: bytes) -> None:
    """Even-length pieces chain; only the last piece may be odd."""
    pieces = [p + b"\x00" if len(p) % 2 else p for p in pieces]
    partial = 0
    for piece in pieces:
        partial = csum_partial(piece, partial)
    assert inet_checksum(last, partial) == ref_checksum(b"".join(pieces) + last)


@WIRE_SETTINGS
@given(st.binary(max_size=300), st.integers(0, 0xFFFFFFFF))
def test_arbitrary_partial_matches_reference(data: bytes, partial: int) -> None:
    assert inet_checksum(data, partial) == ref_checksum(data, native_to_network(partial))


@WIRE_SETTINGS
@given(
    st.integers(0, 0xFFFFFFFF),
    st.integers(0, 0xFFFFFFFF),
    st.integers(0, 0xFF),
    st.binary(max_size=600),
)
def test_pseudo_header_chain(src: int, dst: int, proto: int, segment: bytes) -> None:
    pseudo = pseudo_header_sum(src, dst, proto, len(segment))
    expected = ref_checksum(pseudo_header(src, dst, proto, len(segment)) + segment)
    assert inet_checksum(segment, pseudo) == expected


def test_pseudo_header_rejects_out_of_range() -> None:
    with pytest.raises(ValueError, match="pseudo header"):
        pseudo_header_sum(1 << 32, 0, 6, 20)
    with pytest.raises(ValueError, match="pseudo header"):
        pseudo_header_sum(0, 0, 6, 0x10000)


def test_swap16_helper() -> None:
    assert swap16(0x1234) == 0x3412

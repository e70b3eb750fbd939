"""ICMP (RFC 792): echo with ident/seq, other types with the rest of the message as payload."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from wire_strategies import WIRE_SETTINGS, icmp_reprs

from dataplane.wire.checksum import inet_checksum
from dataplane.wire.errors import ChecksumError, TruncatedError
from dataplane.wire.icmp import (
    CODE_FRAG_NEEDED,
    TYPE_DEST_UNREACHABLE,
    TYPE_ECHO_REPLY,
    TYPE_ECHO_REQUEST,
    IcmpRepr,
)

# Echo request, id 0x1234, seq 1, data "aaaaaaaa". Checksum by hand (RFC 1071):
# 0x0800 + 0x1234 + 0x0001 + 4 * 0x6161 = 0x19fb9 -> folded 0x9fba -> complement 0x6045.
ECHO_REQUEST = bytes.fromhex("0800 6045 1234 0001") + b"a" * 8


def test_echo_request_known_answer() -> None:
    repr_ = IcmpRepr.parse(ECHO_REQUEST)
    assert repr_ == IcmpRepr(TYPE_ECHO_REQUEST, 0, 0x1234, 1, b"a" * 8)
    assert repr_.emit() == ECHO_REQUEST


def test_echo_reply_mirrors_request() -> None:
    reply = IcmpRepr.parse(ECHO_REQUEST).echo_reply()
    assert reply == IcmpRepr(TYPE_ECHO_REPLY, 0, 0x1234, 1, b"a" * 8)
    assert IcmpRepr.parse(reply.emit()) == reply
    with pytest.raises(ValueError, match="not an echo request"):
        reply.echo_reply()


def test_frag_needed_keeps_rest_of_header() -> None:
    rest = struct.pack("!HH", 0, 1400) + bytes.fromhex("45000073000040004011b861c0a80001c0a800c7")
    message = IcmpRepr(TYPE_DEST_UNREACHABLE, CODE_FRAG_NEEDED, 0, 0, rest + bytes(8)).emit()
    repr_ = IcmpRepr.parse(message)
    assert (repr_.ident, repr_.seq) == (0, 0)
    assert repr_.payload[2:4] == struct.pack("!H", 1400)
    assert not repr_.is_echo


def test_checksum_error_and_opt_out() -> None:
    message = bytearray(ECHO_REQUEST)
    message[-1] ^= 0x40
    with pytest.raises(ChecksumError):
        IcmpRepr.parse(message)
    assert IcmpRepr.parse(message, verify_checksum=False).payload == b"a" * 7 + b"!"


@pytest.mark.parametrize("size", range(8))
def test_truncated(size: int) -> None:
    with pytest.raises(TruncatedError):
        IcmpRepr.parse(ECHO_REQUEST[:size])


@pytest.mark.parametrize(
    "repr_",
    [
        IcmpRepr(TYPE_DEST_UNREACHABLE, 0, 1, 0, bytes(8)),  # ident on a non-echo type
        IcmpRepr(TYPE_DEST_UNREACHABLE, 0, 0, 0, b"abc"),  # shorter than the header
        IcmpRepr(256, 0, 0, 0, bytes(4)),
        IcmpRepr(TYPE_ECHO_REQUEST, 0, 0x10000, 0, b""),
    ],
)
def test_emit_rejects_bad_fields(repr_: IcmpRepr) -> None:
    with pytest.raises(ValueError):
        repr_.emit()


@WIRE_SETTINGS
@given(icmp_reprs())
def test_round_trip(repr_: IcmpRepr) -> None:
    message = repr_.emit()
    assert inet_checksum(message) == 0
    for buffer in (message, bytearray(message), memoryview(message)):
        assert IcmpRepr.parse(buffer) == repr_

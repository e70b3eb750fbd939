""" "Parse it or raise WireError" (h11's fuzzer invariant) for every parser, plus
emit/parse stability and byte-at-a-time truncation."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from wire_strategies import (
    CAPTURED,
    DST_IP,
    FEW_SETTINGS,
    PARSERS,
    SRC_IP,
    VALID,
    WIRE_SETTINGS,
    captured,
    mutations,
)

from dataplane.wire.arp import ArpRepr
from dataplane.wire.errors import MalformedError, TruncatedError, WireError
from dataplane.wire.ethernet import ETHERTYPE_ARP, ETHERTYPE_IPV4, EthernetRepr
from dataplane.wire.icmp import IcmpRepr
from dataplane.wire.ipv4 import PROTO_ICMP, PROTO_TCP, PROTO_UDP, Ipv4Repr
from dataplane.wire.tcp import TcpOptions, TcpRepr
from dataplane.wire.udp import UdpRepr

buffer_kinds = st.sampled_from([bytes, bytearray, memoryview])


def parse_or_wire_error(name: str, data: Any) -> object | None:
    try:
        return PARSERS[name](data)
    except WireError:
        return None


@pytest.mark.parametrize("name", sorted(PARSERS))
@WIRE_SETTINGS
@given(data=st.binary(max_size=300), kind=buffer_kinds)
def test_arbitrary_bytes(name: str, data: bytes, kind: type) -> None:
    parse_or_wire_error(name, kind(data))


@pytest.mark.parametrize("name", sorted(PARSERS))
@WIRE_SETTINGS
@given(data=st.data(), kind=buffer_kinds)
def test_mutated_valid_packets(name: str, data: st.DataObject, kind: type) -> None:
    parse_or_wire_error(name, kind(data.draw(mutations(VALID[name]))))


# ---- emit(parse(x)) is stable --------------------------------------------------------------


def reemit(name: str, parsed: Any) -> bytes:
    """The bytes our emitter produces for what the named parser returned."""
    base = name.removesuffix("-nocsum")
    if base in ("ethernet", "ipv4"):
        repr_, payload = parsed
        return bytes(repr_.emit(payload))
    if base in ("udp", "tcp"):
        return bytes(parsed.emit(SRC_IP, DST_IP))
    return bytes(parsed.emit())


def normalise(parsed: Any) -> Any:
    if isinstance(parsed, tuple):
        return parsed[0], bytes(parsed[1])
    return parsed


@pytest.mark.parametrize("name", sorted(PARSERS))
@WIRE_SETTINGS
@given(data=st.data())
def test_emit_parse_stable(name: str, data: st.DataObject) -> None:
    """For anything that parses, emitting it gives bytes that parse back to the same thing
    (checksums now verified) and that emit to themselves."""
    parsed = parse_or_wire_error(name, data.draw(mutations(VALID[name])))
    event("parsed" if parsed is not None else "rejected")
    if parsed is None:
        return
    first = reemit(name, parsed)
    strict = name.removesuffix("-nocsum")
    reparsed = PARSERS[strict](first)
    assert normalise(reparsed) == normalise(parsed)
    assert reemit(strict, reparsed) == first


# ---- byte-at-a-time truncation ---------------------------------------------------------------


def required_len(name: str, data: bytes) -> int:
    """How many bytes the named parser needs before it may succeed on a prefix of data."""
    base = name.removesuffix("-nocsum")
    if base == "ethernet":
        return 18 if data[12:14] == b"\x81\x00" else 14
    if base == "arp":
        return 28
    if base == "icmp":
        return 8
    if base == "tcp":
        return (data[12] >> 4) * 4
    if base == "tcp-options":
        return 0
    return len(data)  # ipv4 and udp carry their own length


@pytest.mark.parametrize("name", sorted(set(PARSERS) - {"tcp-options"}))
@FEW_SETTINGS
@given(data=st.data())
def test_truncation(name: str, data: st.DataObject) -> None:
    packet = data.draw(VALID[name])
    PARSERS[name](packet)  # the whole packet parses
    needed = required_len(name, packet)
    view = memoryview(packet)
    for size in range(len(packet)):
        if size < needed:
            with pytest.raises((TruncatedError, MalformedError)):
                PARSERS[name](view[:size])
        else:
            parse_or_wire_error(name, view[:size])


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_captured_frame_truncation(name: str) -> None:
    frame = captured(name)
    for size in range(len(frame)):
        with pytest.raises(WireError):
            parse_frame(frame[:size], verify=True)


# ---- whole frames, down the stack ----------------------------------------------------------


def parse_frame(frame: Any, *, verify: bool) -> object:
    """What the engine's slow path does with a frame, in miniature."""
    eth, payload = EthernetRepr.parse(frame)
    if eth.ethertype == ETHERTYPE_ARP:
        return ArpRepr.parse(payload)
    if eth.ethertype != ETHERTYPE_IPV4:
        return eth
    ip, segment = Ipv4Repr.parse(payload, verify_checksum=verify)
    if ip.protocol == PROTO_TCP:
        return TcpRepr.parse(segment, ip.src, ip.dst, verify_checksum=verify)
    if ip.protocol == PROTO_UDP:
        return UdpRepr.parse(segment, ip.src, ip.dst, verify_checksum=verify)
    if ip.protocol == PROTO_ICMP:
        return IcmpRepr.parse(segment, verify_checksum=verify)
    return ip


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_captured_frames_parse(name: str) -> None:
    assert not isinstance(parse_frame(captured(name), verify=True), EthernetRepr)


@WIRE_SETTINGS
@given(
    frame=mutations(st.sampled_from(sorted(CAPTURED.values())).map(bytes.fromhex)),
    verify=st.booleans(),
)
def test_mutated_captured_frames(frame: bytes, verify: bool) -> None:
    with contextlib.suppress(WireError):
        parse_frame(frame, verify=verify)


@WIRE_SETTINGS
@given(frame=st.binary(max_size=200), verify=st.booleans())
def test_arbitrary_frames(frame: bytes, verify: bool) -> None:
    with contextlib.suppress(WireError):
        parse_frame(frame, verify=verify)


def test_options_parser_never_reads_past_end() -> None:
    # Every 1- and 2-byte option area, and every kind with every length in 3 bytes.
    for first in range(256):
        for second in range(256):
            for raw in (bytes([first]), bytes([first, second]), bytes([first, second, 0])):
                with contextlib.suppress(MalformedError):
                    TcpOptions.parse(raw)

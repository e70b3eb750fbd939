"""Shared test helpers for tests/unit/wire: hypothesis settings and strategies, a pure-Python
RFC 1071 reference, captured frames, and the table of every parser.

Not a test module (no test_ prefix); imported by the test files beside it.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from dataplane.wire.arp import ArpRepr
from dataplane.wire.ethernet import ETHERTYPE_QINQ, ETHERTYPE_VLAN, EthernetRepr
from dataplane.wire.icmp import TYPE_ECHO_REPLY, TYPE_ECHO_REQUEST, IcmpRepr
from dataplane.wire.ipv4 import Ipv4Repr
from dataplane.wire.tcp import TcpFlags, TcpOptions, TcpRepr
from dataplane.wire.udp import UdpRepr

#: Deterministic and bounded: the same examples every run, no example database on disk.
WIRE_SETTINGS = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FEW_SETTINGS = settings(WIRE_SETTINGS, max_examples=150)

# ---- pure-Python RFC 1071 reference (the differential oracle for the C shim) ------------


def ref_sum(data: bytes) -> int:
    """Unfolded sum of big-endian 16-bit words, the odd byte padded with zero."""
    if len(data) % 2:
        data += b"\x00"
    total = 0
    for i in range(0, len(data), 2):
        total += (data[i] << 8) | data[i + 1]
    return total


def ref_fold(total: int) -> int:
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def ref_checksum(data: bytes, network_partial: int = 0) -> int:
    return ~ref_fold(ref_sum(data) + network_partial) & 0xFFFF


def swap16(value: int) -> int:
    return ((value & 0xFF) << 8) | (value >> 8)


def native_to_network(partial: int) -> int:
    """A shim partial sum (native-order words) as the equivalent big-endian folded sum
    (RFC 1071 section 2(B): the sum is byte-order independent up to a byte swap)."""
    folded = ref_fold(partial)
    return swap16(folded) if sys.byteorder == "little" else folded


def pseudo_header(src: int, dst: int, protocol: int, length: int) -> bytes:
    return struct.pack("!IIBBH", src, dst, 0, protocol, length)


# ---- strategies --------------------------------------------------------------------------

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
ips = u32
macs = st.binary(min_size=6, max_size=6)
payloads = st.binary(max_size=256)

ethertypes = st.integers(0x0600, 0xFFFF).filter(
    lambda t: t not in (ETHERTYPE_VLAN, ETHERTYPE_QINQ, 0x9100)
)
ethernet_reprs = st.builds(
    EthernetRepr, dst=macs, src=macs, ethertype=ethertypes, vlan=st.none() | u16
)
arp_reprs = st.builds(
    ArpRepr,
    operation=st.sampled_from([1, 2]),
    sender_mac=macs,
    sender_ip=ips,
    target_mac=macs,
    target_ip=ips,
)


@st.composite
def ipv4_packets(draw: st.DrawFn) -> tuple[Ipv4Repr, bytes]:
    payload = draw(payloads)
    repr_ = Ipv4Repr(
        src=draw(ips),
        dst=draw(ips),
        protocol=draw(u8),
        payload_len=len(payload),
        ttl=draw(u8),
        ident=draw(u16),
        dont_fragment=draw(st.booleans()),
        dscp_ecn=draw(u8),
    )
    return repr_, payload


@st.composite
def icmp_reprs(draw: st.DrawFn) -> IcmpRepr:
    if draw(st.booleans()):
        return IcmpRepr(
            draw(st.sampled_from([TYPE_ECHO_REQUEST, TYPE_ECHO_REPLY])),
            draw(u8),
            draw(u16),
            draw(u16),
            draw(payloads),
        )
    type_ = draw(u8.filter(lambda t: t not in (TYPE_ECHO_REQUEST, TYPE_ECHO_REPLY)))
    return IcmpRepr(type_, draw(u8), 0, 0, draw(st.binary(min_size=4, max_size=256)))


udp_reprs = st.builds(UdpRepr, src_port=u16, dst_port=u16, payload=payloads)


@st.composite
def tcp_options(draw: st.DrawFn, *, aligned_only: bool = False) -> TcpOptions:
    """Any option set that fits in 40 bytes (aligned_only: in Linux's NOP-aligned layout)."""
    mss = draw(st.none() | u16)
    window_scale = draw(st.none() | st.integers(0, 14))
    sack_permitted = draw(st.booleans())
    timestamp = draw(st.none() | st.tuples(u32, u32))
    if aligned_only:
        used = (4 if mss is not None else 0) + (4 if window_scale is not None else 0)
        used += 12 if timestamp is not None else (4 if sack_permitted else 0)
        room = 40 - used - 4
    else:
        used = (4 if mss is not None else 0) + (3 if window_scale is not None else 0)
        used += (2 if sack_permitted else 0) + (10 if timestamp is not None else 0)
        room = 40 - used - 2
    max_blocks = max(0, min(4, room // 8))
    blocks = draw(st.lists(st.tuples(u32, u32), max_size=max_blocks))
    return TcpOptions(mss, window_scale, sack_permitted, tuple(blocks), timestamp)


@st.composite
def tcp_reprs(draw: st.DrawFn, *, aligned_only: bool = False) -> TcpRepr:
    return TcpRepr(
        src_port=draw(u16),
        dst_port=draw(u16),
        seq=draw(u32),
        ack=draw(u32),
        flags=TcpFlags(draw(u8)),
        window=draw(u16),
        options=draw(tcp_options(aligned_only=aligned_only)),
        payload=draw(payloads),
        urgent=draw(u16),
    )


# ---- every parser, for the fuzz-style properties -----------------------------------------

SRC_IP = 0xC6120001  # 198.18.0.1
DST_IP = 0xC6120002  # 198.18.0.2

#: name -> callable(bytes-like) that parses with that parser (checksums verified or not).
PARSERS: dict[str, Callable[[Any], object]] = {
    "ethernet": EthernetRepr.parse,
    "arp": ArpRepr.parse,
    "ipv4": Ipv4Repr.parse,
    "ipv4-nocsum": lambda b: Ipv4Repr.parse(b, verify_checksum=False),
    "icmp": IcmpRepr.parse,
    "icmp-nocsum": lambda b: IcmpRepr.parse(b, verify_checksum=False),
    "udp": lambda b: UdpRepr.parse(b, SRC_IP, DST_IP),
    "udp-nocsum": lambda b: UdpRepr.parse(b, SRC_IP, DST_IP, verify_checksum=False),
    "tcp": lambda b: TcpRepr.parse(b, SRC_IP, DST_IP),
    "tcp-nocsum": lambda b: TcpRepr.parse(b, SRC_IP, DST_IP, verify_checksum=False),
    "tcp-options": TcpOptions.parse,
}

# ---- frames captured from Linux 198.18.0.1 -> 198.18.0.2:5555 over a veth pair -----------
# (checksum offload off, so the kernel filled in every checksum)

CAPTURED = {
    "arp_request": "ffffffffffff564d95f2245a08060001080006040001564d95f2245ac6120001"
    "000000000000c6120002",
    "arp_reply": "564d95f2245a1e1b078343e5080600010800060400021e1b078343e5c6120002"
    "564d95f2245ac6120001",
    "syn": "1e1b078343e5564d95f2245a08004500003cb4b040004006f9e3c6120001c6120002"
    "d98615b3a4e1a19000000000a002faf0ff650000020405b40402080ae9bda214000000000103030a",
    "syn_ack": "564d95f2245a1e1b078343e508004500003c000040004006ae94c6120002c6120001"
    "15b3d9869812ed80a4e1a191a012fe88d90f0000020405b40402080ade68beb0e9bda2140103030a",
    "ack": "1e1b078343e5564d95f2245a080045000034b4b140004006f9eac6120001c6120002"
    "d98615b3a4e1a1919812ed818010003f062900000101080ae9bda214de68beb0",
    "data": "564d95f2245a1e1b078343e508004500003990de400040061db9c6120002c6120001"
    "15b3d9869812ed81a4e1a19180180040c24800000101080ade68beb0e9bda21468656c6c6f",
    "fin_ack": "1e1b078343e5564d95f2245a080045000034b4b340004006f9e8c6120001c6120002"
    "d98615b3a4e1a1919812ed868011003f055b00000101080ae9bda2dcde68beb0",
}


def captured(name: str) -> bytes:
    return bytes.fromhex(CAPTURED[name])


# ---- valid encodings per parser (inputs for mutation and truncation) ---------------------


@st.composite
def ethernet_frames(draw: st.DrawFn) -> bytes:
    return draw(ethernet_reprs).emit(draw(payloads))


@st.composite
def ipv4_bytes(draw: st.DrawFn) -> bytes:
    repr_, payload = draw(ipv4_packets())
    return repr_.emit(payload)


#: parser name -> strategy of bytes that parser accepts.
VALID: dict[str, st.SearchStrategy[bytes]] = {
    "ethernet": ethernet_frames(),
    "arp": arp_reprs.map(lambda r: r.emit()),
    "ipv4": ipv4_bytes(),
    "ipv4-nocsum": ipv4_bytes(),
    "icmp": icmp_reprs().map(lambda r: r.emit()),
    "icmp-nocsum": icmp_reprs().map(lambda r: r.emit()),
    "udp": udp_reprs.map(lambda r: r.emit(SRC_IP, DST_IP)),
    "udp-nocsum": udp_reprs.map(lambda r: r.emit(SRC_IP, DST_IP)),
    "tcp": tcp_reprs().map(lambda r: r.emit(SRC_IP, DST_IP)),
    "tcp-nocsum": tcp_reprs().map(lambda r: r.emit(SRC_IP, DST_IP)),
    "tcp-options": tcp_options().map(lambda o: o.emit()),
}


@st.composite
def mutations(draw: st.DrawFn, valid: st.SearchStrategy[bytes]) -> bytes:
    """A valid encoding with a few bytes overwritten, maybe cut short or extended."""
    data = bytearray(draw(valid))
    for _ in range(draw(st.integers(0, 4))):
        if data:
            data[draw(st.integers(0, len(data) - 1))] = draw(u8)
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    if draw(st.booleans()):
        data += draw(st.binary(max_size=8))
    return bytes(data)

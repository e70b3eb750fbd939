"""scapy as an independent oracle, both ways: packets scapy builds parse with ours to the
same fields (checksums included), and packets we emit dissect in scapy to the same fields
with checksums scapy agrees with."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from wire_strategies import (
    FEW_SETTINGS,
    arp_reprs,
    ethernet_reprs,
    icmp_reprs,
    ips,
    ipv4_packets,
    payloads,
    tcp_options,
    tcp_reprs,
    u8,
    u16,
    u32,
    udp_reprs,
)

pytest.importorskip("scapy")

from scapy.layers.inet import (
    ICMP,
    IP,
    TCP,
    UDP,
    IPOption_NOP,
    IPOption_RR,
    in4_chksum,
)
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Packet, Raw
from scapy.utils import checksum as scapy_checksum

from dataplane.wire.addr import int_to_ip, ip_to_int, mac_from_str, mac_to_str
from dataplane.wire.arp import ArpRepr
from dataplane.wire.ethernet import EthernetRepr
from dataplane.wire.icmp import TYPE_ECHO_REPLY, TYPE_ECHO_REQUEST, IcmpRepr
from dataplane.wire.ipv4 import Ipv4Repr
from dataplane.wire.tcp import TcpFlags, TcpOptions, TcpRepr
from dataplane.wire.udp import UdpRepr


def raw(payload: bytes) -> Packet:
    return Raw(load=payload) if payload else Packet()


# ---- Ethernet ----------------------------------------------------------------------------


def scapy_ether(eth: EthernetRepr, payload: bytes) -> bytes:
    dst, src = mac_to_str(eth.dst), mac_to_str(eth.src)
    if eth.vlan is None:
        return bytes(Ether(dst=dst, src=src, type=eth.ethertype) / raw(payload))
    tag = Dot1Q(prio=eth.vlan >> 13, dei=(eth.vlan >> 12) & 1, vlan=eth.vlan & 0xFFF)
    tag.type = eth.ethertype
    return bytes(Ether(dst=dst, src=src, type=0x8100) / tag / raw(payload))


@FEW_SETTINGS
@given(ethernet_reprs, payloads)
def test_ethernet_scapy_to_ours(eth: EthernetRepr, payload: bytes) -> None:
    parsed, rest = EthernetRepr.parse(scapy_ether(eth, payload))
    assert parsed == eth
    assert bytes(rest) == payload


@FEW_SETTINGS
@given(ethernet_reprs, payloads)
def test_ethernet_ours_to_scapy(eth: EthernetRepr, payload: bytes) -> None:
    frame = Ether(eth.emit(payload))
    assert mac_from_str(frame.dst) == eth.dst
    assert mac_from_str(frame.src) == eth.src
    if eth.vlan is None:
        assert frame.type == eth.ethertype
    else:
        tag = frame[Dot1Q]
        assert (tag.prio << 13 | tag.dei << 12 | tag.vlan) == eth.vlan
        assert tag.type == eth.ethertype


# ---- ARP ---------------------------------------------------------------------------------


@FEW_SETTINGS
@given(arp_reprs)
def test_arp_both_ways(arp: ArpRepr) -> None:
    theirs = ARP(
        op=arp.operation,
        hwsrc=mac_to_str(arp.sender_mac),
        psrc=int_to_ip(arp.sender_ip),
        hwdst=mac_to_str(arp.target_mac),
        pdst=int_to_ip(arp.target_ip),
    )
    assert ArpRepr.parse(bytes(theirs)) == arp
    dissected = ARP(arp.emit())
    assert dissected.hwtype == 1
    assert dissected.ptype == 0x0800
    assert (dissected.hwlen, dissected.plen) == (6, 4)
    assert dissected.op == arp.operation
    assert mac_from_str(dissected.hwsrc) == arp.sender_mac
    assert ip_to_int(dissected.psrc) == arp.sender_ip
    assert mac_from_str(dissected.hwdst) == arp.target_mac
    assert ip_to_int(dissected.pdst) == arp.target_ip


# ---- IPv4 --------------------------------------------------------------------------------


def scapy_ip(ip: Ipv4Repr, **extra: Any) -> IP:
    return IP(
        src=int_to_ip(ip.src),
        dst=int_to_ip(ip.dst),
        proto=ip.protocol,
        ttl=ip.ttl,
        id=ip.ident,
        flags="DF" if ip.dont_fragment else 0,
        tos=ip.dscp_ecn,
        **extra,
    )


@FEW_SETTINGS
@given(ipv4_packets(), st.booleans())
def test_ipv4_scapy_to_ours(packet: tuple[Ipv4Repr, bytes], with_options: bool) -> None:
    ip, payload = packet
    extra = {"options": [IPOption_NOP(), IPOption_RR(routers=["198.18.0.1"])]}
    built = bytes(scapy_ip(ip, **(extra if with_options else {})) / raw(payload))
    parsed, rest = Ipv4Repr.parse(built)
    assert parsed == ip
    assert bytes(rest) == payload


@FEW_SETTINGS
@given(ipv4_packets())
def test_ipv4_ours_to_scapy(packet: tuple[Ipv4Repr, bytes]) -> None:
    ip, payload = packet
    emitted = ip.emit(payload)
    dissected = IP(emitted)
    assert (dissected.version, dissected.ihl, dissected.len) == (4, 5, len(emitted))
    assert ip_to_int(dissected.src) == ip.src
    assert ip_to_int(dissected.dst) == ip.dst
    assert (dissected.proto, dissected.ttl, dissected.id) == (ip.protocol, ip.ttl, ip.ident)
    assert dissected.tos == ip.dscp_ecn
    assert bool(dissected.flags.DF) == ip.dont_fragment
    assert not dissected.flags.MF
    assert dissected.frag == 0
    zeroed = emitted[:10] + b"\x00\x00" + emitted[12:20]
    assert dissected.chksum == scapy_checksum(zeroed)


# ---- ICMP --------------------------------------------------------------------------------


@FEW_SETTINGS
@given(st.sampled_from([TYPE_ECHO_REQUEST, TYPE_ECHO_REPLY]), u8, u16, u16, payloads)
def test_icmp_echo_scapy_to_ours(type_: int, code: int, ident: int, seq: int, data: bytes) -> None:
    built = bytes(ICMP(type=type_, code=code, id=ident, seq=seq) / raw(data))
    assert IcmpRepr.parse(built) == IcmpRepr(type_, code, ident, seq, data)


def test_icmp_frag_needed_scapy_to_ours() -> None:
    inner = bytes(IP(src="198.18.0.1", dst="198.18.0.2") / UDP(sport=1, dport=2))
    built = bytes(ICMP(type=3, code=4, nexthopmtu=1400) / Raw(load=inner))
    parsed = IcmpRepr.parse(built)
    assert (parsed.type, parsed.code, parsed.ident, parsed.seq) == (3, 4, 0, 0)
    assert parsed.payload == b"\x00\x00\x05\x78" + inner


# Bytes after type, code and checksum that scapy's ICMP layout reads for the types it gives
# fields of their own: timestamp request/reply (id, seq, three timestamps) and address mask
# request/reply (id, seq, mask). Shorter, it fails to dissect; the rare draw of such a type
# with 4 to 7 bytes made this test flaky.
_SCAPY_ICMP_MIN = {13: 16, 14: 16, 17: 8, 18: 8}


@FEW_SETTINGS
@given(icmp_reprs())
def test_icmp_ours_to_scapy(icmp: IcmpRepr) -> None:
    assume(len(icmp.payload) >= _SCAPY_ICMP_MIN.get(icmp.type, 0) or icmp.is_echo)
    emitted = icmp.emit()
    dissected = ICMP(emitted)
    assert (dissected.type, dissected.code) == (icmp.type, icmp.code)
    if icmp.is_echo:
        assert (dissected.id, dissected.seq) == (icmp.ident, icmp.seq)
        assert bytes(dissected.payload) == icmp.payload
    assert dissected.chksum == scapy_checksum(emitted[:2] + b"\x00\x00" + emitted[4:])


# ---- UDP ---------------------------------------------------------------------------------


@FEW_SETTINGS
@given(udp_reprs, ips, ips)
def test_udp_both_ways(udp: UdpRepr, src: int, dst: int) -> None:
    ip = IP(src=int_to_ip(src), dst=int_to_ip(dst))
    theirs = bytes(ip / UDP(sport=udp.src_port, dport=udp.dst_port) / raw(udp.payload))[20:]
    assert UdpRepr.parse(theirs, src, dst) == udp
    # scapy also sends a computed 0 as 0xffff, so the bytes are the same.
    ours = udp.emit(src, dst)
    assert ours == theirs
    dissected = UDP(ours)
    assert (dissected.sport, dissected.dport, dissected.len) == (
        udp.src_port,
        udp.dst_port,
        len(ours),
    )


# ---- TCP ---------------------------------------------------------------------------------


def to_scapy_options(options: TcpOptions) -> list[tuple[str, Any]]:
    result: list[tuple[str, Any]] = []
    if options.mss is not None:
        result.append(("MSS", options.mss))
    if options.sack_permitted:
        result.append(("SAckOK", b""))
    if options.timestamp is not None:
        result.append(("Timestamp", options.timestamp))
    if options.window_scale is not None:
        result.append(("WScale", options.window_scale))
    if options.sack_blocks:
        result.append(("SAck", tuple(edge for block in options.sack_blocks for edge in block)))
    return result


def from_scapy_options(options: list[tuple[str, Any]]) -> TcpOptions:
    fields: dict[str, Any] = {}
    for name, value in options:
        if name == "MSS":
            fields["mss"] = value
        elif name == "WScale":
            fields["window_scale"] = value
        elif name == "SAckOK":
            fields["sack_permitted"] = True
        elif name == "Timestamp":
            fields["timestamp"] = tuple(value)
        elif name == "SAck":
            fields["sack_blocks"] = tuple(zip(value[0::2], value[1::2], strict=True))
        else:
            assert name in ("NOP", "EOL"), name
    return TcpOptions(**fields)


@FEW_SETTINGS
@given(tcp_reprs(), ips, ips, st.randoms(use_true_random=False))
def test_tcp_scapy_to_ours(tcp: TcpRepr, src: int, dst: int, rng: Any) -> None:
    options = to_scapy_options(tcp.options)
    rng.shuffle(options)  # any order parses the same
    built = IP(src=int_to_ip(src), dst=int_to_ip(dst)) / TCP(
        sport=tcp.src_port,
        dport=tcp.dst_port,
        seq=tcp.seq,
        ack=tcp.ack,
        flags=int(tcp.flags),
        window=tcp.window,
        urgptr=tcp.urgent,
        options=options,
    )
    segment = bytes(built / raw(tcp.payload))[20:]
    assert TcpRepr.parse(segment, src, dst) == tcp


@FEW_SETTINGS
@given(tcp_reprs(), ips, ips)
def test_tcp_ours_to_scapy(tcp: TcpRepr, src: int, dst: int) -> None:
    ours = tcp.emit(src, dst)
    dissected = TCP(ours)
    assert (dissected.sport, dissected.dport) == (tcp.src_port, tcp.dst_port)
    assert (dissected.seq, dissected.ack) == (tcp.seq, tcp.ack)
    assert int(dissected.flags) == int(tcp.flags)
    assert (dissected.window, dissected.urgptr) == (tcp.window, tcp.urgent)
    assert dissected.dataofs * 4 == len(ours) - len(tcp.payload)
    assert from_scapy_options(dissected.options) == tcp.options
    assert bytes(dissected.payload) == tcp.payload
    zeroed = ours[:16] + b"\x00\x00" + ours[18:]
    ip = IP(src=int_to_ip(src), dst=int_to_ip(dst))
    assert dissected.chksum == in4_chksum(6, ip, zeroed)


@FEW_SETTINGS
@given(u32, u32, tcp_options())
def test_tcp_options_agree_with_scapy_dissection(seq: int, ack: int, opts: TcpOptions) -> None:
    tcp = TcpRepr(1, 2, seq, ack, TcpFlags.ACK, 100, opts)
    assert from_scapy_options(TCP(tcp.emit(0, 0)).options) == opts

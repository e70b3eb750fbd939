"""Interface: TCP demultiplexing by 4-tuple, resets for strays, listeners, ephemeral ports."""

from __future__ import annotations

from iface_helpers import NETMASK, OUR_IP, OUR_MAC, PEER_IP, PEER_MAC, make_iface

from dataplane.stack.iface import FlowKey, Interface
from dataplane.stack.tcp import TcpState
from dataplane.wire.ethernet import ETHERTYPE_IPV4, EthernetRepr
from dataplane.wire.ipv4 import PROTO_TCP, Ipv4Repr
from dataplane.wire.tcp import TcpFlags, TcpOptions, TcpRepr


def segment_frame(seg: TcpRepr, src_ip: int = PEER_IP, dst_ip: int = OUR_IP) -> bytes:
    payload = seg.emit(src_ip, dst_ip)
    packet = Ipv4Repr(src_ip, dst_ip, PROTO_TCP, len(payload)).emit(payload)
    return EthernetRepr(OUR_MAC, PEER_MAC, ETHERTYPE_IPV4).emit(packet)


def sent_segments(frames: list[bytes]) -> list[TcpRepr]:
    segments = []
    for frame in frames:
        eth, packet = EthernetRepr.parse(frame)
        assert eth.ethertype == ETHERTYPE_IPV4
        ip, payload = Ipv4Repr.parse(packet)
        assert (ip.src, ip.dst, ip.protocol) == (OUR_IP, PEER_IP, PROTO_TCP)
        segments.append(TcpRepr.parse(payload, ip.src, ip.dst))
    return segments


def test_flow_key_from_either_side_is_the_same_connection() -> None:
    # Regression: an inbound segment carries the 4-tuple reversed.
    ours = FlowKey.outbound(OUR_IP, 40000, PEER_IP, 80)
    assert FlowKey.inbound(PEER_IP, 80, OUR_IP, 40000) == ours
    assert ours.reversed() == FlowKey.outbound(PEER_IP, 80, OUR_IP, 40000)
    assert ours.reversed().reversed() == ours


def test_active_open_matches_the_reply_4_tuple() -> None:
    iface = make_iface()
    sock = iface.connect(PEER_IP, 80, 0.0)
    [syn] = sent_segments(iface.poll(0.0))
    assert syn.flags == TcpFlags.SYN
    syn_ack = TcpRepr(
        80,
        syn.src_port,
        5000,
        (syn.seq + 1) & 0xFFFFFFFF,
        TcpFlags.SYN | TcpFlags.ACK,
        65535,
        TcpOptions(mss=1460),
    )
    iface.receive([segment_frame(syn_ack)], 0.01)
    assert sock.state is TcpState.ESTABLISHED
    [ack] = sent_segments(iface.poll(0.01))
    assert ack.flags & TcpFlags.ACK
    assert not ack.flags & TcpFlags.RST
    assert (ack.src_port, ack.dst_port, ack.ack) == (syn.src_port, 80, 5001)
    assert iface.counters.tcp_rst_sent == 0
    assert iface.counters.tcp_unmatched == 0
    key = FlowKey.outbound(OUR_IP, syn.src_port, PEER_IP, 80)
    assert iface.find_socket(key) is sock
    assert iface.find_socket(key.reversed()) is sock


def test_passive_open_matches_later_segments_and_accepts() -> None:
    iface = make_iface()
    listener = iface.listen(8080)
    syn = TcpRepr(41000, 8080, 7000, 0, TcpFlags.SYN, 65535, TcpOptions(mss=1460))
    iface.receive([segment_frame(syn)], 0.0)
    assert listener.accept() is None  # handshake not done
    [syn_ack] = sent_segments(iface.poll(0.0))
    assert syn_ack.flags == TcpFlags.SYN | TcpFlags.ACK
    assert (syn_ack.src_port, syn_ack.dst_port, syn_ack.ack) == (8080, 41000, 7001)
    ack = TcpRepr(
        41000, 8080, 7001, (syn_ack.seq + 1) & 0xFFFFFFFF, TcpFlags.ACK, 65535, payload=b"hello"
    )
    iface.receive([segment_frame(ack)], 0.01)
    sock = listener.accept()
    assert sock is not None
    assert sock.state is TcpState.ESTABLISHED
    assert sock.recv(100) == b"hello"
    assert (sock.local.port, sock.remote.port) == (8080, 41000)
    assert iface.find_socket(FlowKey.inbound(PEER_IP, 41000, OUR_IP, 8080)) is sock
    assert iface.counters.tcp_rst_sent == 0


def test_unmatched_syn_gets_a_reset() -> None:
    iface = make_iface()
    syn = TcpRepr(42000, 9999, 123456, 0, TcpFlags.SYN, 65535)
    iface.receive([segment_frame(syn)], 0.0)
    [rst] = sent_segments(iface.poll(0.0))
    # RFC 9293 section 3.10.7.1: <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>
    assert rst.flags & TcpFlags.RST
    assert rst.flags & TcpFlags.ACK
    assert (rst.src_port, rst.dst_port, rst.seq, rst.ack) == (9999, 42000, 0, 123457)
    assert iface.counters.tcp_rst_sent == 1
    assert iface.counters.tcp_unmatched == 1


def test_unmatched_ack_gets_a_reset_with_its_ack_as_seq() -> None:
    iface = make_iface()
    stray = TcpRepr(42000, 80, 5, 777, TcpFlags.ACK, 65535, payload=b"late")
    iface.receive([segment_frame(stray)], 0.0)
    [rst] = sent_segments(iface.poll(0.0))
    assert rst.flags & TcpFlags.RST
    assert rst.seq == 777  # <SEQ=SEG.ACK><CTL=RST>


def test_unmatched_reset_is_not_answered() -> None:
    iface = make_iface()
    iface.receive([segment_frame(TcpRepr(42000, 80, 5, 0, TcpFlags.RST, 0))], 0.0)
    assert iface.poll(0.0) == []
    assert iface.counters.tcp_rst_sent == 0


def test_segment_for_a_port_on_another_connection_is_not_misrouted() -> None:
    iface = make_iface()
    sock = iface.connect(PEER_IP, 80, 0.0)
    [syn] = sent_segments(iface.poll(0.0))
    wrong_remote_port = TcpRepr(
        81, syn.src_port, 5000, (syn.seq + 1) & 0xFFFFFFFF, TcpFlags.SYN | TcpFlags.ACK, 65535
    )
    iface.receive([segment_frame(wrong_remote_port)], 0.01)
    assert sock.state is TcpState.SYN_SENT
    assert iface.counters.tcp_rst_sent == 1


def test_backlog_limits_half_open_connections() -> None:
    iface = make_iface()
    iface.listen(8080, backlog=2)
    for port in range(3):
        syn = TcpRepr(43000 + port, 8080, 1, 0, TcpFlags.SYN, 65535)
        iface.receive([segment_frame(syn)], 0.0)
    assert iface.counters.tcp_syn_dropped_backlog == 1
    assert iface.connection_count == 2


def test_two_fresh_interfaces_do_not_start_from_the_same_port() -> None:
    firsts = set()
    for _ in range(8):
        iface = Interface(OUR_MAC, OUR_IP, NETMASK, None, announce=False)
        firsts.add(iface.connect(PEER_IP, 443, 0.0).local.port)
    assert len(firsts) > 1


def test_thousand_connects_give_thousand_distinct_ports() -> None:
    iface = make_iface(seed=None)
    ports = [iface.connect(PEER_IP, 443, i * 0.001).local.port for i in range(1000)]
    assert len(set(ports)) == 1000
    assert all(32768 <= port <= 60999 for port in ports)


def test_closed_connection_is_removed_and_its_port_not_reused_soon() -> None:
    iface = make_iface()
    sock = iface.connect(PEER_IP, 80, 0.0)
    first_port = sock.local.port
    iface.poll(0.0)
    sock.abort()
    iface.poll(0.1)
    assert iface.connection_count == 0
    later = {iface.connect(PEER_IP, 80, 0.2 + i * 0.001).local.port for i in range(500)}
    assert first_port not in later

"""The network interface: Ethernet, ARP, IPv4, ICMP echo and TCP demultiplexing, sans-IO.

smoltcp's `iface::Interface`: frames in (`receive`), frames out (`poll`), the time passed in,
`poll_at()` saying when to call again. It owns one IPv4 address on one Ethernet segment,
the ARP cache, the TCP connections (keyed by 4-tuple) and their listeners. Nothing here
raises on bad input from the network: every frame it cannot use is counted and dropped.

Routing is the host's minimum (RFC 1122 section 3.3.1.1): on-subnet destinations are their
own next hop, everything else goes to the default gateway.
"""

from __future__ import annotations

import dataclasses
import errno as _errno
import heapq
import logging
import random
import struct
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import NamedTuple

from dataplane.stack.arp_cache import ArpCache, ArpConfig, ArpFailure, HostUnreachableError
from dataplane.stack.ports import DEFAULT_HIGH, DEFAULT_LOW, DEFAULT_REUSE_DELAY, EphemeralPorts
from dataplane.stack.socket import Endpoint, TcpSocket
from dataplane.stack.tcp import (
    IsnGenerator,
    TcpConfig,
    TcpConnection,
    TcpState,
    reset_for_unmatched,
)
from dataplane.stack.tcp_errors import TcpError
from dataplane.wire.addr import int_to_ip
from dataplane.wire.arp import OP_REPLY, OP_REQUEST, ArpRepr
from dataplane.wire.checksum import sum16
from dataplane.wire.errors import (
    ChecksumError,
    MalformedError,
    TruncatedError,
    UnsupportedError,
    WireError,
)
from dataplane.wire.ethernet import BROADCAST, ETHERTYPE_ARP, ETHERTYPE_IPV4, EthernetRepr
from dataplane.wire.icmp import TYPE_ECHO_REQUEST, IcmpRepr
from dataplane.wire.ipv4 import HEADER_LEN as IPV4_HEADER_LEN
from dataplane.wire.ipv4 import PROTO_ICMP, PROTO_TCP, PROTO_UDP, Ipv4Repr
from dataplane.wire.tcp import HEADER_LEN as TCP_HEADER_LEN
from dataplane.wire.tcp import TcpFlags, TcpFrameTemplate, TcpRepr
from dataplane.wire.udp import UdpRepr

log = logging.getLogger(__name__)

LIMITED_BROADCAST = 0xFFFFFFFF
# IPv4 total length, flags/fragment offset, source, destination (RFC 791 section 3.1).
_IPV4_FIELDS = struct.Struct("!2xH2xH4xII")
ZERO_MAC = bytes(6)


class NoRouteError(TcpError):
    """The destination is off-subnet and the interface has no gateway (ENETUNREACH)."""

    default_errno = _errno.ENETUNREACH


class FlowKey(NamedTuple):
    """A TCP connection's 4-tuple, always from our side: (local, remote).

    An inbound segment carries it reversed (its source is the remote end), so build keys
    only through `inbound`/`outbound`; both give the same key for the same connection,
    whichever side opened it.
    """

    local_ip: int
    local_port: int
    remote_ip: int
    remote_port: int

    @classmethod
    def inbound(cls, src_ip: int, src_port: int, dst_ip: int, dst_port: int) -> FlowKey:
        """The key of a segment we received: its destination is our end."""
        return cls(dst_ip, dst_port, src_ip, src_port)

    @classmethod
    def outbound(cls, src_ip: int, src_port: int, dst_ip: int, dst_port: int) -> FlowKey:
        """The key of a segment we send: its source is our end."""
        return cls(src_ip, src_port, dst_ip, dst_port)

    def reversed(self) -> FlowKey:
        """The same connection seen from the other end."""
        return FlowKey(self.remote_ip, self.remote_port, self.local_ip, self.local_port)


@dataclass(slots=True)
class InterfaceCounters:
    rx_frames: int = 0
    rx_bytes: int = 0
    tx_frames: int = 0
    tx_bytes: int = 0
    rx_dropped_malformed: int = 0  # truncated or invalid headers
    rx_dropped_checksum: int = 0  # IPv4, ICMP, TCP or UDP checksum did not verify
    rx_dropped_not_for_us: int = 0  # another MAC or IP address, TCP to a broadcast address
    rx_dropped_unsupported: int = 0  # VLAN tags, IPv6, other EtherTypes and IP protocols
    rx_dropped_martian: int = 0  # impossible source addresses (RFC 1122 3.2.1.3)
    rx_errors_internal: int = 0  # a bug handling a frame (logged); never the sender's fault
    fragments_dropped: int = 0  # no reassembly here
    arp_requests_received: int = 0
    arp_replies_received: int = 0
    arp_requests_sent: int = 0
    arp_replies_sent: int = 0
    arp_announcements_sent: int = 0  # gratuitous ARP at start (RFC 5227 section 2.3)
    arp_conflicts: int = 0  # someone else claims our IP (RFC 5227 section 2.4)
    arp_resolution_failures: int = 0
    icmp_echo_requests: int = 0
    icmp_echo_replies: int = 0
    icmp_rx_other: int = 0
    tcp_rx_segments: int = 0
    tcp_tx_segments: int = 0
    tcp_rst_sent: int = 0  # answers to segments for no connection (RFC 9293 3.10.7.1)
    tcp_unmatched: int = 0
    tcp_syn_dropped_backlog: int = 0
    tcp_connections_opened: int = 0
    tcp_connections_closed: int = 0
    tcp_unreachable_aborts: int = 0  # connections failed by ARP
    udp_rx: int = 0
    udp_dropped_no_port: int = 0
    udp_dropped_queue_full: int = 0
    udp_tx: int = 0
    ip_tx_no_route: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(slots=True, eq=False)
class _Flow:
    key: FlowKey
    connection: TcpConnection
    socket: TcpSocket
    next_hop: int
    listener: TcpListener | None = None
    order: int = 0  # creation order: flows are polled in it, as they always were
    timer_at: float | None = None  # the deadline of this flow's live entry in the timer heap
    alive: bool = True  # still in the interface's table
    template: TcpFrameTemplate | None = None  # its frames' prebuilt headers (per next-hop MAC)


@dataclass(frozen=True, slots=True)
class UdpDatagram:
    src_ip: int
    src_port: int
    payload: bytes


class TcpListener:
    """A passive open on one port: SYNs create connections, `accept` hands them out."""

    def __init__(self, interface: Interface, port: int, backlog: int) -> None:
        self.interface = interface
        self.port = port
        self.backlog = backlog
        self._queue: deque[TcpSocket] = deque()
        self.closed = False

    @property
    def pending(self) -> int:
        """Connections received and not yet accepted (handshake done or not)."""
        return len(self._queue)

    def _offer(self, sock: TcpSocket) -> bool:
        if self.closed or len(self._queue) >= self.backlog:
            return False
        self._queue.append(sock)
        return True

    def accept(self) -> TcpSocket | None:
        """The oldest connection whose handshake completed, or None."""
        for sock in list(self._queue):
            state = sock.state
            if state in (TcpState.SYN_RECEIVED, TcpState.LISTEN):
                continue
            self._queue.remove(sock)
            if state is TcpState.CLOSED and not sock.readable:
                continue  # reset before the application saw it
            return sock
        return None

    def close(self) -> None:
        """Stop listening; connections not yet accepted are aborted."""
        self.closed = True
        for sock in self._queue:
            sock.abort()
        self._queue.clear()
        self.interface._unlisten(self.port)


class Interface:
    """One IPv4 address on one Ethernet link; see the module docstring."""

    def __init__(
        self,
        mac: bytes,
        ip: int,
        netmask: int,
        gateway: int | None = None,
        *,
        mtu: int = 1500,
        tcp_config: TcpConfig | None = None,
        arp_config: ArpConfig | None = None,
        static_arp: Mapping[int, bytes] | None = None,
        seed: int | None = None,
        ephemeral_ports: tuple[int, int] = (DEFAULT_LOW, DEFAULT_HIGH),
        port_reuse_delay: float = DEFAULT_REUSE_DELAY,
        udp_queue_limit: int = 64,
        announce: bool = True,
        strict: bool = False,
    ) -> None:
        """`seed` makes the ephemeral ports and ISNs reproducible (tests only); `strict`
        re-raises internal errors instead of counting them (tests only)."""
        if len(mac) != 6:
            raise ValueError(f"a MAC address is 6 bytes, got {len(mac)}")
        if not 0 < ip < LIMITED_BROADCAST:
            raise ValueError(f"not a usable IPv4 address: {ip}")
        if gateway is not None and (gateway & netmask) != (ip & netmask):
            raise ValueError("the gateway must be on the interface's subnet")
        self.mac = mac
        self.ip = ip
        self.netmask = netmask
        self.gateway = gateway
        self.mtu = mtu
        self.strict = strict
        self.counters = InterfaceCounters()
        self.arp = ArpCache(arp_config)
        for neighbour_ip, neighbour_mac in (static_arp or {}).items():
            self.arp.add_static(neighbour_ip, neighbour_mac)
        self.ports = EphemeralPorts(*ephemeral_ports, seed=seed, reuse_delay=port_reuse_delay)
        config = tcp_config or TcpConfig()
        max_mss = mtu - IPV4_HEADER_LEN - TCP_HEADER_LEN
        if config.mss > max_mss:  # RFC 9293 section 3.7.1: MSS = MTU - 40
            config = dataclasses.replace(config, mss=max_mss)
        self.tcp_config = config
        self._isn = _make_isn_generator(seed)
        self._flows: dict[FlowKey, _Flow] = {}
        # Per-batch work is proportional to the flows with something to do: `_dirty` holds
        # the flows whose connection changed outside `poll` (a segment, the application,
        # the fast path), `_timers` a heap of (deadline, order, flow) for the others, with
        # stale entries (flow.timer_at moved, flow gone) skipped lazily; `_export` the
        # flows whose exported state may have changed since the engine last asked.
        self._dirty: dict[_Flow, None] = {}
        self._timers: list[tuple[float, int, _Flow]] = []
        self._export: dict[_Flow, None] = {}
        self._export_removed: list[TcpConnection] = []
        self._export_all = True  # the next-hop MACs may have changed: re-export every flow
        self._exporting = False  # someone calls export_changes (else removals are not kept)
        self._arp_version = -1
        self._flow_order = 0
        self._listeners: dict[int, TcpListener] = {}
        self._udp_queues: dict[int, deque[UdpDatagram]] = {}
        self._udp_queue_limit = udp_queue_limit
        self._tx: list[bytes] = []
        self._announce_pending = announce
        self._ident = (seed if seed is not None else random.SystemRandom().getrandbits(16)) & 0xFFFF
        self._now = 0.0
        self._broadcast = (ip & netmask) | (~netmask & LIMITED_BROADCAST)

    # -- addressing -------------------------------------------------------------------------

    def on_subnet(self, ip: int) -> bool:
        return (ip & self.netmask) == (self.ip & self.netmask)

    def next_hop(self, dst: int) -> int | None:
        """Where to send a packet for dst: itself on-subnet, else the gateway (or None)."""
        if self.on_subnet(dst):
            return dst
        return self.gateway

    def _is_broadcast(self, ip: int) -> bool:
        return ip in (LIMITED_BROADCAST, self._broadcast)

    def _is_martian_source(self, ip: int) -> bool:
        # RFC 1122 section 3.2.1.3: no broadcast, multicast or class E source; ours is a loop.
        return ip == self.ip or self._is_broadcast(ip) or ip >= 0xE0000000 or ip >> 24 in (0, 127)

    # -- receive ----------------------------------------------------------------------------

    def receive(self, frames: Iterable[bytes], now: float) -> None:
        """Handle received frames; never raises for anything the network sent."""
        self._now = now
        counters = self.counters
        for frame in frames:
            counters.rx_frames += 1
            counters.rx_bytes += len(frame)
            try:
                self._receive_frame(frame, now)
            except (TruncatedError, MalformedError):
                counters.rx_dropped_malformed += 1
            except ChecksumError:
                counters.rx_dropped_checksum += 1
            except UnsupportedError:
                counters.rx_dropped_unsupported += 1
            except WireError:
                counters.rx_dropped_malformed += 1
            except Exception:
                counters.rx_errors_internal += 1
                if self.strict:
                    raise
                log.exception("internal error handling a received frame (dropped)")

    def _receive_frame(self, frame: bytes, now: float) -> None:
        if frame[12:14] == b"\x08\x00" and frame[:6] == self.mac:
            # Untagged IPv4 to our MAC, the common case: no Ethernet object needed.
            self._receive_ipv4(None, memoryview(frame)[14:], now)
            return
        eth, payload = EthernetRepr.parse(frame)
        if eth.dst not in (self.mac, BROADCAST):
            self.counters.rx_dropped_not_for_us += 1
            return
        if eth.vlan is not None:
            self.counters.rx_dropped_unsupported += 1
            return
        if eth.ethertype == ETHERTYPE_IPV4:
            self._receive_ipv4(eth, payload, now)
        elif eth.ethertype == ETHERTYPE_ARP:
            self._receive_arp(ArpRepr.parse(payload), now)
        else:
            self.counters.rx_dropped_unsupported += 1

    def _receive_arp(self, arp: ArpRepr, now: float) -> None:
        """RFC 826 "Packet Reception", with RFC 5227 conflict detection."""
        counters = self.counters
        if arp.operation == OP_REQUEST:
            counters.arp_requests_received += 1
        else:
            counters.arp_replies_received += 1
        if arp.sender_mac[0] & 1:  # a group address cannot own an IP (IEEE 802 I/G bit)
            counters.rx_dropped_malformed += 1
            return
        if arp.sender_ip == self.ip and arp.sender_mac != self.mac:
            counters.arp_conflicts += 1
            if counters.arp_conflicts % 1000 == 1:  # once, then every 1000th: no log flood
                log.warning(
                    "ARP: %s claims our address %s (%d conflicts)",
                    arp.sender_mac.hex(":"),
                    int_to_ip(self.ip),
                    counters.arp_conflicts,
                )
            return
        for_us = arp.target_ip == self.ip
        if arp.sender_ip != 0 and not self._is_broadcast(arp.sender_ip):  # 0: an RFC 5227 probe
            released = self.arp.learn(arp.sender_ip, arp.sender_mac, now, create=for_us)
            for packet in released:
                self._emit_ipv4_frame(arp.sender_mac, packet)
        if for_us and arp.operation == OP_REQUEST:
            reply = ArpRepr(OP_REPLY, self.mac, self.ip, arp.sender_mac, arp.sender_ip)
            self._emit_frame(arp.sender_mac, ETHERTYPE_ARP, reply.emit())
            counters.arp_replies_sent += 1

    def _receive_ipv4(self, eth: EthernetRepr | None, packet: memoryview, now: float) -> None:
        counters = self.counters
        if len(packet) >= 40 and packet[0] == 0x45 and packet[9] == PROTO_TCP:
            # TCP in an option-less header: checked field by field, no Ipv4Repr; anything
            # unusual (and every error) takes the general path below, which counts it.
            total_len, flags_frag, src, dst = _IPV4_FIELDS.unpack_from(packet, 0)
            if (
                dst == self.ip
                and not flags_frag & 0x3FFF
                and 20 <= total_len <= len(packet)
                and not self._is_martian_source(src)
                and sum16(packet[:20].tobytes()) == 0
            ):
                self._receive_tcp_from(src, dst, TcpRepr.parse(packet[20:total_len], src, dst), now)
                return
        try:
            ip, payload = Ipv4Repr.parse(packet)
        except UnsupportedError:  # the only one Ipv4Repr.parse raises: a fragment
            counters.fragments_dropped += 1
            return
        if ip.dst != self.ip and not self._is_broadcast(ip.dst):
            counters.rx_dropped_not_for_us += 1
            return
        if self._is_martian_source(ip.src):
            counters.rx_dropped_martian += 1
            return
        if ip.protocol == PROTO_TCP:
            if ip.dst != self.ip:  # RFC 1122 4.2.3.10: no TCP to broadcast addresses
                counters.rx_dropped_not_for_us += 1
                return
            self._receive_tcp(ip, TcpRepr.parse(payload, ip.src, ip.dst), now)
        elif ip.protocol == PROTO_ICMP:
            self._receive_icmp(ip, IcmpRepr.parse(payload), now)
        elif ip.protocol == PROTO_UDP:
            self._receive_udp(ip, UdpRepr.parse(payload, ip.src, ip.dst))
        else:
            counters.rx_dropped_unsupported += 1

    def _receive_icmp(self, ip: Ipv4Repr, icmp: IcmpRepr, now: float) -> None:
        if icmp.type != TYPE_ECHO_REQUEST:
            self.counters.icmp_rx_other += 1
            return
        self.counters.icmp_echo_requests += 1
        if ip.dst != self.ip:
            return  # RFC 1122 3.2.2.6: a host MAY ignore echo requests to broadcast
        # RFC 792 "Echo or Echo Reply Message": same identifier, sequence and data back.
        if self._send_ipv4(ip.src, PROTO_ICMP, icmp.echo_reply().emit(), now):
            self.counters.icmp_echo_replies += 1

    def _receive_udp(self, ip: Ipv4Repr, udp: UdpRepr) -> None:
        self.counters.udp_rx += 1
        queue = self._udp_queues.get(udp.dst_port)
        if queue is None:
            self.counters.udp_dropped_no_port += 1
            return
        if len(queue) >= self._udp_queue_limit:
            self.counters.udp_dropped_queue_full += 1
            return
        queue.append(UdpDatagram(ip.src, udp.src_port, udp.payload))

    def _receive_tcp(self, ip: Ipv4Repr, seg: TcpRepr, now: float) -> None:
        self._receive_tcp_from(ip.src, ip.dst, seg, now)

    def _receive_tcp_from(self, src: int, dst: int, seg: TcpRepr, now: float) -> None:
        counters = self.counters
        counters.tcp_rx_segments += 1
        key = FlowKey(dst, seg.dst_port, src, seg.src_port)  # FlowKey.inbound
        flow = self._flows.get(key)
        if flow is not None:
            flow.connection.on_segment(seg, now)
            return
        flags = seg.flags
        listener = self._listeners.get(seg.dst_port)
        if listener is not None and flags & (TcpFlags.SYN | TcpFlags.ACK | TcpFlags.RST) == (
            TcpFlags.SYN
        ):
            self._accept_syn(listener, key, seg, now)
            return
        counters.tcp_unmatched += 1
        # RFC 9293 section 3.10.7.1: a segment for no connection gets a reset (never a RST).
        reset = reset_for_unmatched(seg)
        if reset is not None and self._send_tcp(src, reset, now):
            counters.tcp_rst_sent += 1

    def _accept_syn(self, listener: TcpListener, key: FlowKey, syn: TcpRepr, now: float) -> None:
        next_hop = self.next_hop(key.remote_ip)
        if next_hop is None:
            self.counters.ip_tx_no_route += 1
            return
        isn, ts_offset = self._isn.isn_and_ts_offset(
            key.local_ip, key.local_port, key.remote_ip, key.remote_port, now
        )
        connection = TcpConnection.from_syn(
            syn, key.local_ip, key.remote_ip, self.tcp_config, isn=isn, now=now, ts_offset=ts_offset
        )
        sock = TcpSocket(
            connection,
            Endpoint(key.local_ip, key.local_port),
            Endpoint(key.remote_ip, key.remote_port),
        )
        if not listener._offer(sock):
            self.counters.tcp_syn_dropped_backlog += 1
            return
        self._add_flow(_Flow(key, connection, sock, next_hop, listener))
        self.counters.tcp_connections_opened += 1

    # -- transmit ---------------------------------------------------------------------------

    def _emit_frame(self, dst_mac: bytes, ethertype: int, payload: bytes) -> None:
        frame = EthernetRepr(dst_mac, self.mac, ethertype).emit(payload)
        self._tx.append(frame)

    def _emit_ipv4_frame(self, dst_mac: bytes, packet: bytes) -> None:
        self._emit_frame(dst_mac, ETHERTYPE_IPV4, packet)

    def _send_ipv4(self, dst: int, protocol: int, payload: bytes, now: float) -> bool:
        """Wrap payload in IPv4 and send it to its next hop (or queue it behind ARP)."""
        if self._is_broadcast(dst):
            dst_mac: bytes | None = BROADCAST
            next_hop = dst
        else:
            hop = self.next_hop(dst)
            if hop is None:
                self.counters.ip_tx_no_route += 1
                return False
            next_hop = hop
            dst_mac = self.arp.lookup(next_hop, now)
        self._ident = (self._ident + 1) & 0xFFFF
        packet = Ipv4Repr(self.ip, dst, protocol, len(payload), ident=self._ident).emit(payload)
        if dst_mac is None:
            self.arp.enqueue(next_hop, packet, now)
        else:
            self._emit_ipv4_frame(dst_mac, packet)
        return True

    def _send_tcp(self, dst: int, seg: TcpRepr, now: float) -> bool:
        self.counters.tcp_tx_segments += 1
        return self._send_ipv4(dst, PROTO_TCP, seg.emit(self.ip, dst), now)

    def _send_flow_segment(self, flow: _Flow, seg: TcpRepr, now: float) -> None:
        """`_send_tcp` for a connection's own segment, through its frame template."""
        mac = self.arp.lookup(flow.next_hop, now)
        if mac is None:  # unresolved: the generic path queues it behind ARP
            self._send_tcp(flow.key.remote_ip, seg, now)
            return
        self.counters.tcp_tx_segments += 1
        template = flow.template
        if template is None or template.dst_mac != mac:
            template = flow.template = TcpFrameTemplate(self.mac, mac, self.ip, flow.key.remote_ip)
        self._ident = ident = (self._ident + 1) & 0xFFFF
        self._tx.append(template.emit(seg, ident))

    def _announce(self) -> None:
        """RFC 5227 section 2.3 ARP announcement: a request for our own address."""
        request = ArpRepr(OP_REQUEST, self.mac, self.ip, ZERO_MAC, self.ip)
        self._emit_frame(BROADCAST, ETHERTYPE_ARP, request.emit())
        self.counters.arp_announcements_sent += 1

    def poll(self, now: float) -> list[bytes]:
        """Every frame to transmit now: control replies, TCP output, ARP requests."""
        self._now = now
        if self._announce_pending:
            self._announce_pending = False
            self._announce()
        closed: list[_Flow] = []
        export = self._export
        for flow in self._due_flows(now):
            connection = flow.connection
            for seg in connection.poll_output(now):
                self._send_flow_segment(flow, seg, now)
            export[flow] = None
            if connection.state is TcpState.CLOSED:
                closed.append(flow)
            else:
                self._schedule(flow)
        for flow in closed:
            self._remove_flow(flow, now)
        if self.arp.busy:
            arp_poll = self.arp.poll(now)
            for ip in arp_poll.requests:
                request = ArpRepr(OP_REQUEST, self.mac, self.ip, ZERO_MAC, ip)
                self._emit_frame(BROADCAST, ETHERTYPE_ARP, request.emit())
                self.counters.arp_requests_sent += 1
            for failure in arp_poll.failures:
                self._resolution_failed(failure, now)
        frames = self._tx
        if not frames:
            return []
        self._tx = []
        self.counters.tx_frames += len(frames)
        self.counters.tx_bytes += sum(map(len, frames))
        return frames

    def _resolution_failed(self, failure: ArpFailure, now: float) -> None:
        self.counters.arp_resolution_failures += 1
        for flow in [flow for flow in self._flows.values() if flow.next_hop == failure.ip]:
            flow.socket.fail(failure.error(flow.key.remote_ip))
            flow.connection.poll_output(now)  # the abort's RST could not be delivered either
            self.counters.tcp_unreachable_aborts += 1
            self._remove_flow(flow, now)

    # -- which flows have work: the dirty set and the timer heap --------------------------------

    def _add_flow(self, flow: _Flow) -> None:
        self._flow_order += 1
        flow.order = self._flow_order
        self._flows[flow.key] = flow
        dirty = self._dirty

        def changed(_connection: TcpConnection) -> None:
            dirty[flow] = None

        def timers_moved(_connection: TcpConnection) -> None:
            if flow not in dirty:  # (a dirty flow is rescheduled by its poll anyway)
                self._schedule(flow)

        flow.connection.on_change = changed
        flow.connection.on_timer = timers_moved
        dirty[flow] = None

    def _schedule(self, flow: _Flow) -> None:
        """Put the flow's next deadline in the heap (right after its `poll_output`, when
        nothing is pending: its `poll_at()` is its earliest timer)."""
        at = flow.connection.timer_deadline()
        if at == flow.timer_at:
            return
        flow.timer_at = at
        if at is None:
            return
        timers = self._timers
        heapq.heappush(timers, (at, flow.order, flow))
        if len(timers) > 64 + 4 * len(self._flows):
            # Restarted timers (an RTO per round trip) leave stale entries: drop them.
            self._timers = [
                (f.timer_at, f.order, f) for f in self._flows.values() if f.timer_at is not None
            ]
            heapq.heapify(self._timers)

    def _due_flows(self, now: float) -> list[_Flow]:
        """The flows `poll` must handle: every dirty one and every one whose timer is due,
        in creation order."""
        dirty = self._dirty
        due = dirty.copy()  # the connections' hooks keep filling this very dict
        dirty.clear()
        timers = self._timers
        while timers and timers[0][0] <= now:
            at, _, flow = heapq.heappop(timers)
            if flow.alive and flow.timer_at == at:
                flow.timer_at = None
                due[flow] = None
        return sorted(due, key=_order) if len(due) > 1 else list(due)

    def _remove_flow(self, flow: _Flow, now: float) -> None:
        if self._flows.pop(flow.key, None) is None:
            return
        flow.alive = False
        flow.timer_at = None
        flow.connection.on_change = None
        flow.connection.on_timer = None
        self._dirty.pop(flow, None)
        self._export.pop(flow, None)
        if self._exporting:
            self._export_removed.append(flow.connection)
        self.counters.tcp_connections_closed += 1
        key = flow.key
        if flow.listener is None:
            self.ports.release(key.local_port, key.remote_ip, key.remote_port, now)

    def has_work(self, now: float) -> bool:
        """`poll` or `export_changes` would do something at `now`: frames or an
        announcement wait, a connection changed, a timer is due, ARP is busy or changed.
        False lets the engine skip both (a turn where only the C fast path moved data)."""
        if (
            self._tx
            or self._announce_pending
            or self._dirty
            or self._export
            or self._export_removed
            or self._export_all
        ):
            return True
        timers = self._timers
        if timers and timers[0][0] <= now:
            return True
        arp = self.arp
        return arp.busy or arp.version != self._arp_version or arp.lookups_due(now)

    def poll_at(self) -> float | None:
        """When `poll` next has work: now if frames wait, else the earliest timer."""
        if self._tx or self._announce_pending:
            return self._now
        dirty = self._dirty
        times = [t for flow in list(dirty) if (t := flow.connection.poll_at()) is not None]
        timers = self._timers
        while timers:
            at, _, flow = timers[0]
            if flow.alive and flow.timer_at == at:
                break
            heapq.heappop(timers)  # stale: the flow moved its deadline or is gone
        if timers:
            flow = timers[0][2]
            if flow not in dirty:
                times.append(timers[0][0])
            else:  # its entry may be out of date: the earliest among the clean flows
                clean = [
                    at
                    for at, _, flow in timers
                    if flow.alive and flow.timer_at == at and flow not in dirty
                ]
                if clean:
                    times.append(min(clean))
        arp_at = self.arp.poll_at()
        if arp_at is not None:
            times.append(arp_at)
        return min(times) if times else None

    # -- application side -------------------------------------------------------------------

    def connect(
        self, remote_ip: int, remote_port: int, now: float, *, local_port: int | None = None
    ) -> TcpSocket:
        """Active open (RFC 9293 section 3.10.1): the SYN leaves on the next `poll`."""
        if not 0 < remote_port <= 0xFFFF:
            raise ValueError(f"TCP port out of range: {remote_port}")
        if remote_ip == self.ip or self._is_martian_source(remote_ip) or remote_ip == 0:
            raise ValueError(f"cannot connect to {Endpoint(remote_ip, remote_port)}")
        next_hop = self.next_hop(remote_ip)
        if next_hop is None:
            raise NoRouteError(
                f"no route to {Endpoint(remote_ip, remote_port)}: off-subnet and no gateway"
            )
        self._now = now
        if local_port is None:
            local_port = self.ports.allocate(self.ip, remote_ip, remote_port, now)
        else:
            self.ports.claim(local_port, remote_ip, remote_port)
        key = FlowKey.outbound(self.ip, local_port, remote_ip, remote_port)
        isn, ts_offset = self._isn.isn_and_ts_offset(
            self.ip, local_port, remote_ip, remote_port, now
        )
        connection = TcpConnection(
            self.ip,
            local_port,
            remote_ip,
            remote_port,
            self.tcp_config,
            isn=isn,
            ts_offset=ts_offset,
        )
        connection.connect(now)
        sock = TcpSocket(
            connection, Endpoint(self.ip, local_port), Endpoint(remote_ip, remote_port)
        )
        self._add_flow(_Flow(key, connection, sock, next_hop))
        self.counters.tcp_connections_opened += 1
        return sock

    def listen(self, port: int, *, backlog: int = 16) -> TcpListener:
        """Passive open on `port` (RFC 9293 section 3.10.1, LISTEN)."""
        if not 0 < port <= 0xFFFF:
            raise ValueError(f"TCP port out of range: {port}")
        if port in self._listeners:
            raise ValueError(f"already listening on port {port}")
        listener = TcpListener(self, port, backlog)
        self._listeners[port] = listener
        self.ports.reserve(port)
        return listener

    def _unlisten(self, port: int) -> None:
        self._listeners.pop(port, None)
        self.ports.unreserve(port)

    def export_changes(
        self, now: float
    ) -> tuple[list[tuple[TcpConnection, bytes | None]], list[TcpConnection]]:
        """What the engine must re-sync with the C fast path since it last asked: the live
        connections whose state may have changed (handled by `poll`, or touched since),
        each with the MAC of its next hop (None while unresolved), and the connections
        removed. Every flow is in the first list when the ARP cache changed or one of
        its entries is due for a refresh (looking an entry up is what keeps it fresh)."""
        self._exporting = True
        arp = self.arp
        if self._export_all or arp.version != self._arp_version or arp.lookups_due(now):
            self._export_all = False
            flows: Iterable[_Flow] = list(self._flows.values())
            lookups_done = True
        else:
            lookups_done = False
            flows = self._export
            flows.update(self._dirty)
            if len(flows) > 1:
                flows = sorted(flows, key=_order)
        lookup = arp.lookup
        changed = [(flow.connection, lookup(flow.next_hop, now)) for flow in flows]
        if lookups_done:
            arp.lookups_done(now)
        self._arp_version = arp.version
        self._export.clear()
        removed, self._export_removed = self._export_removed, []
        return changed, removed

    def connections(self, now: float) -> list[tuple[TcpConnection, bytes | None]]:
        """Every live connection with the MAC of its next hop (None while unresolved): what
        the engine hands to the C fast path."""
        return [
            (flow.connection, self.arp.lookup(flow.next_hop, now)) for flow in self._flows.values()
        ]

    def find_socket(self, key: FlowKey) -> TcpSocket | None:
        """The socket of the connection with this 4-tuple, given from either end."""
        flow = self._flows.get(key) or self._flows.get(key.reversed())
        return flow.socket if flow is not None else None

    @property
    def connection_count(self) -> int:
        return len(self._flows)

    def udp_bind(self, port: int) -> None:
        """Keep datagrams for `port` (at most `udp_queue_limit`) for `udp_recv`."""
        self._udp_queues.setdefault(port, deque())

    def udp_recv(self, port: int) -> list[UdpDatagram]:
        queue = self._udp_queues.get(port)
        if not queue:
            return []
        datagrams = list(queue)
        queue.clear()
        return datagrams

    def udp_send(
        self, dst_ip: int, dst_port: int, src_port: int, payload: bytes, now: float
    ) -> bool:
        """One datagram (no fragmentation: it must fit the MTU)."""
        if len(payload) > self.mtu - IPV4_HEADER_LEN - 8:
            raise ValueError(f"UDP payload of {len(payload)} bytes exceeds the MTU")
        self._now = now
        datagram = UdpRepr(src_port, dst_port, payload).emit(self.ip, dst_ip)
        sent = self._send_ipv4(dst_ip, PROTO_UDP, datagram, now)
        self.counters.udp_tx += int(sent)
        return sent


def _order(flow: _Flow) -> int:
    return flow.order


def _make_isn_generator(seed: int | None) -> IsnGenerator:
    """A keyed ISN generator (RFC 6528); with a seed, a reproducible one for tests."""
    return IsnGenerator(None if seed is None else random.Random(seed).randbytes(16))


__all__ = [
    "FlowKey",
    "HostUnreachableError",
    "Interface",
    "InterfaceCounters",
    "NoRouteError",
    "TcpListener",
    "UdpDatagram",
]

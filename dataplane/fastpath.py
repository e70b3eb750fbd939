"""The C fast path seen from Python: one engine per lcore thread, flows synced per batch.

Python keeps every decision. A TCP connection is handed to the fast path once it is
ESTABLISHED and while it has nothing unusual going on (`TcpConnection.fastpath_export`
says when); after every poll the bytes C received for it are absorbed into the
connection (`fastpath_absorb`) before any slow-path frame of the batch is processed, so
the connection sees its byte stream in order whichever path carried it. Between polls a
pending delayed ACK belongs to C; while Python handles a flow's slow-path segments it
belongs to Python (`flow_take_ack` / `flow_give_ack`).
"""

from __future__ import annotations

import errno
import functools
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from dataplane.errors import DataplaneError
from dataplane.samples import LatencySamples
from dataplane.shim import (
    EngineBinding,
    EngineConf,
    FlowStruct,
    bench_checksum,
    flow_set_feed,
    flow_template,
    load,
)
from dataplane.stack.tcp import TcpConnection
from dataplane.stack.tcp_fastpath import FastPathState
from dataplane.wire.checksum import inet_checksum

ACK_POLICIES = {"delayed": 0, "every_second": 1, "immediate": 2}
POLL_SLOW, POLL_DATA, POLL_TIMER, POLL_COMMAND, POLL_BUDGET, POLL_TX_FULL = 1, 2, 4, 8, 16, 32
POLL_EXTERNAL = 64  # the extra fd (an event loop's epoll fd) became readable
FLOW_DATA, FLOW_ACKS = 1, 2  # `active` bits (enum wsgw_flow_active)


# The flow fields Python writes on export, rcv_nxt through active, in C's layout (native
# order, no padding between them): one pack_into instead of 14 ctypes attribute writes.
_SYNC_FIELDS = (
    ("rcv_nxt", "I"),
    ("rcv_adv_right", "I"),
    ("ts_recent", "I"),
    ("last_ack_sent", "I"),
    ("snd_una", "I"),
    ("snd_nxt", "I"),
    ("snd_wnd_field", "H"),
    ("rcv_wscale", "B"),
    ("ts_enabled", "B"),
    ("ts_offset", "I"),
    ("rcv_space", "I"),
    ("mss", "I"),
    ("ack_policy", "H"),
    ("active", "H"),
)
_SYNC = struct.Struct("=" + "".join(code for _, code in _SYNC_FIELDS))
_SYNC_OFFSET = FlowStruct.rcv_nxt.offset


def _check_sync_layout() -> None:
    offset = _SYNC_OFFSET
    for name, code in _SYNC_FIELDS:
        field_ = getattr(FlowStruct, name)
        size = struct.calcsize("=" + code)
        if field_.offset != offset or field_.size != size:
            raise FastPathError(f"struct wsgw_flow layout changed at {name}: update _SYNC")
        offset += size


class FastPathError(DataplaneError):
    """The C engine could not be created or a flow could not be registered."""


#: When C acknowledges the data it takes (gateway setting engine.ack_policy): every_second
#: every second segment whatever its size, the delayed-ACK timer for an odd one; delayed
#: every second full-sized segment (RFC 5681 section 4.2), else the timer; immediate once
#: per RX burst.
AckPolicy = Literal["delayed", "every_second", "immediate"]


@dataclass(frozen=True)
class FastPathConfig:
    enabled: bool = True
    burst: int = 32
    max_flows: int = 64
    #: every_second, not delayed: with delayed, a feed's small segments waited for the
    #: timer whenever the sender's window was down to a few segments (issue #16).
    ack_policy: AckPolicy = "every_second"
    delayed_ack: float = 0.040
    verify_checksums: bool = True
    poll_mode: Literal["adaptive", "busy"] = "adaptive"
    idle_polls_before_sleep: int = 64
    #: The first nap. dataplane.engine raises it to sleep_max_ns on ports whose socket
    #: ends a nap when a frame lands (af_packet): short naps there only cost wake-ups.
    sleep_min_ns: int = 2_000
    sleep_max_ns: int = 1_000_000
    # After Python transmits (a SYN, a request, an echo) busy-poll this long before backing
    # off, and restart the back-off from sleep_min_ns: the answer comes within a round trip.
    spin_after_tx_ns: int = 200_000
    ring_size: int = 1 << 20


_check_sync_layout()


class PollOutcome(NamedTuple):
    """One poll's result (a tuple: built once per poll, positionally)."""

    reason: int
    now: float
    slow_frames: list[bytes]
    touched: list[int]
    rx_frames: int
    first_rx_ns: int = 0  # clock (ns) just before the first RX burst that brought frames


def ack_template(
    src_mac: bytes,
    dst_mac: bytes,
    src_ip: int,
    dst_ip: int,
    src_port: int,
    dst_port: int,
    timestamps: bool,
) -> bytes:
    """Ethernet + IPv4 + TCP(ACK) [+ NOP NOP TS] with the constant fields filled in: the IP
    header is complete (ident 0, DF), C writes seq, ack, window, TS and the TCP checksum."""
    tcp_len = 20 + (12 if timestamps else 0)
    tcp_header = struct.pack(
        "!HHIIBBHHH", src_port, dst_port, 0, 0, (tcp_len // 4) << 4, 0x10, 0, 0, 0
    )
    options = _TS_OPTION if timestamps else b""
    return _frame_prefix(src_mac, dst_mac, src_ip, dst_ip, tcp_len) + tcp_header + options


_TS_OPTION = b"\x01\x01\x08\x0a" + bytes(8)  # NOP NOP TS (values filled in by C)


@functools.lru_cache(maxsize=256)
def _frame_prefix(src_mac: bytes, dst_mac: bytes, src_ip: int, dst_ip: int, tcp_len: int) -> bytes:
    """Ethernet and IPv4 headers of an ACK template: the same for every connection between
    two hosts, so built (with the IPv4 checksum) once, not per connection."""
    ip_header = struct.pack(
        "!BBHHHBBHII", 0x45, 0, 20 + tcp_len, 0, 0x4000, 64, 6, 0, src_ip, dst_ip
    )
    ip_header = ip_header[:10] + struct.pack("!H", inet_checksum(ip_header)) + ip_header[12:]
    return dst_mac + src_mac + b"\x08\x00" + ip_header


class FastPath:
    """One C engine: its flows, its polls, and the sync with the Python connections."""

    def __init__(
        self, local_ip: int, config: FastPathConfig, port_handle: int = 0, frame_bytes: int = 2048
    ) -> None:
        """frame_bytes: the largest frame the port delivers (MTU + Ethernet header, rounded
        up); the slow path's arena holds four bursts of them, so a burst of jumbo frames that
        all leave the fast path (a handshake, a loss) is not dropped for want of room."""
        self.config = config
        self._ack_policy = ACK_POLICIES[config.ack_policy]
        self.local_ip = local_ip
        shim = load()
        conf = EngineConf(
            local_ip=local_ip,
            burst=config.burst,
            max_flows=config.max_flows,
            slow_arena_bytes=max(4 * config.burst * max(frame_bytes, 2048), 1 << 18),
            slow_max_frames=max(4 * config.burst, 256),
            verify_checksums=int(config.verify_checksums),
            idle_polls_before_sleep=config.idle_polls_before_sleep,
            sleep_min_ns=config.sleep_min_ns,
            sleep_max_ns=0 if config.poll_mode == "busy" else config.sleep_max_ns,
            delayed_ack_ns=int(config.delayed_ack * 1e9),
            fast_path=int(config.enabled),
            ts_hz=1000,
            spin_after_tx_ns=config.spin_after_tx_ns,
        )
        self._engine = EngineBinding(shim.lib, conf, port_handle)
        if self._engine.rc < 0:
            raise FastPathError(f"cannot create the engine: {shim.last_error()}", -self._engine.rc)
        self._slots: dict[int, int] = {}  # id(connection) -> slot
        self._connections: dict[int, TcpConnection] = {}  # slot -> connection
        self._exported: dict[int, FastPathState] = {}
        self._flow_structs: dict[int, FlowStruct] = {}  # slot -> its struct in C (fixed)
        self._senders: dict[int, Callable[[bytes, int, int], int]] = {}  # slot -> C transmit
        self._acks_seen: dict[int, int] = {}  # slot -> acking_segments_sent at its export
        # id(connection) -> its C feed's handle (dataplane/feed.py): attached to the flow
        # whenever the connection has one (a flow withdrawn and added again gets it back)
        self._feeds: dict[int, int] = {}
        # What a C transmit is timed with: C's clock is CLOCK_MONOTONIC, time.monotonic's
        # too (read without a C call), until a test sets a virtual time.
        self._virtual_clock = self._engine.clock()
        self._clock: Callable[[], float] = time.monotonic
        self._quiet: list[tuple[int, TcpConnection]] = []  # absorbed, not exported
        # (conn, acks, snd_una, window field, wl1, tsecr, now) for `settle_acks`
        self._acks_due: list[tuple[TcpConnection, int, int, int, int, int, float]] = []
        # RX burst (C stamp) to bytes readable in the connection, per absorb, in ns: the
        # in-stack latency of the first byte of each batch. Bounded: the newest 65536.
        self.rx_to_readable_ns = LatencySamples()
        # The in-C part of it: RX burst -> the poll returning to Python, per poll that
        # brought frames (the bytes are in the flow's ring or the slow arena by then).
        self.rx_to_return_ns = LatencySamples()

    # ---- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        for conn in self._connections.values():
            conn.fast_sender = None  # its C engine is about to go
        self._senders.clear()
        self._engine.destroy()
        self._flow_structs.clear()
        self._slots.clear()
        self._connections.clear()

    @property
    def closed(self) -> bool:
        return not self._engine.handle

    def set_enabled(self, enabled: bool) -> None:
        self._engine.set_fast_path(enabled)

    def hold_tx(self, hold: bool) -> None:
        """While Python's frames wait for room on the port, C builds no data segment
        (the sends fall back to Python and queue behind them, in order)."""
        self._engine.set_tx_hold(hold)

    def wake(self) -> None:
        """From any thread: make the current poll return (a command is waiting)."""
        self._engine.wake()

    def set_rx_fd(self, fd: int | None) -> None:
        """An fd readable while the port holds received frames (`DpdkPort.rx_wait_fd`):
        the back-off sleep ends when a frame arrives."""
        self._engine.set_rx_fd(-1 if fd is None else fd)

    def set_sleep(self, idle_polls: int, first_nap_ns: int, max_nap_ns: int) -> None:
        """The adaptive back-off: empty polls before the first nap, its length, and the
        ceiling it doubles up to (0: never nap, busy polling)."""
        self._engine.set_sleep(idle_polls, first_nap_ns, max_nap_ns)

    def expect_rx(self) -> None:
        """Python just transmitted: poll hard for the answer (see spin_after_tx_ns)."""
        self._engine.expect_rx(self.config.spin_after_tx_ns)

    def set_extra_fd(self, fd: int | None) -> None:
        """An fd whose readiness ends a poll's back-off sleep (POLL_EXTERNAL), or None.
        The engine loop (dataplane/loop.py) gives its epoll fd: while the stack idles, the
        loop's own sockets and timers still wake it."""
        self._engine.set_extra_fd(-1 if fd is None else fd)

    @property
    def flows(self) -> int:
        return len(self._connections)

    # ---- polling -----------------------------------------------------------------------
    def poll(self, deadline: float | None, budget: float) -> PollOutcome:
        deadline_ns = int(deadline * 1e9) if deadline is not None else 0
        engine = self._engine
        reason, slow, touched, _, now_ns, rx_frames, first_rx_ns = engine.poll_fields(
            deadline_ns if deadline_ns > 0 else 0, int(budget * 1e9)
        )
        if first_rx_ns:
            self.rx_to_return_ns.append(now_ns - first_rx_ns)
        return PollOutcome(
            reason,
            now_ns / 1e9,
            engine.slow_frames(slow) if slow else [],
            engine.touched(touched) if touched else [],
            rx_frames,
            first_rx_ns,
        )

    def set_time(self, now: float | None) -> None:
        """Tests: C reads this virtual time (seconds) instead of CLOCK_MONOTONIC."""
        self._engine.set_time(0 if now is None else max(int(now * 1e9), 1))
        clock = time.monotonic if now is None else self._virtual_clock
        if clock is not self._clock:
            self._clock = clock
            for conn in self._connections.values():
                if conn.fast_clock is not None:
                    conn.fast_clock = clock

    def inject(self, frames: list[bytes]) -> int:
        """Frames for the fast path when there is no DPDK port (memory links, tests)."""
        return self._engine.inject(frames)

    def take_tx(self) -> list[bytes]:
        """ACK frames C built, when there is no DPDK port to send them on."""
        return self._engine.take_tx()

    def stats(self) -> dict[str, int]:
        return self._engine.stats()

    def flow(self, slot: int) -> FlowStruct:
        return self._engine.flow(slot)

    def _flow(self, slot: int) -> FlowStruct:
        """The flow's struct, looked up in C once per registration (the array is fixed)."""
        flow = self._flow_structs.get(slot)
        if flow is None:
            flow = self._flow_structs[slot] = self._engine.flow(slot)
        return flow

    def connection(self, slot: int) -> TcpConnection | None:
        return self._connections.get(slot)

    # ---- sync with the Python connections ---------------------------------------------------
    def absorb(self, slot: int, now: float) -> bool:
        """Move what C received for this flow into its connection (after each poll), in one
        C call (`wsgw_engine_flow_sync`). True when only data moved (see
        `TcpConnection.fastpath_absorb`), or when there is no such connection."""
        conn = self._connections.get(slot)
        if conn is None:
            return True
        # Bytes for a direct reader do not fill the receive buffer: C's window stays right.
        direct = conn.reads_directly()
        (
            data,
            rcv_nxt,
            rcv_adv_right,
            ts_recent,
            last_ack_sent,
            segments,
            acks,
            snd_una,
            snd_wl1,
            ack_tsecr,
            unacked_bytes,
            snd_wnd_field,
            slow_pending,
            deadline_ns,
            first_rx_ns,
            now_ns,
            fed,
        ) = self._engine.flow_sync(slot, direct)
        # (slow_pending: Python is about to handle this flow's segments, and the delayed
        # ACK C owed is its own now: deadline_ns, unacked_bytes.)
        quiet = conn.fastpath_absorb(
            data,
            rcv_nxt,
            rcv_adv_right,
            ts_recent,
            last_ack_sent,
            segments,
            unacked_bytes,
            deadline_ns / 1e9 if deadline_ns else None,
            now,
            fed,
        )
        if acks:
            ack = (conn, acks, snd_una, snd_wnd_field, snd_wl1, ack_tsecr, now)
            if slow_pending:  # before its slow-path segments, in order
                self.settle_acks()
                conn.fastpath_acked(*ack[1:])
            else:
                self._acks_due.append(ack)
        if first_rx_ns and data:
            self.rx_to_readable_ns.append(now_ns - first_rx_ns)
        if quiet and not direct:
            # The connection is not exported this batch: `sync_receive_space` tells C
            # what receive buffer is left once the services have read.
            self._quiet.append((slot, conn))
        return quiet

    def acks_due(self) -> int:
        """How many polls' ACK entries wait for `settle_acks`."""
        return len(self._acks_due)

    def settle_wanted(self, limit: int) -> bool:
        """The ACKs waiting should be processed now: `limit` polls' entries, or one of a
        connection whose sender waits for what they free (data beyond a window, a full
        send buffer)."""
        due = self._acks_due
        if not due:
            return False
        if len(due) >= limit:
            return True
        return any(entry[0].send_blocked for entry in due)

    def settle_acks(self) -> None:
        """The ACK processing of the ACKs C took (`fastpath_acked`), left until the
        batch's data was delivered (on the engine loop: until `Engine.flush` needs it). A
        connection's entries from several polls become one call with the latest values,
        when it has timestamps (the RTT sample is the newest ACK's TSecr, RFC 7323
        section 4); without, each entry is processed in order (its own RTT timing)."""
        due = self._acks_due
        if not due:
            return
        self._acks_due = []
        if len(due) == 1:
            conn, acks, snd_una, window_field, wl1, tsecr, now = due[0]
            conn.fastpath_acked(acks, snd_una, window_field, wl1, tsecr, now)
            return
        merged: dict[TcpConnection, list[Any]] = {}
        for conn, acks, snd_una, window_field, wl1, tsecr, now in due:
            last = merged.get(conn)
            if last is not None and conn.timestamps_enabled:
                last[:] = (last[0] + acks, snd_una, window_field, wl1, tsecr, now)
                continue
            if last is not None:
                conn.fastpath_acked(*last)
            merged[conn] = [acks, snd_una, window_field, wl1, tsecr, now]
        for conn, args in merged.items():
            conn.fastpath_acked(*args)

    def sync_receive_space(self) -> None:
        """After the batch's services read what was absorbed: C's window offers the free
        receive buffer of the flows that were not exported (stale, it would offer either
        too much, or too little for a sender that fills it)."""
        connections = self._connections
        for slot, conn in self._quiet:
            if connections.get(slot) is not conn:
                continue  # withdrawn since (its slot may hold another flow now)
            self._flow(slot).rcv_space = conn.fastpath_receive_space()
            self._exported.pop(slot, None)  # C's copy differs now: the next export writes
        self._quiet.clear()

    def flush_tx(self) -> None:
        """Put what flow sends queued on the wire before Python transmits its own frames:
        a flow's segments must leave in sequence order."""
        self._engine.tx_flush()

    def export(self, conn: TcpConnection, next_hop_mac: bytes | None, local_mac: bytes) -> None:
        """Register, refresh or withdraw the connection's flow, as its state allows."""
        key = id(conn)
        slot = self._slots.get(key)
        state = conn.fastpath_export() if next_hop_mac is not None else None
        if state is None:
            if slot is not None:
                self._withdraw(key, slot, conn)
            return
        if slot is None:
            slot = self._engine.flow_add(
                conn.remote_ip, conn.remote_port, conn.local_port, self.config.ring_size
            )
            if slot < 0:
                return  # no free slot: the slow path carries this connection (still correct)
            self._slots[key] = slot
            self._connections[slot] = conn
            self._senders[slot] = self._engine.flow_sender(slot)
            feed = self._feeds.get(key)
            if feed:
                flow_set_feed(self._engine.handle, slot, feed)
            assert next_hop_mac is not None
            flow_template(
                self._flow(slot),
                ack_template(
                    local_mac,
                    next_hop_mac,
                    self.local_ip,
                    conn.remote_ip,
                    conn.local_port,
                    conn.remote_port,
                    state.ts_enabled,
                ),
            )
        flow = self._flow(slot)
        conn.fast_sender = self._senders[slot]
        conn.fast_clock = self._clock
        active = FLOW_DATA | FLOW_ACKS if state.acks_in_c else FLOW_DATA
        if self._exported.get(slot) != state:
            # rcv_nxt .. active in one write (the layout is checked at import: _SYNC).
            _SYNC.pack_into(
                flow,
                _SYNC_OFFSET,
                state.rcv_nxt,
                state.rcv_adv_right,
                state.ts_recent,
                state.last_ack_sent,
                state.snd_una,
                state.snd_nxt,
                state.snd_wnd_field,
                state.rcv_wscale,
                int(state.ts_enabled),
                state.ts_offset,
                state.rcv_space,
                state.mss,
                self._ack_policy,
                active,
            )
            self._exported[slot] = state
        acks_seen = self._acks_seen.get(slot)
        self._acks_seen[slot] = conn.acking_segments_sent
        # A delayed ACK Python still owes goes back to C, which sends it on time.
        if state.ack_deadline is not None:
            self._engine.flow_give_ack(slot, int(state.ack_deadline * 1e9), state.unacked_bytes, 1)
            conn.fastpath_ack_handed_over()
        elif (
            state.last_ack_sent == state.rcv_nxt
            and conn.acking_segments_sent != acks_seen
            and (flow.ack_deadline_ns or flow.unacked_bytes)
        ):
            # Python's own segment (data, say) carried the ACK C still owed: C owes nothing
            # now. Left pending, C's count would keep growing across slow-path hand-backs
            # until Python saw "two full segments unacknowledged" and sent a pure ACK per
            # request/response exchange. (Only when Python did send one since the last
            # export: an ACK it handed over at that export is still C's to send.)
            self._engine.flow_give_ack(slot, 0, 0, 0)
        else:
            return  # active is set (with the state above, or by an earlier export)
        flow.active = active

    def _withdraw(self, key: int, slot: int, conn: TcpConnection) -> None:
        """Python alone handles the connection from now on. Its bytes were absorbed after
        the poll (C cannot have received since); an ACK C still owed becomes Python's."""
        flow = self._flow(slot)
        flow.active = 0
        conn.fast_sender = None
        self._senders.pop(slot, None)
        self._acks_seen.pop(slot, None)
        unacked = int(flow.unacked_bytes)
        deadline_ns = self._engine.flow_take_ack(slot)
        if deadline_ns:
            conn.fastpath_owe_ack(deadline_ns / 1e9, unacked)
        self._engine.flow_del(slot)
        self._flow_structs.pop(slot, None)
        del self._slots[key]
        self._connections.pop(slot, None)
        self._exported.pop(slot, None)

    def forget(self, conn: TcpConnection) -> None:
        slot = self._slots.get(id(conn))
        if slot is not None:
            self._withdraw(id(conn), slot, conn)
        self._feeds.pop(id(conn), None)

    # ---- the C feed path ---------------------------------------------------------------------
    def attach_feed(self, conn: TcpConnection, feed_handle: int) -> None:
        """Give the connection's flow a C feed (dataplane/feed.py), now and whenever the
        flow is added again; it starts disarmed. On the engine's thread."""
        self._feeds[id(conn)] = feed_handle
        slot = self._slots.get(id(conn))
        if slot is not None:
            flow_set_feed(self._engine.handle, slot, feed_handle)

    def detach_feed(self, conn: TcpConnection) -> None:
        """The connection's flow carries no feed any more (its bytes all go to Python):
        the feed may be freed after this. On the engine's thread."""
        if self._feeds.pop(id(conn), None) is None:
            return
        slot = self._slots.get(id(conn))
        if slot is not None:
            flow_set_feed(self._engine.handle, slot, 0)

    # ---- microbenchmarks -------------------------------------------------------------------
    def bench_flow_lookup(self, iterations: int) -> float:
        """Nanoseconds per flow-table lookup (loop in C)."""
        return self._engine.bench_flow_lookup(iterations) / max(iterations, 1)

    def bench_fast_path(self, slot: int, frames: list[bytes], rounds: int) -> float:
        """Nanoseconds per segment through the fast path (0.0: a frame was not fast)."""
        total = self._engine.bench_fast_path(slot, frames, rounds)
        return total / (len(frames) * rounds) if total else 0.0

    def bench_echo(
        self, conn: TcpConnection, frame: bytes, reply_len: int, rounds: int, timeout: float
    ) -> tuple[list[int], bytes]:
        """Round trips (ns) of `frame` and a reply_len-byte answer with C alone in the loop
        (`wsgw_bench_flow_echo`), and the last answer: the floor of this stack's request
        path. The flow is withdrawn after it and the connection is out of step with what
        C did: the caller aborts it. On the engine's thread only, and on an engine that
        carries nothing else meanwhile: other flows' slow-path frames (ARP too) are
        dropped while it runs, and no Python runs for them; so are the peer's copies of
        an answer the flow has (its retransmission after this thread was off the CPU)."""
        slot = self._slots.get(id(conn))
        if slot is None:
            raise FastPathError("the connection is not on the fast path", errno.ENOENT)
        self.settle_acks()
        try:
            rc, rtts, reply = self._engine.bench_flow_echo(
                slot, frame, reply_len, rounds, int(timeout * 1e9)
            )
        finally:
            self._withdraw(id(conn), slot, conn)  # nothing of it may reach the connection
        if rc < 0:
            raise FastPathError(f"C echo benchmark failed: {os.strerror(-rc)}", -rc)
        return rtts, reply


def bench_checksum_ns(data: bytes, iterations: int) -> float:
    return bench_checksum(load().lib, data, iterations) / max(iterations, 1)

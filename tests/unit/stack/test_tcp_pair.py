"""Two TcpConnections wired to each other through an in-memory wire with a virtual clock.

What one emits is delivered to the other after a fixed latency; a seeded fault function
drops, duplicates and reorders segments. Each side sends 2 MB and closes; the test checks
that both byte streams arrive intact and that a run is fully determined by its seed.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.stack.tcp import TcpConfig, TcpConnection, TcpState
from dataplane.wire.tcp import TcpFlags, TcpRepr

CLIENT_IP, SERVER_IP = 0x0A000001, 0x0A000002
CLIENT_PORT, SERVER_PORT = 40000, 8080
LATENCY = 0.001  # one way
REORDER_DELAY = 0.0025  # a reordered segment arrives after the next few
TRANSFER = 2 * 1024 * 1024
MAX_VIRTUAL_SECONDS = 900.0


@dataclass
class Endpoint:
    name: str
    data: bytes
    read_interval: float = 0.0  # a slow reader reads only this often
    conn: TcpConnection | None = None
    next_read: float = 0.0
    sent: int = 0
    closed: bool = False
    received: bytearray = field(default_factory=bytearray)

    def pump_application(self, now: float) -> None:
        """Send as much as the buffer takes, close once everything is queued, read all."""
        conn = self.conn
        if conn is None:
            return
        if conn.state in (TcpState.ESTABLISHED, TcpState.CLOSE_WAIT):
            while self.sent < len(self.data):
                taken = conn.send(memoryview(self.data)[self.sent : self.sent + 65536])
                if taken == 0:
                    break
                self.sent += taken
            if self.sent == len(self.data) and not self.closed:
                conn.close()
                self.closed = True
        if now >= self.next_read:
            while chunk := conn.recv(1 << 20):
                self.received += chunk
            self.next_read = now + self.read_interval


@dataclass
class PairResult:
    client: Endpoint
    server: Endpoint
    trace_digest: str
    virtual_seconds: float
    dropped: int
    zero_windows: int  # segments that advertised a zero window


def run_pair(
    fault_rate: float,
    seed: int,
    size: int = TRANSFER,
    *,
    server_size: int | None = None,
    config: TcpConfig | None = None,
    read_interval: float = 0.0,
) -> PairResult:
    """Client connects, both send their data and close; returns when both are CLOSED."""
    rng = random.Random(seed)
    payload_rng = random.Random(12345)
    config = config or TcpConfig(time_wait=1.0)
    client = Endpoint("client", payload_rng.randbytes(size))
    server = Endpoint(
        "server",
        payload_rng.randbytes(size if server_size is None else server_size),
        read_interval=read_interval,
    )
    client.conn = TcpConnection(
        CLIENT_IP, CLIENT_PORT, SERVER_IP, SERVER_PORT, config, isn=0xFFFF0000, ts_offset=7
    )
    now = 0.0
    client.conn.connect(now)
    wire: list[tuple[float, int, str, TcpRepr]] = []
    counter = 0
    dropped = 0
    zero_windows = 0
    trace = hashlib.sha256()

    def transmit(segment: TcpRepr, to: str) -> None:
        nonlocal counter, dropped, zero_windows
        zero_windows += segment.window == 0 and not segment.flags & TcpFlags.RST
        trace.update(
            f"{now:.6f} {to} {segment.seq} {segment.ack} {int(segment.flags)} "
            f"{segment.window} {len(segment.payload)}\n".encode()
        )
        if rng.random() < fault_rate:
            dropped += 1
            return
        copies = 2 if rng.random() < fault_rate else 1
        for _ in range(copies):
            delay = LATENCY + (REORDER_DELAY if rng.random() < fault_rate else 0.0)
            counter += 1
            heapq.heappush(wire, (now + delay, counter, to, segment))

    def deliver(segment: TcpRepr, to: str) -> None:
        if to == "client":
            assert client.conn is not None
            client.conn.on_segment(segment, now)
        elif server.conn is None:
            # The demultiplexer's job: a SYN for the listening port opens a connection.
            server.conn = TcpConnection.from_syn(
                segment, SERVER_IP, CLIENT_IP, config, isn=0x7FFFFF00, now=now, ts_offset=99
            )
        else:
            server.conn.on_segment(segment, now)

    idle_rounds = 0
    while True:
        for endpoint, peer in ((client, "server"), (server, "client")):
            endpoint.pump_application(now)
            if endpoint.conn is not None:
                for segment in endpoint.conn.poll_output(now):
                    transmit(segment, peer)
        done = all(
            e.conn is not None
            and e.conn.state is TcpState.CLOSED
            and len(e.received) == len(peer.data)
            for e, peer in ((client, server), (server, client))
        )
        if done or (client.conn.state is TcpState.CLOSED and client.conn.error is not None):
            break
        deadlines = [wire[0][0]] if wire else []
        for endpoint in (client, server):
            if endpoint.conn is not None and (at := endpoint.conn.poll_at()) is not None:
                deadlines.append(at)
            if endpoint.conn is not None and endpoint.conn.readable and not endpoint.conn.at_eof:
                deadlines.append(endpoint.next_read)  # a slow reader comes back later
        assert deadlines, "both sides idle before the transfer finished"
        next_time = max(min(deadlines), now)
        idle_rounds = idle_rounds + 1 if next_time == now else 0
        assert idle_rounds < 50, "poll_at() keeps saying 'now' without output"
        now = next_time
        assert now < MAX_VIRTUAL_SECONDS, "transfer did not finish in virtual time"
        while wire and wire[0][0] <= now:
            _, _, to, segment = heapq.heappop(wire)
            deliver(segment, to)
    return PairResult(client, server, trace.hexdigest(), now, dropped, zero_windows)


def _assert_intact(result: PairResult) -> None:
    for endpoint, peer in ((result.client, result.server), (result.server, result.client)):
        assert endpoint.conn is not None
        assert endpoint.conn.error is None, endpoint.conn.error
        assert len(endpoint.received) == len(peer.data)
        assert (
            hashlib.sha256(endpoint.received).hexdigest() == hashlib.sha256(peer.data).hexdigest()
        )
        assert endpoint.conn.at_eof


def test_clean_transfer_both_ways() -> None:
    result = run_pair(0.0, seed=1)
    _assert_intact(result)
    assert result.client.conn is not None and result.server.conn is not None
    assert result.client.conn.stats.retransmits == 0
    assert result.server.conn.stats.retransmits == 0


@pytest.mark.parametrize("fault_rate", [0.01, 0.05, 0.10])
def test_transfer_survives_faults(fault_rate: float) -> None:
    result = run_pair(fault_rate, seed=int(fault_rate * 1000))
    assert result.dropped > 0
    _assert_intact(result)
    assert result.client.conn is not None and result.server.conn is not None
    retransmits = result.client.conn.stats.retransmits + result.server.conn.stats.retransmits
    assert retransmits > 0


def test_same_seed_same_run() -> None:
    first = run_pair(0.05, seed=77, size=256 * 1024)
    second = run_pair(0.05, seed=77, size=256 * 1024)
    _assert_intact(first)
    assert first.trace_digest == second.trace_digest
    assert first.virtual_seconds == second.virtual_seconds
    other = run_pair(0.05, seed=78, size=256 * 1024)
    assert other.trace_digest != first.trace_digest


def test_one_way_transfer_with_delayed_acks_and_faults() -> None:
    config = TcpConfig(time_wait=1.0, delayed_ack=0.04)
    result = run_pair(0.05, seed=5, size=TRANSFER, server_size=0, config=config)
    _assert_intact(result)
    assert result.server.conn is not None
    assert result.server.conn.stats.bytes_out == 0


def test_slow_reader_small_window_and_faults() -> None:
    # The receiver empties its 16 KiB buffer only every 50 ms: its window closes and
    # reopens again and again (window updates; persist probes when those are lost).
    config = TcpConfig(time_wait=1.0, recv_buffer=16 * 1024, send_buffer=32 * 1024)
    for fault_rate, seed in ((0.0, 1), (0.05, 9), (0.2, 2)):
        result = run_pair(
            fault_rate, seed, 512 * 1024, server_size=0, config=config, read_interval=0.05
        )
        _assert_intact(result)
        assert result.zero_windows > 0


@pytest.mark.parametrize(
    "extensions",
    [
        {"sack": False},
        {"timestamps": False},
        {"window_scaling": False},
        {"sack": False, "timestamps": False, "window_scaling": False},
    ],
    ids=["no-sack", "no-timestamps", "no-wscale", "plain"],
)
def test_transfer_without_extensions(extensions: dict[str, bool]) -> None:
    config = TcpConfig(time_wait=1.0, **extensions)
    _assert_intact(run_pair(0.05, seed=3, size=512 * 1024, config=config))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), fault_rate=st.floats(0.0, 0.2))
def test_any_seed_any_fault_rate(seed: int, fault_rate: float) -> None:
    _assert_intact(run_pair(fault_rate, seed=seed, size=64 * 1024))


def cross(a: TcpConnection, b: TcpConnection, sent: float, arrives: float) -> None:
    """Both sides emit at `sent` before either hears the other: the segments cross in flight."""
    out_a, out_b = a.poll_output(sent), b.poll_output(sent)
    for segment in out_a:
        b.on_segment(segment, arrives)
    for segment in out_b:
        a.on_segment(segment, arrives)


def exchange(a: TcpConnection, b: TcpConnection, now: float) -> int:
    """Deliver everything both sides emit at `now`, until they are quiet."""
    delivered = 0
    while True:
        out_a, out_b = a.poll_output(now), b.poll_output(now)
        if not out_a and not out_b:
            return delivered
        for segment in out_a:
            b.on_segment(segment, now)
        for segment in out_b:
            a.on_segment(segment, now)
        delivered += len(out_a) + len(out_b)


@pytest.mark.parametrize("extensions", [True, False], ids=["extensions", "plain"])
def test_simultaneous_open_and_simultaneous_close(extensions: bool) -> None:
    config = TcpConfig(
        time_wait=1.0, sack=extensions, timestamps=extensions, window_scaling=extensions
    )
    a = TcpConnection(CLIENT_IP, 5000, SERVER_IP, 6000, config, isn=1_000, ts_offset=0)
    b = TcpConnection(SERVER_IP, 6000, CLIENT_IP, 5000, config, isn=0xFFFFFFFE, ts_offset=0)
    a.connect(0.0)
    b.connect(0.0)
    cross(a, b, 0.0, 0.001)  # the SYNs cross
    assert a.state is b.state is TcpState.SYN_RECEIVED
    exchange(a, b, 0.002)
    assert a.state is b.state is TcpState.ESTABLISHED
    a.send(b"from a")
    b.send(b"from b")
    exchange(a, b, 0.003)
    assert (a.recv(), b.recv()) == (b"from b", b"from a")
    a.close()
    b.close()
    cross(a, b, 0.004, 0.005)  # the FINs cross
    assert a.state is b.state is TcpState.CLOSING
    exchange(a, b, 0.006)
    assert a.state is b.state is TcpState.TIME_WAIT
    assert a.poll_output(1.006) == [] and b.poll_output(1.006) == []
    assert a.state is b.state is TcpState.CLOSED
    assert a.error is None and b.error is None
    assert a.at_eof and b.at_eof

"""`TcpConnection.send` building the segment in C (`_send_in_c`), through a whole engine.

The engine (C fast path + Python stack) talks to a plain Python stack over in-memory links
on one virtual clock, as in test_engine_differential.py: a small send on an exported
connection leaves as a segment C built (the engine's `tx_data_segments` counts it);
anything else falls back to Python's `poll_output`. Either way the peer must get exactly
the bytes, and a request/response exchange must end in the same TCP state with the fast
path on and off, with and without faults on the link.
"""

from __future__ import annotations

import dataclasses
import errno
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pytest

from dataplane.engine import Engine, EngineConfig
from dataplane.fastpath import AckPolicy, FastPathConfig
from dataplane.links.clock import VirtualClock
from dataplane.links.faults import FaultConfig, FaultInjector
from dataplane.links.memory import memory_link_pair
from dataplane.stack.runner import StackRunner
from dataplane.stack.socket import TcpSocket
from dataplane.stack.tcp import TcpConfig, TcpConnection, TcpState
from dataplane.stack.tcp_errors import TcpStateError
from dataplane.wire.ethernet import EthernetRepr
from dataplane.wire.ipv4 import Ipv4Repr
from dataplane.wire.tcp import TcpRepr
from tests.unit.engine.engine_peer import ENGINE_MAC, PEER_IP, PEER_MAC, iface_pair
from tests.unit.stack.tcp_helpers import LOCAL_SEQ, REMOTE_SEQ, conn_established, seg

PORT = 7000
TCP = TcpConfig(time_wait=0.05, rto_min=0.05, rto_initial=0.2)
PAYLOAD_LIMIT = 1460 - 12  # the MSS less the timestamp option


class Pair:
    """An engine (the client) and a Python peer (the server) on one virtual clock."""

    def __init__(
        self,
        *,
        fast_path: bool = True,
        faults: FaultConfig | None = None,
        seed: int = 1,
        engine_tcp: TcpConfig = TCP,
        peer_tcp: TcpConfig = TCP,
        ack_policy: AckPolicy = "delayed",
    ) -> None:
        """ack_policy: the scenarios built on this pair (test_lazy_settle's) time the
        peer's FIN or RST against ACKs the delayed rule still holds."""
        self.clock = VirtualClock()
        a, b = memory_link_pair(clock=self.clock, latency=0.0005, mac_a=ENGINE_MAC, mac_b=PEER_MAC)
        self.engine_link = a
        self.peer_link = FaultInjector(b, faults, seed, clock=self.clock) if faults else b
        self.iface, self.peer_iface = iface_pair(engine_tcp, peer_tcp, seed=seed)
        config = EngineConfig(fastpath=FastPathConfig(enabled=fast_path, ack_policy=ack_policy))
        self.engine = Engine(self.iface, link=a, clock=self.clock, config=config)
        self.peer = StackRunner(self.peer_iface, self.peer_link, self.clock)
        self.listener = self.peer_iface.listen(PORT)

    def close(self) -> None:
        self.engine.close()

    def c_segments(self) -> int:
        return self.engine.fastpath.stats()["tx_data_segments"]

    def step(self) -> None:
        self.peer.step()
        self.engine.run_once(0.0)

    def steps(self, count: int) -> None:
        """`count` steps, the clock advanced after each."""
        for _ in range(count):
            self.step()
            self.advance()

    def advance(self) -> None:
        """To the next timer or frame, at most a millisecond on (C's delayed ACK timer is
        not among the interface's)."""
        now = self.clock()
        times = [
            t
            for t in (
                self.peer.poll_at(),
                self.iface.poll_at(),
                getattr(self.peer_link, "poll_at", lambda: None)(),
                self.engine_link.poll_at(),
            )
            if t is not None
        ]
        self.clock.advance_to(max(now + 1e-5, min([now + 0.001, *times])))

    def run(self, until: Callable[[], bool], limit: float = 10.0) -> None:
        end = self.clock() + limit
        while True:
            self.step()
            if until():
                return
            assert self.clock() < end, "timed out"
            self.advance()

    def open(self) -> tuple[TcpSocket, TcpSocket]:
        """A connection, ESTABLISHED on both sides and exported to C (its sender set)."""
        sock = self.iface.connect(PEER_IP, PORT, self.clock())
        accepted: list[TcpSocket] = []

        def up() -> bool:
            if not accepted:
                server = self.listener.accept()
                if server is not None:
                    accepted.append(server)
            return bool(accepted) and sock.connection.fast_sender is not None

        self.run(up)
        assert sock.state is TcpState.ESTABLISHED
        return sock, accepted[0]

    def deliver(self, sock: TcpSocket, server: TcpSocket, expected: bytes) -> bytes:
        """Run until the peer has read `expected`'s length, then all is acknowledged."""
        got = bytearray()

        def done() -> bool:
            got.extend(server.recv(1 << 20))
            assert sock.error is None and server.error is None
            return len(got) >= len(expected) and settled(sock.connection)

        self.run(done)
        return bytes(got)


def reader(sock: TcpSocket, got: bytearray, until: Callable[[], bool]) -> Callable[[], bool]:
    """A `Pair.run` condition: read what arrived into `got`, then ask `until`."""

    def read() -> bool:
        got.extend(sock.recv(1 << 20))
        return until()

    return read


def settled(conn: TcpConnection) -> bool:
    """Nothing in flight or unsent: every byte sent was acknowledged."""
    return conn._snd_una == conn._snd_max == conn._snd_nxt and len(conn._tx) == 0


@pytest.fixture
def pair() -> Iterator[Pair]:
    p = Pair()
    yield p
    p.close()


# ---- what goes through C -------------------------------------------------------------------


def test_a_small_send_after_export_is_built_in_c(pair: Pair) -> None:
    sock, server = pair.open()
    before = pair.c_segments()
    conn = sock.connection
    snd_max = conn._snd_max
    assert sock.send(b"subscribe trades") == 16
    assert pair.c_segments() == before + 1  # at once, not at the next poll
    assert conn._snd_max == snd_max + 16  # Python's state moved with it
    assert conn._rto_deadline is not None  # and the retransmission timer runs
    assert pair.deliver(sock, server, b"subscribe trades") == b"subscribe trades"
    assert pair.c_segments() == before + 1
    assert conn.stats.rtt_srtt > 0


def test_a_full_segment_is_built_in_c(pair: Pair) -> None:
    sock, server = pair.open()
    before = pair.c_segments()
    data = random.Random(1).randbytes(PAYLOAD_LIMIT)
    assert sock.send(data) == len(data)
    assert pair.c_segments() == before + 1
    assert pair.deliver(sock, server, data) == data


def test_small_sends_in_a_row_each_go_through_c(pair: Pair) -> None:
    sock, server = pair.open()
    before = pair.c_segments()
    messages = [f"msg {i};".encode() for i in range(8)]
    for message in messages:
        sock.send(message)
    assert pair.c_segments() == before + len(messages)
    assert pair.deliver(sock, server, b"".join(messages)) == b"".join(messages)


def test_the_segment_carries_the_ack_c_owed(pair: Pair) -> None:
    """The peer's data, taken by C with a delayed ACK pending: the reply carries that ACK,
    and no pure ACK follows for it."""
    sock, server = pair.open()
    server.send(b"tick")
    got = bytearray()
    pair.run(reader(sock, got, lambda: bool(got)))
    acks_before = pair.engine.fastpath.stats()["acks_sent"]
    sock.send(b"tock")
    assert pair.deliver(sock, server, b"tock") == b"tock"
    peer_conn = server.connection
    assert peer_conn._snd_una == peer_conn._snd_max  # "tick" was acknowledged by "tock"
    pair.clock.advance_to(pair.clock() + 0.2)  # past any delayed-ACK deadline
    pair.step()
    assert pair.engine.fastpath.stats()["acks_sent"] == acks_before


# ---- what falls back to Python ------------------------------------------------------------------


def test_a_send_larger_than_one_segment_falls_back(pair: Pair) -> None:
    sock, server = pair.open()
    before = pair.c_segments()
    data = random.Random(2).randbytes(PAYLOAD_LIMIT + 1)
    assert sock.send(data) == len(data)
    assert pair.c_segments() == before
    assert pair.deliver(sock, server, data) == data
    assert pair.c_segments() == before


def test_a_send_behind_unsent_data_falls_back(pair: Pair) -> None:
    """Bytes queued before it are not sent yet: C cannot put these ahead of them."""
    sock, server = pair.open()
    before = pair.c_segments()
    big = random.Random(3).randbytes(5000)
    sock.send(big)
    sock.send(b"tail")
    assert pair.c_segments() == before
    assert pair.deliver(sock, server, big + b"tail") == big + b"tail"


def fill_peer_window(pair: Pair, sock: TcpSocket, size: int) -> bytes:
    """Send `size` bytes the peer does not read; run until they are all acknowledged."""
    data = random.Random(size).randbytes(size)
    assert sock.send(data) == size
    pair.run(lambda: settled(sock.connection))
    return data


def test_a_send_while_the_peers_window_is_closed_falls_back() -> None:
    pair = Pair(peer_tcp=TcpConfig(time_wait=0.05, rto_min=0.05, recv_buffer=4096))
    try:
        sock, server = pair.open()
        first = fill_peer_window(pair, sock, 4096)
        assert sock.connection._snd_wnd == 0
        before = pair.c_segments()
        assert sock.send(b"more") == 4
        assert pair.c_segments() == before
        got = bytearray()

        def drained() -> bool:
            got.extend(server.recv(1 << 20))
            return len(got) >= 4100

        pair.run(drained)
        assert bytes(got) == first + b"more"
        assert pair.c_segments() == before
    finally:
        pair.close()


def test_a_send_larger_than_the_window_left_falls_back() -> None:
    pair = Pair(peer_tcp=TcpConfig(time_wait=0.05, rto_min=0.05, recv_buffer=4096))
    try:
        sock, server = pair.open()
        first = fill_peer_window(pair, sock, 4000)
        assert 0 < sock.connection._snd_wnd < 200
        before = pair.c_segments()
        tail = random.Random(4).randbytes(200)
        sock.send(tail)
        assert pair.c_segments() == before
        got = bytearray()

        def drained() -> bool:
            got.extend(server.recv(1 << 20))
            return len(got) >= 4200

        pair.run(drained)
        assert bytes(got) == first + tail
    finally:
        pair.close()


def test_a_send_after_the_peer_closed_falls_back(pair: Pair) -> None:
    sock, server = pair.open()
    server.close()
    pair.run(lambda: sock.state is TcpState.CLOSE_WAIT and sock.at_eof)
    assert sock.connection.fast_sender is None  # the flow left C with the peer's FIN
    before = pair.c_segments()
    assert sock.send(b"last words") == 10
    assert pair.c_segments() == before
    got = bytearray()
    pair.run(reader(server, got, lambda: len(got) >= 10))
    assert bytes(got) == b"last words"


def test_a_send_after_close_is_refused_and_c_sends_nothing(pair: Pair) -> None:
    sock, server = pair.open()
    sock.send(b"bye")
    sock.close()
    before = pair.c_segments()
    with pytest.raises(TcpStateError) as raised:
        sock.send(b"too late")
    assert raised.value.errno == errno.EPIPE
    assert pair.c_segments() == before
    got = bytearray()
    pair.run(reader(server, got, lambda: server.at_eof))
    assert bytes(got) == b"bye"  # then the FIN, in order


def test_the_fin_follows_the_segment_c_built(pair: Pair) -> None:
    sock, server = pair.open()
    before = pair.c_segments()
    sock.send(b"final")
    sock.close()
    assert pair.c_segments() == before + 1
    got = bytearray()
    pair.run(reader(server, got, lambda: server.at_eof))
    assert bytes(got) == b"final" and server.at_eof


def test_with_the_fast_path_off_nothing_is_built_in_c() -> None:
    pair = Pair(fast_path=False)
    try:
        sock, server = pair.open()
        sock.send(b"hello")
        assert pair.deliver(sock, server, b"hello") == b"hello"
        assert pair.c_segments() == 0
    finally:
        pair.close()


def test_switched_off_at_run_time_sends_fall_back(pair: Pair) -> None:
    sock, server = pair.open()
    pair.engine.fastpath.set_enabled(False)
    before = pair.c_segments()
    sock.send(b"via python")
    assert pair.c_segments() == before
    assert pair.deliver(sock, server, b"via python") == b"via python"


# ---- the decision, on one connection -------------------------------------------------------


class FakeSender:
    """Stands in for the C transmit: records the payloads, answers a right edge."""

    def __init__(self, answer: int | None = None) -> None:
        self.payloads: list[bytes] = []
        self.answer = answer

    def __call__(self, payload: bytes, *_length: int) -> int:
        self.payloads.append(bytes(payload))
        return self.answer if self.answer is not None else 0


def established_with_sender(answer: int | None = None) -> tuple[TcpConnection, FakeSender]:
    conn = conn_established()
    sender = FakeSender((conn._rcv_adv_right & 0xFFFFFFFF) if answer is None else answer)
    conn.fast_sender = sender
    return conn, sender


def test_a_send_the_sender_took_is_not_sent_again_by_poll_output() -> None:
    conn, sender = established_with_sender()
    snd_max = conn._snd_max
    assert conn.send(b"abc") == 3
    assert sender.payloads == [b"abc"]
    assert conn._snd_max == conn._snd_nxt == snd_max + 3
    assert conn._rto_deadline is not None
    assert conn.poll_output(0.0) == []  # nothing left to send: no duplicate segment


def test_a_refused_send_goes_out_through_poll_output() -> None:
    conn, sender = established_with_sender(answer=-105)  # -ENOBUFS
    snd_max = conn._snd_max
    conn.send(b"abc")
    assert sender.payloads == [b"abc"] and conn._snd_max == snd_max
    (segment,) = conn.poll_output(0.0)
    assert segment.payload == b"abc" and segment.seq == snd_max & 0xFFFFFFFF


def test_the_sender_is_dropped_by_a_segment_and_by_poll_output() -> None:
    conn, sender = established_with_sender()
    conn.on_segment(seg(REMOTE_SEQ + 1, LOCAL_SEQ + 1, payload=b"x"), 0.0)
    assert conn.fast_sender is None
    conn.fast_sender = sender
    conn.poll_output(0.0)
    assert conn.fast_sender is None
    conn.send(b"later")
    assert sender.payloads == []


def test_a_larger_right_edge_from_c_moves_ours() -> None:
    conn, _ = established_with_sender()
    right = conn._rcv_adv_right
    conn.fast_sender = FakeSender((right + 100) & 0xFFFFFFFF)
    conn.send(b"a")
    assert conn._rcv_adv_right == right + 100
    conn.fast_sender = FakeSender((right - 50) & 0xFFFFFFFF)  # never left
    conn.send(b"b")
    assert conn._rcv_adv_right == right + 100


def test_the_export_offers_acks_only_while_the_send_side_is_simple() -> None:
    conn = conn_established()
    state = conn.fastpath_export()
    assert state is not None and state.acks_in_c
    conn._snd_wnd = 0  # a zero window: the persist timer is Python's
    assert not conn.fastpath_export().acks_in_c  # type: ignore[union-attr]


# ---- request/response, fast path on and off ------------------------------------------------


@dataclass
class Exchange:
    engine_got: bytes
    peer_got: bytes
    requests: bytes
    responses: bytes
    client: TcpConnection
    server: TcpConnection
    c_segments: int
    fast_acks: int


def ping_pong(
    count: int,
    *,
    fast_path: bool,
    seed: int = 7,
    faults: FaultConfig | None = None,
    tcp: TcpConfig = TCP,
    limit: float = 60.0,
) -> Exchange:
    """`count` requests from the engine, each answered by the peer; the next request goes
    once the whole response is in. Sizes are drawn from `seed`: most requests fit one
    segment (C), some do not (Python); responses span one to a few segments."""
    rng = random.Random(seed)
    requests = [
        rng.randbytes(rng.randint(1, PAYLOAD_LIMIT) if i % 25 else rng.randint(1500, 4000))
        for i in range(count)
    ]
    responses = [rng.randbytes(rng.randint(1, 4000)) for _ in range(count)]
    pair = Pair(fast_path=fast_path, faults=faults, seed=seed, engine_tcp=tcp, peer_tcp=tcp)
    try:
        sock, server = pair.open()
        engine_got, peer_got = bytearray(), bytearray()
        request_ends = [sum(map(len, requests[: i + 1])) for i in range(count)]
        response_ends = [sum(map(len, responses[: i + 1])) for i in range(count)]
        out = {"request": 0, "req_off": 0, "response": 0, "resp_off": 0}

        def client(_now: float) -> None:
            """The engine's application, a service: it runs in the batch, after the
            absorb and before the output, as a WebSocket session would."""
            engine_got.extend(sock.recv(1 << 20))
            i = out["request"]
            if i < count and (i == 0 or len(engine_got) >= response_ends[i - 1]):
                data = requests[i]
                out["req_off"] += sock.send(data[out["req_off"] :])
                if out["req_off"] == len(data):
                    out["request"], out["req_off"] = i + 1, 0

        def service(_now: float) -> None:
            """The peer's application: answer each request once it is complete."""
            peer_got.extend(server.recv(1 << 20))
            j = out["response"]
            if j < count and len(peer_got) >= request_ends[j]:
                data = responses[j]
                out["resp_off"] += server.send(data[out["resp_off"] :])
                if out["resp_off"] == len(data):
                    out["response"], out["resp_off"] = j + 1, 0

        def done() -> bool:
            assert sock.error is None and server.error is None, (sock.error, server.error)
            return (
                len(engine_got) == response_ends[-1]
                and settled(sock.connection)
                and settled(server.connection)
            )

        pair.engine.services.append(client)
        pair.peer.services.append(service)
        client(pair.clock())  # the first request, right after the export
        pair.run(done, limit=limit)
        stats = pair.engine.fastpath.stats()
        return Exchange(
            bytes(engine_got),
            bytes(peer_got),
            b"".join(requests),
            b"".join(responses),
            sock.connection,
            server.connection,
            stats["tx_data_segments"],
            stats["fast_acks"],
        )
    finally:
        pair.close()


def final_state(conn: TcpConnection) -> tuple[object, ...]:
    """What must not depend on who built the segments: the state, relative sequence
    numbers, every counter and estimate (to a nanosecond); and nothing left in flight or
    to send."""
    assert settled(conn)
    assert conn._rto_deadline is None  # everything acknowledged: the timer stopped
    stats = conn.stats
    assert stats.rtt_srtt > 0  # the RTT estimator got samples
    return (
        conn.state,
        (conn._snd_una - conn._iss) & 0xFFFFFFFF,
        (conn._rcv_nxt - conn._irs) & 0xFFFFFFFF,
        stats.bytes_in,
        stats.bytes_out,
        tuple(round(v, 9) for v in dataclasses.astuple(stats)),
    )


def test_request_response_gives_the_same_streams_and_state_on_and_off() -> None:
    on = ping_pong(500, fast_path=True)
    off = ping_pong(500, fast_path=False)
    for run in (on, off):
        assert run.peer_got == run.requests
        assert run.engine_got == run.responses
    assert on.peer_got == off.peer_got and on.engine_got == off.engine_got
    assert final_state(on.client) == final_state(off.client)
    # The peer: the same, but for its counters, which see the ACKs C sends on its own
    # (at once for two full segments, before the application's reply could carry them).
    assert final_state(on.server)[:5] == final_state(off.server)[:5]
    # The fast path did the common case: most requests were built in C, and the
    # responses' ACKs of them were taken in C.
    assert on.c_segments >= 400 and off.c_segments == 0
    assert on.fast_acks > 0 and off.fast_acks == 0


def test_request_response_without_timestamps_times_rtt_too() -> None:
    """Without timestamps the RTT comes from the segment `_send_in_c` timed."""
    tcp = TcpConfig(time_wait=0.05, rto_min=0.05, rto_initial=0.2, timestamps=False)
    on = ping_pong(100, fast_path=True, tcp=tcp, seed=8)
    off = ping_pong(100, fast_path=False, tcp=tcp, seed=8)
    assert on.peer_got == on.requests and on.engine_got == on.responses
    assert final_state(on.client) == final_state(off.client)
    assert on.c_segments > 0


FAULTS = {
    "drop": FaultConfig(drop_pct=3.0),
    "duplicate": FaultConfig(duplicate_pct=5.0),
    "reorder": FaultConfig(reorder_pct=5.0),
    "mixed": FaultConfig(drop_pct=2.0, duplicate_pct=2.0, reorder_pct=3.0),
    "acks lost": FaultConfig(drop_pct=8.0, direction="tx"),  # the peer's frames: ACKs too
}


@pytest.mark.parametrize("seed", [11, 12, 13])
@pytest.mark.parametrize("name", list(FAULTS))
def test_faults_on_the_link_still_deliver_every_byte_in_order(name: str, seed: int) -> None:
    on = ping_pong(120, fast_path=True, seed=seed, faults=FAULTS[name])
    assert on.peer_got == on.requests
    assert on.engine_got == on.responses
    assert on.c_segments > 0
    final_state(on.client)
    final_state(on.server)


def stream_both_ways(
    messages: int, *, fast_path: bool, seed: int, faults: FaultConfig | None
) -> tuple[bytes, bytes, bytes, bytes, int]:
    """Pipelined: the engine writes small messages (one segment each, several per batch,
    many in flight) while the peer streams bulk data back."""
    rng = random.Random(seed)
    to_peer = [rng.randbytes(rng.randint(1, PAYLOAD_LIMIT)) for _ in range(messages)]
    to_engine = rng.randbytes(300_000)
    pair = Pair(fast_path=fast_path, faults=faults, seed=seed)
    try:
        sock, server = pair.open()
        engine_got, peer_got = bytearray(), bytearray()
        sent = {"messages": 0, "offset": 0, "bulk": 0}

        def client(_now: float) -> None:
            engine_got.extend(sock.recv(1 << 20))
            for _ in range(4):
                i = sent["messages"]
                if i == messages:
                    return
                message = to_peer[i]
                sent["offset"] += sock.send(message[sent["offset"] :])
                if sent["offset"] < len(message):
                    return  # the send buffer is full
                sent["messages"], sent["offset"] = i + 1, 0

        def service(_now: float) -> None:
            peer_got.extend(server.recv(1 << 20))
            if sent["bulk"] < len(to_engine):
                sent["bulk"] += server.send(to_engine[sent["bulk"] : sent["bulk"] + 65536])

        def done() -> bool:
            assert sock.error is None and server.error is None, (sock.error, server.error)
            return (
                len(engine_got) == len(to_engine)
                and len(peer_got) == sum(map(len, to_peer))
                and settled(sock.connection)
                and settled(server.connection)
            )

        pair.engine.services.append(client)
        pair.peer.services.append(service)
        pair.run(done, limit=120.0)
        return (
            bytes(engine_got),
            to_engine,
            bytes(peer_got),
            b"".join(to_peer),
            pair.c_segments(),
        )
    finally:
        pair.close()


@pytest.mark.parametrize("seed", [21, 22])
@pytest.mark.parametrize("name", ["clean", *FAULTS])
def test_pipelined_both_ways_deliver_every_byte_in_order(name: str, seed: int) -> None:
    faults = FAULTS.get(name)
    engine_got, to_engine, peer_got, to_peer, c_segments = stream_both_ways(
        300, fast_path=True, seed=seed, faults=faults
    )
    assert peer_got == to_peer
    assert engine_got == to_engine
    assert c_segments > 0


# ---- time: the segment C builds is sent now ------------------------------------------------


def send_after_idle(fast_path: bool, tcp: TcpConfig, idle: float) -> TcpConnection:
    pair = Pair(fast_path=fast_path, engine_tcp=tcp, peer_tcp=tcp)
    try:
        sock, server = pair.open()
        sock.send(b"first")
        assert pair.deliver(sock, server, b"first") == b"first"
        pair.clock.advance_to(pair.clock() + idle)  # nothing at all happens meanwhile
        pair.step()
        before = pair.c_segments()
        sock.send(b"second")
        assert pair.c_segments() == before + (1 if fast_path else 0)
        assert pair.deliver(sock, server, b"second") == b"second"
        return sock.connection
    finally:
        pair.close()


@pytest.mark.parametrize("timestamps", [True, False])
def test_a_send_after_an_idle_period_is_timed_from_now(timestamps: bool) -> None:
    """The connection's last known time is from before the idle period: the segment C
    sends must still get an RTO (and, without timestamps, an RTT start) from the time it
    leaves, as Python's poll_output gives it. Else the RTO is already past when armed:
    a spurious timeout, a retransmission, cwnd down to one segment."""
    tcp = TcpConfig(time_wait=0.05, rto_min=0.05, rto_initial=0.2, timestamps=timestamps)
    on = send_after_idle(True, tcp, idle=5.0)
    off = send_after_idle(False, tcp, idle=5.0)
    assert (on.stats.timeouts, on.stats.retransmits) == (0, 0)
    assert final_state(on) == final_state(off)


def test_when_c_cannot_take_more_the_rest_follows_in_order() -> None:
    """More C-built segments than the capture holds between two polls: the sends C
    refuses (-ENOBUFS) go through Python, after C's, in sequence order."""
    pair = Pair()
    try:
        sock, server = pair.open()
        warm = random.Random(5).randbytes(1 << 20)  # grow cwnd well past the burst
        sock.send(warm[:200_000])
        got = bytearray()
        sent = 200_000

        def received_all() -> bool:
            nonlocal sent
            if sent < len(warm):
                sent += sock.send(warm[sent : sent + 65536])
            got.extend(server.recv(1 << 20))
            return len(got) == len(warm) and settled(sock.connection)

        pair.run(received_all)
        assert bytes(got) == warm
        before = pair.c_segments()
        burst = [random.Random(i).randbytes(PAYLOAD_LIMIT) for i in range(150)]
        for message in burst:
            assert sock.send(message) == len(message)  # all before the next poll
        built = pair.c_segments() - before
        assert 0 < built < len(burst)  # C took some, then its queue was full
        expected = b"".join(burst)
        assert pair.deliver(sock, server, expected) == expected
    finally:
        pair.close()


# ---- flow control: the window in the segment C builds ----------------------------------------


@pytest.mark.parametrize("fast_path", [True, False])
def test_the_window_sent_with_data_never_offers_more_than_the_free_buffer(
    fast_path: bool,
) -> None:
    """The application does not read what arrives, and answers each batch with a small
    message from its service (in the batch: after the absorb, before the output). With
    nothing ever read, the right edge of every window offered must stay at
    IRS + 1 + recv_buffer, and the receive buffer must never hold more than that."""
    recv_buffer = 65535
    engine_tcp = TcpConfig(
        time_wait=0.05, rto_min=0.05, rto_initial=0.2, recv_buffer=recv_buffer, window_scaling=False
    )
    pair = Pair(fast_path=fast_path, engine_tcp=engine_tcp)
    try:
        sock, server = pair.open()
        conn = sock.connection
        limit = (conn._irs + 1 + recv_buffer) & 0xFFFFFFFF
        offered: list[tuple[int, int, int]] = []  # (flags, payload, right edge)
        transmit = pair.engine_link.tx_burst

        def watched(frames: Sequence[bytes]) -> int:
            for raw in frames:
                eth, rest = EthernetRepr.parse(raw)
                if eth.ethertype == 0x0800:
                    ip, body = Ipv4Repr.parse(rest)
                    tcp = TcpRepr.parse(body, ip.src, ip.dst)
                    offered.append((int(tcp.flags), len(tcp.payload), tcp.ack + tcp.window))
            return int(transmit(frames))

        pair.engine_link.tx_burst = watched  # type: ignore[method-assign]
        answered = [0]

        def client(_now: float) -> None:
            if len(conn._rx) >= (answered[0] + 1) * 5000 and answered[0] < 40:
                answered[0] += 1
                sock.send(b"got %d" % answered[0])

        pair.engine.services.append(client)
        data = bytes(200_000)
        sent = [0]

        def stalled() -> bool:
            if sent[0] < len(data):
                sent[0] += server.send(data[sent[0] : sent[0] + 16384])
            return pair.clock() > 0.2

        pair.run(stalled)
        assert (pair.c_segments() > 0) is fast_path
        over = [
            (flags, size, (edge - limit) & 0xFFFFFFFF)
            for flags, size, edge in offered
            if 0 < (edge - limit) & 0xFFFFFFFF < 1 << 31
        ]
        assert over == [], f"windows past the receive buffer (flags, payload, excess): {over}"
        assert len(conn._rx) <= recv_buffer
    finally:
        pair.close()


@pytest.mark.parametrize("fast_path", [True, False])
def test_a_send_after_draining_a_full_buffer_still_opens_the_window(fast_path: bool) -> None:
    """The peer filled the engine's receive buffer (zero window). The application reads it
    all and answers at once, in the same batch: the answer must carry the reopened window
    (or the update must follow), so the peer resumes within a round trip, not at its
    persist timer (rto_min, 0.2 s, here)."""
    engine_tcp = TcpConfig(time_wait=0.05, recv_buffer=65535, window_scaling=False)
    pair = Pair(fast_path=fast_path, engine_tcp=engine_tcp, peer_tcp=TcpConfig(time_wait=0.05))
    try:
        sock, server = pair.open()
        conn = sock.connection
        data = bytes(300_000)
        sent = [0]

        def stream(_now: float) -> None:
            if sent[0] < len(data):
                sent[0] += server.send(data[sent[0] : sent[0] + 16384])

        pair.peer.services.append(stream)
        pair.run(lambda: len(conn._rx) == 65535 and server.connection._snd_wnd == 0)
        read_at: list[float] = []

        def client(now: float) -> None:
            if not read_at:
                read_at.append(now)
                assert len(sock.recv(1 << 20)) == 65535
                # One segment, but Python owes the window update the read made: the
                # answer goes through poll_output, which sends it with the new window.
                sock.send(b"thanks")

        pair.engine.services.append(client)
        pair.run(lambda: bool(read_at) and len(conn._rx) > 0)
        assert pair.c_segments() == 0
        assert pair.clock() - read_at[0] < 0.01, "the peer waited for its persist timer"
    finally:
        pair.close()


# ---- direct reading: the bytes C brings go straight to a reader -------------------------------


def test_a_direct_reader_gets_the_fast_path_bytes_in_order_and_the_buffer_stays_empty() -> None:
    """With `direct_reader` set, what the fast path brings skips the receive buffer (and
    the copies in and out of it); the stream is the same, nothing is left to `recv`."""
    pair = Pair()
    try:
        sock, server = pair.open()
        conn = sock.connection
        got = bytearray()
        conn.direct_reader = got.extend
        stream = random.Random(11).randbytes(300_000)
        sent = 0
        while sent < len(stream):
            sent += server.send(stream[sent : sent + 50_000])
            pair.run(lambda sent=sent: len(got) >= sent)  # type: ignore[misc]
        assert bytes(got) == stream
        assert conn.recv(1 << 20) == b""  # nothing went through the buffer
        assert pair.engine.fastpath.stats()["fast_segments"] > 0
    finally:
        pair.close()


def test_bytes_buffered_ahead_keep_their_place_before_a_direct_reader() -> None:
    """A reader set while bytes wait in the buffer (reading was paused) gets nothing until
    they are read: later bytes queue behind them, so the stream stays in order."""
    pair = Pair()
    try:
        sock, server = pair.open()
        conn = sock.connection
        server.send(b"first ")
        pair.run(lambda: conn.readable)
        got = bytearray()
        conn.direct_reader = got.extend  # the buffer still holds b"first "
        server.send(b"second")
        pair.run(lambda: len(conn._rx) == len(b"first second"))
        assert got == b""
        assert conn.recv(100) == b"first second"
        server.send(b" third")
        pair.run(lambda: bool(got))
        assert bytes(got) == b" third"
    finally:
        pair.close()

"""The interface's per-batch work follows the flows with something to do (a dirty set and a
timer heap), and forgets none: idle flows' timers (TIME-WAIT, retransmission, keep-alive,
delayed ACK) still fire on time, and `poll_at()` is exactly the earliest of every
connection's own `poll_at()`, as if each flow were asked every batch."""

from __future__ import annotations

import random

import pytest

from dataplane.stack.iface import Interface, TcpListener
from dataplane.stack.socket import TcpSocket
from dataplane.stack.tcp import TcpConfig, TcpConnection, TcpState

A_MAC = bytes.fromhex("020000000001")
B_MAC = bytes.fromhex("020000000002")
A_IP, B_IP, MASK = 0xC6120001, 0xC6120002, 0xFFFFFF00
PORT = 9000


class Pair:
    """Two interfaces joined directly; frames cross when `exchange` is called (or are
    dropped with `drop_to_b`)."""

    def __init__(self, config: TcpConfig) -> None:
        self.a = Interface(
            A_MAC, A_IP, MASK, tcp_config=config, static_arp={B_IP: B_MAC}, seed=1, announce=False
        )
        self.b = Interface(
            B_MAC, B_IP, MASK, tcp_config=config, static_arp={A_IP: A_MAC}, seed=2, announce=False
        )
        self.listener: TcpListener = self.b.listen(PORT, backlog=1024)
        self.now = 1.0
        self.drop_to_b = False
        self.a_frames: list[bytes] = []

    def exchange(self, rounds: int = 6, step: float = 0.0001) -> None:
        for _ in range(rounds):
            self.now += step
            out = self.a.poll(self.now)
            self.a_frames += out
            if not self.drop_to_b:
                self.b.receive(out, self.now)
            self.a.receive(self.b.poll(self.now), self.now)

    def open(self) -> tuple[TcpSocket, TcpSocket]:
        self.drop_to_b = False
        client = self.a.connect(B_IP, PORT, self.now)
        self.exchange()
        server = self.listener.accept()
        assert server is not None and client.state is TcpState.ESTABLISHED
        return client, server

    def time_wait_flows(self, count: int) -> list[TcpSocket]:
        """`count` connections that A closed first: A holds them in TIME-WAIT."""
        socks = []
        for _ in range(count):
            client, server = self.open()
            client.close()
            self.exchange()
            server.close()
            self.exchange()
            assert client.state is TcpState.TIME_WAIT
            socks.append(client)
        return socks


def brute_poll_at(iface: Interface) -> float | None:
    """What `poll_at` was when every flow was asked every time."""
    if iface._tx or iface._announce_pending:  # frames wait (an RST answered, say)
        return iface._now
    times = [t for conn, _ in iface.connections(0.0) if (t := conn.poll_at()) is not None]
    arp_at = iface.arp.poll_at()
    if arp_at is not None:
        times.append(arp_at)
    return min(times) if times else None


@pytest.fixture
def count_polls(monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """poll_output calls per connection (by id)."""
    calls: dict[int, int] = {}
    original = TcpConnection.poll_output

    def counted(self: TcpConnection, now: float) -> object:
        calls[id(self)] = calls.get(id(self), 0) + 1
        return original(self, now)

    monkeypatch.setattr(TcpConnection, "poll_output", counted)
    return calls


def test_time_wait_flows_expire_on_time_and_cost_nothing_meanwhile(
    count_polls: dict[int, int],
) -> None:
    pair = Pair(TcpConfig(time_wait=5.0))
    socks = pair.time_wait_flows(20)
    first_close = pair.now
    deadlines = sorted(s.connection.poll_at() or 0.0 for s in socks)
    assert pair.a.poll_at() == deadlines[0] == brute_poll_at(pair.a)
    live_client, live_server = pair.open()
    count_polls.clear()
    for _ in range(50):  # traffic on one flow: the TIME-WAIT ones are never polled
        live_client.send(b"x" * 64)
        pair.exchange(rounds=2)
        assert live_server.recv() == b"x" * 64
    tw_ids = {id(s.connection) for s in socks}
    assert not tw_ids & count_polls.keys()
    assert count_polls[id(live_client.connection)] > 0
    # Just before the first deadline nothing expires, at it the first flow goes.
    assert pair.a.connection_count == 21
    pair.a.poll(deadlines[0] - 1e-6)
    assert pair.a.connection_count == 21
    pair.a.poll(deadlines[0])
    assert socks[0].state is TcpState.CLOSED
    assert pair.a.connection_count == 20
    # Each expires at its own deadline, with no other traffic at all.
    for sock, deadline in zip(socks[1:], deadlines[1:], strict=True):
        assert pair.a.poll_at() == deadline == brute_poll_at(pair.a)
        pair.a.poll(deadline)
        assert sock.state is TcpState.CLOSED
    assert pair.a.connection_count == 1
    assert deadlines[-1] - first_close < 5.0 + 0.01


def test_retransmission_timer_fires_for_an_idle_flow() -> None:
    pair = Pair(TcpConfig())
    client, _ = pair.open()
    others = [pair.open()[0] for _ in range(5)]  # idle neighbours
    pair.drop_to_b = True
    client.send(b"lost" * 10)
    pair.exchange(rounds=1)
    rto_at = client.connection.poll_at()
    assert rto_at is not None and rto_at > pair.now
    assert pair.a.poll_at() == rto_at == brute_poll_at(pair.a)
    sent = client.stats.segments_out
    assert pair.a.poll(rto_at - 1e-6) == []
    frames = pair.a.poll(rto_at)
    assert len(frames) == 1 and frames[0].endswith(b"lost" * 10)
    assert client.stats.retransmits == 1 and client.stats.segments_out == sent + 1
    assert all(o.stats.retransmits == 0 for o in others)
    # The backed-off timer is in the heap too.
    assert pair.a.poll_at() == client.connection.poll_at() == brute_poll_at(pair.a)


def test_keepalive_fires_for_an_idle_flow() -> None:
    pair = Pair(TcpConfig(keepalive=10.0, keepalive_interval=2.0))
    client, _ = pair.open()
    pair.open()
    probe_at = client.connection.poll_at()
    assert probe_at is not None
    assert pair.a.poll_at() == brute_poll_at(pair.a)
    assert pair.a.poll(probe_at - 1e-6) == []
    assert client.stats.keepalives_sent == 0
    frames = pair.a.poll(probe_at)
    assert client.stats.keepalives_sent == 1 and len(frames) >= 1
    # Unanswered: the next probe comes keepalive_interval later, from the heap.
    assert client.connection.poll_at() == pytest.approx(probe_at + 2.0)
    assert pair.a.poll_at() == brute_poll_at(pair.a)
    pair.a.poll(probe_at + 2.0 - 1e-6)
    assert client.stats.keepalives_sent == 1
    assert pair.a.poll(probe_at + 2.0) and client.stats.keepalives_sent == 2


def test_delayed_ack_fires_for_a_flow_that_only_received() -> None:
    pair = Pair(TcpConfig(delayed_ack=0.04))
    client, server = pair.open()
    server.send(b"y" * 100)
    pair.b.receive(pair.a.poll(pair.now), pair.now)
    pair.a.receive(pair.b.poll(pair.now), pair.now)  # one small segment: ACK delayed
    assert client.recv() == b"y" * 100
    ack_at = client.connection.poll_at()
    assert ack_at is not None and ack_at == pytest.approx(pair.now + 0.04)
    assert pair.a.poll_at() == ack_at == brute_poll_at(pair.a)
    assert pair.a.poll(ack_at - 1e-6) == []
    assert len(pair.a.poll(ack_at)) == 1


def test_an_application_write_makes_an_idle_flow_send_at_the_next_poll() -> None:
    pair = Pair(TcpConfig())
    client, _server = pair.open()
    pair.exchange()
    assert pair.a.poll_at() == brute_poll_at(pair.a)
    client.send(b"now")
    at = pair.a.poll_at()
    assert at == client.connection.poll_at() == brute_poll_at(pair.a)
    assert at is not None and at <= pair.now  # due now
    frames = pair.a.poll(pair.now)
    assert len(frames) == 1 and frames[0].endswith(b"now")


def test_poll_at_is_exact_through_random_traffic_closes_and_timeouts() -> None:
    """Differential: after every step, poll_at() equals the minimum over all flows."""
    rng = random.Random(11)
    pair = Pair(TcpConfig(time_wait=0.5, keepalive=0.3, keepalive_interval=0.1, delayed_ack=0.02))
    live: list[tuple[TcpSocket, TcpSocket]] = []
    for step in range(600):
        op = rng.random()
        if op < 0.15 or not live:
            live.append(pair.open())
        elif op < 0.55:
            client, server = rng.choice(live)
            if client.writable:
                client.send(rng.randbytes(rng.randrange(1, 3000)))
            if server.writable and rng.random() < 0.5:
                server.send(rng.randbytes(rng.randrange(1, 300)))
        elif op < 0.65:
            client, server = live.pop(rng.randrange(len(live)))
            (client if rng.random() < 0.5 else server).close()
        elif op < 0.7:
            client, server = live.pop(rng.randrange(len(live)))
            client.abort()
        pair.drop_to_b = rng.random() < 0.1
        for client, server in live:
            server.recv()
            client.recv()
        assert pair.a.poll_at() == brute_poll_at(pair.a), step
        # Jump to the next deadline sometimes, so timers (not only traffic) drive flows.
        at = pair.a.poll_at()
        if at is not None and rng.random() < 0.3:
            pair.now = max(pair.now, at)
        pair.exchange(rounds=rng.randrange(1, 3), step=rng.choice([0.0001, 0.01, 0.1]))
        assert pair.a.poll_at() == brute_poll_at(pair.a), step
        assert pair.b.poll_at() == brute_poll_at(pair.b), step
    states = {c.connection.state for c, _ in live}
    assert TcpState.ESTABLISHED in states


def test_export_changes_follow_the_flows_that_changed() -> None:
    pair = Pair(TcpConfig(time_wait=5.0))
    socks = pair.time_wait_flows(5)
    client, _server = pair.open()
    changed, removed = pair.a.export_changes(pair.now)  # the first call: every flow
    assert {id(c) for c, _ in changed} == {id(s.connection) for s in [*socks, client]}
    assert all(mac == B_MAC for _, mac in changed)
    assert pair.a.export_changes(pair.now) == ([], [])  # nothing happened since
    client.send(b"z")
    pair.exchange(rounds=1)
    changed, removed = pair.a.export_changes(pair.now)
    assert [c for c, _ in changed] == [client.connection] and removed == []
    expired = socks[0].connection
    pair.a.poll((expired.poll_at() or 0.0) + 1e-9)
    changed, removed = pair.a.export_changes(pair.now)
    assert removed == [expired] and expired not in [c for c, _ in changed]
    # A change in the ARP cache (a next hop's MAC) re-exports every flow.
    pair.a.arp.add_static(B_IP, bytes.fromhex("020000000003"))
    changed, _ = pair.a.export_changes(pair.now)
    assert len(changed) == pair.a.connection_count
    assert all(mac == bytes.fromhex("020000000003") for _, mac in changed)

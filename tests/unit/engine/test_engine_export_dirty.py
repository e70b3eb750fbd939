"""The engine re-syncs the C fast path only with the connections whose state may have
changed: idle flows (TIME-WAIT here) cost nothing per batch, yet expire on time, and a
connection that goes away is withdrawn from C."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from dataplane.engine import Engine
from dataplane.fastpath import FastPath
from dataplane.links.clock import VirtualClock
from dataplane.links.memory import memory_link_pair
from dataplane.stack.runner import StackRunner
from dataplane.stack.socket import TcpSocket
from dataplane.stack.tcp import TcpConfig, TcpConnection, TcpState
from tests.unit.engine.engine_peer import ENGINE_MAC, PEER_IP, PEER_MAC, iface_pair

PORT = 7000
TIME_WAIT = 2.0


class Setup:
    def __init__(self) -> None:
        self.clock = VirtualClock()
        a, b = memory_link_pair(clock=self.clock, latency=0.0005, mac_a=ENGINE_MAC, mac_b=PEER_MAC)
        self.iface, peer_iface = iface_pair(TcpConfig(time_wait=TIME_WAIT), seed=3)
        self.engine = Engine(self.iface, link=a, clock=self.clock)
        self.peer = StackRunner(peer_iface, b, self.clock)
        self.listener = peer_iface.listen(PORT, backlog=256)

    def run(self, until: Callable[[], bool], limit: float = 5.0) -> None:
        end = self.clock() + limit
        while not until():
            assert self.clock() < end, "timed out"
            self.peer.step()
            self.engine.run_once(0.0)
            # Small steps (not to the next timer: the TIME-WAIT ones are seconds away).
            times = [t for t in (self.peer.poll_at(), self.iface.poll_at()) if t is not None]
            step = min([self.clock() + 0.001, *times])
            self.clock.advance_to(max(self.clock() + 1e-5, step))

    def open(self) -> tuple[TcpSocket, TcpSocket]:
        sock = self.iface.connect(PEER_IP, PORT, self.clock())
        accepted: list[TcpSocket] = []

        def up() -> bool:
            server = self.listener.accept()
            if server is not None:
                accepted.append(server)
            return bool(accepted) and sock.state is TcpState.ESTABLISHED

        self.run(up)
        return sock, accepted[0]


@pytest.fixture
def exports(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """FastPath.export calls per connection (by id)."""
    calls: Counter[int] = Counter()
    original = FastPath.export

    def counted(self: FastPath, conn: TcpConnection, mac: bytes | None, local: bytes) -> None:
        calls[id(conn)] += 1
        original(self, conn, mac, local)

    monkeypatch.setattr(FastPath, "export", counted)
    return calls


def test_idle_time_wait_flows_are_not_exported_and_still_expire(exports: Counter[int]) -> None:
    s = Setup()
    try:
        waiting = []
        for _ in range(40):
            client, server = s.open()
            client.close()
            s.run(lambda server=server: server.at_eof)  # type: ignore[misc]
            server.close()
            s.run(lambda client=client: client.state is TcpState.TIME_WAIT)  # type: ignore[misc]
            waiting.append(client)
        assert s.iface.connection_count == 40
        assert s.engine.fastpath.flows == 0  # TIME-WAIT is not for the fast path
        live, peer = s.open()
        assert s.engine.fastpath.flows == 1
        exports.clear()
        stream = bytearray()
        got = bytearray()
        payload = bytes(range(256)) * 400

        def drained() -> bool:
            got.extend(live.recv(1 << 20))
            return len(got) >= len(stream)

        live.send(b"subscribe")  # a request, then the peer streams (the fast path's case)
        for _ in range(20):
            stream.extend(payload[: peer.send(payload)])
            s.run(drained)
        assert got == stream and peer.recv(100) == b"subscribe"
        waiting_ids = {id(sock.connection) for sock in waiting}
        assert not waiting_ids & exports.keys(), "an idle TIME-WAIT flow was re-exported"
        # The live flow stayed in C the whole stream: a batch that only brought data (and
        # ACKs) is synced by the absorb itself, without a re-export.
        assert s.engine.fastpath.flows == 1
        assert s.engine.fastpath.stats()["fast_segments"] > 0
        # With no traffic at all, every TIME-WAIT flow still goes at its deadline.
        s.run(lambda: all(sock.state is TcpState.CLOSED for sock in waiting), limit=TIME_WAIT + 1)
        assert s.iface.connection_count == 1
        # The live connection going away withdraws it from C.
        live.abort()
        s.run(lambda: s.iface.connection_count == 0)
        s.run(lambda: s.engine.fastpath.flows == 0)
    finally:
        s.engine.close()

"""Request/response over the engine: an ACK the engine's own data segment carried is not
owed again. (Before the fix, C kept the delayed ACK it had been handed while Python's data
segments acknowledged everything; its count grew across slow-path hand-backs until Python
saw two full segments unacknowledged and sent one pure ACK per exchange.)"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dataplane.engine import Engine, EngineConfig
from dataplane.fastpath import FastPathConfig
from dataplane.links.clock import VirtualClock
from dataplane.links.memory import memory_link_pair
from dataplane.stack.runner import StackRunner
from dataplane.stack.tcp import TcpConfig
from dataplane.wire.ethernet import EthernetRepr
from dataplane.wire.ipv4 import Ipv4Repr
from tests.unit.engine.engine_peer import ENGINE_MAC, PEER_IP, PEER_MAC, iface_pair

PORT = 7001
TCP = TcpConfig(time_wait=0.05, rto_min=0.05)


def pure_acks(frames: list[bytes]) -> int:
    """TCP segments without payload and with only the ACK flag, among Ethernet frames."""
    count = 0
    for frame in frames:
        eth, payload = EthernetRepr.parse(frame)
        if eth.ethertype != 0x0800:
            continue
        ip, segment = Ipv4Repr.parse(payload)
        if ip.protocol != 6:
            continue
        header_len = (segment[12] >> 4) * 4
        if segment[13] == 0x10 and len(segment) == header_len:
            count += 1
    return count


@pytest.mark.parametrize("exchanges", [300])
def test_no_pure_ack_per_exchange(exchanges: int) -> None:
    clock = VirtualClock()
    a, b = memory_link_pair(clock=clock, latency=0.00005, mac_a=ENGINE_MAC, mac_b=PEER_MAC)
    engine_iface, peer_iface = iface_pair(TCP, seed=3)
    engine = Engine(
        engine_iface, link=a, clock=clock, config=EngineConfig(fastpath=FastPathConfig())
    )
    sent: list[bytes] = []
    transmit = engine._transmit

    def record(frames: Sequence[bytes]) -> None:
        sent.extend(frames)
        transmit(frames)

    engine._transmit = record  # type: ignore[method-assign]
    peer = StackRunner(peer_iface, b, clock)
    listener = peer_iface.listen(PORT)
    sock = engine_iface.connect(PEER_IP, PORT, clock())
    server = None
    done = 0
    waiting = False
    try:
        for _ in range(200_000):
            clock.advance(0.00001)
            peer.step()
            engine.run_once(0.0)
            if server is None:
                server = listener.accept()
                continue
            server.send(server.recv(1 << 16))  # echo
            if sock.state.name != "ESTABLISHED":
                continue
            if waiting and sock.recv(1 << 16):
                waiting = False
                done += 1
                if done == exchanges:
                    break
            if not waiting:
                if done == 20:
                    sent.clear()  # count from here: the handshake's ACK is not the point
                sock.send(b"q" * 64)
                waiting = True
        else:
            pytest.fail(f"the exchanges did not finish: {done} done, {sock!r}, {server!r}")
        stats = engine.fastpath.stats()
    finally:
        engine.close()
    # Every request carries the ACK of the previous response: no pure ACK is needed (a
    # delayed-ACK timer may fire now and then: each exchange is well under 40 ms).
    assert pure_acks(sent) + stats["acks_sent"] < exchanges // 20, (pure_acks(sent), stats)

"""The two interfaces the engine tests put at the ends of an in-memory link: the engine's
and a plain Python peer's, each knowing the other's MAC (no ARP), strict and quiet."""

from __future__ import annotations

from dataplane.stack.iface import Interface
from dataplane.stack.tcp import TcpConfig

ENGINE_IP, PEER_IP, NETMASK = 0xC0000201, 0xC0000202, 0xFFFFFF00
ENGINE_MAC, PEER_MAC = bytes.fromhex("020000000a01"), bytes.fromhex("020000000a02")


def iface_pair(
    engine_tcp: TcpConfig,
    peer_tcp: TcpConfig | None = None,
    *,
    seed: int,
    peer_seed: int | None = None,
) -> tuple[Interface, Interface]:
    """(engine's, peer's); the peer's TCP config defaults to the engine's, its seed to seed + 1."""

    def make(
        mac: bytes, ip: int, tcp: TcpConfig, seed: int, other_ip: int, other_mac: bytes
    ) -> Interface:
        return Interface(
            mac,
            ip,
            NETMASK,
            tcp_config=tcp,
            seed=seed,
            strict=True,
            static_arp={other_ip: other_mac},
            announce=False,
        )

    engine = make(ENGINE_MAC, ENGINE_IP, engine_tcp, seed, PEER_IP, PEER_MAC)
    peer = make(
        PEER_MAC,
        PEER_IP,
        peer_tcp or engine_tcp,
        seed + 1 if peer_seed is None else peer_seed,
        ENGINE_IP,
        ENGINE_MAC,
    )
    return engine, peer

"""Two link endpoints joined by in-memory queues: a cable for tests, no NIC, no sleeping.

Frames arrive in the order they were sent. With a clock (a test's `VirtualClock`), each frame
is held for `latency` seconds of that clock, so round trips take time deterministically;
without one, frames are deliverable at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from dataplane.links.base import ETHERNET_OVERHEAD, Clock

#: Locally administered unicast MACs (bit 1 of the first octet set, IEEE 802 section 8.4).
DEFAULT_MAC_A = bytes.fromhex("020000000001")
DEFAULT_MAC_B = bytes.fromhex("020000000002")


@dataclass(slots=True)
class MemoryLinkStats:
    tx_frames: int = 0
    tx_bytes: int = 0
    rx_frames: int = 0
    rx_bytes: int = 0
    tx_oversize: int = 0  # frames over MTU + Ethernet overhead, dropped like a NIC would
    tx_ring_full: int = 0  # frames refused because the peer's receive ring was full


class MemoryLink:
    """One endpoint. `tx_burst` appends to the peer's receive ring, `rx_burst` drains ours."""

    def __init__(
        self,
        mac: bytes,
        mtu: int = 1500,
        *,
        clock: Clock | None = None,
        latency: float = 0.0,
        ring_size: int = 4096,
    ) -> None:
        if len(mac) != 6:
            raise ValueError(f"a MAC address is 6 bytes, got {len(mac)}")
        if latency < 0:
            raise ValueError("latency cannot be negative")
        if latency > 0 and clock is None:
            raise ValueError("a link latency needs a clock to measure it")
        if ring_size < 1:
            raise ValueError("ring_size must be at least 1")
        self.mac = mac
        self.mtu = mtu
        self.clock = clock
        self.latency = latency
        self.ring_size = ring_size
        self.peer: MemoryLink | None = None
        self.stats = MemoryLinkStats()
        self._ring: deque[tuple[float, bytes]] = deque()

    def _now(self) -> float:
        return self.clock() if self.clock is not None else 0.0

    def rx_burst(self, max_frames: int = 32) -> list[bytes]:
        now = self._now()
        frames: list[bytes] = []
        ring = self._ring
        while ring and len(frames) < max_frames and ring[0][0] <= now:
            frames.append(ring.popleft()[1])
        self.stats.rx_frames += len(frames)
        self.stats.rx_bytes += sum(len(frame) for frame in frames)
        return frames

    def tx_burst(self, frames: Sequence[bytes]) -> int:
        peer = self.peer
        if peer is None:
            raise RuntimeError("this memory link is not connected to a peer")
        deliver_at = self._now() + self.latency
        max_frame = self.mtu + ETHERNET_OVERHEAD
        taken = 0
        for frame in frames:
            if len(peer._ring) >= peer.ring_size:
                self.stats.tx_ring_full += 1
                break
            taken += 1
            if len(frame) > max_frame:
                self.stats.tx_oversize += 1
                continue
            peer._ring.append((deliver_at, bytes(frame)))
            self.stats.tx_frames += 1
            self.stats.tx_bytes += len(frame)
        return taken

    def poll_at(self) -> float | None:
        """When the oldest queued frame becomes deliverable (None when the ring is empty)."""
        return self._ring[0][0] if self._ring else None

    @property
    def pending(self) -> int:
        """Frames sent to us and not yet received."""
        return len(self._ring)


class MemoryLinkPair(NamedTuple):
    """The two ends of one in-memory cable; unpacks as `a, b = memory_link_pair()`."""

    a: MemoryLink
    b: MemoryLink


def memory_link_pair(
    mtu: int = 1500,
    *,
    mac_a: bytes = DEFAULT_MAC_A,
    mac_b: bytes = DEFAULT_MAC_B,
    clock: Clock | None = None,
    latency: float = 0.0,
    ring_size: int = 4096,
) -> MemoryLinkPair:
    """Two connected endpoints, each with its own MAC; `latency` is one-way, on `clock`."""
    if mac_a == mac_b:
        raise ValueError("the two ends of a link need different MAC addresses")
    a = MemoryLink(mac_a, mtu, clock=clock, latency=latency, ring_size=ring_size)
    b = MemoryLink(mac_b, mtu, clock=clock, latency=latency, ring_size=ring_size)
    a.peer, b.peer = b, a
    return MemoryLinkPair(a, b)

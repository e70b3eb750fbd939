"""What the stack needs from a network device (smoltcp's `phy::Device`).

A link moves whole Ethernet frames (no FCS) in bursts. `DpdkPort` drives a real NIC, the
in-memory pair drives tests; middleware (`FaultInjector`, `PcapLink`) wraps any link and is
itself a link, so the stack never knows what sits under it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

#: Ethernet header (14) + one 802.1Q tag (4): what a frame may carry on top of the IP MTU.
ETHERNET_OVERHEAD = 18

#: A monotonic time source in seconds; `time.monotonic` or a test's virtual clock.
Clock = Callable[[], float]


@runtime_checkable
class Link(Protocol):
    """A frame device: bursts in, bursts out, never blocks."""

    mac: bytes
    mtu: int  # IP MTU (1500 on Ethernet)

    def rx_burst(self, max_frames: int = 32) -> list[bytes]:
        """Up to `max_frames` received frames, oldest first; empty when none are ready."""
        ...

    def tx_burst(self, frames: Sequence[bytes]) -> int:
        """Queue frames for transmission; returns how many were taken (a prefix)."""
        ...


@runtime_checkable
class TimedLink(Link, Protocol):
    """A link that holds frames until a time (delay, reordering): it says when to look again."""

    def poll_at(self) -> float | None:
        """When a held frame becomes deliverable, or None when nothing is held."""
        ...


def link_poll_at(link: Link) -> float | None:
    """`link.poll_at()` for links that hold frames, None for the others."""
    poll_at = getattr(link, "poll_at", None)
    if poll_at is None:
        return None
    result: float | None = poll_at()
    return result

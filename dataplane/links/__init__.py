"""Frame devices for the stack: the `Link` protocol, an in-memory pair, and middleware
(fault injection, pcap capture). The DPDK port lives in `dataplane.dpdk`."""

from dataplane.links.base import ETHERNET_OVERHEAD, Clock, Link, TimedLink, link_poll_at
from dataplane.links.clock import VirtualClock
from dataplane.links.faults import FaultConfig, FaultCounters, FaultInjector
from dataplane.links.memory import MemoryLink, MemoryLinkPair, MemoryLinkStats, memory_link_pair
from dataplane.links.pcap import DLT_EN10MB, PcapLink, PcapWriter

__all__ = [
    "DLT_EN10MB",
    "ETHERNET_OVERHEAD",
    "Clock",
    "FaultConfig",
    "FaultCounters",
    "FaultInjector",
    "Link",
    "MemoryLink",
    "MemoryLinkPair",
    "MemoryLinkStats",
    "PcapLink",
    "PcapWriter",
    "TimedLink",
    "VirtualClock",
    "link_poll_at",
    "memory_link_pair",
]

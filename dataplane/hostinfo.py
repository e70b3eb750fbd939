"""Read-only facts about the host that decide whether DPDK may start and where.

Hugepages come from sysfs; interface addresses and routes from `ip -json`, so the answer is
the kernel's own. Nothing here changes the host.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SYS_HUGEPAGES = Path("/sys/kernel/mm/hugepages")
SYS_NET = Path("/sys/class/net")


@dataclass(frozen=True)
class HugepagePool:
    size_kb: int
    total: int
    free: int

    @property
    def free_mb(self) -> int:
        return self.free * self.size_kb // 1024


def hugepage_pools(root: Path = SYS_HUGEPAGES) -> list[HugepagePool]:
    pools = []
    for entry in sorted(root.glob("hugepages-*kB")):
        size_kb = int(entry.name.removeprefix("hugepages-").removesuffix("kB"))
        total = int((entry / "nr_hugepages").read_text())
        free = int((entry / "free_hugepages").read_text())
        pools.append(HugepagePool(size_kb, total, free))
    return pools


def hugetlbfs_mounted(mounts: Path = Path("/proc/mounts")) -> bool:
    return any(line.split()[2] == "hugetlbfs" for line in mounts.read_text().splitlines())


#: Runs `ip -json ARGS...` and gives the parsed list ([] when there is nothing to say).
IpJson = Callable[..., list[dict[str, Any]]]


def _ip_json(*args: str) -> list[dict[str, Any]]:
    out = subprocess.run(["ip", "-json", *args], check=True, capture_output=True, text=True)
    data = json.loads(out.stdout or "[]")
    return data if isinstance(data, list) else []


def interface_exists(name: str) -> bool:
    return (SYS_NET / name).exists()


@dataclass(frozen=True)
class InterfaceAddresses:
    """Addresses (IPv4, and IPv6 other than link-local) and routes of one interface: what
    the host would lose if a DPDK port opened on it or its NIC were bound to a DPDK driver."""

    addresses: tuple[str, ...] = ()
    routes: tuple[str, ...] = ()
    default_route: bool = False

    @property
    def in_use(self) -> bool:
        """The one safety rule (DPDK ports and NIC binding both ask it): an interface with
        an address or a route is the host's, up or down (a down one comes back up with
        them), and DPDK must not take it unless forced."""
        return bool(self.addresses or self.routes or self.default_route)

    def describe(self) -> str:
        parts = []
        if self.addresses:
            parts.append("addresses " + ", ".join(self.addresses))
        if self.routes:
            parts.append("routes " + ", ".join(self.routes))
        if self.default_route:
            parts.append("the default route")
        return "; ".join(parts) or "no address and no route"


def interface_addresses(name: str, ip_json: IpJson = _ip_json) -> InterfaceAddresses:
    """The kernel's own answer for `name`, from `ip -json addr` and `ip -json route`."""
    addresses: list[str] = []
    for link in ip_json("addr", "show", "dev", name):
        for info in link.get("addr_info", []):
            if info.get("family") == "inet6" and info.get("scope") == "link":
                continue
            addresses.append(f"{info.get('local')}/{info.get('prefixlen')}")
    routes: list[str] = []
    default = False
    for family in ("-4", "-6"):
        for route in ip_json(family, "route", "show", "dev", name):
            dst = str(route.get("dst", ""))
            if dst.startswith("fe80:"):
                continue
            default = default or dst == "default"
            routes.append(dst)
    return InterfaceAddresses(tuple(addresses), tuple(routes), default)

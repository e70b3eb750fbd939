"""Read-only facts about the host that decide whether DPDK may start and where.

Hugepages come from sysfs; interface addresses and routes from `ip -json`, so the answer is
the kernel's own. Nothing here changes the host.
"""

from __future__ import annotations

import json
import subprocess
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


def _ip_json(*args: str) -> list[dict[str, Any]]:
    out = subprocess.run(["ip", "-json", *args], check=True, capture_output=True, text=True)
    data = json.loads(out.stdout or "[]")
    return data if isinstance(data, list) else []


def interface_exists(name: str) -> bool:
    return (SYS_NET / name).exists()


@dataclass(frozen=True)
class InterfaceUse:
    """What the host has on an interface that a DPDK port would take away from it."""

    name: str
    addresses: tuple[str, ...]
    routes: tuple[str, ...]
    carries_default_route: bool

    @property
    def in_use(self) -> bool:
        return bool(self.addresses or self.routes or self.carries_default_route)

    def describe(self) -> str:
        parts = []
        if self.addresses:
            parts.append("addresses " + ", ".join(self.addresses))
        if self.routes:
            parts.append("routes " + ", ".join(self.routes))
        if self.carries_default_route:
            parts.append("the default route")
        return f"{self.name} carries " + "; ".join(parts) if parts else f"{self.name} is unused"


def interface_use(name: str) -> InterfaceUse:
    """Addresses (IPv4, and IPv6 other than link-local) and routes that use `name`."""
    addresses: list[str] = []
    for link in _ip_json("addr", "show", "dev", name):
        for info in link.get("addr_info", []):
            if info.get("family") == "inet6" and info.get("scope") == "link":
                continue
            addresses.append(f"{info.get('local')}/{info.get('prefixlen')}")
    routes: list[str] = []
    default = False
    for family in ("-4", "-6"):
        for route in _ip_json(family, "route", "show", "dev", name):
            dst = str(route.get("dst", ""))
            if dst.startswith("fe80:"):
                continue
            if dst == "default":
                default = True
            routes.append(dst)
    return InterfaceUse(name, tuple(addresses), tuple(routes), default)

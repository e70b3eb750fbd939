"""The host as an injectable dependency: file system roots, commands, addresses and routes.

Everything host management reads or writes goes through `HostPaths` (the sysfs and /proc
roots) and `SysfsIO`; every command through a `CommandRunner`; addresses and routes through
`NetInfo`. Tests build a sysfs tree in a temporary folder, give an IO whose writes act like
the kernel, and never touch a real device.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dataplane.hostinfo import InterfaceAddresses, interface_addresses
from gateway.settings import HostSettings


@dataclass(frozen=True)
class HostPaths:
    sys: Path = Path("/sys")
    proc: Path = Path("/proc")
    hugetlbfs_mount: Path = Path("/dev/hugepages")
    pmd_dirs: tuple[str, ...] = ()
    pci_ids: tuple[Path, ...] = (Path("/usr/share/misc/pci.ids"), Path("/usr/share/hwdata/pci.ids"))

    @classmethod
    def from_settings(cls, settings: HostSettings) -> HostPaths:
        return cls(
            sys=settings.sys_root,
            proc=settings.proc_root,
            hugetlbfs_mount=settings.hugetlbfs_mount,
            pmd_dirs=tuple(settings.pmd_dirs),
        )

    @property
    def pci_devices(self) -> Path:
        return self.sys / "bus/pci/devices"

    @property
    def pci_drivers(self) -> Path:
        return self.sys / "bus/pci/drivers"

    @property
    def hugepages(self) -> Path:
        return self.sys / "kernel/mm/hugepages"

    @property
    def nodes(self) -> Path:
        return self.sys / "devices/system/node"

    @property
    def cpus(self) -> Path:
        return self.sys / "devices/system/cpu"

    @property
    def net(self) -> Path:
        return self.sys / "class/net"


class SysfsIO:
    """Reads and writes of sysfs attributes; a test subclass makes writes act like the kernel."""

    def read(self, path: Path) -> str:
        return path.read_text().strip()

    def read_or(self, path: Path, default: str | None = None) -> str | None:
        try:
            return self.read(path)
        except OSError:
            return default

    def write(self, path: Path, value: str) -> None:
        # One write() call per value: sysfs acts on each write, and buffering could split it.
        with path.open("w") as handle:
            handle.write(value)


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class CommandRunner(Protocol):
    def __call__(self, argv: Sequence[str]) -> CommandResult: ...


def run_command(argv: Sequence[str]) -> CommandResult:
    """Run a command with a timeout; a missing program is a failed result, not an exception."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError as exc:
        return CommandResult(127, "", str(exc))
    except subprocess.TimeoutExpired:
        return CommandResult(124, "", f"{argv[0]} timed out after 30 s")
    return CommandResult(done.returncode, done.stdout, done.stderr)


class NetInfo(Protocol):
    """Addresses (IPv4, IPv6 but link-local) and routes of one interface."""

    def of(self, ifname: str) -> InterfaceAddresses: ...


@dataclass
class IpNetInfo:
    """The kernel's own answer, from `ip -json` through the host's command runner."""

    runner: CommandRunner = field(default=run_command)

    def _json(self, *args: str) -> list[dict[str, Any]]:
        result = self.runner(["ip", "-json", *args])
        if not result.ok:
            return []
        try:
            data = json.loads(result.stdout or "[]")
        except ValueError:
            return []
        return data if isinstance(data, list) else []

    def of(self, ifname: str) -> InterfaceAddresses:
        return interface_addresses(ifname, self._json)


@dataclass
class StaticNetInfo:
    """Fixed answers, for tests and for hosts without iproute2."""

    table: dict[str, InterfaceAddresses] = field(default_factory=dict)

    def of(self, ifname: str) -> InterfaceAddresses:
        return self.table.get(ifname, InterfaceAddresses())


def parse_cpulist(text: str | None) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]; flags such as 'managed_irq,' are skipped."""
    cpus: set[int] = set()
    for token in (text or "").replace(" ", "").split(","):
        low, sep, high = token.partition("-")
        if low.isdigit() and (not sep or high.isdigit()):
            cpus.update(range(int(low), int(high or low) + 1))
    return sorted(cpus)


def format_cpulist(cpus: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    parts: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)

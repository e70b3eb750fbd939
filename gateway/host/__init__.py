"""Host management: CPUs, NUMA, hugepages, the kernel command line, NIC binding for DPDK.

`HostManager` is what the API holds. Every path, command and address lookup is injected
(`HostPaths`, `SysfsIO`, `CommandRunner`, `NetInfo`), so tests run it on a sysfs tree they
build and never on the machine's own devices.
"""

from __future__ import annotations

import threading

from gateway.host.errors import (
    HostChangesDisabledError,
    HostError,
    HostInvalidError,
    HostNotFoundError,
    HostRefusedError,
)
from gateway.host.memory import HostMemoryInfo, HugepageChange, host_memory_info, set_hugepages
from gateway.host.nics import BIND_DRIVERS, BindResult, Nic, NicManager, PmdTable
from gateway.host.system import (
    CommandRunner,
    HostPaths,
    IpNetInfo,
    NetInfo,
    SysfsIO,
    parse_cpulist,
    run_command,
)
from gateway.settings import Settings

__all__ = [
    "BIND_DRIVERS",
    "BindResult",
    "HostChangesDisabledError",
    "HostError",
    "HostInvalidError",
    "HostManager",
    "HostMemoryInfo",
    "HostNotFoundError",
    "HostPaths",
    "HostRefusedError",
    "HugepageChange",
    "Nic",
    "SysfsIO",
]


class HostManager:
    """Reads the host, and changes it when settings allow (one change at a time)."""

    def __init__(
        self,
        paths: HostPaths,
        *,
        io: SysfsIO | None = None,
        runner: CommandRunner = run_command,
        net: NetInfo | None = None,
        pmds: PmdTable | None = None,
        allow_changes: bool = True,
        dataplane_cpus: list[int] | None = None,
    ) -> None:
        self.paths = paths
        self.io = io or SysfsIO()
        self.runner = runner
        self.allow_changes = allow_changes
        self.dataplane_cpus = dataplane_cpus
        self.nics = NicManager(paths, self.io, net or IpNetInfo(runner), runner, pmds)
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> HostManager:
        lcores = settings.dpdk.lcores
        cpus = parse_cpulist(lcores.split("@", 1)[-1].strip("()")) if lcores else None
        return cls(
            HostPaths.from_settings(settings.host),
            allow_changes=settings.host.allow_changes,
            dataplane_cpus=cpus or None,
        )

    def info(self) -> HostMemoryInfo:
        return host_memory_info(self.paths, self.io, self.dataplane_cpus)

    def set_hugepages(
        self, size_kb: int, count: int, node: int | None = None, *, mount: bool = True
    ) -> HugepageChange:
        self._check_changes()
        with self._lock:
            return set_hugepages(
                self.paths, self.io, size_kb, count, node, mount=mount, runner=self.runner
            )

    def list_nics(self) -> list[Nic]:
        return self.nics.all()

    def get_nic(self, address: str) -> Nic:
        return self.nics.get(address)

    def bind(self, address: str, driver: str, *, force: bool = False) -> BindResult:
        self._check_changes()
        with self._lock:
            return self.nics.bind(address, driver, force=force)

    def unbind(self, address: str) -> BindResult:
        self._check_changes()
        with self._lock:
            return self.nics.unbind(address)

    def _check_changes(self) -> None:
        if not self.allow_changes:
            raise HostChangesDisabledError(
                "host changes are disabled (host.allow_changes=false): this gateway only reads "
                "the host; set WSGW_HOST__ALLOW_CHANGES=true to let the API change it"
            )

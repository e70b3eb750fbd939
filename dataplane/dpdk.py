"""Owner objects for the DPDK environment (EAL) and DPDK ports.

DPDK allows one EAL per process and never a second init after cleanup, so `Eal` is a
process-wide singleton that remembers a failed attempt and says why a retry cannot work.
`DpdkPort` owns one ethdev (PCI or vdev) with its mempool and implements the `Link`
protocol for the slow path: burst RX into a reusable arena, burst TX of a batch of frames.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import re
import shutil
import socket
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from dataplane import hostinfo
from dataplane.errors import (
    DeviceNotFoundError,
    DpdkUnavailableError,
    EalAlreadyInitialisedError,
    EalError,
    HugepagesError,
    PortError,
    UnsafeInterfaceError,
)
from dataplane.shim import Shim, load

PCI_ADDRESS = re.compile(r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
SYS_PCI_DEVICES = Path("/sys/bus/pci/devices")
RUNTIME_DIR = Path("/var/run/dpdk")
PMD_FOLDERS = (
    "/usr/lib/x86_64-linux-gnu/dpdk/pmds-*",
    "/usr/lib/aarch64-linux-gnu/dpdk/pmds-*",
    "/usr/local/lib/dpdk/pmds-*",
    "/usr/local/lib64/dpdk/pmds-*",
)
#: vdev drivers that sit on a kernel network interface named by `iface=`.
IFACE_VDEVS = ("net_af_packet", "net_af_xdp", "net_pcap")
ETHER_OVERHEAD = 18  # Ethernet header + FCS; DPDK's MTU is the IP MTU
# af_packet's TPACKET ring is the port's RX queue: the kernel fills it whether or not the
# engine thread runs, and drops what does not fit. The PMD's default is 512 frames (740 kB
# of TCP payload); this one holds 1.5 MB, and `Engine.on_port` keeps every connection's
# receive window within what the queue holds (`DpdkPort.rx_queue_bytes`). A larger ring
# costs cache misses on every frame (its status words are read per frame by the kernel).
AF_PACKET_FRAMES = 1024
AF_PACKET_DEFAULT_FRAMES = 512  # the PMD's own


@dataclass(frozen=True)
class EalConfig:
    """What rte_eal_init is started with (see gateway.settings.DpdkSettings)."""

    lcores: str | None = None
    hugepages: str = "auto"  # auto | on | off
    memory_mb: int = 256
    file_prefix: str | None = None
    pci_allow: tuple[str, ...] = ()
    driver_paths: tuple[str, ...] = ()
    log_level: str = "warning"
    extra_args: tuple[str, ...] = ()


def default_lcores() -> str:
    """Lcore 0 floating over every CPU this process may use, so EAL pins nothing hard."""
    cpus = sorted(os.sched_getaffinity(0))
    return f"0@({','.join(str(c) for c in cpus)})"


def check_lcores(lcores: str) -> None:
    """Refuse CPUs this process may not run on before DPDK sees them: a failed EAL init
    cannot be retried in the same process."""
    allowed = os.sched_getaffinity(0)
    cpus: set[int] = set()
    for token in re.findall(r"\d+(?:-\d+)?", lcores.split("@", 1)[-1]):
        low, _, high = token.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    outside = sorted(cpus - allowed)
    if outside:
        raise EalError(
            f"lcores '{lcores}' names CPUs {outside} that this process may not use "
            f"(allowed: {sorted(allowed)})",
            errno.EINVAL,
        )


def eal_arguments(config: EalConfig) -> list[str]:
    """The argv for rte_eal_init, with the hugepage decision made and checked first."""
    lcores = config.lcores or default_lcores()
    check_lcores(lcores)
    args = ["wsgw", "--lcores", lcores]
    use_hugepages = _decide_hugepages(config)
    if use_hugepages:
        args += ["-m", str(config.memory_mb)]
    else:
        args += ["--no-huge", "-m", str(config.memory_mb)]
    if config.file_prefix:
        args += ["--file-prefix", config.file_prefix]
    elif use_hugepages:
        args.append("--in-memory")
        # In memory, EAL still makes the default prefix's runtime folder (empty): remove it
        # at exit if nobody else put anything there.
        atexit.register(_remove_if_empty, RUNTIME_DIR / "rte")
    else:
        # --no-huge implies legacy memory, which DPDK refuses with --in-memory: give this
        # process a runtime folder of its own instead (removed at exit).
        args += ["--file-prefix", _private_prefix()]
    if config.pci_allow:
        for address in config.pci_allow:
            args += ["-a", address]
    else:
        args.append("--no-pci")
    for path in config.driver_paths:
        args += ["-d", path]
    args += ["--no-telemetry", "--log-level", config.log_level, *config.extra_args]
    return args


def _remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.rmdir()


def _private_prefix() -> str:
    """wsgw-<pid>: removed at exit; folders of processes that died without exiting (kill -9)
    are removed here, before they pile up."""
    for stale in RUNTIME_DIR.glob("wsgw-*") if RUNTIME_DIR.is_dir() else []:
        pid = stale.name.removeprefix("wsgw-")
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(stale, ignore_errors=True)
    prefix = f"wsgw-{os.getpid()}"
    atexit.register(shutil.rmtree, RUNTIME_DIR / prefix, ignore_errors=True)
    return prefix


def _decide_hugepages(config: EalConfig) -> bool:
    if config.hugepages == "off":
        return False
    pools = hostinfo.hugepage_pools()
    free_mb = sum(pool.free_mb for pool in pools)
    enough = free_mb >= config.memory_mb and hostinfo.hugetlbfs_mounted()
    if config.hugepages == "on" and not enough:
        have = ", ".join(f"{p.free}/{p.total} free of {p.size_kb} kB" for p in pools) or "none"
        mount = "" if hostinfo.hugetlbfs_mounted() else "; no hugetlbfs is mounted"
        raise HugepagesError(
            f"too few hugepages: {config.memory_mb} MB wanted, {free_mb} MB free ({have}){mount}; "
            "set more (echo N > /proc/sys/vm/nr_hugepages) or run with hugepages=off",
            errno.ENOMEM,
        )
    return enough


class Eal:
    """The process's DPDK environment. `Eal.init(config)` once; later calls return it."""

    _lock = threading.Lock()
    _instance: Eal | None = None
    _failure: EalError | None = None

    def __init__(self, shim: Shim, args: list[str]) -> None:
        self.shim = shim
        self.args = args

    @classmethod
    def init(cls, config: EalConfig | None = None) -> Eal:
        with cls._lock:
            if cls._instance is not None:
                return cls._instance
            shim = load()
            if not shim.has_dpdk:
                raise DpdkUnavailableError(
                    "the wsgw shim was built without DPDK: install libdpdk-dev and pkg-config, "
                    "then rebuild with `pip install -e .`",
                    errno.ENOTSUP,
                )
            if shim.eal_state() == 3:
                raise EalAlreadyInitialisedError(
                    "DPDK was cleaned up in this process and cannot start again; use a new process",
                    errno.EALREADY,
                )
            if cls._failure is not None:
                raise EalAlreadyInitialisedError(
                    f"DPDK failed to initialise earlier in this process ({cls._failure}); "
                    "DPDK keeps state from that attempt and cannot be initialised again "
                    "here: start a new process",
                    errno.EALREADY,
                )
            args = eal_arguments(config or EalConfig())
            rc = shim.eal_init(args)
            if rc < 0:
                text = shim.last_error()
                if -rc == errno.EALREADY:
                    error: EalError = EalAlreadyInitialisedError(
                        f"{text}; DPDK allows one initialisation per process, start a new "
                        f"process to retry (arguments: {' '.join(args[1:])})",
                        -rc,
                    )
                else:
                    error = EalError(f"{text} (arguments: {' '.join(args[1:])})", -rc)
                cls._failure = error
                raise error
            cls._instance = cls(shim, args)
            return cls._instance

    @classmethod
    def current(cls) -> Eal | None:
        return cls._instance

    def open_port(self, device: str, *, force: bool = False, **sizing: Any) -> DpdkPort:
        """Open a port (see `DpdkPort.open` for the sizing keywords)."""
        return DpdkPort.open(self, device, force=force, **sizing)


def with_rx_ring(device: str) -> str:
    """The devargs the port is probed with: an af_packet vdev without `framecnt` gets a ring
    of AF_PACKET_FRAMES frames (what the caller set is kept)."""
    name, _, args = device.partition(",")
    if not name.startswith("net_af_packet"):
        return device
    if any(arg.partition("=")[0].strip() == "framecnt" for arg in args.split(",")):
        return device
    return f"{device},framecnt={AF_PACKET_FRAMES}"


def rx_queue_frames(device: str, rx_desc: int) -> int:
    """How many frames the port's RX queue holds: an af_packet vdev's ring (framecnt),
    else the descriptors asked for."""
    name, _, args = device.partition(",")
    if not name.startswith("net_af_packet"):
        return rx_desc
    for arg in args.split(","):
        key, _, value = arg.partition("=")
        if key.strip() == "framecnt" and value.strip().isdigit():
            return int(value)
    return AF_PACKET_DEFAULT_FRAMES


def _device_checks(eal: Eal, device: str, force: bool) -> None:
    """Refuse devices that do not exist or that the host uses, with the reason spelled out."""
    name, _, params = device.partition(",")
    if PCI_ADDRESS.match(name):
        full = name if name.count(":") == 2 else f"0000:{name}"
        sysfs = SYS_PCI_DEVICES / full.lower()
        if not sysfs.exists():
            raise DeviceNotFoundError(
                f"PCI device {full} does not exist (no {sysfs})", errno.ENODEV
            )
        allowed = {a if a.count(":") == 2 else f"0000:{a}" for a in eal_allowed(eal)}
        if full.lower() not in {a.lower() for a in allowed}:
            raise PortError(
                f"PCI device {full} is not in the EAL allow list (dpdk.pci_allow); DPDK was "
                "started without it",
                errno.EPERM,
            )
        for net in (sysfs / "net").glob("*") if (sysfs / "net").exists() else []:
            _refuse_used_interface(net.name, force)
        return
    if not name.startswith("net_"):
        raise DeviceNotFoundError(
            f"'{name}' is neither a PCI address (0000:03:00.0) nor a vdev name (net_...)",
            errno.EINVAL,
        )
    drivers = available_vdev_drivers()
    if drivers and not any(name.startswith(d) for d in drivers):
        raise DeviceNotFoundError(
            f"no DPDK driver for vdev '{name}': a vdev name starts with its driver's name "
            f"(available: {', '.join(sorted(drivers))})",
            errno.ENOENT,
        )
    options = dict(p.partition("=")[::2] for p in params.split(",") if p)
    if name.startswith(IFACE_VDEVS):
        iface = options.get("iface")
        if not iface:
            raise PortError(f"vdev {name} needs iface=<interface>", errno.EINVAL)
        if not hostinfo.interface_exists(iface):
            raise DeviceNotFoundError(
                f"network interface '{iface}' does not exist (for {name})", errno.ENODEV
            )
        _refuse_used_interface(iface, force)


def available_vdev_drivers() -> set[str]:
    """Net PMDs DPDK can load here (from its plugin folders), e.g. {"net_af_packet", ...}."""
    names: set[str] = set()
    for folder in PMD_FOLDERS:
        for lib in Path(folder).parent.glob(Path(folder).name):
            for so in lib.glob("librte_net_*.so"):
                names.add("net_" + so.name.removeprefix("librte_net_").removesuffix(".so"))
    return names


def eal_allowed(eal: Eal) -> list[str]:
    return [eal.args[i + 1] for i, arg in enumerate(eal.args[:-1]) if arg == "-a"]


def _refuse_used_interface(iface: str, force: bool) -> None:
    use = hostinfo.interface_addresses(iface)
    if use.in_use and not force:
        raise UnsafeInterfaceError(
            f"refusing to open a DPDK port on {iface}: {iface} carries {use.describe()}; the "
            "stack's traffic "
            "would go out on a network the host uses (pass force=True only if you mean it)",
            errno.EBUSY,
        )


def _open_fds() -> set[int]:
    try:
        return {int(name) for name in os.listdir("/proc/self/fd")}
    except OSError:
        return set()


def _af_packet_rx_fd(device: str, new_fds: set[int]) -> int | None:
    """The socket the af_packet PMD opened for `device` (among the fds its probe created):
    one AF_PACKET socket bound to the vdev's iface, whose TPACKET ring makes it readable
    while frames wait. None for other drivers, or when it is not exactly one (qpairs > 1:
    the engine polls queue 0 only, and which socket that is cannot be told)."""
    name, _, args = device.partition(",")
    if not name.startswith("net_af_packet"):
        return None
    iface = dict(arg.partition("=")[::2] for arg in args.split(",") if arg).get("iface")
    found = []
    for fd in sorted(new_fds):
        try:
            sock = socket.socket(fileno=fd)  # adopts fd: detached below, never closed
        except OSError:
            continue  # not a socket
        try:
            if sock.family == socket.AF_PACKET and sock.getsockname()[0] == iface:
                found.append(fd)
        except OSError:
            pass
        finally:
            sock.detach()
    return found[0] if len(found) == 1 else None


class DpdkPort:
    """One DPDK ethdev with one RX and one TX queue, usable as a `Link`."""

    def __init__(
        self,
        eal: Eal,
        device: str,
        handle: int,
        burst: int,
        rx_wait_fd: int | None = None,
        rx_queue_frames: int = 0,
    ) -> None:
        self.eal = eal
        self.device = device
        self._shim = eal.shim
        self._handle = handle
        self._arena = self._shim.rx_arena(burst)
        self._finalizer = weakref.finalize(self, self._shim.port_close, handle)
        rc, mac = self._shim.port_mac(handle)
        self._shim.check(rc, f"MAC address of {device}", PortError)
        self.mac: bytes = mac
        self.mtu: int = self._shim.check(self._shim.port_mtu(handle), f"MTU of {device}", PortError)
        self.port_id = self._shim.port_id(handle)
        #: An fd readable while the RX queue holds frames (the af_packet PMD's socket), or
        #: None: the engine's back-off sleep waits on it (`wsgw_engine_set_rx_fd`). The
        #: PMD owns it; it is valid while the port is started (af_packet's stop closes it,
        #: and such a port does not start again).
        self.rx_wait_fd = rx_wait_fd
        #: Frames the RX queue holds (0: unknown). What arrives while it is full is dropped
        #: below us, so a receive window beyond it invites losses (see `rx_queue_bytes`).
        self.rx_queue_frames = rx_queue_frames

    @classmethod
    def open(
        cls,
        eal: Eal,
        device: str,
        *,
        force: bool = False,
        n_mbufs: int = 8191,
        mbuf_cache: int = 256,
        rx_desc: int = 1024,
        tx_desc: int = 1024,
        mtu: int = 1500,
        burst: int = 32,
        promiscuous: bool = False,
        start: bool = True,
    ) -> DpdkPort:
        """Probe, configure and (by default) start the port named by a PCI address or vdev."""
        _device_checks(eal, device, force)
        shim = eal.shim
        fds_before = _open_fds()
        rc, handle = shim.port_open(
            with_rx_ring(device),
            n_mbufs=n_mbufs,
            mbuf_cache=mbuf_cache,
            rx_desc=rx_desc,
            tx_desc=tx_desc,
            mtu=mtu,
            promiscuous=promiscuous,
        )
        if rc < 0:
            text = shim.last_error()
            kind = DeviceNotFoundError if -rc in (errno.ENOENT, errno.ENODEV) else PortError
            raise kind(f"cannot open DPDK port {device}: {text}", -rc)
        port = cls(
            eal,
            device,
            handle,
            burst,
            _af_packet_rx_fd(device, _open_fds() - fds_before),
            rx_queue_frames(with_rx_ring(device), rx_desc),
        )
        if start:
            port.start()
        return port

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def _live(self) -> int:
        if not self._finalizer.alive:
            raise PortError(f"port {self.device} is closed", errno.EBADF)
        return self._handle

    def start(self) -> None:
        self._shim.check(self._shim.port_start(self._live()), f"start {self.device}", PortError)

    def stop(self) -> None:
        self._shim.check(self._shim.port_stop(self._live()), f"stop {self.device}", PortError)

    def close(self) -> None:
        """Stop, close and hot-unplug the device; safe to call twice."""
        self._finalizer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def link(self) -> dict[str, int]:
        rc, info = self._shim.port_link(self._live())
        self._shim.check(rc, f"link status of {self.device}", PortError)
        return info

    def rx_queue_bytes(self, mss: int) -> int | None:
        """TCP payload the RX queue holds in full-sized segments (None: unknown): the
        largest receive window that a sender can fill while the engine is off the CPU
        without the queue dropping frames."""
        return self.rx_queue_frames * mss if self.rx_queue_frames else None

    def stats(self) -> dict[str, int]:
        rc, stats = self._shim.port_stats(self._live())
        self._shim.check(rc, f"counters of {self.device}", PortError)
        return stats

    def rx_burst(self, max_frames: int = 32) -> list[bytes]:
        """Up to one burst of received frames, copied out of the mbufs (slow path)."""
        count = self._shim.check(
            self._shim.port_rx_burst(self._live(), self._arena, max_frames),
            f"rx {self.device}",
            PortError,
        )
        return self._arena.frames(count) if count else []

    def tx_burst(self, frames: Sequence[bytes]) -> int:
        """Send a batch in one call; returns how many the PMD took (the rest are counted)."""
        return self._shim.check(
            self._shim.port_tx_burst(self._live(), list(frames)), f"tx {self.device}", PortError
        )

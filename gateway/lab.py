"""The network lab: a peer network namespace joined to the gateway by a veth pair.

    root namespace                         namespace wsgw-<name>
    <name>-g (no kernel IP, DPDK here) ─── <name>-p  198.18.N.1/24 (kernel TCP peer)

The gateway's stack uses 198.18.N.2 on its side; 198.18.N.99 is never assigned, for tests of
an unreachable host. 198.18.0.0/15 is the benchmarking range (RFC 2544), so the lab never
shadows a real network. Offloads are off on both ends (af_packet would hand DPDK truncated
GSO frames and unfinished checksums), IPv6 and forwarding are off on the gateway end, so the
kernel stays out of the conversation. `up` is idempotent and `down` removes everything.

The gateway end's interface index is chosen, not left to the kernel: DPDK 22.11's
net_af_packet joins each port's sockets to the PACKET_FANOUT group `(pid ^ ifindex) &
0xffff` of the root namespace, and a second process whose pid and port give the same group
cannot open its port (setsockopt PACKET_FANOUT fails). Two gateways started together have
pids close to each other, and labs made together got consecutive indexes from the kernel:
a collision was likely. A lab's index is now `k << (FANOUT_SAFE_BITS + 1)` with k in
1..FANOUT_SLOTS, distinct among the labs present (`ip link add ... index N` fails with
"File exists" when N is taken: the next k is tried). For any two such labs, opened by one
process or by two whose pids differ by less than 2 ** FANOUT_SAFE_BITS, the groups differ:
the indexes' XOR is zero in its low FANOUT_SAFE_BITS + 1 bits and not in the bits above,
while two pids that close XOR to zero in bit FANOUT_SAFE_BITS only if they also do in every
bit above it (see `fanout_group`). Beyond FANOUT_SLOTS labs at once the kernel picks.

`mtu` (default 1500, an Ethernet link's) is set on every veth end, the kernel twin's too, so a
jumbo lab compares the stack and a kernel client on links of the same frame size. Above 1500
the vdev asks net_af_packet for frames that hold one (`framesz`, see `af_packet_frame_size`):
its default 2048-byte frames would truncate the peer's segments.
"""

from __future__ import annotations

import os
import subprocess
import zlib
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataplane import hostinfo

OFFLOADS = ("tso", "gso", "gro", "tx", "rx")
SUBNET_PREFIX = "198.18"
#: Processes whose pids differ by less than 2 ** FANOUT_SAFE_BITS never share a fanout group.
FANOUT_SAFE_BITS = 10
#: Labs that get a collision-free gateway interface index (at once, on one host).
FANOUT_SLOTS = (1 << (15 - FANOUT_SAFE_BITS)) - 1
ETHERNET_MTU = 1500
MAX_MTU = 9000  # the usual jumbo frame; veth takes up to 65535, af_packet's frames get large
#: net_af_packet's ring frames per block when the lab asks for larger frames (blocksz).
AF_PACKET_FRAMES_PER_BLOCK = 4


def af_packet_frame_size(mtu: int) -> int:
    """The af_packet ring frame (framesz) for a link of this MTU: the frame, the tpacket2
    header and sockaddr_ll before it (66 bytes to the MAC header) rounded up to 1 KiB. The
    shim sizes its mbufs by the same rule (shim_port.c), as the PMD refuses a queue whose
    frames do not fit one mbuf."""
    return -(-(mtu + 128) // 1024) * 1024


def fanout_group(pid: int, ifindex: int) -> int:
    """The PACKET_FANOUT group DPDK 22.11's net_af_packet joins for a port on `ifindex`
    opened by process `pid` (drivers/net/af_packet/rte_eth_af_packet.c)."""
    return (pid ^ ifindex) & 0xFFFF


def lab_ifindexes() -> list[int]:
    """The interface indexes a lab may give its gateway end (`k << (FANOUT_SAFE_BITS + 1)`)."""
    return [k << (FANOUT_SAFE_BITS + 1) for k in range(1, FANOUT_SLOTS + 1)]


def _ifindexes_in_use() -> set[int]:
    """Interface indexes of this (the root) namespace."""
    used: set[int] = set()
    for path in Path("/sys/class/net").glob("*/ifindex"):
        try:
            used.add(int(path.read_text()))
        except (OSError, ValueError):  # an interface going away meanwhile
            continue
    return used


CLONE_NEWNET = 0x40000000


def _setns(fd: int) -> None:
    """setns(2) on a network namespace fd, for the calling thread only. os.setns arrives
    with Python 3.12; before it, libc's (no shim involved: a one-call system wrapper)."""
    setns = getattr(os, "setns", None)
    if setns is not None:
        setns(fd, CLONE_NEWNET)
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


@contextmanager
def thread_in_netns(netns: str) -> Iterator[None]:
    """The calling thread in network namespace `netns` (an `ip netns` name) until the block
    ends. Threads it starts meanwhile stay there for their whole life (a new thread takes
    its creator's namespaces): how a process puts one asyncio loop thread's OS sockets in a
    lab namespace while its DPDK port stays on the root namespace's veth."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(own)
        finally:
            os.close(target)
    finally:
        os.close(own)


class LabError(RuntimeError):
    """A lab command failed; the message carries the command and the kernel's answer."""


def _run(cmd: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


@dataclass(frozen=True)
class Lab:
    """Names and addresses of one lab; `up()` builds it, `down()` removes it."""

    name: str = "wsgw"
    subnet_index: int | None = None
    extra_peer_addresses: tuple[str, ...] = field(default=())
    kernel_client: bool = False  # a second namespace with a kernel TCP client (benchmarks)
    #: The gateway end's interface index; None: one of `lab_ifindexes()` (tests force one).
    gw_ifindex: int | None = None
    #: Every veth end's MTU (module docstring); the DPDK port must be opened with it.
    mtu: int = ETHERNET_MTU

    def __post_init__(self) -> None:
        if not (1 <= len(self.name) <= 10 and self.name.isalnum() and self.name.islower()):
            raise ValueError(f"lab name '{self.name}' must be 1-10 lower-case letters/digits")
        if not ETHERNET_MTU <= self.mtu <= MAX_MTU:
            raise ValueError(f"lab mtu {self.mtu} must be {ETHERNET_MTU}..{MAX_MTU}")

    @property
    def netns(self) -> str:
        return f"wsgw-{self.name}"

    @property
    def gw_if(self) -> str:
        return f"{self.name}-g"

    @property
    def peer_if(self) -> str:
        return f"{self.name}-p"

    @property
    def index(self) -> int:
        if self.subnet_index is not None:
            return self.subnet_index
        return zlib.crc32(self.name.encode()) % 250 + 2

    @property
    def subnet(self) -> str:
        return f"{SUBNET_PREFIX}.{self.index}.0/24"

    @property
    def peer_ip(self) -> str:
        return f"{SUBNET_PREFIX}.{self.index}.1"

    @property
    def gw_ip(self) -> str:
        """The address the gateway's user-space stack takes (the kernel never has it)."""
        return f"{SUBNET_PREFIX}.{self.index}.2"

    @property
    def unused_ip(self) -> str:
        """An address in the lab subnet that nobody answers ARP for."""
        return f"{SUBNET_PREFIX}.{self.index}.99"

    @property
    def netmask(self) -> str:
        return "255.255.255.0"

    # The kernel twin: namespace `<netns>-k` joined to the peer by a second veth pair, with
    # kernel addresses on both ends, so a kernel client meets the same peer as the stack.
    @property
    def client_netns(self) -> str:
        return f"{self.netns}-k"

    @property
    def client_if(self) -> str:
        return f"{self.name}-k"

    @property
    def peer_client_if(self) -> str:
        return f"{self.name}-q"

    @property
    def peer_client_ip(self) -> str:
        return f"198.19.{self.index}.1"

    @property
    def client_ip(self) -> str:
        return f"198.19.{self.index}.2"

    @property
    def vdev(self) -> str:
        """DPDK devargs for the gateway end (af_packet; qdisc bypass for lower latency;
        frames that hold the lab's MTU when it is above Ethernet's)."""
        vdev = f"net_af_packet_{self.name},iface={self.gw_if},qdisc_bypass=1"
        if self.mtu > ETHERNET_MTU:
            frame = af_packet_frame_size(self.mtu)
            vdev += f",framesz={frame},blocksz={frame * AF_PACKET_FRAMES_PER_BLOCK}"
        return vdev

    # ---- state -----------------------------------------------------------------------------
    def netns_exists(self) -> bool:
        return Path(f"/run/netns/{self.netns}").exists()

    def exists(self) -> bool:
        return (
            self.netns_exists()
            or hostinfo.interface_exists(self.gw_if)
            or Path(f"/run/netns/{self.client_netns}").exists()
        )

    def peer_mac(self) -> str:
        out = self.exec(["cat", f"/sys/class/net/{self.peer_if}/address"]).stdout
        return out.strip()

    def gw_mac(self) -> str:
        return Path(f"/sys/class/net/{self.gw_if}/address").read_text().strip()

    def gw_index(self) -> int:
        """The interface index of the gateway end (the lab must be up)."""
        return int(Path(f"/sys/class/net/{self.gw_if}/ifindex").read_text())

    def status(self) -> dict[str, Any]:
        up = self.netns_exists() and hostinfo.interface_exists(self.gw_if)
        info: dict[str, Any] = {
            "name": self.name,
            "up": up,
            "netns": self.netns,
            "gateway_interface": self.gw_if,
            "peer_interface": self.peer_if,
            "subnet": self.subnet,
            "peer_ip": self.peer_ip,
            "gateway_ip": self.gw_ip,
            "dpdk_vdev": self.vdev,
        }
        if up:
            info["mtu"] = int(Path(f"/sys/class/net/{self.gw_if}/mtu").read_text())
            info["gateway_mac"] = self.gw_mac()
            info["peer_mac"] = self.peer_mac()
        return info

    # ---- build and tear down ------------------------------------------------------------
    def up(self) -> Lab:
        """Create (or complete) the lab. Safe to call when it is already up."""
        try:
            self._up()
        except Exception:
            self.down()
            raise
        return self

    def _up(self) -> None:
        if not self.netns_exists():
            _run(["ip", "netns", "add", self.netns])
        if not hostinfo.interface_exists(self.gw_if):
            self._add_gw_link()
        # Gateway end: no kernel IP, no IPv6, no forwarding; the kernel must stay silent.
        for key, value in (("ipv6/conf/{}/disable_ipv6", "1"), ("ipv4/conf/{}/forwarding", "0")):
            Path(f"/proc/sys/net/{key.format(self.gw_if)}").write_text(value)
        _run(["ip", "addr", "flush", "dev", self.gw_if])
        self._offloads_off([], self.gw_if)
        _run(["ip", "link", "set", self.gw_if, "mtu", str(self.mtu), "up"])
        # Peer end: the kernel TCP peer.
        ns = ["ip", "netns", "exec", self.netns]
        _run([*ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])
        _run([*ns, "ip", "link", "set", "lo", "up"])
        _run([*ns, "ip", "addr", "replace", f"{self.peer_ip}/24", "dev", self.peer_if])
        for extra in self.extra_peer_addresses:
            _run([*ns, "ip", "addr", "replace", extra, "dev", self.peer_if])
        self._offloads_off(ns, self.peer_if)
        _run([*ns, "ip", "link", "set", self.peer_if, "mtu", str(self.mtu), "up"])
        if self.kernel_client:
            self._up_kernel_client(ns)

    def _add_gw_link(self) -> None:
        """The veth pair, its gateway end at a chosen interface index (module docstring)."""
        base = ["ip", "link", "add", self.gw_if]
        veth = ["type", "veth", "peer", "name", self.peer_if, "netns", self.netns]
        if self.gw_ifindex is not None:
            _run([*base, "index", str(self.gw_ifindex), *veth])
            return
        slots = lab_ifindexes()
        start = self.index % len(slots)  # labs made together start apart
        for attempt in range(len(slots)):
            index = slots[(start + attempt) % len(slots)]
            if index in _ifindexes_in_use():
                continue
            proc = _run([*base, "index", str(index), *veth], check=False)
            if proc.returncode == 0:
                return
            if hostinfo.interface_exists(self.gw_if) or "File exists" not in proc.stderr:
                raise LabError(f"{' '.join(proc.args)} failed: {proc.stderr.strip()}")
            # taken meanwhile by another lab: the next one
        _run([*base, *veth])  # every slot taken: the kernel picks (no fanout guarantee)

    def _up_kernel_client(self, ns: list[str]) -> None:
        if not Path(f"/run/netns/{self.client_netns}").exists():
            _run(["ip", "netns", "add", self.client_netns])
        cns = ["ip", "netns", "exec", self.client_netns]
        if _run([*ns, "ip", "link", "show", self.peer_client_if], check=False).returncode:
            _run(
                [
                    *ns,
                    "ip",
                    "link",
                    "add",
                    self.peer_client_if,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    self.client_if,
                    "netns",
                    self.client_netns,
                ]
            )
        _run([*cns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])
        _run([*cns, "ip", "link", "set", "lo", "up"])
        _run(
            [*ns, "ip", "addr", "replace", f"{self.peer_client_ip}/24", "dev", self.peer_client_if]
        )
        _run([*cns, "ip", "addr", "replace", f"{self.client_ip}/24", "dev", self.client_if])
        self._offloads_off(ns, self.peer_client_if)
        self._offloads_off(cns, self.client_if)
        _run([*ns, "ip", "link", "set", self.peer_client_if, "mtu", str(self.mtu), "up"])
        _run([*cns, "ip", "link", "set", self.client_if, "mtu", str(self.mtu), "up"])

    @staticmethod
    def _offloads_off(prefix: list[str], iface: str) -> None:
        args: list[str] = []
        for feature in OFFLOADS:
            args += [feature, "off"]
        # ethtool exits non-zero when one feature cannot change (fixed on veth); the others
        # still change, and a missing ethtool is an install error worth reporting.
        proc = _run([*prefix, "ethtool", "-K", iface, *args], check=False)
        if proc.returncode not in (0, 1) and "Could not change" not in proc.stderr:
            raise LabError(f"ethtool -K {iface} failed: {proc.stderr.strip()}")

    def down(self) -> None:
        """Remove the veth pair and the namespace (and every process left in it)."""
        if self.netns_exists():
            pids = _run(["ip", "netns", "pids", self.netns], check=False).stdout.split()
            for pid in pids:
                _run(["kill", "-9", pid], check=False)
        if Path(f"/run/netns/{self.client_netns}").exists():
            for pid in _run(["ip", "netns", "pids", self.client_netns], check=False).stdout.split():
                _run(["kill", "-9", pid], check=False)
            _run(["ip", "netns", "del", self.client_netns], check=False)
        if hostinfo.interface_exists(self.gw_if):
            _run(["ip", "link", "del", self.gw_if], check=False)
        if self.netns_exists():
            _run(["ip", "netns", "del", self.netns], check=False)

    # ---- running things in the peer namespace -----------------------------------------------
    def exec(self, cmd: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run(["ip", "netns", "exec", self.netns, *cmd], check=check)

    def popen(self, cmd: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(["ip", "netns", "exec", self.netns, *cmd], **kwargs)

    def client_popen(self, cmd: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Run a command in the kernel-client namespace (needs kernel_client=True)."""
        return subprocess.Popen(["ip", "netns", "exec", self.client_netns, *cmd], **kwargs)

    def client_threads(self) -> AbstractContextManager[None]:
        """Threads started inside this block live in the kernel-client namespace (needs
        kernel_client=True): their kernel sockets reach the peer at peer_client_ip."""
        return thread_in_netns(self.client_netns)

    def neighbours(self) -> dict[str, str]:
        """The peer kernel's ARP cache: IP -> MAC (only entries with a MAC)."""
        import json

        out = self.exec(["ip", "-json", "neigh", "show", "dev", self.peer_if]).stdout
        table: dict[str, str] = {}
        for entry in json.loads(out or "[]"):
            if entry.get("lladdr"):
                table[str(entry["dst"])] = str(entry["lladdr"])
        return table


def list_labs() -> list[str]:
    """Names of labs present on this host (namespaces named wsgw-*)."""
    root = Path("/run/netns")
    if not root.exists():
        return []
    return sorted(
        p.name.removeprefix("wsgw-") for p in root.glob("wsgw-*") if not p.name.endswith("-k")
    )

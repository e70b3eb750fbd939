"""`wsgw demo` (what `make run` runs): the lab, a real DPDK port, the stack, the kernel peer.

Until the session and control-plane layers exist, the demo shows the dataplane: the peer's
kernel pings the user-space stack through a DPDK port, and the stack answers ARP and ICMP.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType

from dataplane.dpdk import DpdkPort, Eal, EalConfig
from dataplane.errors import DataplaneError
from dataplane.wire.addr import ip_to_int
from dataplane.wire.arp import OP_REPLY, OP_REQUEST, ArpRepr
from dataplane.wire.errors import WireError
from dataplane.wire.ethernet import ETHERTYPE_ARP, ETHERTYPE_IPV4, EthernetRepr
from dataplane.wire.icmp import IcmpRepr
from dataplane.wire.ipv4 import PROTO_ICMP, Ipv4Repr
from gateway.lab import Lab, LabError

ICMP_ECHO_REQUEST = 8
ICMP_ECHO_REPLY = 0


def answer(frame: bytes, mac: bytes, ip: int) -> bytes | None:
    """The reply to an ARP request or ICMP echo request for (mac, ip), else None."""
    eth, payload = EthernetRepr.parse(frame)
    if eth.ethertype == ETHERTYPE_ARP:
        arp = ArpRepr.parse(payload)
        if arp.operation != OP_REQUEST or arp.target_ip != ip:
            return None
        reply = ArpRepr(OP_REPLY, mac, ip, arp.sender_mac, arp.sender_ip)
        return EthernetRepr(arp.sender_mac, mac, ETHERTYPE_ARP).emit(reply.emit(), pad=True)
    if eth.ethertype == ETHERTYPE_IPV4:
        ip_hdr, ip_payload = Ipv4Repr.parse(payload)
        if ip_hdr.dst != ip or ip_hdr.protocol != PROTO_ICMP:
            return None
        icmp = IcmpRepr.parse(ip_payload)
        if icmp.type != ICMP_ECHO_REQUEST:
            return None
        echo = IcmpRepr(ICMP_ECHO_REPLY, 0, icmp.ident, icmp.seq, icmp.payload).emit()
        packet = Ipv4Repr(src=ip, dst=ip_hdr.src, protocol=PROTO_ICMP, payload_len=len(echo))
        return EthernetRepr(eth.src, mac, ETHERTYPE_IPV4).emit(packet.emit(echo))
    return None


def run_demo(*, name: str, duration: float, hugepages: str) -> int:
    if os.geteuid() != 0:
        print("wsgw demo needs root (network namespaces, DPDK)", file=sys.stderr)
        return 2
    lab = Lab(name)
    stop = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    pinger: subprocess.Popen[str] | None = None
    try:
        lab.up()
        print(
            f"lab {name}: peer {lab.peer_ip} in namespace {lab.netns}, stack {lab.gw_ip} "
            f"on {lab.gw_if}"
        )
        eal = Eal.init(EalConfig(hugepages=hugepages))
        mode = "no hugepages (--no-huge)" if "--no-huge" in eal.args else "hugepages"
        print(f"DPDK {eal.shim.info()['dpdk_version']} up, {mode}")
        port = DpdkPort.open(eal, lab.vdev)
        print(
            f"DPDK port {port.port_id} on {lab.gw_if}: mac {port.mac.hex(':')}, link {port.link()}"
        )
        pinger = lab.popen(
            ["ping", "-i", "0.2", lab.gw_ip],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        os.set_blocking(pinger.stdout.fileno(), False)  # type: ignore[union-attr]
        return _loop(port, ip_to_int(lab.gw_ip), pinger, duration, lambda: stop)
    except (DataplaneError, LabError, OSError) as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if pinger is not None:
            pinger.kill()
            pinger.wait()
        lab.down()
        print(f"lab {name} removed")


def _loop(
    port: DpdkPort,
    ip: int,
    pinger: subprocess.Popen[str],
    duration: float,
    stopped: Callable[[], bool],
) -> int:
    start = last = time.monotonic()
    answered = malformed = 0
    rtts: list[str] = []
    while not stopped() and (duration <= 0 or time.monotonic() - start < duration):
        replies = []
        for frame in port.rx_burst():
            try:
                reply = answer(frame, port.mac, ip)
            except WireError:
                malformed += 1
                continue
            if reply is not None:
                replies.append(reply)
        if replies:
            answered += port.tx_burst(replies)
        else:
            time.sleep(0.0005)
        now = time.monotonic()
        if now - last >= 1.0:
            last = now
            out = pinger.stdout.read() if pinger.stdout else ""
            rtts += [
                part.split("time=")[1].split()[0]
                for part in (out or "").splitlines()
                if "time=" in part
            ]
            stats = port.stats()
            print(
                f"t={now - start:5.1f}s rx {stats['rx_packets']} tx {stats['tx_packets']} "
                f"answered {answered} malformed {malformed} ping rtt ms {rtts[-5:]}",
                flush=True,
            )
    port.close()
    return 0 if answered else 1

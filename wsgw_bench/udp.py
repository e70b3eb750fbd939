"""`udp-pps`: UDP transmit packets/s for small payloads, DPDK burst TX vs the kernel.

Same payload (sequence number, run tag, then 'x'), same receiver: `udpsink` (recvmmsg,
wsgw_bench/peer/udpsink.c) in the lab namespace, which counts every datagram and checks that
each sequence number arrived once. Contenders:
- DPDK burst TX from C (dataplane/shim/udpgen.c) on the lab's DPDK port: mbufs allocated
  in bulk, the template copied in, sequence number and UDP checksum stamped per packet,
  rte_eth_tx_burst in bursts of 64;
- the kernel, `sendmmsg()` of 64 datagrams per call (the reference: the best a kernel
  socket does) and `sendto()` once per datagram (the old tool's loop), both in C
  (wsgw_bench/peer/udpsend.c), from the lab's kernel-client namespace to the same peer.
Transmit rate = datagrams the sender handed over / its own elapsed time; "delivered" is
the share the receiver got, each sequence number once. The peer's /proc/net/snmp Udp
counters (checksum errors, receive-buffer drops) are reported in the notes.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.lab import Lab
from wsgw_bench.core import BenchOptions, Measurement, alternate, scenario
from wsgw_bench.peers import UdpSink, udpsend

PAYLOADS = (18, 64)
DPDK = "DPDK burst TX (C)"
SENDMMSG = "kernel sendmmsg (C)"
SENDTO = "kernel sendto (C)"
REFERENCE = SENDMMSG
BURST = 64
SRC_PORT = 40000
OLD_TOOL = (
    "the old tool (seed 003, another machine, 1M datagrams of 13 B): DPDK 178k pkt/s "
    "vs sendto 72k pkt/s (2.5x)"
)
SNMP_FIELDS = ("InDatagrams", "InErrors", "RcvbufErrors", "InCsumErrors", "NoPorts")


def udp_template(
    src_mac: bytes, dst_mac: bytes, src_ip: str, dst_ip: str, dst_port: int, payload: int, tag: int
) -> bytes:
    """The frame udpgen.c copies: Ethernet/IPv4/UDP, payload = seq 0, tag, then 'x'."""
    from dataplane.wire.addr import ip_to_int
    from dataplane.wire.ethernet import EthernetRepr
    from dataplane.wire.ipv4 import Ipv4Repr
    from dataplane.wire.udp import PROTO_UDP, UdpRepr

    if payload < 12:
        raise ValueError(f"payload of {payload} bytes: 12 at least (sequence and tag)")
    data = bytes(8) + tag.to_bytes(4, "big") + b"x" * (payload - 12)
    src, dst = ip_to_int(src_ip), ip_to_int(dst_ip)
    udp = UdpRepr(SRC_PORT, dst_port, data).emit(src, dst)
    ip = Ipv4Repr(src=src, dst=dst, protocol=PROTO_UDP, payload_len=len(udp)).emit(udp)
    return EthernetRepr(dst_mac, src_mac, 0x0800).emit(ip)


def peer_udp_counters(lab: Lab) -> dict[str, int]:
    """The Udp line of /proc/net/snmp in the peer namespace."""
    lines = [ln.split() for ln in lab.exec(["cat", "/proc/net/snmp"]).stdout.splitlines()]
    udp = [ln for ln in lines if ln and ln[0] == "Udp:"]
    if len(udp) < 2:
        return {}
    return {k: int(v) for k, v in zip(udp[0][1:], udp[1][1:], strict=False)}


def wait_for_sink(
    sink: UdpSink, sent: int, quiet: float = 0.15, limit: float = 10.0
) -> dict[str, int]:
    """The sink's counts once everything arrived, or nothing arrived for `quiet` seconds."""
    deadline = time.monotonic() + limit
    while True:
        report = sink.report()
        if report["unique"] + report["duplicates"] >= sent:
            return report
        if report["idle_ns"] > quiet * 1e9 or time.monotonic() > deadline:
            return report
        time.sleep(0.02)


class DpdkSender:
    """The lab's DPDK port and the C flood on it (this process's EAL)."""

    def __init__(self, lab: Lab) -> None:
        from dataplane.dpdk import Eal, EalConfig

        self.eal = Eal.init(EalConfig())
        self.port = self.eal.open_port(lab.vdev)
        self.peer_mac = bytes.fromhex(lab.peer_mac().replace(":", ""))
        self.lab = lab

    def close(self) -> None:
        self.port.close()

    def send(self, payload: int, dst_port: int, count: int, tag: int) -> tuple[int, int, str]:
        """(sent, ns, note) for one run of count datagrams."""
        from dataplane.shim import udp_flood

        template = udp_template(
            self.port.mac, self.peer_mac, self.lab.gw_ip, self.lab.peer_ip, dst_port, payload, tag
        )
        shim = self.eal.shim
        rc, result = udp_flood(
            shim.lib,
            self.port._live(),
            template,
            count,
            burst=BURST,
            checksum=True,
            timeout_ns=60_000_000_000,
        )
        shim.check(rc, "wsgw_udp_flood")
        note = ""
        if result.refused or result.nombuf:
            note = (
                f"PMD handed back {result.refused} frames (offered again), "
                f"{result.nombuf} empty-pool waits"
            )
        return result.sent, result.ns, note


@scenario(
    "udp-pps",
    "UDP transmit pkt/s, 18 B and 64 B payloads: DPDK burst TX (C) vs kernel sendmmsg/sendto",
    needs_root=True,
)
def udp_pps(options: BenchOptions) -> list[Measurement]:
    count = 30_000 if options.quick else 300_000
    names = [DPDK, SENDMMSG, SENDTO]
    tx: dict[int, dict[str, Measurement]] = {}
    delivered: dict[int, dict[str, Measurement]] = {}
    for size in PAYLOADS:
        tx[size] = {
            n: Measurement(
                "udp-pps", f"TX pkt/s {size} B", n, "pkt/s", True, reference=n == REFERENCE
            )
            for n in names
        }
        delivered[size] = {
            n: Measurement("udp-pps", f"delivered {size} B", n, "%", True, reference=n == REFERENCE)
            for n in names
        }
    notes: dict[str, list[str]] = {n: [] for n in names}
    skipped: dict[str, str] = {}
    lab = Lab(options.lab_name, kernel_client=True)
    lab.down()
    lab.up()
    sink: UdpSink | None = None
    dpdk: DpdkSender | None = None
    tag = 0
    try:
        sink = UdpSink.start(lab)
        try:
            dpdk = DpdkSender(lab)
        except Exception as exc:
            skipped[DPDK] = f"skipped: no DPDK port ({type(exc).__name__}: {exc})"
        snmp_before = peer_udp_counters(lab)
        for size in PAYLOADS:
            for _, name in alternate(options.repetitions, names):
                if name in skipped:
                    continue
                tag += 1
                sink.reset(count, tag)
                if name == DPDK:
                    assert dpdk is not None
                    sent, ns, note = dpdk.send(size, sink.port, count, tag)
                    if note:
                        notes[name].append(note)
                else:
                    mode = "sendmmsg" if name == SENDMMSG else "sendto"
                    result: dict[str, Any] = udpsend(
                        lab, mode, lab.peer_client_ip, sink.port, size, count, tag, batch=BURST
                    )
                    sent, ns = int(result["sent"]), int(result["ns"])
                    if result.get("retries"):
                        notes[name].append(f"{result['retries']} ENOBUFS/EAGAIN retries")
                report = wait_for_sink(sink, sent)
                bad = report["duplicates"] + report["out_of_range"] + report["short"]
                if bad:
                    notes[name].append(
                        f"{size} B: DATA ERROR duplicates {report['duplicates']}, "
                        f"out of range {report['out_of_range']}, short {report['short']}"
                    )
                    continue
                if sent and ns:
                    tx[size][name].samples.append(sent / ns * 1e9)
                    delivered[size][name].samples.append(100.0 * report["unique"] / sent)
        snmp_after = peer_udp_counters(lab)
    finally:
        try:
            if dpdk is not None:
                dpdk.close()
            if sink is not None:
                sink.stop()
        finally:
            lab.down()
    snmp = {k: snmp_after.get(k, 0) - snmp_before.get(k, 0) for k in SNMP_FIELDS}
    first = tx[PAYLOADS[0]]
    for name in names:
        parts = [skipped[name]] if name in skipped else []
        parts += list(dict.fromkeys(notes[name]))
        first[name].note = "; ".join(parts)
    first[DPDK].note = "; ".join(
        p
        for p in (
            first[DPDK].note,
            f"net_af_packet on a veth, burst {BURST}: each burst is one sendto() kick of a "
            "PACKET_TX_RING, so the kernel still moves every frame",
            OLD_TOOL,
        )
        if p
    )
    first[SENDTO].note = "; ".join(p for p in (first[SENDTO].note, OLD_TOOL) if p)
    first[SENDMMSG].note = "; ".join(
        p
        for p in (
            first[SENDMMSG].note,
            f"{count} datagrams per run; receiver: udpsink (recvmmsg) in the peer namespace; "
            "peer /proc/net/snmp Udp over all runs: "
            + ", ".join(f"{k} {v}" for k, v in snmp.items()),
        )
        if p
    )
    return [m for size in PAYLOADS for m in (*tx[size].values(), *delivered[size].values())]

"""`floor`: what the lab's link itself costs — ICMP echo round trips over the same veth.

Every latency target of wsgw is measured on a lab where the far end is the Linux kernel
behind a veth pair and our port is DPDK's `net_af_packet` (a kernel socket with a mmap ring
underneath). This scenario measures the floor of that setup, below any TCP or WebSocket
code: `ping` in the lab namespace (the same sender for every contender, 1 ms apart)
against
- the kernel answering on the lab's twin veth (the reference: what kernel-TCP contenders
  such as picows ride on);
- DPDK's own `dpdk-testpmd --forward-mode=icmpecho` on the lab's DPDK veth end: C, a
  busy-polling lcore, no wsgw code — the best any program can do through af_packet;
- wsgw's engine on the same port answering in its Python stack (ICMP is slow path by
  design), with adaptive and with busy polling.
If testpmd's round trip is not clearly below the kernel's, no user-space stack can beat
kernel TCP's latency on this lab by a wide margin: the difference then lies in the link,
not in the stack. `dpdk-testpmd` comes with Debian's `dpdk-dev` package (skipped without).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time

from gateway.lab import Lab
from wsgw_bench.core import BenchOptions, Measurement, lab_engine, scenario

KERNEL = "kernel (twin veth)"
TESTPMD = "DPDK testpmd icmpecho (C, busy poll)"
ENGINE_ADAPTIVE = "wsgw engine, adaptive polling (Python ICMP)"
ENGINE_BUSY = "wsgw engine, busy polling (Python ICMP)"
TIME_RE = re.compile(rb"time=([0-9.]+) ms")


def ping_rtts(lab: Lab, target: str, count: int) -> list[float]:
    """Round trips in microseconds from `ping` in the lab namespace, one per reply."""
    proc = lab.exec(["ping", "-n", "-c", str(count), "-i", "0.001", "-W", "1", target], check=False)
    return [float(m) * 1000 for m in TIME_RE.findall(proc.stdout.encode())]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def _testpmd_rtts(lab: Lab, count: int) -> tuple[list[float], str]:
    binary = shutil.which("dpdk-testpmd")
    if binary is None:
        return [], "skipped: dpdk-testpmd missing (Debian package dpdk-dev)"
    prefix = f"wsgw-floor-{lab.name}"
    # The stdin pipe keeps the interactive prompt open until we close it; 'quit' ends it.
    proc = subprocess.Popen(
        [
            binary,
            "--no-huge",
            "-m",
            "512",
            "--no-pci",
            "--file-prefix",
            prefix,
            "--vdev",
            lab.vdev,
            "-l",
            "0-1",
            "--",
            "-i",
            "--forward-mode=icmpecho",
            "--nb-cores=1",
            "--total-num-mbufs=8192",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write("start\n")
        proc.stdin.flush()
        time.sleep(3)  # EAL start and the port up
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            return [], "testpmd failed: " + out.strip().splitlines()[-1] if out else "?"
        lab.exec(["ip", "neigh", "flush", "dev", lab.peer_if], check=False)
        return ping_rtts(lab, lab.gw_ip, count), ""
    finally:
        try:
            if proc.stdin is not None:
                proc.stdin.write("stop\nquit\n")
                proc.stdin.close()
            proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        # testpmd leaves its EAL runtime directory (the file prefix's) behind on exit.
        shutil.rmtree(f"/var/run/dpdk/{prefix}", ignore_errors=True)


def _engine_rtts(lab: Lab, count: int, busy: bool) -> list[float]:
    from dataplane.engine import EngineConfig
    from dataplane.fastpath import FastPathConfig

    config = EngineConfig(fastpath=FastPathConfig(poll_mode="busy" if busy else "adaptive"))
    with lab_engine(lab, config):
        lab.exec(["ip", "neigh", "flush", "dev", lab.peer_if], check=False)
        return ping_rtts(lab, lab.gw_ip, count)


@scenario(
    "floor",
    "ICMP echo RTT over the lab's veth: kernel vs DPDK testpmd (C) vs wsgw's engine",
    needs_root=True,
)
def floor(options: BenchOptions) -> list[Measurement]:
    count = 500 if options.quick else 3000
    lab = Lab(options.lab_name, kernel_client=True)
    lab.down()
    lab.up()
    names = [KERNEL, TESTPMD, ENGINE_ADAPTIVE, ENGINE_BUSY]
    found: dict[str, list[float]] = {}
    notes: dict[str, str] = {}
    try:
        found[KERNEL] = ping_rtts(lab, lab.client_ip, count)
        found[TESTPMD], notes[TESTPMD] = _testpmd_rtts(lab, count)
        found[ENGINE_ADAPTIVE] = _engine_rtts(lab, count, busy=False)
        found[ENGINE_BUSY] = _engine_rtts(lab, count, busy=True)
    finally:
        lab.down()
    out: list[Measurement] = []
    for fraction, label in ((0.5, "p50"), (0.99, "p99")):
        for name in names:
            rtts = found.get(name, [])
            m = Measurement(
                "floor", f"ICMP echo RTT {label}", name, "us", False, reference=name == KERNEL
            )
            if rtts:
                m.samples.append(percentile(rtts, fraction))
            if label == "p50":
                lost = count - len(rtts)
                m.note = notes.get(name, "") or (f"{lost} of {count} unanswered" if lost else "")
            out.append(m)
    return out

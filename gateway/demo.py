"""`wsgw demo` (what `make run` runs): the lab, a real DPDK port, the engine, the kernel peer.

Until the session layer and the control plane are wired in, the demo shows the dataplane:
the peer's kernel pings the user-space stack through a DPDK port, and a TCP connection
from the stack to a kernel echo server in the peer namespace carries timestamped probes.
A line per second shows both round-trip times and the engine's counters.
"""

from __future__ import annotations

import os
import signal
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType

from dataplane.dpdk import Eal, EalConfig
from dataplane.engine import Engine, engine_config_from
from dataplane.errors import DataplaneError
from dataplane.stack.iface import Interface
from dataplane.stack.socket import TcpSocket
from dataplane.stack.tcp import TcpConfig
from dataplane.wire.addr import ip_to_int
from gateway.lab import Lab, LabError
from gateway.settings import Settings

ECHO_PORT = 7
PROBE = struct.Struct("!Q56x")  # 64 bytes: a send timestamp (ns) and padding
ECHO_SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(4); print("ready", flush=True)
while True:
    c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while data := c.recv(65536):
        c.sendall(data)
    c.close()
"""


class EchoProber:
    """Engine service: a 64-byte probe every interval, RTT measured on its echo."""

    def __init__(self, sock: TcpSocket, interval: float = 0.1) -> None:
        self.sock = sock
        self.interval = interval
        self.next_send = 0.0
        self.pending = b""
        self.rtts: list[float] = []

    def __call__(self, now: float) -> None:
        if now >= self.next_send and self.sock.writable:
            self.sock.send(PROBE.pack(time.monotonic_ns()))
            self.next_send = now + self.interval
        self.pending += self.sock.recv(65536)
        while len(self.pending) >= PROBE.size:
            (sent,) = PROBE.unpack_from(self.pending)
            self.pending = self.pending[PROBE.size :]
            self.rtts.append((time.monotonic_ns() - sent) / 1e6)


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
    children: list[subprocess.Popen[str]] = []
    engine: Engine | None = None
    try:
        lab.up()
        print(
            f"lab {name}: kernel peer {lab.peer_ip} in namespace {lab.netns}, "
            f"user-space stack {lab.gw_ip} on {lab.gw_if}"
        )
        eal = Eal.init(EalConfig(hugepages=hugepages))
        mode = "without hugepages (--no-huge)" if "--no-huge" in eal.args else "on hugepages"
        print(f"{eal.shim.info()['dpdk_version']} up {mode}")
        port = eal.open_port(lab.vdev)
        print(
            f"DPDK port {port.port_id} ({lab.vdev.split(',')[0]}) on {lab.gw_if}: "
            f"mac {port.mac.hex(':')}, link {port.link()}"
        )
        iface = Interface(
            port.mac,
            ip_to_int(lab.gw_ip),
            ip_to_int(lab.netmask),
            tcp_config=TcpConfig(time_wait=1.0),
        )
        engine = Engine(iface, port=port, config=engine_config_from(Settings().engine))
        engine.start()
        echo = lab.popen(
            [sys.executable, "-c", ECHO_SERVER, lab.peer_ip, str(ECHO_PORT)],
            stdout=subprocess.PIPE,
            text=True,
        )
        children.append(echo)
        assert echo.stdout is not None
        if echo.stdout.readline().strip() != "ready":
            raise LabError("the echo server in the peer namespace did not start")
        eng = engine
        sock = eng.call(
            lambda: eng.interface.connect(ip_to_int(lab.peer_ip), ECHO_PORT, time.monotonic())
        ).result(5)
        prober = EchoProber(sock)
        eng.call(lambda: eng.services.append(prober)).result(5)
        pinger = lab.popen(
            ["ping", "-i", "0.2", lab.gw_ip],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        children.append(pinger)
        assert pinger.stdout is not None
        os.set_blocking(pinger.stdout.fileno(), False)
        print("streaming: a line per second (Ctrl-C stops; the lab is removed on exit)")
        return _report(eng, prober, pinger, duration, lambda: stop)
    except (DataplaneError, LabError, OSError) as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    finally:
        for child in children:
            child.kill()
            child.wait()
        if engine is not None:
            engine.close()
            if engine.port is not None:
                engine.port.close()
        lab.down()
        print(f"lab {name} removed")


def _report(
    engine: Engine,
    prober: EchoProber,
    pinger: subprocess.Popen[str],
    duration: float,
    stopped: Callable[[], bool],
) -> int:
    start = last = time.monotonic()
    ping_rtts: list[float] = []
    while not stopped() and (duration <= 0 or time.monotonic() - start < duration):
        time.sleep(0.05)
        now = time.monotonic()
        if now - last < 1.0:
            continue
        last = now
        assert pinger.stdout is not None
        out = pinger.stdout.read() or ""
        ping_rtts += [
            float(line.split("time=")[1].split()[0]) for line in out.splitlines() if "time=" in line
        ]
        snap = engine.snapshot()
        tcp = prober.rtts[-10:]
        tcp_p50 = f"{statistics.median(tcp):.3f}" if tcp else "-"
        ping_p50 = f"{statistics.median(ping_rtts[-5:]):.3f}" if ping_rtts else "-"
        print(
            f"t={now - start:5.1f}s  ping rtt {ping_p50} ms  tcp echo rtt {tcp_p50} ms  "
            f"probes {len(prober.rtts)}  rx {snap.get('c_rx_frames', 0)}  "
            f"fast {snap.get('c_fast_segments', 0)}  slow {snap.get('slow_frames', 0)}  "
            f"loops {snap.get('loops', 0)}",
            flush=True,
        )
    ok = bool(prober.rtts) and bool(ping_rtts)
    if not ok:
        print("no echo seen: the dataplane did not answer", file=sys.stderr)
    return 0 if ok else 1


__all__ = ["run_demo"]

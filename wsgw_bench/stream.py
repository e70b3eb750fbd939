"""`stream`: bulk TCP receive from the same kernel peer, DPDK engine vs the kernel.

The peer (wsgw_bench/peer_server.py, `source` mode) runs in the lab namespace. Contenders:
- the engine on a DPDK port (net_af_packet) with the C fast path,
- the same engine with the fast path off (every segment through the Python slow path),
- a kernel TCP socket reading the same stream: a client in the lab's twin namespace,
  reached over a second veth pair with the same offloads off (the reference),
- two Python stacks over an in-memory link (no kernel, no DPDK: the stack's own cost).
Each contender receives the same number of bytes per repetition; the data is verified.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

from wsgw_bench.core import BenchOptions, Measurement, alternate, lab_engine, scenario

# Run as a script in the lab namespace: it needs nothing but the standard library.
PEER_SERVER = Path(__file__).resolve().with_name("peer_server.py")
SEED = 4

KERNEL_CLIENT = """
import hashlib, socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
start = time.perf_counter(); d = hashlib.sha256(); n = 0
while chunk := s.recv(1 << 20):
    d.update(chunk); n += len(chunk)
print(n, time.perf_counter() - start, d.hexdigest(), flush=True)
"""


def _expected_digest(size: int) -> str:
    from wsgw_bench.peer_server import payload

    return hashlib.sha256(payload(size, SEED)).hexdigest()


def _start_source(lab: object, port: int, size: int) -> subprocess.Popen[str]:
    from gateway.lab import Lab

    assert isinstance(lab, Lab)
    proc = lab.popen(
        # Inside the lab namespace: it must answer on both of the peer's veth ends.
        [sys.executable, str(PEER_SERVER), "0.0.0.0", str(port), "source", str(size), str(SEED)],  # noqa: S104
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError("the peer server did not start")
    return proc


def _engine_run(engine: object, lab: object, port: int, size: int) -> tuple[float, str]:
    from dataplane.engine import Engine
    from dataplane.wire.addr import ip_to_int
    from gateway.lab import Lab

    assert isinstance(engine, Engine)
    assert isinstance(lab, Lab)
    server = _start_source(lab, port, size)
    done = threading.Event()
    digest = hashlib.sha256()
    state = {"count": 0}
    try:
        start = time.perf_counter()
        sock = engine.call(
            lambda: engine.interface.connect(ip_to_int(lab.peer_ip), port, time.monotonic())
        ).result(5)

        def sink(now: float) -> None:
            while chunk := sock.recv(1 << 20):
                digest.update(chunk)
                state["count"] += len(chunk)
            if sock.at_eof or sock.error is not None:
                done.set()

        engine.call(lambda: engine.services.append(sink)).result(5)
        if not done.wait(300):
            raise RuntimeError(f"stream stalled at {state['count']} bytes")
        elapsed = time.perf_counter() - start
        engine.call(lambda: engine.services.remove(sink)).result(5)
        engine.call(sock.close).result(5)
        return elapsed, digest.hexdigest()
    finally:
        server.kill()
        server.wait()


def _kernel_run(lab: object, port: int, size: int) -> tuple[float, str]:
    from gateway.lab import Lab

    assert isinstance(lab, Lab)
    server = _start_source(lab, port, size)
    try:
        client = lab.client_popen(
            [sys.executable, "-c", KERNEL_CLIENT, lab.peer_client_ip, str(port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        out, _ = client.communicate(timeout=300)
        count, elapsed, digest = out.split()
        if int(count) != size:
            raise RuntimeError(f"kernel client got {count} of {size} bytes")
        return float(elapsed), digest
    finally:
        server.kill()
        server.wait()


def _memory_run(size: int) -> tuple[float, str]:
    """Two Python stacks over an in-memory link, real clock: the stack's own ceiling."""
    from dataplane.links.memory import memory_link_pair
    from dataplane.stack.iface import Interface
    from dataplane.stack.runner import StackRunner
    from dataplane.stack.tcp import TcpConfig
    from wsgw_bench.peer_server import payload

    data = payload(size, SEED)
    a, b = memory_link_pair()
    config = TcpConfig(recv_buffer=4 << 20, send_buffer=4 << 20, time_wait=0.1)

    def end(mac: bytes, ip: int, peer_mac: bytes, peer_ip: int) -> Interface:
        """One end of the /24, the other's MAC known up front (no ARP in the measurement)."""
        static_arp = {peer_ip: peer_mac}
        return Interface(
            mac, ip, 0xFFFFFF00, tcp_config=config, static_arp=static_arp, announce=False
        )

    client = end(a.mac, 0xC6130101, b.mac, 0xC6130102)
    server = end(b.mac, 0xC6130102, a.mac, 0xC6130101)
    server_runner = StackRunner(server, b, idle_sleep=0)
    runner = StackRunner(client, a, peers=[server_runner], idle_sleep=0)
    listener = server.listen(9000)
    start = time.perf_counter()
    sock = runner.connect(0xC6130102, 9000, timeout=5)
    sent = 0
    digest = hashlib.sha256()
    count = 0
    peer = None
    while count < size:
        runner.step()
        server_runner.step()
        if peer is None:
            peer = listener.accept()
        if peer is not None and sent < size:
            sent += peer.send(memoryview(data)[sent : sent + (1 << 20)])
        while chunk := sock.recv(1 << 20):
            digest.update(chunk)
            count += len(chunk)
    return time.perf_counter() - start, digest.hexdigest()


@scenario(
    "stream", "bulk TCP receive from one kernel peer: DPDK engine vs kernel socket", needs_root=True
)
def stream(options: BenchOptions) -> list[Measurement]:
    from dataplane.engine import EngineConfig
    from dataplane.fastpath import FastPathConfig
    from dataplane.stack.tcp import TcpConfig
    from gateway.lab import Lab

    size = (20 if options.quick else 100) << 20
    memory_size = (4 if options.quick else 16) << 20
    expected = _expected_digest(size)
    expected_memory = _expected_digest(memory_size)
    lab = Lab(options.lab_name, kernel_client=True)
    lab.down()
    lab.up()
    names = [
        "wsgw engine, fast path (DPDK)",
        "wsgw engine, slow path only (DPDK)",
        "kernel socket",
        "wsgw stack, memory link (Python both ends)",
    ]
    results = {
        name: Measurement(
            "stream", "receive throughput", name, "B/s", True, reference=(name == "kernel socket")
        )
        for name in names
    }
    cpu = Measurement("stream", "engine CPU per GB", names[0], "s", False)
    extra: list[Measurement] = []
    try:
        engine_config = EngineConfig(fastpath=FastPathConfig())
        tcp_config = TcpConfig(recv_buffer=4 << 20, time_wait=0.2)
        with lab_engine(lab, engine_config, tcp_config) as engine:
            rss_start = _rss_kb()
            tcp_port = 7100
            for _, name in alternate(options.repetitions, names):
                tcp_port += 1
                if name == names[3]:
                    elapsed, digest = _memory_run(memory_size)
                    if digest != expected_memory:
                        raise RuntimeError("memory-link stream corrupted")
                    results[name].samples.append(memory_size / elapsed)
                    continue
                if name == "kernel socket":
                    elapsed, digest = _kernel_run(lab, tcp_port, size)
                else:
                    fast = name == names[0]
                    engine.call(partial(engine.fastpath.set_enabled, fast)).result(5)
                    cpu_before = engine.cpu_seconds()
                    elapsed, digest = _engine_run(engine, lab, tcp_port, size)
                    if fast:
                        cpu.samples.append((engine.cpu_seconds() - cpu_before) / (size / 1e9))
                if digest != expected:
                    raise RuntimeError(f"{name}: the received stream differs from the sent")
                results[name].samples.append(size / elapsed)
            latency = sorted(engine.fastpath.rx_to_readable_ns)
            if latency:
                for label, q in (("p50", 0.50), ("p99", 0.99)):
                    extra.append(
                        Measurement(
                            "stream",
                            f"RX burst to readable, {label}",
                            names[0],
                            "us",
                            False,
                            samples=[latency[min(int(q * len(latency)), len(latency) - 1)] / 1e3],
                            note=f"{len(latency)} batches (first byte of each)" if q == 0.5 else "",
                        )
                    )
            idle = Measurement(
                "stream", "idle engine CPU", "wsgw engine (adaptive poll)", "%", False
            )
            for _ in range(options.repetitions):
                before, t0 = engine.cpu_seconds(), time.monotonic()
                time.sleep(1.0 if options.quick else 3.0)
                idle.samples.append(100 * (engine.cpu_seconds() - before) / (time.monotonic() - t0))
            extra.append(idle)
            rss = Measurement(
                "stream",
                "resident memory growth over the runs",
                names[0],
                "MB",
                False,
                samples=[(_rss_kb() - rss_start) / 1024],
            )
            extra.append(rss)
            stats = engine.fastpath.stats()
            results[names[0]].note = (
                f"fast-path segments {stats['fast_segments']}, slow-path frames "
                f"{engine.counters.slow_frames} over all runs"
            )
    finally:
        lab.down()
    slow = results[names[1]]
    segs = Measurement(
        "stream",
        "slow-path segments/s",
        names[1],
        "seg/s",
        True,
        samples=[s / 1448 for s in slow.samples],
    )
    return [*results.values(), cpu, segs, *extra]


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0

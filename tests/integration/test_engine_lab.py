"""The engine on a real DPDK port: fast path share, data integrity, idle CPU, GIL release.

The kernel peer in the lab namespace streams to the engine's thread, which runs the C
fast path on a net_af_packet port. Bounds on CPU and latency here are deliberately
generous (shared 2-core machines); `wsgw bench` reports the precise figures.
"""

from __future__ import annotations

import hashlib
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from api.app import create_app
from dataplane.engine import Engine
from dataplane.stack.socket import TcpSocket
from dataplane.wire.addr import ip_to_int
from gateway.lab import Lab
from gateway.settings import Settings
from tests.conftest import fresh_lab, requires_dpdk, run_in_loop
from tests.integration.test_stack_kernel import MB, PEER_SERVER
from wsgw_bench.peer_server import payload

pytestmark = [requires_dpdk, pytest.mark.dpdk]


class Sink:
    """Engine service: drains one socket, hashing what it reads."""

    def __init__(self, sock: TcpSocket) -> None:
        self.sock = sock
        self.digest = hashlib.sha256()
        self.count = 0
        self.done = threading.Event()

    def __call__(self, now: float) -> None:
        while chunk := self.sock.recv(1 << 20):
            self.digest.update(chunk)
            self.count += len(chunk)
        if self.sock.at_eof or self.sock.error is not None:
            self.done.set()


@pytest.fixture
def engine(lab_engine) -> tuple[Engine, Lab]:  # type: ignore[no-untyped-def]
    return lab_engine(time_wait=0.5, recv_buffer=4 << 20)  # type: ignore[no-any-return]


def stream_from_kernel(engine: Engine, lab: Lab, size: int, port: int) -> Sink:
    server = lab.popen(
        [sys.executable, PEER_SERVER, lab.peer_ip, str(port), "source", str(size), "4"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    sock = engine.call(
        lambda: engine.interface.connect(ip_to_int(lab.peer_ip), port, time.monotonic())
    ).result(5)
    sink = Sink(sock)
    engine.call(lambda: engine.services.append(sink)).result(5)
    return sink


def test_kernel_streams_200mb_mostly_on_the_fast_path(engine: tuple[Engine, Lab]) -> None:
    eng, lab = engine
    try:
        size = 200 * MB
        sink = stream_from_kernel(eng, lab, size, 7001)
        assert sink.done.wait(240), f"received {sink.count} of {size}"
        assert sink.sock.error is None
        assert sink.count == size
        assert sink.digest.digest() == hashlib.sha256(payload(size, 4)).digest()
        stats = eng.fastpath.stats()
        data_segments = stats["fast_segments"] + eng.counters.slow_frames
        share = stats["fast_segments"] / max(data_segments, 1)
        print(
            f"fast path: {stats['fast_segments']} segments, slow path: "
            f"{eng.counters.slow_frames} frames, share {share:.3f}"
        )
        assert share > 0.8
    finally:
        eng.close()


def test_idle_engine_uses_little_cpu(engine: tuple[Engine, Lab]) -> None:
    eng, _ = engine
    try:
        time.sleep(0.5)  # let the back-off reach its ceiling
        before, start = eng.cpu_seconds(), time.monotonic()
        time.sleep(3.0)
        used = (eng.cpu_seconds() - before) / (time.monotonic() - start)
        print(f"idle engine thread: {used * 100:.2f} % of a core")
        assert used < 0.10
        assert eng.snapshot()["c_sleeps"] > 0
    finally:
        eng.close()


def test_the_api_keeps_answering_while_the_engine_streams(
    engine: tuple[Engine, Lab], tmp_path: Path
) -> None:
    """The GIL is released while C polls: the control plane (FastAPI under uvicorn, in its
    own thread, as `wsgw serve` runs it) answers /healthz during a full-rate stream."""
    eng, lab = engine
    settings = Settings(state_dir=tmp_path, db={"url": f"sqlite:///{tmp_path}/wsgw.db"})  # type: ignore[arg-type]
    app = create_app(settings)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        api_port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=api_port, log_level="warning", lifespan="on")
    )
    api = threading.Thread(target=server.run, daemon=True)
    api.start()
    try:
        deadline = time.monotonic() + 15
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.started
        sink = stream_from_kernel(eng, lab, 100 * MB, 7002)
        latencies = []
        while not sink.done.is_set() and len(latencies) < 300:
            start = time.perf_counter()
            with socket.create_connection(("127.0.0.1", api_port), timeout=5) as conn:
                conn.sendall(
                    b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                )
                reply = b""
                while chunk := conn.recv(4096):
                    reply += chunk
            assert reply.startswith(b"HTTP/1.1 200"), reply[:100]
            latencies.append(time.perf_counter() - start)
        assert sink.done.wait(240)
        assert sink.digest.digest() == hashlib.sha256(payload(100 * MB, 4)).digest()
        assert len(latencies) >= 20
        p99 = statistics.quantiles(latencies, n=100)[98]
        print(
            f"/healthz during stream: n={len(latencies)} p50 "
            f"{statistics.median(latencies) * 1e3:.2f} ms p99 {p99 * 1e3:.2f} ms"
        )
        assert p99 < 0.100
    finally:
        server.should_exit = True
        api.join(10)
        eng.close()


def _ping_rtts_ms(lab: Lab, count: int) -> list[float]:
    """Kernel ping from the lab namespace to the engine's address: one RTT (ms) per echo."""
    deadline = str(int(count * 0.3) + 5)  # -w: every answer waited for (-W: two RTTs once one came)
    out = lab.exec(["ping", "-n", "-c", str(count), "-i", "0.3", "-w", deadline, lab.gw_ip]).stdout
    return [
        float(line.split("time=")[1].split()[0]) for line in out.splitlines() if "time=" in line
    ]


def test_a_frame_ends_the_back_off_sleep(eal, lab: Lab) -> None:  # type: ignore[no-untyped-def]
    """Adaptive polling naps up to sleep_max when idle; a frame that lands meanwhile must
    end the nap (the af_packet socket is readable), not wait for it. With naps of 200 ms
    the difference is two orders of magnitude; the RX fd off is the control."""
    from dataplane.engine import EngineConfig
    from dataplane.fastpath import FastPathConfig

    port = eal.open_port(lab.vdev)
    assert port.rx_wait_fd is not None, "the af_packet PMD's socket was not found"
    config = EngineConfig(budget=1.0, fastpath=FastPathConfig(sleep_max_ns=200_000_000))
    eng = Engine.on_port(port, lab.gw_ip, lab.netmask, config=config)
    try:
        eng.start()
        _ping_rtts_ms(lab, 1)  # ARP resolved both ways
        time.sleep(1.0)  # the back-off reaches its ceiling
        woken = _ping_rtts_ms(lab, 4)
        wakes = eng.fastpath.stats()["rx_wakes"]
        eng.call(lambda: eng.fastpath.set_rx_fd(None)).result(5)
        time.sleep(1.0)
        napping = _ping_rtts_ms(lab, 4)
        print(f"ping RTT ms, frames end the nap: {woken}; they wait for it: {napping}")
        assert len(woken) == 4 and len(napping) == 4
        assert wakes >= 4
        assert max(woken) < 50.0  # the nap is 200 ms; a wake-up takes well under 1 ms
        assert statistics.mean(napping) > 20.0  # the control: the mechanism is what helps
    finally:
        eng.close()
        port.close()


def test_with_an_rx_fd_the_back_off_naps_at_its_ceiling_at_once(eal, lab: Lab) -> None:  # type: ignore[no-untyped-def]
    """After a frame, an adaptive engine whose port has an RX fd naps at sleep_max at
    once: a frame would end a shorter nap anyway, so stepping up from 2 us (2, 4, 8 ...)
    is only wake-ups (issue #16: ~7 a burst at 10k msg/s, each a turn in the run queue).
    Counted in a quiet window after a ping; the stepped back-off is the control."""
    from dataplane.engine import EngineConfig
    from dataplane.fastpath import FastPathConfig

    ceiling = 200_000_000  # 200 ms: the stepped back-off needs 17 naps to reach it
    port = eal.open_port(lab.vdev)
    assert port.rx_wait_fd is not None, "the af_packet PMD's socket was not found"
    config = EngineConfig(budget=1.0, fastpath=FastPathConfig(sleep_max_ns=ceiling))
    eng = Engine.on_port(port, lab.gw_ip, lab.netmask, config=config)
    assert eng.fastpath.config.sleep_min_ns == ceiling  # what the C side does, said

    def naps_after_a_ping() -> int:
        before = eng.fastpath.stats()["sleeps"]
        assert len(_ping_rtts_ms(lab, 1)) == 1
        time.sleep(0.6)
        return int(eng.fastpath.stats()["sleeps"] - before)

    try:
        eng.start()
        _ping_rtts_ms(lab, 1)  # ARP resolved both ways
        time.sleep(0.3)
        at_ceiling = naps_after_a_ping()
        stepped_config = config.fastpath
        eng.call(
            lambda: eng.fastpath.set_sleep(
                stepped_config.idle_polls_before_sleep, stepped_config.sleep_min_ns, ceiling
            )
        ).result(5)
        time.sleep(0.3)
        stepped = naps_after_a_ping()
        print(f"naps in 0.6 s after a ping: at the ceiling {at_ceiling}, stepped {stepped}")
        assert at_ceiling <= 8  # 0.6 s / 200 ms, and a nap per frame that ends one
        assert stepped >= 12  # the control: 2 us doubling to 200 ms
    finally:
        eng.close()
        port.close()


def test_busy_polling_engine_never_naps_on_its_rx_fd(eal, lab: Lab) -> None:  # type: ignore[no-untyped-def]
    """poll_mode busy keeps its ceiling of 0 (never a nap) with an RX fd: starting the
    back-off at the ceiling must not turn busy polling into napping."""
    from dataplane.engine import EngineConfig
    from dataplane.fastpath import FastPathConfig

    port = eal.open_port(lab.vdev)
    config = EngineConfig(budget=0.05, fastpath=FastPathConfig(poll_mode="busy"))
    eng = Engine.on_port(port, lab.gw_ip, lab.netmask, config=config)
    try:
        eng.start()
        _ping_rtts_ms(lab, 2)
        time.sleep(0.2)
        stats = eng.fastpath.stats()
        assert stats["sleeps"] == 0 and stats["empty_polls"] > 0
    finally:
        eng.close()
        port.close()


@pytest.mark.parametrize("own_slice", [None, 500_000], ids=["kernel's", "its own"])
def test_a_loop_thread_gets_its_own_slice_back(loop_engine, own_slice: int | None) -> None:  # type: ignore[no-untyped-def]
    """An engine run on the caller's event loop (this thread) gives the thread the short slice
    while it runs and gives back the slice it had when the loop closes, the kernel's or one
    the application asked for: a test's or an application's main thread is left as found."""
    from dataplane.sched import set_thread_slice, thread_slice_ns

    eng, _ = loop_engine
    me = threading.get_native_id()
    if thread_slice_ns(me) is None:
        pytest.skip("the kernel reports no se.slice (before 6.6)")
    try:
        if own_slice is not None:
            set_thread_slice(own_slice)
        before = thread_slice_ns(me)
        assert before != eng.config.slice_ns
        during: list[int | None] = []

        async def probe() -> None:
            during.append(thread_slice_ns(me))

        run_in_loop(eng, probe)
        assert during == [eng.config.slice_ns]
        assert thread_slice_ns(me) == before
    finally:
        set_thread_slice(0)  # this thread as the test found it


def test_the_engine_thread_runs_with_a_short_slice(engine: tuple[Engine, Lab]) -> None:
    """The engine thread asks for EngineConfig.slice_ns (EEVDF): its wake-up on a frame
    preempts instead of queueing; the other threads keep the kernel's slice."""
    from dataplane.sched import thread_slice_ns

    eng, _ = engine
    try:
        assert eng.native_id is not None
        slice_ns = thread_slice_ns(eng.native_id)
        if slice_ns is None:
            pytest.skip("the kernel reports no se.slice (before 6.6)")
        assert slice_ns == eng.config.slice_ns == 100_000
        assert thread_slice_ns(threading.get_native_id()) != 100_000
    finally:
        eng.close()


def test_the_receive_window_stays_within_the_rx_queue(eal, lab: Lab) -> None:  # type: ignore[no-untyped-def]
    """A 4 MB receive buffer on a port whose af_packet ring holds 512 frames: the window
    the peer sees is what the ring holds in full segments, so a sender that fills it while
    the engine is off the CPU loses nothing below the stack."""
    from dataplane.stack.tcp import TcpConfig

    port = eal.open_port(lab.vdev + ",framecnt=512")
    eng = Engine.on_port(
        port, lab.gw_ip, lab.netmask, tcp_config=TcpConfig(recv_buffer=4 << 20, time_wait=0.5)
    )
    server = lab.popen(
        [sys.executable, PEER_SERVER, lab.peer_ip, "7011", "wait-close"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert port.rx_queue_frames == 512
        assert eng.interface.tcp_config.recv_buffer == 512 * 1460
        eng.start()
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        sock = eng.call(
            lambda: eng.interface.connect(ip_to_int(lab.peer_ip), 7011, time.monotonic())
        ).result(5)
        deadline = time.monotonic() + 5
        seen = ""
        while "snd_wnd:" not in seen and time.monotonic() < deadline:
            seen = lab.exec(
                ["ss", "-tinH", "state", "established", "( sport = :7011 )"], check=False
            ).stdout
            time.sleep(0.05)
        peer_view = int(seen.split("snd_wnd:")[1].split()[0])
        assert 64 << 10 < peer_view <= 512 * 1460
        eng.call(sock.close).result(5)
    finally:
        eng.close()
        port.close()
        server.kill()
        server.wait()


def test_a_jumbo_lab_streams_in_jumbo_segments_on_the_fast_path(eal) -> None:  # type: ignore[no-untyped-def]
    """MTU 9000 on the veth (`Lab(mtu=...)`), the port opened with it: the stack announces
    an MSS of 8960 (RFC 9293 section 3.7.1), the peer sends segments that large, the PMD's
    frames and the shim's mbufs hold them whole, and C takes them on the fast path."""
    from dataplane.stack.tcp import TcpConfig

    with fresh_lab(f"j{os.getpid() % 100000}", mtu=9000) as lab:
        port = eal.open_port(lab.vdev, mtu=lab.mtu)
        eng = Engine.on_port(
            port,
            lab.gw_ip,
            lab.netmask,
            mtu=lab.mtu,
            tcp_config=TcpConfig(recv_buffer=4 << 20, time_wait=0.5, mss=lab.mtu - 40),
        )
        try:
            assert port.mtu == 9000
            eng.start()
            size = 40 * MB
            sink = stream_from_kernel(eng, lab, size, 7021)
            assert sink.done.wait(120), f"received {sink.count} of {size}"
            assert sink.sock.error is None and sink.count == size
            assert sink.digest.digest() == hashlib.sha256(payload(size, 4)).digest()
            stats = eng.fastpath.stats()
            assert stats["fast_bytes"] > 0.8 * size
            # jumbo segments, not 1448-byte ones: fewer than a sixth of Ethernet's count
            assert stats["fast_bytes"] / stats["fast_segments"] > 4 * 1460
        finally:
            eng.close()
            port.close()

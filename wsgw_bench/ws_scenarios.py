"""`connect`, `rtt`, `ingest`: WebSocket clients against one C peer (wsgw_bench/peer/wspeer.c).

The peer runs in the lab namespace and answers on both of its veth ends. Contenders:
- picows (the reference: the fastest kernel-side Python client), aiohttp, websockets,
  each on uvloop, each in a fresh process (wsgw_bench/ws_runner.py) in the lab's
  kernel-client namespace, over a veth pair with the same offloads off;
- wsgw's own clients through the `wsgw_contenders()` hook: the kernel transport
  (`dataplane.transports.kernel`, run like the libraries) and the DPDK transport
  (`dataplane.transports.dpdk`, run in this process on the lab's DPDK port) twice: with
  the engine on its own thread and the client on uvloop ("wsgw DPDK"), and with the
  client on the engine's own event loop (`dataplane/loop.py`, "wsgw DPDK (engine loop)":
  one thread, no hand-off; the engine thread is stopped for that contender's runs and
  started again after, the same engine and port for both); one whose code is missing is
  skipped with a note;
- for `connect` only: a plain kernel TCP connect, and the TCP connect of wsgw's own stack
  on the DPDK engine (on its thread, and on the engine loop), so the upgrade's share of
  the open time shows;
- for `connect`, every WebSocket contender also opens wss:// (TCP connect + TLS handshake +
  upgrade) against a second peer, wsgw_bench/tls_peer.py (the `websockets` library's
  TLS server: the C peer has no TLS), right after its ws:// opens in the same run; the
  certificate comes from a CA minted for the run, and every client verifies it;
- for `rtt` only: the floor, wsgw_bench/peer/wsclient.c, a C client over kernel TCP that
  busy-polls its socket (no wake-up, next to no work per message): what a round trip costs
  on this link with this peer; no Python client can go below it.
Contenders alternate within each repetition; every echo and every flood sequence number is
checked, and a contender whose data does not check out gets a note instead of a sample.

CPU placement (with two CPUs or more): the peers run on the last CPU this process may use,
and every single-threaded contender (each library's runner process, the floor client, the
engine loop) on the first, one at a time; the threaded DPDK contender (an engine thread and
a client loop) is left to the scheduler. Left to it, a contender sometimes shared the peer's
CPU: the same client's p50 then jumped between two values (38 and 45 us) from run to run.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
from collections.abc import Coroutine, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gateway.lab import Lab
from wsgw_bench.core import BenchOptions, Measurement, alternate, scenario, unique_lab_name
from wsgw_bench.peers import REPO, PeerError, WsPeer, build, python_module
from wsgw_bench.tls_peer import TlsPeer
from wsgw_bench.ws_runner import (
    BATCH_SUFFIX,
    CALLBACKS_MARK,
    Adapter,
    ContenderUnavailable,
    WsgwContender,
    describe,
    run_loop,
    run_test,
    wsgw_adapter,
    wsgw_batch_contenders,
    wsgw_callback_contenders,
    wsgw_contenders,
)

__all__ = ["connect", "ingest", "rtt", "wsgw_contenders"]

T = TypeVar("T")
DPDK_TRANSPORTS = ("dpdk", "dpdk-loop", "stack", "stack-loop", "stack-c-echo")

REFERENCE = "picows"
LIBRARIES = ("picows", "aiohttp", "websockets")
KERNEL_TCP = "kernel socket"
FLOOR_CLIENT = "C client, busy poll (floor)"
STACK_FLOOR = "wsgw stack, C loop (floor)"
STACK_TCP = "wsgw stack (DPDK)"
STACK_TCP_LOOP = "wsgw stack (DPDK, engine loop)"
ENGINE_LOOP = "engine loop (asyncio)"
RTT_SIZES = (64, 1024)
INGEST_SIZES = (100, 1024)
PERCENTILES = (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"))


def size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size % 1024 == 0 else f"{size} B"


def params(test: str, options: BenchOptions) -> dict[str, Any]:
    """How much each run does: `--quick` keeps a scenario to a few seconds."""
    quick = options.quick
    if test in ("connect", "tcp"):
        # wss_*: the wss:// opens of `connect` (a TLS handshake is some 1.5 ms, so these
        # take about 0.3 s per contender and repetition)
        return {
            "count": 20 if quick else 200,
            "warmup": 3 if quick else 10,
            "wss_count": 20 if quick else 200,
            "wss_warmup": 3 if quick else 10,
        }
    if test == "rtt":
        return {
            "count": 300 if quick else 10_000,
            "warmup": 50 if quick else 500,
            "sizes": list(RTT_SIZES),
        }
    if test == "ingest":
        # At least `bytes` per size, so what the buffers on the way (socket, af_packet ring,
        # TCP window: a few MB) hold before the first message is read stays a few per cent.
        return {
            "count": 20_000 if quick else 200_000,
            "bytes": (4 if quick else 200) << 20,
            "sizes": list(INGEST_SIZES),
        }
    raise ValueError(test)


@dataclass
class Contender:
    name: str
    runner: str | None = None  # ws_runner contender, run in the kernel-client namespace
    # kernel | dpdk | dpdk-loop (on the engine's own loop) | stack | stack-loop (the DPDK
    # engine's TCP, no WebSocket, on its thread or on its loop) | stack-c-echo (the
    # engine's C alone per round trip) | native (wsgw_bench/peer/wsclient)
    transport: str = "kernel"
    skip: str = ""  # why it cannot run (it then keeps a note and no sample)
    loop: str = "uvloop"  # what the next run asks for: uvloop | asyncio
    loop_used: str = ""  # what the last run had, with its version
    version: str = ""
    notes: list[str] = field(default_factory=list)
    latency_note: str = ""  # DPDK: the last run's receive split (engine loop: RX -> protocol)


# ---- where the contenders run ------------------------------------------------------------
def cpu_plan() -> tuple[int, int] | None:
    """(the contenders' CPU, the peer's CPU): the first and the last this process may use;
    None on one CPU (nothing to separate)."""
    cpus = sorted(os.sched_getaffinity(0))
    return (cpus[0], cpus[-1]) if len(cpus) >= 2 else None


@contextmanager
def on_client_cpu() -> Iterator[None]:
    """This thread, and the processes and threads it starts meanwhile, on the contenders'
    CPU (see the module docstring); its own CPUs again after."""
    plan = cpu_plan()
    if plan is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {plan[0]})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def run_in_client_ns(
    lab: Lab, runner: str, test: str, url: str, run_params: dict[str, Any], loop: str
) -> dict[str, Any]:
    """One ws_runner process in the lab's kernel-client namespace; its JSON answer."""
    cmd, env = python_module(
        "wsgw_bench.ws_runner",
        "--contender",
        runner,
        "--test",
        test,
        "--url",
        url,
        "--params",
        json.dumps(run_params),
        "--loop",
        loop,
    )
    proc = lab.client_popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO), env=env
    )
    timeout = 600
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"ok": False, "error": f"no answer within {timeout} s"}
    for line in reversed(out.splitlines()):
        try:
            answer = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(answer, dict):
            return answer
    tail = " | ".join(err.strip().splitlines()[-3:])
    return {"ok": False, "error": f"runner exited {proc.returncode}: {tail}"}


@dataclass
class TlsSide:
    """The wss:// peer of `connect`: asked for with `want`, then `peer` (started) or
    `error` (why not)."""

    want: bool = False
    peer: TlsPeer | None = None
    about: str = ""  # what the peer runs, e.g. "websockets 16.0 on uvloop 0.23.0"
    error: str = ""


def receive_split_note(before: dict[str, int], after: dict[str, int]) -> str:
    """How the engine's receive went between two `stats()`: what each poll handed to
    Python (the per-poll Python cost is paid this often), how full the RX bursts were, how
    many bytes each ACK of ours acknowledged, what left the fast path. Empty when less
    than 1 MB came in (a round-trip test, not a bulk receive)."""
    moved = {key: after.get(key, 0) - before.get(key, 0) for key in after}
    data = moved.get("fast_bytes", 0)
    if data < 1 << 20:
        return ""
    polls = max(1, moved.get("polls", 0))
    bursts = max(1, moved.get("rx_bursts", 0))
    acks = moved.get("acks_sent", 0)
    per_ack = f"an ACK per {data / acks / 1024:.0f} kB" if acks else "no ACK sent by C"
    return (
        f"; receive split: {data / polls / 1024:.0f} kB per poll in "
        f"{moved.get('rx_bursts', 0) / polls:.1f} RX bursts of "
        f"{moved.get('rx_frames', 0) / bursts:.1f} frames, {per_ack}, "
        f"{moved.get('empty_polls', 0) / polls:.1f} empty bursts and "
        f"{moved.get('sleeps', 0) / polls:.2f} sleeps per poll, "
        f"{moved.get('slow_frames', 0)} frames on the slow path"
    )


class DpdkSide:
    """This process's DPDK port on the lab, the engine on it, and wsgw's DPDK client."""

    def __init__(self, lab: Lab) -> None:
        from dataplane.dpdk import Eal, EalConfig
        from dataplane.engine import Engine, EngineConfig
        from dataplane.fastpath import FastPathConfig
        from dataplane.stack.tcp import TcpConfig

        self.lab = lab
        self._stats_before: dict[str, int] = {}
        eal = Eal.init(EalConfig())
        self.port = eal.open_port(lab.vdev, mtu=lab.mtu)
        try:
            self.engine = Engine.on_port(
                self.port,
                lab.gw_ip,
                lab.netmask,
                mtu=lab.mtu,
                # RFC 9293 section 3.7.1: the MSS we announce is the link's MTU - 40
                tcp_config=TcpConfig(recv_buffer=4 << 20, time_wait=0.2, mss=lab.mtu - 40),
                config=EngineConfig(fastpath=FastPathConfig()),
            )
            self.engine.start()
        except BaseException:
            self.port.close()
            raise

    def close(self) -> None:
        try:
            self.engine.close()
        finally:
            self.port.close()

    @contextmanager
    def engine_paused(self) -> Iterator[None]:
        """The engine thread stopped meanwhile (and started again after): a kernel-side
        contender then has the machine to itself, as the engine-loop one has it."""
        self.engine.stop()
        try:
            with on_client_cpu():
                yield
        finally:
            self.engine.start()

    def run_in_loop(self, main: Coroutine[Any, Any, T]) -> T:
        """Run main on the engine's own event loop in this thread: the engine thread is
        stopped meanwhile and started again after (same engine, port, ARP cache)."""
        self.engine.stop()
        self.engine.rx_to_protocol_ns.clear()
        self.engine.fastpath.rx_to_return_ns.clear()
        self._stats_before = self.engine.fastpath.stats()
        try:
            with on_client_cpu(), asyncio.Runner(loop_factory=self.engine.loop_factory) as runner:
                return runner.run(main)
        finally:
            self.engine.start()

    def rx_latency_note(self) -> str:
        """RX burst -> data_received (and its in-C part) of the last engine-loop run."""
        from wsgw_bench.ws_runner import summary

        protocol = summary(list(self.engine.rx_to_protocol_ns))
        in_c = summary(list(self.engine.fastpath.rx_to_return_ns))
        if not protocol["n"]:
            return ""
        now, before = self.engine.fastpath.stats(), self._stats_before
        bursts = now["rx_to_ring_bursts"] - before["rx_to_ring_bursts"]
        ring = ""
        if bursts:
            mean = (now["rx_to_ring_ns_sum"] - before["rx_to_ring_ns_sum"]) / bursts
            ring = f"; to the flow's ring: mean {mean / 1e3:.2f} us, max since start "
            ring += f"{now['rx_to_ring_ns_max'] / 1e3:.1f} us"
        return (
            f"RX burst -> data_received p50 {protocol['p50'] / 1e3:.1f} us, p99 "
            f"{protocol['p99'] / 1e3:.1f} us (in C, RX burst -> poll returns: p50 "
            f"{in_c['p50'] / 1e3:.1f} us, p99 {in_c['p99'] / 1e3:.1f} us{ring}), "
            f"last repetition{receive_split_note(before, now)}"
        )

    def loop_tcp_connects(self, port: int, count: int, warmup: int) -> dict[str, Any]:
        """TCP connect times of the stack on the engine loop (SYN out to ESTABLISHED, as
        the engine's batch sees it), each connection closed before the next."""
        from dataplane.stack.tcp import TcpState
        from dataplane.wire.addr import ip_to_int
        from wsgw_bench.ws_runner import summary

        engine = self.engine
        remote = ip_to_int(self.lab.peer_ip)

        async def main() -> dict[str, Any]:
            loop = asyncio.get_running_loop()
            samples: list[int] = []
            for i in range(warmup + count):
                done: asyncio.Future[int] = loop.create_future()
                t0 = time.perf_counter_ns()
                sock = engine.interface.connect(remote, port, time.monotonic())

                def watch(now: float, sock: Any = sock, done: Any = done, t0: int = t0) -> None:
                    if done.done():
                        return
                    if sock.state is TcpState.ESTABLISHED:
                        done.set_result(time.perf_counter_ns() - t0)
                    elif sock.error is not None or sock.state is TcpState.CLOSED:
                        done.set_exception(
                            RuntimeError(f"the stack's TCP connect failed: {sock.error}")
                        )

                engine.services.append(watch)
                engine.flush()  # the SYN leaves now
                try:
                    elapsed = await asyncio.wait_for(done, 5)
                finally:
                    engine.services.remove(watch)
                    sock.close()
                    engine.flush()  # the FIN leaves now, not with the next SYN
                if i >= warmup:
                    samples.append(elapsed)
            return {"open_ns": summary(samples)}

        return self.run_in_loop(main())

    def loop_c_echo(self, url: str, sizes: list[int], count: int, warmup: int) -> dict[str, Any]:
        """The stack's own floor for `rtt`: a WebSocket opened on the engine loop, then C
        alone in the loop (`FastPath.bench_echo`): a masked frame out through the flow's
        template, the echo into its ring, no Python per round trip. One connection per
        size, aborted after (C moved its state)."""
        from wsproto.frame_protocol import FrameProtocol

        from dataplane.transports.dpdk import connect_dpdk
        from wsgw_bench.ws_runner import rtt_payload, summary

        engine = self.engine

        async def main() -> dict[str, Any]:
            results: dict[str, Any] = {}
            for size in sizes:
                ws = await connect_dpdk(url, engine=engine, deflate=False)
                payload = rtt_payload(0, size)
                await ws.send(payload)  # one echo through Python: the flow is quiet after
                if (await ws.recv()).data != payload:
                    raise RuntimeError("the peer's echo differs from what was sent")
                await asyncio.sleep(0)
                engine.flush(settle=True)
                transport: Any = getattr(ws, "_transport", None)
                sock = getattr(transport, "_sock", None)
                if sock is None:
                    raise RuntimeError("no DPDK socket under the WebSocket")
                # The frames from wsproto (an oracle nobody here wrote): masked as a client
                # sends them, and as the peer answers.
                frame = bytes(FrameProtocol(client=True, extensions=[]).send_data(payload))
                reply = bytes(FrameProtocol(client=False, extensions=[]).send_data(payload))
                try:
                    rtts, last = engine.fastpath.bench_echo(
                        sock.connection, frame, len(reply), warmup + count, 5.0
                    )
                finally:
                    transport.abort()  # the transport: its socket's state is C's now
                results[str(size)] = {
                    **summary(rtts[warmup:]),
                    "mismatches": 0 if last == reply else 1,
                }
            return results

        return self.run_in_loop(main())

    def tcp_connects(self, port: int, count: int, warmup: int) -> dict[str, Any]:
        """TCP connect times of the stack (SYN out to ESTABLISHED), on the engine thread."""
        from dataplane.stack.tcp import TcpState
        from dataplane.wire.addr import ip_to_int
        from wsgw_bench.ws_runner import summary

        engine = self.engine
        remote = ip_to_int(self.lab.peer_ip)
        probe: dict[str, Any] = {}
        done = threading.Event()

        def begin() -> None:
            probe.clear()
            probe["t0"] = time.perf_counter_ns()
            probe["sock"] = engine.interface.connect(remote, port, time.monotonic())

        def watch(now: float) -> None:
            sock = probe.get("sock")
            if sock is None or done.is_set():
                return
            if sock.state is TcpState.ESTABLISHED:
                probe["elapsed"] = time.perf_counter_ns() - probe["t0"]
                sock.close()
                done.set()
            elif sock.error is not None or sock.state is TcpState.CLOSED:
                probe["error"] = str(sock.error or "closed before ESTABLISHED")
                done.set()

        engine.call(lambda: engine.services.append(watch)).result(5)
        samples: list[int] = []
        try:
            for i in range(warmup + count):
                done.clear()
                engine.call(begin).result(5)
                if not done.wait(5):
                    raise RuntimeError("the stack's TCP connect took over 5 s")
                if "error" in probe:
                    raise RuntimeError(f"the stack's TCP connect failed: {probe['error']}")
                if i >= warmup:
                    samples.append(int(probe["elapsed"]))
        finally:
            engine.call(lambda: engine.services.remove(watch)).result(5)
        return {"open_ns": summary(samples)}


@contextmanager
def _session(
    options: BenchOptions, contenders: list[Contender], tls: TlsSide | None = None
) -> Iterator[tuple[Lab, WsPeer, DpdkSide | None]]:
    """The lab, the peer in it, and the DPDK side when a contender needs it (else a note);
    the TLS peer too when tls wants it (on the same CPU as the C peer), or tls.error."""
    lab = Lab(unique_lab_name(options, "ws"), kernel_client=True, mtu=options.mtu)
    lab.down()
    lab.up()
    peer: WsPeer | None = None
    dpdk: DpdkSide | None = None
    try:
        peer = WsPeer.start(lab)
        plan = cpu_plan()
        if plan is not None:
            os.sched_setaffinity(peer.proc.pid, {plan[1]})
        if tls is not None and tls.want:
            try:
                tls.peer = TlsPeer.start(lab)
            except Exception as exc:
                tls.error = f"the TLS peer did not start ({describe(exc)})"
            else:
                tls.about = tls.peer.about
                if plan is not None:
                    os.sched_setaffinity(tls.peer.proc.pid, {plan[1]})
        wants_dpdk = [c for c in contenders if c.transport in DPDK_TRANSPORTS and not c.skip]
        if wants_dpdk:
            try:
                dpdk = DpdkSide(lab)
            except Exception as exc:
                for c in wants_dpdk:
                    c.skip = f"skipped: no DPDK port ({type(exc).__name__}: {exc})"
        yield lab, peer, dpdk
    finally:
        try:
            if dpdk is not None:
                dpdk.close()
        finally:
            try:
                if tls is not None and tls.peer is not None:
                    tls.peer.stop()
            finally:
                if peer is not None:
                    peer.stop()
                lab.down()


def _contenders(test: str) -> list[Contender]:
    """Every contender of a test, in table order; missing ones carry their skip note."""
    import importlib.util

    out: list[Contender] = []
    if test == "rtt":
        out.append(Contender(FLOOR_CLIENT, transport="native", loop="none (C, busy poll)"))
        out.append(Contender(STACK_FLOOR, transport="stack-c-echo", loop="none (C, busy poll)"))
    if test == "connect":
        out += [
            Contender(KERNEL_TCP, runner="tcp"),
            Contender(STACK_TCP, transport="stack"),
            Contender(STACK_TCP_LOOP, transport="stack-loop", loop=ENGINE_LOOP),
        ]
    for lib in LIBRARIES:
        missing = importlib.util.find_spec(lib) is None
        out.append(
            Contender(
                lib,
                runner=lib,
                skip=f"skipped: {lib} is not installed (pip install -e ./wsgw_bench)"
                if missing
                else "",
            )
        )
    hooked = wsgw_contenders()
    if test == "ingest":  # the batch receive API: one MessageBatch per run of frames
        hooked += wsgw_batch_contenders()
    if test == "rtt":  # the message handler: callbacks, as picows is driven
        hooked += wsgw_callback_contenders()
    for wsgw in hooked:
        transport = wsgw.transport if wsgw.transport in DPDK_TRANSPORTS else "kernel"
        runner = "wsgw-kernel"
        if wsgw.name.endswith(BATCH_SUFFIX):
            runner = "wsgw-kernel-batch"
        elif wsgw.name.endswith(CALLBACKS_MARK):
            runner = "wsgw-kernel-callbacks"
        out.append(
            Contender(
                wsgw.name,
                runner=runner if transport == "kernel" else None,
                transport=transport,
                skip="" if wsgw.available else wsgw.note,
                loop=ENGINE_LOOP if transport == "dpdk-loop" else "uvloop",
            )
        )
    return out


def _dpdk_adapter(dpdk: DpdkSide, name: str, ca_file: str | None = None) -> Adapter:
    """The DPDK contender name's adapter; with ca_file, for wss:// (see make_adapter)."""
    engine = dpdk.engine
    hooked = (
        wsgw_contenders(engine=engine, ca_file=ca_file)
        + wsgw_batch_contenders(engine=engine, ca_file=ca_file)
        + wsgw_callback_contenders(engine=engine, ca_file=ca_file)
    )
    found: WsgwContender = next(c for c in hooked if c.name == name)
    return wsgw_adapter(found)


def _run_one(
    c: Contender,
    test: str,
    lab: Lab,
    peer: WsPeer,
    dpdk: DpdkSide | None,
    run_params: dict[str, Any],
    tls_peer: TlsPeer | None = None,
) -> dict[str, Any] | None:
    """One repetition of one contender: its results, or None (a note says why). With
    tls_peer, a WebSocket contender's `connect` also times wss:// opens to it."""
    kernel_url = f"ws://{lab.peer_client_ip}:{peer.port}"
    dpdk_url = f"ws://{lab.peer_ip}:{peer.port}"
    wss = tls_peer is not None and test == "connect" and c.runner != "tcp"
    ca_file = str(tls_peer.ca_file) if tls_peer is not None else None

    def with_wss(ip: str) -> dict[str, Any]:
        if not wss or tls_peer is None:
            return run_params
        return {**run_params, "wss_url": f"wss://{ip}:{tls_peer.port}", "ca_file": ca_file}

    if c.transport == "stack-c-echo":
        assert dpdk is not None
        c.version = "wsgw_bench_flow_echo (dataplane/shim/engine.c)"
        c.loop_used = c.loop
        try:
            return dpdk.loop_c_echo(
                dpdk_url, run_params["sizes"], run_params["count"], run_params["warmup"]
            )
        except Exception as exc:
            c.notes.append(f"failed: {describe(exc)}")
            return None
    if c.transport in ("stack", "stack-loop"):
        assert dpdk is not None
        connects = dpdk.tcp_connects if c.transport == "stack" else dpdk.loop_tcp_connects
        try:
            return connects(peer.port, run_params["count"], run_params["warmup"])
        except Exception as exc:
            c.notes.append(f"failed: {describe(exc)}")
            return None
    # Kernel-side contenders run with the engine thread stopped (see DpdkSide.engine_paused),
    # on the contenders' CPU.
    pause = dpdk.engine_paused if dpdk is not None else on_client_cpu
    if c.transport == "native":
        c.loop_used = c.loop
        with pause():
            return _run_floor_client(c, lab, peer, run_params)
    if c.transport in ("dpdk", "dpdk-loop"):
        assert dpdk is not None
        try:
            adapter = _dpdk_adapter(dpdk, c.name)
            c.version = adapter.version()
            wss_adapter = _dpdk_adapter(dpdk, c.name, ca_file) if wss else None
            main = run_test(adapter, test, dpdk_url, with_wss(lab.peer_ip), wss=wss_adapter)
            if c.transport == "dpdk-loop":
                c.loop_used = ENGINE_LOOP
                loop_results = dpdk.run_in_loop(main)
                c.latency_note = dpdk.rx_latency_note()
                return loop_results
            before = dpdk.engine.fastpath.stats()
            dpdk_results, c.loop_used = run_loop(main, c.loop)
            split = receive_split_note(before, dpdk.engine.fastpath.stats())
            if split:  # the threaded engine's receive split too (a bulk run only)
                c.latency_note = "last repetition" + split
            return dpdk_results
        except ContenderUnavailable as exc:
            c.skip = f"skipped: {exc}"
        except Exception as exc:
            c.notes.append(f"failed: {describe(exc)}")
        return None
    assert c.runner is not None
    runner_test = "tcp" if c.runner == "tcp" else test
    kernel_params = with_wss(lab.peer_client_ip)
    with pause():
        answer = run_in_client_ns(lab, c.runner, runner_test, kernel_url, kernel_params, c.loop)
    if not answer.get("ok") and "error" in answer and c.loop == "uvloop":
        # A client that breaks on uvloop still gets measured, on asyncio, with a note.
        with pause():
            retry = run_in_client_ns(
                lab, c.runner, runner_test, kernel_url, kernel_params, "asyncio"
            )
        if retry.get("ok"):
            c.loop = "asyncio"
            c.notes.append(f"fails on uvloop ({answer['error']}); measured on asyncio")
            answer = retry
    if answer.get("ok"):
        c.version = str(answer.get("version", ""))
        c.loop_used = str(answer.get("loop", c.loop))
        results: dict[str, Any] = answer["results"]
        return results
    if "skip" in answer:
        c.skip = f"skipped: {answer['skip']}"
    else:
        c.notes.append(f"failed: {answer.get('error', answer)}")
    return None


def _run_floor_client(
    c: Contender, lab: Lab, peer: WsPeer, run_params: dict[str, Any]
) -> dict[str, Any] | None:
    """wsgw_bench/peer/wsclient in the kernel-client namespace: its JSON results, or None."""
    try:
        binary = build("wsclient")
    except PeerError as exc:
        c.skip = f"skipped: {exc}"
        return None
    c.version = "wsgw_bench/peer/wsclient.c"
    cmd = [
        str(binary),
        lab.peer_client_ip,
        str(peer.port),
        "rtt",
        ",".join(str(size) for size in run_params["sizes"]),
        str(run_params["count"]),
        str(run_params["warmup"]),
    ]
    proc = lab.client_popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        c.notes.append("failed: no answer within 600 s")
        return None
    try:
        answer = json.loads(out.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        c.notes.append(f"failed: exit {proc.returncode}: {err.strip()[-200:]}")
        return None
    if not answer.get("ok"):
        c.notes.append(f"failed: {answer.get('error')}")
        return None
    results: dict[str, Any] = answer["results"]
    return results


def _run_all(
    options: BenchOptions, test: str, contenders: list[Contender], tls: TlsSide | None = None
) -> Iterator[tuple[Contender, dict[str, Any]]]:
    """Every (contender, results) of every repetition, contenders alternating; with the
    TLS peer when tls wants it."""
    run_params = params(test, options)
    with _session(options, contenders, tls) as (lab, peer, dpdk):
        tls_peer = tls.peer if tls is not None else None
        for _, name in alternate(options.repetitions, [c.name for c in contenders]):
            c = next(x for x in contenders if x.name == name)
            if c.skip:
                continue
            results = _run_one(c, test, lab, peer, dpdk, run_params, tls_peer)
            if results is not None:
                yield c, results


def _per_contender(
    test: str, metric: str, unit: str, higher_is_better: bool, names: Iterable[str]
) -> dict[str, Measurement]:
    """One measurement of `metric` per contender, the reference contender's marked."""
    return {
        n: Measurement(test, metric, n, unit, higher_is_better, reference=n == REFERENCE)
        for n in names
    }


def _finish(
    contenders: list[Contender], groups: list[dict[str, Measurement]], extra: dict[str, str]
) -> list[Measurement]:
    """Notes (skips, failures, versions and loops) go on each contender's first metric."""
    for c in contenders:
        first = groups[0][c.name]
        parts = [c.skip] if c.skip else []
        parts += list(dict.fromkeys(c.notes))
        if not c.skip and c.version:
            parts.append(f"{c.version} on {c.loop_used}" if c.loop_used else c.version)
        if c.name in extra and not c.skip:
            parts.append(extra[c.name])
        if c.latency_note and not c.skip:
            parts.append(c.latency_note)
        first.note = "; ".join(p for p in parts if p)
    return [m for group in groups for m in group.values()]


# ---- the scenarios -----------------------------------------------------------------------
@scenario(
    "connect",
    "TCP connect and WebSocket open time, ws:// (connect+upgrade) and wss:// (connect+TLS+"
    "upgrade): picows, aiohttp, websockets, wsgw",
    needs_root=True,
)
def connect(options: BenchOptions) -> list[Measurement]:
    contenders = _contenders("connect")
    tcp_names = (KERNEL_TCP, STACK_TCP, STACK_TCP_LOOP)
    tcp = {
        c.name: Measurement("connect", "TCP connect p50", c.name, "us", False)
        for c in contenders
        if c.name in tcp_names
    }
    tcp[KERNEL_TCP].reference = True
    ws_names = [c.name for c in contenders if c.name not in tcp_names]

    def per_contender(metric: str) -> dict[str, Measurement]:
        return _per_contender("connect", metric, "us", False, ws_names)

    opens, opens99 = per_contender("WS open p50"), per_contender("WS open p99")
    wss50, wss99 = per_contender("WSS open p50"), per_contender("WSS open p99")
    tls = TlsSide(want=True)
    for c, results in _run_all(options, "connect", contenders, tls):
        stats = results["open_ns"]
        if c.name in tcp:
            tcp[c.name].samples.append(stats["p50"] / 1e3)
            continue
        opens[c.name].samples.append(stats["p50"] / 1e3)
        opens99[c.name].samples.append(stats["p99"] / 1e3)
        if "wss_open_ns" in results:
            wss50[c.name].samples.append(results["wss_open_ns"]["p50"] / 1e3)
            wss99[c.name].samples.append(results["wss_open_ns"]["p99"] / 1e3)
        elif "wss_error" in results:
            c.notes.append(f"wss:// failed: {results['wss_error']}")
        else:
            c.notes.append("wss:// not measured")
    if tls.error:
        for c in contenders:
            if c.name in wss50 and not c.skip:
                c.notes.append(f"wss:// not measured: {tls.error}")
    p = params("connect", options)
    stack_note = {
        STACK_TCP: "SYN sent to ESTABLISHED, timed on the engine thread",
        STACK_TCP_LOOP: "SYN sent to ESTABLISHED, timed in the engine loop's batch",
    }
    out = _finish([c for c in contenders if c.name in tcp], [tcp], stack_note)
    out += _finish([c for c in contenders if c.name not in tcp], [opens, opens99, wss50, wss99], {})
    wss_note = (
        f"wss://: {p['wss_count']} connections per repetition after {p['wss_warmup']} of "
        f"warm-up, to a second peer in the peer namespace ({tls.about}, TLS, certificate "
        "from a CA minted for the run, verified by every client against it, with one "
        "client SSL context each made before the timing)"
        if not tls.error
        else f"wss:// not measured: {tls.error}"
    )
    out[0].note = "; ".join(
        x
        for x in (
            out[0].note,
            f"ws://: {p['count']} connections per repetition after {p['warmup']} of warm-up, "
            "p50/p99 of each",
            wss_note,
        )
        if x
    )
    return out


@scenario(
    "rtt",
    "WebSocket echo round trip p50/p99/p99.9, 64 B and 1 KiB: picows, aiohttp, websockets, wsgw",
    needs_root=True,
)
def rtt(options: BenchOptions) -> list[Measurement]:
    contenders = _contenders("rtt")
    names = [c.name for c in contenders]
    groups: list[dict[str, Measurement]] = []
    index: dict[tuple[int, str], dict[str, Measurement]] = {}
    for size in RTT_SIZES:
        for key, label in PERCENTILES:
            group = _per_contender("rtt", f"RTT {label} {size_label(size)}", "us", False, names)
            groups.append(group)
            index[(size, key)] = group
    for c, results in _run_all(options, "rtt", contenders):
        for size in RTT_SIZES:
            stats = results[str(size)]
            if stats["mismatches"] or not stats["n"]:
                c.notes.append(
                    f"{size_label(size)}: {stats['mismatches']} echoes differed from what "
                    "was sent (repetition dropped)"
                )
                continue
            for key, _ in PERCENTILES:
                index[(size, key)][c.name].samples.append(stats[key] / 1e3)
    p = params("rtt", options)
    out = _finish(contenders, groups, {})
    out[0].note = "; ".join(
        x for x in (out[0].note, f"{p['count']} round trips after {p['warmup']} of warm-up") if x
    )
    return out


@scenario(
    "ingest",
    "WebSocket flood of 100 B and 1 KiB messages: msg/s and CPU per message, sequence checked",
    needs_root=True,
)
def ingest(options: BenchOptions) -> list[Measurement]:
    contenders = _contenders("ingest")
    names = [c.name for c in contenders]
    groups: list[dict[str, Measurement]] = []
    rate: dict[int, dict[str, Measurement]] = {}
    cpu: dict[int, dict[str, Measurement]] = {}
    # A jumbo run's rows are its own (named with the MTU), never mixed with Ethernet's.
    link = "" if options.mtu == 1500 else f", MTU {options.mtu}"
    for size in INGEST_SIZES:
        label = size_label(size) + link
        rate[size] = _per_contender("ingest", f"msg/s {label}", "msg/s", True, names)
        cpu[size] = _per_contender("ingest", f"CPU/msg {label}", "ns", False, names)
        groups += [rate[size], cpu[size]]
    checked: dict[str, int] = {}
    for c, results in _run_all(options, "ingest", contenders):
        for size in INGEST_SIZES:
            r = results[str(size)]
            if not r["ok"]:
                c.notes.append(
                    f"{size_label(size)}: DATA ERROR received {r['received']}/{r['expected']}, "
                    f"gaps {r['gaps']}, duplicates {r['duplicates']}, wrong length "
                    f"{r['bad_length']} (repetition dropped)"
                )
                continue
            rate[size][c.name].samples.append(r["msg_per_s"])
            cpu[size][c.name].samples.append(r["cpu_per_msg_ns"])
            checked[c.name] = checked.get(c.name, 0) + r["received"]
    extra = {
        name: f"{count} messages checked: sequence 0..N-1 in order, no gap, no duplicate"
        for name, count in checked.items()
    }
    for c in contenders:
        if c.transport == "dpdk":
            extra[c.name] = (
                extra.get(c.name, "") + "; CPU includes the engine thread (it polls)"
            ).lstrip("; ")
        elif c.transport == "dpdk-loop":
            extra[c.name] = (
                extra.get(c.name, "") + "; one thread: engine polls and client share it"
            ).lstrip("; ")
    out = _finish(contenders, groups, extra)
    p = params("ingest", options)
    out[0].note = "; ".join(
        x
        for x in (
            out[0].note,
            "binary messages per size and repetition: "
            + ", ".join(
                f"{size_label(size)} {max(p['count'], p['bytes'] // (size + 2))}"
                for size in INGEST_SIZES
            )
            + "; msg/s from the first to the last message; CPU is the client "
            "process's user+system time between them",
        )
        if x
    )
    return out

"""The dataplane engine: one thread per lcore, C polls, Python handles each batch.

    loop:  C poll (GIL released: RX bursts, fast path, ACKs, adaptive back-off)
           -> absorb fast-path bytes into their connections
           -> slow-path frames through the Python stack (ARP, ICMP, TCP)
           -> commands from other threads, then the services (WebSocket sessions, ...)
           -> the stack's output to the wire, connections re-exported to the fast path

Nothing else touches the stack: other threads send commands (`call`) and read the
counters the engine publishes after each batch (`snapshot`), a new dict each time, so a
reader never sees one half-written.

Two ways to run it: its own thread (`start`/`stop`), or inside an asyncio event loop whose
selector is the engine (`asyncio.Runner(loop_factory=engine.loop_factory)`, see
`dataplane/loop.py`): each turn of that loop is a batch (`turn`), and the application on
the loop writes to the stack's sockets directly (`mark_dirty`/`flush`). `call` works from
other threads in both.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from dataplane.dpdk import DpdkPort
from dataplane.errors import DataplaneError
from dataplane.fastpath import FastPath, FastPathConfig
from dataplane.links.base import Link, link_poll_at
from dataplane.samples import LatencySamples
from dataplane.sched import SLICE_LEASES
from dataplane.stack.iface import Interface
from dataplane.stack.tcp import TcpConfig
from dataplane.wire.addr import ip_to_int
from dataplane.wire.ethernet import TAGGED_HEADER_LEN

log = logging.getLogger("wsgw.engine")
T = TypeVar("T")
Service = Callable[[float], None]
ISOLATED_CPUS = Path("/sys/devices/system/cpu/isolated")
# Loop mode: the snapshot (a dict and a C call, several microseconds) at most every 10 ms,
# and in a turn that received frames only when it is 100 ms old: it would otherwise sit
# between a received message and the application's answer (a few % of round trips).
PUBLISH_EVERY_NS = 10_000_000
PUBLISH_BUSY_NS = 100_000_000
#: Loop mode: how many polls' worth of ACKs C took may wait for Python's ACK processing
#: (`FastPath.settle_acks`) while every turn brings data; see `Engine.flush`.
SETTLE_EVERY = 8


class EngineError(DataplaneError):
    """The engine could not start (CPU pinning, scheduling policy) or was misused."""


@dataclass(frozen=True)
class EngineConfig:
    cpu: int | None = None  # pin the engine thread here (os.sched_setaffinity)
    sched_fifo_priority: int | None = None  # SCHED_FIFO with this priority, or the default policy
    budget: float = 0.002  # longest C poll before Python gets control back (seconds)
    fastpath: FastPathConfig = field(default_factory=FastPathConfig)
    #: "c": sessions on this engine give their connections a C feed (dataplane/feed.py):
    #: data frames of subscribed topics go from the flow's bytes to the ring inside the
    #: poll. "python": every frame goes through the session's read loop.
    feed_path: Literal["python", "c"] = "python"
    #: The engine thread's scheduler slice (ns; EEVDF, Linux 6.12+, `dataplane.sched`) under
    #: the default policy: a short one gives its wake-up an early deadline, so a frame's
    #: wake-up preempts the task on the CPU instead of queueing behind it (issue #16). None:
    #: the kernel's (1.4 ms on the lab machine).
    slice_ns: int | None = 100_000


@dataclass
class EngineCounters:
    loops: int = 0
    slow_frames: int = 0
    tx_frames: int = 0
    tx_backlog_dropped: int = 0
    commands: int = 0
    service_errors: int = 0


def engine_config_from(settings: Any) -> EngineConfig:
    """EngineConfig from `gateway.settings.EngineSettings` (duck-typed: the dataplane does
    not import the composition root). cpu "isolated" becomes the first isolated CPU, or no
    pinning when the kernel isolates none."""
    cpu = settings.cpu
    if cpu == "isolated":
        cpu = first_isolated_cpu()
        if cpu is None:
            # Busy polling on a shared CPU competes for it with everything else: on a
            # machine with few cores its latency can be far worse than adaptive polling's.
            log.log(
                logging.WARNING if settings.poll_mode == "busy" else logging.INFO,
                "engine.cpu 'isolated': the kernel isolates no CPU (isolcpus), the engine "
                "thread (poll_mode %s) is not pinned and shares the CPUs with everything else",
                settings.poll_mode,
            )
    return EngineConfig(
        cpu=cpu,
        sched_fifo_priority=settings.sched_fifo_priority,
        budget=settings.budget_us / 1e6,
        feed_path=getattr(settings, "feed_path", "python"),
        slice_ns=getattr(settings, "slice_us", 100) * 1000 or None,
        fastpath=FastPathConfig(
            enabled=settings.fast_path,
            burst=settings.burst,
            ack_policy=settings.ack_policy,
            delayed_ack=settings.delayed_ack_ms / 1e3,
            verify_checksums=settings.verify_checksums,
            poll_mode=settings.poll_mode,
            sleep_max_ns=settings.sleep_max_us * 1000,
        ),
    )


def receive_window_for(port: DpdkPort, config: TcpConfig, mtu: int) -> TcpConfig:
    """config, with a receive buffer no larger than the port's RX queue holds in full-sized
    segments. The queue is the first buffer a segment lands in and is drained only while
    the engine runs: a sender that fills a larger window while the engine is off the CPU
    (a shared machine, a long batch) overflows it, every dropped frame costs a
    retransmission, and the slow path carries the flow until it recovers (`stream` fell
    to a third). The kernel's own buffer is filled in softirq, whatever its reader does."""
    limit = port.rx_queue_bytes(min(config.mss, mtu - 40))
    if limit is None or config.recv_buffer <= limit:
        return config
    log.info(
        "receive buffer %d B lowered to %d B: what the RX queue of %s holds",
        config.recv_buffer,
        limit,
        port.device,
    )
    return replace(config, recv_buffer=limit)


def parse_cpu_list(text: str) -> set[int]:
    """'0-2,5' -> {0, 1, 2, 5} (the kernel's cpulist format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def first_isolated_cpu() -> int | None:
    """The lowest CPU the kernel isolates (isolcpus) and that is online, or None."""
    if not ISOLATED_CPUS.exists():
        return None
    isolated = parse_cpu_list(ISOLATED_CPUS.read_text())
    online = ISOLATED_CPUS.with_name("online")
    if online.exists():
        isolated &= parse_cpu_list(online.read_text())
    return min(isolated) if isolated else None


def thread_cpu_seconds(native_id: int) -> float:
    """CPU time (user + system) of one thread of this process, from /proc."""
    stat = Path(f"/proc/self/task/{native_id}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks / os.sysconf("SC_CLK_TCK")


class Engine:
    """Drives one Interface over a DPDK port (C does RX) or any Link (frames injected)."""

    def __init__(
        self,
        interface: Interface,
        *,
        port: DpdkPort | None = None,
        link: Link | None = None,
        config: EngineConfig | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """`clock` (tests only): a virtual clock read before every poll, so a run on
        in-memory links is deterministic; the engine then never sleeps."""
        if (port is None) == (link is None):
            raise EngineError("an engine drives exactly one of a DPDK port or a link")
        self.interface = interface
        self.port = port
        self.link = link
        self.config = config or EngineConfig()
        handle = port._live() if port is not None else 0
        rx_fd = port.rx_wait_fd if port is not None else None
        fp = self.config.fastpath
        if rx_fd is not None and fp.poll_mode == "adaptive":
            # A frame that lands during a back-off nap ends it, so the naps start at the
            # ceiling: short first naps (2, 4, 8 ... us after every burst) wait for nothing
            # a frame would not end, and each is a wake-up. At 10k msg/s on a loaded machine
            # they were ~7 wake-ups a burst, twice the CPU and 3-5x the run-queue wait, and
            # the frame then waited in the run queue (issue #16, docs/PERFORMANCE.md "The
            # engine's back-off"). The config says so: `fastpath.config.sleep_min_ns`.
            fp = replace(fp, sleep_min_ns=fp.sleep_max_ns)
        self.fastpath = FastPath(
            interface.ip,
            fp,
            handle,
            frame_bytes=interface.mtu + TAGGED_HEADER_LEN,
        )
        if rx_fd is not None:
            # Else a frame during a nap waits up to sleep_max_ns: half of that on average,
            # for a feed of a few messages a second.
            self.fastpath.set_rx_fd(rx_fd)
        self.services: list[Service] = []
        self.counters = EngineCounters()
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._tx_backlog: deque[bytes] = deque()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self.native_id: int | None = None
        self._snapshot: dict[str, Any] = {}
        self._clock = clock
        self._loop_thread: int | None = None  # the thread of the event loop we run on
        #: The thread we gave the short scheduler slice (its native id), so a loop's thread
        #: gets its own slice back when the engine leaves it (`detach_loop`).
        self._sliced_thread: int | None = None
        self._dirty = False  # loop mode: the application wrote since the last flush
        self._in_batch = False  # between a poll and the end of its handling (no flush then)
        self._tx_held = False  # C's data segments held back behind Python's TX backlog
        self._published_ns = 0  # when the snapshot was last published
        #: Clock (ns) just before the RX burst that brought this batch's first frame (0:
        #: none), and per delivery in loop mode, from it to the protocol's data_received
        #: (the transports append): RX burst -> bytes in the WebSocket layer, newest 65536.
        self.batch_rx_ns = 0
        self.rx_to_protocol_ns = LatencySamples()

    @classmethod
    def on_port(
        cls,
        port: DpdkPort,
        ip: str,
        netmask: str,
        gateway: str | None = None,
        *,
        mtu: int = 1500,
        tcp_config: TcpConfig | None = None,
        config: EngineConfig | None = None,
    ) -> Engine:
        """An engine (not started) for a DPDK port with its own IPv4 interface: the one
        place the stack is put on a port. The receive buffer (so the window) is kept within
        what the port's RX queue holds (`receive_window_for`)."""
        interface = Interface(
            port.mac,
            ip_to_int(ip),
            ip_to_int(netmask),
            ip_to_int(gateway) if gateway else None,
            mtu=mtu,
            tcp_config=receive_window_for(port, tcp_config or TcpConfig(), mtu),
        )
        return cls(interface, port=port, config=config)

    # ---- one batch -------------------------------------------------------------------------
    def run_once(self, budget: float = 0.0, until: float | None = None) -> int:
        """One poll and the Python work it brings; returns the frames received. `until`
        (monotonic seconds) bounds the poll like a timer of the stack would."""
        if self._clock is not None:
            self.fastpath.set_time(self._clock())
        deadline = self.interface.poll_at()
        if until is not None:
            deadline = until if deadline is None else min(deadline, until)
        received = 0
        if self.link is not None:
            received += self._inject_from_link()
            held = link_poll_at(self.link)
            if held is not None:
                deadline = held if deadline is None else min(deadline, held)
        return received + self._poll_and_process(deadline, budget)

    def _poll_and_process(self, deadline: float | None, budget: float) -> int:
        """C polls, then Python: absorb, slow path, commands, services, output, export.
        Every poll is followed by all of it, so C never runs on a stale flow state."""
        self._in_batch = True
        try:
            return self._handle_poll(deadline, budget)
        finally:
            self._in_batch = False

    def _handle_poll(self, deadline: float | None, budget: float) -> int:
        iface = self.interface
        fastpath = self.fastpath
        outcome = fastpath.poll(deadline, budget)
        now = outcome.now
        self.batch_rx_ns = outcome.first_rx_ns
        for slot in outcome.touched:
            fastpath.absorb(slot, now)
        if outcome.slow_frames:
            # The ACKs C took in earlier polls come first: a segment of the slow path (a FIN,
            # an RST) must find the send side they moved.
            fastpath.settle_acks()
            self.counters.slow_frames += len(outcome.slow_frames)
            iface.receive(outcome.slow_frames, now)
            if self._loop_thread is not None and self.link is None:
                # Loop mode: the flows these frames changed go to C before the loop's
                # callbacks run (a connection that just became ESTABLISHED among them,
                # with the ACK it owes), so what the application writes in answer leaves
                # through C, carrying that ACK, instead of waiting for the next turn. (The
                # ACKs C took were settled above: an export writes the send state.)
                self._export(now)
        commands = self._run_commands()
        for service in self.services:
            try:
                service(now)
            except Exception:
                self.counters.service_errors += 1
                log.exception("engine service %r failed", service)
        self.counters.loops += 1
        if not (outcome.rx_frames or commands or self.link is not None or self._dirty):
            # Nothing came in and nothing was asked: output only if the stack has some due
            # (a service wrote, a timer fired); the flows C holds are as they were.
            due = iface.poll_at()
            if due is None or due > now:
                return 0
        if self._loop_thread is not None and self.link is None:
            # Loop mode: the output (and the flows' sync to C) waits for the next turn's
            # flush, right after the loop's callbacks: what the application answers to
            # this batch leaves in the same segments as the stack's own ACKs. So does the
            # processing of the ACKs C took (`settle_acks`): off the answer's path.
            self._dirty = True
            return outcome.rx_frames
        fastpath.settle_acks()
        fastpath.sync_receive_space()
        self._dirty = False  # what the services' protocols wrote leaves right now
        self._transmit(iface.poll(now))
        self._export(now)
        return outcome.rx_frames

    def _inject_from_link(self) -> int:
        """Move the link's frames into C's injection queue, processing when it is full."""
        assert self.link is not None
        processed = 0
        for _ in range(64):
            frames = self.link.rx_burst(self.config.fastpath.burst)
            if not frames:
                break
            while frames:
                taken = self.fastpath.inject(frames)
                frames = frames[taken:]
                if frames:
                    processed += self._poll_and_process(None, 0.0)
        return processed

    def _transmit(self, frames: Sequence[bytes]) -> None:
        if self.link is not None:
            # C's frames first (its ACKs, the data segments flow sends built): they were
            # decided before Python's, and a flow's segments leave in sequence order.
            frames = self.fastpath.take_tx() + list(frames)
        elif frames:
            self.fastpath.flush_tx()  # the same order on a port
        backlog = self._tx_backlog
        backlog.extend(frames)
        sender = self.port if self.port is not None else self.link
        assert sender is not None
        if backlog and self.port is not None:
            self.fastpath.expect_rx()  # an answer comes within a round trip: no long nap
        while backlog:
            batch = [backlog[i] for i in range(min(64, len(backlog)))]
            taken = sender.tx_burst(batch)
            for _ in range(taken):
                backlog.popleft()
            self.counters.tx_frames += taken
            if taken < len(batch):
                break
        while len(backlog) > 8192:
            backlog.popleft()
            self.counters.tx_backlog_dropped += 1
        if bool(backlog) is not self._tx_held:
            self._tx_held = bool(backlog)
            self.fastpath.hold_tx(self._tx_held)
        if backlog and self._loop_thread is not None:
            self._dirty = True  # loop mode: the next turn tries the port again

    def _export(self, now: float) -> None:
        """Sync the fast path with the connections whose state may have changed since the
        last export (the interface tracks them): hand over the eligible ones, withdraw the
        others and the connections that are gone. Idle flows cost nothing here."""
        fastpath = self.fastpath
        changed, removed = self.interface.export_changes(now)
        for conn in removed:
            fastpath.forget(conn)
        local_mac = self.interface.mac
        for conn, mac in changed:
            fastpath.export(conn, mac, local_mac)

    # ---- running on the caller's event loop (dataplane/loop.py) -------------------------------
    def loop_factory(self) -> asyncio.AbstractEventLoop:
        """A new event loop whose selector is this engine: the stack, the WebSocket and the
        application share one thread, with no hand-off. For `asyncio.Runner(loop_factory=
        engine.loop_factory)` (or `asyncio.run(main(), loop_factory=...)` on 3.12+); create
        it on the thread that will run it. The engine must not run its own thread then."""
        from dataplane.loop import EngineEventLoop

        self._check_loop_free()  # before a loop exists: a refused one leaves nothing behind
        return EngineEventLoop(self)

    def _check_loop_free(self) -> None:
        if self._thread is not None:
            raise EngineError("the engine runs its own thread: stop() it before using a loop")
        if self._loop_thread is not None:
            raise EngineError("the engine already runs inside an event loop")

    @property
    def in_loop(self) -> bool:
        """The engine runs inside an event loop (see `loop_factory`), not on its thread."""
        return self._loop_thread is not None

    @property
    def on_engine_thread(self) -> bool:
        """The caller is the thread that drives the stack (its own or the loop's)."""
        current = threading.get_ident()
        thread = self._thread
        return current == self._loop_thread or (thread is not None and current == thread.ident)

    def attach_loop(self, extra_fd: int | None) -> None:
        """Called by the engine loop on its own thread when it is created: the thread's
        preparation (pinning, SCHED_FIFO, DPDK lcore registration) happens here, and
        `extra_fd` (the loop's epoll fd) wakes the C poll from its back-off sleep."""
        self._check_loop_free()
        self._prepare_thread()
        self._loop_thread = threading.get_ident()
        self.fastpath.set_extra_fd(extra_fd)

    def detach_loop(self) -> None:
        """The loop is closing: the engine is free for a thread or another loop."""
        if self._loop_thread is None:
            return
        if self._dirty and not self.fastpath.closed:
            self.flush()  # what the last turn owes (a FIN, an ACK) still leaves
        if not self.fastpath.closed:
            self.fastpath.flush_tx()  # segments C built that no poll sent yet
            self._publish()  # the counters as the loop leaves them
        self._loop_thread = None
        if self._sliced_thread == threading.get_native_id():
            # The loop's thread is the caller's (asyncio.Runner's, a test's main thread):
            # leave it as it was found, with the kernel's slice or one it had asked for.
            SLICE_LEASES.release(self._sliced_thread)
            self._sliced_thread = None
        if not self.fastpath.closed:
            self.fastpath.set_extra_fd(None)
        if self.port is not None:
            self.port.eal.shim.thread_unregister()

    def mark_dirty(self) -> None:
        """Loop mode: the application gave the stack output; it leaves at the next turn."""
        self._dirty = True

    def flush(self, *, settle: bool = False) -> None:
        """Loop mode: put what the application wrote and what the last batch owes (ACKs)
        on the wire now, and sync the flows to C before it polls again. settle: process
        the ACKs C took now, whatever else there is to do (see `settle_if_quiet`)."""
        if self._thread is not None and threading.get_ident() != self._thread.ident:
            raise EngineError("flush() from another thread: the engine thread owns the stack")
        if self._in_batch:
            # From inside the batch (a protocol writing from data_received, say): the
            # batch's other flows are not absorbed yet, so the output waits for its end.
            self._dirty = True
            return
        self._dirty = False
        fastpath = self.fastpath
        now = self._clock() if self._clock is not None else time.monotonic()
        work = self.interface.has_work(now) or self.link is not None
        if work or settle or fastpath.settle_wanted(SETTLE_EVERY):
            # The ACK processing of the ACKs C took (RTT, send buffer, congestion window,
            # RTO) runs before anything reads the send side: the stack's output and timers,
            # the export, a sender waiting for window or buffer. Otherwise it waits, up to
            # SETTLE_EVERY polls or a poll that brings nothing: this flush runs between the
            # application's answer leaving and the next poll, the very time the reply is on
            # its way, and the reply is often already there. Meanwhile a sender only sees
            # less window than it has.
            fastpath.settle_acks()
            work = work or self.interface.has_work(now)
        fastpath.sync_receive_space()
        if work:
            self._transmit(self.interface.poll(now))
            self._export(now)
        elif self._tx_backlog:
            self._transmit(())

    def settle_if_quiet(self, received: int) -> None:
        """Loop mode, after a turn's poll: one that brought nothing is the moment for the
        ACK processing `flush` left waiting (no reply is there to wait for it)."""
        if not received and self.fastpath.acks_due():
            self.flush(settle=True)

    def turn(self, timeout: float | None) -> None:
        """One turn of the engine loop (the selector calls it with the loop's timeout):
        flush the application's output, poll (GIL released) until there is work, the
        timeout, the budget, a wake or the loop's own fd, then handle the batch: services
        (transports) hand received bytes straight to their protocols."""
        if self._dirty:
            self.flush()
        budget = self.config.budget if timeout is None else min(timeout, self.config.budget)
        until = None
        if timeout is not None and timeout > 0:
            now = self._clock() if self._clock is not None else time.monotonic()
            until = now + timeout
        received = self.run_once(max(budget, 0.0), until)
        self.settle_if_quiet(received)
        now_ns = time.monotonic_ns()
        age = now_ns - self._published_ns
        if age >= PUBLISH_EVERY_NS and (not received or age >= PUBLISH_BUSY_NS):
            self._published_ns = now_ns
            self._publish()

    # ---- commands from other threads --------------------------------------------------------
    def call(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Run fn on the engine thread at the next batch; the future carries its result."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:
                    future.set_exception(exc)

        self._commands.put(run)
        self.fastpath.wake()
        return future

    def _run_commands(self) -> int:
        if self._commands.empty():  # the common case, without raising queue.Empty
            return 0
        ran = 0
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return ran
            ran += 1
            self.counters.commands += 1
            command()

    # ---- the thread ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            raise EngineError("the engine is already running")
        if self._loop_thread is not None:
            raise EngineError("the engine runs inside an event loop: it has no thread to start")
        self._stop.clear()
        self._started.clear()  # a restarted engine reports its own start, not the last one
        self._start_error = None
        self._thread = threading.Thread(target=self._main, name="wsgw-engine", daemon=True)
        self._thread.start()
        self._started.wait(10)
        if self._start_error is not None:
            self._thread.join()
            self._thread = None
            raise self._start_error

    def stop(self, timeout: float = 10.0) -> None:
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        self.fastpath.wake()
        thread.join(timeout)
        self._thread = None

    def close(self) -> None:
        self.stop()
        self.detach_loop()
        if not self.fastpath.closed:
            self.fastpath.flush_tx()  # segments C built that no poll sent yet
        self.fastpath.close()

    @property
    def running(self) -> bool:
        return self._loop_thread is not None or (
            self._thread is not None and self._thread.is_alive()
        )

    def _main(self) -> None:
        try:
            self._prepare_thread()
        except BaseException as exc:
            self._start_error = exc
            self._started.set()
            return
        self._started.set()
        budget = self.config.budget
        try:
            while not self._stop.is_set():
                received = self.run_once(budget)
                # As in loop mode (`turn`): at most every PUBLISH_EVERY_NS, and while frames
                # flow every PUBLISH_BUSY_NS (it reads every C counter: 10-30 us a batch).
                now_ns = time.monotonic_ns()
                age = now_ns - self._published_ns
                if age >= PUBLISH_EVERY_NS and (not received or age >= PUBLISH_BUSY_NS):
                    self._published_ns = now_ns
                    self._publish()
        except BaseException:
            log.exception("the engine loop stopped on an error")
            raise
        finally:
            if not self.fastpath.closed:
                self._publish()  # the counters as the loop leaves them
            if self._sliced_thread is not None:  # its lease ends with the thread
                SLICE_LEASES.release(self._sliced_thread)
                self._sliced_thread = None
            if self.port is not None:
                self.port.eal.shim.thread_unregister()

    def _prepare_thread(self) -> None:
        self.native_id = threading.get_native_id()
        # The OS thread's name (top -H, ps -L, /proc/PID/task/TID/comm; 15 bytes at most),
        # so the engine's CPU can be told apart from the API's and the consumers'.
        with contextlib.suppress(OSError):
            comm = Path(f"/proc/self/task/{self.native_id}/comm")
            comm.write_text(threading.current_thread().name[:15])
        cpu = self.config.cpu
        if cpu is not None:
            try:
                os.sched_setaffinity(0, {cpu})
            except OSError as exc:
                raise EngineError(
                    f"cannot pin the engine to CPU {cpu}: {exc}", exc.errno or 0
                ) from exc
            isolated = (
                parse_cpu_list(ISOLATED_CPUS.read_text()) if ISOLATED_CPUS.exists() else set()
            )
            if cpu not in isolated:
                log.warning(
                    "engine CPU %d is not isolated (isolcpus=%s): the kernel may schedule "
                    "other work on it",
                    cpu,
                    sorted(isolated) or "none",
                )
        priority = self.config.sched_fifo_priority
        if priority is None and self.config.slice_ns:
            # A lease (as ring readers' waiting threads take): a loop's thread that also
            # waits on a reader, the two ending in any order, gets its own slice back.
            native_id = threading.get_native_id()
            if SLICE_LEASES.hold(native_id, self.config.slice_ns):
                self._sliced_thread = native_id
            else:  # an older kernel, another architecture: its slice then
                log.info("engine thread keeps the kernel's slice (refused or not reported)")
        if priority is not None:
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
            except PermissionError as exc:
                raise EngineError(
                    f"SCHED_FIFO priority {priority} not permitted: run as root or grant "
                    "CAP_SYS_NICE (and check the RT throttling limits)",
                    errno.EPERM,
                ) from exc
            except OSError as exc:
                low = os.sched_get_priority_min(os.SCHED_FIFO)
                high = os.sched_get_priority_max(os.SCHED_FIFO)
                raise EngineError(
                    f"SCHED_FIFO priority {priority} refused ({exc.strerror}); valid "
                    f"priorities are {low}..{high}",
                    exc.errno or errno.EINVAL,
                ) from exc
        if self.port is not None:
            lcore = self.port.eal.shim.thread_register()
            if lcore < 0:
                log.warning(
                    "engine thread has no DPDK lcore id (%s): mempool caches unused",
                    self.port.eal.shim.last_error(),
                )

    # ---- what the API thread reads ------------------------------------------------------------
    def _publish(self) -> None:
        c = self.counters
        snapshot: dict[str, Any] = {
            "at": time.monotonic(),
            "loops": c.loops,
            "slow_frames": c.slow_frames,
            "tx_frames": c.tx_frames,
            "commands": c.commands,
            "service_errors": c.service_errors,
            "flows": self.fastpath.flows,
            "connections": self.interface.connection_count,
        }
        snapshot.update({f"c_{k}": v for k, v in self.fastpath.stats().items()})
        self._snapshot = snapshot

    def snapshot(self) -> dict[str, Any]:
        """The counters as of the last batch (safe from any thread)."""
        return self._snapshot

    def cpu_seconds(self) -> float:
        """CPU time the engine thread has used so far."""
        if self.native_id is None:
            return 0.0
        return thread_cpu_seconds(self.native_id)

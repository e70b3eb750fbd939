"""`fanout`: one upstream feed fanned out to N consumers, by each consumer path of the hub,
next to a plain picows relay written as a user would (the reference contender).

Contenders, each at N = 1, 10, 100 consumers (quick: 1, 10), all fed by the same synthetic
publisher (`_schedule`: batches at a fixed rate, or as fast as it goes):

- `ring`: the hub writes the shared-memory ring; N RingReaders in worker processes;
- `websocket`: the hub (ring written too, as always) and /v1/stream on uvicorn (uvloop when
  installed) in this process, its API thread; N picows clients in worker processes;
- `nats`: the hub with its NATS sink (ring written too) and a nats-server of the bench's own;
  N nats-py subscribers in worker processes (skipped when nats-server is not installed);
- `picows relay` (ref): a process with one picows client to an upstream picows server that
  plays the exchange (another process, sending with the same schedule) re-broadcasting
  every frame to N downstream picows clients (the same client code as `websocket`).

The hub's publisher is a thread of this process (the engine thread's place); the relay has
one network hop more (exchange -> relay), which its latency includes.

Metrics per N: delivered msg/s summed over the consumers (the publisher sends as fast as
it can; time from the first publish to the last consumer's last message), and the latency
p50/p99 from the publisher's timestamp (in the payload) to a consumer's receipt, at a fixed
rate that keeps the summed delivery rate sustainable (`_latency_rate`). Consumers are spread
over at most `WORKERS` processes. Losses, if any, are in the notes.

A consumer stall (issue #7: "a consumer stall never raises the feed's latency p99"), for the
ring and /v1/stream at STALL_N healthy consumers: the feed's latency p99 (publisher stamp ->
a healthy consumer's receipt, at the latency run's rate) in alternating phases of the same
run (A B, B A, ...), (A) without a straggler, (B) with one more consumer, in a process of
its own, that connected, then stopped (SIGSTOP: it reads nothing more) before a burst of
STALL_FILL messages, so its socket buffers are full and its queue in the hub grows (the
steady state of a stall, not its first seconds); A gets the same burst without it. The
healthy consumers receive the whole burst before a phase is measured (counted, not timed).
A stopped process uses no CPU, so the only difference between A and B is what the stall
costs the gateway. The ratio B / A, one sample per pair.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing as mp
import os
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from wsgw_bench.core import BenchOptions, Measurement, alternate, scenario

SCENARIO = "fanout"
RING, WEBSOCKET, NATS, RELAY = "ring", "websocket /v1/stream", "nats", "picows relay"
CONTENDERS = (RING, WEBSOCKET, NATS, RELAY)
PAYLOAD = 100  # bytes per message
WORKERS = 4  # consumer processes at most
STALL_N = 10  # healthy consumers of the stall comparison (plus the straggler)
STALL_FILL = 80_000  # messages published while the straggler is stopped, before measuring
STALL_PAIRS = 2  # (A, B) phase pairs per stall run, alternating
SESSION, TOPIC = 1, "bench"
TIMEOUT = 120.0
CTX = mp.get_context("spawn")


# ---- the synthetic feed --------------------------------------------------------------------
def payload(ts_ns: int, i: int) -> bytes:
    """What every contender carries: `<ts ns, 19 digits> <number, 11 digits> ` padded."""
    head = b"%019d %011d " % (ts_ns, i)
    return head + b"x" * (PAYLOAD - len(head))


def stamp(data: bytes | memoryview) -> int:
    return int(bytes(data[:19]))


def _schedule(count: int, rate: float, batch: int) -> Iterator[tuple[float, int, int]]:
    """(due time in perf_counter seconds, first number, size) of each batch; rate 0: now."""
    start = time.perf_counter()
    for first in range(0, count, batch):
        due = start + first / rate if rate else 0.0
        yield due, first, min(batch, count - first)


def _batch_for(rate: float) -> int:
    """Batches of about a millisecond at a fixed rate; 64 when unpaced (an engine poll)."""
    return max(1, int(rate // 1000)) if rate else 64


def publish_to_hub(hub: Any, count: int, rate: float, took: list[int] | None = None) -> int:
    """The engine's side: publish_batch per batch, sleeping until each batch is due.
    Unpaced, the batches are made beforehand (their timestamps are not read), so the
    publisher costs the hub's process what the engine's hand-off costs, not the making of
    payloads. Returns the time.time_ns() of the first publish. took: gets the ns each paced
    publish_batch took (the ring writer's time, the C sink's sends included)."""
    if not rate:
        now = time.time_ns()
        batches = [
            [(SESSION, TOPIC, payload(now, i), now, i) for i in range(first, first + n)]
            for _, first, n in _schedule(count, 0, _batch_for(0))
        ]
        first_ns = time.time_ns()
        for batch in batches:
            hub.publish_batch(batch)
        return first_ns
    first_ns = 0
    for due, first, n in _schedule(count, rate, _batch_for(rate)):
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        now = time.time_ns()
        first_ns = first_ns or now
        batch = [(SESSION, TOPIC, payload(now, i), now, i) for i in range(first, first + n)]
        t0 = time.perf_counter_ns()
        hub.publish_batch(batch)
        if took is not None:
            took.append(time.perf_counter_ns() - t0)
    return first_ns


# ---- consumers (worker processes) -------------------------------------------------------------
class _Tally:
    """One consumer's count, time of its last message and latency samples (ns)."""

    __slots__ = ("count", "done", "expect", "last_ns", "on_done", "sample", "samples", "since")

    def __init__(self) -> None:
        self.count = 0
        self.expect = 0
        self.last_ns = 0
        self.sample = False
        self.since = 0
        self.samples: list[int] = []
        self.on_done: Callable[[], None] | None = None
        self.done = False

    def arm(self, expect: int, sample: bool, on_done: Callable[[], None] | None) -> None:
        self.count, self.expect, self.sample, self.samples = 0, expect, sample, []
        self.last_ns, self.done, self.on_done = 0, False, on_done
        self.since = time.time_ns()  # a latency run ignores what was published before it

    def hit(self, data: bytes | memoryview) -> None:
        now = time.time_ns()
        if self.sample:
            sent = stamp(data)
            if sent < self.since:
                return
            self.samples.append(now - sent)
        self.count += 1
        self.last_ns = now
        if self.count >= self.expect and not self.done:
            self.done = True
            if self.on_done is not None:
                self.on_done()


def _report(tallies: list[_Tally]) -> dict[str, Any]:
    return {
        "counts": [t.count for t in tallies],
        "last_ns": max((t.last_ns for t in tallies), default=0),
        "samples": [s for t in tallies for s in t.samples],
    }


def _read_ring(reader: Any, tally: _Tally, expect: int, timeout: float) -> None:
    from dataplane.ring import RingMessage

    deadline = time.monotonic() + timeout
    while tally.count < expect and time.monotonic() < deadline:
        for event in reader.read_batch(timeout=0.5):
            if type(event) is RingMessage:
                tally.hit(event.payload)


def ring_worker(conn: Connection, ring: str, n: int) -> None:
    """n RingReaders, one thread each, blocking in the ring's futex wait."""
    from dataplane.ring import RingReader
    from gateway.hub.names import ring_topics

    topics = ring_topics(SESSION, [TOPIC], gaps=False)
    readers = [RingReader.attach(ring, topics=topics) for _ in range(n)]
    tallies = [_Tally() for _ in range(n)]
    conn.send(("ready", n))
    while True:
        cmd = conn.recv()
        if cmd[0] == "stop":
            break
        _, expect, sample, timeout = cmd
        for r in readers:
            r.seek("latest")

        for tally in tallies:
            tally.arm(expect, sample, None)
        conn.send(("armed",))
        threads = [
            threading.Thread(target=_read_ring, args=(r, t, expect, timeout))
            for r, t in zip(readers, tallies, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        conn.send(("result", _report(tallies)))
    for r in readers:
        r.close()


def ws_worker(conn: Connection, url: str, n: int) -> None:
    """n picows clients of one URL (the gateway's /v1/stream or the relay)."""
    _run_async(_ws_worker(conn, url, n))


def nats_worker(conn: Connection, url: str, n: int) -> None:
    _run_async(_nats_worker(conn, url, n))


def _run_async(coro: Any) -> None:
    try:
        import uvloop

        uvloop.run(coro)
    except ImportError:
        asyncio.run(coro)


async def _serve_commands(conn: Connection, tallies: list[_Tally]) -> None:
    """The worker's command loop for the asyncio kinds: arm, wait for all, report."""
    loop = asyncio.get_running_loop()
    while True:
        cmd = await loop.run_in_executor(None, conn.recv)
        if cmd[0] == "stop":
            return
        _, expect, sample, timeout = cmd
        left = [len(tallies)]
        finished = loop.create_future()

        def one_done(left: list[int] = left, finished: asyncio.Future[None] = finished) -> None:
            left[0] -= 1
            if left[0] == 0 and not finished.done():
                finished.set_result(None)

        for t in tallies:
            t.arm(expect, sample, one_done)
        conn.send(("armed",))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(finished, timeout)
        conn.send(("result", _report(tallies)))


async def _ws_worker(conn: Connection, url: str, n: int) -> None:
    import picows

    data_kinds = (picows.WSMsgType.TEXT, picows.WSMsgType.BINARY)

    class Listener(picows.WSListener):
        def __init__(self, tally: _Tally) -> None:
            super().__init__()
            self.tally = tally

        def on_ws_frame(self, transport: Any, frame: Any) -> None:
            if frame.msg_type in data_kinds:
                self.tally.hit(frame.get_payload_as_bytes())
            elif frame.msg_type == picows.WSMsgType.CLOSE:
                transport.disconnect()

    tallies = [_Tally() for _ in range(n)]
    transports = []
    for tally in tallies:
        transport, _ = await picows.ws_connect(lambda t=tally: Listener(t), url)
        transports.append(transport)
    conn.send(("ready", n))
    await _serve_commands(conn, tallies)
    for transport in transports:
        transport.disconnect()


async def _nats_worker(conn: Connection, url: str, n: int) -> None:
    import nats

    from gateway.hub.names import nats_subject

    tallies = [_Tally() for _ in range(n)]
    clients = []
    for tally in tallies:
        nc = await nats.connect(url)

        async def on_msg(msg: Any, tally: _Tally = tally) -> None:
            tally.hit(msg.data)

        await nc.subscribe(
            nats_subject("wsgw", SESSION, TOPIC),
            cb=on_msg,
            pending_msgs_limit=-1,
            pending_bytes_limit=-1,
        )
        await nc.flush()
        clients.append(nc)
    conn.send(("ready", n))
    await _serve_commands(conn, tallies)
    for nc in clients:
        await nc.close()


def _stop_processes(conns: Sequence[Connection], procs: Sequence[Any]) -> None:
    """Ask each worker to stop, then wait for it: killed when it has not ended in 10 s."""
    for c in conns:
        with contextlib.suppress(OSError):
            c.send(("stop",))
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join(5)


class Workers:
    """The consumer processes of one run: n consumers over at most WORKERS processes."""

    def __init__(self, target: Callable[..., None], endpoint: str, n: int) -> None:
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        per = [n // WORKERS + (1 if k < n % WORKERS else 0) for k in range(min(n, WORKERS))]
        try:
            for count in per:
                parent, child = CTX.Pipe()
                proc = CTX.Process(target=target, args=(child, endpoint, count), daemon=True)
                proc.start()
                child.close()
                self.conns.append(parent)
                self.procs.append(proc)
            for c in self.conns:
                self._expect(c, "ready")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _expect(conn: Connection, what: str, timeout: float = 60.0) -> Any:
        if not conn.poll(timeout):
            raise RuntimeError(f"a consumer worker did not answer {what!r} in {timeout} s")
        reply = conn.recv()
        if reply[0] != what:
            raise RuntimeError(f"a consumer worker answered {reply!r}, not {what!r}")
        return reply

    def measure(self, expect: int, sample: bool, send: Callable[[], int]) -> dict[str, Any]:
        """Arm every consumer for `expect` messages, run send() (it returns the time.time_ns
        of the first message), collect what they got."""
        self.arm(expect, sample)
        start_ns = send()
        return {**self.collect(), "start_ns": start_ns}

    def arm(self, expect: int, sample: bool) -> None:
        for c in self.conns:
            c.send(("measure", expect, sample, TIMEOUT))
        for c in self.conns:
            self._expect(c, "armed")

    def signal(self, sig: int) -> None:
        for p in self.procs:
            if p.pid is not None and p.is_alive():
                os.kill(p.pid, sig)

    def collect(self) -> dict[str, Any]:
        counts: list[int] = []
        samples: list[int] = []
        last = 0
        for c in self.conns:
            report = self._expect(c, "result", TIMEOUT + 30)[1]
            counts += report["counts"]
            samples += report["samples"]
            last = max(last, report["last_ns"])
        return {"counts": counts, "samples": samples, "last_ns": last}

    def close(self) -> None:
        self.signal(signal.SIGCONT)  # a straggler left stopped must be able to stop
        _stop_processes(self.conns, self.procs)


# ---- the picows relay (reference) -------------------------------------------------------------
def feed_main(conn: Connection) -> None:
    """The exchange: a picows server sending the synthetic feed to whoever connects."""
    _run_async(_feed(conn))


def _client_list(clients: list[Any]) -> Callable[[Any], Any]:
    """A picows listener factory that keeps `clients` = the connected transports, with no
    flow control: what a simple server or relay written by a user does (it buffers)."""
    import picows

    class Tracked(picows.WSListener):
        def on_ws_connected(self, transport: Any) -> None:
            clients.append(transport)

        def pause_writing(self) -> None:
            pass

        def resume_writing(self) -> None:
            pass

        def on_ws_disconnected(self, transport: Any) -> None:
            if transport in clients:
                clients.remove(transport)

    return lambda _request: Tracked()


async def _feed(conn: Connection) -> None:
    import picows

    from wsgw_bench.servers import free_port

    clients: list[Any] = []
    port = free_port()
    server = await picows.ws_create_server(_client_list(clients), "127.0.0.1", port)
    conn.send(("port", port))
    loop = asyncio.get_running_loop()
    text = picows.WSMsgType.TEXT
    while True:
        cmd = await loop.run_in_executor(None, conn.recv)
        if cmd[0] == "stop":
            break
        _, count, rate = cmd
        prebuilt = [payload(time.time_ns(), i) for i in range(count)] if not rate else None
        first_ns = 0
        for due, first, n in _schedule(count, rate, _batch_for(rate)):
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            now = time.time_ns()
            first_ns = first_ns or now
            for i in range(first, first + n):
                data = prebuilt[i] if prebuilt is not None else payload(now, i)
                for transport in clients:
                    transport.send(text, data)
            await asyncio.sleep(0)  # let the transport write, as a server loop would
        conn.send(("sent", first_ns))
    server.close()


def relay_main(conn: Connection, upstream: str) -> None:
    """The user's relay: one picows client upstream, every frame to every downstream."""
    _run_async(_relay(conn, upstream))


async def _relay(conn: Connection, upstream: str) -> None:
    import picows

    from wsgw_bench.servers import free_port

    downstream: list[Any] = []
    text = picows.WSMsgType.TEXT

    class Upstream(picows.WSListener):
        def on_ws_frame(self, transport: Any, frame: Any) -> None:
            if frame.msg_type == text:
                data = frame.get_payload_as_bytes()
                for client in downstream:
                    client.send(text, data)

    port = free_port()
    server = await picows.ws_create_server(_client_list(downstream), "127.0.0.1", port)
    up, _ = await picows.ws_connect(Upstream, upstream)
    conn.send(("port", port))
    loop = asyncio.get_running_loop()
    while True:
        cmd = await loop.run_in_executor(None, conn.recv)
        if cmd[0] == "stop":
            break
        conn.send(("clients", len(downstream)))
    up.disconnect()
    server.close()


class Relay:
    """The exchange and the relay processes."""

    def __init__(self) -> None:
        self.procs: list[Any] = []
        self.feed, child = CTX.Pipe()
        self._start(feed_main, child)
        feed_port = Workers._expect(self.feed, "port")[1]
        self.relay, child = CTX.Pipe()
        self._start(relay_main, child, f"ws://127.0.0.1:{feed_port}/")
        self.url = f"ws://127.0.0.1:{Workers._expect(self.relay, 'port')[1]}/"

    def _start(self, target: Callable[..., None], *args: Any) -> None:
        proc = CTX.Process(target=target, args=args, daemon=True)
        proc.start()
        args[0].close()
        self.procs.append(proc)

    def clients(self) -> int:
        self.relay.send(("count",))
        return int(Workers._expect(self.relay, "clients")[1])

    def send(self, count: int, rate: float) -> int:
        self.feed.send(("send", count, rate))
        return int(Workers._expect(self.feed, "sent", TIMEOUT)[1])

    def close(self) -> None:
        _stop_processes([self.feed, self.relay], self.procs)


# ---- the gateway side ---------------------------------------------------------------------
@dataclass
class Plan:
    counts: tuple[int, ...]
    deliveries: int  # messages delivered, summed over consumers, in a throughput run
    latency_s: float
    delivery_rate: float  # summed over consumers, in a latency run
    stall_fill: int = STALL_FILL  # the stall comparison's burst
    stall_pairs: int = STALL_PAIRS  # its (A, B) phase pairs

    def messages(self, n: int) -> int:
        return max(1000, self.deliveries // n)

    def rate(self, n: int) -> float:
        """The latency run's publish rate: the same summed delivery rate at every N."""
        return max(50.0, self.delivery_rate / n)


def _plan(options: BenchOptions) -> Plan:
    if options.quick:
        # A smoke: the stall burst still outgrows a stopped consumer's socket buffers.
        return Plan((1, 10), 50_000, 0.5, 20_000, stall_fill=20_000, stall_pairs=1)
    return Plan((1, 10, 100), 400_000, 3.0, 20_000)


class Gateway:
    """uvicorn with the control plane (no hub until a websocket run sets one), a session
    and a token; a nats-server when the binary is there."""

    def __init__(self) -> None:
        from wsgw_bench.servers import NatsServer, ServerThread, gateway_app, nats_server_binary

        self.dir = Path(tempfile.mkdtemp(prefix="wsgw-bench-fanout-"))
        self.app = gateway_app(self.dir, None)
        try:
            import uvloop  # noqa: F401

            use_uvloop = True
        except ImportError:
            use_uvloop = False
        self.server = ServerThread(self.app, uvloop=use_uvloop).start()
        service = self.app.state.control
        _, self.token = service.tokens.create("bench", ["consume"])
        session = service.sessions.create(
            {"name": "bench", "url": "wss://x/ws", "dialect": "generic", "transport": "kernel"}
        )
        assert session.id == SESSION
        self.nats: Any = NatsServer().start() if nats_server_binary() else None
        self.ring = f"wsgw-bench-{os.getpid()}-fanout"

    def hub(self, *, nats: bool = False, ring_messages: int = 0) -> Any:
        from dataplane.ring import RingWriter, record_size
        from gateway.hub import Hub
        from gateway.hub.nats import NatsConfig, NatsSink

        need = max(1 << 22, (ring_messages + 1000) * record_size(PAYLOAD))
        ring = RingWriter.create(self.ring, 1 << (need - 1).bit_length(), replace=True)
        sink = None
        if nats:
            sink = NatsSink(NatsConfig(servers=[self.nats.url], buffer_messages=1 << 20)).start(10)
        return Hub(ring=ring, nats=sink, handoff_limit=1 << 22)

    @property
    def stream_url(self) -> str:
        return (
            f"{self.server.ws_url}/v1/stream?session={SESSION}&topics={TOPIC}"
            f"&queue_size=1000000&token={self.token}"
        )

    def close(self) -> None:
        import shutil

        self.server.stop()
        if self.nats is not None:
            self.nats.cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)


def _wait(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


@dataclass
class Outcome:
    throughput: float
    p50_us: float
    p99_us: float
    lost: int


def _outcome(
    n: int, count: int, fast: dict[str, Any], paced: dict[str, Any], paced_count: int
) -> Outcome:
    delivered = sum(fast["counts"])
    elapsed = max(1, fast["last_ns"] - fast["start_ns"]) / 1e9
    samples = sorted(paced["samples"])
    lost = n * count - delivered + n * paced_count - sum(paced["counts"])
    if not samples:
        return Outcome(delivered / elapsed, float("nan"), float("nan"), lost)
    p50 = statistics.median(samples) / 1e3
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))] / 1e3
    return Outcome(delivered / elapsed, p50, p99, lost)


def _run_hub(gw: Gateway, contender: str, n: int, plan: Plan) -> Outcome:
    count, rate = plan.messages(n), plan.rate(n)
    paced_count = int(rate * plan.latency_s)
    hub = gw.hub(nats=contender == NATS, ring_messages=count)
    workers: Workers | None = None
    try:
        if contender == RING:
            workers = Workers(ring_worker, gw.ring, n)
        elif contender == NATS:
            workers = Workers(nats_worker, gw.nats.url, n)
        else:
            gw.app.state.hub = hub
            workers = Workers(ws_worker, gw.stream_url, n)
            _wait(lambda: len(hub.consumers()) == n, f"{n} stream consumers")
        fast = workers.measure(count, False, lambda: publish_to_hub(hub, count, 0))
        paced = workers.measure(paced_count, True, lambda: publish_to_hub(hub, paced_count, rate))
        return _outcome(n, count, fast, paced, paced_count)
    finally:
        if workers is not None:
            workers.close()
        gw.app.state.hub = None
        hub.close()


def _run_relay(n: int, plan: Plan) -> Outcome:
    count, rate = plan.messages(n), plan.rate(n)
    paced_count = int(rate * plan.latency_s)
    relay = Relay()
    workers: Workers | None = None
    try:
        workers = Workers(ws_worker, relay.url, n)
        _wait(lambda: relay.clients() == n, f"{n} relay clients")
        fast = workers.measure(count, False, lambda: relay.send(count, 0))
        paced = workers.measure(paced_count, True, lambda: relay.send(paced_count, rate))
        return _outcome(n, count, fast, paced, paced_count)
    finally:
        if workers is not None:
            workers.close()
        relay.close()


def _p99(samples: list[int]) -> float:
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] / 1e3


@dataclass
class StallOutcome:
    p99_all_us: list[float]  # (A) no straggler, per (A, B) pair
    p99_stalled_us: list[float]  # (B) one stopped, per pair
    lost: int  # deliveries to healthy consumers missing in A and B
    straggler_lag: int  # (B) messages the stopped stream had queued in the hub at the end
    gc_all: tuple[int, float]  # (A) full (gen 2) collections in the hub's process, longest ms
    gc_stalled: tuple[int, float]  # (B) the same
    cpu_all_us: float  # (A) CPU of the hub's process (publisher, hub, API) per message, us
    cpu_stalled_us: float  # (B) the same


@dataclass
class _PhaseFigures:
    """One stall phase's (A's or B's) figures, summed over its rounds."""

    p99: list[float] = field(default_factory=list)
    gc: list[tuple[int, float]] = field(default_factory=list)
    cpu_s: float = 0.0
    delivered: int = 0

    def add(self, got: dict[str, Any], gc: tuple[int, float]) -> None:
        """One measured round: the healthy consumers' report and the collections during it."""
        self.p99.append(_p99(got["samples"]))
        self.gc.append(gc)
        self.cpu_s += got["cpu_s"]
        self.delivered += sum(got["counts"])

    def gc_summary(self) -> tuple[int, float]:
        """(full collections, longest pause ms) over the rounds."""
        return sum(g[0] for g in self.gc), max(g[1] for g in self.gc)


class _GcWatch:
    """Full (generation 2) garbage collections in this process (the hub's and the
    publisher's): how many, and the longest pause, while `active`."""

    def __init__(self) -> None:
        self.active = False
        self.count = 0
        self.longest = 0.0
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if not self.active or info.get("generation") != 2:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.count += 1
            self.longest = max(self.longest, (time.perf_counter() - self._t0) * 1e3)

    def take(self) -> tuple[int, float]:
        out = (self.count, self.longest)
        self.count, self.longest = 0, 0.0
        return out


def _stream_lags(gw: Gateway, hub: Any) -> list[int]:
    """Queue lengths of the hub's stream consumers, read on the API loop, largest first."""
    lags: list[int] = gw.server.call(lambda: sorted((c.lag for c in hub.consumers()), reverse=True))
    return lags


def _run_stall(gw: Gateway, contender: str, n: int, plan: Plan) -> StallOutcome:
    """The feed's latency p99 at n healthy consumers without a straggler (A), then with one
    more consumer that stopped reading (B), alternating: see the module doc."""
    rate = plan.rate(n)
    paced_count = int(rate * plan.latency_s)
    hub = gw.hub(ring_messages=plan.stall_fill + 4 * paced_count)
    healthy: Workers | None = None
    straggler: Workers | None = None
    watch = _GcWatch()
    gc.callbacks.append(watch)
    target, endpoint = (ring_worker, gw.ring) if contender == RING else (ws_worker, gw.stream_url)
    try:
        if contender != RING:
            gw.app.state.hub = hub
        healthy = Workers(target, endpoint, n)
        if contender != RING:
            _wait(lambda: len(hub.consumers()) == n, f"{n} stream consumers")

        def send() -> int:
            return publish_to_hub(hub, paced_count, rate)

        def fill(count: int) -> int:
            return publish_to_hub(hub, count, 0)

        def measured() -> dict[str, Any]:
            watch.take()
            watch.active = True
            cpu0 = time.process_time()
            try:
                got = healthy.measure(paced_count, True, send)
            finally:
                watch.active = False
            got["cpu_s"] = time.process_time() - cpu0
            return got

        def filled() -> None:
            """The fill, received by every healthy consumer before the phase is measured (its
            backlog in their sockets would otherwise delay the phase's first messages)."""
            got = healthy.measure(plan.stall_fill, False, lambda: fill(plan.stall_fill))
            if sum(got["counts"]) != n * plan.stall_fill:
                raise RuntimeError(f"healthy consumers got {sum(got['counts'])} of the fill")

        a, b = _PhaseFigures(), _PhaseFigures()
        lag = 0

        def phase_a() -> None:
            """No straggler: the same fill, then the measured run."""
            filled()
            a.add(measured(), watch.take())

        def phase_b() -> None:
            """One more consumer, stopped before the fill: its buffers reach their limits."""
            nonlocal straggler, lag
            straggler = Workers(target, endpoint, 1)
            if contender != RING:
                _wait(lambda: len(hub.consumers()) == n + 1, f"{n + 1} stream consumers")
            straggler.arm(paced_count + plan.stall_fill, False)
            straggler.signal(signal.SIGSTOP)
            try:
                filled()
                b.add(measured(), watch.take())
                if contender != RING:
                    lag = max(lag, _stream_lags(gw, hub)[0])
            finally:
                straggler.signal(signal.SIGCONT)
            straggler.collect()  # it caught up and leaves
            straggler.close()
            straggler = None
            if contender != RING:
                _wait(lambda: len(hub.consumers()) == n, f"{n} stream consumers")

        for k in range(plan.stall_pairs):  # A B, then B A: drift spreads over both
            for phase in (phase_a, phase_b) if k % 2 == 0 else (phase_b, phase_a):
                phase()
        lost = 2 * plan.stall_pairs * n * paced_count - a.delivered - b.delivered
        return StallOutcome(
            a.p99,
            b.p99,
            max(0, lost),
            lag,
            a.gc_summary(),
            b.gc_summary(),
            a.cpu_s * 1e6 / (plan.stall_pairs * paced_count),
            b.cpu_s * 1e6 / (plan.stall_pairs * paced_count),
        )
    finally:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(watch)
        for w in (straggler, healthy):
            if w is not None:
                w.close()
        gw.app.state.hub = None
        hub.close()


def _stall_series(gw: Gateway, plan: Plan, reps: int) -> list[Measurement]:
    """The stall comparison for the ring and /v1/stream (module doc)."""
    n = STALL_N
    contenders = [RING, WEBSOCKET]
    name = f"{n} consumers, stall: "
    all_p99 = {
        c: Measurement(SCENARIO, name + "latency p99, no straggler", c, "us", False)
        for c in contenders
    }
    stalled_p99 = {
        c: Measurement(SCENARIO, name + "latency p99, one stopped", c, "us", False)
        for c in contenders
    }
    ratio = {
        c: Measurement(SCENARIO, name + "p99 one stopped / none", c, "x", False) for c in contenders
    }
    lost = dict.fromkeys(contenders, 0)
    lags: dict[str, list[int]] = {c: [] for c in contenders}
    gcs: dict[str, list[str]] = {c: [] for c in contenders}
    cpus: dict[str, list[str]] = {c: [] for c in contenders}
    for _, contender in alternate(reps, contenders):
        out = _run_stall(gw, contender, n, plan)
        all_p99[contender].samples += out.p99_all_us
        stalled_p99[contender].samples += out.p99_stalled_us
        ratio[contender].samples += [
            b / a for a, b in zip(out.p99_all_us, out.p99_stalled_us, strict=True)
        ]
        lost[contender] += out.lost
        lags[contender].append(out.straggler_lag)
        gcs[contender].append(
            f"A {out.gc_all[0]} ({out.gc_all[1]:.1f} ms), B {out.gc_stalled[0]} "
            f"({out.gc_stalled[1]:.1f} ms)"
        )
        cpus[contender].append(f"A {out.cpu_all_us:.0f}, B {out.cpu_stalled_us:.0f}")
    for c in contenders:
        notes = [
            f"publishing {plan.rate(n):.0f} msg/s, {int(plan.rate(n) * plan.latency_s)} msgs "
            f"per phase, {plan.stall_pairs} (A: no straggler, B: one stopped) pairs per round, "
            f"{reps} rounds (a sample per pair); the straggler stopped (SIGSTOP) before a "
            f"{plan.stall_fill}-msg burst (A gets the burst too); target: ratio <= 1 within noise",
            "full GCs in the hub's process per round (longest): " + "; ".join(gcs[c]),
            "CPU of the hub's process per published message, us: " + "; ".join(cpus[c]),
        ]
        if c == WEBSOCKET:
            notes.append(f"stopped stream's hub queue at the end of B: {lags[c]} msgs")
        if lost[c]:
            notes.append(f"{lost[c]} deliveries to healthy consumers missing")
        ratio[c].note = "; ".join(notes)
    return [*all_p99.values(), *stalled_p99.values(), *ratio.values()]


@scenario(SCENARIO, "fan-out to N consumers: ring, /v1/stream, NATS vs a picows relay")
def bench_fanout(options: BenchOptions) -> list[Measurement]:
    """Throughput and latency of each consumer path at N consumers (see module doc)."""
    plan = _plan(options)
    gw = Gateway()
    results: list[Measurement] = []
    try:
        contenders = [c for c in CONTENDERS if c != NATS or gw.nats is not None]
        for n in plan.counts:

            def series(metric: str, unit: str, higher: bool, n: int = n) -> dict[str, Measurement]:
                name = f"{n} consumer{'s' if n > 1 else ''}: {metric}"
                return {
                    c: Measurement(SCENARIO, name, c, unit, higher, reference=c == RELAY)
                    for c in contenders
                }

            rate = series("delivered (sum)", "msg/s", True)
            p50 = series("latency p50", "us", False)
            p99 = series("latency p99", "us", False)
            lost = dict.fromkeys(contenders, 0)
            # 100 consumers take minutes a round on 2 cores: two rounds keep `make bench`
            # within its 15 minutes (the notes say so).
            reps = options.repetitions if n < 100 else min(options.repetitions, 2)
            for _, contender in alternate(reps, contenders):
                out = (
                    _run_relay(n, plan) if contender == RELAY else _run_hub(gw, contender, n, plan)
                )
                rate[contender].samples.append(out.throughput)
                p50[contender].samples.append(out.p50_us)
                p99[contender].samples.append(out.p99_us)
                lost[contender] += out.lost
            for c in contenders:
                notes = [
                    f"{plan.messages(n)} msgs unpaced; latency at {plan.rate(n):.0f} msg/s; "
                    f"{reps} rounds"
                ]
                if lost[c]:
                    notes.append(f"{lost[c]} deliveries missing over the runs")
                rate[c].note = "; ".join(notes)
            results += [*rate.values(), *p50.values(), *p99.values()]
        # Each stall round takes (A, B) pairs with fill bursts: three rounds at most.
        results += _stall_series(gw, plan, min(options.repetitions, 3))
        if gw.nats is None:
            results.append(
                Measurement(SCENARIO, "nats", NATS, "msg/s", True, note="skipped: no nats-server")
            )
    finally:
        gw.close()
    return results


# ---- one stream among many armed ones: the C stream sink's fan-out ------------------------------
SINK_ON, SINK_OFF = "/v1/stream, C sink, no cap", "/v1/stream, router writes (sink off)"
SINK_CAP = "/v1/stream, C sink, cap 8 (default)"
SINK_SCENARIO = "fanout_sink"
SINK_RATE = 1000.0  # msg/s, one record a publish (an engine poll that finds one message)
SINK_SECONDS = 3.0
SINK_WARMUP = 300  # messages before each timed run: every stream armed (sink on)
#: api.stream_sink_max of each contender (None: the sink off)
SINK_MAX = {SINK_OFF: None, SINK_ON: 1024, SINK_CAP: 8}


def _run_sink_fanout(
    gw: Gateway, sink_max: int | None, others: int, seconds: float
) -> dict[str, Any]:
    """One measured /v1/stream client (connected last) beside `others` streams of the same
    topic, the sink off (None) or serving at most sink_max streams: its latency samples, the
    ring writer's ns per record and how many streams the sink served at the end."""
    count = int(SINK_RATE * seconds)
    hub = gw.hub(ring_messages=count + SINK_WARMUP)
    gw.app.state.stream_sink = sink_max is not None
    gw.app.state.stream_sink_max = sink_max or 0
    crowd: Workers | None = None
    measured: Workers | None = None
    try:
        gw.app.state.hub = hub
        crowd = Workers(ws_worker, gw.stream_url, others)
        _wait(lambda: len(hub.consumers()) == others, f"{others} stream consumers")
        measured = Workers(ws_worker, gw.stream_url, 1)
        _wait(lambda: len(hub.consumers()) == others + 1, f"{others + 1} stream consumers")
        for w in (crowd, measured):
            w.arm(SINK_WARMUP, False)
        publish_to_hub(hub, SINK_WARMUP, SINK_RATE)
        crowd.collect()
        measured.collect()
        crowd.arm(count, False)
        measured.arm(count, True)
        took: list[int] = []
        publish_to_hub(hub, count, SINK_RATE, took)
        got = measured.collect()
        rest = crowd.collect()
        served = gw.server.call(lambda: sum(1 for c in hub.consumers() if c.sink_armed))
        lost = count * (others + 1) - sum(got["counts"]) - sum(rest["counts"])
        return {
            "samples": sorted(got["samples"]),
            "took": took,
            "count": count,
            "lost": lost,
            "served": served,
        }
    finally:
        for workers in (measured, crowd):
            if workers is not None:
                workers.close()
        gw.app.state.hub = None
        hub.close()


@scenario(
    SINK_SCENARIO,
    "one /v1/stream consumer beside 1, 10, 50 armed streams: the C stream sink off, "
    "uncapped and capped at 8",
    in_all=False,
)
def bench_sink_fanout(options: BenchOptions) -> list[Measurement]:
    """p50/p99 (publisher stamp -> the measured client, the last to connect) of one stream
    while N other streams of the same topic are open, and the ring writer's time per record
    (publish_batch, the sink's sends in it), at SINK_RATE msg/s one record a publish; the
    sink off, on without a cap and on with the default cap (api.stream_sink_max = 8: with
    N >= 8 the measured stream is on the router) alternate round by round."""
    counts = (1, 10) if options.quick else (1, 10, 50)
    seconds = 1.5 if options.quick else SINK_SECONDS
    reps = 1 if options.quick else min(options.repetitions, 3)
    contenders = [SINK_OFF, SINK_ON, SINK_CAP]
    gw = Gateway()
    results: list[Measurement] = []
    try:
        for n in counts:
            label = f"{n} other stream{'s' if n > 1 else ''}"
            series = {
                metric: {
                    c: Measurement(
                        SINK_SCENARIO, f"{label}: {metric}", c, unit, False, reference=c == SINK_OFF
                    )
                    for c in contenders
                }
                for metric, unit in (
                    ("latency p50", "us"),
                    ("latency p99", "us"),
                    ("writer time per record p50", "us"),
                    ("writer time per record p99", "us"),
                )
            }
            lost = dict.fromkeys(contenders, 0)
            for _, c in alternate(reps, contenders):
                out = _run_sink_fanout(gw, SINK_MAX[c], n, seconds)
                samples, took = out["samples"], sorted(out["took"])
                series["latency p50"][c].samples.append(_pct(samples, 50) / 1e3)
                series["latency p99"][c].samples.append(_pct(samples, 99) / 1e3)
                series["writer time per record p50"][c].samples.append(_pct(took, 50) / 1e3)
                series["writer time per record p99"][c].samples.append(_pct(took, 99) / 1e3)
                lost[c] += out["lost"]
                print(
                    f"[{SINK_SCENARIO}] {label:16} {c:38} p50 {_pct(samples, 50) / 1e3:7.0f} "
                    f"p99 {_pct(samples, 99) / 1e3:7.0f} us, writer {_pct(took, 50) / 1e3:5.1f}"
                    f" / {_pct(took, 99) / 1e3:6.1f} us a record, sink served "
                    f"{out['served']}/{n + 1}, lost {out['lost']}",
                    flush=True,
                )
            for c, m in series["latency p50"].items():
                m.note = f"{reps} rounds of {seconds:g} s at {SINK_RATE:g} msg/s" + (
                    f"; {lost[c]} deliveries missing" if lost[c] else ""
                )
            for by in series.values():
                results += by.values()
    finally:
        gw.close()
    return results


def _pct(ordered: list[int], p: float) -> float:
    if not ordered:
        return float("nan")
    return float(ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))])

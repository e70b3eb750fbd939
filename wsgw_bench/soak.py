"""`soak`: resident memory over a long stream through the whole gateway (issue #4: "resident
memory flat over a 10-minute stream, no growth beyond warm-up").

What runs, all real (no mocks), in this process unless said otherwise:

    lab namespace   the feed simulator (Binance dialect) on the kernel, TOPICS at RATE msg/s each
    this process    a DPDK port on the lab's veth (net_af_packet), the engine thread and its C
                    fast path, an upstream session in the Binance dialect over wsgw's own
                    TCP/IP stack (LiveRuntime + DpdkEngines, as `wsgw serve` builds them), the
                    hub writing the shared-memory ring, and the control plane (uvicorn,
                    /v1/stream) with one stream open
    child processes a ring reader and a /v1/stream client (envelopes), each checking that every
                    topic's simulator sequence numbers step by exactly one

This is the session hot path (frames parsed, dialect classified, messages published, routed,
serialised and sent), where the gateway's Python objects live, rather than bare TCP bytes
into the engine: a leak per message, per batch or per frame shows up here. The consumers run
in processes of their own so that the figures are the gateway's alone.

The process's memory is sampled every few seconds (/proc/self/status: VmRSS, and RssAnon,
the heap, where a leak goes; RssShmem holds the ring's pages, touched once within the
warm-up since the ring is small) with the count of objects the garbage collector tracks.
The warm-up (the first 10 % of the run, at least 30 s, at most half of it) is left out;
reported: RSS at the end of the warm-up, at the end, the max after the warm-up, and the
least-squares slope after the warm-up in KiB/min. Flat: slope below FLAT_SLOPE_KIB_MIN and
max minus warm-up-end within NOISE_MB.

Finding what grows: WSGW_SOAK_TRACE=1 starts tracemalloc at the end of the warm-up and
prints the 15 places whose Python allocations grew most by the end (slow: for diagnosis).

Duration: `--duration S`, else 20 s with --quick (a smoke test, too short to judge a
slope) and 10 minutes otherwise. Not part of `wsgw bench all`: `make soak` runs it.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import shutil
import subprocess
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from gateway.simulator.process import start_simulator
from wsgw_bench.core import BenchOptions, Measurement, scenario, unique_lab_name

SCENARIO = "soak"
TOPICS = ("btcusdt@trade", "ethusdt@trade", "solusdt@trade", "bnbusdt@depth")
SIM_PORT = 9460
RING_CAPACITY = 8 << 20  # small: all its pages are touched within the warm-up
FLAT_SLOPE_KIB_MIN = 64.0  # a leak of 1 byte per message at 1000 msg/s is 59 KiB/min
NOISE_MB = 2.0
CTX = mp.get_context("spawn")


# ---- the plan --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    duration: float
    interval: float  # between memory samples
    warmup: float
    rate: float  # simulator messages/s per topic


def plan_for(options: BenchOptions) -> Plan:
    duration = options.duration or (20.0 if options.quick else 600.0)
    warmup = min(max(0.1 * duration, 30.0), 0.5 * duration)
    interval = 1.0 if duration <= 120 else 5.0
    rate = 100.0 if options.quick else 500.0
    return Plan(duration, interval, warmup, rate)


# ---- memory --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the stream started
    rss_kb: int
    anon_kb: int
    shmem_kb: int
    objects: int  # objects the garbage collector tracks
    published: int  # messages the hub published so far
    lag: int  # messages waiting in the hub's consumer queues (this instant)


def memory_kb(status: str | None = None) -> dict[str, int]:
    """VmRSS, RssAnon, RssFile, RssShmem of this process, in KiB."""
    text = status if status is not None else Path("/proc/self/status").read_text()
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            out[key] = int(rest.split()[0])
    return out


def slope_per_minute(points: list[tuple[float, float]]) -> float:
    """The least-squares slope of (seconds, value) points, in value per minute."""
    n = len(points)
    if n < 2:
        return float("nan")
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return float("nan")
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return 60.0 * cov / var


@dataclass(frozen=True)
class Verdict:
    warm_kb: int  # RSS at the end of the warm-up (the last sample in it)
    end_kb: int
    max_kb: int  # after the warm-up
    slope_kib_min: float  # RSS
    late_slope_kib_min: float  # RSS, second half of the run only
    anon_slope_kib_min: float
    anon_growth_kb: int  # RssAnon, end minus warm-up end
    objects_growth: int
    samples: int

    @property
    def flat(self) -> bool:
        return (
            self.slope_kib_min < FLAT_SLOPE_KIB_MIN
            and (self.max_kb - self.warm_kb) / 1024 <= NOISE_MB
        )


def judge(samples: list[Sample], warmup: float) -> Verdict:
    """RSS figures after the warm-up (the warm-up's last sample is the baseline)."""
    warm = [s for s in samples if s.t <= warmup]
    after = [s for s in samples if s.t > warmup]
    if not warm or len(after) < 2:
        raise ValueError(f"too few samples after the warm-up ({len(after)})")
    base, end = warm[-1], after[-1]
    return Verdict(
        warm_kb=base.rss_kb,
        end_kb=end.rss_kb,
        max_kb=max(s.rss_kb for s in after),
        slope_kib_min=slope_per_minute([(s.t, float(s.rss_kb)) for s in after]),
        late_slope_kib_min=slope_per_minute(
            [(s.t, float(s.rss_kb)) for s in samples if s.t >= samples[-1].t / 2]
        ),
        anon_slope_kib_min=slope_per_minute([(s.t, float(s.anon_kb)) for s in after]),
        anon_growth_kb=end.anon_kb - base.anon_kb,
        # less the run's own bookkeeping: one Sample (a tracked object) per sample taken
        objects_growth=end.objects - base.objects - len(after),
        samples=len(after),
    )


# ---- consumers (child processes: spawn imports them by name) ----------------------------------
def sim_seq(payload: bytes | memoryview) -> int | None:
    """The simulator's per-topic sequence number of a data message (None: not one of its)."""
    raw = bytes(payload)
    at = raw.rfind(b'"sim_seq":')
    if at < 0:
        return None
    end = raw.index(b",", at)
    return int(raw[at + 10 : end])


class SeqCheck:
    """Every topic's simulator sequence numbers step by one (from the first one seen)."""

    def __init__(self) -> None:
        self.count = 0
        self.last: dict[str, int] = {}
        self.errors = 0
        self.first_error = ""

    def gap(self) -> None:
        """A gap event: the next number of every topic may jump."""
        self.last.clear()

    def see(self, topic: str, payload: bytes | memoryview) -> None:
        seq = sim_seq(payload)
        if seq is None:
            return  # not a data message of the simulator
        self.count += 1
        last = self.last.get(topic)
        if last is not None and seq != last + 1:
            self.errors += 1
            self.first_error = self.first_error or f"{topic}: {seq} after {last}"
        self.last[topic] = seq

    def report(self) -> dict[str, Any]:
        return {"count": self.count, "errors": self.errors, "first_error": self.first_error}


def ring_consumer_main(conn: Connection, ring: str, filters: list[str]) -> None:
    from dataplane.ring import Gap, RingReader

    check = SeqCheck()
    gaps = lapped = 0
    with RingReader.attach(ring, topics=filters, start="latest") as reader:
        conn.send("ready")
        while not conn.poll():
            for event in reader.read_batch(timeout=0.2):
                if isinstance(event, Gap):
                    lapped += event.lost
                elif event.topic == "$gap":
                    gaps += 1
                    check.gap()
                else:
                    check.see(event.topic, event.payload)
    conn.recv()
    conn.send({**check.report(), "gaps": gaps, "lapped": lapped})


def stream_consumer_main(conn: Connection, url: str) -> None:
    import orjson
    from websockets.sync.client import connect

    check = SeqCheck()
    gaps = 0
    closed = ""
    with connect(url, open_timeout=20, max_size=None) as ws:
        hello = orjson.loads(ws.recv(timeout=20))
        conn.send("ready" if hello.get("type") == "subscribed" else f"hello: {hello}")
        while not conn.poll():
            try:
                frame = orjson.loads(ws.recv(timeout=0.2))
            except TimeoutError:
                continue
            except Exception as exc:  # the gateway closed the stream
                closed = f"{type(exc).__name__}: {exc}"
                break
            if frame["type"] == "msg":
                check.see(frame["topic"], frame["payload"].encode())
            elif frame["type"] == "gap":
                gaps += 1
                check.gap()
    conn.recv()
    conn.send({**check.report(), "gaps": gaps, "closed": closed})


class Child:
    """A consumer process driven through a pipe: started, told to stop, asked for results."""

    def __init__(self, target: Any, *args: Any) -> None:
        self.conn, child = CTX.Pipe()
        self.proc = CTX.Process(target=target, args=(child, *args), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(60):
            self.close()
            raise RuntimeError(f"{target.__name__} did not start")
        ready = self.conn.recv()
        if ready != "ready":
            self.close()
            raise RuntimeError(f"{target.__name__}: {ready}")

    def results(self, timeout: float = 30.0) -> dict[str, Any]:
        self.conn.send("stop")
        if not self.conn.poll(timeout):
            raise RuntimeError("a consumer did not report")
        result: dict[str, Any] = self.conn.recv()
        return result

    def close(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(10)


# ---- the run -------------------------------------------------------------------------------


def wait_until(check: Any, what: str, timeout: float = 30.0) -> None:
    """Poll check() every 50 ms until it is true; RuntimeError after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _print_growth(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot) -> None:
    print("[soak] Python allocations that grew most after the warm-up (tracemalloc):")
    for stat in after.compare_to(before, "traceback")[:15]:
        print(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+8d} blocks")
        for line in stat.traceback.format()[-6:]:
            print(f"      {line}")


def _sample(start: float, hub: Any) -> Sample:
    mem = memory_kb()
    return Sample(
        time.monotonic() - start,
        mem.get("VmRSS", 0),
        mem.get("RssAnon", 0),
        mem.get("RssShmem", 0),
        len(gc.get_objects()),
        hub.published_total,
        sum(c.lag for c in hub.consumers()),
    )


@scenario(
    SCENARIO,
    "resident memory over a long stream: simulator -> DPDK session -> hub -> ring, /v1/stream",
    needs_root=True,
    in_all=False,
)
def soak(options: BenchOptions) -> list[Measurement]:
    from dataplane.ring import RingWriter
    from gateway.hub import Hub, ring_topics
    from gateway.lab import Lab
    from gateway.runtime import PortSpec, SessionSpec, SessionState
    from gateway.runtime.engines import DpdkEngines
    from gateway.runtime.live import LiveRuntime
    from gateway.settings import Settings
    from wsgw_bench.servers import ServerThread, gateway_app

    plan = plan_for(options)
    # A lab of its own: `wsgw bench` runs share the default name "bench", and another one
    # started meanwhile would take this lab down under a run this long.
    lab = Lab(unique_lab_name(options, "soak"))
    lab.down()
    ring_name = f"wsgw-soak{os.getpid()}-messages"
    state = Path(tempfile.mkdtemp(prefix="wsgw-soak-"))
    samples: list[Sample] = []
    outages: list[str] = []  # the first time the session was seen not connected
    trace = bool(os.environ.get("WSGW_SOAK_TRACE"))
    traced: tracemalloc.Snapshot | None = None
    children: list[Child] = []
    sim: subprocess.Popen[str] | None = None
    runtime: LiveRuntime | None = None
    server: ServerThread | None = None
    hub: Hub | None = None
    load_before = os.getloadavg()
    try:
        lab.up()
        sim = start_simulator(lab, SIM_PORT, plan.rate)
        hub = Hub(ring=RingWriter.create(ring_name, RING_CAPACITY, replace=True))
        app = gateway_app(state, hub, auth="none")
        server = ServerThread(app).start()
        service = app.state.control
        # The stream route looks the session up in the control plane's database.
        row = {"name": "soak", "url": "ws://198.18.0.1/", "dialect": "binance"}
        sid = service.sessions.create({**row, "transport": "kernel"}).id
        settings = Settings()
        runtime = LiveRuntime(hub, engine_factory=lambda: DpdkEngines(settings), hub=hub)
        runtime.port_up(
            PortSpec(1, "soak", lab.vdev, lab.gw_ip, lab.netmask, gateway=None, mtu=1500)
        )
        topics = ",".join(TOPICS)
        children.append(Child(ring_consumer_main, ring_name, ring_topics(sid, list(TOPICS))))
        children.append(
            Child(
                stream_consumer_main,
                f"{server.ws_url}/v1/stream?session={sid}&topics={topics}&envelope=1"
                "&queue_size=100000&consumer=soak",
            )
        )
        runtime.subscribe(sid, list(TOPICS))
        runtime.start_session(
            SessionSpec(
                sid, "soak", f"ws://{lab.peer_ip}:{SIM_PORT}/binance/stream", "binance", "dpdk", 1
            )
        )
        wait_until(lambda: hub is not None and hub.published_total > 0, "the first message")
        start = time.monotonic()
        print(
            f"[soak] {plan.duration:.0f} s at {plan.rate * len(TOPICS):.0f} msg/s, "
            f"RSS every {plan.interval:.0f} s, warm-up {plan.warmup:.0f} s",
            flush=True,
        )
        next_at = start
        progress_every = next_print = max(10.0, plan.duration / 20)
        while True:
            samples.append(s := _sample(start, hub))
            if not lab.exists():
                raise RuntimeError(f"lab {lab.name} was removed under the run (by whom?)")
            status = runtime.session_status(sid)
            if status.state is not SessionState.CONNECTED and not outages:
                outages.append(f"t={s.t:.0f} s {status.state.value}: {status.reason}")
                print(f"[soak] session not connected at t={s.t:.0f} s: {status.reason}")
            if s.t >= plan.duration:
                break
            if trace and s.t > plan.warmup and traced is None:
                tracemalloc.start(8)
                traced = tracemalloc.take_snapshot()
            if s.t >= next_print:
                next_print += progress_every
                print(
                    f"[soak] t={s.t:4.0f} s RSS {s.rss_kb / 1024:.1f} MB anon "
                    f"{s.anon_kb / 1024:.1f} MB objects {s.objects} published {s.published} "
                    f"consumer lag {s.lag} (max so far {max(x.lag for x in samples)})",
                    flush=True,
                )
            next_at += plan.interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        published = hub.published_total
        elapsed = samples[-1].t
        if traced is not None:
            _print_growth(traced, tracemalloc.take_snapshot())
            tracemalloc.stop()
        counters = runtime.sessions_snapshot().get(sid, {}).get("counters", {})
        runtime.stop_session(sid)
        wait_until(
            lambda: (
                runtime is not None and runtime.session_status(sid).state is SessionState.STOPPED
            ),
            "the session to stop",
        )
        time.sleep(0.5)  # the last messages reach the consumers
        total = hub.published_total
        ring_result = children[0].results()
        stream_result = children[1].results()
    finally:
        for child in children:
            child.close()
        if runtime is not None:
            runtime.close()
        if server is not None:
            server.stop()
        if hub is not None:
            hub.close()
        if sim is not None:
            sim.kill()
            sim.wait()
        lab.down()
        shutil.rmtree(state, ignore_errors=True)
    verdict = judge(samples, plan.warmup)
    return _measurements(
        plan,
        verdict,
        samples,
        elapsed,
        published,
        total,
        ring_result,
        stream_result,
        counters,
        outages,
        load_before,
    )


def _measurements(
    plan: Plan,
    v: Verdict,
    samples: list[Sample],
    elapsed: float,
    published: int,
    total: int,
    ring: dict[str, Any],
    stream: dict[str, Any],
    counters: dict[str, Any],
    outages: list[str],
    load_before: tuple[float, float, float],
) -> list[Measurement]:
    problems = [
        f"{name}: {r['errors']} sequence breaks (first: {r['first_error']})"
        for name, r in (("ring", ring), ("stream", stream))
        if r["errors"]
    ]
    problems += [f"ring reader lapped: {ring['lapped']} lost"] if ring["lapped"] else []
    problems += [f"stream closed: {stream['closed']}"] if stream.get("closed") else []
    if problems:
        raise RuntimeError("soak: data check failed: " + "; ".join(problems))
    if min(ring["count"], stream["count"]) < 0.99 * total:
        raise RuntimeError(
            f"soak: consumers got {ring['count']} (ring) and {stream['count']} (stream) "
            f"of {total} messages"
        )
    who = "gateway process (engine, session, hub, API)"

    def m(metric: str, unit: str, value: float, note: str = "") -> Measurement:
        return Measurement(SCENARIO, metric, who, unit, False, [value], note=note)

    load_after = os.getloadavg()
    verdict = "flat" if v.flat else "NOT flat"
    if elapsed < 300:
        verdict += " (too short a run to judge: a smoke test)"
    reconnects = counters.get("reconnects") or 0
    summary = (
        (f"{reconnects} upstream reconnects (first: {outages[0]}); " if outages else "")
        + f"{verdict}; flat means slope < {FLAT_SLOPE_KIB_MIN:.0f} KiB/min and max - warm-up "
        f"end <= {NOISE_MB:.0f} MB; {elapsed:.0f} s, warm-up {plan.warmup:.0f} s excluded, "
        f"{v.samples} samples after it every {plan.interval:.0f} s; load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after"
    )
    return [
        m("RSS at the end of the warm-up", "MB", v.warm_kb / 1024),
        m("RSS at the end", "MB", v.end_kb / 1024),
        m("RSS max after the warm-up", "MB", v.max_kb / 1024),
        m("RSS slope after the warm-up", "KiB/min", v.slope_kib_min, summary),
        m(
            "RSS slope, second half of the run",
            "KiB/min",
            v.late_slope_kib_min,
            "leaves out bounded buffers still filling after the warm-up (allocator arenas, "
            "caches); the latency sample buffers are allocated up front",
        ),
        m("RssAnon slope after the warm-up", "KiB/min", v.anon_slope_kib_min),
        m("RssAnon growth after the warm-up", "MB", v.anon_growth_kb / 1024),
        m(
            "gc-tracked objects growth after the warm-up",
            "objects",
            float(v.objects_growth),
            "less the soak's own samples (one object each); bytes and ints are not tracked",
        ),
        Measurement(
            SCENARIO,
            "messages through the hub",
            who,
            "msg/s",
            True,
            [published / elapsed],
            note=(
                f"{total} published; ring reader got {ring['count']}, /v1/stream "
                f"{stream['count']}, every topic in order (gaps: ring {ring['gaps']}, stream "
                f"{stream['gaps']}); session counters "
                f"{ {k: counters.get(k) for k in ('messages', 'reconnects', 'gaps')} }"
            ),
        ),
    ]

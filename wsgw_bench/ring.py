"""`ring`: the shared-memory message ring, write+read in ns/op and messages/s.

Contenders, for 100 B and 1460 B payloads, one reader:
- C loop: wsgw_ring_bench_* loop inside C (the ring's own cost, no FFI per call);
- Python API: RingWriter.write_columns + RingReader.read_batch (what the engine and a Python
  consumer pay per message, FFI and object creation included);
each in-process (writer and reader alternate in one thread) and cross-process (a spawned
reader process, end to end: from the writer's first write to the reader's last message).

The writer never waits for readers, so the cross-process rings are sized to hold the whole
run: a reader slower than the writer would otherwise be lapped and the rate would count
messages it never got. Messages lost anyway are reported in the note.

Latency (issue #7: the ring adds at most 5 us, p99), per reader wait policy (futex, the
default; spin LAT_SPIN_US then futex; busy spin): a C writer (`bench_c_pace`) publishes 100 B
messages at a paced rate (20k and 100k msg/s), each stamped with CLOCK_REALTIME right before
it is published; a C reader in another process (`bench_c_latency`) stamps each on receipt and
keeps the difference, so no Python runs on either side of the measured path. p50/p99/p99.9
of publish -> receipt, and the reading thread's CPU% over the run (a spinning reader takes
a core: that is the price of the latency). The first LAT_WARMUP of each run is left out.
The same runs with a Python reader (RingReader.read_batch with the policy, time.time_ns()
once per batch) show what a Python consumer gets on top.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from wsgw_bench.core import BenchOptions, Measurement, alternate, format_value

SCENARIO = "ring"
SIZES = (100, 1460)
C_LOOP = "C loop (wsgw_ring_bench_*)"
PY_API = "Python API (batches of 256)"
#: The previous C client's published ring figure, quoted next to ours, never measured here.
PUBLISHED = "old C client (published, not measured here): ring SP/SC 26.8 Gbps at 1460 B, 2.3 Mpps"
PY_BATCH = 256
C_BATCH = 32
LAT_RATES = (20_000, 100_000)
LAT_SPIN_US = 100
FUTEX, SPIN, BUSY = "futex (default)", f"spin {LAT_SPIN_US} us then futex", "busy spin"
LAT_POLICIES = {FUTEX: "futex", SPIN: f"spin:{LAT_SPIN_US}", BUSY: "busy"}
LAT_TARGET_US = 5.0
LAT_WARMUP = 0.01  # share of each run's first messages left out (page faults, caches)


def _counts(options: BenchOptions, size: int) -> tuple[int, int]:
    """(messages in-process, messages cross-process) for a payload size."""
    if options.quick:
        return (200_000, 50_000) if size <= 256 else (50_000, 20_000)
    return (2_000_000, 200_000) if size <= 256 else (500_000, 50_000)


def _ring_for(count: int, size: int) -> int:
    """A power-of-two capacity that holds count records of size bytes (at least 1 MiB)."""
    from dataplane.ring import record_size

    need = max(1 << 20, count * record_size(size))
    return 1 << (need - 1).bit_length()


def _name(tag: str) -> str:
    return f"wsgw-bench-{os.getpid()}-{tag}"


# ---- the reader process ---------------------------------------------------------------------
def _reader_server(conn: Connection) -> None:
    """Runs in a spawned process: for each ("c" | "py", ring, count), attach, say ready, read
    count messages, answer (delivered, lost, bytes, monotonic ns at the last message)."""
    from dataplane.ring import Gap, RingReader, bench_c_latency, bench_c_read

    while True:
        cmd = conn.recv()
        if cmd is None:
            return
        kind, name, count = cmd[:3]
        with RingReader.attach(name, start="oldest", max_batch=1024) as reader:
            conn.send("ready")
            if kind == "pylat":
                conn.send(_python_latency(reader, count, cmd[3]))
                continue
            if kind == "lat":
                res = bench_c_latency(reader, count, 60.0, cmd[3])
                conn.send(
                    {
                        "latencies": res.latencies_ns,
                        "lost": res.lost,
                        "cpu_percent": res.cpu_percent,
                        "disorder": res.disorder,
                        "timed_out": res.timed_out,
                        "wakeups": res.wakeups,
                        "spin_hits": res.spin_hits,
                        "preempted": res.preempted,
                    }
                )
                continue
            if kind == "c":
                delivered, lost, nbytes, _ = bench_c_read(reader, count, 60.0)
            else:
                delivered = lost = nbytes = 0
                while delivered + lost < count:
                    events = reader.read_batch(timeout=10.0)
                    if not events:
                        break
                    for event in events:
                        if isinstance(event, Gap):
                            lost += event.lost
                        else:
                            delivered += 1
                            nbytes += len(event.payload)
            done = time.monotonic_ns()
        conn.send((delivered, lost, nbytes, done))


def _python_latency(reader: Any, count: int, policy: str) -> dict[str, Any]:
    """The Python side of a latency run: read_batch with the wait policy, stamp per batch."""
    import resource

    from dataplane.ring import Gap, RingReader, WaitPolicy

    r: RingReader = reader
    r.wait_policy = WaitPolicy.parse(policy)
    latencies: list[int] = []
    lost = disorder = 0
    expect = 0
    deadline = time.monotonic() + 60.0
    cpu0 = wall0 = switches0 = 0
    while len(latencies) + lost < count and time.monotonic() < deadline:
        events = r.read_batch(min(1024, count - len(latencies) - lost), timeout=1.0)
        now = time.time_ns()
        if events and not wall0:
            cpu0, wall0 = time.thread_time_ns(), time.monotonic_ns()
            switches0 = resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw
        for event in events:
            if isinstance(event, Gap):
                lost += event.lost
                expect = event.first_seq + event.lost
                continue
            disorder += bool(expect) and event.seq != expect
            expect = event.seq + 1
            latencies.append(now - event.ts_ns)
    cpu, wall = time.thread_time_ns() - cpu0, time.monotonic_ns() - wall0
    switches = resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw - switches0 if wall0 else 0
    return {
        "preempted": switches,
        "latencies": latencies,
        "lost": lost,
        "cpu_percent": 100.0 * cpu / wall if wall0 and wall else 0.0,
        "disorder": disorder,
        "timed_out": len(latencies) + lost < count,
    }


class _ReaderProcess:
    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_reader_server, args=(child,), daemon=True)
        self.proc.start()
        child.close()

    def run(self, kind: str, name: str, count: int, write: Callable[[], None]) -> dict[str, Any]:
        self.conn.send((kind, name, count))
        if not self.conn.poll(60) or self.conn.recv() != "ready":
            raise RuntimeError("ring bench reader did not attach")
        start = time.monotonic_ns()
        write()
        if not self.conn.poll(120):
            raise RuntimeError("ring bench reader did not finish")
        delivered, lost, nbytes, done = self.conn.recv()
        return {"delivered": delivered, "lost": lost, "bytes": nbytes, "ns": done - start}

    def latency(
        self, kind: str, name: str, count: int, policy: str, write: Callable[[], None]
    ) -> Any:
        self.conn.send((kind, name, count, policy))
        if not self.conn.poll(60) or self.conn.recv() != "ready":
            raise RuntimeError("ring bench reader did not attach")
        write()
        if not self.conn.poll(120):
            raise RuntimeError("ring bench reader did not finish")
        return self.conn.recv()

    def close(self) -> None:
        try:
            self.conn.send(None)
        finally:
            self.proc.join(10)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5)


# ---- the measurements ---------------------------------------------------------------------
def _python_write(writer: Any, size: int, count: int) -> Callable[[], None]:
    payloads = [os.urandom(size)] * PY_BATCH
    sessions = [1] * PY_BATCH
    topics = [0] * PY_BATCH

    def write() -> None:
        for done in range(0, count, PY_BATCH):
            n = min(PY_BATCH, count - done)
            writer.write_columns(sessions[:n], topics[:n], payloads[:n])

    return write


def _in_process(kind: str, size: int, count: int) -> float:
    """ns per message written and read, writer and reader alternating in this thread."""
    from dataplane.ring import RingReader, RingWriter, bench_c_write_read

    name = _name(f"in-{kind}-{size}")
    with (
        RingWriter.create(name, 1 << 22, replace=True) as writer,
        RingReader.attach(name, max_batch=PY_BATCH) as reader,
    ):
        if kind == "c":
            return bench_c_write_read(writer, reader, size, count, C_BATCH) / count
        payloads = [os.urandom(size)] * PY_BATCH
        sessions, topics = [1] * PY_BATCH, [0] * PY_BATCH
        got = 0
        start = time.perf_counter_ns()
        for _ in range(count // PY_BATCH):
            writer.write_columns(sessions, topics, payloads)
            got += len(reader.read_batch(PY_BATCH))
        elapsed = time.perf_counter_ns() - start
        assert got == count // PY_BATCH * PY_BATCH, "in-process reader missed messages"
        return elapsed / got


def _cross_process(reader: _ReaderProcess, kind: str, size: int, count: int) -> dict[str, Any]:
    from dataplane.ring import RingWriter, bench_c_write

    name = _name(f"x-{kind}-{size}")
    with RingWriter.create(name, _ring_for(count, size), replace=True) as writer:
        if kind == "c":

            def write() -> None:
                bench_c_write(writer, size, count, C_BATCH)

        else:
            write = _python_write(writer, size, count)
        return reader.run(kind, name, count, write)


def _percentile(ordered: list[int], q: float) -> float:
    """The q-quantile (nearest rank) of sorted ns samples, in us."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] / 1e3


def _latency_run(
    reader: _ReaderProcess, kind: str, policy: str, rate: int, count: int
) -> dict[str, Any]:
    """One paced run: a C writer here, a reader ("lat": C, "pylat": Python) with `policy` in
    the reader process."""
    from dataplane.ring import RingWriter, bench_c_pace

    name = _name(f"{kind}-{policy.replace(':', '')}-{rate}")
    with RingWriter.create(name, _ring_for(count, 100), replace=True) as writer:
        paced: list[Any] = []
        got = reader.latency(
            kind, name, count, policy, lambda: paced.append(bench_c_pace(writer, 100, count, rate))
        )
    samples = got["latencies"][max(1, int(count * LAT_WARMUP)) :]
    if got["disorder"] or got["timed_out"] or not samples:
        raise RuntimeError(f"ring latency run ({policy}, {rate} msg/s) went wrong: {got}")
    ordered = sorted(samples)
    return {
        "p50": _percentile(ordered, 0.50),
        "p99": _percentile(ordered, 0.99),
        "p999": _percentile(ordered, 0.999),
        "cpu": got["cpu_percent"],
        "preempted": got["preempted"],
        "lost": got["lost"],
        "publishes": paced[0].publishes,
    }


def bench_latency(options: BenchOptions, reader: _ReaderProcess) -> list[Measurement]:
    """Publish -> receipt latency per wait policy and rate, and the reader's CPU (module doc)."""
    results: list[Measurement] = []
    seconds = 0.5 if options.quick else 2.0
    for rate, kind in ((r, k) for k in ("lat", "pylat") for r in LAT_RATES):
        count = int(rate * seconds)
        label = f"{rate // 1000}k msg/s"
        reader_kind = "C" if kind == "lat" else "Python reader"

        def series(
            what: str, unit: str, label: str = label, reader_kind: str = reader_kind
        ) -> dict[str, Measurement]:
            return {
                c: Measurement(
                    SCENARIO,
                    f"publish->receipt {what} at {label}, cross-process ({reader_kind})",
                    c,
                    unit,
                    False,
                    reference=c == FUTEX,
                )
                for c in LAT_POLICIES
            }

        p50, p99, p999 = series("p50", "us"), series("p99", "us"), series("p99.9", "us")
        cpu = series("reader CPU", "%")
        lost = dict.fromkeys(LAT_POLICIES, 0)
        publishes = dict.fromkeys(LAT_POLICIES, 0)
        preempted: dict[str, list[int]] = {c: [] for c in LAT_POLICIES}
        for _, contender in alternate(options.repetitions, list(LAT_POLICIES)):
            out = _latency_run(reader, kind, LAT_POLICIES[contender], rate, count)
            p50[contender].samples.append(out["p50"])
            p99[contender].samples.append(out["p99"])
            p999[contender].samples.append(out["p999"])
            cpu[contender].samples.append(out["cpu"])
            lost[contender] += out["lost"]
            publishes[contender] += out["publishes"]
            preempted[contender].append(out["preempted"])
        meets = [c for c in LAT_POLICIES if p99[c].median <= LAT_TARGET_US]
        verdict = (
            f"p99 <= {LAT_TARGET_US:g} us met by "
            + ", ".join(f"{c} (reader CPU {format_value(cpu[c].median, '%')})" for c in meets)
            if meets
            else f"p99 <= {LAT_TARGET_US:g} us met by no policy"
        )
        misses = [c for c in LAT_POLICIES if c not in meets]
        if misses:
            verdict += "; not by " + ", ".join(
                f"{c} (p99 {format_value(p99[c].median, 'us')}, "
                f"CPU {format_value(cpu[c].median, '%')})"
                for c in misses
            )
        for c in LAT_POLICIES:
            notes = [
                f"{count} msgs of 100 B per run, {publishes[c] / options.repetitions:.0f} "
                f"publishes (late wake-ups batch), first {LAT_WARMUP:.0%} left out"
            ]
            if lost[c]:
                notes.append(f"{lost[c]} messages lost (reader lapped)")
            p50[c].note = "; ".join(notes)
            # What a spinning reader's tail is made of: the runs where the scheduler took its
            # CPU away (others' work on a shared machine, or the writer waking on its core).
            per_run = ", ".join(
                f"{format_value(v, 'us')} ({k})"
                for v, k in zip(p99[c].samples, preempted[c], strict=True)
            )
            p99[c].note = f"per run: p99 (times the reader was preempted): {per_run}"
        p99[FUTEX].note += "; " + verdict
        results += [*p50.values(), *p99.values(), *p999.values(), *cpu.values()]
    return results


def bench_ring(options: BenchOptions) -> list[Measurement]:
    """The ring's write+read cost and rate, in-process and cross-process (see module doc)."""
    results: list[Measurement] = []
    contenders = {"c": C_LOOP, "py": PY_API}
    reader = _ReaderProcess()
    try:
        for size in SIZES:
            n_in, n_x = _counts(options, size)

            def series(
                what: str, unit: str, higher: bool, size: int = size
            ) -> dict[str, Measurement]:
                return {
                    kind: Measurement(
                        SCENARIO,
                        f"{size} B {what}",
                        contender,
                        unit,
                        higher,
                        reference=(kind == "c"),
                    )
                    for kind, contender in contenders.items()
                }

            in_ns = series("in-process, write+read", "ns/op", False)
            in_rate = series("in-process, rate", "msg/s", True)
            x_ns = series("cross-process, write+read", "ns/op", False)
            x_rate = series("cross-process, rate", "msg/s", True)
            x_bits = series("cross-process, payload", "bit/s", True)
            lost = dict.fromkeys(contenders, 0)
            for _, kind in alternate(options.repetitions, list(contenders)):
                ns = _in_process(kind, size, n_in)
                in_ns[kind].samples.append(ns)
                in_rate[kind].samples.append(1e9 / ns)
                x = _cross_process(reader, kind, size, n_x)
                lost[kind] += x["lost"]
                x_ns[kind].samples.append(x["ns"] / n_x)
                x_rate[kind].samples.append(x["delivered"] / x["ns"] * 1e9)
                x_bits[kind].samples.append(x["bytes"] * 8 / x["ns"] * 1e9)
            for kind in contenders:
                notes = [f"{lost[kind]} messages lost (reader lapped)"] if lost[kind] else []
                if kind == "c" and size == 1460:
                    notes.append(PUBLISHED)
                x_rate[kind].note = "; ".join(notes)
            for group in (in_ns, in_rate, x_ns, x_rate, x_bits):
                results += group.values()
        results += bench_latency(options, reader)
    finally:
        reader.close()
    return results

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
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from gateway.bench.core import BenchOptions, Measurement, alternate

SCENARIO = "ring"
SIZES = (100, 1460)
C_LOOP = "C loop (wsgw_ring_bench_*)"
PY_API = "Python API (batches of 256)"
#: The previous C client's published ring figure, quoted next to ours, never measured here.
PUBLISHED = "old C client (published, not measured here): ring SP/SC 26.8 Gbps at 1460 B, 2.3 Mpps"
PY_BATCH = 256
C_BATCH = 32


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
    from dataplane.ring import Gap, RingReader, bench_c_read

    while True:
        cmd = conn.recv()
        if cmd is None:
            return
        kind, name, count = cmd
        with RingReader.attach(name, start="oldest", max_batch=1024) as reader:
            conn.send("ready")
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
    finally:
        reader.close()
    return results

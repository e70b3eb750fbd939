"""Where a ring reader's wake-up costs (issue #16): a ring write -> the reader's code, for
where the reader sleeps relative to the writer and for the guest's haltpoll window,
contenders alternated in one run.

    python -m wsgw_bench.wake [--rates 100,1000,10000] [--seconds 2] [--rounds 3]
        [--contenders "same cpu;other cpu;other cpu, halt poll 200 us"]

A C writer thread (`bench_c_pace`, as the engines' C feeds write in their poll) pinned to
WRITER_CPU publishes 100 B records at the rate, each stamped with CLOCK_REALTIME right
before the write; a reader in another process (`bench_c_latency`: C, no Python on the
measured path) with the futex policy, pinned to the writer's CPU ("same cpu", what
`Client.attach(cpu="engine")` does) or to the other one ("other cpu": an idle vCPU woken by
an IPI, in a VM an exit to the host and back), takes the receipt stamp. "halt poll N us"
sets the guest's haltpoll window (/sys/module/haltpoll/parameters/guest_halt_poll_ns: the
idle vCPU polls that long before it halts, so a wake-up inside it needs no exit) for its
turn only and puts the old value back whatever happens. Prints p50/p99 per contender and
rate and the reader's CPU; figures are for reading, the machine's load moves them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from wsgw_bench.core import alternate

HALT_POLL_NS = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
WRITER_CPU = 1
CTX = mp.get_context("spawn")


@contextlib.contextmanager
def halt_poll_window(ns: int, path: Path = HALT_POLL_NS) -> Iterator[int]:
    """The guest haltpoll governor's longest poll before a halt set to `ns` for the block;
    the previous value comes back however the block ends. Yields the previous value."""
    before = int(path.read_text())
    path.write_text(f"{ns}\n")
    try:
        yield before
    finally:
        path.write_text(f"{before}\n")


@dataclass(frozen=True)
class Placement:
    reader_cpu: int | None  # None: wherever the scheduler puts it
    halt_poll_ns: int | None = None  # None: the host's value, untouched
    wait: str = "futex"
    client: bool = False  # read with gateway.client.Client as a consumer does, not in C
    fused: bool = True  # the client's read waits and reads in one C call (issue #16)
    #: The reader's waiting thread's scheduler slice (Client.attach slice_ns, RingReader's):
    #: None, the default: the thread's own (the kernel's 1.4 ms).
    slice_ns: int | None = None
    #: A process spinning on the reader's CPU for the run (a busy neighbour: the woken
    #: reader either preempts it or queues behind its slice).
    hog: bool = False
    #: Read with `await client.aread()` on an asyncio loop (its wait in the client's thread).
    aio: bool = False


PLACEMENTS = {
    "same cpu": Placement(WRITER_CPU),
    "other cpu": Placement(1 - WRITER_CPU),
    "unpinned": Placement(None),
    "other cpu, halt poll 200 us": Placement(1 - WRITER_CPU, 200_000),
    "same cpu, halt poll 200 us": Placement(WRITER_CPU, 200_000),
    "other cpu, adaptive": Placement(1 - WRITER_CPU, wait="adaptive"),
    "unpinned, adaptive": Placement(None, wait="adaptive"),
    "other cpu, spin 100 us": Placement(1 - WRITER_CPU, wait="spin:100"),
    "same cpu, python client": Placement(WRITER_CPU, client=True),
    "other cpu, python client": Placement(1 - WRITER_CPU, client=True),
    "unpinned, python client": Placement(None, client=True),
    # The client as before wsgw_ring_read_wait: a wait call, then a read call.
    "same cpu, python client, wait then read": Placement(WRITER_CPU, client=True, fused=False),
    "other cpu, python client, wait then read": Placement(1 - WRITER_CPU, client=True, fused=False),
    "unpinned, python client, wait then read": Placement(None, client=True, fused=False),
    # The waiting thread's slice (session 13): 100 us against the kernel's (the default),
    # alone and with a busy neighbour on the reader's CPU; the adaptive spin's cost.
    "unpinned, python client, slice 100 us": Placement(None, client=True, slice_ns=100_000),
    "other cpu, python client, hog": Placement(1 - WRITER_CPU, client=True, hog=True),
    "other cpu, python client, hog, slice 100 us": Placement(
        1 - WRITER_CPU, client=True, slice_ns=100_000, hog=True
    ),
    "unpinned, python client, adaptive:30": Placement(None, wait="adaptive:30", client=True),
    "other cpu, hog, slice 100 us": Placement(1 - WRITER_CPU, slice_ns=100_000, hog=True),
    "other cpu, hog": Placement(1 - WRITER_CPU, hog=True),
    # Client.aread: the waiting thread reads and hands the batch over (fused_aread), against
    # the waiting thread waking the loop to read (fused=False: the path before session 13).
    "unpinned, asyncio client": Placement(None, client=True, aio=True),
    "unpinned, asyncio client, wait then read": Placement(None, client=True, aio=True, fused=False),
}


def hog_main(cpu: int) -> None:
    """Spin on `cpu` until killed (a neighbour that never sleeps)."""
    os.sched_setaffinity(0, {cpu})
    while True:
        pass


def client_latencies(
    ring: str,
    count: int,
    wait: str,
    conn: Connection,
    fused: bool = True,
    slice_ns: int | None = None,
    aio: bool = False,
) -> tuple[list[int], list[int]]:
    """What the feed bench's ring consumer does: Client.read, time.time_ns() first thing
    after it returns, minus each record's write stamp. Also, per batch that waited, the
    time from the wake-up to that first line: the C stamp of wsgw_ring_read_wait (fused),
    else the stamp Python takes right after the wait call returns. aio: the same through
    `await client.aread()` (fused: Client.fused_aread; the old path has no wake stamp)."""
    from gateway.client import Client, RingMessage
    from gateway.client.ring import RingSource

    latencies: list[int] = []
    after_wake: list[int] = []
    with Client.attach(ring, wait=wait, slice_ns=slice_ns) as client:
        assert isinstance(client.source, RingSource)
        reader = client.source.reader
        reader.fused_wait = fused
        woke = [0]
        if not fused:
            plain_wait = reader.wait

            def stamped_wait(timeout: float | None = None, spin: float | None = None) -> bool:
                ready = plain_wait(timeout, spin)
                woke[0] = time.time_ns()
                return ready

            reader.wait = stamped_wait  # type: ignore[method-assign]
        if aio:
            client.fused_aread = fused
            conn.send("ready")
            return asyncio.run(_aread_latencies(client, count))
        conn.send("ready")
        while len(latencies) < count:
            woke[0] = 0
            events = client.read(timeout=5.0)
            now = time.time_ns()
            if not events:
                break
            latencies.extend(now - e.ts_ns for e in events if type(e) is RingMessage)
            stamp = reader.woke_ns if fused else woke[0]
            if stamp:
                after_wake.append(now - stamp)
    return latencies, after_wake


async def _aread_latencies(client: Any, count: int) -> tuple[list[int], list[int]]:
    from gateway.client import RingMessage

    reader = client.source.reader
    latencies: list[int] = []
    after_wake: list[int] = []
    while len(latencies) < count:
        events = await client.aread(timeout=5.0)
        now = time.time_ns()
        if not events:
            break
        latencies.extend(now - e.ts_ns for e in events if type(e) is RingMessage)
        if client.fused_aread and reader.woke_ns:
            after_wake.append(now - reader.woke_ns)
    return latencies, after_wake


def reader_main(conn: Connection) -> None:
    """Serve latency runs: ("run", ring, count, cpu, wait) -> the C reader's result."""
    from dataplane.ring import RingReader, bench_c_latency

    while True:
        cmd = conn.recv()
        if cmd is None:
            return
        _, ring, count, cpu, wait, client, fused, slice_ns, aio = cmd
        os.sched_setaffinity(0, {cpu} if cpu is not None else set(range(os.cpu_count() or 1)))
        if client:
            # asyncio: the loop's thread and the client's waiting thread, the whole process
            cpu_ns = time.process_time_ns if aio else time.thread_time_ns
            cpu0, wall0 = cpu_ns(), time.monotonic_ns()
            lat, after_wake = client_latencies(ring, count, wait, conn, fused, slice_ns, aio)
            cpu_pct = 100 * (cpu_ns() - cpu0) / (time.monotonic_ns() - wall0)
            conn.send((lat, cpu_pct, count - len(lat), after_wake))
            continue
        with RingReader.attach(ring, wait=wait, slice_ns=slice_ns) as reader:
            reader.hold_slice()  # the C loop waits without read_batch: take it here
            conn.send("ready")
            res = bench_c_latency(reader, count, 60.0)
        conn.send((res.latencies_ns, res.cpu_percent, res.lost, []))


def one_run(conn: Connection, placement: Placement, rate: float, seconds: float) -> dict[str, Any]:
    from dataplane.ring import RingWriter, bench_c_pace

    count = max(50, int(rate * seconds))
    name = f"wsgw-wake{os.getpid()}"
    with contextlib.ExitStack() as undo:
        if placement.halt_poll_ns is not None:
            undo.enter_context(halt_poll_window(placement.halt_poll_ns))
        writer = undo.enter_context(RingWriter.create(name, 16 << 20, replace=True))
        if placement.hog:
            assert placement.reader_cpu is not None, "a hog needs the reader's CPU"
            hog = CTX.Process(target=hog_main, args=(placement.reader_cpu,), daemon=True)
            hog.start()
            undo.callback(hog.join, 10)
            undo.callback(hog.kill)
        conn.send(
            (
                "run",
                name,
                count,
                placement.reader_cpu,
                placement.wait,
                placement.client,
                placement.fused,
                placement.slice_ns,
                placement.aio,
            )
        )
        if not conn.poll(30) or conn.recv() != "ready":
            raise RuntimeError("the reader did not attach")

        def write() -> None:
            os.sched_setaffinity(0, {WRITER_CPU})
            bench_c_pace(writer, 100, count, rate)

        t = threading.Thread(target=write, daemon=True)
        t.start()
        t.join()
        if not conn.poll(60):
            raise RuntimeError("the reader did not finish")
        lat, cpu, lost, after_wake = conn.recv()
    ordered = sorted(lat[max(1, count // 10) :])
    woken = sorted(after_wake[len(after_wake) // 10 :])
    return {
        "p50": ordered[len(ordered) // 2] / 1e3,
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] / 1e3,
        "cpu": cpu,
        "lost": lost,
        # wake-up -> the consumer's code, per batch that waited (Python clients only)
        "wake_p50": woken[len(woken) // 2] / 1e3 if woken else float("nan"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m wsgw_bench.wake", description=__doc__)
    parser.add_argument("--rates", default="100,1000,10000")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--contenders", default="same cpu;other cpu;other cpu, halt poll 200 us")
    args = parser.parse_args(argv)
    names = [c.strip() for c in args.contenders.split(";") if c.strip()]
    rates = [float(r) for r in args.rates.split(",")]
    conn, child = CTX.Pipe()
    proc = CTX.Process(target=reader_main, args=(child,), daemon=True)
    proc.start()
    results: dict[tuple[str, float], list[dict[str, Any]]] = {}
    try:
        for _, name in alternate(args.rounds, names):
            for rate in rates:
                out = one_run(conn, PLACEMENTS[name], rate, args.seconds)
                results.setdefault((name, rate), []).append(out)
                print(
                    f"{name:32} {rate:>7.0f} msg/s p50 {out['p50']:7.1f} p99 "
                    f"{out['p99']:8.1f} us wake->code p50 {out['wake_p50']:6.1f} us "
                    f"cpu {out['cpu']:.0f}%",
                    flush=True,
                )
    finally:
        conn.send(None)
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    print("medians:")
    for rate in rates:
        for name in names:
            runs = results.get((name, rate), [])
            if runs:
                keys = ("p50", "p99", "cpu", "wake_p50")
                med = {k: statistics.median(r[k] for r in runs) for k in keys}
                print(
                    f"{rate:>7.0f} msg/s {name:32} p50 {med['p50']:7.1f} p99 "
                    f"{med['p99']:8.1f} us wake->code p50 {med['wake_p50']:6.1f} us "
                    f"reader cpu {med['cpu']:.0f}%",
                    flush=True,
                )


if __name__ == "__main__":
    main()

"""The ring across processes (multiprocessing spawn): readers at full rate, a reader stopped
on purpose, readers and a writer killed with SIGKILL, futex wake-ups, memfd passing."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from multiprocessing.context import SpawnProcess
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import pytest

from dataplane.ring import SHM_DIR, Gap, RingMessage, RingReader, RingWriter, record_size
from gateway.client import Client
from tests.integration.conftest import spawn

CTX = mp.get_context("spawn")


def payload_for(seq: int, length: int) -> bytes:
    return (seq.to_bytes(8, "little") * (length // 8 + 1))[:length]


def length_for(seq: int, limit: int) -> int:
    return (seq * 2654435761) % limit


pytestmark = pytest.mark.usefixtures("no_shm_leftovers")


@pytest.fixture
def name(ring_name: str) -> str:
    return ring_name


# ---- processes (module level: spawn imports them by name) -----------------------------------
def reader_proc(
    name: str,
    total: int,
    length_limit: int,
    ready: Event,
    results: Queue[dict[str, Any]],
    progress: Synchronized[int] | None = None,
    slow: bool = False,
) -> None:
    """Read until `total` messages were delivered or lost (or the ring closed); check order
    and every byte; report a summary."""
    reader = RingReader.attach(name, start="oldest", max_batch=512)
    ready.set()
    expect = 1
    delivered = lost = bad_order = bad_content = 0
    gaps: list[tuple[int, int]] = []
    first_after_gap: list[int] = []
    while expect <= total:
        events = reader.read_batch(timeout=10.0)
        if not events:
            if reader.closed:
                break
            continue
        for event in events:
            if isinstance(event, Gap):
                if event.first_seq != expect:
                    bad_order += 1
                gaps.append((event.first_seq, event.lost))
                lost += event.lost
                expect = event.first_seq + event.lost
                first_after_gap.append(expect)
                continue
            if event.seq != expect:
                bad_order += 1
            if bytes(event.payload) != payload_for(event.seq, length_for(event.seq, length_limit)):
                bad_content += 1
            expect = event.seq + 1
            delivered += 1
        if progress is not None:
            progress.value = expect - 1
        if slow:
            time.sleep(0.0005)
    results.put(
        {
            "pid": os.getpid(),
            "delivered": delivered,
            "lost": lost,
            "gaps": gaps,
            "bad_order": bad_order,
            "bad_content": bad_content,
            "next": expect,
            "stats": reader.stats(),
        }
    )
    reader.close()


def waiter_proc(name: str, ready: Event, results: Queue[dict[str, Any]]) -> None:
    """Time out once, then sleep on the futex until a message comes; report both."""
    reader = RingReader.attach(name)
    t0 = time.monotonic()
    timed_out = reader.wait(0.2) is False
    waited = time.monotonic() - t0
    ready.set()
    reader.wait(30.0)
    woke = time.time_ns()
    (msg,) = reader.poll()
    assert isinstance(msg, RingMessage)
    results.put({"timed_out": timed_out, "waited": waited, "latency": (woke - msg.ts_ns) / 1e9})
    reader.close()


def writer_proc(name: str, count: int, ready: Event) -> None:
    """A gateway that writes, then hangs until it is killed (it never closes the ring)."""
    writer = RingWriter.create(name, 1 << 16)
    writer.write_batch([(1, 0, payload_for(s, 64)) for s in range(1, count + 1)])
    ready.set()
    time.sleep(3600)


def pid(p: SpawnProcess) -> int:
    assert p.pid is not None
    return p.pid


def write_all(writer: RingWriter, first: int, last: int, limit: int, batch: int = 256) -> None:
    for lo in range(first, last + 1, batch):
        seqs = range(lo, min(lo + batch, last + 1))
        got = writer.write_columns(
            [1] * len(seqs), [0] * len(seqs), [payload_for(s, length_for(s, limit)) for s in seqs]
        )
        assert got == lo


def collect(results: Queue[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    return [results.get(timeout=120) for _ in range(n)]


# ---- tests ------------------------------------------------------------------------------------
def test_three_readers_get_every_message_in_order_at_full_rate(
    name: str, procs: list[SpawnProcess]
) -> None:
    """200k messages written as fast as one Python thread can, three reader processes. The
    ring holds the whole burst (sized for it: the writer never waits, by design), so no
    reader may see a gap, a reorder or a damaged byte."""
    total, limit = 200_000, 200
    capacity = 1 << 26
    assert total * record_size(limit) < capacity
    results: Queue[dict[str, Any]] = CTX.Queue()
    with RingWriter.create(name, capacity) as writer:
        readies = [CTX.Event() for _ in range(3)]
        for ready in readies:
            spawn(procs, reader_proc, name, total, limit, ready, results)
        for ready in readies:
            assert ready.wait(60)
        t0 = time.monotonic()
        write_all(writer, 1, total, limit)
        rate = total / (time.monotonic() - t0)
        summaries = collect(results, 3)
    for s in summaries:
        assert (s["delivered"], s["lost"], s["gaps"]) == (total, 0, [])
        assert s["bad_order"] == 0 and s["bad_content"] == 0
        assert s["stats"]["retries"] == 0
    assert rate > 50_000, f"writer managed only {rate:.0f} msg/s"


def test_lapped_readers_never_deliver_a_torn_message(name: str, procs: list[SpawnProcess]) -> None:
    """A 64 KiB ring and 100k messages: readers get lapped over and over while they copy.
    Whatever they deliver is intact and in order, and delivered + lost is exactly the total."""
    total, limit = 100_000, 600
    results: Queue[dict[str, Any]] = CTX.Queue()
    with RingWriter.create(name, 1 << 16) as writer:
        readies = [CTX.Event() for _ in range(3)]
        for i, ready in enumerate(readies):
            spawn(procs, reader_proc, name, total, limit, ready, results, None, i == 2)
        for ready in readies:
            assert ready.wait(60)
        write_all(writer, 1, total, limit, batch=16)
        summaries = collect(results, 3)
    for s in summaries:
        assert s["bad_order"] == 0 and s["bad_content"] == 0
        assert s["delivered"] + s["lost"] == total
        assert s["next"] == total + 1
        assert s["stats"]["lost"] == s["lost"]
    assert any(s["lost"] for s in summaries)  # the slow one at least was lapped


def test_a_stopped_reader_reports_exactly_what_it_lost(
    name: str, procs: list[SpawnProcess]
) -> None:
    limit = 100
    results: Queue[dict[str, Any]] = CTX.Queue()
    progress: Synchronized[int] = CTX.Value("q", 0)
    writer = RingWriter.create(name, 1 << 16)
    ready = CTX.Event()
    proc = spawn(procs, reader_proc, name, 50_000, limit, ready, results, progress)
    assert ready.wait(60)
    first = 300  # fits the ring: the reader reads them all before it is stopped
    assert first * record_size(limit) < 1 << 16
    write_all(writer, 1, first, limit)
    deadline = time.monotonic() + 60
    while progress.value < first and time.monotonic() < deadline:
        time.sleep(0.01)
    assert progress.value == first
    os.kill(pid(proc), signal.SIGSTOP)
    try:
        write_all(writer, first + 1, 50_000, limit)  # laps the stopped reader ~60 times
        oldest = writer.info().oldest_seq
        assert oldest > first + 1
    finally:
        os.kill(pid(proc), signal.SIGCONT)
    (s,) = collect(results, 1)
    writer.close()
    assert s["gaps"] == [(first + 1, oldest - first - 1)]  # exactly, and exactly once
    assert s["lost"] == oldest - first - 1
    assert s["delivered"] == first + (50_000 - oldest + 1)  # then everything from the oldest
    assert s["bad_order"] == 0 and s["bad_content"] == 0


def test_killing_readers_does_not_disturb_the_writer_or_the_others(
    name: str, procs: list[SpawnProcess]
) -> None:
    """One reader is SIGKILLed while it sleeps on the futex (its waiter count stays behind),
    another in the middle of reading; the writer carries on, the survivors get everything."""
    total, limit = 100_000, 300
    results: Queue[dict[str, Any]] = CTX.Queue()
    with RingWriter.create(name, 1 << 26) as writer:
        readies = [CTX.Event() for _ in range(4)]
        survivors = [spawn(procs, reader_proc, name, total, limit, r, results) for r in readies[:2]]
        sleeper = spawn(procs, reader_proc, name, total, limit, readies[2], results)
        busy = spawn(procs, reader_proc, name, total, limit, readies[3], results, None, True)
        for ready in readies:
            assert ready.wait(60)
        deadline = time.monotonic() + 30
        while writer.info().waiters < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(pid(sleeper), signal.SIGKILL)
        write_all(writer, 1, total // 2, limit)
        time.sleep(0.05)
        os.kill(pid(busy), signal.SIGKILL)
        write_all(writer, total // 2 + 1, total, limit)
        summaries = collect(results, 2)
        sleeper.join(10)
        busy.join(10)
        assert sleeper.exitcode == busy.exitcode == -signal.SIGKILL
        assert writer.stats()["messages"] == total
        # the dead sleeper's count stays; it only costs the writer a wake-up call per batch
        assert writer.info().waiters <= 1
        assert {s["pid"] for s in summaries} == {p.pid for p in survivors}
    for s in summaries:
        assert (s["delivered"], s["lost"], s["bad_order"], s["bad_content"]) == (total, 0, 0, 0)


def test_futex_wait_across_processes_times_out_and_wakes_promptly(
    name: str, procs: list[SpawnProcess]
) -> None:
    results: Queue[dict[str, Any]] = CTX.Queue()
    with RingWriter.create(name, 1 << 16) as writer:
        ready = CTX.Event()
        spawn(procs, waiter_proc, name, ready, results)
        assert ready.wait(60)
        deadline = time.monotonic() + 10
        while writer.info().waiters < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert writer.info().waiters == 1  # asleep on the futex
        writer.write(1, 0, b"wake up")
        (s,) = collect(results, 1)
    assert s["timed_out"] and 0.195 <= s["waited"] < 0.5
    assert s["latency"] < 0.1, f"woke {s['latency'] * 1e3:.1f} ms after the write"


def test_a_memfd_ring_passed_to_another_process(name: str) -> None:
    with RingWriter.create(None, 1 << 16) as writer:
        writer.write_batch([(1, 0, b"m%d" % i) for i in range(10)])
        code = (
            "import sys\n"
            "from dataplane.ring import RingReader\n"
            "r = RingReader.attach_fd(int(sys.argv[1]), start='oldest', copy=True)\n"
            "print(b','.join(m.payload for m in r.poll()).decode())\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, str(writer.fd)],
            pass_fds=[writer.fd],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    assert out.strip() == ",".join(f"m{i}" for i in range(10))


def test_a_killed_writer_is_noticed_and_its_ring_can_be_replaced(
    name: str, procs: list[SpawnProcess]
) -> None:
    ready = CTX.Event()
    gateway = spawn(procs, writer_proc, name, 5, ready)
    assert ready.wait(60)
    client = Client.attach(name, start="oldest", copy=True)
    client.LIVENESS_INTERVAL = 0.1
    reader = RingReader.attach(name)
    assert reader.writer_alive()
    os.kill(pid(gateway), signal.SIGKILL)
    gateway.join(10)
    assert not reader.writer_alive()
    assert not reader.info().closed  # it died without closing the ring
    t0 = time.monotonic()
    got = [m.payload for m in client if isinstance(m, RingMessage)]
    assert got == [payload_for(s, 64) for s in range(1, 6)]
    assert time.monotonic() - t0 < 5  # the iteration ended on its own
    assert Path(SHM_DIR, name).exists()
    with RingWriter.create(name, 1 << 16, replace=True) as successor:
        successor.write(1, 0, b"back")
        assert reader.poll() == [] and reader.closed  # the old ring was marked closed
        with RingReader.attach(name, start="oldest") as fresh:
            assert [bytes(m.payload) for m in fresh.poll() if isinstance(m, RingMessage)] == [
                b"back"
            ]
    client.close()
    reader.close()

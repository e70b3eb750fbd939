"""Reader wait policies across processes (multiprocessing spawn): futex (the default), spin
then futex, busy spin, adaptive (spins only while the feed comes fast enough to catch).
Every policy delivers every message in order, intact, from the sync and the asyncio client;
lapping is still reported exactly; a writer that stops or dies never leaves a reader spinning
for ever: spin falls back to the futex, busy honours its timeout, the close and interrupts,
and sleeps once the writer is gone."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.context import SpawnProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import pytest

from dataplane.ring import (
    Gap,
    RingMessage,
    RingReader,
    RingWriter,
    WaitPolicy,
    bench_c_latency,
    bench_c_pace,
    ring_name,
)
from dataplane.shim import RING_SPIN_ADAPTIVE
from gateway.client import Client
from tests.integration.conftest import spawn
from tests.utils.aio import Ticks, loop_ticks

CTX = mp.get_context("spawn")
POLICIES = ["futex", "spin:200", "busy", "adaptive:200"]
TICK = os.sysconf("SC_CLK_TCK")


def payload_for(seq: int) -> bytes:
    return seq.to_bytes(8, "little") * (1 + seq % 12)


pytestmark = pytest.mark.usefixtures("no_shm_leftovers")


@pytest.fixture
def name(ring_name: str) -> str:
    return ring_name


def cpu_seconds(p: SpawnProcess) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def waiters(name: str) -> int:
    with RingReader.attach(name) as probe:
        return probe.info().waiters


def until(check: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# ---- processes --------------------------------------------------------------------------------
def client_proc(
    name: str, policy: str, total: int, asynchronous: bool, ready: Event, out: Queue[Any]
) -> None:
    """A consumer with the Client (sync iteration or async for): check order and bytes."""
    client = Client.attach(name, start="oldest", copy=True, wait=policy)
    ready.set()
    seen = {"delivered": 0, "lost": 0, "bad": 0, "next": 1}

    def take(event: Any) -> bool:
        if isinstance(event, Gap):
            seen["lost"] += event.lost
            seen["next"] = event.first_seq + event.lost
        else:
            ok = event.seq == seen["next"] and event.payload == payload_for(event.seq)
            seen["bad"] += not ok
            seen["delivered"] += 1
            seen["next"] = event.seq + 1
        return seen["next"] > total

    if asynchronous:

        async def run() -> None:
            async for event in client:
                if take(event):
                    return

        asyncio.run(run())
    else:
        for event in client:
            if take(event):
                break
    source = client.source
    assert hasattr(source, "reader")
    out.put({**seen, "stats": source.reader.stats(), "policy": str(client.source.wait_policy)})
    client.close()


def slow_reader_proc(name: str, policy: str, total: int, ready: Event, out: Queue[Any]) -> None:
    """Reads slowly (sleeps after every batch), so a small ring laps it."""
    reader = RingReader.attach(name, start="oldest", max_batch=64, wait=policy)
    ready.set()
    expect, delivered, lost, bad, gaps = 1, 0, 0, 0, 0
    while expect <= total:
        events = reader.read_batch(timeout=10.0)
        if not events:
            break
        for event in events:
            if isinstance(event, Gap):
                bad += event.first_seq != expect
                gaps += 1
                lost += event.lost
                expect = event.first_seq + event.lost
                continue
            bad += event.seq != expect or bytes(event.payload) != payload_for(event.seq)
            delivered += 1
            expect = event.seq + 1
        time.sleep(0.001)
    out.put({"delivered": delivered, "lost": lost, "gaps": gaps, "bad": bad, "next": expect})
    reader.close()


def ticking_writer_proc(name: str, ready: Event) -> None:
    """A gateway publishing one message a millisecond until it is stopped or killed."""
    writer = RingWriter.create(name, 1 << 20)
    ready.set()
    seq = 1
    while True:
        writer.write(1, 0, payload_for(seq))
        seq += 1
        time.sleep(0.001)


def waiting_proc(
    name: str, policy: str, timeout: float | None, ready: Event, out: Queue[Any]
) -> None:
    """Drain what is there, then wait once with the policy (None: for ever); report how it
    ended and how long it took."""
    reader = RingReader.attach(name, wait=policy)
    while reader.poll():
        pass
    ready.set()
    t0 = time.monotonic()
    got = reader.wait(timeout)
    out.put({"got": got, "waited": time.monotonic() - t0, "stats": reader.stats()})
    reader.close()


def latency_proc(name: str, policy: str, count: int, ready: Event, out: Queue[Any]) -> None:
    reader = RingReader.attach(name, start="oldest", wait=policy)
    ready.set()
    res = bench_c_latency(reader, count, 30.0)
    out.put(
        {
            "n": len(res.latencies_ns),
            "lost": res.lost,
            "disorder": res.disorder,
            "timed_out": res.timed_out,
            "cpu": res.cpu_percent,
            "wakeups": res.wakeups,
            "spin_hits": res.spin_hits,
            "spin_ns": reader.stats()["spin_ns"],
            "max": max(res.latencies_ns, default=0),
        }
    )
    reader.close()


# ---- tests ------------------------------------------------------------------------------------
def test_policies_parse() -> None:
    assert WaitPolicy.parse(None) == WaitPolicy("futex")
    assert WaitPolicy.parse("spin:50") == WaitPolicy("spin", 50.0)
    assert WaitPolicy.parse("busy").spin_ns < 0
    assert WaitPolicy.parse("futex").spin_ns == 0
    assert WaitPolicy.parse("spin:2.5").spin_ns == 2500
    assert str(WaitPolicy.parse("spin:50")) == "spin:50"
    adaptive = WaitPolicy.parse("adaptive:150")
    assert (adaptive.mode, adaptive.spin_us, str(adaptive)) == ("adaptive", 150.0, "adaptive:150")
    assert adaptive.spin_ns == 150_000 | RING_SPIN_ADAPTIVE  # the cap, flagged adaptive
    assert WaitPolicy.from_hint(*adaptive.to_hint()) == adaptive
    assert WaitPolicy.parse("adaptive") == WaitPolicy("adaptive", 100.0)
    for bad in ("sleep", "busy:10", "spin:x", "spin:0", "spin:-3", "adaptive:0", "futex:5"):
        with pytest.raises(ValueError):
            WaitPolicy.parse(bad)


def until_waiting(writer: RingWriter, readers: list[SpawnProcess], policy: str) -> None:
    """Return once every reader process has read all that `writer` wrote and waits for more
    as its policy says: asleep on the futex (after its spin, if any), or, busy, spinning (it
    burned 0.1 s of CPU with nothing to read: its only loop then is its wait)."""
    last = writer.last_seq
    pids = {p.pid for p in readers}

    def caught_up() -> bool:
        slots = [s for s in writer.readers() if s.pid in pids]
        return len(slots) == len(pids) and all(s.next_seq == last + 1 for s in slots)

    assert until(caught_up, 60), ("the readers never read it all", writer.readers())
    if policy == "busy":  # never a futex sleeper while the writer lives
        cpu = {p.pid: cpu_seconds(p) for p in readers}
        spun = until(lambda: all(cpu_seconds(p) - cpu[p.pid] >= 0.1 for p in readers), 60)
    else:
        spun = until(lambda: writer.info().waiters == len(readers), 60)
    assert spun, f"the {policy} readers never waited"


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_delivers_every_message_in_order(
    name: str, procs: list[SpawnProcess], policy: str, asynchronous: bool
) -> None:
    """30k messages in bursts with pauses between them, two client processes of the same
    policy: all delivered, in order, intact. Halfway, the writer holds back until both
    readers wait (sleep or spin, as their policy says), so that every run has them wait and
    be woken: the pauses alone did not on a loaded machine, where a reader can stay behind
    the writer from start to end (it never waited, and never spun)."""
    total = 30_000
    out: Queue[Any] = CTX.Queue()
    with RingWriter.create(name, 1 << 24) as writer:
        readies = [CTX.Event() for _ in range(2)]
        readers = [
            spawn(procs, client_proc, name, policy, total, asynchronous, ready, out)
            for ready in readies
        ]
        for ready in readies:
            assert ready.wait(60)
        for lo in range(1, total + 1, 100):
            if lo == total // 2 + 1:
                until_waiting(writer, readers, policy)
            seqs = range(lo, min(lo + 100, total + 1))
            writer.write_columns([1] * len(seqs), [0] * len(seqs), [payload_for(s) for s in seqs])
            if lo % 3000 == 1:
                time.sleep(0.002)  # longer than the spin: spinners fall back to the futex
        results = [out.get(timeout=120) for _ in readies]
    for r in results:
        shown = str(r)  # all of it, stats too (pytest cuts a dict short)
        assert (r["delivered"], r["lost"], r["bad"], r["next"]) == (total, 0, 0, total + 1), shown
        assert r["policy"] == str(WaitPolicy.parse(policy))
        stats = r["stats"]
        assert stats["waits"] > 0, shown  # at least halfway
        if policy == "futex":
            assert stats["spin_hits"] == 0 and stats["spin_ns"] == 0, shown
        else:
            assert stats["spin_ns"] > 0, shown  # its waits spun (adaptive: its first at least)
        if policy == "busy" and not asynchronous:
            assert stats["wakeups"] == 0, shown  # never slept: the writer was alive all along


def spawn_ready(procs: list[SpawnProcess], target: Any, *args: Any) -> Queue[Any]:
    """Spawn `target(*args, ready, out)` and wait until it sets `ready`; its `out` queue."""
    ready, out = CTX.Event(), CTX.Queue()
    spawn(procs, target, *args, ready, out)
    assert ready.wait(60)
    return out


@pytest.mark.parametrize("policy", ["spin:200", "busy"])
def test_spinning_readers_still_report_laps_exactly(
    name: str, procs: list[SpawnProcess], policy: str
) -> None:
    total = 60_000
    with RingWriter.create(name, 1 << 16) as writer:
        out = spawn_ready(procs, slow_reader_proc, name, policy, total)
        for lo in range(1, total + 1, 64):
            seqs = range(lo, min(lo + 64, total + 1))
            writer.write_columns([1] * len(seqs), [0] * len(seqs), [payload_for(s) for s in seqs])
        r = out.get(timeout=120)
    assert r["bad"] == 0
    assert r["gaps"] > 0 and r["lost"] > 0  # the slow reader was lapped, and was told
    assert r["delivered"] + r["lost"] == total and r["next"] == total + 1


@pytest.mark.parametrize("policy", POLICIES)
def test_paced_latency_is_measured_in_c_for_every_policy(
    name: str, procs: list[SpawnProcess], policy: str
) -> None:
    """The benchmark's own path: a C writer at 20k msg/s, a C reader in another process;
    every message arrives in order with a latency sample (never how fast: shared machines)."""
    count = 4000
    with RingWriter.create(name, 1 << 22) as writer:
        out = spawn_ready(procs, latency_proc, name, policy, count)
        paced = bench_c_pace(writer, 100, count, 20_000)
        r = out.get(timeout=60)
    assert paced.messages == count and 0 < paced.publishes <= count
    assert paced.elapsed_ns >= (count - 1) * 50_000 * 0.99  # paced, not flooded
    assert (r["n"], r["lost"], r["disorder"], r["timed_out"]) == (count, 0, 0, False)
    assert 0 < r["max"] < 10e9
    assert 0 <= r["cpu"] <= 110
    if policy == "futex":
        assert r["spin_hits"] == 0 and r["wakeups"] > 0
    elif policy == "busy":
        assert r["wakeups"] == 0 and r["spin_hits"] > 0


@pytest.mark.parametrize(
    ("rate", "cap_us", "spins"),
    [(20_000, 1000, True), (50, 100, False)],
    ids=["fast-feed-spins", "slow-feed-sleeps"],
)
def test_the_adaptive_policy_spins_only_for_a_feed_it_can_catch(
    name: str, procs: list[SpawnProcess], rate: int, cap_us: int, spins: bool
) -> None:
    """A feed publishing every 50 us is caught spinning (waits end in the spin); one every
    20 ms, far over the 100 us cap, sends the reader to the futex at once: the first wait's
    spin aside, it burns no CPU."""
    count = 4000 if spins else 40
    with RingWriter.create(name, 1 << 22) as writer:
        out = spawn_ready(procs, latency_proc, name, f"adaptive:{cap_us}", count)
        bench_c_pace(writer, 100, count, rate)
        r = out.get(timeout=60)
    assert (r["n"], r["lost"], r["disorder"], r["timed_out"]) == (count, 0, 0, False)
    if spins:
        assert r["spin_hits"] > 0
    else:
        assert r["wakeups"] > 0
        assert r["spin_ns"] <= 3 * cap_us * 1000  # at most the first waits spun


def stopped_writer(procs: list[SpawnProcess], name: str) -> SpawnProcess:
    """A ticking writer on `name` that has created the ring, then SIGSTOPped (alive, silent)."""
    ready = CTX.Event()
    writer = spawn(procs, ticking_writer_proc, name, ready)
    assert ready.wait(60)
    assert writer.pid is not None
    os.kill(writer.pid, signal.SIGSTOP)
    return writer


def test_a_stopped_writer_sends_a_spin_reader_to_the_futex(
    name: str, procs: list[SpawnProcess]
) -> None:
    """The writer is SIGSTOPped (alive, silent): a spin-then-block reader spins 200 us, then
    sleeps on the futex (it shows up as a waiter and uses no CPU), and wakes when the writer
    resumes."""
    waiting = CTX.Event()
    out: Queue[Any] = CTX.Queue()
    writer = stopped_writer(procs, name)
    try:
        reader = spawn(procs, waiting_proc, name, "spin:200", None, waiting, out)
        assert waiting.wait(60)
        assert until(lambda: waiters(name) == 1), "the spin reader never went to sleep"
        cpu = cpu_seconds(reader)
        time.sleep(0.5)
        assert cpu_seconds(reader) - cpu < 0.1  # asleep, not spinning
    finally:
        os.kill(writer.pid, signal.SIGCONT)
    r = out.get(timeout=30)
    assert r["got"] is True
    assert r["stats"]["wakeups"] >= 1 and r["stats"]["spin_ns"] >= 150_000


def test_a_busy_reader_honours_its_timeout_when_the_writer_stops(
    name: str, procs: list[SpawnProcess]
) -> None:
    waiting = CTX.Event()
    out: Queue[Any] = CTX.Queue()
    writer = stopped_writer(procs, name)
    try:
        spawn(procs, waiting_proc, name, "busy", 0.3, waiting, out)
        assert waiting.wait(60)
        r = out.get(timeout=30)
    finally:
        os.kill(writer.pid, signal.SIGCONT)
    assert r["got"] is False
    assert 0.29 <= r["waited"] < 2.0
    assert r["stats"]["wakeups"] == 0 and r["stats"]["spin_ns"] >= 250_000_000


def test_a_dead_writer_stops_a_busy_reader_spinning(name: str, procs: list[SpawnProcess]) -> None:
    """The writer is SIGKILLed while a busy reader waits for ever: within the writer probe
    interval (50 ms) the reader notices, stops spinning and sleeps on the futex."""
    waiting = CTX.Event()
    out: Queue[Any] = CTX.Queue()
    writer = stopped_writer(procs, name)
    reader = spawn(procs, waiting_proc, name, "busy", None, waiting, out)
    assert waiting.wait(60)
    time.sleep(0.3)
    assert waiters(name) == 0  # spinning: busy readers never register as sleepers
    assert cpu_seconds(reader) > 0
    os.kill(writer.pid, signal.SIGKILL)
    writer.join(10)
    assert until(lambda: waiters(name) == 1), "the busy reader kept spinning"
    cpu = cpu_seconds(reader)
    time.sleep(0.5)
    assert cpu_seconds(reader) - cpu < 0.1
    assert out.empty()  # still waiting (asleep): nothing more can come
    reader.kill()


def test_a_busy_wait_ends_on_close_and_on_interrupt(name: str) -> None:
    """In one process: interrupt and the writer's close end a busy spin promptly."""
    with RingWriter.create(name, 1 << 16) as writer:
        reader = RingReader.attach(name, wait="busy")
        threading.Timer(0.1, reader.interrupt).start()
        t0 = time.monotonic()
        assert reader.wait(10.0) is False
        assert time.monotonic() - t0 < 1.0
        writer.write(1, 0, b"x")
        assert reader.wait(10.0) is True and len(reader.poll()) == 1
        threading.Timer(0.1, writer.close).start()
        t0 = time.monotonic()
        assert reader.wait(None) is True  # closed
        assert time.monotonic() - t0 < 1.0
        assert reader.poll() == [] and reader.closed
        assert reader.stats()["wakeups"] == 0
        reader.close()


def test_async_busy_client_leaves_the_loop_to_other_tasks(name: str) -> None:
    """A busy asyncio consumer spins in slices: a ticker task on the same loop keeps ticking
    while it waits, and the message still arrives. Measured in the loop thread's CPU time
    (no stretch of more than 50 ms between two ticks: a 5 ms tick and a 1 ms slice), not in
    ticks per wall second, which a loaded machine cut to 8 in 0.3 s (against ~60 when free)."""

    async def run(writer: RingWriter) -> tuple[Ticks, float, list[RingMessage | Gap]]:
        async with loop_ticks(0.005) as ticks:
            client = Client.attach(name, copy=True, wait="busy")
            asyncio.get_running_loop().call_later(0.3, writer.write, 1, 0, b"late")
            events = await client.aread(timeout=5.0)
            end = time.thread_time()
        await client.aclose()
        return ticks, end, events

    with RingWriter.create(name, 1 << 16) as writer:
        ticks, end, events = asyncio.run(run(writer))
    assert [bytes(e.payload) for e in events if isinstance(e, RingMessage)] == [b"late"]
    # From the ticker's first turn to the message, the loop never spun long between two of
    # its turns: a loop held for the whole wait spins ~0.3 s of CPU.
    assert ticks.count >= 1
    assert ticks.longest_cpu_hold(end) < 0.05, ticks.cpu


def test_an_async_adaptive_client_spins_only_for_a_feed_it_can_catch(name: str) -> None:
    """The asyncio client keeps the adaptive policy on the loop's own spin: a feed every
    20 ms, far over the 1 ms cap, stops the spinning after the first wait on both threads
    (the loop and the one that sleeps). The loop once spun the whole cap before every wait:
    30 messages, 30 ms of spin."""
    count, cap_us = 30, 1000

    def feed(writer: RingWriter) -> None:
        for seq in range(count):
            time.sleep(0.02)
            writer.write(1, 0, payload_for(seq))

    async def consume() -> tuple[list[bytes], dict[str, int]]:
        got: list[bytes] = []
        async with Client.attach(name, copy=True, wait=f"adaptive:{cap_us}") as client:
            while len(got) < count:
                events = await client.aread(timeout=10.0)
                assert events, "the feed stopped"
                got += [bytes(e.payload) for e in events if isinstance(e, RingMessage)]
            assert client.source.wait_policy == WaitPolicy("adaptive", cap_us)
            stats = client.source.reader.stats()
        return got, stats

    with RingWriter.create(name, 1 << 20) as writer:
        feeder = threading.Thread(target=feed, args=(writer,))
        feeder.start()
        try:
            got, stats = asyncio.run(consume())
        finally:
            feeder.join()
    assert got == [payload_for(seq) for seq in range(count)]
    assert stats["wakeups"] > 0
    assert stats["spin_ns"] <= 3 * cap_us * 1000, stats  # the first waits' spins at most


@pytest.mark.parametrize("policy", ["spin:50", "busy"])
def test_consume_cli_takes_a_wait_policy(policy: str) -> None:
    gateway = f"cliw{os.getpid()}"
    writer = RingWriter.create(ring_name(gateway, "messages"), 1 << 16)
    try:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "gateway.cli", "consume", "--gateway", gateway),
                *("--wait", policy, "--count", "3", "--timeout", "20"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # The consumer starts at the newest message: write once it says it has attached
        # (its first line, on stderr), however long its start took.
        assert proc.stderr is not None
        started = proc.stderr.readline()
        for i in range(3):
            writer.write(1, 0, f"m{i}".encode())
        out, err = proc.communicate(timeout=30)
        err = started + err
    finally:
        writer.close()
    assert proc.returncode == 0, err
    assert [line.rsplit(" ", 1)[1] for line in out.splitlines()] == ["m0", "m1", "m2"]


def test_consume_cli_refuses_an_unknown_wait_policy() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "consume", "--wait", "nap", "--count", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--wait" in proc.stderr

"""A gateway killed with SIGKILL and started again: its ring is a new one with a new epoch,
and a reader learns of the restart (a following Client reports Restart and reads the new
run from its first message; one attaching with the epoch it saw last gets Restart first)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dataplane.ring import Gap, RingMessage, RingReader
from gateway.client import Client, ClientEvent, MessagesLostError, Restart

ROOT = Path(__file__).resolve().parents[2]

#: A stand-in for the gateway's hub: creates the ring (taking over one whose writer is
#: gone, as the hub does), writes `count` messages, prints its epoch, then waits.
WRITER = """
import sys, time
from dataplane.ring import RingWriter
name, count, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ring = RingWriter.create(name, 1 << 16, replace=True)
tid = ring.register_topic("1:t")
for i in range(count):
    ring.write(1, tid, f"{tag}-{i}".encode())
print(ring.epoch, flush=True)
time.sleep(600)
"""


pytestmark = pytest.mark.usefixtures("no_shm_leftovers")


@pytest.fixture
def name(ring_name: str) -> str:
    return ring_name


@pytest.fixture
def writers() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()


def start_writer(procs: list[subprocess.Popen[str]], name: str, count: int, tag: str) -> int:
    """The writer process's epoch, once it has written its messages."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, name, str(count), tag],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    procs.append(proc)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"writer {tag} exited with {proc.wait(timeout=10)}"
    return int(line)


def read_n(client: Client, n: int) -> list[ClientEvent]:
    got: list[ClientEvent] = []
    for event in client.messages(idle_timeout=20):
        got.append(event)
        if len(got) == n:
            break
    return got


def test_a_gateway_killed_and_restarted_gives_its_readers_a_new_epoch(
    name: str, writers: list[subprocess.Popen[str]]
) -> None:
    first = start_writer(writers, name, 3, "a")
    with Client.attach(name, start="oldest", copy=True, follow=True) as client:
        assert client.epoch == first
        assert [bytes(e.payload) for e in read_n(client, 3)] == [b"a-0", b"a-1", b"a-2"]  # type: ignore[union-attr]

        writers[0].send_signal(signal.SIGKILL)  # no close, no unlink: the ring stays
        writers[0].wait(timeout=10)
        with RingReader.attach(name) as stale:
            assert stale.epoch == first  # the dead run's ring is still at the name
        second = start_writer(writers, name, 2, "b")
        assert second != first

        events = read_n(client, 3)
        assert events[0] == Restart(first, second)
        assert client.epoch == second
        messages = [e for e in events[1:] if isinstance(e, RingMessage)]
        assert [(m.seq, bytes(m.payload)) for m in messages] == [(1, b"b-0"), (2, b"b-1")]

    # A consumer that kept the epoch and attaches afresh learns of the restart too.
    with Client.attach(name, start="oldest", copy=True, epoch=first) as late:
        assert late.read(timeout=5)[0] == Restart(first, second)
        assert [bytes(m.payload) for m in late.read(timeout=5)] == [b"b-0", b"b-1"]  # type: ignore[union-attr]
    with Client.attach(name, start="oldest", copy=True, epoch=second) as same:
        assert not [e for e in same.read(timeout=5) if isinstance(e, Restart)]


def test_a_follower_late_to_the_new_run_gets_a_gap_for_what_its_ring_overwrote(
    name: str, writers: list[subprocess.Popen[str]]
) -> None:
    """The new run wrote more than its ring holds before the following client attached to
    it: the messages from its first one up to the oldest still there are a Gap after the
    Restart, not skipped without a word."""
    first = start_writer(writers, name, 3, "a")
    with Client.attach(name, start="oldest", copy=True, follow=True) as client:
        assert len(read_n(client, 3)) == 3
        writers[0].send_signal(signal.SIGKILL)
        writers[0].wait(timeout=10)
        second = start_writer(writers, name, 5000, "b")  # laps its 64 KiB ring
        events = client.read(timeout=5)
        while not [e for e in events if isinstance(e, RingMessage)]:
            events += client.read(timeout=5)
    # So does a consumer that kept the epoch it saw and attaches afresh from the oldest.
    with Client.attach(name, start="oldest", copy=True, epoch=first) as late:
        late_events = late.read(timeout=5) + late.read(timeout=5)
    assert late_events[:2] == [Restart(first, second), Gap(events[1].lost, 1)], late_events[:3]
    # ... and, one that asked for gaps as errors, the Restart, then the error, then messages.
    with Client.attach(name, start="oldest", copy=True, epoch=first, on_gap="raise") as strict:
        assert strict.read(timeout=5) == [Restart(first, second)]
        with pytest.raises(MessagesLostError) as lost:
            strict.read(timeout=5)
        assert lost.value.gap == Gap(events[1].lost, 1)
        assert all(isinstance(e, RingMessage) for e in strict.read(timeout=5))
    assert events[0] == Restart(first, second)
    gap = events[1]
    messages = [e for e in events if isinstance(e, RingMessage)]
    assert isinstance(gap, Gap), events[:3]
    assert (gap.first_seq, gap.lost) == (1, messages[0].seq - 1)
    assert bytes(messages[0].payload) == b"b-%d" % (messages[0].seq - 1)

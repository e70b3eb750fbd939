"""The ring's reader table: readers of any process claim a slot at attach, publish their
position, lag and losses there, free it at close; a slot whose process died is reclaimed;
a full table leaves the next reader unlisted (not refused); the writer's side can close a
reader (force-close), which the reader honours at its next read or wait."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from dataplane.ring import (
    MAX_READERS,
    Gap,
    RingEvictedError,
    RingReader,
    RingWriter,
)

REPO = Path(__file__).resolve().parents[3]


def _mine(writer: RingWriter) -> list[int]:
    return [r.slot for r in writer.readers()]


def test_attach_claims_a_slot_close_releases_it(name: str) -> None:
    with RingWriter.create(name, 1 << 16) as writer:
        assert writer.readers() == []
        reader = RingReader.attach(name, reader_name="risk-engine")
        (row,) = writer.readers()
        assert (row.slot, row.pid, row.name) == (reader.slot, os.getpid(), "risk-engine")
        assert row.heartbeat_ns >= row.attached_ns > 0
        assert not row.close_requested
        reader.close()
        assert writer.readers() == []
        again = RingReader.attach(name)  # the freed slot is taken again, named by the process
        assert again.slot == row.slot
        assert writer.readers()[0].name  # PR_GET_NAME: never empty
        again.close()


def test_the_slot_tells_position_lag_and_losses(name: str) -> None:
    with RingWriter.create(name, 1 << 12) as writer, RingReader.attach(name) as reader:
        for i in range(5):
            writer.write(1, 0, b"m%d" % i)
        assert len(reader.read_batch(2)) == 2
        (row,) = writer.readers()
        assert (row.next_seq, row.messages) == (3, 2)
        assert row.lag(writer.last_seq) == 3
        for _ in range(400):  # laps the reader (4 KiB ring)
            writer.write(1, 0, b"x" * 64)
        events = reader.read_batch()
        assert isinstance(events[0], Gap)
        (row,) = writer.readers()
        assert (row.gaps, row.lost) == (1, events[0].lost)
        assert row.lag(writer.last_seq) == writer.last_seq + 1 - reader.next_seq


def test_a_full_table_leaves_the_next_reader_unlisted_not_refused(name: str) -> None:
    with RingWriter.create(name, 1 << 12) as writer, ExitStack() as stack:
        readers = [stack.enter_context(RingReader.attach(name)) for _ in range(MAX_READERS)]
        assert sorted(r.slot for r in readers) == list(range(MAX_READERS))  # type: ignore[type-var]
        extra = stack.enter_context(RingReader.attach(name, reader_name="late"))
        assert extra.slot is None
        extra.set_name("ignored")  # unlisted: nothing to name, no error
        writer.write(1, 0, b"still read")
        assert [bytes(m.payload) for m in extra.read_batch()] == [b"still read"]  # type: ignore[union-attr]
        assert len(writer.readers()) == MAX_READERS
        readers[7].close()
        assert 7 not in _mine(writer)


@contextmanager
def _reader_process(name: str) -> Iterator[subprocess.Popen[str]]:
    """A reader in another process: attaches, says its slot, then waits to be killed."""
    code = (
        "import sys, time\n"
        "from dataplane.ring import RingReader\n"
        f"r = RingReader.attach({name!r}, reader_name='child')\n"
        "print(r.slot, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()


def test_the_slot_of_a_killed_reader_is_reclaimed(name: str) -> None:
    with RingWriter.create(name, 1 << 12) as writer, ExitStack() as stack:
        # Fill all but one slot here, the last from a child that is then SIGKILLed (it never
        # detaches): the next attach finds the table full of live readers but one dead.
        for _ in range(MAX_READERS - 1):
            stack.enter_context(RingReader.attach(name))
        with _reader_process(name) as child:
            assert child.stdout is not None
            child_slot = int(child.stdout.readline())
            assert [(r.pid, r.name) for r in writer.readers() if r.slot == child_slot] == [
                (child.pid, "child")
            ]
            assert RingReader.attach(name).slot is None  # full: the child is alive
            child.send_signal(signal.SIGKILL)
            child.wait(10)
        late = stack.enter_context(RingReader.attach(name, reader_name="after"))
        assert late.slot == child_slot
        assert [r.pid for r in writer.readers()].count(os.getpid()) == MAX_READERS


def test_listing_reclaims_dead_readers(name: str) -> None:
    with RingWriter.create(name, 1 << 12) as writer:
        with _reader_process(name) as child:
            assert child.stdout is not None
            slot = int(child.stdout.readline())
            assert _mine(writer) == [slot]
            child.kill()
            child.wait(10)
        assert writer.readers() == []


def test_force_close_stops_a_reading_and_a_waiting_reader(name: str) -> None:
    with RingWriter.create(name, 1 << 12) as writer:
        reading = RingReader.attach(name)
        waiting = RingReader.attach(name)
        failures: list[BaseException] = []

        def wait_forever() -> None:
            try:
                waiting.read_batch(timeout=None)
            except RingEvictedError as exc:
                failures.append(exc)

        thread = threading.Thread(target=wait_forever)
        thread.start()
        assert reading.slot is not None and waiting.slot is not None
        assert not writer.close_reader(reading.slot, os.getpid() + 1_000_000)  # not its pid
        assert writer.close_reader(reading.slot, os.getpid())
        assert writer.close_reader(waiting.slot, os.getpid())
        thread.join(10)
        assert not thread.is_alive()
        assert len(failures) == 1 and "closed by the gateway's operator" in str(failures[0])
        writer.write(1, 0, b"too late")
        with pytest.raises(RingEvictedError):
            reading.read_batch()
        with pytest.raises(RingEvictedError):
            list(reading)
        assert all(r.close_requested for r in writer.readers())
        reading.close()
        waiting.close()
        assert writer.readers() == []
        assert not writer.close_reader(0, os.getpid())  # gone: nothing to close


def test_a_reader_of_an_older_layout_is_told_which_side_to_upgrade(name: str) -> None:
    with RingWriter.create(name, 1 << 12) as writer:
        writer.close(unlink=False)
    path = Path("/dev/shm", name)
    data = bytearray(path.read_bytes())
    data[8:12] = (1).to_bytes(4, "little")  # what a gateway of layout 1 wrote
    path.write_bytes(bytes(data))
    with pytest.raises(Exception, match="older than this consumer: upgrade the gateway"):
        RingReader.attach(name)


def test_a_forked_child_closing_the_inherited_reader_leaves_its_slot(name: str) -> None:
    with RingWriter.create(name, 1 << 12) as writer, RingReader.attach(name) as reader:
        child = os.fork()
        if child == 0:  # the child: close what it inherited, and go
            reader.close()
            os._exit(0)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert _mine(writer) == [reader.slot]  # still the parent's


def test_the_sdk_client_names_its_reader(name: str) -> None:
    from gateway.client import Client

    with RingWriter.create(name, 1 << 16) as writer:
        client = Client.attach(name, name="risk-engine")
        try:
            assert [row.name for row in writer.readers()] == ["risk-engine"]
        finally:
            client.close()
        assert writer.readers() == []

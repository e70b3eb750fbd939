"""The ring's Python API: create, write, read, batch, start positions, memfd, close, errors."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from ring_helpers import leftovers, payload_for

from dataplane.ring import (
    LAYOUT_VERSION,
    MAGIC,
    Gap,
    MessageTooLargeError,
    RingBusyError,
    RingClosedError,
    RingExistsError,
    RingFormatError,
    RingMessage,
    RingNotFoundError,
    RingReader,
    RingVersionError,
    RingWriter,
    TopicError,
    record_size,
    ring_name,
    ring_path,
)


def messages(events: list[RingMessage | Gap]) -> list[RingMessage]:
    assert all(isinstance(e, RingMessage) for e in events), events
    return [e for e in events if isinstance(e, RingMessage)]


def test_names_and_paths() -> None:
    assert ring_name("gw1", "md") == "wsgw-gw1-md"
    assert ring_path("wsgw-gw1-md") == Path("/dev/shm/wsgw-gw1-md")
    assert ring_path("/tmp/x/ring") == Path("/tmp/x/ring")
    with pytest.raises(ValueError, match="invalid ring name"):
        ring_name("gw 1", "md")
    with pytest.raises(ValueError, match="invalid ring name"):
        ring_path("..")
    assert record_size(0) == 32
    assert record_size(100) == 136


def test_roundtrip_single_and_batch(name: str) -> None:
    with RingWriter.create(name, 1 << 16) as w:
        assert Path("/dev/shm", name).exists()
        with RingReader.attach(name) as r:
            assert w.write(7, 0, b"hello", ts=123) == 1
            assert w.write_batch([(1, 0, b"a"), (2, 0, bytearray(b"bb"))]) == 2
            assert w.write_batch([(3, 0, memoryview(b"ccc"), 5), (4, 0, b"", None)]) == 4
            assert w.write_batch([(5, 0, b"x"), (6, 0, b"y", 9)]) == 6  # mixed shapes
            assert w.write_batch([]) == 8
            got = messages(r.read_batch())
            assert [m.seq for m in got] == [1, 2, 3, 4, 5, 6, 7]
            assert [bytes(m.payload) for m in got] == [
                b"hello",
                b"a",
                b"bb",
                b"ccc",
                b"",
                b"x",
                b"y",
            ]
            assert [m.session_id for m in got] == [7, 1, 2, 3, 4, 5, 6]
            assert got[0].ts_ns == 123 and got[3].ts_ns == 5 and got[6].ts_ns == 9
            # ts omitted: CLOCK_REALTIME at the write
            assert abs(got[1].ts_ns - got[4].ts_ns) < 10**9
            assert got[1].ts_ns > 1_600_000_000 * 10**9
            assert all(isinstance(m.payload, memoryview) for m in got)
            assert r.read_batch() == []
            assert r.next_seq == 8 and r.lag == 0


def test_write_columns_and_limits(name: str) -> None:
    with RingWriter.create(name, 1 << 14) as w, RingReader.attach(name) as r:
        assert w.max_payload == (1 << 13) - 32
        first = w.write_columns([1, 2, 3], [0, 0, 0], [b"a", b"b" * 100, b"c"], ts=[1, 2, 3])
        assert first == 1
        assert [(m.seq, bytes(m.payload), m.ts_ns) for m in messages(r.poll())] == [
            (1, b"a", 1),
            (2, b"b" * 100, 2),
            (3, b"c", 3),
        ]
        with pytest.raises(ValueError, match="different lengths"):
            w.write_columns([1], [0, 0], [b"a"])
        with pytest.raises(ValueError, match="does not fit"):
            w.write_batch([(-1, 0, b"a")])
        # too large: refused, and nothing of the batch is written
        with pytest.raises(MessageTooLargeError, match="at most 8160"):
            w.write_batch([(1, 0, b"ok"), (1, 0, bytes(w.max_payload + 1))])
        with pytest.raises(MessageTooLargeError):
            w.write(1, 0, bytes(w.max_payload + 1))
        with pytest.raises(TopicError, match="topic id"):
            w.write(1, w.max_topics, b"x")
        assert w.last_seq == 3
        w.write(1, 0, bytes(w.max_payload))  # the largest message fits
        (big,) = messages(r.poll())
        assert len(big.payload) == w.max_payload


def test_capacity_must_be_power_of_two(name: str) -> None:
    for bad in (0, 1000, 4095, 3 << 12, 1 << 41):
        with pytest.raises(ValueError, match="power of two"):
            RingWriter.create(name, bad)
    assert leftovers() == []


def test_start_latest_oldest_and_seek(name: str) -> None:
    with RingWriter.create(name, 1 << 16) as w:
        w.write_batch([(1, 0, b"%d" % i) for i in range(5)])
        with RingReader.attach(name) as latest, RingReader.attach(name, start="oldest") as old:
            assert latest.poll() == []
            assert [m.seq for m in messages(old.poll())] == [1, 2, 3, 4, 5]
            w.write(1, 0, b"6")
            assert [m.seq for m in messages(latest.poll())] == [6]
            latest.seek("oldest")
            assert [m.seq for m in messages(latest.poll())] == [1, 2, 3, 4, 5, 6]
            old.seek("latest")
            assert old.poll() == []
        with pytest.raises(ValueError, match="start must be"):
            RingReader.attach(name, start="middle")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="max_batch"):
            RingReader.attach(name, max_batch=0)


def test_copy_gives_bytes_and_views_are_reused(name: str) -> None:
    with RingWriter.create(name, 1 << 16) as w:
        with RingReader.attach(name, copy=True) as rb, RingReader.attach(name) as rv:
            w.write(1, 0, b"first")
            (mb,) = messages(rb.poll())
            (mv,) = messages(rv.poll())
            assert type(mb.payload) is bytes and mb.payload == b"first"
            assert isinstance(mv.payload, memoryview) and bytes(mv.payload) == b"first"
            kept = bytes(mv.payload)
            w.write(1, 0, b"SECOND")
            rb.poll()
            rv.poll()
            assert mb.payload == b"first"  # bytes are the reader's to keep
            assert bytes(mv.payload) == b"SECON"  # the arena was refilled: valid until next read
            assert kept == b"first"
        # a view outlives its reader: the arena is Python memory, not the C reader's
        assert bytes(mv.payload) == b"SECON"


def test_read_batch_max_and_batches_larger_than_half_the_ring(name: str) -> None:
    with RingWriter.create(name, 1 << 12) as w, RingReader.attach(name, start="oldest") as r:
        # 4 KiB ring: a 20-message batch of 100 B (2720 B) is published in two slices
        first = w.write_batch([(1, 0, payload_for(i, 100)) for i in range(1, 21)])
        assert first == 1
        assert w.stats()["batches"] == 2
        with pytest.raises(ValueError, match="at least 1"):
            r.read_batch(max=0)
        events = r.read_batch(max=5)
        assert [m.seq for m in messages(events)] == [1, 2, 3, 4, 5]
        rest = messages(r.read_batch())
        assert [m.seq for m in rest] == list(range(6, 21))
        assert all(bytes(m.payload) == payload_for(m.seq, 100) for m in rest)


def test_memfd_ring_by_fd() -> None:
    with RingWriter.create(None, 1 << 16) as w:
        assert w.path is None
        fd = w.fd
        assert os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:wsgw-ring")
        with RingReader.attach_fd(fd, start="oldest") as r:
            w.write(1, 0, b"via fd")
            assert [bytes(m.payload) for m in messages(r.poll())] == [b"via fd"]
            assert r.writer_alive()
        os.fstat(fd)  # the writer's fd is untouched by the reader
    with pytest.raises(RingNotFoundError):
        RingReader.attach_fd(fd)  # closed with the writer


def test_close_drains_then_ends_and_unlinks(name: str) -> None:
    w = RingWriter.create(name, 1 << 16)
    r = RingReader.attach(name)
    w.write_batch([(1, 0, b"a"), (1, 0, b"b")])
    assert r.writer_alive()
    w.close()
    assert not Path("/dev/shm", name).exists()
    assert w.closed
    with pytest.raises(RingClosedError):
        w.write(1, 0, b"late")
    w.close()  # idempotent
    # the reader keeps its mapping: it drains, then iteration ends
    assert [bytes(m.payload) for m in messages(list(r))] == [b"a", b"b"]
    assert r.closed and not r.writer_alive() and r.info().closed
    r.close()
    r.close()
    with pytest.raises(RingClosedError):
        r.poll()


def test_close_without_unlink_keeps_the_file(name: str) -> None:
    w = RingWriter.create(name, 1 << 16)
    w.write(1, 0, b"kept")
    w.close(unlink=False)
    with RingReader.attach(name, start="oldest") as r:
        assert [bytes(m.payload) for m in messages(r.poll())] == [b"kept"]
        assert r.poll() == [] and r.closed and not r.writer_alive()


def test_exists_busy_and_replace(name: str) -> None:
    w = RingWriter.create(name, 1 << 16)
    with pytest.raises(RingExistsError, match="already exists"):
        RingWriter.create(name, 1 << 16)
    with pytest.raises(RingBusyError, match="live writer"):
        RingWriter.create(name, 1 << 16, replace=True)
    old_reader = RingReader.attach(name)
    w.write(1, 0, b"old")
    # the writer "dies" (closes without unlinking, as a crash would leave the file)
    w.close(unlink=False)
    with RingWriter.create(name, 1 << 13, replace=True) as w2:
        assert w2.capacity == 1 << 13
        with RingReader.attach(name) as new_reader:
            w2.write(1, 0, b"new")
            assert [bytes(m.payload) for m in messages(new_reader.poll())] == [b"new"]
        # the old ring's readers were told it is over
        assert [bytes(m.payload) for m in messages(list(old_reader))] == [b"old"]
        assert old_reader.closed
    old_reader.close()
    assert leftovers() == [] or all(not p.name.startswith(name) for p in leftovers())


def test_missing_ring_is_a_typed_error() -> None:
    with pytest.raises(RingNotFoundError, match="no ring at /dev/shm/wsgw-test-none"):
        RingReader.attach("wsgw-test-none-such-ring")
    with pytest.raises(RingNotFoundError):
        RingReader.attach("/nonexistent/dir/ring")
    with pytest.raises(RingNotFoundError, match="not open"):
        RingReader.attach_fd(987654)


def _header(name: str) -> bytes:
    return Path("/dev/shm", name).read_bytes()[:4096]


@pytest.mark.parametrize(
    ("corrupt", "error", "message"),
    [
        (lambda b: b"\0" * 8 + b[8:], RingFormatError, "bad magic"),
        (lambda b: b"NOTARING" + b[8:], RingFormatError, "bad magic"),
        (
            lambda b: b[:8] + struct.pack("<I", LAYOUT_VERSION + 1) + b[12:],
            RingVersionError,
            f"layout {LAYOUT_VERSION + 1}",
        ),
        (lambda b: b[:16] + struct.pack("<Q", 3000) + b[24:], RingFormatError, "inconsistent"),
        (lambda b: b[:16] + struct.pack("<Q", 1 << 30) + b[24:], RingFormatError, "inconsistent"),
        (lambda b: b[:28] + struct.pack("<I", 1 << 30) + b[32:], RingFormatError, "inconsistent"),
    ],
)
def test_foreign_or_corrupt_files_are_refused(
    name: str, corrupt: object, error: type[Exception], message: str
) -> None:
    with RingWriter.create(name, 1 << 12) as w:
        w.close(unlink=False)
    path = Path("/dev/shm", name)
    data = bytearray(path.read_bytes())
    assert struct.unpack_from("<Q", data, 0)[0] == MAGIC
    head = corrupt(bytes(data[:4096]))  # type: ignore[operator]
    data[:4096] = head
    path.write_bytes(bytes(data))
    with pytest.raises(error, match=message):
        RingReader.attach(name)


@pytest.mark.parametrize("content", [b"", b"x" * 100, os.urandom(8192), os.urandom(300_000)])
def test_random_files_are_refused(name: str, content: bytes) -> None:
    Path("/dev/shm", name).write_bytes(content)
    with pytest.raises(RingFormatError):
        RingReader.attach(name)


def test_truncated_ring_is_refused(name: str) -> None:
    with RingWriter.create(name, 1 << 12) as w:
        w.close(unlink=False)
    path = Path("/dev/shm", name)
    os.truncate(path, path.stat().st_size - 8)
    with pytest.raises(RingFormatError, match="inconsistent"):
        RingReader.attach(name)


def test_a_directory_is_not_a_ring(tmp_path: Path) -> None:
    with pytest.raises(RingFormatError):
        RingReader.attach(str(tmp_path))


def test_info_and_stats(name: str) -> None:
    with RingWriter.create(name, 1 << 12, max_topics=64) as w, RingReader.attach(name) as r:
        info = w.info()
        assert (info.capacity, info.max_topics, info.last_seq, info.oldest_seq) == (4096, 64, 0, 1)
        assert info.writer_pid == os.getpid() and not info.closed
        assert r.info().instance == info.instance
        for _ in range(100):
            w.write(1, 0, bytes(100))
        info = w.info()
        assert info.last_seq == 100
        assert info.oldest_seq > 1  # a 4 KiB ring holds ~30 of them
        stats = w.stats()
        assert stats["messages"] == 100 and stats["bytes"] == 100 * 100
        assert stats["overwritten"] == info.oldest_seq - 1
        assert stats["pads"] >= 1
        events = r.poll()
        assert isinstance(events[0], Gap)
        assert r.stats()["gaps"] == 1 and r.stats()["lost"] == events[0].lost
        assert "RingWriter" in repr(w) and "RingReader" in repr(r)

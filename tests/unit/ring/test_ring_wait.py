"""Waiting: the futex wakes a sleeping reader promptly, times out on time, and costs the
writer nothing while nobody sleeps; interrupt and close end a wait from another thread."""

from __future__ import annotations

import threading
import time

from dataplane.ring import RingMessage, RingReader, RingWriter

#: Generous: these machines are shared; a futex wake-up itself takes microseconds.
PROMPT = 0.1


def later(delay: float, func: object) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        func()  # type: ignore[operator]

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_wait_times_out_on_time(name: str) -> None:
    with RingWriter.create(name, 1 << 16), RingReader.attach(name) as r:
        t0 = time.monotonic()
        assert r.wait(0) is False
        assert time.monotonic() - t0 < PROMPT
        for timeout in (0.05, 0.2):
            t0 = time.monotonic()
            assert r.wait(timeout) is False
            elapsed = time.monotonic() - t0
            assert timeout - 0.002 <= elapsed < timeout + PROMPT
        t0 = time.monotonic()
        assert r.read_batch(timeout=0.1) == []
        assert 0.098 <= time.monotonic() - t0 < 0.1 + PROMPT


def test_a_write_wakes_a_sleeping_reader_promptly(name: str) -> None:
    with RingWriter.create(name, 1 << 16) as w, RingReader.attach(name) as r:
        assert w.stats()["wakeups"] == 0
        thread = later(0.2, lambda: w.write(1, 0, b"wake"))
        t0 = time.monotonic()
        assert r.wait(5.0) is True
        woke = time.time_ns()
        assert time.monotonic() - t0 < 5.0
        (msg,) = r.poll()
        assert isinstance(msg, RingMessage)
        assert (woke - msg.ts_ns) / 1e9 < PROMPT  # from the write to the wake-up
        thread.join()
        assert w.stats()["wakeups"] >= 1
        assert r.stats()["wakeups"] >= 1
        assert w.info().waiters == 0


def test_the_writer_does_not_wake_when_nobody_sleeps(name: str) -> None:
    with RingWriter.create(name, 1 << 16) as w, RingReader.attach(name) as r:
        for _ in range(100):
            w.write(1, 0, b"x")
        assert len(r.poll()) == 100
        assert w.stats()["wakeups"] == 0


def test_read_batch_with_timeout_returns_when_data_arrives(name: str) -> None:
    with RingWriter.create(name, 1 << 16) as w, RingReader.attach(name) as r:
        thread = later(0.1, lambda: w.write_batch([(1, 0, b"a"), (1, 0, b"b")]))
        t0 = time.monotonic()
        events = r.read_batch(timeout=10.0)
        assert [m.seq for m in events if isinstance(m, RingMessage)] == [1, 2]
        assert time.monotonic() - t0 < 0.1 + PROMPT
        thread.join()


def test_spinning_wait_sees_data_without_sleeping(name: str) -> None:
    with RingWriter.create(name, 1 << 16) as w, RingReader.attach(name) as r:
        thread = later(0.02, lambda: w.write(1, 0, b"spin"))
        assert r.wait(5.0, spin=1.0) is True
        thread.join()
        assert w.stats()["wakeups"] == 0  # it never slept on the futex


def test_interrupt_returns_a_blocked_wait(name: str) -> None:
    with RingWriter.create(name, 1 << 16), RingReader.attach(name) as r:
        thread = later(0.1, r.interrupt)
        t0 = time.monotonic()
        assert r.wait(10.0) is False
        assert time.monotonic() - t0 < 0.1 + PROMPT
        thread.join()
        # one-shot: the reader still works and waits again
        t0 = time.monotonic()
        assert r.wait(0.05) is False
        assert time.monotonic() - t0 >= 0.045


def test_close_from_another_thread_ends_iteration(name: str) -> None:
    with RingWriter.create(name, 1 << 16) as w:
        r = RingReader.attach(name)
        w.write(1, 0, b"one")
        seen: list[int] = []
        thread = later(0.2, r.close)
        t0 = time.monotonic()
        seen = [m.seq for m in r if isinstance(m, RingMessage)]
        assert seen == [1]
        assert time.monotonic() - t0 < 0.2 + PROMPT
        thread.join()


def test_closing_the_ring_wakes_its_readers(name: str) -> None:
    w = RingWriter.create(name, 1 << 16)
    r = RingReader.attach(name)
    w.write(1, 0, b"last")
    assert len(r.poll()) == 1
    thread = later(0.1, w.close)
    t0 = time.monotonic()
    assert r.wait(10.0) is True
    assert time.monotonic() - t0 < 0.1 + PROMPT
    assert r.poll() == [] and r.closed
    assert list(r) == []
    thread.join()
    r.close()


def test_waiting_readers_in_several_threads_all_wake(name: str) -> None:
    with RingWriter.create(name, 1 << 16) as w:
        readers = [RingReader.attach(name) for _ in range(4)]
        results: list[bool] = []

        def wait(reader: RingReader) -> None:
            results.append(reader.wait(10.0))

        threads = [threading.Thread(target=wait, args=(r,)) for r in readers]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 5
        while w.info().waiters < 4 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert w.info().waiters == 4
        t0 = time.monotonic()
        w.write(1, 0, b"all")
        for t in threads:
            t.join()
        assert time.monotonic() - t0 < PROMPT
        assert results == [True] * 4
        assert w.stats()["wakeups"] == 1  # one FUTEX_WAKE for all of them
        for r in readers:
            r.close()

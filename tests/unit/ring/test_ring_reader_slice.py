"""A ring reader's waiting thread and its scheduler slice (issue #16, session 13): a thread
that waits on a reader opened with slice_ns runs with that slice until the reader ends
(close, from any thread, or garbage), then has its own again; a thread that only polls, a
reader without slice_ns and a thread of another policy are left alone; the consumer client
asks for a slice only when given one (READER_SLICE_NS: not its default)."""

from __future__ import annotations

import functools
import gc
import os
import threading
from collections.abc import Callable, Iterator

import pytest

from dataplane.ring import RingReader, RingWriter
from dataplane.sched import SLICE_LEASES, thread_slice_ns
from gateway.client import Client
from gateway.client.ring import READER_SLICE_NS

SLICE = 200_000  # not the kernel's default (1.4 ms here), nor the engine's


def my_slice() -> int | None:
    return thread_slice_ns(threading.get_native_id())


@pytest.fixture(autouse=True)
def _eevdf() -> None:
    if my_slice() is None:
        pytest.skip("the kernel reports no se.slice (before 6.6)")


@pytest.fixture
def ring(name: str) -> Iterator[RingWriter]:
    with RingWriter.create(name, 1 << 16) as w:
        yield w


def in_thread(work: Callable[[], object]) -> object:
    """work() run in a fresh thread (a fresh slice), its result."""
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(work()))
    thread.start()
    thread.join(10)
    assert out, "the thread failed"
    return out[0]


def test_the_waiting_thread_gets_the_slice_until_close(name: str, ring: RingWriter) -> None:
    def work() -> tuple[int | None, ...]:
        before = my_slice()
        r = RingReader.attach(name, slice_ns=SLICE)
        r.poll()
        polled = my_slice()  # a look without waiting asks for nothing
        r.read_batch(timeout=0.01)
        waited = my_slice()
        r.close()
        return before, polled, waited, my_slice()

    before, polled, waited, after = in_thread(work)  # type: ignore[misc]
    assert before != SLICE
    assert (polled, waited, after) == (before, SLICE, before)


def test_without_slice_ns_the_thread_keeps_its_own(name: str, ring: RingWriter) -> None:
    def work() -> tuple[int | None, int | None]:
        before = my_slice()
        with RingReader.attach(name) as r:
            r.read_batch(timeout=0.01)
            r.wait(0.01)
            return before, my_slice()

    before, during = in_thread(work)  # type: ignore[misc]
    assert during == before


def test_the_old_wait_path_and_wait_take_it_too(name: str, ring: RingWriter) -> None:
    def work() -> tuple[int | None, int | None]:
        with RingReader.attach(name, slice_ns=SLICE) as r:
            r.fused_wait = False
            r.read_batch(timeout=0.01)
            first = my_slice()
        with RingReader.attach(name, slice_ns=SLICE) as r:
            r.wait(0.01)
            return first, my_slice()

    assert in_thread(work) == (SLICE, SLICE)


def test_a_close_from_another_thread_gives_the_waiter_its_slice_back(
    name: str, ring: RingWriter
) -> None:
    r = RingReader.attach(name, slice_ns=SLICE)
    woke, checked = threading.Event(), threading.Event()
    seen: dict[str, int | None] = {}

    def wait() -> None:
        seen["before"] = my_slice()
        r.read_batch(timeout=None)  # until the close interrupts it
        seen["tid"] = threading.get_native_id()
        woke.set()
        checked.wait(10)  # alive while the main thread looks at its slice

    thread = threading.Thread(target=wait)
    thread.start()
    try:
        while SLICE_LEASES.held(thread.native_id or 0) == 0:  # asleep in the wait
            assert thread.is_alive()
            threading.Event().wait(0.005)
        assert thread_slice_ns(thread.native_id or 0) == SLICE
        r.close()
        assert woke.wait(10)
        assert thread_slice_ns(seen["tid"] or 0) == seen["before"]
    finally:
        checked.set()
        thread.join(10)
        r.close()


def test_two_readers_on_one_thread_closed_in_either_order(name: str, ring: RingWriter) -> None:
    def work(first_closed: int) -> list[int | None]:
        before = my_slice()
        readers = [RingReader.attach(name, slice_ns=SLICE) for _ in range(2)]
        for r in readers:
            r.read_batch(timeout=0.005)
        readers[first_closed].close()
        between = my_slice()  # the other reader still waits on this thread
        readers[1 - first_closed].close()
        return [before, between, my_slice()]

    for first in (0, 1):
        before, between, after = in_thread(functools.partial(work, first))  # type: ignore[misc]
        assert (between, after) == (SLICE, before)


def test_a_reader_dropped_without_close_gives_it_back(name: str, ring: RingWriter) -> None:
    def work() -> tuple[int | None, int | None, int | None]:
        before = my_slice()
        r = RingReader.attach(name, slice_ns=SLICE)
        r.read_batch(timeout=0.005)
        waited = my_slice()
        del r
        gc.collect()
        return before, waited, my_slice()

    before, waited, after = in_thread(work)  # type: ignore[misc]
    assert (waited, after) == (SLICE, before)


def test_a_thread_of_another_policy_is_left_as_it_is(name: str, ring: RingWriter) -> None:
    """sched_setattr sets the policy too: a SCHED_BATCH reader must stay SCHED_BATCH."""

    def work() -> tuple[int, int | None, int | None]:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        before = my_slice()
        with RingReader.attach(name, slice_ns=SLICE) as r:
            r.read_batch(timeout=0.005)
            return os.sched_getscheduler(0), before, my_slice()

    policy, before, during = in_thread(work)  # type: ignore[misc]
    assert policy == os.SCHED_BATCH
    assert during == before


def test_a_bad_slice_is_refused_and_frees_the_reader(name: str, ring: RingWriter) -> None:
    with pytest.raises(ValueError, match="slice_ns"):
        RingReader.attach(name, slice_ns=0)
    assert ring.readers() == []


def test_the_client_keeps_the_threads_slice_unless_given_one(name: str, ring: RingWriter) -> None:
    def work(**kw: int | None) -> tuple[int | None, int | None, int | None]:
        before = my_slice()
        client = Client.attach(name, **kw)  # type: ignore[arg-type]
        client.read(timeout=0.005)
        during = my_slice()
        client.close()
        return before, during, my_slice()

    before, during, after = in_thread(work)  # type: ignore[misc]
    assert during == before == after
    slice_ns = READER_SLICE_NS
    before, during, after = in_thread(lambda: work(slice_ns=slice_ns))  # type: ignore[misc]
    assert (during, after) == (READER_SLICE_NS, before)

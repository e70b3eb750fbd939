"""dataplane.sched: a thread asks the scheduler for a short slice and gets it (EEVDF kernels
report it in /proc), other threads keep theirs; the kernel clamps it to its range."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from dataplane.sched import (
    SCHED_ATTR,
    SliceLeases,
    restore_slice_of,
    set_slice_of,
    set_thread_slice,
    thread_slice_ns,
)


def test_the_attr_is_the_kernels_first_size() -> None:
    assert SCHED_ATTR.size == 56  # SCHED_ATTR_SIZE_VER1


def test_a_thread_gets_the_slice_it_asks_for_and_only_it() -> None:
    main_before = thread_slice_ns(threading.get_native_id())
    if main_before is None:
        pytest.skip("the kernel reports no se.slice (before 6.6)")
    got: dict[str, int | None] = {}

    def run() -> None:
        set_thread_slice(100_000)
        got["slice"] = thread_slice_ns(threading.get_native_id())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(5)
    assert got["slice"] == 100_000
    assert thread_slice_ns(threading.get_native_id()) == main_before


def test_the_kernel_clamps_the_slice_to_its_range() -> None:
    if thread_slice_ns(threading.get_native_id()) is None:
        pytest.skip("the kernel reports no se.slice (before 6.6)")
    got: list[int | None] = []

    def run(slice_ns: int) -> None:
        set_thread_slice(slice_ns)
        got.append(thread_slice_ns(threading.get_native_id()))

    for slice_ns in (10, 200_000_000):
        thread = threading.Thread(target=run, args=(slice_ns,))
        thread.start()
        thread.join(5)
    assert got == [100_000, 100_000_000]  # 0.1 ms to 100 ms


@pytest.mark.parametrize("own_slice", [None, 500_000])
def test_a_thread_gets_back_the_slice_it_had(own_slice: int | None) -> None:
    """restore_slice_of: the kernel's default when the thread had it, else the slice
    the thread had asked for itself (an engine on an application's loop must not take it)."""
    if thread_slice_ns(threading.get_native_id()) is None:
        pytest.skip("the kernel reports no se.slice (before 6.6)")
    got: dict[str, int | None] = {}

    def run() -> None:
        me = threading.get_native_id()
        if own_slice is not None:
            set_thread_slice(own_slice)
        before = got["before"] = thread_slice_ns(me)
        set_thread_slice(100_000)
        restore_slice_of(me, before)
        got["after"] = thread_slice_ns(me)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(5)
    assert got["after"] == got["before"]
    if own_slice is not None:
        assert got["after"] == own_slice


def test_a_lease_on_a_thread_that_ended_ends_quietly() -> None:
    """The last lease of a thread gone meanwhile gives nothing back (its id may be another
    process's thread by now) and raises nothing; leases of live threads count."""
    if thread_slice_ns(threading.get_native_id()) is None:
        pytest.skip("the kernel reports no se.slice (before 6.6)")
    leases = SliceLeases()
    ids: list[int] = []
    thread = threading.Thread(target=lambda: ids.append(threading.get_native_id()))
    thread.start()
    thread.join(5)
    gone = Path(f"/proc/self/task/{ids[0]}")
    for _ in range(1000):  # join returns a moment before the OS thread is gone
        if not gone.exists():
            break
        time.sleep(0.001)
    assert not leases.hold(ids[0], 100_000)  # no such thread now: no lease
    with pytest.raises(OSError):
        set_slice_of(ids[0], 100_000)
    me = threading.get_native_id()
    before = thread_slice_ns(me)
    try:
        assert leases.hold(me, 300_000) and leases.hold(me, 100_000)
        assert leases.held(me) == 2 and thread_slice_ns(me) == 300_000  # the first one's
        leases.release(me)
        assert thread_slice_ns(me) == 300_000
    finally:
        leases.release(me)
    assert leases.held(me) == 0 and thread_slice_ns(me) == before

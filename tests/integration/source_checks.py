"""Checks every network source of the consumer SDK must pass, whatever its transport."""

from __future__ import annotations

import threading
import time

from gateway.client.core import MessageSource


def check_interrupt_and_close_end_a_wait_in_another_thread(source: MessageSource) -> None:
    """A wait in one thread ends at once on interrupt() (False), so does a read blocked
    without a timeout ([]), and a read blocked without a timeout ends on close() ([]),
    leaving the source ended."""
    results: list[object] = []
    waiter = threading.Thread(target=lambda: results.append(source.wait(30)))
    waiter.start()
    time.sleep(0.2)
    source.interrupt()
    waiter.join(2)
    assert not waiter.is_alive() and results == [False]

    interrupted = threading.Thread(target=lambda: results.append(source.read(timeout=None)))
    interrupted.start()
    time.sleep(0.2)
    source.interrupt()
    interrupted.join(2)
    assert not interrupted.is_alive() and results == [False, []]

    reader = threading.Thread(target=lambda: results.append(source.read(timeout=None)))
    reader.start()
    time.sleep(0.2)
    source.close()
    reader.join(2)
    assert not reader.is_alive() and results == [False, [], []]
    assert source.ended


def check_a_busy_read_polls_and_a_futex_read_sleeps(
    busy: MessageSource, sleepy: MessageSource
) -> None:
    """An empty read of 0.2 s: the busy source polls (this thread's CPU time grows with the
    wait), the futex one sleeps in poll."""
    before = time.thread_time()
    assert busy.read(timeout=0.2) == []
    assert time.thread_time() - before > 0.02
    before = time.thread_time()
    assert sleepy.read(timeout=0.2) == []
    assert time.thread_time() - before < 0.02

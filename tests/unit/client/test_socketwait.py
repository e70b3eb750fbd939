"""gateway.client.socketwait: a wait keeps its poll object for the next wait on the same
socket; a wait on another socket, or one under way in another thread, does not use it."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from gateway.client.socketwait import SocketWait


@pytest.fixture
def pairs() -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    made = [socket.socketpair() for _ in range(2)]
    yield made
    for a, b in made:
        a.close()
        b.close()


def test_a_wait_on_another_socket_sees_only_that_socket(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    (a_in, a_out), (b_in, b_out) = pairs
    waiting = SocketWait()
    try:
        a_in.send(b"x")  # a stays readable throughout
        assert waiting.wait(a_out.fileno(), 1.0) == "ready"
        assert waiting.wait(a_out.fileno(), 1.0) == "ready"  # the kept poll object
        # b has nothing: the poll object kept for a must not answer for it.
        assert waiting.wait(b_out.fileno(), 0.05) == "timeout"
        b_in.send(b"y")
        assert waiting.wait(b_out.fileno(), 1.0) == "ready"
        b_out.recv(1)
        assert waiting.wait(b_out.fileno(), 0.05) == "timeout"
        assert waiting.wait(None, 0.05) == "timeout"  # only the timeout (and an interrupt)
        waiting.interrupt()
        assert waiting.wait(b_out.fileno(), 1.0) == "interrupted"
        assert waiting.wait(b_out.fileno(), 0.05) == "timeout"  # the interrupt was taken
    finally:
        waiting.close()
    assert waiting.wait(a_out.fileno(), 1.0) == "interrupted"  # closed: every later wait


def test_waits_in_two_threads_at_once_each_end_on_their_own_socket(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    (a_in, a_out), (b_in, b_out) = pairs
    waiting = SocketWait()
    results: dict[str, str] = {}

    def wait_on(name: str, sock: socket.socket) -> None:
        results[name] = waiting.wait(sock.fileno(), 5.0)

    try:
        assert waiting.wait(a_out.fileno(), 0.01) == "timeout"  # a poll object kept for a
        first = threading.Thread(target=wait_on, args=("a", a_out))
        second = threading.Thread(target=wait_on, args=("b", b_out))
        first.start()
        second.start()
        time.sleep(0.1)
        b_in.send(b"y")
        second.join(5)
        assert results == {"b": "ready"}
        a_in.send(b"x")
        first.join(5)
        assert results == {"a": "ready", "b": "ready"}
    finally:
        waiting.close()


def test_close_ends_a_wait_under_way_and_closes_the_pipe_after_it(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    (_, a_out), _ = pairs
    waiting = SocketWait()
    assert waiting.wait(a_out.fileno(), 0.01) == "timeout"
    result: list[str] = []
    thread = threading.Thread(target=lambda: result.append(waiting.wait(a_out.fileno(), 5.0)))
    thread.start()
    time.sleep(0.1)
    waiting.close()
    thread.join(5)
    assert result == ["interrupted"]
    assert waiting._wake_r == waiting._wake_w == -1  # closed once the last waiter left


def spent(call: Callable[[], str]) -> tuple[str, float]:
    """What the wait returned and the CPU time this thread spent in it."""
    before = time.thread_time()
    result = call()
    return result, time.thread_time() - before


def test_a_spinning_wait_polls_without_sleeping_and_ends_as_a_sleeping_one(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    """spin: the wait polls (the thread's CPU time grows with it) and ends the same ways
    as a sleeping wait: data, timeout, interrupt; spin past the timeout is the timeout."""
    (a_in, a_out), _ = pairs
    waiting = SocketWait()
    try:
        result, cpu = spent(lambda: waiting.wait(a_out.fileno(), 0.2, 0.2))
        assert result == "timeout" and cpu > 0.02, cpu  # polled, not asleep
        result, cpu = spent(lambda: waiting.wait(a_out.fileno(), 0.2))
        assert result == "timeout" and cpu < 0.02, cpu  # asleep in poll
        result, _ = spent(lambda: waiting.wait(a_out.fileno(), 0.1, float("inf")))
        assert result == "timeout"

        threading.Timer(0.05, a_in.send, (b"x",)).start()
        assert waiting.wait(a_out.fileno(), 5.0, float("inf")) == "ready"
        a_out.recv(1)
        threading.Timer(0.05, waiting.interrupt).start()
        started = time.monotonic()
        assert waiting.wait(a_out.fileno(), 5.0, float("inf")) == "interrupted"
        assert time.monotonic() - started < 4.0
        # spin for part of the timeout: then asleep for the rest, and data still ends it
        threading.Timer(0.1, a_in.send, (b"y",)).start()
        assert waiting.wait(a_out.fileno(), 5.0, 0.01) == "ready"
    finally:
        waiting.close()

"""A wait on a socket in the consumer's own thread that another thread can end.

The network sources (/v1/stream, core NATS) read their socket where the consumer waits, so a
message costs one wake-up (the socket's), not two (a reading thread's, then the consumer's).
Such a wait must still end at once on `interrupt` (asyncio cancellation of an aread) and on
`close` from another thread: the poll includes a pipe that those write to.

A wait may first poll without sleeping (`spin`, the consumer's "spin" and "busy" wait
policies): a message that comes meanwhile costs no wake-up at all, at the price of the CPU
the polling takes.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from typing import Literal

WaitResult = Literal["ready", "timeout", "interrupted"]


class SocketWait:
    """poll() on one socket and a wake-up pipe; thread-safe interrupt and close."""

    def __init__(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._lock = threading.Lock()
        self._waiters = 0  # polls under way: the pipe is closed after the last one
        #: The last wait's poll object and its socket: the next wait on that socket takes it
        #: instead of making and filling one (a wait in another thread meanwhile makes its own).
        self._poller: tuple[int | None, select.poll] | None = None
        self.closed = False

    def wait(self, fd: int | None, timeout: float, spin: float = 0.0) -> WaitResult:
        """Until `fd` is readable, `timeout` s pass (fd None: only that) or the wait is
        interrupted (or closed). An interrupt that came while nobody waited ends the next
        wait at once: one spurious wake-up rather than a lost interrupt. spin: seconds of
        the timeout to poll without sleeping first (inf: all of it)."""
        with self._lock:
            if self.closed:
                return "interrupted"
            self._waiters += 1
            wake = self._wake_r
            kept, self._poller = self._poller, None
        if kept is not None and kept[0] == fd:
            poller = kept[1]
        else:
            poller = select.poll()
            poller.register(wake, select.POLLIN)
            if fd is not None:
                poller.register(fd, select.POLLIN)
        try:
            ready = None
            if spin > 0 and fd is not None:
                ready, timeout = _spin(poller, min(spin, timeout), timeout)
            if not ready:
                ready = poller.poll(max(0.0, timeout) * 1000)
            if not ready:
                return "timeout"
            if ready[0][0] == wake or (len(ready) > 1 and ready[1][0] == wake):
                with contextlib.suppress(BlockingIOError):
                    os.read(wake, 4096)
                return "interrupted"
            return "ready"
        finally:
            with self._lock:
                self._waiters -= 1
                if self.closed:
                    if not self._waiters:
                        self._close_pipe()
                else:
                    self._poller = (fd, poller)

    def interrupt(self) -> None:
        with self._lock, contextlib.suppress(OSError):
            if self._wake_w >= 0:
                os.write(self._wake_w, b"x")

    def close(self) -> None:
        """End every wait under way and every later one."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")
            if not self._waiters:  # else the last waiter closes it (its fd is in a poll)
                self._close_pipe()

    def _close_pipe(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_r = self._wake_w = -1


def _spin(poller: select.poll, spin: float, timeout: float) -> tuple[list[tuple[int, int]], float]:
    """Poll without sleeping for up to `spin` s: what became ready ([]: nothing) and what is
    left of `timeout`."""
    start = time.monotonic()
    end = start + spin
    poll = poller.poll
    while not (ready := poll(0)) and time.monotonic() < end:
        pass
    return ready, timeout - (time.monotonic() - start)

"""Pump an `Interface` over a `Link`: the blocking-style driver for tests, tools and scripts.

The engine (lcore thread) drives the stack in production; this driver is the simple one:
`step()` is rx burst -> `receive` -> application services -> `poll` -> tx burst, which also
fires due timers because `poll` does. Every wait (`run_until` and the helpers built on it)
keeps stepping, so what the application queued keeps leaving while it waits for an answer.
(An old C client's blocking recv() stopped servicing TX: the request it had just queued
never left, so the response it waited for never came.)

With a `VirtualClock` nothing sleeps: when a step finds no work the clock jumps to the next
timer or frame due, and each busy step costs `virtual_step` seconds, so a run on an
in-memory link is deterministic and always reaches its deadline.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dataplane.errors import DataplaneError
from dataplane.links.base import Clock, Link, link_poll_at
from dataplane.links.clock import VirtualClock
from dataplane.stack.iface import Interface
from dataplane.stack.socket import TcpSocket
from dataplane.stack.tcp import TcpState

__all__ = [
    "ConnectionClosedError",
    "RunnerStats",
    "StackRunner",
    "StackTimeoutError",
    "VirtualClock",
]

#: What an application hook gets each step: the step's time.
Service = Callable[[float], None]

_CONNECTING = (TcpState.SYN_SENT, TcpState.SYN_RECEIVED)


class StackTimeoutError(DataplaneError):
    """A wait on the stack ran out of time."""


class ConnectionClosedError(DataplaneError):
    """The peer closed (or the connection failed) before the awaited bytes arrived."""


@dataclass(slots=True)
class RunnerStats:
    steps: int = 0
    rx_frames: int = 0
    tx_frames: int = 0
    tx_backlog_dropped: int = 0  # the link refused frames for so long that the backlog overflowed


class StackRunner:
    """Drives one interface over one link; `peers` are stepped in the same loop (tests run
    both ends of an in-memory link on one thread)."""

    def __init__(
        self,
        interface: Interface,
        link: Link,
        clock: Clock = time.monotonic,
        *,
        sleep: Callable[[float], None] | None = None,
        peers: Sequence[StackRunner] = (),
        burst: int = 32,
        max_rx_bursts: int = 8,
        idle_sleep: float = 0.001,
        virtual_step: float = 1e-6,
        tx_backlog_limit: int = 8192,
    ) -> None:
        if interface.mac != link.mac:
            raise ValueError("the interface's MAC differs from the link's")
        self.interface = interface
        self.link = link
        self.clock = clock
        self._virtual = clock if isinstance(clock, VirtualClock) else None
        self._sleep = sleep or (self._virtual.sleep if self._virtual else time.sleep)
        self.peers: list[StackRunner] = list(peers)
        self.services: list[Service] = []
        self.burst = burst
        self.max_rx_bursts = max_rx_bursts
        self.idle_sleep = idle_sleep
        self.virtual_step = virtual_step
        self.tx_backlog_limit = tx_backlog_limit
        self.stats = RunnerStats()
        self._tx_backlog: deque[bytes] = deque()

    # -- one turn ---------------------------------------------------------------------------

    def step(self) -> bool:
        """One rx -> receive -> services -> poll -> tx turn; True when anything moved."""
        now = self.clock()
        stats = self.stats
        stats.steps += 1
        received = 0
        for _ in range(self.max_rx_bursts):
            frames = self.link.rx_burst(self.burst)
            if not frames:
                break
            received += len(frames)
            self.interface.receive(frames, now)
            if len(frames) < self.burst:
                break
        stats.rx_frames += received
        for service in self.services:
            service(now)
        out = self.interface.poll(now)
        backlog = self._tx_backlog
        backlog.extend(out)
        sent = 0
        while backlog:
            batch = [backlog[i] for i in range(min(self.burst, len(backlog)))]
            taken = self.link.tx_burst(batch)
            for _ in range(taken):
                backlog.popleft()
            sent += taken
            if taken < len(batch):
                break
        while len(backlog) > self.tx_backlog_limit:
            backlog.popleft()
            stats.tx_backlog_dropped += 1
        stats.tx_frames += sent
        return bool(received or out or sent)

    def poll_at(self) -> float | None:
        """When this runner next has work: the interface's timers or a frame the link holds."""
        if self._tx_backlog:
            return self.clock()
        times = [t for t in (self.interface.poll_at(), link_poll_at(self.link)) if t is not None]
        return min(times) if times else None

    # -- waiting ----------------------------------------------------------------------------

    def run_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Step (this runner and its peers) until predicate() is true or timeout passes.

        Returns whether the predicate came true. RX and TX are serviced all along.
        """
        runners = [self, *self.peers]
        deadline = self.clock() + timeout
        while True:
            busy = False
            for runner in runners:
                busy = runner.step() or busy
            if predicate():
                return True
            now = self.clock()
            if now >= deadline:
                return False
            if busy:
                if self._virtual is not None:
                    self._virtual.advance(self.virtual_step)
                continue
            wake = deadline
            for runner in runners:
                when = runner.poll_at()
                if when is not None and when < wake:
                    wake = when
            if self._virtual is not None:
                self._virtual.advance_to(max(wake, now + self.virtual_step))
            elif wake > now:
                self._sleep(min(wake - now, self.idle_sleep))

    def run_for(self, seconds: float) -> None:
        """Service the stack for `seconds` (of this runner's clock)."""
        self.run_until(lambda: False, seconds)

    # -- application helpers ------------------------------------------------------------------

    def connect(
        self,
        remote_ip: int,
        remote_port: int,
        timeout: float = 10.0,
        *,
        local_port: int | None = None,
    ) -> TcpSocket:
        """Open a connection and wait for the handshake; raises its error or a timeout."""
        sock = self.interface.connect(remote_ip, remote_port, self.clock(), local_port=local_port)
        self.run_until(lambda: sock.error is not None or sock.state not in _CONNECTING, timeout)
        if sock.error is not None:
            raise sock.error
        if sock.state in _CONNECTING:
            sock.abort()
            raise StackTimeoutError(f"connect to {sock.remote} timed out after {timeout:g} s")
        if sock.state is not TcpState.ESTABLISHED and sock.state is not TcpState.CLOSE_WAIT:
            raise ConnectionClosedError(f"connect to {sock.remote} ended in {sock.state.name}")
        return sock

    def send_all(
        self, sock: TcpSocket, data: bytes | bytearray | memoryview, timeout: float = 10.0
    ) -> None:
        """Queue all of data (waiting for send-buffer space as needed); raises on error."""
        view = memoryview(data).cast("B")
        offset = 0

        def progressed() -> bool:
            nonlocal offset
            if sock.error is not None:
                return True
            if sock.send_space > 0:
                offset += sock.send(view[offset:])
            return offset >= len(view)

        if progressed():
            self._raise_error(sock)
            return
        if not self.run_until(progressed, timeout):
            raise StackTimeoutError(
                f"send to {sock.remote}: {offset} of {len(view)} bytes queued in {timeout:g} s"
            )
        self._raise_error(sock)

    def recv_exactly(self, sock: TcpSocket, n: int, timeout: float = 10.0) -> bytes:
        """Exactly n bytes; raises ConnectionClosedError at EOF first, or a timeout."""
        buffer = bytearray()

        def done() -> bool:
            if len(buffer) < n:
                buffer.extend(sock.connection.recv(n - len(buffer)))
            return len(buffer) >= n or sock.at_eof or sock.error is not None

        if not done() and not self.run_until(done, timeout):
            raise StackTimeoutError(
                f"recv from {sock.remote}: {len(buffer)} of {n} bytes in {timeout:g} s"
            )
        if len(buffer) < n:
            self._raise_error(sock)
            raise ConnectionClosedError(
                f"{sock.remote} closed after {len(buffer)} of the {n} bytes awaited"
            )
        return bytes(buffer)

    def recv_until_eof(
        self, sock: TcpSocket, timeout: float = 10.0, *, max_bytes: int | None = None
    ) -> bytes:
        """Everything up to the peer's FIN (raises if more than max_bytes arrive first)."""
        buffer = bytearray()

        def done() -> bool:
            while chunk := sock.connection.recv(1 << 20):
                buffer.extend(chunk)
            if max_bytes is not None and len(buffer) > max_bytes:
                return True
            return sock.at_eof or sock.error is not None

        if not done() and not self.run_until(done, timeout):
            raise StackTimeoutError(
                f"recv from {sock.remote}: no EOF after {len(buffer)} bytes in {timeout:g} s"
            )
        if max_bytes is not None and len(buffer) > max_bytes:
            raise ConnectionClosedError(f"{sock.remote} sent more than {max_bytes} bytes")
        if not sock.at_eof:
            self._raise_error(sock)
        return bytes(buffer)

    def close(self, sock: TcpSocket, timeout: float = 10.0) -> None:
        """Close and wait until our FIN is acknowledged (or the connection is gone)."""
        sock.close()
        finished = (TcpState.FIN_WAIT_2, TcpState.TIME_WAIT, TcpState.CLOSED)
        if not self.run_until(lambda: sock.state in finished or sock.error is not None, timeout):
            raise StackTimeoutError(f"close of {sock.remote}: still {sock.state.name}")

    @staticmethod
    def _raise_error(sock: TcpSocket) -> None:
        if sock.error is not None:
            raise sock.error

"""The local transport: a gateway's shared-memory ring on this host (zero-copy, no gateway
involvement per message). See dataplane.ring for the ring itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from dataplane.ring import RingReader, WaitOrigin, WaitPolicy

if TYPE_CHECKING:
    from gateway.client.core import ClientEvent


class RingSource:
    """Messages from a gateway's shared-memory ring (this host only)."""

    def __init__(self, reader: RingReader) -> None:
        self.reader = reader
        self._ended = False

    def read(self, max: int | None = None, timeout: float | None = 0.0) -> list[ClientEvent]:
        # A list of RingMessage | Gap is a list of ClientEvent (lists are invariant).
        return cast("list[ClientEvent]", self.reader.read_batch(max, timeout))

    @property
    def epoch(self) -> int:
        return self.reader.epoch

    def wait(self, timeout: float | None, spin: float | None = None) -> bool:
        return self.reader.wait(timeout, spin)

    @property
    def wait_policy(self) -> WaitPolicy:
        return self.reader.wait_policy

    @property
    def wait_origin(self) -> WaitOrigin:
        return self.reader.wait_origin

    def interrupt(self) -> None:
        self.reader.interrupt()

    @property
    def continues(self) -> bool:
        return False

    @property
    def ended(self) -> bool:
        if not self._ended:
            # Closed and drained, or the writer died without closing (its flock is gone)
            # and there is nothing left to read.
            reader = self.reader
            self._ended = reader.closed or (not reader.writer_alive() and reader.lag == 0)
        return self._ended

    def close(self) -> None:
        self.reader.close()

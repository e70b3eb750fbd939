"""A clock that moves only when told to, so in-memory runs are deterministic and never sleep."""

from __future__ import annotations


class VirtualClock:
    """Callable like `time.monotonic`; `advance`/`sleep` move it forward, never back."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def __call__(self) -> float:
        return self._now

    @property
    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock cannot go back in time")
        self._now += seconds

    def advance_to(self, when: float) -> None:
        """Move to `when`; a time already past is a no-op (timers may fire late, not early)."""
        self._now = max(self._now, when)

    def sleep(self, seconds: float) -> None:
        """`time.sleep` for virtual time: returns at once, the clock moved on."""
        self.advance(max(0.0, seconds))

    def __repr__(self) -> str:
        return f"VirtualClock({self._now!r})"

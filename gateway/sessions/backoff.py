"""Reconnect delays: capped exponential backoff with jitter, sans-IO.

The random source is passed in, so tests replay an exact sequence from a seed; the caller
sleeps. Why jitter at all: after an exchange drops every client at once, un-jittered
clients come back in lock-step waves; "full jitter" (AWS Architecture Blog, "Exponential
Backoff And Jitter") spreads them uniformly and does the least total work.
"""

from __future__ import annotations

import random

from gateway.sessions.config import ReconnectPolicy

#: Exponents beyond this add nothing once multiplied into a cap, and float pow overflows.
_MAX_EXPONENT = 64
#: A Retry-After beyond this is a misconfigured server, not a plan.
MAX_RETRY_AFTER_S = 600.0


class Backoff:
    """Delays for consecutive failed attempts; `reset()` after a stable connection."""

    def __init__(self, policy: ReconnectPolicy, rng: random.Random | None = None) -> None:
        self.policy = policy
        self.rng = rng if rng is not None else random.Random()
        self.attempt = 0  # failed attempts since the last reset

    def ceiling(self, attempt: int) -> float:
        """The largest delay attempt number `attempt` (0-based) may wait."""
        p = self.policy
        try:
            grown = p.initial_delay_s * p.multiplier ** min(attempt, _MAX_EXPONENT)
        except OverflowError:
            grown = p.max_delay_s
        return min(p.max_delay_s, grown)

    @property
    def exhausted(self) -> bool:
        limit = self.policy.max_attempts
        return limit is not None and self.attempt >= limit

    def next_delay(self, retry_after: float | None = None) -> float | None:
        """One more attempt failed: the delay before the next, or None when that was
        attempt number max_attempts (max_attempts=3: three tries in all, two waits).

        retry_after: a server's Retry-After (RFC 9110 section 10.2.3, on 429/503) is a
        floor; it is honoured even above the cap, up to MAX_RETRY_AFTER_S."""
        self.attempt += 1
        if self.exhausted:
            return None
        ceiling = self.ceiling(self.attempt - 1)
        delay = ceiling - self.rng.uniform(0.0, ceiling * self.policy.jitter)
        if retry_after is not None and retry_after > delay:
            delay = min(retry_after, MAX_RETRY_AFTER_S)
        return max(0.0, delay)

    def reset(self) -> None:
        self.attempt = 0

"""Reconnect backoff: capped exponential growth, full jitter, attempts, Retry-After. The
random source is seeded, so each expectation is an exact replay."""

from __future__ import annotations

import random

import pytest

from gateway.sessions import Backoff, ReconnectPolicy, SessionConfig, SessionConfigError
from gateway.sessions.backoff import MAX_RETRY_AFTER_S


def test_full_jitter_replays_from_the_seed() -> None:
    policy = ReconnectPolicy(initial_delay_s=0.5, multiplier=2.0, max_delay_s=8.0, jitter=1.0)
    backoff = Backoff(policy, random.Random(42))
    delays = [backoff.next_delay() for _ in range(8)]
    # Full jitter (AWS): uniform(0, min(cap, base * 2**n)), drawn from the same sequence.
    replay = random.Random(42)
    ceilings = [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0]
    assert delays == [c - replay.uniform(0.0, c) for c in ceilings]
    assert all(d is not None and 0.0 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert backoff.attempt == 8


def test_no_jitter_is_plain_capped_exponential() -> None:
    policy = ReconnectPolicy(initial_delay_s=0.1, multiplier=3.0, max_delay_s=2.0, jitter=0.0)
    backoff = Backoff(policy, random.Random(1))
    assert [backoff.next_delay() for _ in range(5)] == pytest.approx([0.1, 0.3, 0.9, 2.0, 2.0])


def test_partial_jitter_stays_in_its_band() -> None:
    policy = ReconnectPolicy(initial_delay_s=1.0, multiplier=2.0, max_delay_s=4.0, jitter=0.2)
    backoff = Backoff(policy, random.Random(7))
    for ceiling in (1.0, 2.0, 4.0, 4.0):
        delay = backoff.next_delay()
        assert delay is not None
        assert 0.8 * ceiling <= delay <= ceiling


def test_max_attempts_and_reset() -> None:
    backoff = Backoff(ReconnectPolicy(max_attempts=3, jitter=0.0), random.Random(0))
    # Three tries in all: two waits, then the third failure gives up.
    assert backoff.next_delay() == 0.5
    assert backoff.next_delay() == 1.0
    assert backoff.next_delay() is None
    assert backoff.exhausted
    backoff.reset()  # a connection stayed up for stable_after_s
    assert backoff.next_delay() == 0.5


def test_huge_attempt_counts_do_not_overflow() -> None:
    backoff = Backoff(ReconnectPolicy(multiplier=1e6, max_delay_s=30.0, jitter=0.0))
    backoff.attempt = 10_000
    assert backoff.next_delay() == 30.0


def test_retry_after_is_a_floor_but_bounded() -> None:
    backoff = Backoff(ReconnectPolicy(jitter=0.0, max_delay_s=1.0), random.Random(0))
    assert backoff.next_delay(retry_after=5.0) == 5.0  # above the cap: the server said so
    assert backoff.next_delay(retry_after=0.1) == 1.0  # below the delay: no effect
    assert backoff.next_delay(retry_after=1e9) == MAX_RETRY_AFTER_S


@pytest.mark.parametrize(
    "policy",
    [
        ReconnectPolicy(jitter=1.5),
        ReconnectPolicy(multiplier=0.5),
        ReconnectPolicy(initial_delay_s=5.0, max_delay_s=1.0),
        ReconnectPolicy(max_attempts=0),
        ReconnectPolicy(initial_delay_s=-1.0),
    ],
)
def test_bad_policies_are_refused(policy: ReconnectPolicy) -> None:
    with pytest.raises(SessionConfigError, match="reconnect"):
        SessionConfig("ws://127.0.0.1:1/", "generic", reconnect=policy).validate()

"""Fault injection as link middleware (smoltcp's `phy::FaultInjector`, netem's knobs).

`FaultInjector(link, config, seed)` is itself a link: frames going out (`tx_burst`) and/or
coming in (`rx_burst`) are dropped, bit-flipped, duplicated, reordered, delayed, rate limited
or size limited at random. Each direction draws from its own `random.Random` seeded from
`seed`, so a single-threaded run on a virtual clock is the same run every time, and every
action is counted, so a test can check what the stack actually had to survive.
"""

from __future__ import annotations

import heapq
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal

from dataplane.links.base import Clock, Link, link_poll_at

FaultDirection = Literal["tx", "rx", "both"]

#: Largest Ethernet frame without FCS that a 1500-byte MTU allows (with one VLAN tag).
_MAX_STANDARD_FRAME = 1518


def _check_pct(name: str, value: float) -> None:
    if not 0.0 <= value <= 100.0:
        raise ValueError(f"{name} must be a percentage between 0 and 100, got {value}")


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """What to do to frames. Percentages are per frame; zero (the default) turns a fault off."""

    drop_pct: float = 0.0
    corrupt_pct: float = 0.0  # flip one random bit somewhere in the frame
    duplicate_pct: float = 0.0  # deliver the frame twice
    reorder_pct: float = 0.0  # hold the frame back until `reorder_gap` later frames passed
    reorder_gap: int = 1
    reorder_timeout: float = 0.010  # ... or this long, when no later frame comes
    delay: float = 0.0  # seconds added to every frame
    delay_jitter: float = 0.0  # plus uniform 0..jitter seconds (reorders frames too)
    max_frame_size: int = 0  # frames longer than this many bytes are dropped; 0 = no limit
    max_frames_per_s: float = 0.0  # token-bucket rate limits; 0 = unlimited
    max_bytes_per_s: float = 0.0
    rate_burst: float = 0.010  # bucket depth, in seconds of the rate
    direction: FaultDirection = "both"

    def __post_init__(self) -> None:
        for name in ("drop_pct", "corrupt_pct", "duplicate_pct", "reorder_pct"):
            _check_pct(name, getattr(self, name))
        for name in (
            "delay",
            "delay_jitter",
            "reorder_timeout",
            "max_frames_per_s",
            "max_bytes_per_s",
            "rate_burst",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} cannot be negative")
        if self.reorder_gap < 1:
            raise ValueError("reorder_gap must be at least 1")
        if self.max_frame_size < 0:
            raise ValueError("max_frame_size cannot be negative (0 means no limit)")
        if self.direction not in ("tx", "rx", "both"):
            raise ValueError(f"direction must be 'tx', 'rx' or 'both', got {self.direction!r}")


@dataclass(slots=True)
class FaultCounters:
    """Every action taken on one direction's frames."""

    frames_in: int = 0  # frames offered to the injector
    frames_out: int = 0  # frames handed on (duplicates included)
    dropped: int = 0  # by drop_pct
    corrupted: int = 0
    duplicated: int = 0
    reordered: int = 0
    delayed: int = 0
    oversize: int = 0  # dropped by max_frame_size
    rate_limited: int = 0  # dropped by a rate limit

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class _TokenBucket:
    """A refilling allowance (rate per second, `depth` at most); time comes from the caller."""

    def __init__(self, rate: float, depth: float) -> None:
        self.rate = rate
        self.depth = depth
        self.tokens = depth
        self.updated: float | None = None

    def take(self, amount: float, now: float) -> bool:
        if self.updated is not None:
            self.tokens = min(self.depth, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens < amount:
            return False
        self.tokens -= amount
        return True


@dataclass(slots=True)
class _Held:
    """A frame held back for reordering: released after `gap` later frames or at `deadline`."""

    gap: int
    deadline: float
    frame: bytes


class _Direction:
    """The faults and state of one direction (tx or rx)."""

    def __init__(self, config: FaultConfig, seed: int, name: str, active: bool) -> None:
        self.config = config
        self.active = active
        self.rng = random.Random(f"wsgw-faults:{seed}:{name}")
        self.counters = FaultCounters()
        self.delayed: list[tuple[float, int, bytes]] = []  # heap of (release_at, order, frame)
        self.held: list[_Held] = []
        self.order = 0
        self.frame_bucket = (
            _TokenBucket(
                config.max_frames_per_s, max(1.0, config.max_frames_per_s * config.rate_burst)
            )
            if config.max_frames_per_s
            else None
        )
        self.byte_bucket = (
            _TokenBucket(
                config.max_bytes_per_s,
                max(float(_MAX_STANDARD_FRAME), config.max_bytes_per_s * config.rate_burst),
            )
            if config.max_bytes_per_s
            else None
        )

    def _roll(self, pct: float) -> bool:
        return pct > 0.0 and self.rng.random() * 100.0 < pct

    def _corrupt(self, frame: bytes) -> bytes:
        if not frame:
            return frame
        bit = self.rng.randrange(len(frame) * 8)
        flipped = bytearray(frame)
        flipped[bit >> 3] ^= 1 << (bit & 7)
        return bytes(flipped)

    def release_due(self, now: float, out: list[bytes]) -> None:
        """Frames whose delay or reorder hold is over, in release order."""
        delayed = self.delayed
        while delayed and delayed[0][0] <= now:
            out.append(heapq.heappop(delayed)[2])
        if self.held and any(held.deadline <= now for held in self.held):
            still_held = []
            for held in self.held:
                if held.deadline <= now:
                    out.append(held.frame)
                else:
                    still_held.append(held)
            self.held = still_held

    def process(self, frame: bytes, now: float, out: list[bytes]) -> None:
        """Apply the faults to one frame; what passes now is appended to `out`."""
        counters = self.counters
        counters.frames_in += 1
        if not self.active:
            out.append(frame)
            return
        config = self.config
        if config.max_frame_size and len(frame) > config.max_frame_size:
            counters.oversize += 1
            return
        if (self.frame_bucket is not None and not self.frame_bucket.take(1.0, now)) or (
            self.byte_bucket is not None and not self.byte_bucket.take(float(len(frame)), now)
        ):
            counters.rate_limited += 1
            return
        if self._roll(config.drop_pct):
            counters.dropped += 1
            return
        if self._roll(config.corrupt_pct):
            counters.corrupted += 1
            frame = self._corrupt(frame)
        copies = 1
        if self._roll(config.duplicate_pct):
            counters.duplicated += 1
            copies = 2
        for _ in range(copies):
            self._schedule(frame, now, out)

    def _schedule(self, frame: bytes, now: float, out: list[bytes]) -> None:
        config = self.config
        if self._roll(config.reorder_pct):
            self.counters.reordered += 1
            self.held.append(_Held(config.reorder_gap, now + config.reorder_timeout, frame))
            return
        extra = config.delay
        if config.delay_jitter:
            extra += self.rng.uniform(0.0, config.delay_jitter)
        if extra > 0.0:
            self.counters.delayed += 1
            self.order += 1
            heapq.heappush(self.delayed, (now + extra, self.order, frame))
        else:
            out.append(frame)
        if self.held:
            # The frame just passed overtakes the held ones; release those whose gap is used up.
            still_held = []
            for held in self.held:
                held.gap -= 1
                if held.gap > 0:
                    still_held.append(held)
                elif extra > 0.0:
                    self.order += 1  # leave right after the frame that overtook it
                    heapq.heappush(self.delayed, (now + extra, self.order, held.frame))
                else:
                    out.append(held.frame)
            self.held = still_held

    def poll_at(self) -> float | None:
        times = [held.deadline for held in self.held]
        if self.delayed:
            times.append(self.delayed[0][0])
        return min(times) if times else None


class FaultInjector:
    """Link middleware that misbehaves on purpose, reproducibly per `seed`.

    Held frames (delay, reorder) are released on any later call to `rx_burst` or
    `tx_burst`; `poll_at()` says when the next one is due so a driver wakes up for it.
    """

    def __init__(
        self,
        link: Link,
        config: FaultConfig,
        seed: int,
        *,
        clock: Clock = time.monotonic,
    ) -> None:
        self.inner = link
        self.config = config
        self.seed = seed
        self.clock = clock
        self.mac = link.mac
        self.mtu = link.mtu
        self._tx = _Direction(config, seed, "tx", config.direction in ("tx", "both"))
        self._rx = _Direction(config, seed, "rx", config.direction in ("rx", "both"))
        self._tx_backlog: deque[bytes] = deque()  # passed our faults, refused by the inner link
        self._rx_ready: deque[bytes] = deque()

    @property
    def tx_counters(self) -> FaultCounters:
        return self._tx.counters

    @property
    def rx_counters(self) -> FaultCounters:
        return self._rx.counters

    def counters(self) -> dict[str, dict[str, int]]:
        """Both directions' counters, for logs and assertions."""
        return {"tx": self._tx.counters.as_dict(), "rx": self._rx.counters.as_dict()}

    def _flush_tx(self, now: float) -> None:
        released: list[bytes] = []
        self._tx.release_due(now, released)
        self._tx_backlog.extend(released)
        if self._tx_backlog:
            batch = list(self._tx_backlog)
            taken = self.inner.tx_burst(batch)
            for _ in range(taken):
                self._tx_backlog.popleft()
            self._tx.counters.frames_out += taken

    def tx_burst(self, frames: Sequence[bytes]) -> int:
        now = self.clock()
        self._flush_tx(now)
        if self._tx_backlog:
            return 0  # the link below is full: push back instead of dropping
        out: list[bytes] = []
        for frame in frames:
            self._tx.process(frame, now, out)
        self._tx_backlog.extend(out)
        self._flush_tx(now)
        return len(frames)

    def rx_burst(self, max_frames: int = 32) -> list[bytes]:
        now = self.clock()
        self._flush_tx(now)  # drivers always poll rx, so delayed tx frames leave on time
        out: list[bytes] = []
        self._rx.release_due(now, out)
        for frame in self.inner.rx_burst(max_frames):
            self._rx.process(frame, now, out)
        self._rx_ready.extend(out)
        count = min(max_frames, len(self._rx_ready))
        frames = [self._rx_ready.popleft() for _ in range(count)]
        self._rx.counters.frames_out += count
        return frames

    def poll_at(self) -> float | None:
        """The earliest time a held frame (ours or the inner link's) becomes due."""
        times = [
            t
            for t in (self._tx.poll_at(), self._rx.poll_at(), link_poll_at(self.inner))
            if t is not None
        ]
        if self._tx_backlog or self._rx_ready:
            times.append(self.clock())
        return min(times) if times else None

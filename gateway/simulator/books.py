"""The simulator's order books: one evolving book per book topic, the exchange's side of it.

A SimBook is a deterministic random walk of price levels (integer ticks and integer size
units, so it is exact) seeded by the topic: update number n of a topic is the same in
every run, every feed group and every stateless `Feed.render(topic, n, ts)` call (a state
asked for an earlier update replays from the start). Update n is the book's n-th step, and
the venues' sequence fields are n (Binance `U`/`u`, OKX `seqId`, Bybit `u`), so they agree
with `sim_seq` and the gateway's identity and gap checks.

A topic may publish a window of the book (Kraken v2 `book` depth 10, Bybit
`orderbook.N`): its updates are then the difference between the window before and after
the step, the way those venues send them: the levels that changed or entered the window,
and a zero size for the levels that left the book; a level only pushed out of the window
is left for the client to truncate.

The checksums here are written from the venues' documents, apart from
gateway.books.book, so a test that compares the two compares two readings of the docs:
- Kraken v2: asks best first then bids best first, top 10 each, every price and size
  with its dot and leading zeros removed, concatenated; CRC32, unsigned.
- OKX: the top 25 of each side interleaved `bid:size:ask:size:...`; CRC32 as a signed
  32-bit integer.

The undo log keeps the last HISTORY steps, for the stale REST snapshot fault: the book as
it was some steps ago, with that step's sequence and time.
"""

from __future__ import annotations

import random
import zlib
from bisect import bisect_left, insort
from collections import deque
from dataclasses import dataclass

#: Past this many updates away, advance_to starts a fresh book just before the one asked
#: for instead of replaying (stateless renders of far numbers: update 2**53).
JUMP = 10_000
#: Steps kept in the undo log (the furthest a stale snapshot can go back).
HISTORY = 1000
#: Levels per side: the walk keeps each side between these.
MIN_LEVELS = 20
MAX_LEVELS = 60
START_LEVELS = 40
SIZE_UNITS = 10**8  # sizes are integers of 1e-8


def _size_text(units: int, places: int) -> str:
    if places == 8:
        return f"{units // SIZE_UNITS}.{units % SIZE_UNITS:08d}"
    scale = 10 ** (8 - places)
    units = max(units // scale, 1)  # never a zero size: that would delete the level
    div = 10**places
    return f"{units // div}.{units % div:0{places}d}" if places else str(units)


@dataclass(frozen=True)
class BookStyle:
    """How a venue spells a book: price and size decimals, the zero size."""

    price_places: int = 2
    size_places: int = 8
    zero: str = "0.00000000"


Change = tuple[str, str]  # (price text, size text); a zero size removes the level


def kraken_checksum(bids: list[Change], asks: list[Change]) -> int:
    """Kraken v2 (docs.kraken.com/api/docs/guides/spot-ws-book-v2): the top 10 asks then
    the top 10 bids, each price and qty without its dot and leading zeros; CRC32."""
    text = "".join(
        p.replace(".", "").lstrip("0") + q.replace(".", "").lstrip("0")
        for p, q in (*asks[:10], *bids[:10])
    )
    return zlib.crc32(text.encode())


def okx_checksum(bids: list[Change], asks: list[Change]) -> int:
    """OKX v5 (the order book channel's checksum section): the top 25 of each side
    interleaved `bid:size:ask:size`, a side that runs out left out; CRC32, signed."""
    bids, asks = bids[:25], asks[:25]
    parts: list[str] = []
    for i in range(max(len(bids), len(asks))):
        if i < len(bids):
            parts += bids[i]
        if i < len(asks):
            parts += asks[i]
    crc = zlib.crc32(":".join(parts).encode())
    return crc - (1 << 32) if crc >= 1 << 31 else crc


class SimBook:
    """One topic's book: bids and asks as {ticks: size text}, sorted tick lists, and the
    last step's changes as the topic publishes them (its window, when it has one). Texts
    are made once (a size when it is drawn, a price the first time it is seen): the
    checksums read 20 to 50 levels a message."""

    def __init__(
        self, seed_text: str, base_ticks: int, style: BookStyle, window: int | None = None
    ) -> None:
        self.seed_text = seed_text
        self._prices: dict[int, str] = {}
        self.base_ticks = base_ticks
        self.style = style
        self.window = window
        self.reset()

    def reset(self, start: int = 0) -> None:
        """The book before update start + 1: the topic's first book, or (start > 0) a
        book of its own for a jump."""
        seed = self.seed_text if not start else f"{self.seed_text}@{start}"
        rng = self._rng = random.Random(zlib.crc32(seed.encode()))
        self.seq = start
        self.ts_us = 0
        self.bids: dict[int, str] = {}
        self.asks: dict[int, str] = {}
        self._bid_keys: list[int] = []  # ascending: best bid last
        self._ask_keys: list[int] = []  # ascending: best ask first
        self._history: deque[tuple[list[tuple[bool, int, str | None]], int]] = deque(maxlen=HISTORY)
        self.changes: tuple[list[Change], list[Change]] = ([], [])
        price = self.base_ticks - 1
        for _ in range(START_LEVELS):
            self._put(True, price, self._size(rng))
            price -= rng.randint(1, 3)
        price = self.base_ticks + 1
        for _ in range(START_LEVELS):
            self._put(False, price, self._size(rng))
            price += rng.randint(1, 3)
        self._view = self._window_view()

    # ---- text ------------------------------------------------------------------------------
    def price(self, ticks: int) -> str:
        text = self._prices.get(ticks)
        if text is None:
            places = self.style.price_places
            div = 10**places
            text = f"{ticks // div}.{ticks % div:0{places}d}" if places else str(ticks)
            if len(self._prices) > 100_000:
                self._prices.clear()
            self._prices[ticks] = text
        return text

    def size(self, text: str | None) -> str:
        return self.style.zero if text is None else text

    # ---- reading ---------------------------------------------------------------------------
    def top(self, depth: int | None = None) -> tuple[list[Change], list[Change]]:
        """Bids and asks, best first, as (price, size) texts."""
        bid_keys = self._bid_keys[::-1] if depth is None else self._bid_keys[: -depth - 1 : -1]
        ask_keys = self._ask_keys if depth is None else self._ask_keys[:depth]
        price, bid_sizes, ask_sizes = self.price, self.bids, self.asks
        bids = [(price(k), bid_sizes[k]) for k in bid_keys]
        asks = [(price(k), ask_sizes[k]) for k in ask_keys]
        return bids, asks

    def kraken_checksum(self) -> int:
        return kraken_checksum(*self.top(10))

    def okx_checksum(self) -> int:
        return okx_checksum(*self.top(25))

    def stale(self, behind: int) -> tuple[int, int, list[Change], list[Change]]:
        """(seq, ts_us, bids, asks) as the book was `behind` steps ago (at most HISTORY)."""
        behind = max(0, min(behind, len(self._history), self.seq))
        bids, asks = dict(self.bids), dict(self.asks)
        ts_us = self.ts_us
        for i in range(behind):
            undo, ts_us = self._history[-1 - i]
            for is_bid, ticks, before in reversed(undo):
                side = bids if is_bid else asks
                if before is None:
                    side.pop(ticks, None)
                else:
                    side[ticks] = before
        return (
            self.seq - behind,
            ts_us,
            [(self.price(k), self.size(bids[k])) for k in sorted(bids, reverse=True)],
            [(self.price(k), self.size(asks[k])) for k in sorted(asks)],
        )

    # ---- stepping --------------------------------------------------------------------------
    def advance_to(self, seq: int, ts_ns: int) -> None:
        """Make the book the one after update seq (replaying from the start if it is
        already past it, or jumping when seq is more than JUMP away); the same seq again
        changes nothing."""
        if seq < self.seq or seq - self.seq > JUMP:
            self.reset(seq - 1 if seq > JUMP else 0)
        while self.seq < seq:
            self.step(ts_ns)

    def step(self, ts_ns: int) -> None:
        """One update: one to three level changes near the inside of the book."""
        rng = self._rng
        undo: list[tuple[bool, int, str | None]] = []
        before_ts = self.ts_us
        self.seq += 1
        self.ts_us = max(ts_ns // 1000, self.ts_us + 1)  # strictly increasing (Bitstamp)
        raw: dict[tuple[bool, int], str | None] = {}
        for _ in range(rng.randint(1, 3)):
            is_bid = rng.random() < 0.5
            ticks, units = self._pick(rng, is_bid)
            if (is_bid, ticks) in raw:
                continue
            raw[(is_bid, ticks)] = units
            undo.append(self._set(is_bid, ticks, units))
            keys = self._bid_keys if is_bid else self._ask_keys
            if len(keys) > MAX_LEVELS:
                worst = keys[0] if is_bid else keys[-1]
                raw[(is_bid, worst)] = None
                undo.append(self._set(is_bid, worst, None))
        self._history.append((undo, before_ts))
        if self.window is None:
            bids = [(self.price(t), self.size(u)) for (b, t), u in raw.items() if b]
            asks = [(self.price(t), self.size(u)) for (b, t), u in raw.items() if not b]
            self.changes = (bids, asks)
        else:
            self.changes = self._window_changes()

    def _pick(self, rng: random.Random, is_bid: bool) -> tuple[int, str | None]:
        """A price and its new size (None: delete)."""
        keys = self._bid_keys if is_bid else self._ask_keys
        other = self._ask_keys if is_bid else self._bid_keys
        best = keys[-1] if is_bid else keys[0]
        op = rng.random()
        if op < 0.15:
            inside = best + 1 if is_bid else best - 1
            other_best = other[0] if is_bid else other[-1]
            if (is_bid and inside < other_best) or (not is_bid and inside > other_best):
                return inside, self._size(rng)
            return best, self._size(rng)
        if op < 0.25 and len(keys) > MIN_LEVELS:
            return best, None
        offset = int(rng.expovariate(1 / 6))
        if rng.random() < 0.5:
            index = min(offset, len(keys) - 1)
            ticks = keys[-1 - index] if is_bid else keys[index]
            if rng.random() < 0.3 and len(keys) > MIN_LEVELS:
                return ticks, None
            return ticks, self._size(rng)
        ticks = best - offset if is_bid else best + offset
        return ticks, self._size(rng)

    def _size(self, rng: random.Random) -> str:
        return _size_text(rng.randint(1, 500_000_000), self.style.size_places)

    def _put(self, is_bid: bool, ticks: int, units: str) -> None:
        side, keys = (self.bids, self._bid_keys) if is_bid else (self.asks, self._ask_keys)
        if ticks not in side:
            insort(keys, ticks)
        side[ticks] = units

    def _set(self, is_bid: bool, ticks: int, units: str | None) -> tuple[bool, int, str | None]:
        side, keys = (self.bids, self._bid_keys) if is_bid else (self.asks, self._ask_keys)
        before = side.get(ticks)
        if units is None:
            if before is not None:
                del side[ticks]
                del keys[bisect_left(keys, ticks)]
        else:
            self._put(is_bid, ticks, units)
        return is_bid, ticks, before

    # ---- windows -----------------------------------------------------------------------------
    def _window_view(self) -> tuple[dict[int, str], dict[int, str]]:
        if self.window is None:
            return {}, {}
        depth = self.window
        return (
            {k: self.bids[k] for k in self._bid_keys[: -depth - 1 : -1]},
            {k: self.asks[k] for k in self._ask_keys[:depth]},
        )

    def _window_changes(self) -> tuple[list[Change], list[Change]]:
        old_bids, old_asks = self._view
        new_bids, new_asks = self._view = self._window_view()
        out: list[list[Change]] = []
        for old, new, side in ((old_bids, new_bids, self.bids), (old_asks, new_asks, self.asks)):
            changes = [
                (self.price(k), self.size(None)) for k in old if k not in new and k not in side
            ]
            changes += [(self.price(k), self.size(u)) for k, u in new.items() if old.get(k) != u]
            out.append(changes)
        return out[0], out[1]

"""Local books kept in sync the way each venue prescribes.

A synchronizer takes one symbol's normalized book events in arrival order and answers
each with an Outcome. When it finds the book wrong (a sequence gap, a checksum mismatch,
a snapshot older than the updates it must join, an update with no snapshot) the book is
marked stale, the reason counted, and the outcome says RESYNC, once: the caller fetches or
asks for a new snapshot (REST for Binance and Bitstamp, a resubscribe for the others) and
tells consumers (`last_reset`, a BookReset event). Until the snapshot arrives, deltas are
buffered (venues whose snapshot comes from REST) or ignored.

The rules, from the venues' documentation:
- Binance spot (diff depth + GET /api/v3/depth): buffer the stream; drop events with
  `u <= lastUpdateId`; the first applied one must have `U <= lastUpdateId + 1 <= u` (a
  first one with `U > lastUpdateId + 1` means the snapshot is too old); then each `U` is
  the previous `u + 1`. USD-M futures events carry `pu`, which must equal the previous `u`.
- Kraken v2: a snapshot message, then updates; after each, truncate to the subscribed
  depth and compare the CRC32 of the top 10 (gateway.books.book.kraken_checksum).
- OKX `books`: a snapshot, then updates whose `prevSeqId` is the previous `seqId` (an
  update with `seqId == prevSeqId` changes nothing); CRC32 of the top 25, signed.
- Bybit: a snapshot (also whenever the service restarts, `u` = 1), then deltas whose `u`
  is the previous `u + 1`.
- Coinbase level2: a snapshot, then l2updates; there is no sequence to check.
- Bitstamp: buffer `diff_order_book`, take the REST snapshot, drop diffs not newer than
  its microtimestamp (also those read after the snapshot, until one is applied) and apply
  the rest; a diff older than the last applied one is out of order. There is no sequence,
  so neither a lost diff nor a stale snapshot can be seen.

The per-message path in C (key "c", the venues of gateway.books.book.C_VENUES: Binance,
OKX, Bybit, Kraken, Coinbase, Bitstamp): `on_raw_batch` hands a burst of raw messages to
dataplane/shim/book.c, which applies the same per-message rules as `_apply` here to the
messages that need nothing else and returns their normalized deltas already encoded; every
other message (a snapshot, one before the book is joined, a break, anything C does not
read) goes, in its turn, through the Python path, over the same book. tests/unit/books/
test_cbook*.py hold the two paths equal, outcome by outcome and byte by byte.
"""

from __future__ import annotations

import enum
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise

from dataplane.shim import BOOK_APPLIED, BOOK_CHECKSUM, BOOK_IGNORED, BOOK_OUT_JSON
from gateway.books.book import COrderBook, OrderBook, kraken_checksum, make_book, okx_checksum
from gateway.normalize.schema import BookDelta, BookReset, BookSnapshot, TopOfBook

#: Deltas kept while waiting for a snapshot (Binance, Bitstamp); older ones are dropped.
MAX_BUFFERED = 10_000


class Action(enum.Enum):
    APPLIED = "applied"  # the book changed (or was confirmed) and is in sync
    BUFFERED = "buffered"  # kept until the snapshot arrives
    IGNORED = "ignored"  # older than the book (a duplicate, or before the snapshot)
    RESYNC = "resync"  # the book is stale: get a new snapshot


class Reason(enum.StrEnum):
    GAP = "gap"
    CHECKSUM = "checksum"
    STALE_SNAPSHOT = "stale_snapshot"
    NO_SNAPSHOT = "no_snapshot"
    OUT_OF_ORDER = "out_of_order"
    BUFFER_OVERFLOW = "buffer_overflow"


@dataclass(frozen=True, slots=True)
class Outcome:
    action: Action
    reason: Reason | None = None
    detail: str = ""


APPLIED = Outcome(Action.APPLIED)
BUFFERED = Outcome(Action.BUFFERED)
IGNORED = Outcome(Action.IGNORED)
_IGNORED_RAW = (IGNORED, b"", b"")


class BookSync:
    """One symbol's book at one venue, and the rules that keep it right."""

    venue = ""
    #: True when the venue's snapshot comes from elsewhere (REST) and deltas must wait.
    buffers = False

    def __init__(self, symbol: str, *, depth: int | None = None, key: str = "double") -> None:
        self.symbol = symbol
        self.depth = depth
        self.book: OrderBook | COrderBook = make_book(key, self.venue, symbol, depth)
        self.synced = False
        self.resyncs: Counter[Reason] = Counter()
        self._buffer: deque[BookDelta] = deque()
        self.last_reset: BookReset | None = None
        #: False until the first delta after a snapshot has been applied.
        self._joined = False
        #: last_reset as it was when the last snapshot came: a different one means this
        #: wait for a snapshot has had its reset already (ours, or one the owner of the
        #: book sent, as the manager does for a session's upstream gap).
        self._reset_at_snapshot: BookReset | None = None

    @property
    def stale(self) -> bool:
        return not self.synced

    @property
    def waiting_for_snapshot(self) -> bool:
        """Stale, and a reset has gone out since the last snapshot (a new snapshot was
        asked for): a delta now is no news, only the snapshot ends the wait."""
        return not self.synced and self.last_reset is not self._reset_at_snapshot

    # ---- entry points ------------------------------------------------------------------
    def on_snapshot(self, snap: BookSnapshot) -> Outcome:
        self.book.load(snap.bids, snap.asks)
        self.book.seq = snap.seq
        if self.depth is not None:
            self.book.truncate(self.depth)
        self.synced = True
        self._joined = False
        self._reset_at_snapshot = self.last_reset
        bad = self._verify(snap.checksum, snap.recv_ns)
        if bad is not None:
            return bad
        return self._drain(snap)

    def on_delta(self, delta: BookDelta) -> Outcome:
        if not self.synced:
            if self.buffers:
                self._buffer.append(delta)
                if len(self._buffer) > MAX_BUFFERED:
                    self._buffer.clear()
                    return self._resync(Reason.BUFFER_OVERFLOW, delta.recv_ns)
                return BUFFERED
            if self.waiting_for_snapshot:
                return IGNORED  # one reset per wait: consumers have it already
            return self._resync(Reason.NO_SNAPSHOT, delta.recv_ns)
        return self._apply(delta)

    def snapshot_event(self, recv_ns: int, depth: int | None = None) -> BookSnapshot | None:
        """The local book as a normalized snapshot (None while stale), for consumers
        that join late or read the book by REST."""
        if not self.synced:
            return None
        bids = self.book.bids.levels(depth if depth is not None else len(self.book.bids))
        asks = self.book.asks.levels(depth if depth is not None else len(self.book.asks))
        return BookSnapshot(self.venue, self.symbol, bids, asks, self.book.seq, 0, recv_ns)

    def top_of_book(self, recv_ns: int) -> TopOfBook | None:
        """Best bid and ask of the local book; None while stale or one side is empty."""
        bid, ask = self.book.bids.best(), self.book.asks.best()
        if not self.synced or bid is None or ask is None:
            return None
        return TopOfBook(self.venue, self.symbol, *bid, *ask, self.book.seq, 0, recv_ns)

    def on_event(self, event: BookSnapshot | BookDelta) -> Outcome:
        if isinstance(event, BookDelta):
            return self.on_delta(event)
        return self.on_snapshot(event)

    def on_raw(
        self, raw: bytes, recv_ns: int, flags: int = 0
    ) -> tuple[Outcome, bytes, bytes] | None:
        """The per-message path in C (key "c", the venues in gateway.books.book.C_VENUES):
        the message as received is parsed, the venue's sequence rule checked, the levels
        applied and the checksum compared in one call, and the normalized delta comes back
        encoded (flags: dataplane.shim.BOOK_OUT_JSON | BOOK_OUT_BINARY, byte for byte what
        schema.encode gives). None when C did not take the message (the book not joined,
        a break, another event or symbol, texts it cannot hold exactly): nothing was
        applied, run the Python path on it (normalize, on_event). A checksum mismatch is a
        RESYNC outcome, as by the Python rules."""
        book = self.book
        if not self._fast_ready() or type(book) is not COrderBook or book.python:
            return None
        status, as_json, as_binary = book.c.on_message(raw, recv_ns, flags)
        if status == BOOK_APPLIED:
            return APPLIED, as_json, as_binary
        if status == BOOK_IGNORED:
            return IGNORED, b"", b""
        if status == BOOK_CHECKSUM:
            return self._c_checksum_failed(*book.c.checksums(), recv_ns), b"", b""
        return None

    def on_raw_batch(
        self,
        raws: Sequence[bytes],
        recv_ns: Sequence[int],
        flags: int,
        python_path: Callable[[int], object],
    ) -> list[tuple[Outcome, bytes, bytes] | None]:
        """on_raw over a burst, one C call for the messages that C takes in a row (a call
        costs more than a message's work). A message C does not take is handed, in its turn,
        to python_path(its index) (normalize, on_event), its result None, and the burst
        goes on after it."""
        results: list[tuple[Outcome, bytes, bytes] | None] = []
        book, start, n = self.book, 0, len(raws)
        while start < n:
            if not self._fast_ready() or type(book) is not COrderBook or book.python:
                python_path(start)
                results.append(None)
                start += 1
                continue
            went, statuses, lens, data = book.c.on_batch(raws[start:], recv_ns[start:], flags)
            if flags == BOOK_OUT_JSON and statuses[:went].count(BOOK_APPLIED) == went:
                # The common run (every message applied, JSON only: the MessagePack lengths
                # are 0): about half of Python's share per message in the general form.
                spans = pairwise(accumulate(lens[: 2 * went : 2], initial=0))
                results += [(APPLIED, data[a:b], b"") for a, b in spans]
            else:
                # message i's JSON is data[ends[2i]:ends[2i+1]], its MessagePack to ends[2i+2]
                ends = list(accumulate(lens[: 2 * went], initial=0))
                results += [
                    (
                        APPLIED,
                        data[ends[2 * i] : ends[2 * i + 1]],
                        data[ends[2 * i + 1] : ends[2 * i + 2]],
                    )
                    if statuses[i] == BOOK_APPLIED
                    else _IGNORED_RAW
                    for i in range(went)
                ]
            start += went
            if start < n:
                if statuses[went] == BOOK_CHECKSUM:  # applied: the Python rules resync
                    failed = self._c_checksum_failed(
                        lens[2 * went], lens[2 * went + 1], recv_ns[start]
                    )
                    results.append((failed, b"", b""))
                else:
                    python_path(start)
                    results.append(None)
                start += 1
        return results

    def _fast_ready(self) -> bool:
        """The state in which the per-message rule alone decides (C may take the message)."""
        return self.synced

    def _c_checksum_failed(self, expected: int, got: int, recv_ns: int) -> Outcome:
        return self._resync(Reason.CHECKSUM, recv_ns, f"expected {expected}, book has {got}")

    # ---- venue rules -------------------------------------------------------------------
    def _apply(self, delta: BookDelta) -> Outcome:
        """Check the delta's sequence against the book, apply it, verify."""
        self.book.apply(delta.bids, delta.asks)
        if self.depth is not None:
            self.book.truncate(self.depth)
        return self._verify(delta.checksum, delta.recv_ns) or APPLIED

    def _drain(self, snap: BookSnapshot) -> Outcome:
        """Apply the buffered deltas that follow the snapshot."""
        self._buffer.clear()
        return APPLIED

    def checksum(self) -> int | None:
        """The venue's checksum of the current book, None where the venue has none."""
        return None

    def _verify(self, expected: int | None, recv_ns: int) -> Outcome | None:
        if expected is None:
            return None
        got = self.checksum()
        if got is None or got == expected:
            return None
        return self._resync(Reason.CHECKSUM, recv_ns, f"expected {expected}, book has {got}")

    def _resync(self, reason: Reason, recv_ns: int, detail: str = "") -> Outcome:
        self.synced = False
        self.resyncs[reason] += 1
        self.book.clear()
        self.last_reset = BookReset(self.venue, self.symbol, reason.value, recv_ns)
        return Outcome(Action.RESYNC, reason, detail)


class BinanceBookSync(BookSync):
    """A break keeps the updates from it on: they join the next snapshot."""

    venue = "binance"
    buffers = True

    def _fast_ready(self) -> bool:
        return self.synced and self._joined

    def _drain(self, snap: BookSnapshot) -> Outcome:
        last = snap.seq
        pending = [d for d in self._buffer if d.seq > last]
        self._buffer.clear()
        if pending and pending[0].first_seq > last + 1:
            detail = f"snapshot {last}, first update starts at {pending[0].first_seq}"
            outcome = self._resync(Reason.STALE_SNAPSHOT, snap.recv_ns, detail)
            self._buffer.extend(pending)
            return outcome
        for i, delta in enumerate(pending):
            outcome = self._apply(delta)
            if outcome.action is Action.RESYNC:
                self._buffer.extend(pending[i + 1 :])
                return outcome
        return APPLIED

    def _apply(self, delta: BookDelta) -> Outcome:
        last = self.book.seq
        if delta.seq <= last:
            return IGNORED
        detail = ""
        if not self._joined:
            # The first one after the snapshot must straddle it: U <= lastUpdateId + 1.
            if delta.first_seq > last + 1:
                detail = f"U {delta.first_seq} after snapshot {last}"
        elif delta.prev_seq:
            if delta.prev_seq != last:  # futures: pu is the previous event's u
                detail = f"pu {delta.prev_seq} after u {last}"
        elif delta.first_seq != last + 1:
            detail = f"U {delta.first_seq} after u {last}"
        if detail:
            outcome = self._resync(Reason.GAP, delta.recv_ns, detail)
            self._buffer.append(delta)
            return outcome
        self._joined = True
        self.book.apply(delta.bids, delta.asks)
        self.book.seq = delta.seq
        return APPLIED


class KrakenBookSync(BookSync):
    """Kraken v2 `book`; depth is the subscription's (10 by default)."""

    venue = "kraken"

    def __init__(
        self,
        symbol: str,
        *,
        depth: int | None = 10,
        key: str = "double",
        price_places: int | None = None,
        qty_places: int | None = None,
    ) -> None:
        super().__init__(symbol, depth=depth, key=key)
        self.price_places = price_places
        self.qty_places = qty_places

    def checksum(self) -> int:
        return kraken_checksum(self.book, self.price_places, self.qty_places)

    def _fast_ready(self) -> bool:
        """C's checksum takes the texts as sent: re-padded ones are the Python rule's."""
        return self.synced and self.price_places is None and self.qty_places is None


class OkxBookSync(BookSync):
    venue = "okx"

    def checksum(self) -> int:
        return okx_checksum(self.book)

    def _apply(self, delta: BookDelta) -> Outcome:
        last = self.book.seq
        if delta.prev_seq != last:
            if delta.seq <= last and delta.prev_seq < last:
                return IGNORED
            detail = f"prevSeqId {delta.prev_seq} after seqId {last}"
            return self._resync(Reason.GAP, delta.recv_ns, detail)
        self.book.apply(delta.bids, delta.asks)
        self.book.seq = delta.seq
        return self._verify(delta.checksum, delta.recv_ns) or APPLIED


class BybitBookSync(BookSync):
    venue = "bybit"

    def _apply(self, delta: BookDelta) -> Outcome:
        last = self.book.seq
        if delta.seq <= last:
            return IGNORED
        if delta.seq != last + 1:
            return self._resync(Reason.GAP, delta.recv_ns, f"u {delta.seq} after {last}")
        self.book.apply(delta.bids, delta.asks)
        self.book.seq = delta.seq
        if self.depth is not None:
            self.book.truncate(self.depth)
        return APPLIED


class CoinbaseBookSync(BookSync):
    venue = "coinbase"


class BitstampBookSync(BookSync):
    """seq is the microtimestamp (the normalizer puts it there)."""

    venue = "bitstamp"
    buffers = True

    def _fast_ready(self) -> bool:
        return self.synced and self._joined

    def _drain(self, snap: BookSnapshot) -> Outcome:
        pending = [d for d in self._buffer if d.seq > snap.seq]
        self._buffer.clear()
        for delta in pending:
            outcome = self._apply(delta)
            if outcome.action is Action.RESYNC:
                return outcome
        return APPLIED

    def _apply(self, delta: BookDelta) -> Outcome:
        last = self.book.seq
        if not self._joined and delta.seq <= last:
            return IGNORED  # sent before the snapshot was taken, read after it
        if delta.seq < last:
            return self._resync(
                Reason.OUT_OF_ORDER, delta.recv_ns, f"microtimestamp {delta.seq} after {last}"
            )
        self._joined = True
        self.book.apply(delta.bids, delta.asks)
        self.book.seq = delta.seq
        return APPLIED


SYNCS: dict[str, type[BookSync]] = {
    cls.venue: cls
    for cls in (
        BinanceBookSync,
        KrakenBookSync,
        OkxBookSync,
        BybitBookSync,
        CoinbaseBookSync,
        BitstampBookSync,
    )
}


def make_sync(venue: str, symbol: str, **options: object) -> BookSync:
    return SYNCS[venue](symbol, **options)  # type: ignore[arg-type]

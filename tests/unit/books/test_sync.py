"""Sequence rules, per venue: the first event after a snapshot, duplicates, gaps, stale
snapshots, updates without a snapshot, and the way back to a synced book."""

from __future__ import annotations

import pytest

import gateway.books.sync
from gateway.books import Action, BookSync, Reason, make_sync
from gateway.normalize import BookDelta, BookReset, BookSnapshot, Level, TopOfBook, make_normalizer
from tests.unit.books.messages import (
    RefBook,
    binance_depth,
    binance_rest,
    bitstamp_diff,
    bitstamp_rest,
    bybit_book,
    coinbase_snapshot,
    coinbase_update,
    kraken_book,
    okx_book,
)

BIDS = [("100.0", "1"), ("99.5", "2")]
ASKS = [("100.5", "1"), ("101.0", "3")]


def one(venue: str, raw: str) -> BookSnapshot | BookDelta:
    (event,) = make_normalizer(venue).normalize(raw.encode(), 7)
    assert isinstance(event, BookSnapshot | BookDelta)
    return event


def levels(sync: BookSync) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    return sync.book.snapshot()


# ---- Binance --------------------------------------------------------------------------------
def binance_snapshot(last: int) -> BookSnapshot:
    snap = make_normalizer("binance").rest_snapshot(binance_rest(last, BIDS, ASKS), "BTCUSDT", 1)  # type: ignore[attr-defined]
    assert isinstance(snap, BookSnapshot)
    return snap


def test_binance_buffers_then_joins_the_snapshot_by_the_u_rules() -> None:
    sync = make_sync("binance", "BTCUSDT")
    early = one("binance", binance_depth(90, 95, [("100.0", "9")], []))
    straddling = one("binance", binance_depth(96, 101, [("99.5", "0")], []))
    after = one("binance", binance_depth(102, 105, [], [("100.5", "4")]))
    for event in (early, straddling, after):
        assert sync.on_event(event).action is Action.BUFFERED
    assert sync.stale
    assert sync.on_snapshot(binance_snapshot(100)).action is Action.APPLIED
    # The one with u <= lastUpdateId was dropped; the others applied in order.
    assert levels(sync) == ([("100.0", "1")], [("100.5", "4"), ("101.0", "3")])
    assert sync.book.seq == 105
    assert sync.synced


def test_binance_first_live_event_after_the_snapshot() -> None:
    sync = make_sync("binance", "BTCUSDT")
    sync.on_snapshot(binance_snapshot(100))
    assert sync.on_event(one("binance", binance_depth(99, 103, [], []))).action is Action.APPLIED
    assert sync.on_event(one("binance", binance_depth(104, 104, [], []))).action is Action.APPLIED
    # U > lastUpdateId + 1: an update between the snapshot and it was lost.
    sync = make_sync("binance", "BTCUSDT")
    sync.on_snapshot(binance_snapshot(100))
    outcome = sync.on_event(one("binance", binance_depth(102, 104, [], [])))
    assert outcome.action is Action.RESYNC
    assert outcome.reason is Reason.GAP
    # A snapshot as old as the first one cannot join the update kept from the break...
    assert sync.on_snapshot(binance_snapshot(100)).reason is Reason.STALE_SNAPSHOT
    # ...a newer one can.
    assert sync.on_snapshot(binance_snapshot(104)).action is Action.APPLIED
    assert sync.on_event(one("binance", binance_depth(99, 103, [], []))).action is Action.IGNORED
    assert sync.on_event(one("binance", binance_depth(105, 105, [], []))).action is Action.APPLIED
    assert sync.resyncs == {Reason.GAP: 1, Reason.STALE_SNAPSHOT: 1}


def test_binance_duplicate_is_ignored_and_gap_asks_for_resync() -> None:
    sync = make_sync("binance", "BTCUSDT")
    sync.on_snapshot(binance_snapshot(100))
    assert (
        sync.on_event(one("binance", binance_depth(101, 105, [("98", "1")], []))).action
        is Action.APPLIED
    )
    assert (
        sync.on_event(one("binance", binance_depth(101, 105, [("98", "5")], []))).action
        is Action.IGNORED
    )
    assert sync.book.bids.top(3)[-1] == ("98", "1")
    outcome = sync.on_event(one("binance", binance_depth(107, 110, [], [])))
    assert outcome.action is Action.RESYNC
    assert outcome.reason is Reason.GAP
    assert sync.stale
    assert sync.resyncs[Reason.GAP] == 1
    assert len(sync.book.bids) == 0
    # While stale, the stream is buffered again; a fresh snapshot joins it.
    assert (
        sync.on_event(one("binance", binance_depth(111, 112, [("97", "1")], []))).action
        is Action.BUFFERED
    )
    assert sync.on_snapshot(binance_snapshot(110)).action is Action.APPLIED
    assert ("97", "1") in sync.book.bids.top()
    assert sync.synced


def test_binance_stale_snapshot() -> None:
    sync = make_sync("binance", "BTCUSDT")
    sync.on_event(one("binance", binance_depth(120, 125, [], [])))
    outcome = sync.on_snapshot(binance_snapshot(100))
    assert outcome.action is Action.RESYNC
    assert outcome.reason is Reason.STALE_SNAPSHOT
    assert sync.resyncs[Reason.STALE_SNAPSHOT] == 1
    assert sync.stale
    # The buffered stream waits for a newer snapshot.
    assert sync.on_snapshot(binance_snapshot(121)).action is Action.APPLIED
    assert sync.book.seq == 125


def test_binance_futures_pu_chain() -> None:
    sync = make_sync("binance", "BTCUSDT")
    sync.on_snapshot(binance_snapshot(100))
    first = BookDelta("binance", "BTCUSDT", [], [], 95, 103, 94, 0, 1)
    assert sync.on_delta(first).action is Action.APPLIED
    assert (
        sync.on_delta(BookDelta("binance", "BTCUSDT", [], [], 110, 112, 103, 0, 1)).action
        is Action.APPLIED
    )
    outcome = sync.on_delta(BookDelta("binance", "BTCUSDT", [], [], 120, 125, 118, 0, 1))
    assert outcome.reason is Reason.GAP


# ---- OKX ------------------------------------------------------------------------------------
def okx_pair(
    seq: int, prev: int, ref: RefBook, bids: list[tuple[str, str]], asks: list[tuple[str, str]]
) -> BookSnapshot | BookDelta:
    ref.apply(bids, asks)
    action = "snapshot" if prev == -1 else "update"
    return one("okx", okx_book(action, seq, prev, bids, asks, ref.okx_checksum()))


def test_okx_seq_rules() -> None:
    ref = RefBook()
    sync = make_sync("okx", "BTC-USDT")
    assert sync.on_event(okx_pair(10, -1, ref, BIDS, ASKS)).action is Action.APPLIED
    update = okx_pair(15, 10, ref, [("99.5", "0")], [])
    assert sync.on_event(update).action is Action.APPLIED
    # Sent again: seqId and prevSeqId both behind the book.
    assert sync.on_event(update).action is Action.IGNORED
    # No change: seqId == prevSeqId == the book's.
    assert sync.on_event(okx_pair(15, 15, ref, [], [])).action is Action.APPLIED
    # A lost message: prevSeqId ahead of the book.
    ref2 = RefBook(dict(ref.bids), dict(ref.asks))
    outcome = sync.on_event(okx_pair(30, 20, ref2, [], []))
    assert outcome.action is Action.RESYNC
    assert outcome.reason is Reason.GAP
    # Updates while stale are not applied (and the resync is asked only once).
    assert sync.on_event(okx_pair(31, 30, ref2, [], [])).action is Action.IGNORED
    fresh = RefBook()
    assert sync.on_event(okx_pair(40, -1, fresh, BIDS, ASKS)).action is Action.APPLIED
    assert sync.on_event(okx_pair(41, 40, fresh, [("98", "1")], [])).action is Action.APPLIED
    assert sync.resyncs == {Reason.GAP: 1}


# ---- Kraken ---------------------------------------------------------------------------------
def test_kraken_update_without_snapshot_and_truncation() -> None:
    sync = make_sync("kraken", "BTC/USD", depth=2)
    ref = RefBook(depth=2)
    ref.apply(BIDS, ASKS)
    outcome = sync.on_event(one("kraken", kraken_book("update", [("99", "1")], [], 0)))
    assert outcome.reason is Reason.NO_SNAPSHOT
    assert (
        sync.on_event(
            one("kraken", kraken_book("snapshot", BIDS, ASKS, ref.kraken_checksum()))
        ).action
        is Action.APPLIED
    )
    # An insert at the top pushes the worst bid out of the subscribed depth: no qty 0 comes.
    ref.apply([("100.2", "1")], [])
    raw = kraken_book("update", [("100.2", "1")], [], ref.kraken_checksum())
    assert sync.on_event(one("kraken", raw)).action is Action.APPLIED
    assert sync.book.bids.top() == [("100.2", "1"), ("100.0", "1")]
    # The level that fell out comes back only if the venue sends it again.
    ref.apply([("100.2", "0")], [])
    raw = kraken_book("update", [("100.2", "0")], [], ref.kraken_checksum())
    assert sync.on_event(one("kraken", raw)).action is Action.APPLIED
    assert sync.book.bids.top() == [("100.0", "1")]


# ---- Bybit ----------------------------------------------------------------------------------
def test_bybit_u_rules() -> None:
    sync = make_sync("bybit", "BTCUSDT")
    assert sync.on_event(one("bybit", bybit_book("delta", 5, [], []))).reason is Reason.NO_SNAPSHOT
    assert (
        sync.on_event(one("bybit", bybit_book("snapshot", 10, BIDS, ASKS))).action is Action.APPLIED
    )
    assert (
        sync.on_event(one("bybit", bybit_book("delta", 11, [("100.0", "0")], []))).action
        is Action.APPLIED
    )
    assert (
        sync.on_event(one("bybit", bybit_book("delta", 11, [("100.0", "5")], []))).action
        is Action.IGNORED
    )
    assert sync.book.bids.top() == [("99.5", "2")]
    outcome = sync.on_event(one("bybit", bybit_book("delta", 13, [], [])))
    assert outcome.reason is Reason.GAP
    # A service restart: a snapshot with u = 1 resets the book and the sequence.
    assert (
        sync.on_event(one("bybit", bybit_book("snapshot", 1, BIDS, ASKS))).action is Action.APPLIED
    )
    assert sync.on_event(one("bybit", bybit_book("delta", 2, [], []))).action is Action.APPLIED
    assert sync.synced


# ---- Coinbase -------------------------------------------------------------------------------
def test_coinbase_snapshot_then_updates() -> None:
    sync = make_sync("coinbase", "BTC-USD")
    assert (
        sync.on_event(one("coinbase", coinbase_update([("1", "1")], []))).reason
        is Reason.NO_SNAPSHOT
    )
    assert (
        sync.on_event(one("coinbase", coinbase_update([("1", "1")], []))).action is Action.IGNORED
    )
    assert sync.resyncs == {Reason.NO_SNAPSHOT: 1}
    assert sync.on_event(one("coinbase", coinbase_snapshot(BIDS, ASKS))).action is Action.APPLIED
    assert (
        sync.on_event(one("coinbase", coinbase_update([("99.5", "0")], [("100.5", "2")]))).action
        is Action.APPLIED
    )
    assert levels(sync) == ([("100.0", "1")], [("100.5", "2"), ("101.0", "3")])
    tob = sync.top_of_book(9)
    assert tob == TopOfBook("coinbase", "BTC-USD", "100.0", "1", "100.5", "2", 0, 0, 9)
    snap = sync.snapshot_event(9, depth=1)
    assert snap is not None
    assert (snap.bids, snap.asks) == ([Level("100.0", "1")], [Level("100.5", "2")])
    sync.on_event(one("coinbase", coinbase_update([("99", "1")], [])))
    sync.synced = False
    assert sync.top_of_book(9) is None
    assert sync.snapshot_event(9) is None


# ---- Bitstamp -------------------------------------------------------------------------------
def test_bitstamp_rest_snapshot_joins_the_diffs_by_microtimestamp() -> None:
    sync = make_sync("bitstamp", "btcusd")
    old = one("bitstamp", bitstamp_diff(1_000, [("100.0", "7")], []))
    new = one("bitstamp", bitstamp_diff(3_000, [("99.5", "0")], []))
    assert sync.on_event(old).action is Action.BUFFERED
    assert sync.on_event(new).action is Action.BUFFERED
    snap = make_normalizer("bitstamp").rest_snapshot(bitstamp_rest(2_000, BIDS, ASKS), "btcusd", 1)  # type: ignore[attr-defined]
    assert sync.on_snapshot(snap).action is Action.APPLIED
    assert sync.book.bids.top() == [("100.0", "1")]  # the old diff was in the snapshot already
    outcome = sync.on_event(one("bitstamp", bitstamp_diff(2_500, [], [])))
    assert outcome.action is Action.RESYNC
    assert outcome.reason is Reason.OUT_OF_ORDER


def test_a_buffer_that_outgrows_its_bound_asks_for_resync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gateway.books.sync, "MAX_BUFFERED", 3)
    sync = make_sync("binance", "BTCUSDT")
    outcomes = [
        sync.on_event(one("binance", binance_depth(i, i, [], []))).action for i in range(1, 5)
    ]
    assert outcomes == [Action.BUFFERED] * 3 + [Action.RESYNC]
    assert sync.resyncs == {Reason.BUFFER_OVERFLOW: 1}


# ---- one reset per wait for a snapshot ------------------------------------------------------
@pytest.mark.parametrize("key", ["double", "c"])
def test_one_reset_per_wait_for_a_resubscribe_snapshot(key: str) -> None:
    """A gap's reset is the wait's only one: the deltas that still come before the new
    snapshot are ignored, not each a `no_snapshot` reset (and another resubscribe)."""
    sync = make_sync("bybit", "BTCUSDT", key=key)
    assert sync.on_event(one("bybit", bybit_book("snapshot", 10, BIDS, ASKS))).action is (
        Action.APPLIED
    )
    assert sync.on_event(one("bybit", bybit_book("delta", 12, [], []))).reason is Reason.GAP
    first_reset = sync.last_reset
    later = [sync.on_event(one("bybit", bybit_book("delta", u, [], []))) for u in range(13, 20)]
    assert [o.action for o in later] == [Action.IGNORED] * 7
    assert sync.resyncs == {Reason.GAP: 1}
    assert sync.last_reset is first_reset
    # The snapshot ends the wait; the next break is a new wait with its own reset.
    assert sync.on_event(one("bybit", bybit_book("snapshot", 30, BIDS, ASKS))).action is (
        Action.APPLIED
    )
    assert sync.on_event(one("bybit", bybit_book("delta", 33, [], []))).reason is Reason.GAP
    assert sync.on_event(one("bybit", bybit_book("delta", 34, [], []))).action is Action.IGNORED
    assert sync.resyncs == {Reason.GAP: 2}


def test_a_reset_sent_by_the_books_owner_counts_for_the_wait() -> None:
    """The manager marks a session's books stale itself on an upstream gap (its own
    BookReset, the venue's snapshot comes with the resubscribe): the deltas before that
    snapshot must not add a `no_snapshot` reset of their own."""
    sync = make_sync("okx", "BTC-USDT")
    fresh = RefBook()
    assert sync.on_event(okx_pair(40, -1, fresh, BIDS, ASKS)).action is Action.APPLIED
    sync.synced = False  # as BookManager._session_gap does
    sync.book.clear()
    sync.last_reset = BookReset("okx", "BTC-USDT", "upstream_gap", 8)
    assert sync.on_event(okx_pair(41, 40, fresh, [("98", "1")], [])).action is Action.IGNORED
    assert sync.resyncs == {}
    assert sync.on_event(okx_pair(50, -1, RefBook(), BIDS, ASKS)).action is Action.APPLIED
    assert sync.synced

"""The C book (dataplane/shim/book.c through gateway.books COrderBook and
BinanceBookSync.on_raw / on_raw_batch) against the Python path, message by message.

Two syncs get the same raw messages: one by the Python path only (normalize, on_event, the
default `double` keys), one by the C path with the Python path where C declines. After
every message they must agree on the outcome, the book (every level's text), the sequence,
the state and the counters, and an applied delta must come out of C as the very bytes that
schema.encode_json / encode_binary give for the Python path's event. cryptofeed's book is
the third reading on the simulator's streams. The parser gets truncated, byte-at-a-time and
mutated input: a typed status and nothing applied, or the same result as the Python path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from order_book import OrderBook as CryptofeedBook

from dataplane.shim import BOOK_OUT_BINARY, BOOK_OUT_JSON, BOOK_STATUS_NAMES, CBook
from gateway.books import Action, BookSync, make_sync
from gateway.books.book import COrderBook, OrderBook, okx_checksum
from gateway.books.sync import Reason
from gateway.normalize import make_normalizer
from gateway.normalize.schema import BookDelta, Level, encode_binary, encode_json
from tests.unit.books.messages import (
    Change,
    binance_depth,
    binance_rest,
    bitstamp_diff,
    bybit_book,
    coinbase_update,
    kraken_book,
    mutated,
    okx_book,
)
from tests.unit.books.strategies import changes, message_streams, odd_levels, offsets, snapshots
from tests.unit.books.test_checksums import (
    OKX_DOC_1,
    OKX_DOC_1_CHECKSUM,
    OKX_DOC_2,
    OKX_DOC_2_CHECKSUM,
)
from tests.unit.books.test_differential import cf_apply, ours_as_decimals, theirs
from wsgw_bench.books import sim_stream

BOTH = BOOK_OUT_JSON | BOOK_OUT_BINARY
NORMALIZER = make_normalizer("binance")
SYMBOLS = {
    "binance": "BTCUSDT",
    "okx": "BTC-USDT",
    "bybit": "BTCUSDT",
    "coinbase": "BTC-USD",
    "kraken": "BTC/USD",
    "bitstamp": "btcusd",
}


class Twins:
    """A Python-path sync and a C-path sync of one symbol, fed alike."""

    def __init__(self, venue: str = "binance", **options: object) -> None:
        self.venue = venue
        self.symbol = SYMBOLS[venue]
        self.normalizer = make_normalizer(venue)
        self.py = make_sync(venue, self.symbol, **options)
        self.c = make_sync(venue, self.symbol, key="c", **options)
        assert isinstance(self.c.book, COrderBook)
        self.fast = 0

    def snapshot(self, text: str) -> None:
        """A REST body (Binance, Bitstamp) or the venue's snapshot message."""
        if self.venue in ("binance", "bitstamp"):
            snap = self.normalizer.rest_snapshot(text, self.symbol, 7)  # type: ignore[attr-defined]
        else:
            (snap,) = self.normalizer.normalize(text.encode(), 7)
        outcomes = [s.on_snapshot(snap) for s in (self.py, self.c)]
        assert outcomes[0] == outcomes[1]
        self.check()

    def message(self, raw: bytes, recv_ns: int = 5) -> None:
        events = self.normalizer.normalize(raw, recv_ns)
        expected = [self.py.on_event(e) for e in events]  # type: ignore[arg-type]
        fast = self.c.on_raw(raw, recv_ns, BOTH)  # type: ignore[attr-defined]
        if fast is None:
            got = [self.c.on_event(e) for e in self.normalizer.normalize(raw, recv_ns)]  # type: ignore[arg-type]
            assert got == expected
        else:
            self.fast += 1
            outcome, as_json, as_binary = fast
            assert [outcome] == expected
            if outcome.action is Action.APPLIED:
                (event,) = events
                assert as_json == encode_json(event)
                assert as_binary == encode_binary(event)
        self.check()

    def check(self) -> None:
        assert same_state(self.py, self.c)


def same_state(py: BookSync, c: BookSync) -> bool:
    assert c.book.snapshot() == py.book.snapshot()
    assert len(c.book.bids) == len(py.book.bids) and len(c.book.asks) == len(py.book.asks)
    assert c.book.bids.best() == py.book.bids.best()
    assert c.book.asks.levels(3) == py.book.asks.levels(3)
    assert (c.book.seq, c.synced, c.resyncs, c.last_reset) == (
        py.book.seq,
        py.synced,
        py.resyncs,
        py.last_reset,
    )
    return True


# ---- hypothesis: streams with breaks, duplicates, new snapshots, odd texts -----------------
steps = message_streams(
    ["update"] * 10 + ["snapshot", "odd"],
    offsets,
    st.integers(0, 3),  # Binance: how many ids past U the update's u is
    changes,
    changes,
    odd_levels,
    max_size=40,
)


def plain(level: tuple[str, str]) -> bool:
    """A level a snapshot may hold as it is: a size not zero and not in exponent notation."""
    return level[1].strip("0.") != "" and "e" not in level[1]


@settings(max_examples=150, deadline=None)
@given(snap=snapshots, stream=steps)
def test_c_path_equals_python_path_at_every_step(
    snap: list[Change],
    stream: list[tuple[str, int, int, list[Change], list[Change], Change]],
) -> None:
    twins = Twins()
    twins.snapshot(binance_rest(1000, [s for s in snap if plain(s)], []))
    expected = 1001
    for kind, offset, span, bids, asks, odd in stream:
        if kind == "snapshot":
            last = max(expected - 1 + offset, 0)
            twins.snapshot(binance_rest(last, [b for b in bids if plain(b)], asks))
            continue
        if kind == "odd":
            bids = [*bids, odd]
        first = expected + offset
        twins.message(binance_depth(first, first + span, bids, asks).encode())
        expected = max(expected, first + span + 1)


def futures_depth(
    first: int, last: int, prev: int, bids: list[Change], asks: list[Change]
) -> bytes:
    raw = binance_depth(first, last, bids, asks)
    return raw.replace('"U":', f'"pu":{prev},"U":', 1).encode()


def test_futures_pu_rule_in_c() -> None:
    """USD-M: pu must be the previous u; C applies the chain and leaves a break to Python."""
    twins = Twins()
    twins.snapshot(binance_rest(100, [("10.0", "1")], [("11.0", "1")]))
    twins.message(futures_depth(95, 101, 90, [("10.1", "2")], []))  # joins (U <= 101 <= u)
    twins.message(futures_depth(105, 110, 101, [("10.2", "3")], []))
    twins.message(futures_depth(111, 111, 110, [], [("11.0", "0")]))
    twins.message(futures_depth(120, 121, 115, [], [("11.5", "1")]))  # a break
    assert twins.c.resyncs == twins.py.resyncs and sum(twins.c.resyncs.values()) == 1
    assert twins.fast == 2  # the joining one and the break go by the Python rules


@pytest.mark.parametrize(
    ("name", "venue", "options", "by_python"),
    [
        ("binance", "binance", {}, 1),
        ("binance-futures", "binance", {}, 1),
        ("okx", "okx", {}, 1),
        ("bybit", "bybit", {"depth": 50}, 1),
        ("coinbase", "coinbase", {}, 0),
        ("kraken", "kraken", {"depth": 10}, 0),
        ("bitstamp", "bitstamp", {}, 1),
    ],
)
def test_simulator_streams_c_python_and_cryptofeed_agree(
    name: str, venue: str, options: dict[str, int], by_python: int
) -> None:
    """The simulator's own messages (OKX and Kraken with a CRC32 on each): the C path, the
    Python path and cryptofeed's book hold the same levels after every message, and all of
    them but `by_python` (the one that joins the book by the Python rule) go through C."""
    snap, updates = sim_stream(name, 600)
    twins = Twins(venue, **options)
    twins.snapshot(snap.decode())
    reference = CryptofeedBook()
    cf_apply(venue, reference, snap.decode())
    for raw in updates:
        twins.message(raw)
        cf_apply(venue, reference, raw.decode())
        if "depth" in options:
            for levels in (reference.bids, reference.asks):
                while len(levels) > options["depth"]:
                    del levels[levels.index(options["depth"])[0]]
        assert ours_as_decimals(twins.c) == theirs(reference)
    assert twins.fast >= len(updates) - by_python
    assert not twins.c.resyncs


def test_okx_documentation_checksums_in_c() -> None:
    """OKX's two documented books: C computes their CRC32 (the update turning the first into
    the second carries the second's checksum and applies); a wrong one resyncs as the
    Python rules do, with the same detail."""
    (bids1, asks1), (bids2, asks2) = OKX_DOC_1, OKX_DOC_2
    twins = Twins("okx")
    twins.snapshot(okx_book("snapshot", 10, -1, bids1, asks1, OKX_DOC_1_CHECKSUM))
    change = okx_book("update", 11, 10, [("3366", "0")], [("3372", "8")], OKX_DOC_2_CHECKSUM)
    assert twins.c.on_raw(change.encode(), 5, 0) is not None  # type: ignore[attr-defined]
    assert twins.c.book.snapshot() == (bids2, asks2) and not twins.c.resyncs
    twins = Twins("okx")
    twins.snapshot(okx_book("snapshot", 10, -1, bids1, asks1, OKX_DOC_1_CHECKSUM))
    twins.message(okx_book("update", 11, 10, [("3366", "0")], [("3372", "8")], 12345).encode())
    assert twins.c.resyncs == {Reason.CHECKSUM: 1} and twins.fast == 1


def okx_expected(twins: Twins, bids: list[Change], asks: list[Change]) -> int:
    """The checksum OKX would send with this change: of the Python twin's book after it."""
    book = OrderBook()
    book.load(twins.py.book.bids.levels(10_000), twins.py.book.asks.levels(10_000))
    book.apply([Level(*b) for b in bids], [Level(*a) for a in asks])
    return okx_checksum(book)


@settings(max_examples=80, deadline=None)
@given(
    venue=st.sampled_from(["okx", "bybit"]),
    snap=snapshots,
    stream=st.lists(
        st.tuples(offsets, st.sampled_from([True] * 12 + [False]), changes, changes),
        min_size=1,
        max_size=30,
    ),
)
def test_okx_and_bybit_c_path_equals_python_path_at_every_step(
    venue: str, snap: list[Change], stream: list[tuple[int, bool, list[Change], list[Change]]]
) -> None:
    """Sequences with breaks and repeats, right and wrong checksums (OKX), a depth (Bybit),
    odd texts; after a resync the venue's next snapshot comes."""
    twins = Twins(venue, **({"depth": 5} if venue == "bybit" else {}))
    good = [s for s in snap if plain(s)]
    seq = 100

    def snapshot() -> None:
        if venue == "okx":
            book = OrderBook()
            book.load([Level(*g) for g in good], [Level(*g) for g in good[:3]])
            twins.snapshot(okx_book("snapshot", seq, -1, good, good[:3], okx_checksum(book)))
        else:
            twins.snapshot(bybit_book("snapshot", seq, good, good[:3]))

    snapshot()
    for offset, right, bids, asks in stream:
        if not twins.py.synced:
            seq += 1
            snapshot()
            continue
        nxt = seq + 1 + offset
        if venue == "okx":
            crc = okx_expected(twins, bids, asks) if right else 7
            twins.message(okx_book("update", nxt, seq + min(offset, 0), bids, asks, crc).encode())
        else:
            twins.message(bybit_book("delta", nxt, bids, asks).encode())
        seq = max(seq, nxt)


def test_batches_equal_single_messages() -> None:
    """on_raw_batch: the same outcomes, bytes and book as one message at a time, with the
    messages C declines (a break, another symbol, a trade) taken by the Python path in turn."""
    snap, updates = sim_stream("binance", 300)
    updates = list(updates)
    updates[40] = updates[40].replace(b'"s":"BTCUSDT"', b'"s":"ETHUSDT"')
    del updates[120]  # a break: resync, then the buffered ones wait for a snapshot
    updates.insert(200, b'{"stream":"btcusdt@trade","data":{"e":"trade"}}')
    single, batched = Twins(), make_sync("binance", "BTCUSDT", key="c")
    single.snapshot(snap.decode())
    batched.on_snapshot(NORMALIZER.rest_snapshot(snap, "BTCUSDT", 7))  # type: ignore[attr-defined]
    got: list[object] = []
    for start in range(0, len(updates), 64):
        burst = updates[start : start + 64]
        by_python: dict[int, list[object]] = {}

        def python_path(i: int, burst: list[bytes] = burst, into: dict = by_python) -> None:  # type: ignore[type-arg]
            into[i] = [batched.on_event(e).action for e in NORMALIZER.normalize(burst[i], 5)]  # type: ignore[arg-type]

        results = batched.on_raw_batch(burst, [5] * len(burst), BOTH, python_path)  # type: ignore[attr-defined]
        assert len(results) == len(burst)
        for i, result in enumerate(results):
            got += by_python.pop(i) if result is None else [result[0].action]
    want: list[object] = []
    for raw in updates:
        events = NORMALIZER.normalize(raw, 5)
        want += [single.py.on_event(e).action for e in events]  # type: ignore[arg-type]
    assert got == want
    assert same_state(single.py, batched)


@pytest.mark.parametrize("venue", ["binance", "bitstamp"])
def test_a_batch_gives_each_encoding_asked_for_and_empty_bytes_for_the_other(venue: str) -> None:
    """on_raw_batch with JSON only (its fast path), MessagePack only and both: the bytes of
    each encoding asked for are the ones both encodings give, the other is empty."""
    snap, updates = sim_stream(venue, 300)
    normalizer = make_normalizer(venue)
    symbol = "BTCUSDT" if venue == "binance" else "btcusd"
    got: dict[int, list[object]] = {}
    for flags in (BOTH, BOOK_OUT_JSON, BOOK_OUT_BINARY):
        sync: Any = make_sync(venue, symbol, key="c")
        sync.on_snapshot(normalizer.rest_snapshot(snap, symbol, 7))  # type: ignore[attr-defined]
        out: list[object] = []
        got[flags] = out
        for start in range(0, len(updates), 64):
            burst = updates[start : start + 64]

            def python_path(i: int, burst: list[bytes] = burst, sync: Any = sync) -> None:
                for event in normalizer.normalize(burst[i], 5):
                    sync.on_event(event)

            out += sync.on_raw_batch(burst, [5] * len(burst), flags, python_path)
    both = got[BOTH]
    assert sum(r is not None for r in both) > 250  # C took nearly all of them
    assert got[BOOK_OUT_JSON] == [r and (r[0], r[1], b"") for r in both]
    assert got[BOOK_OUT_BINARY] == [r and (r[0], b"", r[2]) for r in both]


def test_no_space_grows_the_buffer() -> None:
    """A delta longer than the output buffer: the buffer grows, nothing is lost."""
    book = CBook("binance", "BTCUSDT", capacity=64)
    book.set_joined(True)
    bids = [(f"{100 + i}.5", "1.25") for i in range(50)]
    status, as_json, _ = book.on_message(binance_depth(1, 1, bids, []).encode(), 0, BOTH)
    assert BOOK_STATUS_NAMES[status] == "applied"
    (event,) = NORMALIZER.normalize(binance_depth(1, 1, bids, []).encode(), 0)
    assert as_json == encode_json(event)
    assert book.count(0) == 50


def test_scale_widens_and_texts_come_back_as_sent() -> None:
    book = COrderBook("binance", "BTCUSDT")
    book.load([], [])
    book.apply([Level("100", "1"), Level("100.5", "2.50")], [])
    assert book.c.scales() == (1, 2)
    book.apply([Level("100.25", "0.00000001")], [])
    assert book.c.scales() == (2, 8)
    assert book.bids.top() == [("100.5", "2.50"), ("100.25", "0.00000001"), ("100", "1")]
    book.apply([Level("100.500", "0")], [])  # the same price, other digits
    assert book.bids.top() == [("100.25", "0.00000001"), ("100", "1")]
    assert book.python is None
    book.apply([Level("1.5e2", "1")], [])  # not a plain decimal: Python from here
    assert book.python is not None
    assert book.bids.top() == [("1.5e2", "1"), ("100.25", "0.00000001"), ("100", "1")]
    book.clear()
    assert book.python is None and len(book.bids) == 0


# ---- the parser: truncated, byte at a time, mutated ----------------------------------------
def joined_book(levels: list[Change]) -> CBook:
    book = CBook("binance", "BTCUSDT")
    book.update(0, msgspec.json.encode(levels))
    book.seq = 1000
    book.set_joined(True)
    return book


def c_state(book: CBook) -> tuple[int, bytes, bytes]:
    return book.seq, book.top_json(0, 100), book.top_json(1, 100)


@dataclass(frozen=True)
class Parsed:
    """A venue's good update for the parser tests: the joined book it applies to holds one
    bid (10.4 x 2), at sequence `seq` (None: the venue has none) and subscribed `depth`
    (Kraken's, whose checksum C checks after applying); `alphabet` is what mutations
    write; `ts_ns`, the venue time C must read from it."""

    venue: str
    good: bytes
    alphabet: bytes
    seq: int | None = None
    depth: int | None = None
    ts_ns: int | None = None

    def joined_book(self) -> CBook:
        book = CBook(self.venue, SYMBOLS[self.venue])
        book.update(0, msgspec.json.encode([("10.4", "2")]))
        if self.depth is not None:
            book.set_depth(self.depth)
        if self.seq is not None:
            book.seq = self.seq
        book.set_joined(True)
        return book


BIDS: list[Change] = [("10.5", "1"), ("10.4", "0")]
ASKS: list[Change] = [("11.25", "3.5")]
PARSED = [
    Parsed("binance", binance_depth(1001, 1001, BIDS, ASKS).encode(), b"eE", seq=1000),
    Parsed("coinbase", coinbase_update(BIDS, ASKS).encode(), b"eEZT"),
    Parsed(
        "kraken",
        kraken_book("update", BIDS, ASKS, 0).replace('"checksum":0,', "").encode(),
        b"eEZT",
        depth=10,
        ts_ns=1_696_613_755_440_295_000,
    ),
    Parsed(
        "bitstamp",
        bitstamp_diff(1_659_626_705_010_758, BIDS, ASKS).encode(),
        b"_eE",
        seq=1_000,
        ts_ns=1_659_626_705_010_758_000,
    ),
]


@pytest.mark.parametrize("case", PARSED, ids=[p.venue for p in PARSED])
def test_every_prefix_is_refused_and_applies_nothing(case: Parsed) -> None:
    """Byte at a time: every proper prefix of a message gives a typed error, and the book is
    untouched; the whole message applies, as the very bytes the Python path encodes."""
    book = case.joined_book()
    before = c_state(book)
    for end in range(len(case.good)):
        status, as_json, _ = book.on_message(case.good[:end], 0, BOTH)
        assert BOOK_STATUS_NAMES[status] in ("malformed", "unsupported"), case.good[:end]
        assert as_json == b""
        assert c_state(book) == before
    status, as_json, as_binary = book.on_message(case.good, 3, BOTH)
    assert BOOK_STATUS_NAMES[status] == "applied"
    (event,) = make_normalizer(case.venue).normalize(case.good, 3)
    assert isinstance(event, BookDelta)
    assert as_json == encode_json(event) and as_binary == encode_binary(event)
    if case.seq is not None:
        assert book.seq == event.seq
    if case.ts_ns is not None:
        assert event.venue_ts_ns == case.ts_ns


@pytest.mark.parametrize("case", PARSED, ids=[p.venue for p in PARSED])
@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_mutated_messages_are_refused_or_read_as_python_reads_them(
    case: Parsed, data: st.DataObject
) -> None:
    """Random edits of a good message: C either refuses it (a typed status, the book as it
    was; a checksum found wrong after applying, with a depth) or applies exactly the levels
    the Python normalizer reads from it."""
    raw = mutated(data, case.good, b'"[]{},:0159.-\\ xu\x00\xff' + case.alphabet)
    book = case.joined_book()
    before = c_state(book)
    status, as_json, as_binary = book.on_message(raw, 3, BOTH)
    name = BOOK_STATUS_NAMES[status]
    if name != "applied":
        if not (name == "checksum" and case.depth is not None):
            assert c_state(book) == before
        return
    (event,) = make_normalizer(case.venue).normalize(raw, 3)
    assert isinstance(event, BookDelta)
    assert as_json == encode_json(event) and as_binary == encode_binary(event)
    python = OrderBook()
    python.apply([Level("10.4", "2")], [])
    python.apply(event.bids, event.asks)
    if case.depth is not None:
        python.truncate(case.depth)
    assert book.top_json(0, 100) == msgspec.json.encode(python.bids.levels(100))
    assert book.top_json(1, 100) == msgspec.json.encode(python.asks.levels(100))
    if case.seq is not None:
        assert book.seq == event.seq


@pytest.mark.parametrize(
    ("venue", "raw"),
    [
        # OKX ts must be a string (once read uninitialized memory when it was not)
        (
            "okx",
            okx_book("update", 2, 1, [("1.5", "1")], [], 0).replace(
                '"ts":"1597026383085"', '"ts":1597026383085'
            ),
        ),
        ("okx", okx_book("update", 2, 1, [("1.5", "1")], [], 0).replace('"books"', '"trades"')),
        ("okx", okx_book("snapshot", 2, 1, [("1.5", "1")], [], 0)),
        ("bybit", bybit_book("snapshot", 2, [("1.5", "1")], [])),
        ("bybit", bybit_book("delta", 2, [("1.5", "1")], []).replace('"seq":20', '"seq":"20"')),
        ("binance", binance_depth(2, 2, [("1.5", "1")], []).replace("@depth@100ms", "@depth20")),
        (
            "binance",
            binance_depth(2, 2, [("1.5", "1")], []).replace('"s":"BTCUSDT"', '"s":"BTC\\u0055SDT"'),
        ),
    ],
)
def test_what_c_declines_goes_by_the_python_path(venue: str, raw: str) -> None:
    """Snapshots, other channels, fields of another type, escapes: a joined C book applies
    nothing and says so (on_raw then gives None: the Python path decides)."""
    assert_declined(venue, raw)


def assert_declined(venue: str, raw: str) -> None:
    """A joined C book leaves raw to the Python path: unsupported, nothing encoded, nothing
    applied, its sequence as it was (the venues' own tests use it too)."""
    book = CBook(venue, SYMBOLS[venue])
    book.set_joined(True)
    book.seq = 1
    status, as_json, _ = book.on_message(raw.encode(), 5, BOTH)
    assert BOOK_STATUS_NAMES[status] == "unsupported", raw
    assert as_json == b"" and book.count(0) == 0 and book.seq == 1


def test_deep_nesting_is_a_typed_error() -> None:
    book = joined_book([])
    deep = b'{"stream":"btcusdt@depth","x":' + b"[" * 100 + b"]" * 100 + b"}"
    status, _, _ = book.on_message(deep, 0, 0)
    assert BOOK_STATUS_NAMES[status] == "too_deep"

"""The venues' published checksum examples, reproduced from the raw message to the verdict."""

from __future__ import annotations

import zlib

from gateway.books import Action, Reason, make_sync
from gateway.books.book import (
    OrderBook,
    kraken_checksum,
    kraken_checksum_string,
    okx_checksum,
    okx_checksum_string,
)
from gateway.normalize import BookDelta, BookSnapshot, Level, make_normalizer
from tests.unit.books.messages import okx_book

# Kraken's WebSocket v2 book checksum guide: BTC/USD, price precision 1, qty precision 8,
# prices and quantities as JSON numbers with full precision; CRC32 3310070434.
KRAKEN_DOC_BIDS = [
    ("45283.5", "0.10000000"),
    ("45283.4", "1.54582015"),
    ("45282.1", "0.10000000"),
    ("45281.0", "0.10000000"),
    ("45280.3", "1.54592586"),
    ("45279.0", "0.07990000"),
    ("45277.6", "0.03310103"),
    ("45277.5", "0.30000000"),
    ("45277.3", "1.54602737"),
    ("45276.6", "0.15445238"),
]
KRAKEN_DOC_ASKS = [
    ("45285.2", "0.00100000"),
    ("45286.4", "1.54571953"),
    ("45286.6", "1.54571109"),
    ("45289.6", "1.54560911"),
    ("45290.2", "0.15890660"),
    ("45291.8", "1.54553491"),
    ("45294.7", "0.04454749"),
    ("45296.1", "0.35380000"),
    ("45297.5", "0.09945542"),
    ("45299.5", "0.18772827"),
]
KRAKEN_DOC_STRING = (
    "45285210000045286415457195345286615457110945289615456091145290215890660"
    "452918154553491452947445474945296135380000452975994554245299518772827"
    "452835100000004528341545820154528211000000045281010000000452803154592586"
    "452790799000045277633101034527753000000045277315460273745276615445238"
)
KRAKEN_DOC_CHECKSUM = 3310070434


def kraken_doc_message(checksum: int = KRAKEN_DOC_CHECKSUM) -> bytes:
    def levels(pairs: list[tuple[str, str]]) -> str:
        return ",".join(f'{{"price":{p},"qty":{q}}}' for p, q in pairs)

    return (
        '{"channel":"book","type":"snapshot","data":[{"symbol":"BTC/USD",'
        f'"bids":[{levels(KRAKEN_DOC_BIDS)}],"asks":[{levels(KRAKEN_DOC_ASKS)}],'
        f'"checksum":{checksum}}}]}}'
    ).encode()


def test_kraken_doc_string_and_crc() -> None:
    assert kraken_checksum_string(KRAKEN_DOC_BIDS, KRAKEN_DOC_ASKS) == KRAKEN_DOC_STRING
    assert zlib.crc32(KRAKEN_DOC_STRING.encode()) == KRAKEN_DOC_CHECKSUM


def test_kraken_doc_snapshot_message_verifies() -> None:
    (snap,) = make_normalizer("kraken").normalize(kraken_doc_message(), 1)
    assert isinstance(snap, BookSnapshot)
    # The JSON numbers keep their wire text: 45281.0 and 0.10000000, not 45281 and 0.1.
    assert snap.bids[3] == Level("45281.0", "0.10000000")
    sync = make_sync("kraken", "BTC/USD", depth=10)
    assert sync.on_snapshot(snap).action is Action.APPLIED
    assert sync.checksum() == KRAKEN_DOC_CHECKSUM
    assert sync.synced


def test_kraken_doc_snapshot_with_a_wrong_checksum_asks_for_resync() -> None:
    (snap,) = make_normalizer("kraken").normalize(kraken_doc_message(KRAKEN_DOC_CHECKSUM + 1), 1)
    sync = make_sync("kraken", "BTC/USD")
    outcome = sync.on_event(snap)
    assert outcome.action is Action.RESYNC
    assert outcome.reason is Reason.CHECKSUM
    assert sync.stale
    assert sync.resyncs[Reason.CHECKSUM] == 1
    assert sync.last_reset is not None
    assert sync.last_reset.reason == "checksum"


def test_kraken_checksum_pads_to_the_instrument_precision() -> None:
    # A source that lost trailing zeros (45281 for 45281.0, 0.1 for 0.10000000) gives the
    # documented checksum again once re-padded to the pair's precision (1 and 8).
    stripped = [(p.rstrip("0").rstrip("."), q.rstrip("0")) for p, q in KRAKEN_DOC_BIDS]
    book = OrderBook()
    book.load([Level(p, q) for p, q in stripped], [Level(p, q) for p, q in KRAKEN_DOC_ASKS])
    assert kraken_checksum(book) != KRAKEN_DOC_CHECKSUM
    assert kraken_checksum(book, 1, 8) == KRAKEN_DOC_CHECKSUM


def test_kraken_checksum_uses_only_the_top_ten() -> None:
    book = OrderBook()
    deeper_bids = [*KRAKEN_DOC_BIDS, ("45200.0", "9.00000000")]
    deeper_asks = [("45400.0", "9.00000000"), *KRAKEN_DOC_ASKS]
    book.load([Level(*lv) for lv in deeper_bids], [Level(*lv) for lv in deeper_asks])
    assert kraken_checksum(book) == KRAKEN_DOC_CHECKSUM


# OKX's order book checksum section: the two example books, their check strings, and the
# values OKX published with them (signed 32-bit).
OKX_DOC_1 = ([("3366.1", "7"), ("3366", "6")], [("3366.8", "9"), ("3368", "8")])
OKX_DOC_1_STRING = "3366.1:7:3366.8:9:3366:6:3368:8"
OKX_DOC_1_CHECKSUM = -1881014294
OKX_DOC_2 = ([("3366.1", "7")], [("3366.8", "9"), ("3368", "8"), ("3372", "8")])
OKX_DOC_2_STRING = "3366.1:7:3366.8:9:3368:8:3372:8"
OKX_DOC_2_CHECKSUM = 831078360


def test_okx_doc_examples() -> None:
    for (bids, asks), text, value in (
        (OKX_DOC_1, OKX_DOC_1_STRING, OKX_DOC_1_CHECKSUM),
        (OKX_DOC_2, OKX_DOC_2_STRING, OKX_DOC_2_CHECKSUM),
    ):
        assert okx_checksum_string(bids, asks) == text
        book = OrderBook()
        book.load([Level(*lv) for lv in bids], [Level(*lv) for lv in asks])
        assert okx_checksum(book) == value


def test_okx_doc_example_through_the_sync() -> None:
    bids, asks = OKX_DOC_1
    normalizer = make_normalizer("okx")
    (snap,) = normalizer.normalize(okx_book("snapshot", 10, -1, bids, asks, OKX_DOC_1_CHECKSUM), 1)
    sync = make_sync("okx", "BTC-USDT")
    assert sync.on_event(snap).action is Action.APPLIED
    # Turning doc book 1 into doc book 2 by an update: remove 3366, add 3372.
    raw = okx_book("update", 11, 10, [("3366", "0")], [("3372", "8")], OKX_DOC_2_CHECKSUM)
    (delta,) = normalizer.normalize(raw, 2)
    assert isinstance(delta, BookDelta)
    assert sync.on_event(delta).action is Action.APPLIED
    raw = okx_book("update", 12, 11, [("3366.1", "8")], [], OKX_DOC_2_CHECKSUM)
    (delta,) = normalizer.normalize(raw, 3)
    outcome = sync.on_event(delta)
    assert outcome.action is Action.RESYNC
    assert outcome.reason is Reason.CHECKSUM


def test_okx_checksum_keeps_the_texts_as_sent() -> None:
    a, b = OrderBook(), OrderBook()
    a.load([Level("1.10", "2")], [])
    b.load([Level("1.1", "2")], [])
    assert okx_checksum(a) != okx_checksum(b)


def test_okx_checksum_takes_25_levels() -> None:
    book = OrderBook()
    book.load(
        [Level(str(1000 - i), "1") for i in range(30)],
        [Level(str(1001 + i), "1") for i in range(30)],
    )
    parts = []
    for i in range(25):
        parts += [f"{1000 - i}:1", f"{1001 + i}:1"]
    crc = zlib.crc32(":".join(parts).encode())
    assert okx_checksum(book) == (crc - 2**32 if crc >= 2**31 else crc)
